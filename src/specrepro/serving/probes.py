"""Run a program where the arm's server runs: in its image (with its devices, user and mounts) or its venv.

Preflight's image probe, sglang's argument resolution, the GPU facts and the GPU checks all run this way, with the
measuring job's one launch context: a container of the same image, devices and group as the server, named after
it with the probe's name, the program's folder mounted read-only at /opt/specrepro/<name>.  On a platform without a
container the program runs here with the given Python.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from specrepro.serving.launch import LaunchContext, Launcher, Mount

INSIDE = "/opt/specrepro"


def probe_argv(launcher: Launcher, ctx: LaunchContext, python: str, program: Path, args: Sequence[str], name: str,
               folder: Optional[Path] = None, extra_mounts: Sequence[Mount] = (),
               extra_env: Optional[Dict[str, str]] = None) -> List[str]:
    """The command that runs `python program args` where the arm's server runs; in a container the program's
    `folder` (default: its own) is mounted read-only, so it may import its neighbours."""
    if launcher.runtime == "none":
        return [python, str(program), *args]
    folder = Path(folder or program.parent)
    inside = f"{INSIDE}/{name}"
    launcher.prepare(ctx)
    return launcher.wrap(ctx, [python, f"{inside}/{program.relative_to(folder).as_posix()}", *args], server=True,
                         extra_mounts=[Mount(str(folder), inside, True), *extra_mounts],
                         name_suffix=f"-{name}", extra_env=extra_env)


def run_probe(launcher: Launcher, ctx: LaunchContext, argv: List[str], timeout_s: float,
              env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
    """Run a probe's command with the environment the launch's runtime (or bare process) gets."""
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s,
                          env=launcher.process_env(ctx, env))
