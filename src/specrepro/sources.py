"""Obtain the pinned sglang source, and patches given by URL.

A git clone of the pinned ref where the repository is reachable (users'
clusters), else the package registry's release of the pinned version: the
release wheel holds sglang's full Python source in the installed layout.
"""

from __future__ import annotations

import fcntl
import json
import re
import shutil
import subprocess
import sys
import urllib.request
import zipfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Dict, List, Optional

from specrepro.patching import detect_layout, read_series, sha256_file


class SourceError(RuntimeError):
    pass


def run_logged(cmd: List[str], log: IO, **kwargs) -> int:
    """Run `cmd`, its output appended to `log` (a file, or any text stream); the exit code."""
    print("$ " + " ".join(cmd), file=log, flush=True)
    try:
        log.fileno()
    except (AttributeError, OSError, ValueError):
        proc = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
        log.write(proc.stdout + proc.stderr)
        return proc.returncode
    return subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, **kwargs).returncode


@contextmanager
def locked(path: Path):
    """An exclusive lock on `path` (two campaigns sharing one cache)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


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


def resolve_patch_series(entries: List[Dict[str, Any]], project_root: Path, cache_dir: Path, log: IO) -> List[Path]:
    """Config entries -> patch files in order; URL patches fetched once and verified."""
    patches: List[Path] = []
    for entry in entries:
        if entry.get("series"):
            patches += read_series(project_root / entry["series"])
        elif entry.get("path"):
            patches.append(project_root / entry["path"])
        else:
            patches.append(fetch_url_patch(entry["url"], entry["sha256"], cache_dir, log))
    return patches


def fetch_url_patch(url: str, sha256: str, cache_dir: Path, log: IO) -> Path:
    target = cache_dir / "patches" / f"{sha256}.patch"
    if target.is_file() and sha256_file(target) == sha256:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    print(f"fetching patch {url}", file=log, flush=True)
    try:
        with urllib.request.urlopen(url, timeout=120) as resp, open(partial, "wb") as fh:
            shutil.copyfileobj(resp, fh)
    except OSError as exc:
        raise SourceError(f"patch URL {url}: {exc}") from exc
    got = sha256_file(partial)
    if got != sha256:
        partial.unlink()
        raise SourceError(f"patch URL {url}: sha256 {got} does not match the configured {sha256}")
    partial.rename(target)
    return target


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True, default=str))
    tmp.replace(path)
