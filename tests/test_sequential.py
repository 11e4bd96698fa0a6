"""The sequential design's pieces with known numbers: boundaries, the two tests of a claim, the statistics the
planner vectorises, the rule (Holm passing alpha on), and the decision on a runs table round by round."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from specrepro.analysis import sequential as sq
from specrepro.analysis import sequential_plan as sp
from specrepro.analysis.analyze import INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED, analyze, judge_claim, noise_floors

NO_PRIOR = {"launch_noise_prior": {}, "within_fallback": {}}


# --- boundaries ---------------------------------------------------------------------------------------------------

def test_lan_demets_boundaries_match_published_values():
    """Five equally spaced looks, one-sided 2.5% (gsDesign's sfLDOF / sfLDPocock; Jennison & Turnbull ch. 7)."""
    five = tuple(range(1, 6))
    obf = sq.z_boundaries(five, tuple(sq.spent(k / 5, 0.025) for k in five))
    assert obf == pytest.approx((4.8769, 3.3569, 2.6803, 2.2898, 2.0310), abs=2e-4)
    pocock = sq.z_boundaries(five, tuple(sq.spent(k / 5, 0.025, "pocock") for k in five))
    assert pocock == pytest.approx((2.4380, 2.4268, 2.4101, 2.3966, 2.3859), abs=2e-4)
    # one look spends everything at the fixed level
    assert sq.nominal_levels([3], 3, 0.025) == pytest.approx([0.025])


@pytest.mark.parametrize("info,spending", [((2, 3, 4, 5), "obrien_fleming"), ((2, 2.4, 5), "pocock"),
                                           ((2, 3, 4, 6, 8), "power")])
def test_boundaries_spend_what_the_function_says(info, spending):
    """Crossing probabilities of the canonical joint normal, by Monte Carlo, against the spending function."""
    n_max = info[-1]
    cum = [sq.spent(x / n_max, 0.025, spending) for x in info]
    z = np.array(sq.z_boundaries(tuple(map(float, info)), tuple(cum)))
    rng = np.random.default_rng(0)
    steps = np.diff(np.concatenate([[0.0], info]))
    score = np.cumsum(rng.standard_normal((400_000, len(info))) * np.sqrt(steps), axis=1)
    crossed = np.cumsum(score / np.sqrt(info) >= z, axis=1) > 0
    assert crossed.mean(axis=0) == pytest.approx(cum, abs=4 * math.sqrt(0.025 / 400_000) + 1e-5)


def test_spending_functions():
    for name in sq.SPENDING:
        values = [sq.spent(t, 0.025, name) for t in np.linspace(0, 1, 11)]
        assert values[0] == 0 and values[-1] == pytest.approx(0.025) and np.all(np.diff(values) >= 0)
    # O'Brien-Fleming type spends almost nothing early, Pocock type much more
    assert sq.spent(0.4, 0.025) < 0.0005 < 0.01 < sq.spent(0.4, 0.025, "pocock")


def test_policy():
    p = sq.Policy.parse({"min": 2, "max": 5})
    assert p.schedule == [2, 3, 4, 5] and p.rounds == 4
    assert sq.Policy.parse({"min": 2, "max": 7, "step": 2}).schedule == [2, 4, 6, 7]
    assert sq.policy_of(3) is None and sq.policy_of({"min": 3, "max": 3}).schedule == [3]
    with pytest.raises(ValueError, match="2\\+ launches"):
        sq.Policy.parse({"min": 1, "max": 4})
    with pytest.raises(ValueError, match="unknown keys"):
        sq.Policy.parse({"min": 2, "max": 4, "looks": 3})
    from omegaconf import OmegaConf
    assert sq.policy_of(OmegaConf.create({"min": 2, "max": 4, "spending": "pocock"})).spending == "pocock"
    rows = sq.boundary_table(p)
    assert [r["launches"] for r in rows] == [2, 3, 4, 5] and rows[-1]["spent"] == pytest.approx(0.025)
    assert rows[0]["nominal"] == pytest.approx(0.000394, abs=1e-6)


# --- one claim's tests against analyze ----------------------------------------------------------------------------

def two_arm_table(effects, launches, seed, launch_sd=0.02, repeat_sd=0.003, metric="output_throughput",
                  campaigns=1, base=300.0):
    """Campaign c: arms base{c}, arm{c} (and from{c} at `effects[1]`) on benchmark c{c}."""
    rng = np.random.default_rng(seed)
    rows = []
    for c in range(campaigns):
        arms = [(f"base{c}", base), (f"arm{c}", base * (1 + effects[0]))]
        if len(effects) > 1:
            arms.append((f"from{c}", base * (1 + effects[1])))
        for arm, mean in arms:
            for launch in range(1, launches + 1):
                shift = 1 + rng.normal(0, launch_sd)
                for r in (1, 2, 3):
                    rows.append({"arm": arm, "benchmark": f"c{c}", "repeat": r, "launch": launch, "metric": metric,
                                 "value": mean * shift * (1 + rng.normal(0, repeat_sd))})
    return pd.DataFrame(rows)


def claim(c, expect, **extra):
    out = {"id": f"c{c}", "benchmark": f"c{c}", "metric": "output_throughput", "arm": f"arm{c}",
           "against": f"base{c}", "expect": expect, **extra}
    if expect == "restores":
        out.update({"from": f"from{c}", "fraction": 0.9})
    return out


@pytest.mark.parametrize("expect,effects", [("decrease", (-0.03,)), ("increase", (0.02,)), ("equal", (0.01,)),
                                            ("not_below", (-0.02,)), ("restores", (-0.01, -0.2))])
def test_claim_tests_are_analyzes_verdict_conditions(expect, effects):
    """p_claim is judge_claim's p-value; p_contra <= 2.5% exactly when judge_claim says the interval contradicts
    the claim; and the planner's vectorised statistics are judge_claim's numbers."""
    n = 60
    table = two_arm_table(effects, 3, seed=11, campaigns=n)
    floors = noise_floors(table, None, {**sq.DEFAULT_SETTINGS, **NO_PRIOR})
    agree = 0
    for c in range(n):
        cl = claim(c, expect, margin=0.02)
        r = judge_claim(cl, table[table["benchmark"] == f"c{c}"], floors, {**sq.DEFAULT_SETTINGS, **NO_PRIOR})
        if r.get("p_value") is None:
            continue
        est, se, df = sq._estimate(r)
        pc, pn = sq.claim_tests(expect, est, se, df, 0.02, 0.9)
        assert float(pc) == pytest.approx(r["p_value"], rel=1e-9, abs=1e-15)
        assert (float(pn) <= 0.025) == bool(r["contradicted"])
        # the same numbers from launch means, as the planner computes them
        series = {(a, f"c{c}", "output_throughput"):
                  table[(table["arm"] == a) & (table["benchmark"] == f"c{c}")].groupby("launch")["value"].mean()
                  .to_numpy()[None, :] for a in sq.arms_of(cl)}
        e2, s2, d2, ok = sp.claim_statistics(cl, series, 3)
        assert ok[0] and (e2[0], s2[0], d2[0]) == pytest.approx((est, se, df), rel=1e-9)
        agree += 1
    assert agree >= n // 2


# --- the rule -----------------------------------------------------------------------------------------------------

def test_holm_passes_alpha_on_and_retests_earlier_looks():
    """Two claims, Holm: B's look-1 p-value crosses only the boundary at the full level, which it gets once A is
    reproduced at look 2; the rule then reproduces B at look 2 on its look-1 statistic."""
    info = [2, 3]
    full = sq.nominal_levels(info, 5, 0.025)
    half = sq.nominal_levels(info, 5, 0.0125)
    nominal_claim = np.array([[half, full], [half, full]])  # [claim, rejections so far, look]
    nominal_contra = np.array([full, full])
    p_b1 = (half[0] + full[0]) / 2  # between the two levels at look 1
    p_claim = np.array([[[0.5, half[1] / 2], [p_b1, 0.5]]])
    p_contra = np.full((1, 2, 2), 0.5)
    status, at = np.zeros((1, 2), int), np.full((1, 2), -1)
    sq.rule_step(status, at, 0, p_claim[:, :, :1], p_contra[:, :, :1], nominal_claim[:, :, :1], nominal_contra[:, :1])
    assert status.tolist() == [[sq.OPEN, sq.OPEN]]
    sq.rule_step(status, at, 1, p_claim, p_contra, nominal_claim, nominal_contra)
    assert status.tolist() == [[sq.REPRO, sq.REPRO]] and at.tolist() == [[1, 1]]
    # without A's rejection B stays open
    status, at = np.zeros((1, 2), int), np.full((1, 2), -1)
    sq.rule_step(status, at, 1, np.array([[[0.5, 0.5], [p_b1, 0.5]]]), p_contra, nominal_claim, nominal_contra)
    assert status.tolist() == [[sq.OPEN, sq.OPEN]]


def test_one_round_is_analyzes_fixed_design():
    """min = max: one look at the fixed 2.5%, Holm over the family: the verdicts analyze gives."""
    effects = [-0.08, -0.02, 0.0, 0.03, 0.06, -0.05]
    kinds = ["decrease", "decrease", "equal", "increase", "not_below", "decrease"]
    tables, claims = [], []
    for c, (e, k) in enumerate(zip(effects, kinds)):
        t = two_arm_table((e,), 3, seed=100 + c)
        t = t.replace({"c0": f"c{c}", "arm0": f"arm{c}", "base0": f"base{c}"})
        tables.append(t)
        claims.append(claim(c, k, margin=0.05 if k == "equal" else 0.02))
    table = pd.concat(tables, ignore_index=True)
    for multiplicity in ("holm", "none"):
        settings = {**NO_PRIOR, "multiplicity": multiplicity}
        fixed = {c["id"]: c["verdict"] for c in analyze(table, claims=claims, settings=settings)["claims"]}
        seq = sq.decide_sequential(table, claims, settings, {"min": 3, "max": 3})
        assert seq["done"] and {c["id"]: c["verdict"] for c in seq["claims"]} == fixed
    assert set(fixed.values()) >= {REPRODUCED, INCONCLUSIVE}


# --- the decision on a runs table, round by round -----------------------------------------------------------------

def campaign_rows(arm, mean, launches, rng, launch_sd, benchmark="bench", metric="output_throughput"):
    rows = []
    for launch in launches:
        shift = 1 + rng.normal(0, launch_sd)
        rows += [{"arm": arm, "benchmark": benchmark, "repeat": r, "launch": launch, "metric": metric,
                  "value": mean * shift * (1 + rng.normal(0, 0.003))} for r in (1, 2, 3)]
    return rows


def test_clear_claims_stop_after_round_one_and_the_rest_go_on():
    """A 30% drop on quiet arms is decided after round 1 and its arm stops; a 1% change is not, so its two arms
    get round 2; replaying the same table gives the same answer (a rerun resumes), an unfinished round asks only
    for what is missing, and a final call closes what is open."""
    rng = np.random.default_rng(5)
    claims = [{"id": "clear", "benchmark": "bench", "metric": "output_throughput", "arm": "slow", "against": "base",
               "expect": "decrease"},
              {"id": "small", "benchmark": "bench", "metric": "output_throughput", "arm": "tweak", "against": "base",
               "expect": "increase"},
              {"id": "none_invalid", "benchmark": "bench", "metric": "invalid_rate", "expect": "zero",
               "arms": ["base", "slow", "tweak"]}]
    policy = {"min": 2, "max": 4}
    rows = (campaign_rows("base", 300, [1, 2], rng, 0.002) + campaign_rows("slow", 210, [1, 2], rng, 0.002)
            + campaign_rows("tweak", 303, [1, 2], rng, 0.02))
    rows += [{"arm": a, "benchmark": "bench", "repeat": 1, "launch": launch, "metric": "invalid_rate", "value": 0.0}
             for a in ("base", "slow", "tweak") for launch in (1, 2)]
    d1 = sq.decide_sequential(pd.DataFrame(rows), claims, NO_PRIOR, policy, arms=["base", "slow", "tweak"])
    by = {c["id"]: c for c in d1["claims"]}
    assert d1["round"] == 1 and not d1["done"]
    assert by["clear"]["verdict"] == REPRODUCED and by["clear"]["round"] == 1
    assert not by["small"]["decided"] and by["small"]["verdict"] is None
    assert not by["none_invalid"]["sequential"] and by["none_invalid"]["verdict"] == REPRODUCED
    assert d1["arms"]["slow"] == {"launches": 2, "needed": False, "held_by": []}
    assert d1["arms"]["base"]["needed"] and d1["arms"]["tweak"]["held_by"] == ["small"]
    assert d1["next"] == {"round": 2, "launches": 3, "arms": {"base": [3], "tweak": [3]}}
    assert d1["history"] == [{"round": 1, "launches": 2, "decided": ["clear"], "arms_needed": ["base", "tweak"]}]
    # round 2 half done: only tweak's third launch is missing
    rows += campaign_rows("base", 300, [3], rng, 0.002)
    half = sq.decide_sequential(pd.DataFrame(rows), claims, NO_PRIOR, policy)
    assert half["round"] == 1 and half["next"]["arms"] == {"tweak": [3]} and half["incomplete"] == {"tweak": 1}
    assert sq.decide_sequential(pd.DataFrame(rows), claims, NO_PRIOR, policy) == half  # a rerun: the same state
    rows += campaign_rows("tweak", 303, [3], rng, 0.02)
    d2 = sq.decide_sequential(pd.DataFrame(rows), claims, NO_PRIOR, policy)
    assert d2["round"] == 2 and {c["id"]: c["round"] for c in d2["claims"]}["clear"] == 1
    # the budget ends it: open claims INCONCLUSIVE after the last round measured, no next round
    closed = sq.decide_sequential(pd.DataFrame(rows), claims, NO_PRIOR, policy, final=True)
    small = {c["id"]: c for c in closed["claims"]}["small"]
    assert closed["done"] and closed["next"] is None and small["verdict"] in (INCONCLUSIVE, REPRODUCED, NOT_REPRODUCED)
    assert small["round"] == 2 and small["launches"] == 3
    # no data yet: round 1 launches every arm min times
    start = sq.decide_sequential(pd.DataFrame(rows).iloc[:0], claims, NO_PRIOR, policy, arms=["base", "slow", "tweak"])
    assert start["round"] == 0 and start["next"]["arms"] == {"base": [1, 2], "slow": [1, 2], "tweak": [1, 2]}


def test_report_pieces():
    rng = np.random.default_rng(7)
    rows = campaign_rows("base", 300, [1, 2, 3], rng, 0.002) + campaign_rows("slow", 210, [1, 2, 3], rng, 0.002)
    claims = [{"id": "drop", "text": "slow is slower", "benchmark": "bench", "metric": "output_throughput",
               "arm": "slow", "against": "base", "expect": "decrease",
               "predicted": {"verdict": "NOT REPRODUCED", "because": "a test"}}]
    decision = sq.decide_sequential(pd.DataFrame(rows), claims, NO_PRIOR, {"min": 2, "max": 4})
    merged = sq.apply_to_analysis(analyze(pd.DataFrame(rows), baseline="base", claims=claims, settings=NO_PRIOR),
                                  decision)
    (c,) = merged["claims"]
    k = c["sequential"]["round"]
    assert c["verdict"] == REPRODUCED and k in (1, 2) and c["as_predicted"] is False
    assert "repeated 95% CI" in c["detail"] and f"decided after round {k} of 3" in c["detail"]
    assert "O'Brien-Fleming" in merged["multiplicity"]["sequential"]
    table = sq.decided_table(decision)
    assert f"| drop | REPRODUCED | {k} | {k + 1} |" in table and "Sequential design" in table
    assert sq.next_round_gpu_hours({"next": {"arms": {"a": [3], "b": [3, 4]}}}, {"a": 1.0, "b": 2.0}) == 5.0


# --- planning -----------------------------------------------------------------------------------------------------

def test_plan_design_numbers():
    claims = [{"id": "big", "benchmark": "b", "metric": "m", "arm": "x", "against": "base", "expect": "decrease"},
              {"id": "none", "benchmark": "b", "metric": "m", "arm": "y", "against": "base", "expect": "increase"},
              {"id": "zero", "benchmark": "b", "metric": "invalid_rate", "expect": "zero", "arms": ["x"]}]
    truth = {("base", "b", "m"): 100.0, ("x", "b", "m"): 70.0}  # y has no stated effect: held to max
    plan = sp.plan_design(claims, truth, {("b", "m"): (0.005, 0.003)}, {"b": 3}, {"min": 2, "max": 4},
                          {"base": 1.0, "x": 2.0, "y": 0.5}, NO_PRIOR, fixed=3, n_sim=500)
    assert plan["gpu_hours"]["min"] == 7.0 and plan["gpu_hours"]["max"] == 14.0
    assert plan["unplanned"] == ["none"] and plan["sequential"]["arm_launches"]["y"] == 4.0
    (big,) = plan["sequential"]["claims"]
    assert big["expected"] == REPRODUCED and big["power"] > 0.99 and big["mean_round"] < 2
    assert plan["configured"]["gpu_hours"] == pytest.approx(10.5)
    assert 7.0 <= plan["gpu_hours"]["expected"] <= 14.0
    text = sp.format_plan(plan)
    assert "GPU-hours: minimum 7.0, maximum 14.0" in text and "none" in text and "holds its arms to max" in text


def test_seed_plan_from_config():
    from specrepro.analysis.claims import campaign_claims
    from specrepro.core.campaign import Campaign
    from specrepro.core.config import compose
    from specrepro.core.cost import campaign_cost

    cfg = compose(["experiment.launches=3"])
    per_launch = sp.launch_gpu_hours(cfg)
    assert 3 * sum(per_launch.values()) == pytest.approx(campaign_cost(cfg)["gpu_hours"])
    plan = sp.plan_from_config(cfg, campaign_claims(cfg, Campaign(cfg).claims_path), {"min": 2, "max": 5}, assumed=SEED_ASSUMED, fixed=3,
                               n_sim=300)
    assert plan["configured"]["gpu_hours"] == pytest.approx(campaign_cost(cfg)["gpu_hours"])
    assert not plan["unplanned"] and plan["family"] == 9
    ids = {c["id"]: c for c in plan["sequential"]["claims"]}
    assert ids["nocg_patch_changes_nothing"]["expected"] == NOT_REPRODUCED
    assert ids["rs_costs_accept_length"]["power"] == 1.0


# What the seed's published table does not give, for planning: the no-graph arms as predicted on the pin (as their
# CUDA-graph counterparts), and the sampled workload unaffected by the patch (its claim, at its word).
SEED_ASSUMED = {"main_rs_on_nocg": "main_rs_on", "pr_rs_on_nocg": "pr_rs_on",
                "main_rs_on": {"gsm8k_sampled": {"accept_length": 2.5}},
                "pr_rs_on": {"gsm8k_sampled": {"accept_length": 2.5}}}
