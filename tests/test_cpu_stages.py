"""Issue 3's claims on the real thing: the main job's CPU stages, sglang 0.5.20 and 0.5.21 from the registry."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest

from specrepro.core.config import PROJECT_ROOT
from specrepro.stages.patch_check import requirements_file
from specrepro.upstream.sglang_env import ensure_env, env_key

pytestmark = pytest.mark.e2e


def checks(verdict, tree):
    from specrepro.stages.patch_check import verdict_rows

    return {c["check"]: c for c in verdict_rows(verdict) if c.get("tree") == tree}


def test_main_job_runs_source_patch_patch_check_for_real(cpu_campaign):
    results = cpu_campaign["results"]
    source = json.loads(next(results.glob("source/*/manifest.json")).read_text())
    assert source["version"] == "0.5.20" and source["version_in_tree"] == "0.5.20"
    assert len(source["archive_sha256"]) == 64 or source["method"] == "git"
    patch = json.loads(next(results.glob("patch/*/*/manifest.json")).read_text())
    assert patch["patches"][0]["patch"].startswith("0001-") and len(patch["patches"][0]["sha256"]) == 64
    assert "PASS" in cpu_campaign["stdout"] and "What needs a GPU" in cpu_campaign["stdout"]
    # the generic checks every series gets, then the series' own (patches/eagle_topk/series.yaml)
    verdict = cpu_campaign["verdict"]
    assert [c["check"] for c in verdict["generic"]] == ["applies_without_fuzz", "recorded_hashes",
                                                        "touched_files_compile", "touched_modules_import"]
    assert all(c["passed"] and c["executed"] for c in verdict["generic"]), verdict["generic"]
    assert "3 patched module(s) import on a CPU" in verdict["generic"][3]["detail"]
    assert [r["name"] for r in verdict["results"]] == ["draft_proposal"]
    assert verdict["title"] == "EAGLE: carry real top_k into the draft proposal"


def test_patched_tree_passes_every_check(cpu_campaign):
    verdict = cpu_campaign["verdict"]
    assert verdict["passed"]
    patched = checks(verdict, "patched")
    assert all(c["passed"] for c in patched.values()), [c for c in patched.values() if not c["passed"]]
    assert patched["greedy_rows_propose_argmax"]["rows"] >= 2000
    assert patched["sampled_rows_draw_from_q"]["chi2_p"] > 1e-3
    # the CUDA-graph half is structural only, and says so
    assert not patched["cuda_graph_replay_copies_top_ks"]["executed"]
    assert "needs a GPU" in patched["cuda_graph_replay_copies_top_ks"]["detail"]


def test_checks_see_the_bug_on_unpatched_0_5_20(cpu_campaign):
    unpatched = checks(cpu_campaign["verdict"], "unpatched")
    bug = unpatched["bug_visible_on_unpatched"]
    assert bug["passed"] and bug["non_argmax"] > 0.1 * bug["rows"]
    # the graph runner of 0.5.20 lacks what the patch adds: shown, as expected
    assert unpatched["cuda_graph_capture_uses_buffer_absent"]["passed"]


def test_patched_agrees_with_upstream_0_5_21(cpu_campaign):
    assert checks(cpu_campaign["verdict"], "patched")["agrees_with_sglang_0.5.21"]["passed"]


def test_results_are_in_mlflow(cpu_campaign):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{cpu_campaign['results']}/mlflow.db")
    exp = client.get_experiment_by_name("specrepro/eagle_topk_greedy")
    run = next(r for r in client.search_runs([exp.experiment_id]) if r.info.run_name.startswith("patch_check/"))
    assert run.data.metrics["passed"] == 1.0
    assert run.data.metrics["patched.greedy_rows_propose_argmax"] == 1.0
    assert run.data.metrics["unpatched.bug_visible_on_unpatched"] == 1.0
    assert run.data.metrics["patched.touched_modules_import"] == 1.0
    assert run.data.tags["executed_on"] == "cpu"


def test_check_env_is_reused(cpu_campaign):
    """Keyed by (requirements, Python): a second run gets the same env back at once, with no sglang inside
    (each probe puts the tree it tests first on PYTHONPATH)."""
    verdict = cpu_campaign["verdict"]
    assert env_key(requirements_file(PROJECT_ROOT)) == verdict["env"]["key"]
    start = time.monotonic()
    again = ensure_env(PROJECT_ROOT / ".cache", requirements_file(PROJECT_ROOT), io.StringIO())
    assert again["reused"] and again["path"] == verdict["env"]["path"]
    assert time.monotonic() - start < 5
    assert not list(Path(again["path"]).glob("lib/python*/site-packages/sglang"))
