"""The test base image, standing in for sglang's published image (tests only).

A Debian root filesystem (mmdebstrap: python3, GNU patch), sglang 0.5.20's
real source from the package registry at the image's sglang root
(/sgl-workspace/sglang/python/sglang, the repository layout the real image
has, importable as the image's editable install makes it), and the stand-in
server.  Built once per content (the Debian package list, the sglang wheel,
the stand-in, this file) and cached: the root filesystem under cache_dir, the
image in the given node's store.  One root filesystem for both runtimes:
podman imports it into the store $SPECREPRO_TEST_NODE_STORE names, docker
into the daemon at $DOCKER_HOST (`docker` from PATH).

    python base_image.py CACHE_DIR [podman|docker]  -> prints the image reference
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PACKAGES = "python3,patch,ca-certificates,libstdc++6,libgomp1"
PODMAN = str(HERE / "bin" / "podman")
FLAG_TABLE = ROOT / "src" / "specrepro" / "flag_tables" / "0.5.20.json"


def content_key(wheel: Path) -> str:
    digest = hashlib.sha256(PACKAGES.encode())
    for path in (wheel, ROOT / "tests" / "standin" / "sglang_standin.py", FLAG_TABLE, Path(__file__)):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def build(cache_dir: Path, runtime: str = "podman") -> str:
    sys.path.insert(0, str(ROOT / "src"))
    from specrepro.util.fileio import locked
    from specrepro.stages.sources import registry_archive

    wheel = registry_archive("0.5.20", cache_dir, sys.stderr)
    key = content_key(wheel)
    ref = f"localhost/specrepro-test/sglang-base:{key}"
    rt = PODMAN if runtime == "podman" else "docker"
    if subprocess.run([rt, "image", "inspect", ref], capture_output=True).returncode == 0:
        return ref
    work = cache_dir / "test-images" / key
    rootfs = work / "rootfs.tar"
    work.mkdir(parents=True, exist_ok=True)
    # both runtimes' tests may ask at once (tests/run_layers.py runs them on two workers): one builds, the other waits
    with locked(work / ".rootfs.lock"):
        if not rootfs.is_file():
            partial = work / "rootfs.partial.tar"
            print(f"test base image: mmdebstrap {PACKAGES} (about 30 s)", file=sys.stderr, flush=True)
            subprocess.run(["mmdebstrap", "--quiet", "--variant=essential", f"--include={PACKAGES}", "bookworm",
                            str(partial)], check=True)
            with tarfile.open(partial, "a") as tar:
                _add_tree_from_wheel(tar, wheel, "sgl-workspace/sglang/python")
                tar.add(ROOT / "tests" / "standin" / "sglang_standin.py", "opt/specrepro-standin/sglang_standin.py")
                # the stand-in's flag -> ServerArgs field table, beside it (it reads it there first)
                tar.add(FLAG_TABLE, "opt/specrepro-standin/flag_table.json")
                # what the published image's editable install does: `python3 -m sglang...` finds the tree
                pth = b"/sgl-workspace/sglang/python\n"
                info = tarfile.TarInfo("usr/lib/python3/dist-packages/sglang-editable.pth")
                info.size, info.mode = len(pth), 0o644
                tar.addfile(info, io.BytesIO(pth))
            partial.replace(rootfs)
    quiet = ["--quiet"] if runtime == "podman" else []  # docker 20.10's import has no --quiet
    subprocess.run([rt, "import", *quiet, str(rootfs), ref], check=True, stdout=subprocess.DEVNULL)
    return ref


def _add_tree_from_wheel(tar: tarfile.TarFile, wheel: Path, prefix: str) -> None:
    import zipfile

    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            if not name.startswith("sglang/") or name.endswith("/"):
                continue
            data = zf.read(name)
            info = tarfile.TarInfo(f"{prefix}/{name}")
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))


if __name__ == "__main__":
    print(build(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "podman"))
