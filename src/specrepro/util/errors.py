"""The errors a user acts on: each message names the file, key, flag or check to fix, so it reads without a traceback.

A stage that fails with one prints that message and stops (its log keeps the traceback); any other exception is a
bug and keeps its traceback on the console.
"""

from __future__ import annotations


class SpecreproError(Exception):
    """An error whose message says what to fix (a config key, a file, a flag, a failed check)."""


def hydra_message(exc: Exception) -> str:
    """Hydra's message with its causes: "Error merging override" alone never says why."""
    parts, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        # OmegaConf appends full_key/reference_type/object_type lines; the key is named once, first.
        text = "\n".join(line for line in str(exc).strip().splitlines()
                         if not line.strip().startswith(("full_key:", "reference_type=", "object_type="))).strip()
        if "$VALUE" in text or "$KEY" in text:
            text = ""
        key = getattr(exc, "full_key", None)
        if key and key not in text:
            text = f"{key}: {text}"
        if text and not any(text in p for p in parts):
            parts.append(text)
        exc = exc.__cause__ or exc.__context__
    return " -- because: ".join(parts)
