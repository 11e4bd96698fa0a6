"""What a claim's row tells a reader (analysis/claim_view.py), from hand-made claims whose answer is known: when this
platform cannot test a claim, what the claim asks, the PR's figure beside ours, predicted against surprising verdicts,
and what held an undecided claim back.

Shapes after the recorded seed campaign (tests/data/report/eagle_topk_cpu/report/analysis.json: a claim's `delta`,
`restored`, `p_value`, `p_adjusted`, `noise`; arm.json's `launches` with `argv_list`, `image`)."""

from __future__ import annotations

import pytest

from specrepro.analysis.claim_view import (NOT_TESTABLE, asks, expectation, held_back, identical_commands,
                                           launches_of, not_testable, our_figure, pr_figure, view)

CFG = {"experiment": {"arms": {"base": {}, "on": {}, "on_nocg": {"extra_server_args": {"disable_cuda_graph": True}}},
                      "reference": {"base": {"g": {"accept_length": 3.778}}, "on": {"g": {"accept_length": 3.080}}}},
       "model": {"unjudged_metrics": {"invalid_rate": "a lookup-table model answers no question"}},
       "platform": {"unjudged_metrics": {"mean_tpot_ms": "a CPU's per-token latency says nothing about a GPU's"}}}
UNJUDGED = {**CFG["model"]["unjudged_metrics"], **CFG["platform"]["unjudged_metrics"]}


def claim(**kw):
    base = {"id": "c", "text": "t", "benchmark": "g", "metric": "accept_length", "expect": "decrease", "arm": "on",
            "against": "base", "verdict": "REPRODUCED", "margin": 0.02, "p_value": 1e-6, "p_adjusted": 6e-6,
            "noise": "on: 3 repeats on one server + prior 0.5% between launches; base: 3 repeats on one server + "
                     "prior 0.5% between launches",
            "delta": {"arm_mean": 3.088, "base_mean": 4.0, "relative": -0.228, "ci_low": -0.249, "ci_high": -0.207,
                      "half_width": 0.021}}
    return {**base, **kw}


def launch(argv, port, tree="/r/source/tree", patches=()):
    return {"arm": None, "launches": [{"event": "start", "launch_id": 1, "argv_list": [*argv, "--port", str(port)]},
                                      {"event": "end", "launch_id": 1}],
            "image": {"pythonpath": tree, "patch_sha256": list(patches), "env": {"key": "e1"}}}


def test_a_metric_the_platform_does_not_judge_is_not_testable_with_its_reason():
    assert not_testable(claim(metric="mean_tpot_ms"), CFG, UNJUDGED, (0, 10), {}) == \
        "mean_tpot_ms: a CPU's per-token latency says nothing about a GPU's"
    assert not_testable(claim(), CFG, UNJUDGED, (0, 10), {}) is None


def test_a_no_graph_claim_is_testable_only_where_some_arm_captured_a_graph():
    c = claim(arm="on_nocg", against="base")
    said = not_testable(c, CFG, UNJUDGED, (0, 613), {"on_nocg": "on"})
    assert said == ("no arm captured a CUDA graph (0 of 613 decode log lines `graph: True`): on_nocg = on "
                    "(identical commands)")
    # on a GPU the graph arms' decode logs say True: the contrast exists, the verdict stands
    assert not_testable(c, CFG, UNJUDGED, (400, 213), {}) is None
    v = view({**c, "verdict": "NOT REPRODUCED", "predicted": {"verdict": "NOT REPRODUCED", "because": "pin"}},
             CFG, {"claims": []}, (0, 613), {"on_nocg": "on"})
    assert v["verdict"] == NOT_TESTABLE and v["recorded"] == "NOT REPRODUCED" and v["surprise"] is None
    assert v["expectation"] == "the pin predicts NOT REPRODUCED" and v["ours"].endswith("(shown, not judged)")


def test_identical_commands_ignore_the_port_and_see_the_tree_and_patches():
    a = {**launch(["python", "-m", "srv", "--x"], 1000), "arm": "on"}
    b = {**launch(["python", "-m", "srv", "--x"], 2000), "arm": "on_nocg"}
    patched = {**launch(["python", "-m", "srv", "--x"], 3000, patches=["abc"]), "arm": "pr"}
    other = {**launch(["python", "-m", "srv", "--y"], 4000), "arm": "base"}
    assert identical_commands([a, b, patched, other]) == {"on_nocg": "on"}
    # one launch records its start and its end: one launch
    assert launches_of(a) == 1


def test_what_a_claim_asks_direction_or_size():
    assert asks(claim()) == "direction: CI below -2%"
    assert asks(claim(expect="increase", margin=0.05)) == "direction: CI above +5%"
    assert asks(claim(expect="restores", fraction=0.9)) == "size: more than 90% of the gap closed"
    assert asks(claim(expect="equal")) == "equality: CI within ±2%"


def test_the_prs_figure_and_ours_in_the_metrics_unit():
    assert pr_figure(claim(), CFG) == "3.778 -> 3.080 tokens/verify step (-18.5%)"
    assert our_figure(claim(), {"summary": []}) == \
        "4.000 -> 3.088 tokens/verify step (-22.8%, 95% CI -24.9% .. -20.7%)"
    # a direction claim says whether the PR's size lies in our interval (here it does not: -18.5% > -20.7%)
    assert view(claim(), CFG, {"claims": []}, (0, 1), {})["asks"] == \
        "direction: CI below -2%; the PR's -18.5% is outside our CI"
    assert pr_figure(claim(metric="accuracy"), CFG) == "-"


def test_predicted_and_surprising_verdicts_are_told_apart():
    theory = {"theory": [{"arm": "on", "benchmark": "g", "expected": 3.09}, {"arm": "base", "benchmark": "g",
                                                                           "expected": 4.0}]}
    assert expectation(claim(), theory, "REPRODUCED") == ("as theory predicts (-22.8%)", False)
    assert expectation(claim(expect="increase"), theory, "NOT REPRODUCED") == \
        ("as theory predicts (-22.8%)", False)
    assert expectation(claim(expect="increase"), theory, "REPRODUCED") == \
        ("SURPRISE: theory predicts NOT REPRODUCED (-22.8%)", True)
    pinned = claim(predicted={"verdict": "NOT REPRODUCED", "because": "the PR describes its own base"})
    assert expectation(pinned, {}, "NOT REPRODUCED") == ("as the pin predicts", False)
    assert expectation(pinned, {}, "REPRODUCED") == ("SURPRISE: the pin predicts NOT REPRODUCED", True)
    assert expectation(pinned, {}, "INCONCLUSIVE") == ("the pin predicts NOT REPRODUCED", None)
    assert expectation(claim(metric="accuracy"), theory, "REPRODUCED") == ("", None)


@pytest.mark.parametrize("extra, expected", [
    ({}, "p 0.022, Holm-adjusted over 6 claims 0.088 > 2.5%; noise: 3 repeats + 0.5% launch prior (assumed)"),
    ({"expect": "equal", "delta": {"relative": 0.005, "ci_low": -0.028, "ci_high": 0.038, "half_width": 0.033}},
     "CI ±3.3% wider than the ±2% margin; p 0.022, Holm-adjusted over 6 claims 0.088 > 2.5%; noise: 3 repeats + "
     "0.5% launch prior (assumed)"),
])
def test_an_inconclusive_claim_says_what_held_it_back(extra, expected):
    c = claim(verdict="INCONCLUSIVE", p_value=0.022, p_adjusted=0.088, **extra)
    assert held_back(c, {"multiplicity": {"policy": "holm", "alpha": 0.05, "family": 6}}) == expected
