"""What `specrepro run` did on a lent NVIDIA H100 (tests/gpu/run_dag_on_device.sh, issue #38), judged by today's code
from the run's own records under tests/data/gpu/ (README.md there says where and when they were made).

Two device calls, 2026-12-07 (the session's device time allowed 290 s and 130 s of the script): call 1 ran the DAG,
killed pr_rs_on's first server during its first GSM8K repeat, ran the same command again, and was stopped at its
budget as Ctrl-C would stop it; call 2 put call 1's records back (`.gpu-resume/`) and went on until its own budget.
Round 1 of `experiment.launches={min: 2, max: 3}` was not finished (6 of its 10 launches ended ok), so no round was
decided, no report written: what the records show is the DAG's measuring jobs on a GPU -- the interpreter's check,
launches with and without CUDA graphs, accept length against the toy model's theory, a killed server, two budget stops
and two resumes measuring only what was missing, the node's time per launch and the GPU's memory after each
teardown.
"""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest
import yaml

from conftest import ROOT, SHARED_GSM8K
from gpu_dag_records import (ARMS, DATA, GRAPH_ARMS, MEMORY_LEFT_MIB, NODE_SECONDS_PER_LAUNCH, RESULTS,
                             cuda_graph_lines, judge_killed_server_and_rerun, launch_events, launches_ok,
                             memory_after_each_launch, records_after)

CALLS = (DATA / "call1", DATA / "call2")
# what each arm's launches measured before the budgets stopped them (round 1's launches 1 and 2 in the interleaved
# order A B C D E E D C B A: the last five are pr_rs_on_nocg's second, then main_rs_on_nocg's, interrupted)
MEASURED = {"main_rs_off": [1], "main_rs_on": [1], "pr_rs_on": [1], "main_rs_on_nocg": [1], "pr_rs_on_nocg": [1, 2]}


def run_records(arm: str) -> list:
    return [json.loads(p.read_text()) for p in sorted((RESULTS / "arms" / arm).glob("launch*/*/r*/run.json"))]


def test_it_ran_on_a_gpu_through_the_dag():
    for call in CALLS:
        assert re.match(r"NVIDIA H100 80GB HBM3, [\d.]+, 81559 MiB\ntorch 2\.11\.0\+cu130 cuda 13\.0",
                        (call / "gpu.txt").read_text())
    resolved = yaml.safe_load((RESULTS / "resolved_config.yaml").read_text())
    assert resolved["platform"]["name"] == "gpu_local_lent" and resolved["platform"]["accelerator"] == "cuda"
    assert resolved["experiment"]["launches"] == {"min": 2, "max": 3} and resolved["offline"] is True
    for arm in ARMS:
        env = json.loads((RESULTS / "image" / f"{arm}.json").read_text())["environment"]
        # the interpreter was read before any server: torch built for CUDA, nothing sglang's server imports missing
        assert env["torch"]["cuda"] and env["missing"] == [] and env["import_error"] is None, env
        assert launches_ok(RESULTS, arm) == MEASURED[arm]
        # each run measured by the launch that ended ok, two repeats a launch
        ok = {e["launch_id"] for e in launch_events(RESULTS, arm) if e["event"] == "end" and e["status"] == "ok"}
        runs = run_records(arm)
        assert len(runs) == 2 * len(MEASURED[arm]) and {r["server_launch"] for r in runs} == ok


def test_graph_arms_decoded_in_cuda_graphs_and_the_controls_never():
    for arm in ARMS:
        lines = cuda_graph_lines(RESULTS, arm)
        if arm in GRAPH_ARMS:
            assert lines.get("True", 0) > 0, (arm, lines)
        else:
            assert lines.get("True", 0) == 0 and lines.get("False", 0) > 0, (arm, lines)
        argv = [e["argv"] for e in launch_events(RESULTS, arm) if e["event"] == "start"]
        assert all(("--disable-cuda-graph" in a) == (arm not in GRAPH_ARMS) for a in argv), (arm, argv)


@pytest.fixture(scope="module")
def theory(tmp_path_factory):
    """The same pair (seed 0) rebuilt here: what its weights predict."""
    from specrepro.toy_model import build_toy_model, corpus_from_jsonl

    out = tmp_path_factory.mktemp("toy")
    return dict(build_toy_model(out, corpus_from_jsonl(SHARED_GSM8K / "test.jsonl")), dir=out)


def test_accept_length_per_arm_agrees_with_the_toy_models_theory(theory):
    from specrepro.analysis.checks import theory_check
    from specrepro.collect import run_rows
    from specrepro.config import theory_entries
    from specrepro.theory import predictions
    from specrepro.toy_model import acceptance

    records = [r for arm in ARMS for r in run_records(arm)]
    runs = pd.DataFrame([row for r in records for row in run_rows(r)])
    requests = pd.DataFrame([{"arm": r["arm"], "benchmark": r["benchmark"], **q} for r in records
                             for q in r.get("requests") or []])
    experiment = yaml.safe_load((ROOT / "conf" / "experiment" / "eagle_topk_toy_gpu.yaml").read_text())
    model = {"server_args": {"speculative_num_steps": 3}, "toy": {}}
    rows = {(r["arm"], r["benchmark"]): r for r in theory_check(
        runs, requests, predictions(theory_entries(experiment), model, lambda t: acceptance(theory["dir"], t)))}
    for arm in ARMS:
        assert rows[(arm, "gsm8k")]["agrees"] is True, rows[(arm, "gsm8k")]
    al = runs[runs.metric == "accept_length"].groupby("arm")["value"].mean()
    # the PR's mechanism on the GPU: rejection sampling costs accept length, the patch restores it, graphs or not
    for unpatched, patched in (("main_rs_on", "pr_rs_on"), ("main_rs_on_nocg", "pr_rs_on_nocg")):
        assert al[unpatched] < 0.9 * al[patched] and al[unpatched] < 0.9 * al["main_rs_off"], al.to_dict()
        assert abs(al[patched] / theory["argmax_accept_length"] - 1) <= 0.02, al.to_dict()


def test_the_killed_server_stopped_run_1_and_the_rerun_measured_only_what_was_missing():
    judge_killed_server_and_rerun(CALLS[0], RESULTS)


def test_each_budget_stop_ended_its_launch_and_the_next_call_measured_only_what_was_missing():
    stops = [CALLS[0] / "run2.log", CALLS[1] / "run1.log"]
    for log in stops:
        text = log.read_text()
        assert "stopped at the budget" in text and "KeyboardInterrupt: signal 2" in text, text[-2000:]
    interrupted = [e for arm in ARMS for e in launch_events(RESULTS, arm)
                   if e["event"] == "end" and (e.get("error") or "").startswith("KeyboardInterrupt")]
    # one launch a stop, each torn down (its teardown timed) and recorded as failed, not as measured
    assert len(interrupted) == 2 and all(e["status"] == "failed" and "teardown_s" in e["timings"]
                                         for e in interrupted), interrupted
    after_call1 = records_after((CALLS[0] / "launch_records.txt").read_text())["run2"]
    after_call2 = records_after((CALLS[1] / "launch_records.txt").read_text())["run1"]
    # call 2 kept every launch record call 1 wrote (put back, with new times) and added only the missing launches
    assert set(after_call1) < set(after_call2)
    assert sorted(set(after_call2) - set(after_call1)) == ["arms/pr_rs_on_nocg/launches/1.json",
                                                           "arms/pr_rs_on_nocg/launches/2.json"]
    for arm in ARMS:  # no launch number measured twice
        assert len(launches_ok(RESULTS, arm)) == len(set(launches_ok(RESULTS, arm)))


def test_the_node_time_per_launch_and_the_memory_left_after_each_teardown():
    for arm in ARMS:
        for e in launch_events(RESULTS, arm):
            if e["event"] == "end" and e["status"] == "ok":
                assert e["timings"]["node_overhead_s"] <= NODE_SECONDS_PER_LAUNCH, (arm, e["timings"])
    checked = []
    for call in CALLS:
        samples = pd.read_csv(call / "gpu_memory.csv")
        checked += memory_after_each_launch(RESULTS, samples)
    # every launch that ended while a call sampled the GPU (each call's ends, the killed and interrupted ones too);
    # a server held about 72 GB while it ran (sglang's memory fraction of the H100)
    ends = [e for arm in ARMS for e in launch_events(RESULTS, arm) if e["event"] == "end"]
    assert {row["launch_id"] for row in checked} == {e["launch_id"] for e in ends} and len(ends) == 9, checked
    assert max(pd.concat([pd.read_csv(c / "gpu_memory.csv") for c in CALLS]).memory_used_mib) > 60_000
    for row in checked:
        assert row["used_mib"] <= row["baseline_mib"] + MEMORY_LEFT_MIB, row
