"""The gpu_check stage: judged records from a real H200 run, and the stage itself on this CPU.

tests/data/gpu_check/h200_probe_*.json are the probe's own records from a lent
NVIDIA H200 (torch 2.11.0+cu130, driver 580.159.04), run by
tests/gpu/run_probe_on_device.sh on sglang 0.5.20's source, patched and
unpatched; only sgl_kernel and flashinfer were import-only placeholders, never
called.  On this CPU the stage runs for real: the eager half executes, the
graph half is reported as not executed.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from conftest import ROOT
from specrepro.config import compose
from specrepro.gpu_check import GpuCheckError, gpu_check_stage, judge, refuse_failed, render_markdown

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


def test_h200_record_of_the_unpatched_tree_is_the_control_that_shows_the_bug():
    record = json.loads((DATA / "h200_probe_unpatched.json").read_text())
    verdict = judge(record, patched_arm=False)
    checks = by_name(verdict)
    assert verdict["role"] == "control" and verdict["passed"] and verdict["bug_visible"]
    assert not checks["greedy_rows_propose_argmax"]["passed"]
    assert not checks["graph_replay_with_real_top_ks_proposes_argmax"]["passed"]
    assert not checks["graph_runner_carries_top_ks"]["passed"]
    # judged as if it were the patched arm, it fails: that is what stops a broken patch before the arms
    assert not judge(record, patched_arm=True)["passed"]


def test_a_failed_patched_gpu_check_refuses_the_arm(tmp_path):
    record = json.loads((DATA / "h200_probe_unpatched.json").read_text())
    verdict = {**judge(record, patched_arm=True), "arm": "pr_rs_on"}
    path = tmp_path / "verdict.json"
    path.write_text(json.dumps(verdict))
    with pytest.raises(GpuCheckError, match="arm pr_rs_on: gpu_check failed .*greedy_rows_propose_argmax"):
        refuse_failed([path])
    control = tmp_path / "control.json"
    control.write_text(json.dumps({**judge(record, patched_arm=False), "arm": "main_rs_on"}))
    refuse_failed([control])  # the control is never refused for showing the bug


@pytest.mark.e2e
@pytest.mark.parametrize("arm,patched", [("pr_rs_on", True), ("main_rs_on", False)])
def test_the_stage_on_this_cpu_runs_the_eager_half_and_reports_the_graph_half(cpu_campaign, check_python, tmp_path,
                                                                              arm, patched):
    results = cpu_campaign["results"]
    tree = results / ("patch/v0.5.20/eagle_topk/tree" if patched else "source/v0.5.20/tree")
    cfg = compose([f"results_dir={tmp_path}", "platform=local", f"platform.python={check_python}",
                   "gpu_check.enabled=always", "gpu_check.greedy_rows=512"])
    image = tmp_path / "image.json"
    image.write_text(json.dumps({"kind": "tree", "python": str(check_python), "pythonpath": str(tree)}))
    out = tmp_path / "gpu_check" / arm / "verdict.json"
    verdict = gpu_check_stage(cfg, arm, image, out, out.with_suffix(".md"), io.StringIO())
    checks = by_name(verdict)
    assert verdict["device"] == "cpu" and not verdict["graph_executed"]
    assert checks["graph_capture_and_replay"]["executed"] is False
    assert "not executed: needs a GPU" in out.with_suffix(".md").read_text()
    assert verdict["passed"]  # patched: every executed check passes; control: the bug shows
    assert checks["greedy_rows_propose_argmax"]["passed"] is patched
    assert json.loads(out.read_text())["role"] == ("patched" if patched else "control")
