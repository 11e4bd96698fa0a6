"""The sequential design's verdicts are measurements too: simulated campaigns whose truth is known.

As tests/test_calibration.py: each value = arm mean x (1 + launch effect, SD 2%) x (1 + repeat noise, SD 0.3%),
3 repeats a launch.  The design is the issue's example, experiment.launches {min: 2, max: 5} with the default
O'Brien-Fleming-type spending: looks after 2, 3, 4, 5 launches per arm.  Each campaign's table holds all five
launches of its arms; `decide_sequential` replays the rounds and uses an arm's launches only while a claim needs
it, exactly as it would after each real round.  Per-claim rates go through `decide_sequential` itself (many
campaigns as separate benchmarks and arms of one table, multiplicity `none`); the familywise rates go through
`sequential_plan.simulate_rule` (the same `rule_step` on the same statistics, vectorised: the agreement test
below holds the two equal decision by decision).  Fixed seeds; a Monte-Carlo SE beside every rate.
`benchmarks/sequential_calibration.py` reports the same scenarios with 20,000 campaigns each.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from specrepro.analysis import sequential as sq
from specrepro.analysis import sequential_plan as sp
from specrepro.analysis.analyze import NOT_REPRODUCED, REPRODUCED

LAUNCH_SD, REPEAT_SD, REPEATS = 0.02, 0.003, 3
POLICY = {"min": 2, "max": 5}
PER_CLAIM = {"multiplicity": "none", "launch_noise_prior": {}, "within_fallback": {}}
METRIC = "output_throughput"


def simulate(n: int, effect: float, seed: int, launches: int = 5, launch_sd=(LAUNCH_SD, LAUNCH_SD),
             base=300.0) -> pd.DataFrame:
    """n campaigns: benchmark c{i}, arms base{i} and arm{i} (mean base x (1 + effect)), `launches` launches each."""
    rng = np.random.default_rng(seed)
    shift = {a: 1 + rng.normal(0, sd, (n, launches)) for a, sd in zip(("base", "arm"), launch_sd)}
    noise = {a: 1 + rng.normal(0, REPEAT_SD, (n, launches, REPEATS)) for a in ("base", "arm")}
    frames = []
    for a, mean in (("base", base), ("arm", base * (1 + effect))):
        values = mean * shift[a][:, :, None] * noise[a]
        c, launch, rep = np.meshgrid(np.arange(n), np.arange(1, launches + 1), np.arange(1, REPEATS + 1),
                                     indexing="ij")
        frames.append(pd.DataFrame({"arm": [f"{a}{i}" for i in c.ravel()], "benchmark": [f"c{i}" for i in c.ravel()],
                                    "repeat": rep.ravel(), "launch": launch.ravel(), "metric": METRIC,
                                    "value": values.ravel()}))
    return pd.concat(frames, ignore_index=True)


def claims_for(n: int, expect: str, **extra):
    return [{"id": f"c{i}", "benchmark": f"c{i}", "metric": METRIC, "arm": f"arm{i}", "against": f"base{i}",
             "expect": expect, **extra} for i in range(n)]


def rate(rows, verdict) -> float:
    return sum(r["verdict"] == verdict for r in rows) / len(rows)


def mc_se(p: float, n: int) -> float:
    return math.sqrt(p * (1 - p) / n)


def covered(rows, truth: float, naive: bool = False) -> float:
    """Share of claims whose interval at the deciding look covers the truth: the repeated CI the decision reports,
    or (naive) the plain 95% t interval at that same data-chosen look."""
    hits = 0
    for r in rows:
        lo, hi = (r["rci_low"], r["rci_high"]) if not naive else sq.repeated_interval(r["estimate"], r["se"], r["df"],
                                                                                        0.025)
        hits += lo <= truth <= hi
    return hits / len(rows)


CALIBRATION = {}


def record(name, p, n, note=""):
    CALIBRATION[name] = (p, mc_se(p, n), n, note)


def test_no_true_change_is_rarely_reproduced_after_four_looks():
    n = 600
    table = simulate(n, 0.0, seed=21)
    d = sq.decide_sequential(table, claims_for(n, "decrease"), PER_CLAIM, POLICY)
    rows = d["claims"]
    r = rate(rows, REPRODUCED)
    record("null, looks at 2/3/4/5 launches: REPRODUCED (nominal 2.5%)", r, n)
    assert r <= 0.05, f"false REPRODUCED {r:.1%} +- {mc_se(r, n):.1%} (MC)"
    cov = covered(rows, 0.0)
    record("null: repeated 95% CI at the deciding round covers 0", cov, n)
    assert cov >= 0.93
    launches = np.mean([c["launches"] for c in rows])
    CALIBRATION["null: launches per arm used (max 5)"] = (launches, None, n, "")


def test_a_true_eight_percent_drop_is_found_and_stops_early():
    n = 300
    table = simulate(n, -0.08, seed=22)
    rows = sq.decide_sequential(table, claims_for(n, "decrease"), PER_CLAIM, POLICY)["claims"]
    power = rate(rows, REPRODUCED)
    record("true -8%: REPRODUCED (power)", power, n)
    assert power >= 0.80 and rate(rows, NOT_REPRODUCED) == 0
    cov, naive = covered(rows, -0.08), covered(rows, -0.08, naive=True)
    record("true -8%: repeated 95% CI at the deciding round covers -8%", cov, n)
    record("true -8%: naive 95% CI at the deciding round covers -8% (not reported)", naive, n)
    assert cov >= 0.93
    used = np.array([c["launches"] for c in rows], dtype=float)
    # the fixed designs on the same campaigns: analyze's one look at n launches (decide_sequential with min = max)
    fixed = {}
    for k in (3, 4, 5):
        fixed[k] = rate(sq.decide_sequential(table, claims_for(n, "decrease"), PER_CLAIM, {"min": k, "max": k})
                        ["claims"], REPRODUCED)
    same = min(k for k, p in fixed.items() if p >= power - 2 * mc_se(power, n))
    CALIBRATION["true -8%: launches per arm used (sequential)"] = (
        used.mean(), used.std() / math.sqrt(n), n,
        f"fixed: 3 launches {fixed[3]:.1%}, 4 {fixed[4]:.1%}, 5 {fixed[5]:.1%} power; the same power needs {same}: "
        f"saving {1 - used.mean() / same:.0%} of the launches")
    assert used.mean() < same


def test_either_verdict_at_the_margin_is_rare():
    """An `equal` claim whose truth sits on its margin (+2%, launch SD 0.5%): equal and unequal are both false,
    so both REPRODUCED and NOT REPRODUCED are errors, each bounded by its own 2.5% spending."""
    n = 400
    table = simulate(n, 0.02, seed=23, launch_sd=(0.005, 0.005))
    rows = sq.decide_sequential(table, claims_for(n, "equal", margin=0.02), PER_CLAIM, POLICY)["claims"]
    for verdict in (REPRODUCED, NOT_REPRODUCED):
        r = rate(rows, verdict)
        record(f"equal claim, truth on its +2% margin: {verdict} (nominal 2.5%)", r, n)
        assert r <= 0.05


def vector_campaigns(effects, n, seed, launch_sd=(LAUNCH_SD, LAUNCH_SD), expect="decrease"):
    """S = n campaigns of len(effects) claims, as launch means for simulate_rule."""
    rng = np.random.default_rng(seed)
    series, claims = {}, []
    for i, e in enumerate(effects):
        claims.append({"id": f"c{i}", "benchmark": f"c{i}", "metric": METRIC, "arm": f"arm{i}",
                       "against": f"base{i}", "expect": expect})
        for (a, mean), sd in zip((("base", 300.0), ("arm", 300.0 * (1 + e))), launch_sd):
            series[(f"{a}{i}", f"c{i}", METRIC)] = (mean * (1 + rng.normal(0, sd, (n, 5)))
                                                    * (1 + rng.normal(0, REPEAT_SD / math.sqrt(REPEATS), (n, 5))))
    return claims, series


@pytest.mark.parametrize("effects,label", [((0.0,) * 10, "10 null claims"),
                                           ((0.0,) * 5 + (-0.08,) * 5, "5 null + 5 at -8% (alpha passed on)"),
                                           ((0.0,) * 2 + (-0.3,) * 8, "2 null + 8 at -30% (alpha passed on)")])
def test_holm_keeps_the_familywise_error_over_looks(effects, label):
    n = 10000
    claims, series = vector_campaigns(effects, n, seed=24 + len(label))
    sim = sp.simulate_rule(claims, series, [2, 3, 4, 5], 5, holm=True)
    nulls = [i for i, e in enumerate(effects) if e == 0]
    fwer = float(np.mean((sim["status"][:, nulls] == sq.REPRO).any(axis=1)))
    record(f"{label}, Holm: any null REPRODUCED (nominal 2.5%)", fwer, n)
    assert fwer <= 0.05


def test_unequal_launch_noise_stays_bounded():
    """Welch with 1-2 df per arm at the first look and one arm four times noisier (1% vs 4%): the hardest case."""
    n = 20000
    claims, series = vector_campaigns((0.0,), n, seed=25, launch_sd=(0.01, 0.04))
    sim = sp.simulate_rule(claims, series, [2, 3, 4, 5], 5, holm=False)
    r = float(np.mean(sim["status"] == sq.REPRO))
    record("null, launch SD 1% vs 4%: REPRODUCED (Welch, few df)", r, n)
    assert r <= 0.05


def test_the_vectorised_rule_is_the_table_decision():
    """The same campaigns (three claims each, Holm) through decide_sequential and through simulate_rule:
    identical verdicts and rounds."""
    n, effects = 30, (0.0, -0.05, -0.3)
    claims = [{"id": f"c{i}", "benchmark": f"c{i}", "metric": METRIC, "arm": f"arm{i}", "against": f"base{i}",
               "expect": "decrease"} for i in range(3)]
    series = {(f"{a}{i}", f"c{i}", METRIC): np.zeros((n, 5)) for i in range(3) for a in ("base", "arm")}
    table_verdicts = []
    for s in range(n):
        parts = []
        for i, e in enumerate(effects):
            t = simulate(1, e, seed=1000 * s + i).replace({"c0": f"c{i}", "base0": f"base{i}", "arm0": f"arm{i}"})
            parts.append(t)
            for a in ("base", "arm"):
                series[(f"{a}{i}", f"c{i}", METRIC)][s] = t[t["arm"] == f"{a}{i}"].groupby("launch")["value"].mean()
        d = sq.decide_sequential(pd.concat(parts), claims, {**PER_CLAIM, "multiplicity": "holm"}, POLICY)
        table_verdicts.append([(c["verdict"], c["round"]) for c in d["claims"]])
    sim = sp.simulate_rule(claims, series, [2, 3, 4, 5], 5, holm=True)
    vector = [[(sq.VERDICT_OF[int(st)], int(k) + 1) for st, k in zip(sim["status"][s], sim["decided_at"][s])]
              for s in range(n)]
    assert vector == table_verdicts
    assert {v for row in vector for v, _ in row} >= {REPRODUCED}


@pytest.fixture(scope="module", autouse=True)
def calibration_table(request):
    yield
    if CALIBRATION:
        lines = ["", "sequential calibration ({min: 2, max: 5}, O'Brien-Fleming-type; value +- Monte-Carlo SE):"]
        for k, (v, se, n, note) in CALIBRATION.items():
            val = f"{v:.1%} +- {se:.1%}" if v <= 1 else (f"{v:.2f}" + (f" +- {se:.2f}" if se is not None else ""))
            lines.append(f"  {k}: {val} (n={n}){'; ' + note if note else ''}")
        request.config.pluginmanager.get_plugin("terminalreporter").write_line("\n".join(lines))
