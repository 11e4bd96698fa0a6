"""Patch series: one folder per change (patches/<series>/series.yaml, its patches and its checks).

A series folder holds everything that belongs to one change; the package reads it through this module only.
`load_series` types series.yaml against `schema.SeriesSpec` and checks that every file it names exists, so a
mistake is an error naming the file and the key.  The check protocol is in patches/README.md.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import IO, Any, Dict, List
from specrepro.util.errors import SpecreproError, hydra_message
from specrepro.core.schema import SeriesSpec
from specrepro.util.patching import sha256_file
from specrepro.util.procs import run_logged

SPEC_FILE = "series.yaml"
SHA256 = re.compile(r"[0-9a-f]{64}")


class SeriesError(SpecreproError, ValueError):
    """A series folder that cannot be used; the message names the file and the key."""


def series_folder(cfg: Dict[str, Any], name: str) -> Path:
    """The folder of series `name` (experiment.patch_series), relative paths from the project root."""
    folder = Path(cfg["experiment"]["patch_series"][name])
    return folder if folder.is_absolute() else Path(cfg["project_root"]) / folder


def load_series(folder: Path) -> Dict[str, Any]:
    """series.yaml typed and checked; plain values (enums as their names), with `folder` added."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    folder = Path(folder)
    path = folder / SPEC_FILE
    if not path.is_file():
        raise SeriesError(f"{path}: not found (a patch series is a folder with a series.yaml; see patches/README.md)")
    try:
        spec = OmegaConf.to_container(OmegaConf.merge(OmegaConf.structured(SeriesSpec), OmegaConf.load(path)),
                                      resolve=True, throw_on_missing=True, enum_to_str=True)
    except OmegaConfBaseException as exc:
        raise SeriesError(f"{path}: {hydra_message(exc)}") from exc
    problems = []
    for i, entry in enumerate(spec["patches"]):
        key = f"patches[{i}]"
        if bool(entry.get("path")) == bool(entry.get("url")):
            problems.append(f"{key}: give exactly one of path, url")
        elif entry.get("url") and not SHA256.fullmatch(str(entry.get("sha256") or "")):
            problems.append(f"{key}.sha256: a patch URL needs its sha256 (64 hex digits)")
        elif entry.get("path") and not (folder / entry["path"]).is_file():
            problems.append(f"{key}.path: {folder / entry['path']} not found")
    if not spec["patches"]:
        problems.append("patches: a series needs at least one patch")
    names = [c["name"] for c in spec["checks"]]
    for i, check in enumerate(spec["checks"]):
        key = f"checks[{i}] ({check['name']})"
        if names.count(check["name"]) > 1:
            problems.append(f"{key}.name: two checks are called {check['name']!r}")
        for part in ("probe", "judge"):
            if not (folder / check[part]).is_file():
                problems.append(f"{key}.{part}: {folder / check[part]} not found")
        if check["where"] == "cpu" and "patched" not in check["trees"]:
            problems.append(f"{key}.trees: a CPU check probes the patched tree at least")
        if "reference" in check["trees"] and not spec.get("reference_sglang"):
            problems.append(f"{key}.trees: `reference` needs reference_sglang (the upstream release that carries "
                            f"the change)")
    if spec["source"] and "://" not in spec["source"] and not (folder / spec["source"]).is_file():
        problems.append(f"source: {folder / spec['source']} not found (a file in the series folder, or a URL)")
    if problems:
        raise SeriesError(f"{path}: " + "; ".join(problems))
    spec["folder"] = str(folder)
    return spec


def local_files(spec: Dict[str, Any]) -> List[Path]:
    """series.yaml and every local file it names: what a rerun of the patch stage follows."""
    folder = Path(spec["folder"])
    return [folder / SPEC_FILE] + [folder / e["path"] for e in spec["patches"] if e.get("path")]


def check_files(spec: Dict[str, Any], where: str) -> List[Path]:
    """Every file of the series' checks that run `where` (their whole folders: a probe may import neighbours)."""
    folder = Path(spec["folder"])
    dirs = sorted({(folder / c[part]).parent for c in spec["checks"] if c["where"] == where
                   for part in ("probe", "judge")})
    return sorted({f for d in dirs for f in d.rglob("*") if f.is_file() and "__pycache__" not in f.parts})


def checks_of(spec: Dict[str, Any], where: str) -> List[Dict[str, Any]]:
    return [c for c in spec["checks"] if c["where"] == where]


def resolve_patches(spec: Dict[str, Any], cache_dir: Path, log: IO) -> List[Path]:
    """The series' patch files in order; URL patches fetched once into the cache and held to their sha256."""
    folder = Path(spec["folder"])
    return [folder / e["path"] if e.get("path") else fetch_url_patch(e["url"], e["sha256"], cache_dir, log)
            for e in spec["patches"]]


def fetch_url_patch(url: str, sha256: str, cache_dir: Path, log: IO) -> Path:
    """A patch given by URL, fetched once into the cache and held to its sha256."""
    import shutil
    import urllib.request

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
        raise SeriesError(f"patch URL {url}: {exc}") from exc
    got = sha256_file(partial)
    if got != sha256:
        partial.unlink()
        raise SeriesError(f"patch URL {url}: sha256 {got} does not match the configured {sha256}")
    partial.rename(target)
    return target


def content_key(spec: Dict[str, Any]) -> Dict[str, Any]:
    """What a measurement of this series depends on: each patch by content (a URL patch by its pinned sha256)."""

    folder = Path(spec["folder"])
    return {"patches": [sha256_file(folder / e["path"]) if e.get("path") else e["sha256"] for e in spec["patches"]]}


def series_hash(spec: Dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(content_key(spec), sort_keys=True).encode()).hexdigest()[:16]


class JudgeError(SpecreproError, RuntimeError):
    """A judge that broke, or wrote what the protocol does not allow (not a verdict)."""


def run_judge(spec: Dict[str, Any], check: Dict[str, Any], records: Dict[str, Path], trees: Dict[str, Path],
              out: Path, log: IO, role: str = "") -> Dict[str, Any]:
    """The judge of one check over its probe records (the check protocol: patches/README.md); its verdict."""
    import sys

    folder = Path(spec["folder"])
    out.unlink(missing_ok=True)
    cmd = [sys.executable, str(folder / check["judge"]), "--out", str(out)]
    cmd += [a for tree, path in records.items() for a in ("--record", f"{tree}={path}")]
    cmd += [a for tree, path in trees.items() for a in ("--tree", f"{tree}={path}")]
    cmd += ["--role", role] if role else []
    code = run_logged(cmd, log, cwd=out.parent, timeout=600)
    where = f"series {folder.name}: check {check['name']}: its judge ({check['judge']})"
    if code != 0 or not out.is_file():
        raise JudgeError(f"{where} failed (exit {code}); see the log")
    try:
        verdict = json.loads(out.read_text())
        assert isinstance(verdict["passed"], bool) and isinstance(verdict["checks"], list)
        for row in verdict["checks"]:
            assert {"check", "passed", "executed", "detail"} <= set(row), f"a check row lacks a key: {row}"
    except (ValueError, KeyError, AssertionError) as exc:
        raise JudgeError(f"{where} wrote {out}, which is not a verdict of the check protocol ({exc}): it needs "
                         f"`passed` and `checks`, each check with check, passed, executed, detail") from exc
    verdict.setdefault("summary", "")
    verdict.setdefault("notes", [])
    return verdict
