"""The patch_check stage: one patch series checked on a CPU before any image is built.

Every series gets the generic checks (it applied with no fuzz, its recorded hashes hold, its touched files
byte-compile and its touched modules import wherever the unpatched ones do); then each of the series' own CPU
checks runs through the check protocol (patches/README.md): its probe once per tree (patched, unpatched, the
upstream reference) in the sglang env (specrepro.upstream.sglang_env: requirements/sglang-cpu.txt, CPU torch and sglang's
pure-Python dependencies, built once and cached) with that tree first on PYTHONPATH, then its judge over the
records.  A failed check blocks the series' arms (image stage); the verdict is written either way.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import IO, Any, Dict, List, Optional

from specrepro.util.errors import SpecreproError
from specrepro.util.fileio import locked, write_json, write_text_atomic
from specrepro.util.patching import sha256_file
from specrepro.util.procs import run_logged
from specrepro.core.series import checks_of, load_series, run_judge
from specrepro.upstream.sglang_env import ensure_env
from specrepro.stages.sources import cached_release_tree
from specrepro.core import series
from specrepro.util import patching, procs
from specrepro.util.document import Section, Table, Text, to_markdown, yes_no

# Imports one module in the tree first on PYTHONPATH: exit 0 if it imports, else its error on stderr.
IMPORT_PROBE = ("import importlib, sys\n"
                "try:\n    importlib.import_module(sys.argv[1])\n"
                "except BaseException as exc:\n    print(f'{type(exc).__name__}: {exc}'[:400], file=sys.stderr); sys.exit(3)\n")


class PatchCheckError(SpecreproError, RuntimeError):
    """A check program that broke (not a verdict): the message names the series, the check and the log."""


def requirements_file(project_root: Path) -> Path:
    return project_root / "requirements" / "sglang-cpu.txt"


def check(name: str, passed: bool, detail: str, tree: str = "patched", executed: bool = True,
          **evidence) -> Dict[str, Any]:
    return {"check": name, "tree": tree, "passed": bool(passed), "executed": executed, "detail": detail, **evidence}


def probe_env(tree_on_path: Path, tree: str, version: str) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME"}}
    env.update(CUDA_VISIBLE_DEVICES="", HIP_VISIBLE_DEVICES="", PYTHONDONTWRITEBYTECODE="1",
               PYTHONPATH=str(tree_on_path), SPECREPRO_TREE=tree, SPECREPRO_SGLANG_VERSION=version)
    return env


def generic_checks(patch_manifest: Dict[str, Any], patched_pkg: Path, unpatched_pkg: Path, python: str,
                   log: IO) -> List[Dict[str, Any]]:
    """What every series is held to, whatever its own checks say."""
    patches = patch_manifest["patches"]
    offsets = [f"{p['patch']}: {o}" for p in patches for o in p.get("offsets") or []]
    out = [check("applies_without_fuzz", True,
                 f"{len(patches)} patch(es) applied to the pristine tree with --fuzz=0, all or nothing"
                 + (f"; at an offset: {'; '.join(offsets)}" if offsets else "; every hunk at its stated line"),
                 patches=[p["patch"] for p in patches])]
    root = patched_pkg.parent
    mismatched, files = [], {}
    for p in patches:
        for rel, digest in p["files"].items():
            files[rel] = digest  # the last patch to touch a file leaves it as recorded
        source = Path(patch_manifest.get("patch_paths", {}).get(p["patch"], ""))
        if source.is_file() and sha256_file(source) != p["sha256"]:
            mismatched.append(f"{p['patch']} (patch file changed since it was applied)")
    for rel, digest in files.items():
        now = sha256_file(root / rel) if (root / rel).is_file() else None
        if now != digest:
            mismatched.append(f"{rel} (recorded {str(digest)[:12]}, found {str(now)[:12]})")
    out.append(check("recorded_hashes", not mismatched,
                     f"{len(files)} patched file(s) and {len(patches)} patch(es) match their recorded sha256"
                     if not mismatched else "differ from the patch record: " + "; ".join(mismatched),
                     files=len(files)))
    py_files = sorted(rel for rel, digest in files.items() if rel.endswith(".py") and digest)
    broken = []
    for rel in py_files:
        try:
            compile((root / rel).read_bytes(), str(root / rel), "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as exc:
            broken.append(f"{rel}: {type(exc).__name__}: {exc}")
    out.append(check("touched_files_compile", not broken,
                     f"{len(py_files)} patched Python file(s) byte-compile" if not broken else "; ".join(broken)))
    out.append(touched_modules_import(py_files, patched_pkg, unpatched_pkg, python, log))
    return out


def touched_modules_import(py_files: List[str], patched_pkg: Path, unpatched_pkg: Path, python: str,
                           log: IO) -> Dict[str, Any]:
    """Each patched module imports on a CPU wherever the unpatched one does (some need a GPU library either way)."""
    import subprocess

    failed, skipped, imported = [], [], []
    for rel in py_files:
        module = rel[:-3].replace("/", ".").removesuffix(".__init__")
        results = {}
        for tree, pkg in (("unpatched", unpatched_pkg), ("patched", patched_pkg)):
            proc = subprocess.run([python, "-c", IMPORT_PROBE, module], capture_output=True, text=True, timeout=600,
                                  env=probe_env(pkg.parent, tree, ""))
            results[tree] = (proc.returncode == 0, proc.stderr.strip().splitlines()[-1:] or [""])
        print(f"# import {module}: unpatched {'ok' if results['unpatched'][0] else 'fails'}, "
              f"patched {'ok' if results['patched'][0] else 'fails: ' + results['patched'][1][0]}", file=log)
        if not results["unpatched"][0]:
            skipped.append(f"{module} ({results['unpatched'][1][0]})")
        elif results["patched"][0]:
            imported.append(module)
        else:
            failed.append(f"{module}: {results['patched'][1][0]}")
    detail = (f"{len(imported)} patched module(s) import on a CPU" if not failed else
              "patched modules that no longer import: " + "; ".join(failed))
    if skipped:
        detail += f"; not importable on a CPU unpatched either (not checked): {'; '.join(skipped)}"
    return check("touched_modules_import", not failed, detail, executed=bool(imported or failed), modules=imported)


def run_cpu_check(spec: Dict[str, Any], chk: Dict[str, Any], trees: Dict[str, Path], versions: Dict[str, str],
                  python: str, work_dir: Path, log: IO) -> Dict[str, Any]:
    """One of the series' own CPU checks: its probe on each tree, then its judge over the records."""
    folder = Path(spec["folder"])
    records = {}
    for tree in chk["trees"]:
        out = work_dir / f"{chk['name']}.{tree}.json"
        out.unlink(missing_ok=True)
        cmd = [python, str(folder / chk["probe"]), "--out", str(out), *chk["args"]]
        print(f"# {chk['name']}: probe on the {tree} tree ({versions[tree]}), PYTHONPATH={trees[tree].parent}",
              file=log, flush=True)
        code = run_logged(cmd, log, env=probe_env(trees[tree].parent, tree, versions[tree]), cwd=work_dir,
                          timeout=chk["timeout_s"])
        if code != 0 or not out.is_file():
            raise PatchCheckError(f"series {Path(spec['folder']).name}: check {chk['name']}: its probe "
                                  f"({chk['probe']}) failed on the {tree} tree (exit {code}); see the log")
        records[tree] = out
    return run_judge(spec, chk, records, trees, work_dir / f"{chk['name']}.verdict.json", log)


def patch_check(*, series: str, sglang: Dict[str, Any], source_tree: Path, source_manifest: Dict[str, Any],
                patched_tree: Path, patch_manifest: Dict[str, Any], series_dir: Path, requirements: Path,
                cache_dir: Path, work_dir: Path, log: IO) -> Dict[str, Any]:
    work_dir.mkdir(parents=True, exist_ok=True)
    spec = load_series(series_dir)
    patched_pkg = patched_tree / source_manifest["package_dir"]
    unpatched_pkg = source_tree / source_manifest["package_dir"]
    env = ensure_env(cache_dir, requirements, log)
    started = time.monotonic()
    generic = generic_checks(patch_manifest, patched_pkg, unpatched_pkg, env["python"], log)
    own = checks_of(spec, "cpu")
    trees = {"patched": patched_pkg, "unpatched": unpatched_pkg}
    versions = {"patched": f"{sglang['version']} + {series}", "unpatched": sglang["version"]}
    if any("reference" in c["trees"] for c in own):
        ref = spec["reference_sglang"]
        trees["reference"] = cached_release_tree(ref, cache_dir, log) / "sglang"
        versions["reference"] = ref
    results = [dict(run_cpu_check(spec, c, trees, versions, env["python"], work_dir, log), name=c["name"])
               for c in own]
    passed = all(c["passed"] for c in generic) and all(r["passed"] for r in results)
    return {
        "series": series, "title": spec["title"], "description": spec["description"], "source": spec["source"],
        "sglang_version": sglang["version"], "reference_version": spec.get("reference_sglang"),
        "passed": passed, "generic": generic, "results": results,
        "behavioural_checks": [c["name"] for c in own],
        "gpu_checks": [c["name"] for c in checks_of(spec, "gpu")],
        "env": env, "probe_seconds": round(time.monotonic() - started, 2), "patches": patch_manifest["patches"],
    }


def verdict_rows(verdict: Dict[str, Any]) -> List[Dict[str, Any]]:
    """Every check of a verdict, generic first, each named by the check it belongs to."""
    rows = [dict(c, group="generic") for c in verdict["generic"]]
    for result in verdict["results"]:
        rows += [dict(c, group=result["name"]) for c in result["checks"]]
    return rows


def verdict_section(verdict: Dict[str, Any]):
    """The verdict as a report section (specrepro.util.document): the checks' table and what they ran on."""

    overall = ("PASS" if verdict["passed"] else "FAIL")
    blocks: List[Any] = [Text([f"Overall: **{overall}**"
                               + "".join(f"; {r['name']}: {r.get('summary') or ('pass' if r['passed'] else 'FAIL')}"
                                         for r in verdict["results"])])]
    if not verdict["behavioural_checks"]:
        blocks.append(Text(["This series declares no behavioural checks of its own (patches/<series>/series.yaml "
                            "`checks`): only the generic ones below ran."]))
    blocks.append(Table(["check", "of", "tree", "result", "executed", "detail"],
                        [[c["check"], c["group"], c.get("tree", "-"),
                          yes_no(c["passed"], "pass", "FAIL", bad_is_strong=False),
                          "yes (CPU)" if c["executed"] else "no", c["detail"]] for c in verdict_rows(verdict)]))
    notes = [n for r in verdict["results"] for n in r.get("notes") or []]
    if verdict["gpu_checks"]:
        notes.append(f"GPU checks declared by this series (run by gpu_check on each arm's image): "
                     f"{', '.join(verdict['gpu_checks'])}.")
    env = verdict["env"]
    notes.append(f"Check env: {env['path']} ({'reused' if env['reused'] else 'built'} in {env['seconds']:.1f} s); "
                 f"checks {verdict['probe_seconds']} s.")
    if verdict.get("reused"):
        notes.append(f"Reused: these checks ran on the same trees, series and check env at {verdict.get('ran_at')} "
                     f"(key {verdict['reused']['key']}, kept in {verdict['reused']['from']}); nothing they read "
                     f"has changed since.")
    rows = verdict_rows(verdict)
    return Section(f"patch_check: series `{verdict['series']}` ({verdict['title']}) on sglang "
                   f"{verdict['sglang_version']}, on a CPU", [*blocks, Text(notes)], level=2,
                   note=f"**{overall}**: {sum(c['passed'] for c in rows)} of {len(rows)} checks pass, "
                        f"{sum(bool(c['executed']) for c in rows)} executed")


def render_markdown(verdict: Dict[str, Any]) -> str:
    return to_markdown([verdict_section(verdict)])


def folder_digest(folder: Path) -> str:
    """Every file under `folder` by path and content (caches aside), series.yaml as patch_check reads it: what
    only gpu_check reads (a GPU check's args and timeout) is left out, so another GPU-check setting reuses the
    CPU verdict."""
    import yaml

    digest = hashlib.sha256()
    for path in sorted(p for p in Path(folder).rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        content = path.read_bytes()
        if path == Path(folder) / "series.yaml":
            spec = yaml.safe_load(content) or {}
            spec["checks"] = [{k: v for k, v in c.items() if c.get("where") != "gpu" or k not in ("args", "timeout_s")}
                              for c in spec.get("checks") or []]
            content = json.dumps(spec, sort_keys=True, default=str).encode()
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0" + content + b"\0")
    return digest.hexdigest()


def verdict_key(series_dir: Path, sglang: Dict[str, Any], source_manifest: Dict[str, Any],
                patch_manifest: Dict[str, Any], env: Dict[str, Any]) -> str:
    """Everything a series' verdict depends on, hashed: the series folder (patches, checks, judges), the source
    (its archive or commit), the patches as applied, the check env, the pinned sglang, and the code that checks
    (this package's patch_check, patching and series modules, the Python that runs the judges)."""

    code = hashlib.sha256()
    for path in [*sorted(Path(__file__).parent.glob("*.py")), Path(patching.__file__), Path(series.__file__),
                 Path(procs.__file__)]:
        code.update(path.read_bytes())
    source = {k: source_manifest.get(k) for k in ("archive_sha256", "commit", "ref", "method", "version_in_tree")}
    applied = [{k: p.get(k) for k in ("sha256", "files", "fuzz", "offsets")} for p in patch_manifest["patches"]]
    return hashlib.sha256(json.dumps(
        {"series": folder_digest(series_dir), "sglang": sglang, "source": source, "applied": applied,
         "env": env.get("key"), "code": code.hexdigest(), "python": sys.version}, sort_keys=True, default=str,
    ).encode()).hexdigest()[:20]


def reuse_verdict(cache: Path, work_dir: Path, log: IO) -> Optional[Dict[str, Any]]:
    """The verdict of the same checks on the same trees, series and env, with its probe records, if one was kept."""
    import shutil

    kept = cache / "verdict.json"
    if not kept.is_file():
        return None
    try:
        verdict = json.loads(kept.read_text())
    except (OSError, ValueError):
        return None
    if (cache / "probes").is_dir():
        shutil.copytree(cache / "probes", work_dir, dirs_exist_ok=True)
    print(f"patch_check: reused the verdict of the same checks on the same trees, series and check env "
          f"(key {cache.name}, first run {verdict.get('ran_at', '?')} for {verdict.get('ran_for', '?')}); remove "
          f"{cache} to run them again", file=log, flush=True)
    return {**verdict, "reused": {"key": cache.name, "from": str(cache)}}


def patch_check_stage(*, series: str, sglang: Dict[str, Any], source_manifest: Path, source_tree: Path,
                      patch_manifest: Path, patched_tree: Path, series_dir: Path, requirements: Path, cache_dir: Path,
                      verdict_json: Path, verdict_md: Path, log: IO) -> Dict[str, Any]:
    """The series' verdict, written next to the results; a verdict of the same checks on the same trees, series
    and check env (`verdict_key`) is reused from cache_dir/patch_check, and says so."""
    import shutil

    source, applied = json.loads(source_manifest.read_text()), json.loads(patch_manifest.read_text())
    work_dir = verdict_json.parent / "probes"
    cache = Path(cache_dir) / "patch_check" / verdict_key(series_dir, sglang, source, applied,
                                                          ensure_env(cache_dir, requirements, log))
    # held while checking: a second campaign of the same key on this machine waits and reuses, not checks again
    with locked(cache.parent / f"{cache.name}.lock"):
        verdict = reuse_verdict(cache, work_dir, log)
        if verdict is None:
            verdict = patch_check(series=series, sglang=sglang, source_tree=source_tree, source_manifest=source,
                                  patched_tree=patched_tree, patch_manifest=applied, series_dir=series_dir,
                                  requirements=requirements, cache_dir=cache_dir, work_dir=work_dir, log=log)
            verdict.update(ran_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                           ran_for=str(verdict_json.parent))
            if work_dir.is_dir():
                shutil.copytree(work_dir, cache / "probes", dirs_exist_ok=True)
            write_json(cache / "verdict.json", verdict)
    text = render_markdown(verdict)
    print(text, file=log)
    # Written whatever the verdict: a failed check is a result the report shows; the image stage of the series'
    # arms refuses a failed verdict.
    write_json(verdict_json, verdict)
    write_text_atomic(verdict_md, text)
    return verdict


def failed_checks(verdict: Dict[str, Any]) -> List[str]:
    return [f"{c['group']}/{c['check']}" for c in verdict_rows(verdict) if c["executed"] and not c["passed"]]


def refuse_failed(arm: str, verdicts: List[Path]) -> Optional[str]:
    """Why `arm` may not be built and measured (its series failed patch_check), or None."""
    for path in verdicts:
        verdict = json.loads(Path(path).read_text())
        if not verdict["passed"]:
            return (f"arm {arm}: patch_check of series {verdict.get('series')} failed "
                    f"({', '.join(failed_checks(verdict)) or 'see the verdict'}; {path}); no GPU time is spent on a "
                    f"patch that fails its checks")
    return None
