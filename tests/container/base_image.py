"""The test base image, standing in for sglang's published image (tests only).

A Debian root filesystem (mmdebstrap: python3, GNU patch), sglang 0.5.20's
real source from the package registry at the image's sglang root
(/sgl-workspace/sglang/python/sglang, the repository layout the real image
has), and the stand-in server.  Built once per content (the Debian package
list, the sglang wheel, the stand-in, this file) and cached: the root
filesystem under cache_dir, the image in the given node store.

    python base_image.py CACHE_DIR  -> prints the image reference
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


def build(cache_dir: Path) -> str:
    sys.path.insert(0, str(ROOT / "src"))
    from specrepro.sources import registry_archive

    wheel = registry_archive("0.5.20", cache_dir, sys.stderr)
    key = content_key(wheel)
    ref = f"localhost/specrepro-test/sglang-base:{key}"
    if subprocess.run([PODMAN, "image", "exists", ref]).returncode == 0:
        return ref
    work = cache_dir / "test-images" / key
    rootfs = work / "rootfs.tar"
    if not rootfs.is_file():
        work.mkdir(parents=True, exist_ok=True)
        partial = work / "rootfs.partial.tar"
        print(f"test base image: mmdebstrap {PACKAGES} (about 30 s)", file=sys.stderr, flush=True)
        subprocess.run(["mmdebstrap", "--quiet", "--variant=essential", f"--include={PACKAGES}", "bookworm",
                        str(partial)], check=True)
        with tarfile.open(partial, "a") as tar:
            _add_tree_from_wheel(tar, wheel, "sgl-workspace/sglang/python")
            tar.add(ROOT / "tests" / "standin" / "sglang_standin.py", "opt/specrepro-standin/sglang_standin.py")
            # the stand-in's flag -> ServerArgs field table, beside it (it reads it there first)
            tar.add(FLAG_TABLE, "opt/specrepro-standin/flag_table.json")
        partial.replace(rootfs)
    subprocess.run([PODMAN, "import", "--quiet", str(rootfs), ref], check=True, stdout=subprocess.DEVNULL)
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
    print(build(Path(sys.argv[1])))
