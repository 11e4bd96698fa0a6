"""A sequential design through the real Snakemake DAG on the stand-in (issue #33): rounds as checkpoints, the
current round in a dry run, a run stopped between rounds resumed without re-measuring, the report's "decided
after round", MLflow's runs tagged with their round.

Three arms, GSM8K only, `experiment.launches={min: 2, max: 3}`, the claims of tests/conf/claims/sequential.yaml:
the two accept-length claims are decided by round 1 (the stand-in is deterministic: the launch prior stands in
for the launches' zero spread), the accuracy claim by no round, so main_rs_off stops after round 1 and main_rs_on
and pr_rs_on get a second.
"""

from __future__ import annotations

import json
import re

import pytest

from conftest import ROOT, specrepro, standin_overrides, write_behaviour

pytestmark = pytest.mark.e2e

ARMS = ("main_rs_off", "main_rs_on", "pr_rs_on")


@pytest.fixture(scope="module")
def sequential(tmp_path_factory, standin_assets, check_python):
    results = tmp_path_factory.mktemp("sequential_campaign")
    behaviour = write_behaviour(results.parent / "sequential.json", standin_assets)
    env = {"SPECREPRO_TEST_PYTHON": str(check_python), "SPECREPRO_STANDIN_BEHAVIOUR": str(behaviour)}
    overrides = [o for o in standin_overrides(results, standin_assets, arms=ARMS, benchmarks=("gsm8k",))
                 if not o.startswith(("benchmarks.gsm8k.repeats=", "experiment.skip_claims="))]
    overrides += ["benchmarks.gsm8k.repeats=2", "benchmarks.gsm8k.gsm8k.num_questions=8",
                  "experiment.launches={min:2,max:3}",
                  f"experiment.claims={ROOT / 'tests' / 'conf' / 'claims' / 'sequential.yaml'}"]
    out = {"results": results, "plan": specrepro("plan", "--no-resolve", *overrides, env=env).stdout}
    out["dry_empty"] = specrepro("run", *overrides, "--", "-n", env=env).stdout
    # stopped between rounds: the first round and its decision only
    specrepro("run", *overrides, "--", str(results / "sequential" / "round1.json"), env=env, timeout=3000)
    out["after_round1"] = {p.relative_to(results).as_posix(): p.stat().st_mtime_ns
                           for p in results.glob("arms/*/launches/*.json")}
    out["dry_round2"] = specrepro("run", *overrides, "--", "-n", env=env).stdout
    out["run"] = specrepro("run", *overrides, env=env, timeout=3000)
    out["rerun"] = specrepro("run", *overrides, "--", "-n", env=env).stdout
    out["after_run"] = {p.relative_to(results).as_posix(): p.stat().st_mtime_ns
                        for p in results.glob("arms/*/launches/*.json")}
    # an input of every launch rewritten with other bytes (as on the lent GPU, where the data records were made
    # again; a touch alone is not enough: Snakemake compares a small input's checksum with the one it recorded): the
    # launch jobs run again, find every run recorded and measure nothing; then the campaign has nothing left to do
    out["launch_ids"] = {arm: (results / "arms" / arm / "launches.jsonl").read_text() for arm in ARMS}
    data_record = results / "datasets" / "gsm8k.json"
    data_record.write_text(data_record.read_text() + "\n")
    out["after_input"] = specrepro("run", *overrides, env=env, timeout=3000)
    out["rerun_after_input"] = specrepro("run", *overrides, "--", "-n", env=env).stdout
    out["analysis"] = json.loads((results / "report" / "analysis.json").read_text())
    out["report"] = (results / "report" / "report.md").read_text()
    out["overrides"], out["env"] = overrides, env
    return out


def jobs(dry_run: str) -> dict:
    """Snakemake's dry-run job table: rule -> count."""
    table = dry_run.split("Job stats:", 1)[1]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M)}


def test_plan_states_the_design(sequential):
    plan = sequential["plan"]
    assert "## launches: a sequential design {min: 2, max: 3, spending: obrien_fleming}: round 1 launches every arm 2" \
           in plan
    assert "round 1 order (interleaved; later rounds interleave the arms they launch): main_rs_off#1 main_rs_on#1 " \
           "pr_rs_on#1 pr_rs_on#2 main_rs_on#2 main_rs_off#2" in plan
    assert "## sequential launches {min: 2, max: 3, spending: obrien_fleming}" in plan
    assert re.search(r"GPU-hours: minimum [\d.]+, maximum [\d.]+, expected", plan)


def test_a_dry_run_shows_the_current_round(sequential):
    first = jobs(sequential["dry_empty"])
    assert first["serve_launch"] == 6 and first["sequential_round"] == 1
    second = jobs(sequential["dry_round2"])
    # after round 1 the dry run lists round 2 only: the two arms the accuracy claim still holds, and its checkpoint
    assert second["serve_launch"] == 2 and second["sequential_round"] == 1
    assert "launches/3.json" in sequential["dry_round2"] and "launches/1.json" not in sequential["dry_round2"]
    assert "arm main_rs_on launch 3" in sequential["dry_round2"] and "arm pr_rs_on launch 3" in sequential["dry_round2"]
    assert "main_rs_off launch 3" not in sequential["dry_round2"]
    assert "Nothing to be done" in sequential["rerun"]


def test_launch_jobs_run_again_by_a_rebuilt_input_measure_nothing_and_leave_nothing_to_do(sequential):
    results = sequential["results"]
    rerun = sequential["after_input"].stdout + sequential["after_input"].stderr
    assert "Reason: Updated input files:" in rerun and "datasets/gsm8k.json" in rerun, rerun[-3000:]
    for arm in ARMS:
        assert f"arm {arm} launch 1 of 3: 0 of 2 runs to measure" in (
            results / "logs" / "serve_bench" / f"{arm}.launch1.log").read_text()
    # no server started: every arm's launch log is what it was
    assert {arm: (results / "arms" / arm / "launches.jsonl").read_text() for arm in ARMS} == sequential["launch_ids"]
    # the rerun trigger (Campaign.runs_to_remeasure) reads the value those jobs were scheduled with
    assert "Nothing to be done" in sequential["rerun_after_input"], sequential["rerun_after_input"][-3000:]


def test_the_resumed_run_measured_only_the_second_round(sequential):
    results = sequential["results"]
    now = sequential["after_run"]
    assert {k: now[k] for k in sequential["after_round1"]} == sequential["after_round1"]
    assert sorted(set(now) - set(sequential["after_round1"])) == ["arms/main_rs_on/launches/3.json",
                                                                 "arms/pr_rs_on/launches/3.json"]
    for arm, n in (("main_rs_off", 2), ("main_rs_on", 3), ("pr_rs_on", 3)):
        starts = [json.loads(line) for line in (results / "arms" / arm / "launches.jsonl").read_text().splitlines()]
        assert sorted(e["launch"] for e in starts if e["event"] == "start") == list(range(1, n + 1))
        record = json.loads((results / "arms" / arm / "arm.json").read_text())
        assert sorted({stem.split("/")[0] for stem in record["runs"]}) == [f"launch{k}" for k in range(1, n + 1)]


def test_each_round_decided_what_it_could(sequential):
    r1 = json.loads((sequential["results"] / "sequential" / "round1.json").read_text())
    assert not r1["done"] and r1["next"]["arms"] == {"main_rs_on": [3], "pr_rs_on": [3]}
    assert {c["id"]: c["round"] for c in r1["claims"] if c["decided"]} == {"rs_costs_accept_length": 1,
                                                                           "pr_raises_accept_length": 1}
    r2 = json.loads((sequential["results"] / "sequential" / "round2.json").read_text())
    assert r2["done"] and r2["stopped_by"].startswith("the design's last round (pr_keeps_accuracy")
    claims = {c["id"]: c for c in sequential["analysis"]["claims"]}
    assert claims["rs_costs_accept_length"]["verdict"] == "REPRODUCED"
    assert claims["rs_costs_accept_length"]["sequential"]["round"] == 1
    assert claims["pr_keeps_accuracy"]["verdict"] == "INCONCLUSIVE"
    assert "decided after round 1 of 2 (2 launches per arm)" in claims["pr_raises_accept_length"]["detail"]


def test_the_report_says_after_which_round_and_the_rule(sequential):
    report = sequential["report"]
    assert "### Rounds of launches (sequential design)" in report
    assert "| rs_costs_accept_length | **REPRODUCED** | 1 | 2 |" in report
    assert "| pr_keeps_accuracy | **INCONCLUSIVE** | 2 | 3 |" in report
    assert "Lan-DeMets O'Brien-Fleming-type alpha-spending function" in report
    assert "| 1 | 2 | rs_costs_accept_length, pr_raises_accept_length | main_rs_on, pr_rs_on |" in report
    assert "- (stop: the design's last round (pr_keeps_accuracy INCONCLUSIVE))" in report
    # the terminal summary (the report's head) carries it too
    assert "### Rounds of launches (sequential design)" in sequential["run"].stdout


def test_mlflow_has_one_child_per_run_tagged_with_its_round(sequential):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{sequential['results'] / 'mlflow.db'}")
    exp = client.get_experiment_by_name("specrepro/eagle_topk_greedy")
    runs = client.search_runs([exp.experiment_id], max_results=500)
    rounds = {}
    for r in runs:
        if r.data.tags.get("benchmark") == "gsm8k":
            key = (r.data.tags["arm"], r.data.params["launch"])
            rounds.setdefault(key, set()).add(r.data.tags.get("round"))
    assert rounds[("main_rs_off", "2")] == {"1"} and rounds[("pr_rs_on", "3")] == {"2"}
    assert ("main_rs_off", "3") not in rounds
    assert len([k for k in rounds if k[0] == "pr_rs_on"]) == 3
