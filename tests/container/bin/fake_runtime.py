#!/usr/bin/env python3
"""Tests only: `apptainer` and `srun --container-image` (pyxis) for a machine that has neither.

It reads its command line as the real tool would (the options specrepro
emits), refuses what the real tool would refuse (a missing image file or bind
source), records the argv, and runs the inner command on this host with the
environment the options give it.  It proves that what `plan` prints is what
ran and that the inner command works with those options; it is no container.
"""

import json
import os
import sys
from pathlib import Path

TOOL = Path(sys.argv[0]).name
RECORD = os.environ.get("SPECREPRO_FAKE_RUNTIME_RECORD")


def fail(msg):
    print(f"{TOOL} (fake): {msg}", file=sys.stderr)
    sys.exit(255)


def record(argv):
    if RECORD:
        with open(RECORD, "a") as fh:
            fh.write(json.dumps([TOOL, *argv]) + "\n")


def apptainer(argv):
    if argv[0] == "build":
        out = [a for a in argv[1:] if not a.startswith("--")][0]
        Path(out).write_text(f"fake image built from {argv[-1]}\n")
        return 0
    if argv[0] != "exec":
        fail(f"unsupported subcommand {argv[0]}")
    env = {"PATH": os.environ["PATH"]}
    i = 1
    while argv[i].startswith("--"):
        opt = argv[i]
        if opt in ("--bind", "--env"):
            value = argv[i + 1]
            i += 2
            if opt == "--bind":
                for spec in value.split(","):
                    if spec and not os.path.exists(spec.split(":")[0]):
                        fail(f"bind source {spec.split(':')[0]} does not exist")
            else:
                key, _, val = value.partition("=")
                env[key] = val
        else:
            i += 1
    image, inner = argv[i], argv[i + 1:]
    if not Path(image).is_file():
        fail(f"image {image} not found")
    env.update({k[len("APPTAINERENV_"):]: v for k, v in os.environ.items() if k.startswith("APPTAINERENV_")})
    os.execvpe(inner[0], inner, env)


def srun(argv):
    env = dict(os.environ)
    i = 0
    while i < len(argv) and argv[i].startswith("--"):
        opt, _, value = argv[i].partition("=")
        if opt == "--container-image" and not Path(value).is_file():
            fail(f"container image {value} not found")
        if opt == "--container-mounts":
            for spec in value.split(","):
                if spec and not os.path.exists(spec.split(":")[0]):
                    fail(f"mount source {spec.split(':')[0]} does not exist")
        if opt == "--export":
            for item in value.split(",")[1:]:
                key, _, val = item.partition("=")
                env[key] = val
        i += 1
    inner = argv[i:]
    os.execvpe(inner[0], inner, env)


def enroot(argv):
    """import -o FILE, export --output FILE: write the file; create, start, remove: recorded only."""
    for flag in ("-o", "--output"):
        if flag in argv:
            Path(argv[argv.index(flag) + 1]).write_text("fake squashfs\n")
    return 0


if __name__ == "__main__":
    record(sys.argv[1:])
    sys.exit({"apptainer": apptainer, "srun": srun, "enroot": enroot}[TOOL](sys.argv[1:]))
