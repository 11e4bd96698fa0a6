"""The errors a user acts on: each message names the file, key, flag or check to fix, so it reads without a traceback.

A stage that fails with one prints that message and stops (its log keeps the traceback); any other exception is a
bug and keeps its traceback on the console.
"""

from __future__ import annotations


class SpecreproError(Exception):
    """An error whose message says what to fix (a config key, a file, a flag, a failed check)."""
