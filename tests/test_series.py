"""Patch series as folders (specrepro.core.series) and the generic patch_check (specrepro.stages.patch_check): what every series
is held to, whatever its own checks say, and how the check protocol's judges are held to it (patches/README.md)."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from specrepro.stages.patch_check import generic_checks, render_markdown
from specrepro.util.patching import apply_series, sha256_file
from specrepro.core.series import JudgeError, SeriesError, load_series, run_judge

PATCH = """--- a/python/sglang/mod.py
+++ b/python/sglang/mod.py
@@ -1,2 +1,2 @@
 VALUE = 1
-NAME = "old"
+NAME = {new}
"""


def write_series(folder: Path, text: str, files=("0001-a.patch",)) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in files:
        (folder / name).write_text(PATCH.format(new='"new"'))
    (folder / "series.yaml").write_text(text)
    return folder


@pytest.mark.parametrize("text,expected", [
    ("title: t\npatches: [{path: 0001-a.patch}]\npathces: []\n", "pathces"),
    ("title: t\npatches: [{path: 0002-missing.patch}]\n", "patches[0].path: "),
    ("title: t\npatches: [{url: 'https://example.invalid/x.diff'}]\n", "patches[0].sha256: a patch URL needs its sha256"),
    ("title: t\npatches: [{path: 0001-a.patch, url: 'https://x/y'}]\n", "patches[0]: give exactly one of path, url"),
    ("patches: [{path: 0001-a.patch}]\n", "title"),
    ("title: t\npatches: [{path: 0001-a.patch}]\nchecks: [{name: c, probe: p.py, judge: j.py}]\n",
     "checks[0] (c).probe: "),
    ("title: t\npatches: [{path: 0001-a.patch}]\nchecks: [{name: c, where: tpu, probe: p.py, judge: j.py}]\n", "where"),
    ("title: t\npatches: [{path: 0001-a.patch}]\nchecks: [{name: c, probe: 0001-a.patch, judge: 0001-a.patch, "
     "trees: [patched, reference]}]\n", "`reference` needs reference_sglang"),
    ("title: t\nsource: PR.md\npatches: [{path: 0001-a.patch}]\n", "source: "),
])
def test_a_bad_series_is_an_error_naming_the_file_and_key(tmp_path, text, expected):
    folder = write_series(tmp_path / "s", text)
    with pytest.raises(SeriesError) as info:
        load_series(folder)
    assert str(folder / "series.yaml") in str(info.value) and expected in str(info.value)


def test_a_folder_without_series_yaml_says_what_a_series_is(tmp_path):
    with pytest.raises(SeriesError, match="a patch series is a folder with a series.yaml"):
        load_series(tmp_path)


def test_both_shipped_series_load():
    seed = load_series(ROOT / "patches" / "eagle_topk")
    assert [c["where"] for c in seed["checks"]] == ["cpu", "gpu"] and seed["reference_sglang"] == "0.5.21"
    second = load_series(ROOT / "patches" / "sharpen_draft")
    assert [c["where"] for c in second["checks"]] == ["cpu"] and second["reference_sglang"] is None


def judge_file(folder: Path, body: str) -> dict:
    (folder / "judge.py").write_text("import argparse, json, sys\n"
                                     "p = argparse.ArgumentParser(); p.add_argument('--out')\n"
                                     "p.add_argument('--record', action='append'); p.add_argument('--tree', action='append')\n"
                                     "p.add_argument('--role')\n"
                                     "a = p.parse_args()\n" + body)
    return {"name": "c", "judge": "judge.py", "where": "cpu"}


def test_a_judge_that_breaks_or_speaks_another_protocol_is_no_verdict(tmp_path):
    spec = {"folder": str(tmp_path)}
    record = tmp_path / "r.json"
    record.write_text("{}")
    crash = judge_file(tmp_path, "sys.exit(3)\n")
    with pytest.raises(JudgeError, match="check c: its judge \\(judge.py\\) failed \\(exit 3\\)"):
        run_judge(spec, crash, {"patched": record}, {}, tmp_path / "v.json", io.StringIO())
    wrong = judge_file(tmp_path, "json.dump({'ok': True}, open(a.out, 'w'))\n")
    with pytest.raises(JudgeError, match="not a verdict of the check protocol"):
        run_judge(spec, wrong, {"patched": record}, {}, tmp_path / "v.json", io.StringIO())
    row = judge_file(tmp_path, "json.dump({'passed': True, 'checks': [{'check': 'x', 'passed': True}]}, open(a.out, 'w'))\n")
    with pytest.raises(JudgeError, match="a check row lacks a key"):
        run_judge(spec, row, {"patched": record}, {}, tmp_path / "v.json", io.StringIO())
    good = judge_file(tmp_path, "json.dump({'passed': False, 'checks': [{'check': 'x', 'passed': False, 'executed': True, "
                                "'detail': a.record[0]}]}, open(a.out, 'w'))\n")
    verdict = run_judge(spec, good, {"patched": record}, {}, tmp_path / "v.json", io.StringIO())
    # a failed check is a verdict, not an error; the judge saw the record it was given
    assert verdict["passed"] is False and verdict["checks"][0]["detail"] == f"patched={record}"
    assert verdict["summary"] == "" and verdict["notes"] == []


def fake_sglang(root: Path, modules: dict) -> Path:
    """A tree laid out as an installed sglang: root/sglang/<module>.py."""
    pkg = root / "sglang"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    for name, text in modules.items():
        (pkg / name).write_text(text)
    return pkg


def patched_copy(tmp_path: Path, unpatched: Path, new: str) -> tuple:
    import shutil

    tree = tmp_path / "patched"
    shutil.copytree(unpatched.parent, tree)
    patch = tmp_path / "0001-change.patch"
    patch.write_text(PATCH.format(new=new))
    record = apply_series(tree, [patch], "installed")
    return tree / "sglang", {"patches": record["patches"], "patch_paths": {patch.name: str(patch)}}


@pytest.mark.parametrize("new,failing", [
    ('"new"', []),
    ('"new" +', ["touched_files_compile", "touched_modules_import"]),
    ('__import__("a_module_no_tree_has")', ["touched_modules_import"]),
])
def test_generic_checks_hold_every_series_to_compile_and_import(tmp_path, new, failing):
    unpatched = fake_sglang(tmp_path / "unpatched", {"mod.py": 'VALUE = 1\nNAME = "old"\n'})
    patched, manifest = patched_copy(tmp_path, unpatched, new)
    checks = {c["check"]: c for c in generic_checks(manifest, patched, unpatched, sys.executable, io.StringIO())}
    assert set(checks) == {"applies_without_fuzz", "recorded_hashes", "touched_files_compile", "touched_modules_import"}
    assert sorted(name for name, c in checks.items() if not c["passed"]) == failing
    if "touched_modules_import" in failing:
        assert "sglang.mod" in checks["touched_modules_import"]["detail"]


def test_recorded_hashes_catch_a_patched_file_or_patch_changed_after_the_fact(tmp_path):
    unpatched = fake_sglang(tmp_path / "unpatched", {"mod.py": 'VALUE = 1\nNAME = "old"\n'})
    patched, manifest = patched_copy(tmp_path, unpatched, '"new"')
    (patched / "mod.py").write_text('VALUE = 2\nNAME = "new"\n')
    checks = {c["check"]: c for c in generic_checks(manifest, patched, unpatched, sys.executable, io.StringIO())}
    assert not checks["recorded_hashes"]["passed"] and "sglang/mod.py" in checks["recorded_hashes"]["detail"]
    assert manifest["patches"][0]["sha256"] == sha256_file(Path(manifest["patch_paths"]["0001-change.patch"]))


def test_a_module_that_does_not_import_unpatched_either_is_not_held_against_the_patch(tmp_path):
    unpatched = fake_sglang(tmp_path / "unpatched", {"mod.py": 'import a_gpu_only_library\nVALUE = 1\nNAME = "old"\n'})
    patched, manifest = patched_copy(tmp_path, unpatched, '"new"')
    checks = {c["check"]: c for c in generic_checks(manifest, patched, unpatched, sys.executable, io.StringIO())}
    imported = checks["touched_modules_import"]
    assert imported["passed"] and not imported["executed"]
    assert "not importable on a CPU unpatched either (not checked): sglang.mod" in imported["detail"]


def test_a_series_without_checks_of_its_own_says_so():
    verdict = {"series": "s", "title": "t", "sglang_version": "0.5.20", "passed": True, "results": [],
               "behavioural_checks": [], "gpu_checks": [], "probe_seconds": 1.0,
               "env": {"path": "/env", "reused": True, "seconds": 0.1},
               "generic": [{"check": "applies_without_fuzz", "tree": "patched", "passed": True, "executed": True,
                            "detail": "1 patch"}]}
    text = render_markdown(verdict)
    assert "declares no behavioural checks of its own" in text and "Overall: **PASS**" in text
    json.dumps(verdict)
