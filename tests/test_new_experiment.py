"""A user's first steps with their own PR: `specrepro new-experiment` writes the files, they compose at once, the
CPU stages run the generic checks on the patch; and a clone without the data beside it says where the data must be."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from conftest import ROOT, specrepro

PATCH = ROOT / "patches" / "sharpen_draft" / "0001-eagle-sharpen-draft-proposal.patch"
PR = ROOT / "patches" / "sharpen_draft" / "PR.md"


def search(root):
    return f"hydra.searchpath=[file://{root / 'conf'}]"


def test_new_experiment_writes_files_that_compose_and_plan(tmp_path):
    root = tmp_path / "mine"
    proc = specrepro("new-experiment", "my_change", "--patch", str(PATCH), "--pr", str(PR), "--root", str(root))
    for rel in ("patches/my_change/series.yaml", "patches/my_change/0001-eagle-sharpen-draft-proposal.patch",
                "patches/my_change/PR.md", "conf/arm/my_change/baseline.yaml", "conf/arm/my_change/patched.yaml",
                "conf/claims/my_change.yaml", "conf/experiment/my_change.yaml", "conf/experiment/my_change_cpu.yaml"):
        assert (root / rel).is_file(), rel
    series = yaml.safe_load((root / "patches/my_change/series.yaml").read_text())
    assert series["title"] == "[ROCm] EAGLE: sharpen the draft proposal under rejection sampling"  # the PR's first line
    assert "specrepro plan 'hydra.searchpath=" in proc.stdout and "experiment=my_change_cpu" in proc.stdout
    planned = specrepro("plan", search(root), "experiment=my_change_cpu", "--no-resolve")
    assert "## arm patched:" in planned.stdout and "claim patched_changes_accept_length" in planned.stdout
    # written twice is refused: nothing of the user's is overwritten without --force
    again = specrepro("new-experiment", "my_change", "--patch", str(PATCH), "--root", str(root), check=False)
    assert again.returncode == 2 and "already there (--force writes over them)" in again.stderr
    bad = specrepro("new-experiment", "my.change", "--patch", str(PATCH), "--root", str(root), check=False)
    assert bad.returncode == 2 and "NAME: 'my.change' must be a plain name" in bad.stderr


@pytest.mark.e2e
def test_a_new_experiments_patch_gets_the_generic_checks_and_says_it_has_none_of_its_own(tmp_path):
    root = tmp_path / "mine"
    specrepro("new-experiment", "my_change", "--patch", str(PATCH), "--root", str(root))
    results = tmp_path / "results"
    specrepro("run", "--cpu-only", search(root), "experiment=my_change", f"results_dir={results}", timeout=1800)
    verdict = json.loads((results / "patch_check" / "v0.5.20" / "my_change" / "verdict.json").read_text())
    assert verdict["passed"] and verdict["results"] == [] and verdict["behavioural_checks"] == []
    assert [c["check"] for c in verdict["generic"] if c["passed"]] == [
        "applies_without_fuzz", "recorded_hashes", "touched_files_compile", "touched_modules_import"]
    assert "declares no behavioural checks of its own" in (results / "report" / "cpu_stages.md").read_text()


def test_a_clone_without_the_data_beside_it_says_where_to_put_gsm8k(tmp_path):
    """No ../shared, no copy in the cache, the canonical URL unreachable: the run stops at once, naming the key, the
    path and the checksum, with no traceback and before any other stage ran."""
    env = {k: v for k, v in os.environ.items() if k != "SPECREPRO_DATA_DIR"}
    results = tmp_path / "results"
    proc = subprocess.run([sys.executable, "-m", "specrepro.cli", "run", "experiment=eagle_topk_cpu",
                           f"results_dir={results}", f"cache_dir={tmp_path / 'cache'}",
                           "data.gsm8k.url=http://127.0.0.1:9/test.jsonl"],
                          cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "data.gsm8k.url: http://127.0.0.1:9/test.jsonl could not be fetched" in out
    assert f"put the file at {tmp_path / 'cache'}/datasets/gsm8k/test.jsonl (sha256 3730d312" in out
    assert "or set data.gsm8k.path=FILE" in out
    assert "Traceback" not in out
    assert not (results / "source").exists() and not (results / "arms").exists()
    # offline, the same is said before anything runs, by the config itself
    offline = subprocess.run([sys.executable, "-m", "specrepro.cli", "plan", "experiment=eagle_topk_cpu", "offline=true",
                              f"cache_dir={tmp_path / 'cache'}", "--no-resolve"],
                             cwd=ROOT, capture_output=True, text=True, env=env)
    assert offline.returncode == 2 and "Traceback" not in offline.stderr
    assert "data.gsm8k.path: " in offline.stderr and "(offline=true): put the file there" in offline.stderr
