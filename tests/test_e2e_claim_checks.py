"""A stand-in that misbehaves the ways a real deployment can, run through the whole DAG.

- the unpatched rejection-sampling arm's server drops --speculative-use-rejection-sampling
  (its /server_info says false): the arm is invalid, its claims INCONCLUSIVE, the key named;
- the no-CUDA-graph arm's decode log says `cuda graph: True`: flagged;
- the patched arm changes the wording (not the answer) of some greedy outputs:
  accuracy cannot see it, "greedy outputs unchanged" is NOT REPRODUCED with those questions listed.
"""

from __future__ import annotations

import json

import pytest

from conftest import specrepro, standin_overrides, write_behaviour

pytestmark = pytest.mark.e2e

ARMS = ("main_rs_off", "main_rs_on", "pr_rs_on", "main_rs_on_nocg", "pr_rs_on_nocg")


@pytest.fixture(scope="module")
def misbehaving(tmp_path_factory, standin_assets, check_python):
    results = tmp_path_factory.mktemp("misbehaving_campaign")
    behaviour = write_behaviour(
        results.parent / "misbehaviour.json", standin_assets,
        ignore_flags={"when": {"patched": False, "disable_cuda_graph": False},
                      "fields": ["speculative_use_rejection_sampling"]},
        cuda_graph_log_true={"when": {"disable_cuda_graph": True}},
        alter_outputs={"when": {"patched": True}, "fraction": 0.3})
    env = {"SPECREPRO_TEST_PYTHON": str(check_python), "SPECREPRO_STANDIN_BEHAVIOUR": str(behaviour)}
    # two repeats: the baseline's agreement with itself (the A/A floor) is what changed outputs are judged against
    overrides = [o for o in standin_overrides(results, standin_assets, arms=ARMS, benchmarks=("gsm8k",))
                 if not o.startswith("benchmarks.gsm8k.repeats=")] + ["benchmarks.gsm8k.repeats=2"]
    proc = specrepro("run", *overrides, env=env, timeout=3000)
    analysis = json.loads((results / "report" / "analysis.json").read_text())
    return {"results": results, "stdout": proc.stdout + proc.stderr, "analysis": analysis,
            "claims": {c["id"]: c for c in analysis["claims"]},
            "report": (results / "report" / "report.md").read_text()}


def arm_record(m, arm):
    return json.loads((m["results"] / "arms" / arm / "arm.json").read_text())


def test_a_dropped_flag_makes_the_arm_invalid_and_its_claims_inconclusive(misbehaving):
    record = arm_record(misbehaving, "main_rs_on")
    assert record["validity"]["valid"] is False
    (check,) = record["effective_config"]
    assert check["differs"] == {"speculative_use_rejection_sampling": {"requested": True, "resolved": False}}
    claim = misbehaving["claims"]["rs_costs_accept_length"]  # main_rs_on against main_rs_off
    assert claim["verdict"] == "INCONCLUSIVE" and claim["invalid_arms"] == ["main_rs_on"]
    assert "speculative_use_rejection_sampling: requested True, the server resolved False" in claim["detail"]
    # its numbers are kept, not judged
    assert "main_rs_on" in {s["arm"] for s in misbehaving["analysis"]["summary"]}
    assert "| main_rs_on | **no** |" in misbehaving["report"]
    log = (misbehaving["results"] / "logs" / "serve_bench" / "main_rs_on.log").read_text()
    assert "WARNING: arm main_rs_on is not what it says" in log
    # the arms whose servers did what they were told are valid
    assert arm_record(misbehaving, "main_rs_off")["validity"]["valid"] is True


def test_a_no_cuda_graph_arm_whose_log_says_true_is_flagged(misbehaving):
    validity = arm_record(misbehaving, "main_rs_on_nocg")["validity"]
    assert validity["valid"] is False
    assert any("disable_cuda_graph is set, yet" in p and "`cuda graph: True`" in p for p in validity["problems"])
    claim = misbehaving["claims"]["nocg_patch_changes_nothing"]
    assert claim["verdict"] == "INCONCLUSIVE" and set(claim["invalid_arms"]) == {"main_rs_on_nocg", "pr_rs_on_nocg"}


def test_changed_greedy_outputs_are_not_reproduced_with_the_questions_listed(misbehaving):
    claim = misbehaving["claims"]["pr_keeps_greedy_outputs"]
    assert claim["verdict"] == "NOT REPRODUCED" and "beyond the floor" in claim["detail"]
    assert claim["agreement"]["aa_pairs"] == 24 and claim["agreement"]["aa_differing"] == 0
    differing = claim["differing_questions"]
    assert 0 < len(differing) < 24
    # the answers themselves did not change: accuracy cannot tell
    summary = {(s["arm"], s["metric"]): s["mean"] for s in misbehaving["analysis"]["summary"] if s["benchmark"] == "gsm8k"}
    assert summary[("pr_rs_on", "accuracy")] == summary[("main_rs_off", "accuracy")]
    report = misbehaving["report"]
    assert "### Greedy outputs against the baseline" in report
    row = next(r for r in report.splitlines() if r.startswith("| gsm8k | pr_rs_on | main_rs_off |"))
    assert row.endswith(f"| {', '.join(map(str, differing))} |")
    # where the first differing outputs part: a table row per (arm, question, repeat)
    assert "| arm | question | repeat | first difference at character |" in report
    assert f"| pr_rs_on | {differing[0]} | r1 | " in report


@pytest.fixture(scope="module")
def launched(tmp_path_factory, standin_assets, check_python):
    """experiment.launches=2: two arms, two launches each, two GSM8K repeats per launch."""
    results = tmp_path_factory.mktemp("launched_campaign")
    behaviour = write_behaviour(results.parent / "launches.json", standin_assets)
    env = {"SPECREPRO_TEST_PYTHON": str(check_python), "SPECREPRO_STANDIN_BEHAVIOUR": str(behaviour)}
    overrides = [o for o in standin_overrides(results, standin_assets, arms=("main_rs_off", "pr_rs_on"),
                                              benchmarks=("gsm8k",)) if not o.startswith("benchmarks.gsm8k.repeats=")]
    overrides += ["benchmarks.gsm8k.repeats=2", "benchmarks.gsm8k.gsm8k.num_questions=8", "experiment.launches=2"]
    plan = specrepro("plan", *overrides, env=env)
    specrepro("run", *overrides, env=env, timeout=3000)
    return {"results": results, "plan": plan.stdout,
            "analysis": json.loads((results / "report" / "analysis.json").read_text()),
            "report": (results / "report" / "report.md").read_text()}


def test_launches_run_interleaved_and_split_the_noise(launched):
    import pandas as pd

    order = "main_rs_off#1 pr_rs_on#1 pr_rs_on#2 main_rs_off#2"
    assert f"order (interleaved; verdicts use the between-launch noise): {order}" in launched["plan"]
    assert "## launches: 2 per arm, 4 in all" in launched["plan"]
    records = [json.loads(p.read_text()) for p in launched["results"].glob("arms/*/launches/*.json")]
    ran = " ".join(f"{r['arm']}#{r['launch']}" for r in sorted(records, key=lambda r: r["started"]))
    assert ran == order
    for arm in ("main_rs_off", "pr_rs_on"):
        starts = [json.loads(line) for line in (launched["results"] / "arms" / arm / "launches.jsonl").read_text().splitlines()]
        assert sorted(e["launch"] for e in starts if e["event"] == "start") == [1, 2]
    runs = pd.read_csv(launched["results"] / "tables" / "runs.csv")
    assert sorted(runs["launch"].unique()) == [1, 2] and sorted(runs["repeat"].unique()) == [1, 2]
    assert launched["analysis"]["replicates"] == "launch means"
    split = {(v["arm"], v["metric"]): v for v in launched["analysis"]["launch_variance"] if v["benchmark"] == "gsm8k"}
    assert split[("pr_rs_on", "output_throughput")]["launches"] == 2
    assert split[("pr_rs_on", "output_throughput")]["within_launch_cv"] is not None
    report = launched["report"]
    assert "### Launches" in report and f"Order as run: {order}" in report
    assert "| pr_rs_on | gsm8k | output_throughput | 2 | 2 |" in report
    claims = {c["id"]: c["verdict"] for c in launched["analysis"]["claims"]}
    assert claims["pr_keeps_greedy_outputs"] == "REPRODUCED"  # pairs matched per launch and repeat
