"""The seed series' GPU check (patches/eagle_topk/checks: probe_gpu.py, judge_gpu.py) and the generic gpu_check stage:
judged records from a real H200 run, and the stage itself on this CPU.

tests/data/gpu_check/h200_probe_*.json are the probe's own records from a lent
NVIDIA H200 (torch 2.11.0+cu130, driver 580.159.04), run by
tests/gpu/run_probe_on_device.sh on sglang 0.5.20's source: patched, unpatched,
and mixed (the release's graph runner under the patched proposal and worker
call).  sgl_kernel and flashinfer were import-only placeholders, never called,
except sgl_kernel.fast_topk, a pure-torch function in sgl_kernel, resolved to
sglang's own identical fallback.  On this CPU the stage runs for real: the eager
half and sglang's graph runner (through an eager stand-in for the graph backend)
execute, the CUDA graphs are reported as not executed.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from conftest import ROOT, series_copy, series_module
from specrepro.core.campaign import Campaign
from specrepro.core.config import compose
from specrepro.stages.gpu_check import GpuCheckError, gpu_check_stage, refuse_failed

judge_gpu = series_module("eagle_topk", "judge_gpu")
judge, runner_checks = judge_gpu.judge, judge_gpu.runner_checks

DATA = ROOT / "tests" / "data" / "gpu_check"


def by_name(verdict):
    return {c["check"]: c for c in verdict["checks"]}


def test_h200_record_of_the_patched_tree_passes_every_check():
    record = json.loads((DATA / "h200_probe_patched.json").read_text())
    verdict = judge(record, patched_arm=True)
    checks = by_name(verdict)
    assert verdict["passed"] and verdict["graph_executed"] and verdict["gpu_name"] == "NVIDIA H200"
    assert all(c["executed"] for c in verdict["checks"])
    assert record["eager"]["greedy"]["non_argmax"] == 0 and record["eager"]["greedy"]["rows"] == 4096
    assert record["graph"]["refilled"]["non_argmax"] == 0 and record["graph"]["refilled"]["rows"] == 16000
    # the same graph without the producer half loses what the seed describes: about a quarter of greedy rows
    assert 0.2 < record["graph"]["producer_missing"]["non_argmax"] / 16000 < 0.35
    assert checks["host_top_ks_asserts"]["passed"]
    # sglang's own EAGLEDraftCudaGraphRunner, captured through its FULL backend at 1, 2, 4, 8 and replayed
    runner = record["graph_runner"]
    assert runner["graph_backend"].startswith("sglang FULL") and runner["captured_sizes"] == [1, 2, 4, 8]
    assert runner["buffer"]["device"] == "cuda:0" and runner["buffer"]["all_top_k_all"]
    assert all(seen["is_buffer_view"] for seen in runner["captured"].values())
    assert [(r["rows"], r["padded_to"], r["greedy_missed"], r["greedy_rows"]) for r in runner["replays"]] == [
        (8, 8, 0, 8000), (5, 8, 0, 6000), (3, 4, 0, 4000)]
    assert all(0.2 < r["sampled_missed"] / r["sampled_rows"] < 0.35 for r in runner["replays"])


def test_h200_record_of_the_unpatched_tree_is_the_control_that_shows_the_bug():
    record = json.loads((DATA / "h200_probe_unpatched.json").read_text())
    verdict = judge(record, patched_arm=False)
    checks = by_name(verdict)
    assert verdict["passed"] and verdict["bug_visible"] and "shows the bug" in verdict["summary"]
    assert {c["tree"] for c in verdict["checks"]} == {"unpatched"}
    assert not checks["greedy_rows_propose_argmax"]["passed"]
    assert not checks["graph_replay_with_real_top_ks_proposes_argmax"]["passed"]
    assert not checks["graph_runner_carries_top_ks"]["passed"]
    # the release's runner captured a host-side -1 placeholder, and greedy rows sampled through the graph
    runner = record["graph_runner"]
    assert runner["buffer"] is None and {seen["device"] for seen in runner["captured"].values()} == {"cpu"}
    assert not checks["graph_runner_captures_the_buffer"]["passed"]
    assert all(0.2 < r["greedy_missed"] / r["greedy_rows"] < 0.35 for r in runner["replays"])
    # judged as if it were the patched arm, it fails: that is what stops a broken patch before the arms
    assert not judge(record, patched_arm=True)["passed"]


def test_h200_record_of_a_runner_without_the_producer_half_fails_at_capture():
    # the release's graph runner under the patched proposal and worker call: the server would not start
    record = json.loads((DATA / "h200_probe_mixed.json").read_text())
    verdict = judge(record, patched_arm=True)
    checks = by_name(verdict)
    assert not verdict["passed"] and checks["greedy_rows_propose_argmax"]["passed"]
    assert not checks["graph_runner_driven"]["passed"]
    assert "AssertionError: sample_draft_proposal: top_ks is on cpu" in checks["graph_runner_driven"]["detail"]


def stage_verdict(arm, role, judged):
    """The gpu_check stage's verdict of one arm around one judged check (as gpu_check_stage writes it)."""
    return {"arm": arm, "passed": judged["passed"],
            "results": [{**judged, "series": "eagle_topk", "name": "draft_graph", "role": role}]}


def test_a_failed_patched_gpu_check_refuses_the_arm(tmp_path):
    record = json.loads((DATA / "h200_probe_unpatched.json").read_text())
    path = tmp_path / "verdict.json"
    path.write_text(json.dumps(stage_verdict("pr_rs_on", "patched", judge(record, patched_arm=True))))
    with pytest.raises(GpuCheckError, match="arm pr_rs_on: gpu_check failed .*eagle_topk/draft_graph: "
                                            ".*greedy_rows_propose_argmax"):
        refuse_failed([path])
    control = tmp_path / "control.json"
    control.write_text(json.dumps(stage_verdict("main_rs_on", "control", judge(record, patched_arm=False))))
    refuse_failed([control])  # the control is never refused for showing the bug


def test_the_judge_speaks_the_check_protocol(tmp_path):
    """The judge as the stage runs it: its command line and the verdict file (patches/README.md)."""
    import subprocess
    import sys

    out = tmp_path / "v.json"
    proc = subprocess.run([sys.executable, str(ROOT / "patches/eagle_topk/checks/judge_gpu.py"), "--out", str(out),
                           "--record", f"unpatched={DATA / 'h200_probe_unpatched.json'}", "--role", "control"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    verdict = json.loads(out.read_text())
    assert verdict["passed"] is True and verdict["checks"] and verdict["summary"]
    assert all({"check", "tree", "passed", "executed", "detail"} <= set(c) for c in verdict["checks"])


@pytest.mark.e2e
@pytest.mark.parametrize("arm,patched", [("pr_rs_on", True), ("main_rs_on", False)])
def test_the_stage_on_this_cpu_runs_the_eager_half_and_reports_the_graph_half(cpu_campaign, check_python, tmp_path,
                                                                              arm, patched):
    results = cpu_campaign["results"]
    tree = results / ("patch/v0.5.20/eagle_topk/tree" if patched else "source/v0.5.20/tree")
    # the series' own GPU check with fewer rows and replays: a CPU runs them eagerly
    series = series_copy("eagle_topk", tmp_path / "eagle_topk",
                         draft_graph=["--greedy-rows", "512", "--runner-replays", "40"])
    cfg = compose([f"results_dir={tmp_path}", "platform=local", f"platform.python={check_python}",
                   "gpu_check.enabled=always", f"experiment.patch_series.eagle_topk={series}"])
    image = tmp_path / "image.json"
    image.write_text(json.dumps({"kind": "tree", "python": str(check_python), "pythonpath": str(tree)}))
    out = tmp_path / "gpu_check" / arm / "verdict.json"
    campaign = Campaign(cfg)
    stage = gpu_check_stage(campaign.plan(arm), campaign.gpu_checked_series(arm), image, out, out.with_suffix(".md"),
                            io.StringIO())
    [verdict] = stage["results"]
    checks = by_name(verdict)
    assert verdict["device"] == "cpu" and not verdict["graph_executed"]
    assert checks["graph_capture_and_replay"]["executed"] is False
    assert "not executed: needs a GPU" in out.with_suffix(".md").read_text()
    assert stage["passed"] and verdict["passed"]  # patched: every executed check passes; control: the bug shows
    assert checks["greedy_rows_propose_argmax"]["passed"] is patched
    assert verdict["role"] == ("patched" if patched else "control")
    # sglang's own graph runner, driven eagerly here: the buffer, its captured views and the replay copy
    runner = json.loads(Path(verdict["record"]).read_text())["graph_runner"]
    assert "EagerBackend" in runner["graph_backend"] and runner["captured_sizes"] == [1, 2, 4, 8]
    for name in ("graph_runner_top_ks_buffer", "graph_runner_captures_the_buffer",
                 "graph_runner_replay_greedy_rows_propose_argmax"):
        assert checks[name]["executed"] and checks[name]["passed"] is patched, checks[name]
    greedy_missed = sum(r["greedy_missed"] for r in runner["replays"])
    assert (greedy_missed == 0) is patched
    assert [(r["rows"], r["padded_to"]) for r in runner["replays"]] == [(8, 8), (5, 8), (3, 4)]


def runner_record(**overrides):
    """A probe record's graph_runner part, as probe_graph_runner writes it (patched tree, on a GPU)."""
    record = {"graph_backend": "sglang FULL (torch.cuda.CUDAGraph)", "capture_bs": [1, 2, 4, 8],
              "captured_sizes": [1, 2, 4, 8],
              "buffer": {"device": "cuda:0", "dtype": "int32", "size": 8, "all_top_k_all": True, "data_ptr": 7},
              "captured": {str(bs): {"device": "cuda:0", "dtype": "int32", "data_ptr": 7, "values": None,
                                     "is_buffer_view": True} for bs in (1, 2, 4, 8)},
              "replays": [{"rows": 8, "padded_to": 8, "expected_padded_to": 8, "replays": 10, "greedy_rows": 80,
                           "greedy_missed": 0, "sampled_rows": 80, "sampled_missed": 15}]}
    record.update(overrides)
    return record


@pytest.mark.parametrize("change,failing", [
    ({}, None),
    ({"buffer": None}, "graph_runner_top_ks_buffer"),
    ({"buffer": {"device": "cpu", "dtype": "int32", "size": 8, "all_top_k_all": True, "data_ptr": 7}},
     "graph_runner_top_ks_buffer"),
    ({"buffer": {"device": "cuda:0", "dtype": "int32", "size": 8, "all_top_k_all": False, "data_ptr": 7}},
     "graph_runner_top_ks_buffer"),
    ({"captured_sizes": [8]}, "graph_runner_captures_the_buffer"),
    ({"captured": {"8": {"device": "cpu", "dtype": "int32", "data_ptr": 9, "values": [-1], "is_buffer_view": False}}},
     "graph_runner_captures_the_buffer"),
    ({"replays": [{"rows": 5, "padded_to": 8, "expected_padded_to": 8, "replays": 10, "greedy_rows": 60,
                   "greedy_missed": 1, "sampled_rows": 40, "sampled_missed": 9}]},
     "graph_runner_replay_greedy_rows_propose_argmax"),
    # sampled rows that never sample mean the rows are all read as greedy (a -1 fill would do that)
    ({"replays": [{"rows": 8, "padded_to": 8, "expected_padded_to": 8, "replays": 10, "greedy_rows": 80,
                   "greedy_missed": 0, "sampled_rows": 80, "sampled_missed": 0}]},
     "graph_runner_replay_greedy_rows_propose_argmax"),
    ({"replays": [{"rows": 5, "padded_to": 5, "expected_padded_to": 8, "replays": 10, "greedy_rows": 60,
                   "greedy_missed": 0, "sampled_rows": 40, "sampled_missed": 9}]},
     "graph_runner_replay_greedy_rows_propose_argmax"),
])
def test_graph_runner_checks_fail_on_each_broken_part(change, failing):
    checks = {c["check"]: c for c in runner_checks(runner_record(**change), "cuda", 1 << 30)}
    assert set(checks) == {"graph_runner_top_ks_buffer", "graph_runner_captures_the_buffer",
                           "graph_runner_replay_greedy_rows_propose_argmax"}
    assert [name for name, c in checks.items() if not c["passed"]] == ([failing] if failing else [])


def test_a_graph_runner_that_raises_fails_the_patched_arm_and_an_old_record_says_not_executed():
    [raised] = runner_checks({"error": "AssertionError: sample_draft_proposal: top_ks is on cpu"}, "cuda", 1 << 30)
    assert raised["executed"] and not raised["passed"] and "AssertionError" in raised["detail"]
    [absent] = runner_checks(None, "cuda", 1 << 30)
    assert not absent["executed"] and "not in this probe's record" in absent["detail"]
