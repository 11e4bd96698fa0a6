"""Verdicts that hold where the noise is odd (issue #39): deterministic arms, unequal spreads, identical relaunches,
float rounding, and the round that really decided.  Every rate is measured on simulated campaigns whose truth is
known (analysis/sequential_calibration.py, vectorised: 2,000 campaigns a cell) and stated with its Monte-Carlo SE;
benchmarks/sequential_calibration.py runs the same cells with 20,000.  The fixed seeds are arbitrary; the bounds
are the issue's (false REPRODUCED <= 3% for a nominal 2.5%, repeated-interval coverage >= 94%) widened by two MC
SEs.  Before #39 the issue measured the deterministic cells at 4.6-5.45% and the SD-ratio-3 cells at 3.1-3.3%
(through `decide_sequential`), far above these bounds.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from specrepro.analysis import noise
from specrepro.analysis import sequential as sq
from specrepro.analysis import sequential_calibration as sc
from specrepro.analysis import sequential_plan as sp
from specrepro.analysis.analyze import INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED, analyze

N = 2000


@pytest.mark.parametrize("cell", sc.NULL_CELLS, ids=lambda c: c.name.split(":")[0].split(" (")[0].replace(" ", "_"))
def test_every_null_cell_keeps_the_nominal_rate_and_coverage(cell):
    r = sc.run_cell(cell, N, seed=100 + sc.NULL_CELLS.index(cell))
    assert r["reproduced"] <= 0.03 + 2 * r["reproduced_se"], (cell.name, r)
    if cell.expect == "equal":  # on the margin both verdicts are errors
        assert r["not_reproduced"] <= 0.03 + 2 * r["not_reproduced_se"], (cell.name, r)
    assert r["coverage"] >= 0.94 - 2 * r["coverage_se"], (cell.name, r)


def test_power_at_minus_eight_percent_and_the_cheapest_fixed_design_of_at_least_its_power():
    e = sc.efficiency(sc.POWER_CELL, N, seed=7)
    seq = e["sequential"]
    assert seq["reproduced"] >= 0.995  # 99.95% on 20,000 (benchmarks/); 99.97% before #39 on the same campaigns
    k = e["cheapest_at_least"]
    assert e["fixed"][k] >= seq["reproduced"] and all(e["fixed"][j] < seq["reproduced"] for j in e["fixed"] if j < k)
    assert seq["launches"] < k  # fewer launches than the cheapest fixed design of at least the same power


def deterministic_pair(gap: float, launches: int, prior: bool, rng: np.random.Generator, jitter: float):
    """Two deterministic arms `gap` apart, each launch mean rounded differently (relative `jitter`)."""
    rows = []
    for arm, mean in (("base", 4.0), ("arm", 4.0 * (1 + gap))):
        for launch in range(1, launches + 1):
            rows.append({"arm": arm, "benchmark": "b", "repeat": 1, "launch": launch, "metric": "accept_length",
                         "value": mean * (1 + rng.uniform(-jitter, jitter))})
    return pd.DataFrame(rows), {"multiplicity": "none", "within_fallback": {},
                                "launch_noise_prior": {"accept_length": 0.005} if prior else {}}


CLAIM = {"id": "c", "benchmark": "b", "metric": "accept_length", "arm": "arm", "against": "base"}


@pytest.mark.parametrize("expect", ["increase", "equal"])
def test_float_rounding_never_decides(expect):
    """Deterministic pairs 0.1% apart: the same verdict and interval whatever the rounding of their launch means
    (1e-15 relative), in the fixed design and the sequential one (before #39: 154 INCONCLUSIVE, 33 NOT REPRODUCED,
    13 REPRODUCED of 200, at +0.10% .. +0.10%)."""
    rng = np.random.default_rng(3)
    claim = {**CLAIM, "expect": expect}
    seen = set()
    for jitter in (0.0, 1e-16, 1e-15, 3e-15, 1e-15):
        table, settings = deterministic_pair(0.001, 5, True, rng, jitter)
        fixed = analyze(table, baseline="base", claims=[claim], settings=settings)["claims"][0]
        seq = sq.decide_sequential(table, [claim], settings, {"min": 2, "max": 5})["claims"][0]
        seen.add((fixed["verdict"], round(fixed["delta"]["ci_low"], 6), seq["verdict"], seq["round"],
                  round(seq["rci_low"], 6)))
    assert len(seen) == 1, seen
    (fixed_verdict, low, seq_verdict, _, _), = seen
    assert low < 0 and (fixed_verdict, seq_verdict) == ({"increase": NOT_REPRODUCED, "equal": REPRODUCED}[expect],) * 2


def test_identical_relaunches_add_no_information():
    """Two equal deterministic arms, `equal` within 2% on a 0.5% prior: the same interval after 2 launches as after
    5 (before #39: INCONCLUSIVE at max 4, REPRODUCED at max 5, the prior divided by the launches)."""
    rng = np.random.default_rng(4)
    claim = {**CLAIM, "expect": "equal"}
    results = []
    for launches in (2, 4, 5):
        table, settings = deterministic_pair(0.0, launches, True, rng, 1e-16)
        r = analyze(table, baseline="base", claims=[claim], settings=settings)["claims"][0]
        results.append((r["verdict"], round(r["delta"]["se"], 12), r["delta"]["df"]))
    assert len(set(results)) == 1 and results[0][2] == math.inf, results
    assert results[0][0] == REPRODUCED  # 0% +- 1.39% (two 0.5% priors) is within 2%, whatever the launches
    seen = set()
    for max_ in (4, 5):
        table, settings = deterministic_pair(0.0, max_, True, rng, 1e-16)
        d = sq.decide_sequential(table, [claim], settings, {"min": 2, "max": max_})["claims"][0]
        seen.add((d["verdict"], round(d["se"], 12)))
    assert seen == {(REPRODUCED, results[0][1])}, seen


def test_no_prior_and_zero_spread_is_not_testable_and_holds_no_arm():
    rng = np.random.default_rng(5)
    table, settings = deterministic_pair(0.03, 2, False, rng, 1e-16)
    claim = {**CLAIM, "expect": "increase"}
    d = sq.decide_sequential(table, [claim], settings, {"min": 2, "max": 5}, arms=["base", "arm"])
    (c,) = d["claims"]
    assert c["decided"] and c["not_testable"] and c["verdict"] == INCONCLUSIVE and c["round"] == 1
    assert c["estimate"] == pytest.approx(0.03, abs=1e-12) and d["done"] and d["next"] is None
    assert not any(a["needed"] for a in d["arms"].values())
    assert "NOT TESTABLE" in c["detail"] and "holds no arm" in c["detail"]
    assert "NOT TESTABLE" in sq.decided_table(d)
    fixed = analyze(table, baseline="base", claims=[claim], settings=settings)["claims"][0]
    assert fixed["not_testable"] and fixed["detail"].startswith("NOT TESTABLE")
    # the vectorised rule agrees: INCONCLUSIVE in round 1
    cell = sc.Cell("deterministic, no prior", 0.03, 0.0, 0.0, expect="increase")
    r = sc.run_cell(cell, 50, seed=1)
    assert r["inconclusive"] == 1.0 and r["launches"] == 2.0


def test_a_stand_in_prior_adds_variance_not_degrees_of_freedom():
    """Known numbers: a deterministic arm (prior 0.5% of 4.0, not divided by its 3 launches) against a noisy arm of
    3 launches: df is capped at the noisy arm's 2, where Satterthwaite alone gave 3.6 (a prior known exactly)."""
    det = noise.arm_noise([[4.0], [4.0 * (1 + 1e-16)], [4.0]], 0.005)
    noisy = noise.arm_noise([[4.10], [4.00], [4.05]], 0.005)
    d = noise.relative_change(noisy, det)
    v_noisy, v_det = np.var([4.10, 4.00, 4.05], ddof=1) / 3 / 4.0 ** 2, (0.005 * 4.05 / 4.0) ** 2
    assert d["se"] == pytest.approx(math.sqrt(v_noisy + v_det))
    assert (v_noisy + v_det) ** 2 / (v_noisy ** 2 / 2) > 2.5 and d["df"] == 2.0
    # two measured spreads: Satterthwaite less one, not below the smaller df nor min(Satterthwaite, 2)
    assert noise.welch_df([(1.0, 4.0), (1.0, 4.0)]) == pytest.approx(7.0)
    assert noise.welch_df([(1.0, 1.0), (1.0, 1.0)]) == pytest.approx(2.0)
    assert noise.welch_df([(1.0, 1.0), (0.01, 1.0)]) == pytest.approx(1.0 + 1.0 / 1.0201 * 0.0201 / 1.0201, rel=0.2)
    assert noise.welch_df([(1.0, 2.0), (1.0, math.inf)]) == pytest.approx(8.0)  # a known prior, not a stand-in


def test_holm_reports_the_round_whose_statistic_crossed():
    """A claim reproduced after round 4 only because Holm passed alpha on, by its round-3 statistic: the decision
    gives round 3's numbers (p, repeated CI), which clear the claim, and says it was decided after round 4."""
    n, effects = 3000, (-0.045, -0.06)
    rng = np.random.default_rng(11)
    claims, series = [], {}
    for i, e in enumerate(effects):
        claims.append({"id": f"c{i}", "benchmark": f"c{i}", "metric": sc.METRIC, "arm": f"arm{i}",
                       "against": f"base{i}", "expect": "decrease"})
        for a, mu in (("base", 300.0), ("arm", 300.0 * (1 + e))):
            series[(f"{a}{i}", f"c{i}", sc.METRIC)] = mu * (1 + rng.normal(0, 0.02, (n, 5)))
    sim = sp.simulate_rule(claims, series, [2, 3, 4, 5], 5, holm=True)
    late = np.argwhere((sim["status"] == sq.REPRO) & (sim["crossed_at"] < sim["decided_at"]))
    assert len(late), "no retroactive crossing among the simulated campaigns"
    s, i = map(int, late[0])
    rows = [{"arm": a, "benchmark": b, "repeat": 1, "launch": k + 1, "metric": m, "value": float(v[s, k])}
            for (a, b, m), v in series.items() for k in range(5)]
    d = sq.decide_sequential(pd.DataFrame(rows), claims, {"multiplicity": "holm", "launch_noise_prior": {},
                                                         "within_fallback": {}}, {"min": 2, "max": 5})
    c = d["claims"][i]
    crossed, after = int(sim["crossed_at"][s, i]) + 1, int(sim["decided_at"][s, i]) + 1
    assert (c["verdict"], c["round"], c["decided_after"]) == (REPRODUCED, crossed, after)
    assert c["rci_high"] < 0 and c["p_value"] <= 0.025
    assert f"decided after round {after} of 4 by its round {crossed} numbers" in c["detail"]
    assert f"{after} (round {crossed}'s numbers)" in sq.decided_table(d)
