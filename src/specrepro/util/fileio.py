"""Writing results so that a reader never sees half a file, and locks for shared caches."""

from __future__ import annotations

import fcntl
import os
import threading
import json
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def write_text_atomic(path: Path, text: str) -> None:
    """Write next to `path`, then rename: a crash leaves the old file or none, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # one name per writer: two processes writing the same path must not share a half-written file
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def write_json(path: Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=1, sort_keys=True, default=str))


@contextmanager
def locked(path: Path):
    """An exclusive lock on `path` (two campaigns or jobs sharing one cache or node)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
