"""podman: daemonless (rootless or rootful), each launch a named container; NVIDIA GPUs through CDI."""

from __future__ import annotations

import os
from typing import List, Sequence

from specrepro.runtimes import register
from specrepro.runtimes.base import GpuIndex
from specrepro.runtimes.oci import OciRuntime


@register
class Podman(OciRuntime):
    name = "podman"
    missing_mount_source = "refuses them"
    refused_run_args = (
        (("--ipc=host", "--shm-size"),
         "podman refuses --shm-size in the host's IPC namespace (\"cannot set shmsize when running in the host IPC "
         "Namespace\"); with --ipc=host the container uses the host's /dev/shm: drop --shm-size"),
    )

    def version_argv(self, rt: List[str]) -> List[str]:
        # `info` opens its storage: a broken store fails here, not at the first run
        return [*rt, "info", "--format", "{{.Version.Version}}"]

    def endpoint(self) -> str:
        if os.environ.get("CONTAINER_HOST"):
            return f"CONTAINER_HOST={os.environ['CONTAINER_HOST']}"
        return "this host's podman storage"

    def unreachable_hint(self) -> str:
        return "check `podman info` on this host"

    def nvidia_gpu_args(self, gpus: Sequence[GpuIndex]) -> List[str]:
        return [f"--device=nvidia.com/gpu={g}" for g in gpus]

    def remove_argv(self, rt: List[str], name: str) -> List[str]:
        # --ignore: the container may be gone already (--rm), which podman otherwise reports as an error
        return [*rt, "rm", "-f", "--ignore", name]
