"""sglang as pinned: patches applied to its tree all or nothing, the server flags its release accepts (read from its own source) and the venv that runs its code on this host.  Imports util only."""
