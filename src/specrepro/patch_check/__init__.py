"""The patch_check stage: the patched sglang code exercised on a CPU.

The probe runs in the sglang env (specrepro.sglang_env: requirements/sglang-cpu.txt,
CPU-usable torch and sglang's pure-Python dependencies, built once and
cached) against the patched tree, the unpatched tree and the upstream
reference release, each put first on PYTHONPATH; `patch_check.judge` judges
the three records.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import IO, Any, Dict, Optional

from specrepro.fileio import write_json, write_text_atomic
from specrepro.patch_check.judge import judge
from specrepro.procs import run_logged
from specrepro.sglang_env import ensure_env
from specrepro.sources import cached_release_tree

PROBE = Path(__file__).parent / "probe_draft_proposal.py"


def requirements_file(project_root: Path) -> Path:
    return project_root / "requirements" / "sglang-cpu.txt"


def run_probe(venv: Path, tree_on_path: Path, out: Path, log: IO) -> Dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME"}}
    env.update(CUDA_VISIBLE_DEVICES="", HIP_VISIBLE_DEVICES="", PYTHONDONTWRITEBYTECODE="1")
    env["PYTHONPATH"] = str(tree_on_path)
    cmd = [str(venv / "bin" / "python"), str(PROBE), "--out", str(out)]
    print(f"# PYTHONPATH={env.get('PYTHONPATH', '')}", file=log)
    if run_logged(cmd, log, env=env, timeout=1800) != 0:
        raise RuntimeError(f"the draft-proposal probe failed on {tree_on_path} (see the log)")
    return json.loads(out.read_text())


def patch_check(
    *,
    version: str,
    reference_version: Optional[str],
    source_tree: Path,
    source_manifest: Dict[str, Any],
    patched_tree: Path,
    patch_manifest: Dict[str, Any],
    project_root: Path,
    cache_dir: Path,
    work_dir: Path,
    log: IO,
) -> Dict[str, Any]:
    work_dir.mkdir(parents=True, exist_ok=True)
    requirements = requirements_file(project_root)
    patched_pkg = patched_tree / source_manifest["package_dir"]
    unpatched_pkg = source_tree / source_manifest["package_dir"]
    env = ensure_env(cache_dir, requirements, log)
    venv = Path(env["path"])

    started = time.monotonic()
    patched = run_probe(venv, patched_pkg.parent, work_dir / "probe_patched.json", log)
    unpatched = run_probe(venv, unpatched_pkg.parent, work_dir / "probe_unpatched.json", log)
    reference = None
    if reference_version:
        ref_tree = cached_release_tree(reference_version, cache_dir, log)
        reference = run_probe(venv, ref_tree, work_dir / f"probe_sglang_{reference_version}.json", log)
    verdict = judge(patched, unpatched, reference, patched_pkg, unpatched_pkg, reference_version)
    verdict.update(
        sglang_version=version,
        reference_version=reference_version,
        env=env,
        probe_seconds=round(time.monotonic() - started, 2),
        patches=patch_manifest["patches"],
        torch=patched.get("torch"),
        probed_file=patched.get("sglang_file"),
    )
    return verdict


def render_markdown(verdict: Dict[str, Any]) -> str:
    lines = [
        f"## patch_check: sglang {verdict['sglang_version']} + patch series, on a CPU",
        "",
        f"Overall: **{'PASS' if verdict['passed'] else 'FAIL'}** "
        f"(the bug is visible on unpatched {verdict['sglang_version']}: {verdict['bug_visible_on_unpatched']})",
        "",
        "| tree | check | result | executed | detail |",
        "| --- | --- | --- | --- | --- |",
    ]
    for tree in ("patched", "unpatched"):
        for c in verdict[tree]:
            lines.append(
                f"| {tree} | {c['check']} | {'pass' if c['passed'] else 'FAIL'} | "
                f"{'yes (CPU)' if c['executed'] else 'no (source only)'} | {c['detail']} |"
            )
    lines += [
        "",
        f"On unpatched {verdict['sglang_version']} the checks are expected to fail: that is the bug.",
        verdict["gpu_note"],
        f"Check env: {verdict['env']['path']} ({'reused' if verdict['env']['reused'] else 'built'} in "
        f"{verdict['env']['seconds']:.1f} s); probes {verdict['probe_seconds']} s; torch {verdict['torch']}.",
    ]
    return "\n".join(lines) + "\n"


def patch_check_stage(*, sglang: Dict[str, Any], source_manifest: Path, source_tree: Path, patch_manifest: Path,
                      patched_tree: Path, project_root: Path, cache_dir: Path, verdict_json: Path, verdict_md: Path,
                      log: IO) -> Dict[str, Any]:
    verdict = patch_check(
        version=sglang["version"],
        reference_version=sglang.get("reference_version"),
        source_tree=source_tree,
        source_manifest=json.loads(source_manifest.read_text()),
        patched_tree=patched_tree,
        patch_manifest=json.loads(patch_manifest.read_text()),
        project_root=project_root,
        cache_dir=cache_dir,
        work_dir=verdict_json.parent / "probes",
        log=log,
    )
    text = render_markdown(verdict)
    print(text, file=log)
    # Written whatever the verdict: a failed check is a result the report
    # shows; the image stage of a patched arm refuses a failed verdict.
    write_json(verdict_json, verdict)
    write_text_atomic(verdict_md, text)
    return verdict
