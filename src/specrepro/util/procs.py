"""Subprocesses whose output goes to a stage's log."""

from __future__ import annotations

import shlex
import subprocess
from typing import IO, List

from specrepro.util.redaction import redact


def run_logged(cmd: List[str], log: IO, **kwargs) -> int:
    """Run `cmd`, its output appended to `log` (a file, or any text stream); the exit code."""
    print("$ " + redact(shlex.join(cmd)), file=log, flush=True)
    try:
        log.fileno()
    except (AttributeError, OSError, ValueError):
        proc = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
        log.write(redact(proc.stdout + proc.stderr))
        return proc.returncode
    return subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, **kwargs).returncode
