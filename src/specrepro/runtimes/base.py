"""What every runtime is asked, with the answer of a runtime that has nothing to say (no containers, no engine)."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, ClassVar, Dict, List, Optional, Sequence, Tuple, Union

from specrepro.util.errors import SpecreproError

GpuIndex = Union[int, str]
# The labels of every container a launch starts: campaign, arm, launch and owner (the caller's uid).
LABEL_PREFIX = "org.specrepro"
# Where a server that takes its secrets as files finds them (read-only files, one per name).
SECRETS_INSIDE = "/run/specrepro/secrets"
# The variable through which a secret's reader takes a file instead of the value: huggingface_hub reads the token
# from the file HF_TOKEN_PATH names.  Others: `platform.passthrough_env: [NAME:PATH_VARIABLE]`.
SECRET_FILE_VARS = {"HF_TOKEN": "HF_TOKEN_PATH"}


class LaunchError(SpecreproError, RuntimeError):
    """A launch that cannot be built (GPUs not granted, bad mount); the message says what to set."""


class RuntimeUnreachable(LaunchError):
    """The container runtime does not answer on this host (no docker daemon at DOCKER_HOST, no podman)."""


class ImageError(SpecreproError, RuntimeError):
    pass


class UnknownRuntime(SpecreproError, ValueError):
    """`platform.container_runtime` names no registered runtime."""


@dataclass(frozen=True)
class Mount:
    host: str
    container: str
    read_only: bool

    def spec(self) -> str:
        return f"{self.host}:{self.container}" + (":ro" if self.read_only else "")


@dataclass
class Invocation:
    """One program of a launch, in the plain values a runtime wraps it with."""

    inner: List[str]
    image: str
    # the container's name: the server's, or the server's with a probe's suffix
    name: str
    user: str
    env: Dict[str, str]
    mounts: List[Mount]
    labels: Dict[str, str]
    gpus: List[GpuIndex]
    # `host[:container]` device files of the granted GPUs (ROCm), and the group that owns them
    device_files: List[str] = field(default_factory=list)
    device_gid: Union[int, str, None] = None
    # its own container (the server, a probe beside it); False: a client run inside the server's container
    own_container: bool = True
    # the launch's private folder of secret files on the node; handed over to the server's own container only
    secrets_dir: str = ""
    with_secrets: bool = False


def secret_specs(plat: Dict[str, Any]) -> List[Tuple[str, Optional[str]]]:
    """`platform.passthrough_env` as (name, variable that names its file inside the container, or None)."""
    out = []
    for entry in plat.get("passthrough_env") or []:
        name, _, var = str(entry).partition(":")
        out.append((name, var or SECRET_FILE_VARS.get(name)))
    return out


def secrets_root() -> Path:
    """A node-local folder only the caller reads, in memory where the node has one (never the shared filesystem)."""
    for candidate in (os.environ.get("XDG_RUNTIME_DIR"), "/dev/shm", tempfile.gettempdir()):
        if candidate and os.path.isdir(candidate) and os.access(candidate, os.W_OK | os.X_OK):
            return Path(candidate) / f"specrepro-secrets-{os.getuid()}"
    return Path(tempfile.gettempdir()) / f"specrepro-secrets-{os.getuid()}"


def env_flags(flag: str, env: Dict[str, str]) -> List[str]:
    out: List[str] = []
    for k, v in sorted(env.items()):
        out += [flag, f"{k}={v}"]
    return out


def image_file_on_node(record: Dict[str, Any]) -> Dict[str, Any]:
    """A runtime whose images are files on the shared filesystem: every node reads the one the build host made."""
    path = Path(record["image"])
    if not path.is_file():
        raise ImageError(f"image file {path} is not readable on this node (cache_dir must be on the shared filesystem)")
    return record


class Runtime:
    """How the platform runs a program on the node.  Bound to one platform's settings (`self.plat`)."""

    # the value of platform.container_runtime
    name: ClassVar[str] = ""
    # the command when platform.runtime_command is unset; None: the runtime's own name
    default_command: ClassVar[Optional[Sequence[str]]] = None
    # a bare process on the node: no image, no container; the arm's own sglang tree and Python
    is_bare: ClassVar[bool] = False
    # (flags present together in platform.runtime_run_args, why this runtime refuses them); checked before any job
    refused_run_args: ClassVar[Sequence[Tuple[Tuple[str, ...], str]]] = ()

    def __init__(self, plat: Dict[str, Any]):
        self.plat = plat

    def __repr__(self) -> str:
        return f"<runtime {self.name}>"

    def command(self) -> List[str]:
        """How to call the runtime: platform.runtime_command (a path, or with global options), or its default."""
        return list(self.plat.get("runtime_command") or self.default_command or [self.name])

    # --- config -------------------------------------------------------------------
    def config_problems(self) -> List[str]:
        """What this runtime refuses in the platform's settings, each naming its key."""
        args = [str(a) for a in self.plat.get("runtime_run_args") or []]
        # `--ipc host` as two list items is the same flag as `--ipc=host`
        args = [f"{a}={b}" if a.startswith("--") and "=" not in a and b and not b.startswith("-") else a
                for a, b in zip(args, args[1:] + [""])]
        problems = []
        for flags, why in self.refused_run_args:
            if all(any(a == f or a.startswith(f + "=") or a.startswith(f + " ") for a in args) for f in flags):
                problems.append(f"platform.runtime_run_args: {' with '.join(flags)} on {self.name}: {why}")
        return problems

    # --- launch -------------------------------------------------------------------
    def wrap(self, inv: Invocation) -> List[str]:
        """The argv that runs `inv.inner` under this runtime."""
        raise NotImplementedError(f"runtime {self.name}: no launcher")

    def gpu_env(self, gpus: Sequence[GpuIndex], gpu_source: str) -> Dict[str, str]:
        """Variables that show the server process its granted GPUs (none: the runtime maps devices itself)."""
        return {}

    def process_env(self, env: Dict[str, str], launch_env: Dict[str, str]) -> Dict[str, str]:
        """The environment of the process specrepro starts (the runtime's CLI), from the caller's `env`;
        `launch_env` is what the program inside gets (Launcher.env)."""
        return env

    def stop_argv(self, name: str, grace_s: float) -> List[List[str]]:
        """Commands that stop and remove a launch's container (none: it ends with the process specrepro started)."""
        return []

    def refuse_missing_mounts(self, missing: Callable[[], List[str]]) -> None:
        """Raise LaunchError when the runtime would mishandle mount sources absent from the node (`missing()` lists
        them; called only by a runtime that cares, as listing them reads the platform's mounts)."""

    # --- secrets ------------------------------------------------------------------
    def secret_mounts(self, secrets_dir: str) -> Tuple[List[Mount], Dict[str, str]]:
        """Secret files mounted into the server and the variables naming them (none: handed over another way)."""
        return [], {}

    def write_secrets(self, secrets_dir: str, user: str, environ: Dict[str, str]) -> None:
        """Put a launch's secrets where its server reads them (nothing to write: the environment carries them)."""

    @staticmethod
    def remove_secrets(secrets_dir: str) -> None:
        if secrets_dir and not secrets_dir.startswith("$"):
            shutil.rmtree(secrets_dir, ignore_errors=True)

    # --- engine and node ------------------------------------------------------------
    def check_reachable(self) -> str:
        """The engine's version, or RuntimeUnreachable naming where it looked ("": nothing to ask)."""
        return ""

    def remove_stale_containers(self, scope: str, owner: str, log: IO) -> Tuple[bool, str]:
        """Remove the owner's containers a killed job left (labels matching `scope`): (ok, what was done)."""
        return True, f"{self.name}: no long-lived containers to look for"

    # --- images -------------------------------------------------------------------
    def resolve_base(self, ref: str, cache: Path, log: IO) -> Dict[str, Any]:
        """The base image `ref` made what every arm runs: the base record's fields."""
        raise NotImplementedError(f"runtime {self.name}: no base image")

    def build_from(self, base: Dict[str, Any]) -> str:
        """What a patched image's build names its base by."""
        return base["pinned"]

    def build_patched(self, job: "PatchedBuild", log: IO) -> Dict[str, Any]:
        """The base with the build context's patches applied: the image record's fields."""
        raise NotImplementedError(f"runtime {self.name}: no image build")

    def ensure_image(self, record: Dict[str, Any], log: IO) -> Dict[str, Any]:
        """Make the recorded image present on this node; the record to run."""
        return image_file_on_node(record)


@dataclass
class PatchedBuild:
    """One arm's patched image: what the image stage hands a runtime to build."""

    arm: str
    # sglang-<version>-<series>-<content hash>: the image's name in the cache
    name: str
    context: Path
    base: Dict[str, Any]
    base_from: str
    content_hash: str
    cache: Path
    sglang_root: str


def safe_name(name: str) -> str:
    """`name` as one file name (an image reference or ID in a cache file's name)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)
