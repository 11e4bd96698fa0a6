"""pyxis: Slurm's `srun --container-image` (pyxis + enroot), a `.sqsh` file on the shared filesystem."""

from __future__ import annotations

from pathlib import Path
from typing import IO, Any, Dict, List

from specrepro.util import patching
from specrepro.util.fileio import locked
from specrepro.util.procs import run_logged
from specrepro.runtimes import register
from specrepro.runtimes.base import ImageError, Invocation, PatchedBuild, Runtime, safe_name


@register
class Pyxis(Runtime):
    name = "pyxis"
    default_command = ("srun",)

    def wrap(self, inv: Invocation) -> List[str]:
        # srun splits --export on commas (a value like a,b would arrive as "a"): the values go into srun's own
        # environment, whole, through env(1), and --export=ALL hands that environment to the step.
        argv = ["env", *(f"{k}={v}" for k, v in sorted(inv.env.items())), *self.command(), "--ntasks=1", "--overlap",
                f"--container-image={inv.image}", f"--container-name={inv.name}",
                "--container-mounts=" + ",".join(m.spec() for m in inv.mounts), "--no-container-entrypoint",
                "--container-workdir=/", "--export=ALL"]
        # a nested step asks Slurm for its own GPUs, which Slurm binds and numbers from 0 under ConstrainDevices
        if inv.own_container and inv.gpus:
            argv.append(f"--gres=gpu:{len(inv.gpus)}")
        return argv + inv.inner

    def resolve_base(self, ref: str, cache: Path, log: IO) -> Dict[str, Any]:
        sqsh = cache / f"base-{safe_name(ref)}.sqsh"
        with locked(cache / f".{sqsh.name}.lock"):
            if not sqsh.is_file():
                if run_logged(["enroot", "import", "-o", str(sqsh), f"docker://{ref}"], log) != 0:
                    raise ImageError(f"enroot import of {ref} failed; see the log")
        return dict(ref=ref, kind="container", image=str(sqsh), image_id="sha256:" + patching.sha256_file(sqsh),
                    pinned=str(sqsh))

    def build_patched(self, job: PatchedBuild, log: IO) -> Dict[str, Any]:
        sqsh = job.cache / f"{job.name}.sqsh"
        built = False
        with locked(job.cache / f".{sqsh.name}.lock"):
            if not sqsh.is_file():
                build_enroot_image(Path(job.base_from), job.context, sqsh, job.sglang_root,
                                   f"specrepro-{job.content_hash}", log)
                built = True
        return dict(kind="container", image=str(sqsh), image_id="sha256:" + patching.sha256_file(sqsh), built=built,
                    content_hash=job.content_hash)


def build_enroot_image(base_sqsh: Path, ctx: Path, output: Path, sglang_root: str, name: str, log: IO) -> None:
    """A patched squashfs for pyxis: create from the base, apply inside, export."""
    steps = [
        ["enroot", "create", "--force", "--name", name, str(base_sqsh)],
        ["enroot", "start", "--root", "--rw", "--mount", f"{ctx}:/specrepro", name, "python3",
         "/specrepro/util/patching.py", "apply", "--tree", sglang_root, "--layout", "repository",
         "--series", "/specrepro/patches/series", "--record", "/specrepro-applied.json"],
        ["enroot", "export", "--force", "--output", str(output.with_name(output.name + ".partial")), name],
    ]
    try:
        for cmd in steps:
            if run_logged(cmd, log) != 0:
                raise ImageError(f"`{' '.join(cmd[:3])} ...` failed (the patch must apply inside the image); see the log")
        output.with_name(output.name + ".partial").replace(output)
    finally:
        run_logged(["enroot", "remove", "--force", name], log)
