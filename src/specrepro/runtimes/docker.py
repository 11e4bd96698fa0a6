"""docker: a daemon (shared by every user of the node) runs each launch as a named container."""

from __future__ import annotations

import os
from typing import List, Sequence

from specrepro.runtimes import register
from specrepro.runtimes.base import GpuIndex
from specrepro.runtimes.oci import OciRuntime


@register
class Docker(OciRuntime):
    name = "docker"
    missing_mount_source = "would create each as an empty root-owned folder"
    refused_run_args = (
        # seen with docker 20.10 (Debian's docker.io): the pair starts, /dev/shm is the host's, the size is dropped
        # unsaid
        (("--ipc=host", "--shm-size"),
         "docker accepts --shm-size in the host's IPC namespace and ignores it without a word: the container gets the "
         "host's /dev/shm whatever size you asked for; drop --shm-size (or --ipc=host, to have a /dev/shm of that "
         "size)"),
    )

    def version_argv(self, rt: List[str]) -> List[str]:
        # the daemon's version: the client alone answers without one
        return [*rt, "version", "--format", "{{.Server.Version}}"]

    def endpoint(self) -> str:
        if os.environ.get("DOCKER_HOST"):
            return f"DOCKER_HOST={os.environ['DOCKER_HOST']}"
        if os.environ.get("DOCKER_CONTEXT"):
            return f"DOCKER_CONTEXT={os.environ['DOCKER_CONTEXT']}"
        return "unix:///var/run/docker.sock (DOCKER_HOST is not set)"

    def unreachable_hint(self) -> str:
        return ("start this node's docker daemon, or point DOCKER_HOST at it (e.g. unix:///var/run/docker.sock); "
                "your user must be allowed to use its socket")

    def nvidia_gpu_args(self, gpus: Sequence[GpuIndex]) -> List[str]:
        # the NVIDIA container toolkit's device request; the quotes are part of docker's own syntax
        return ["--gpus", f'"device={",".join(map(str, gpus))}"']
