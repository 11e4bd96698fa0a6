"""The venv that runs sglang's own code on this host: the CPU checks and the `cpu` platform's server.

One venv per requirements file (a complete freeze, installed with --no-deps,
so no resolver run and no surprise upgrades), cached under
cache_dir/envs/<file stem>-<key> with the key a hash of the file and the
Python version.  sglang itself is never installed into it: whoever runs
sglang puts the tree under test (pristine, patched, the upstream reference)
first on PYTHONPATH, so one venv serves every tree and every arm.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
import time
from pathlib import Path
from typing import IO, Any, Dict

from specrepro.util.errors import SpecreproError
from specrepro.util.fileio import locked
from specrepro.util.procs import run_logged

COMPLETE = ".specrepro-complete"


class EnvError(SpecreproError, RuntimeError):
    pass


def env_key(requirements: Path) -> str:
    digest = hashlib.sha256(requirements.read_bytes())
    digest.update(sys.version.split()[0].encode())
    return digest.hexdigest()[:16]


def env_dir(cache_dir: Path, requirements: Path) -> Path:
    return Path(cache_dir) / "envs" / f"{requirements.stem}-{env_key(requirements)}"


def ensure_env(cache_dir: Path, requirements: Path, log: IO) -> Dict[str, Any]:
    """Build (or reuse) the venv of `requirements`; {path, python, key, reused, seconds}."""
    venv = env_dir(cache_dir, requirements)
    start = time.monotonic()
    record = {"path": str(venv), "python": str(venv / "bin" / "python"), "key": env_key(requirements),
              "requirements": str(requirements)}
    with locked(venv.parent / f".{venv.name}.lock"):
        if (venv / COMPLETE).is_file():
            print(f"sglang env: reusing {venv}", file=log, flush=True)
            return {**record, "reused": True, "seconds": time.monotonic() - start}
        # A folder without the marker is an interrupted build: start over.
        shutil.rmtree(venv, ignore_errors=True)
        print(f"sglang env: building {venv} from {requirements} (a few minutes; pip's output follows)",
              file=log, flush=True)
        steps = [
            [sys.executable, "-m", "venv", str(venv)],
            [str(venv / "bin" / "python"), "-m", "pip", "install", "--progress-bar", "off",
             "--disable-pip-version-check", "--no-deps", "-r", str(requirements)],
        ]
        for cmd in steps:
            if run_logged(cmd, log) != 0:
                raise EnvError(f"building the sglang env from {requirements} failed at: {' '.join(cmd)} (see the log)")
        (venv / COMPLETE).write_text(record["key"])
    return {**record, "reused": False, "seconds": time.monotonic() - start}
