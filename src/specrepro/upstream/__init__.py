"""sglang as pinned: the server flags its release accepts (read from its own source; the flags specrepro owns in one table) and the venv that runs its code on this host.  Imports util only."""
