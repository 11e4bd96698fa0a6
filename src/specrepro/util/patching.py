"""Apply a patch series to an sglang tree: check first, then apply, all or nothing.

Standard library only, so the same file applies the series inside an image
build (`python3 patching.py apply ...`) as in the patch stage.

Patches carry repository paths (``python/sglang/...``).  A git checkout takes
them with -p1; a directory holding an installed ``sglang`` package (site-
packages, a wheel's contents) with -p2.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

LAYOUT_STRIP = {"repository": 1, "installed": 2}


class PatchError(RuntimeError):
    """A patch that does not apply; the message names patch, file and hunk."""


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def detect_layout(tree: Path) -> str:
    if (tree / "python" / "sglang").is_dir():
        return "repository"
    if (tree / "sglang").is_dir():
        return "installed"
    raise PatchError(f"{tree}: neither python/sglang/ (repository) nor sglang/ (installed) found")


def read_series(series_file: Path) -> List[Path]:
    patches = []
    for lineno, line in enumerate(series_file.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        path = series_file.parent / line.split()[0]
        if not path.is_file():
            raise PatchError(f"{series_file}:{lineno}: patch {line!r} not found")
        patches.append(path)
    return patches


@dataclass
class Hunk:
    file: str  # path as written in the patch (after a/ b/)
    number: int  # 1-based within its file, as GNU patch counts
    header: str


def hunks_of(patch_text: str) -> Dict[str, List[Hunk]]:
    """File (repository path) -> its hunks, in order."""
    files: Dict[str, List[Hunk]] = {}
    current: Optional[str] = None
    for line in patch_text.splitlines():
        if line.startswith("+++ "):
            name = line[4:].split("\t")[0].strip()
            current = name[2:] if name.startswith(("a/", "b/")) else name
            files.setdefault(current, [])
        elif line.startswith("@@") and current is not None:
            files[current].append(Hunk(current, len(files[current]) + 1, line.strip()))
    return files


def touched_files(patch_text: str) -> List[str]:
    return list(hunks_of(patch_text))


def _strip(path: str, strip: int) -> str:
    return "/".join(path.split("/")[strip - 1 :]) if strip > 1 else path


def _run_patch(tree: Path, patch: Path, strip: int, dry_run: bool) -> subprocess.CompletedProcess:
    # --fuzz=0: the change under test applies exactly or not at all; GNU
    # patch's default fuzz would let a hunk land on drifted context.
    argv = ["patch", f"-p{strip}", "--batch", "--forward", "--fuzz=0", "--no-backup-if-mismatch",
            "-r", "-", "-d", str(tree), "-i", str(patch)]
    if dry_run:
        argv.insert(1, "--dry-run")
    return subprocess.run(argv, capture_output=True, text=True)


def _failure_message(patch: Path, output: str, strip: int) -> str:
    hunks = hunks_of(patch.read_text())
    by_tree_path = {_strip(f, strip): f for f in hunks}
    current = None
    missing = False
    failures = []
    for line in output.splitlines():
        m = re.match(r"(?:checking|patching) file (.+)", line)
        if m:
            current = m.group(1).strip()
            continue
        if "can't find file to patch" in line:
            missing = True
            continue
        m = re.match(r"\|\+\+\+ (\S+)", line)
        if missing and m:
            name = m.group(1)
            name = name[2:] if name.startswith(("a/", "b/")) else name
            failures.append(f"file {_strip(name, strip)}: not found in the tree")
            missing = False
            continue
        m = re.match(r"Hunk #(\d+) FAILED at (\d+)", line)
        if m and current:
            repo_path = by_tree_path.get(current, current)
            n = int(m.group(1))
            header = hunks.get(repo_path, [])[n - 1].header if n <= len(hunks.get(repo_path, [])) else "?"
            failures.append(f"file {current}, hunk #{n} {header} (failed at line {m.group(2)})")
        elif current and ("can't find file" in line or "No file to patch" in line):
            failures.append(f"file {current}: not found in the tree")
        elif "Reversed (or previously applied) patch detected" in line and current:
            failures.append(f"file {current}: already applied (reversed patch detected)")
    if not failures:
        failures.append(output.strip().splitlines()[-1] if output.strip() else "unknown failure")
    return f"patch {patch.name} does not apply: " + "; ".join(failures)


def apply_series(tree: Path, patches: List[Path], layout: Optional[str] = None) -> Dict:
    """Apply `patches` to `tree`, all or nothing; return what was applied, with hashes.

    The files the series touches are copied to a staging folder and every patch
    is checked (dry run) there against the state the previous ones left; `tree`
    changes only when every patch applied, and on failure it is untouched and
    PatchError names patch, file and hunk.  The patched files then replace the
    originals one by one, each with an atomic rename in its own directory: a
    whole-tree directory swap is impossible inside a container image build,
    where overlayfs refuses to rename a directory of a lower layer (EXDEV).
    """
    tree = Path(tree)
    layout = layout or detect_layout(tree)
    strip = LAYOUT_STRIP[layout]
    touched: List[str] = []
    for patch in patches:
        for repo_path in touched_files(patch.read_text()):
            rel = _strip(repo_path, strip)
            if rel not in touched:
                touched.append(rel)
    staging_root = Path(tempfile.mkdtemp(prefix=".staging-", dir=tree.parent))
    staging = staging_root / tree.name
    try:
        staging.mkdir()
        for rel in touched:
            if (tree / rel).is_file():
                (staging / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(tree / rel, staging / rel)
        applied = []
        for patch in patches:
            check = _run_patch(staging, patch, strip, dry_run=True)
            if check.returncode != 0:
                raise PatchError(_failure_message(patch, check.stdout + check.stderr, strip))
            done = _run_patch(staging, patch, strip, dry_run=False)
            if done.returncode != 0:
                raise PatchError(_failure_message(patch, done.stdout + done.stderr, strip))
            files = {}
            for repo_path in touched_files(patch.read_text()):
                rel = _strip(repo_path, strip)
                files[rel] = sha256_file(staging / rel) if (staging / rel).is_file() else None
            # --fuzz=0 refuses drifted context; a hunk may still land some lines away (an offset): recorded
            offsets = re.findall(r"Hunk #\d+ succeeded at \d+ \(offset -?\d+ lines?\)", done.stdout)
            applied.append({"patch": patch.name, "sha256": sha256_file(patch), "files": files, "fuzz": 0,
                            "offsets": offsets})
        for rel in touched:
            src, dst = staging / rel, tree / rel
            if src.is_file():
                dst.parent.mkdir(parents=True, exist_ok=True)
                tmp = dst.with_name(f".{dst.name}.patched")
                shutil.copy2(src, tmp)
                os.replace(tmp, dst)
            elif dst.exists():
                dst.unlink()
        return {"layout": layout, "strip": strip, "patches": applied}
    finally:
        shutil.rmtree(staging_root, ignore_errors=True)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("apply", help="apply a series file or patch files to a tree")
    p.add_argument("--tree", required=True)
    p.add_argument("--layout", choices=sorted(LAYOUT_STRIP), default=None)
    p.add_argument("--series", default=None)
    p.add_argument("--record", default=None, help="write what was applied (JSON) here")
    p.add_argument("patches", nargs="*")
    args = parser.parse_args(argv)
    patches = read_series(Path(args.series)) if args.series else []
    patches += [Path(p) for p in args.patches]
    try:
        record = apply_series(Path(args.tree), patches, args.layout)
    except PatchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    text = json.dumps(record, indent=1)
    if args.record:
        Path(args.record).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
