"""The sharpen_draft series (patches/sharpen_draft): the second change, brought as files only.

Its patch, and a deliberately broken variant of it (tests/data/series/sharpen_draft_broken.patch: X drawn
from the sharpened q, the unsharpened q returned), go through the pipeline's own patch and patch_check stages
(specrepro.stages.sources.patch_stage, specrepro.stages.patch_check.patch_check: the generic checks, then the series' probe and
judge through the check protocol of patches/README.md) on the pristine sglang 0.5.20 release.  The good patch passes
every check with the numbers the seeded cases give; the broken one fails, naming the check that catches the bias;
and in a whole campaign (real Snakemake, the stand-in server) it blocks its own arm only.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Dict

import pytest
import yaml

from conftest import ROOT, specrepro, write_behaviour

SERIES = ROOT / "patches" / "sharpen_draft"
BROKEN = ROOT / "tests" / "data" / "series" / "sharpen_draft_broken.patch"
# The campaign's cache_dir (conf: ${env_or:SPECREPRO_CACHE_DIR,${project_root}/.cache}).
CACHE = Path(os.environ.get("SPECREPRO_CACHE_DIR") or ROOT / ".cache")
VERSION = "0.5.20"
SPEC_UTILS = "sglang/srt/speculative/spec_utils.py"

PATCHED_CHECKS = {"q_is_sharpened_softmax", "draws_follow_returned_q", "q_of_x_is_gather_of_q",
                  "sharper_than_unpatched", "signature_unchanged", "call_sites_unchanged"}
CONTROL_CHECKS = {"q_is_softmax_at_T", "draws_follow_returned_q"}


def series_spec() -> dict:
    return yaml.safe_load((SERIES / "series.yaml").read_text())


def pristine_tree() -> Path:
    """sglang 0.5.20's release, unpacked once into the cache (installed layout: <tree>/sglang)."""
    from specrepro.stages.sources import cached_release_tree

    return cached_release_tree(VERSION, CACHE, io.StringIO())


def broken_series(dest: Path) -> Path:
    """The series with its patch replaced by the broken variant: a user's mistake, same folder, same checks."""
    shutil.copytree(SERIES, dest, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(BROKEN, dest / "0001-eagle-sharpen-draft-proposal.patch")
    return dest


def apply(patch: Path, tree: Path, strip: int) -> str:
    """GNU patch as the patch stage applies a series: no fuzz, checked first, then applied."""
    base = ["patch", f"-p{strip}", "--fuzz=0", "--batch", "--forward", "-d", str(tree), "-i", str(patch)]
    for extra in (["--dry-run"], []):
        proc = subprocess.run(base + extra, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "offset" not in proc.stdout and "fuzz" not in proc.stdout, proc.stdout
    return proc.stdout


def copy_tree(src: Path, dst: Path) -> Path:
    shutil.copytree(src / "sglang", dst / "sglang", ignore=shutil.ignore_patterns("__pycache__"))
    return dst


def checked(series_dir: Path, base: Path) -> dict:
    """The patch and patch_check stages on one series folder, as the DAG runs them."""
    from specrepro.stages.patch_check import patch_check
    from specrepro.stages.sources import patch_stage

    base.mkdir(parents=True, exist_ok=True)
    manifest = base / "source_manifest.json"
    manifest.write_text(json.dumps({"layout": "installed", "package_dir": "sglang", "version": VERSION}))
    tree = base / "tree"
    record = patch_stage(manifest, pristine_tree(), series_dir, series_dir.name, CACHE, tree,
                         base / "manifest.json", io.StringIO())
    return patch_check(series=series_dir.name, sglang={"version": VERSION}, source_tree=pristine_tree(),
                       source_manifest={"package_dir": "sglang"}, patched_tree=tree, patch_manifest=record,
                       series_dir=series_dir, requirements=ROOT / "requirements" / "sglang-cpu.txt", cache_dir=CACHE,
                       work_dir=base / "work",
                       log=io.StringIO())


def by_name(verdict: dict, tree: str) -> Dict[str, dict]:
    return {c["check"]: c for c in verdict["results"][0]["checks"] if c["tree"] == tree}


# ----------------------------------------------------------- the series' files (no sglang env needed)


def test_series_yaml_names_its_files_and_one_cpu_check():
    spec = series_spec()
    assert set(spec) == {"title", "description", "source", "patches", "checks"}  # no reference_sglang
    assert spec["title"].startswith("[ROCm] EAGLE: sharpen the draft proposal")
    assert (SERIES / spec["source"]).is_file()
    assert [p["path"] for p in spec["patches"]] == ["0001-eagle-sharpen-draft-proposal.patch"]
    assert all((SERIES / p["path"]).is_file() for p in spec["patches"])
    [check] = spec["checks"]
    assert check == {"name": "draft_proposal", "where": "cpu", "probe": "checks/probe.py",
                     "trees": ["patched", "unpatched"], "judge": "checks/judge.py"}
    for part in ("probe", "judge"):
        source = (SERIES / check[part]).read_text()
        assert "import specrepro" not in source and "from specrepro" not in source


def test_patch_header_and_pr_text():
    header = (SERIES / "0001-eagle-sharpen-draft-proposal.patch").read_text().split("\n---\n")[0]
    for word in ("What:", "Why:", "Scope:", "DRAFT_PROPOSAL_TEMPERATURE_SCALE = 0.8", "_draft_extend_for_prefill"):
        assert word in header
    pr = (SERIES / "PR.md").read_text()
    for word in ("Problem", "Fix", "Usage", "Results", "to be measured", "_draft_extend_for_prefill",
                 "restores the rejection-sampling-off level"):
        assert word in pr


@pytest.mark.e2e
def test_patch_applies_to_both_layouts_without_fuzz(tmp_path):
    pristine = pristine_tree()
    installed = copy_tree(pristine, tmp_path / "installed")
    apply(SERIES / "0001-eagle-sharpen-draft-proposal.patch", installed, 2)
    repo = tmp_path / "repo"
    (repo / "python" / SPEC_UTILS).parent.mkdir(parents=True)
    shutil.copy(pristine / SPEC_UTILS, repo / "python" / SPEC_UTILS)
    apply(SERIES / "0001-eagle-sharpen-draft-proposal.patch", repo, 1)
    assert (repo / "python" / SPEC_UTILS).read_text() == (installed / SPEC_UTILS).read_text()
    text = (installed / SPEC_UTILS).read_text()
    assert "DRAFT_PROPOSAL_TEMPERATURE_SCALE = 0.8" in text
    assert "def sample_draft_proposal(next_token_logits: torch.Tensor, temperatures: torch.Tensor):" in text


# ----------------------------------------------------------- the check protocol, end to end


@pytest.fixture(scope="module")
def stages(tmp_path_factory):
    """patch_check's verdicts of the series and of its broken variant (each probe ~10 s on one core)."""
    base = tmp_path_factory.mktemp("sharpen_draft")
    return {"good": checked(SERIES, base / "good"),
            "broken": checked(broken_series(base / "sharpen_draft_broken"), base / "broken")}


@pytest.mark.e2e
def test_good_patch_passes_every_check(stages):
    stage = stages["good"]
    assert stage["passed"] and stage["behavioural_checks"] == ["draft_proposal"] and stage["gpu_checks"] == []
    assert all(c["passed"] and c["executed"] for c in stage["generic"]), stage["generic"]
    [verdict] = stage["results"]
    patched, control = by_name(stage, "patched"), by_name(stage, "unpatched")
    assert set(patched) == PATCHED_CHECKS and set(control) == CONTROL_CHECKS
    assert verdict["passed"], json.dumps(verdict, indent=1)
    assert all(c["passed"] for c in verdict["checks"]), json.dumps(verdict, indent=1)

    # (a) q is softmax(logits / (T * 0.8)), and visibly not softmax(logits / T)
    assert patched["q_is_sharpened_softmax"]["max_abs_diff"] <= 1e-6
    assert patched["q_is_sharpened_softmax"]["max_abs_diff_other_reference"] > 0.1
    # (b) draws follow the returned q
    draws = patched["draws_follow_returned_q"]
    assert draws["chi2_p_T1"] >= 1e-3 and draws["chi2_p_T0.7"] >= 1e-3
    assert abs(draws["argmax_hits_z_T1"]) <= 4 and abs(draws["argmax_hits_z_T0.7"]) <= 4
    # (c) q(X) is q.gather(X)
    assert patched["q_of_x_is_gather_of_q"]["max_abs_diff"] <= 1e-6
    # (d) sharper: on the seeded sharp rows, ~0.76 -> ~0.87 at T = 1 (the softmaxes predict +0.104)
    sharp = patched["sharper_than_unpatched"]
    assert 0.72 <= sharp["p_argmax_unpatched_T1"] <= 0.80 and 0.83 <= sharp["p_argmax_patched_T1"] <= 0.90
    assert 0.08 <= sharp["gain_T1"] <= 0.13 and 0.02 <= sharp["gain_T0.7"] <= 0.06
    # (e) control: the pin's q is softmax(logits / T), drawn from it
    assert control["q_is_softmax_at_T"]["max_abs_diff"] <= 1e-6
    assert control["draws_follow_returned_q"]["chi2_p_T1"] >= 1e-3
    # (f) signature and callers unchanged
    assert patched["signature_unchanged"]["signature"] == \
        "(next_token_logits: 'torch.Tensor', temperatures: 'torch.Tensor')"
    assert patched["call_sites_unchanged"]["executed"] is False and patched["call_sites_unchanged"]["calls"] == 2
    assert "sharpened q" in verdict["summary"]


@pytest.mark.e2e
def test_broken_patch_fails_on_the_returned_q(stages):
    """X drawn from the sharpened q, softmax(logits / T) returned: the verify would be biased."""
    from specrepro.stages.patch_check import failed_checks

    stage = stages["broken"]
    # it applies, compiles and imports: only the series' own check can see what is wrong
    assert all(c["passed"] for c in stage["generic"]) and stage["passed"] is False
    assert failed_checks(stage) == ["draft_proposal/q_is_sharpened_softmax", "draft_proposal/draws_follow_returned_q"]
    [verdict] = stage["results"]
    patched = by_name(stage, "patched")
    assert verdict["passed"] is False
    failed = {name for name, c in patched.items() if not c["passed"]}
    assert failed == {"draws_follow_returned_q", "q_is_sharpened_softmax"}
    draws = patched["draws_follow_returned_q"]
    assert draws["chi2_p_T1"] < 1e-20 and draws["chi2_p_T0.7"] < 1e-20
    assert draws["argmax_hits_z_T1"] > 10
    assert patched["q_is_sharpened_softmax"]["max_abs_diff"] > 0.1
    # What the broken patch gets right is still seen as right: it is sharper, and q(X) is read from its q.
    assert patched["sharper_than_unpatched"]["passed"] and patched["q_of_x_is_gather_of_q"]["passed"]
    assert "draws_follow_returned_q" in verdict["summary"] and "biased" in verdict["summary"]


@pytest.mark.e2e
def test_in_a_campaign_the_broken_variant_blocks_its_own_arm_only(tmp_path, standin_assets, check_python):
    """The second campaign from its files, plus an arm of the broken series, through real Snakemake on the stand-in
    server: the broken series' patch_check fails and its arm's image is refused naming the check; every other arm
    is measured, and nothing already measured is lost."""
    results = tmp_path / "results"
    broken = broken_series(tmp_path / "sharpen_draft_broken")
    behaviour = write_behaviour(tmp_path / "behaviour.json", standin_assets)
    env = {"SPECREPRO_TEST_PYTHON": str(check_python), "SPECREPRO_STANDIN_BEHAVIOUR": str(behaviour)}
    proc = specrepro(
        "run", f"hydra.searchpath=[file://{ROOT / 'tests' / 'conf'}]", "experiment=sharpen_draft", "platform=standin",
        f"results_dir={results}", f"model.server_args.model_path={standin_assets / 'tokenizer'}",
        "experiment.repeats=1", "benchmarks.gsm8k.gsm8k.num_questions=8", "benchmarks.gsm8k_sampled.gsm8k.num_questions=8",
        "serve.ready_timeout_s=60", "serve.shutdown_grace_s=5", "serve.warmup_requests=1",
        "preflight.resolve_server_args=false",
        f"+experiment.patch_series.sharpen_draft_broken={broken}",
        "+arm/sharpen_draft@experiment.arms.broken_rs_on=sharpen_rs_on",
        "experiment.arms.broken_rs_on.patch_series=sharpen_draft_broken",
        "--", "--keep-going", env=env, check=False, timeout=3000)
    assert proc.returncode != 0
    verdict = json.loads((results / "patch_check" / "v0.5.20" / "sharpen_draft_broken" / "verdict.json").read_text())
    assert verdict["passed"] is False
    assert json.loads((results / "patch_check" / "v0.5.20" / "sharpen_draft" / "verdict.json").read_text())["passed"]
    # the broken series' arm: refused before any server, naming the series and the check
    assert not (results / "image" / "broken_rs_on.json").exists() and not (results / "arms" / "broken_rs_on").exists()
    refusal = (results / "logs" / "image" / "broken_rs_on.log").read_text()
    assert "patch_check of series sharpen_draft_broken failed (draft_proposal/q_is_sharpened_softmax" in refusal
    # ... and the run's last word says so too
    assert "patch_check of series sharpen_draft_broken failed" in proc.stderr
    # every other arm was measured
    for arm in ("main_rs_off", "main_rs_on", "sharpen_rs_on"):
        assert (results / "arms" / arm / "arm.json").is_file(), arm
