"""`none`: a bare process on the node, the platform's Python (or a venv the pipeline builds) with the arm's tree."""

from __future__ import annotations

from pathlib import Path
from typing import IO, Any, Dict, List, Sequence

from specrepro.runtimes import register
from specrepro.runtimes.base import GpuIndex, Invocation, Runtime


@register
class Bare(Runtime):
    name = "none"
    is_bare = True

    def wrap(self, inv: Invocation) -> List[str]:
        return inv.inner

    def gpu_env(self, gpus: Sequence[GpuIndex], gpu_source: str) -> Dict[str, str]:
        # A bare server on one host without a scheduler (serve.gpus, or the node's own table) sees the GPUs it was
        # given and no other: CUDA in PCI order (its own default is fastest first), which is the node's table's order
        # (node_facts); ROCr in KFD order.  A scheduler's grant comes with its own variable, inherited as it is.
        if not gpus or gpu_source not in ("serve.gpus", "node"):
            return {}
        if self.plat["accelerator"] == "rocm":
            return {"ROCR_VISIBLE_DEVICES": ",".join(map(str, gpus))}
        if self.plat["accelerator"] == "cuda":
            return {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus))}
        return {}

    def process_env(self, env: Dict[str, str], launch_env: Dict[str, str]) -> Dict[str, str]:
        env.update(launch_env)
        # The arm's sglang tree is the pipeline's own copy: its ~900 server modules are compiled into it by the first
        # process that imports them, not again by every server process and client of every launch (about 5 s of each
        # start on a CPU); Snakemake dates a tree by its .snakemake_timestamp, not its files.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        return env

    def resolve_base(self, ref: str, cache: Path, log: IO) -> Dict[str, Any]:
        # no image: the arm's own sglang tree is what runs (the image stage's tree record)
        return {"kind": "none"}

    def ensure_image(self, record: Dict[str, Any], log: IO) -> Dict[str, Any]:
        return record
