"""apptainer: a `.sif` file on the shared filesystem, run in the job's own step with the host's IPC and network."""

from __future__ import annotations

from pathlib import Path
from typing import IO, Any, Dict, List, Sequence

from specrepro.util import patching
from specrepro.util.fileio import locked
from specrepro.util.procs import run_logged
from specrepro.runtimes import register
from specrepro.runtimes.base import (GpuIndex, ImageError, Invocation, PatchedBuild, Runtime, env_flags, safe_name,
                                     secret_specs)

APPTAINER_DEF = """\
Bootstrap: localimage
From: {base_from}

%files
    {ctx}/patching.py /specrepro/util/patching.py
    {ctx}/patches /specrepro/patches

%post
    python3 /specrepro/util/patching.py apply --tree {sglang_root} --layout repository \\
        --series /specrepro/patches/series --record /specrepro/applied.json

%labels
    org.specrepro.content-hash {content_hash}
    org.specrepro.base-digest {base_id}
"""


@register
class Apptainer(Runtime):
    name = "apptainer"
    refused_run_args = ((("--ipc=host",), "apptainer has no --ipc; its containers share the host's IPC namespace"),)

    def wrap(self, inv: Invocation) -> List[str]:
        accelerator = self.plat["accelerator"]
        gpu = ["--rocm"] if accelerator == "rocm" else ["--nv"] if accelerator == "cuda" else []
        # --cleanenv: only what is named here (secrets through APPTAINERENV_*) reaches the container.
        return [*self.command(), "exec", "--cleanenv", *(gpu if inv.own_container else []),
                "--bind", ",".join(m.spec() for m in inv.mounts), *env_flags("--env", inv.env), inv.image, *inv.inner]

    def gpu_env(self, gpus: Sequence[GpuIndex], gpu_source: str) -> Dict[str, str]:
        # apptainer runs in the job's own step: its GPUs are named to the runtime
        if not gpus:
            return {}
        name = "ROCR_VISIBLE_DEVICES" if self.plat["accelerator"] == "rocm" else "CUDA_VISIBLE_DEVICES"
        return {name: ",".join(map(str, gpus))}

    def process_env(self, env: Dict[str, str], launch_env: Dict[str, str]) -> Dict[str, str]:
        # --cleanenv keeps the caller's secrets out; APPTAINERENV_<NAME> hands each one in, off the command line
        for secret, _var in secret_specs(self.plat):
            if secret in env:
                env[f"APPTAINERENV_{secret}"] = env[secret]
        return env

    def resolve_base(self, ref: str, cache: Path, log: IO) -> Dict[str, Any]:
        sif = cache / f"base-{safe_name(ref)}.sif"
        with locked(cache / f".{sif.name}.lock"):
            if not sif.is_file():
                if run_logged([*self.command(), "build", str(sif), f"docker://{ref}"], log) != 0:
                    raise ImageError(f"apptainer build of {ref} failed; see the log")
        return dict(ref=ref, kind="container", image=str(sif), image_id="sha256:" + patching.sha256_file(sif),
                    pinned=str(sif))

    def build_patched(self, job: PatchedBuild, log: IO) -> Dict[str, Any]:
        sif = job.cache / f"{job.name}.sif"
        built = False
        with locked(job.cache / f".{sif.name}.lock"):
            if not sif.is_file():
                definition = job.context / "apptainer.def"
                definition.write_text(APPTAINER_DEF.format(ctx=job.context, base_from=job.base_from,
                                                           base_id=job.base["image_id"],
                                                           content_hash=job.content_hash,
                                                           sglang_root=job.sglang_root))
                partial = sif.with_name(sif.name + ".partial")
                if run_logged([*self.command(), "build", "--force", str(partial), str(definition)], log) != 0:
                    raise ImageError(f"arm {job.arm}: apptainer build failed (the patch must apply inside the image); "
                                     f"see the log")
                partial.replace(sif)
                built = True
        return dict(kind="container", image=str(sif), image_id="sha256:" + patching.sha256_file(sif), built=built,
                    content_hash=job.content_hash)
