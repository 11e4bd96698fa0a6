"""What `specrepro run` did on a lent NVIDIA H100 (tests/gpu/run_dag_on_device.sh, issue #38), judged by today's code
from the run's own records under tests/data/gpu/ (README.md there says where and when they were made).

Three device calls, 2026-12-07: call 1 (290 s of the script) ran the DAG, killed pr_rs_on's first server during its
first GSM8K repeat, ran the same command again, and was stopped at its budget as Ctrl-C would stop it; call 2 (130 s)
put call 1's records back (`.gpu-resume/`) and went on until its own budget; call 3 (560 s, another session) put call
2's records back and finished: round 1 of `experiment.launches={min: 2, max: 3}` (10 launches), its decision (no claim
decided: every arm launches again), round 2 (5 launches), the decision that ended the design, collect, the report and
MLflow -- then ran the same command again, which measured nothing.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import ROOT, SHARED_GSM8K
from gpu_dag_records import (ARMS, DATA, GRAPH_ARMS, MEMORY_LEFT_MIB, NODE_SECONDS_PER_LAUNCH, RESULTS,
                             cuda_graph_lines, gpu_hours_used, judge_killed_server_and_rerun, launch_events, launches_ok,
                             memory_after_each_launch, records_after)

CALLS = (DATA / "call1", DATA / "call2", DATA / "call3")
# round 1 decided no claim (two launches of a deterministic arm against a noisy one cross no O'Brien-Fleming
# boundary), so every arm got round 2's third launch
MEASURED = {arm: [1, 2, 3] for arm in ARMS}
DEVICE_RESULTS = "/tmp/specrepro-device/results"


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
    from specrepro.stages.toy_model import build_toy_model, corpus_from_jsonl

    out = tmp_path_factory.mktemp("toy")
    return dict(build_toy_model(out, corpus_from_jsonl(SHARED_GSM8K / "test.jsonl")), dir=out)


def test_accept_length_per_arm_agrees_with_the_toy_models_theory(theory):
    from specrepro.analysis.checks import theory_check
    from specrepro.stages.collect import run_rows
    from specrepro.core.config import theory_entries
    from specrepro.core.theory import predictions
    from specrepro.stages.toy_model import acceptance

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


def test_call_3_kept_every_earlier_launch_and_measured_only_the_missing_ones():
    after_call2 = records_after((CALLS[1] / "launch_records.txt").read_text())["run1"]
    call3 = records_after((CALLS[2] / "launch_records.txt").read_text())
    added = sorted(set(call3["run1"]) - set(after_call2))
    # round 1's four missing launches, then round 2's five
    assert added == sorted({"arms/main_rs_off/launches/2.json", "arms/main_rs_on/launches/2.json",
                            "arms/pr_rs_on/launches/2.json", "arms/main_rs_on_nocg/launches/2.json",
                            *[f"arms/{arm}/launches/3.json" for arm in ARMS]}), added
    starts = {arm: [e for e in launch_events(RESULTS, arm) if e["event"] == "start"] for arm in ARMS}
    # one server start a launch that ended ok, plus the killed one and the two budget stops' -- nothing measured twice
    assert sum(map(len, starts.values())) == 15 + 3
    # the same command run again after the design ended started no server (its launch jobs ran again: a rerun
    # trigger that read the record's own value, fixed since and tested in test_sequential_dag.py)
    run2 = (CALLS[2] / "run2.log").read_text()
    assert "0 of 2 runs to measure" in "".join(
        (RESULTS / "logs" / "serve_bench" / f"{arm}.launch1.log").read_text() for arm in ARMS)
    last_start = max(e["started"] for ss in starts.values() for e in ss)
    assert last_start < max(call3["run1"].values()), "run 2 started a server"
    rewritten = {k for k, v in call3["run2"].items() if v != call3["run1"].get(k)}
    assert rewritten and last_start < min(call3["run2"][k] for k in rewritten)
    assert "Params have changed since last execution" in run2


def test_the_rounds_as_the_stopping_rule_decided_and_todays_rule_decides_the_same(tmp_path):
    """Each round's decision taken again by today's code (analysis.sequential_round.decide_round) from the same
    launch records: the same claims decided at the same round, the same next round, the same end."""
    import io
    import shutil

    from specrepro.analysis.sequential_round import decide_round

    results = tmp_path / "results"
    shutil.copytree(RESULTS, results)
    cfg = yaml.safe_load((results / "resolved_config.yaml").read_text())
    cfg["results_dir"] = str(results)
    claims = str(ROOT / "conf" / cfg["experiment"]["claims"])
    recorded = {k: json.loads((RESULTS / "sequential" / f"round{k}.json").read_text()) for k in (1, 2)}
    assert not recorded[1]["done"] and recorded[1]["next"]["arms"] == {arm: [3] for arm in ARMS}
    assert recorded[1]["history"][0]["decided"] == []
    assert recorded[2]["done"] and recorded[2]["stopped_by"] == \
        "the design's last round (pr_restores_accept_length INCONCLUSIVE)"
    for k, rec in recorded.items():
        records = [results / Path(p).relative_to(DEVICE_RESULTS) for p in rec["launch_records"]]
        assert len(records) == (10 if k == 1 else 15)
        again = decide_round(cfg, k, records, claims, tmp_path / f"round{k}.json", io.StringIO())

        def view(d):
            return d["done"], d.get("next"), d["history"], [(c["id"], c["decided"], c["verdict"], c.get("round"))
                                                            for c in d["claims"]]
        assert view(again) == view(rec), k
    analysis = json.loads((RESULTS / "report" / "analysis.json").read_text())
    verdicts = {c["id"]: (c["verdict"], (c.get("sequential") or {}).get("round")) for c in analysis["claims"]}
    assert verdicts == {"rs_costs_accept_length": ("REPRODUCED", 2), "pr_restores_accept_length": ("INCONCLUSIVE", 2),
                        "pr_raises_accept_length": ("REPRODUCED", 2), "nocg_fixed_without_patch": ("NOT REPRODUCED", 2),
                        "nocg_patch_changes_nothing": ("NOT REPRODUCED", 2), "no_invalid_output": ("NOT JUDGED", None),
                        "pr_keeps_greedy_outputs": ("REPRODUCED", None)}


def test_gpu_hours_used_beside_plans_minimum_expected_and_maximum():
    plan = (DATA / "plan.txt").read_text()
    m = re.search(r"GPU-hours: minimum ([\d.]+), maximum ([\d.]+), expected ([\d.]+) .*launches expected ([\d.]+) of "
                  r"(\d+)\.\.(\d+)", plan)
    assert m, plan
    low, high, expected, _, fewest, most = map(float, m.groups())
    assert (fewest, most) == (10, 15)
    # the launches that measured (15: the design's maximum, as round 1 decided nothing) cost about what plan said the
    # maximum would; the killed and interrupted ones come on top
    assert 0.75 * high <= gpu_hours_used(RESULTS, ok_only=True) <= 1.25 * high, gpu_hours_used(RESULTS, ok_only=True)
    assert gpu_hours_used(RESULTS) > gpu_hours_used(RESULTS, ok_only=True)
    assert low <= expected <= high


def test_the_report_and_mlflow_say_it_ran_on_the_h100():
    report = (RESULTS / "report" / "report.md").read_text()
    first_screen = report.split("### Verdicts", 1)[0]
    assert "NVIDIA H100 80GB HBM3 x 1 per server (measured)" in first_screen
    assert "sha256 `1573527042f4f6b4ead838302818595fc77fdc611dbcc2e40cd150fbc8f8513c`" in first_screen
    assert "| **REPRODUCED** — as theory predicts (-22.8%) | Turning rejection sampling on costs accept length" in report
    import sqlite3

    with sqlite3.connect(RESULTS / "mlflow.db") as db:
        runs = db.execute("select count(*) from runs").fetchone()[0]
        models = {v for (v,) in db.execute("select value from tags where key = 'gpu_model'")}
    # the campaign's parent, the patch check, one run per arm and one per (arm, benchmark, repeat) measured
    measured = sum(len(run_records(arm)) for arm in ARMS)
    assert measured == 30 and runs == 1 + 1 + len(ARMS) + measured
    assert models == {"NVIDIA H100 80GB HBM3"}


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
    assert {row["launch_id"] for row in checked} == {e["launch_id"] for e in ends} and len(ends) == 18, checked
    assert max(pd.concat([pd.read_csv(c / "gpu_memory.csv") for c in CALLS]).memory_used_mib) > 60_000
    for row in checked:
        assert row["used_mib"] <= row["baseline_mib"] + MEMORY_LEFT_MIB, row
