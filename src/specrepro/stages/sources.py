"""Obtain the pinned sglang source, and patches given by URL.

A git clone of the pinned ref where the repository is reachable (users'
clusters), else the package registry's release of the pinned version: the
release wheel holds sglang's full Python source in the installed layout.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import IO, Any, Dict, List, Optional

from specrepro.util.errors import SpecreproError
from specrepro.util.fileio import locked, write_json
from specrepro.util.patching import apply_series, detect_layout, sha256_file
from specrepro.util.procs import run_logged
from specrepro.core.series import load_series, resolve_patches


class SourceError(SpecreproError, RuntimeError):
    pass


def registry_archive(version: str, cache_dir: Path, log: IO) -> Path:
    """The release archive of sglang==version, downloaded once into the cache."""
    dist = cache_dir / "sglang" / version / "dist"
    with locked(cache_dir / "sglang" / version / ".lock"):
        found = sorted(dist.glob(f"sglang-{version}-*.whl")) + sorted(dist.glob(f"sglang-{version}.tar.gz"))
        if found:
            return found[0]
        partial = dist.with_name("dist.partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
               "-d", str(partial), f"sglang=={version}"]
        code = run_logged(cmd, log)
        if code != 0:
            raise SourceError(f"pip download sglang=={version} failed (exit {code}); see the log")
        shutil.rmtree(dist, ignore_errors=True)
        partial.rename(dist)
        found = sorted(dist.glob("sglang-*"))
        if not found:
            raise SourceError(f"pip download sglang=={version} produced no archive in {dist}")
        return found[0]


def unpack_archive(archive: Path, tree: Path) -> None:
    if archive.suffix != ".whl":
        raise SourceError(f"{archive}: only wheels are unpacked (the release's wheel holds the full source)")
    with zipfile.ZipFile(archive) as zf:
        members = [m for m in zf.namelist() if m.startswith("sglang/")]
        zf.extractall(tree, members)


def git_checkout(url: str, ref: str, tree: Path, log: IO) -> str:
    tree.mkdir(parents=True)
    for cmd in (["git", "init", "-q"], ["git", "fetch", "-q", "--depth", "1", url, ref], ["git", "checkout", "-q", "FETCH_HEAD"]):
        code = run_logged(cmd, log, cwd=tree, timeout=1800)
        if code != 0:
            raise SourceError(f"{' '.join(cmd)} failed (exit {code})")
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=tree, capture_output=True, text=True).stdout.strip()


def git_reachable(url: str) -> bool:
    try:
        proc = subprocess.run(["git", "ls-remote", "--exit-code", url, "HEAD"], capture_output=True, timeout=30)
    except (subprocess.TimeoutExpired, FileNotFoundError):
        return False
    return proc.returncode == 0


def obtain_sglang(sglang: Dict[str, Any], ref: str, tree: Path, cache_dir: Path, log: IO) -> Dict[str, Any]:
    """Put sglang at `ref` into `tree` (must not exist); return the manifest."""
    method = sglang["source"]
    if method == "auto":
        method = "git" if git_reachable(sglang["git_url"]) else "registry"
        print(f"source: {sglang['git_url']} {'reachable' if method == 'git' else 'unreachable'}; using {method}", file=log)
    if tree.exists():
        shutil.rmtree(tree)
    manifest: Dict[str, Any] = {"method": method, "ref": ref, "version": sglang["version"]}
    if method == "git":
        manifest["commit"] = git_checkout(sglang["git_url"], ref, tree, log)
        manifest["url"] = sglang["git_url"]
    else:
        if ref != sglang["git_ref"]:
            raise SourceError(
                f"sglang ref {ref!r} differs from the pinned release {sglang['git_ref']!r}: "
                "the registry only has releases; set sglang.source=git on a host that reaches the repository"
            )
        archive = registry_archive(sglang["version"], cache_dir, log)
        unpack_archive(archive, tree)
        manifest.update(archive=archive.name, archive_sha256=sha256_file(archive), commit=None)
    manifest["layout"] = detect_layout(tree)
    manifest["package_dir"] = "python/sglang" if manifest["layout"] == "repository" else "sglang"
    found = _version_in_tree(tree / manifest["package_dir"])
    if found and found != sglang["version"]:
        raise SourceError(f"{tree}: holds sglang {found}, config pins {sglang['version']}")
    manifest["version_in_tree"] = found
    return manifest


def _version_in_tree(pkg: Path) -> Optional[str]:
    """The version string literal setuptools-scm wrote (releases); None in a bare checkout."""
    for name in ("_version.py", "version.py"):
        path = pkg / name
        if path.is_file():
            m = re.search(r"^(?:__version__|version)\s*(?::\s*str)?\s*=\s*(?:version\s*=\s*)?['\"]([^'\"]+)['\"]",
                          path.read_text(), re.M)
            if m:
                return m.group(1)
    return None


def cached_release_tree(version: str, cache_dir: Path, log: IO) -> Path:
    """An unpacked release in the cache (the CPU checks' reference version)."""
    tree = cache_dir / "sglang" / version / "tree"
    with locked(cache_dir / "sglang" / version / ".tree.lock"):
        if not (tree / ".complete").is_file():
            shutil.rmtree(tree, ignore_errors=True)
            unpack_archive(registry_archive(version, cache_dir, log), tree)
            (tree / ".complete").write_text(version)
    return tree


def patch_stage(source_manifest: Path, source_tree: Path, series_dir: Path, series: str, cache_dir: Path, tree: Path,
                manifest: Path, log: IO) -> Dict[str, Any]:
    """The patch stage: a copy of the pristine tree with the series applied (all or nothing), and its manifest."""

    source = json.loads(Path(source_manifest).read_text())
    patches = resolve_patches(load_series(series_dir), cache_dir, log)
    # Patch a copy: the pristine source stays for the unpatched arms and checks.
    if tree.exists():
        shutil.rmtree(tree)
    shutil.copytree(source_tree, tree, symlinks=True)
    record = apply_series(tree, patches, source["layout"])
    record.update(source=source, series=series, series_dir=str(series_dir),
                  patch_paths={p.name: str(p) for p in patches})
    print(json.dumps(record, indent=1), file=log)
    write_json(manifest, record)
    return record
