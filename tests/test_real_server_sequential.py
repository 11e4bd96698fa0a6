"""A sequential design on real sglang 0.5.20 CPU servers with the toy model (issue #33), interrupted between rounds
as a user's Ctrl-C would, and resumed.

Three unpatched arms, GSM8K only, `experiment.launches={min: 3, max: 4}`, the claims of
tests/conf/claims/sequential_cpu.yaml: rejection sampling's cost in accept length is clear after round 1 (the
argmax arm is deterministic, the sampling arm's launches agree within about 1.5% with 48 questions each, and three
launches per arm give Welch two degrees of freedom); an equality within 0.5% between two arms that differ by launch
noise alone is decidable by no round.  So main_rs_off stops after round 1 and the two arms the equality claim names
launch a fourth time.

Why 48 questions a launch: with 8, a launch's accept length on the sampling arm varied by 2.4-5.5% (SD over three
launches, in three CI runs), and round 1 (t > 10.1 at two degrees of freedom under Holm over two claims) failed to
decide in about a fifth to a third of simulated runs of that noise (one CI run of 2026-12-07 did); with 48, about
0.1-0.5%.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, specrepro

pytestmark = pytest.mark.e2e

ARMS = ("main_rs_off", "main_rs_on", "main_rs_on_nocg")


def overrides(results):
    return ["experiment=eagle_topk_cpu", f"results_dir={results}",
            *[f"~experiment.arms.{a}" for a in ("pr_rs_on", "pr_rs_on_nocg")],
            *[f"experiment.arms.{a}.benchmarks=[gsm8k]" for a in ARMS],
            "~experiment.theory.pr_rs_on", "~experiment.theory.pr_rs_on_nocg",
            "~experiment.theory.main_rs_on.gsm8k_sampled",
            "experiment.launches={min:3,max:4}",
            f"experiment.claims={ROOT / 'tests' / 'conf' / 'claims' / 'sequential_cpu.yaml'}",
            "benchmarks.gsm8k.repeats=1", "benchmarks.gsm8k.gsm8k.num_questions=48"]


def servers_of(results) -> list:
    """sglang processes still serving this campaign (their command line names its results folder or arm)."""
    left = []
    for proc in os.listdir("/proc"):
        if proc.isdigit():
            try:
                with open(f"/proc/{proc}/cmdline", "rb") as fh:
                    cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if "sglang" in cmd and str(results) in cmd:
                left.append(cmd[:200])
    return left


def launch_records(results) -> dict:
    return {p.relative_to(results).as_posix(): json.loads(p.read_text()) for p in results.glob("arms/*/launches/*.json")}


def run_files(results) -> dict:
    """Every file a run wrote (its measurement), with its mtime."""
    return {p.relative_to(results).as_posix(): p.stat().st_mtime_ns
            for p in results.glob("arms/*/launch*/*/r*/*") if p.is_file()}


def launch_no(record: str) -> int:
    return int(record.rsplit("/", 1)[1].split(".")[0])


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    results = tmp_path_factory.mktemp("real_server_sequential")
    argv = [sys.executable, "-m", "specrepro.cli", "run", *overrides(results)]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    decision = results / "sequential" / "round1.json"
    deadline = time.monotonic() + 2400
    while not decision.is_file() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    assert decision.is_file(), f"round 1 was never decided:\n{proc.communicate(timeout=60)[0][-4000:]}"
    # Ctrl-C between rounds (the second round's first launch may have begun: it must be torn down and redone)
    time.sleep(2)
    os.killpg(proc.pid, signal.SIGINT)
    first_out = proc.communicate(timeout=300)[0]
    after_round1 = launch_records(results)
    round1_runs = run_files(results)
    left_running = servers_of(results)
    # Another campaign sharing the toy model's folder rebuilds it (byte for byte, new mtimes) while this one is
    # stopped: that alone must not re-measure a launch.
    toy_dir = Path(yaml.safe_load((results / "resolved_config.yaml").read_text())["model"]["toy"]["dir"])
    for f in toy_dir.rglob("*"):
        if f.is_file():
            os.utime(f)
    resumed = specrepro("run", *overrides(results), timeout=3000)
    return {"results": results, "first_rc": proc.returncode, "first_out": first_out, "after_round1": after_round1,
            "round1_runs": round1_runs,
            "left_running": left_running, "resumed": resumed.stdout + resumed.stderr,
            "analysis": json.loads((results / "report" / "analysis.json").read_text()),
            "report": (results / "report" / "report.md").read_text()}


def test_the_interrupt_stopped_the_run_between_rounds_and_left_no_server(interrupted):
    assert interrupted["first_rc"] != 0
    assert interrupted["left_running"] == []
    # round 1 was complete when the decision was written: nine launch records, three per arm
    round1 = {k for k in interrupted["after_round1"] if launch_no(k) <= 3}
    assert len(round1) == 9


def test_the_resumed_run_measured_only_what_round_2_asked_for(interrupted):
    results = interrupted["results"]
    now = launch_records(results)
    kept = {k: v for k, v in interrupted["after_round1"].items() if launch_no(k) <= 3}
    # round 1's launches stand as measured: the same servers, the same runs, each run's files untouched.  (A launch
    # job may run again -- the toy model rebuilt above is its input -- and finds every run recorded: it measures
    # nothing.)
    assert {k: (now[k]["launch_ids"], now[k]["runs"]) for k in kept} == {
        k: (v["launch_ids"], v["runs"]) for k, v in kept.items()}
    round1 = {k: v for k, v in interrupted["round1_runs"].items() if int(k.split("/")[2][len("launch"):]) <= 3}
    assert len(round1) >= 9 and {k: v for k, v in run_files(results).items() if k in round1} == round1
    assert sorted(set(now) - set(kept)) == ["arms/main_rs_on/launches/4.json", "arms/main_rs_on_nocg/launches/4.json"]
    for arm, n in (("main_rs_off", 3), ("main_rs_on", 4), ("main_rs_on_nocg", 4)):
        events = [json.loads(line) for line in (results / "arms" / arm / "launches.jsonl").read_text().splitlines()]
        ok = sorted(e["launch"] for e in events if e["event"] == "start"
                    and any(x.get("launch_id") == e["launch_id"] and x.get("status") == "ok"
                            for x in events if x["event"] == "end"))
        assert ok == list(range(1, n + 1)), (arm, ok)
        log = (results / "arms" / arm / "server.log").read_text()
        assert "The server is fired up and ready to roll!" in log


def test_clear_claims_stopped_after_round_1_and_the_undecided_one_got_round_2(interrupted):
    r1 = json.loads((interrupted["results"] / "sequential" / "round1.json").read_text())
    assert not r1["done"] and r1["next"]["arms"] == {"main_rs_on": [4], "main_rs_on_nocg": [4]}
    claims = {c["id"]: c for c in interrupted["analysis"]["claims"]}
    assert claims["rs_costs_accept_length"]["verdict"] == "REPRODUCED"
    assert claims["rs_costs_accept_length"]["sequential"]["round"] == 1
    # judged at the last round on four launches per arm; its verdict is the noise's to give (INCONCLUSIVE unless
    # four launches happen to land more than 0.5% apart beyond doubt)
    nocg = claims["nocg_keeps_accept_length"]
    assert nocg["sequential"]["round"] == 2 and nocg["sequential"]["launches"] == 4, nocg
    assert "(2 of 2)" in nocg["detail"] or "decided after round 2" in nocg["detail"], nocg["detail"]
    report = interrupted["report"]
    assert "| rs_costs_accept_length | **REPRODUCED** | 1 | 3 |" in report
    assert f"| nocg_keeps_accept_length | **{nocg['verdict']}** | 2 | 4 |" in report


def test_each_launch_cost_the_node_seconds_beyond_its_start_up(interrupted):
    """The checks inside the image ran while the model loaded and sglang's resolution was reused after the first
    launch of each arm: what a launch costs beyond the server's start-up and the measurements, per launch."""
    results = interrupted["results"]
    for arm in ARMS:
        events = [json.loads(line) for line in (results / "arms" / arm / "launches.jsonl").read_text().splitlines()]
        timings = [e["timings"] for e in events if e["event"] == "end" and e["status"] == "ok"]
        assert all(t["node_overhead_s"] < 15 for t in timings), (arm, timings)
        preflight = json.loads((results / "arms" / arm / "preflight.json").read_text())
        resolution = next(c for c in preflight["checks"] if c["check"] == "server_args_resolution")
        assert resolution["ok"] and "reused" in resolution["detail"], resolution
