"""Planning a sequential design: simulated campaigns through the sequential rule, vectorised over campaigns.

The statistics are `analyze`'s, in array form (each arm's launch means are its replicates; Welch-Satterthwaite;
the delta method; a `restores` claim's gap must stand out of its noise first); tests/test_sequential.py holds them
equal to `judge_claim`'s on the same tables.  The decision is `sequential.rule_step`, the very function
`decide_sequential` applies to a runs table.

Model of a campaign: each arm's launch mean on (benchmark, metric) is mu x (1 + launch effect) x (1 + mean of
`repeats` repeat errors), launch effects N(0, launch_cv^2) and repeat errors N(0, repeat_cv^2), independent across
arms, launches and (benchmark, metric) keys.  mu is the stated truth: the experiment's published table
(`experiment.reference`) and any stated assumptions for what it lacks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
from scipy import special

from specrepro.analysis import noise, stats
from specrepro.util.metric_names import base_metric, lookup
from specrepro.analysis.sequential import (
    CONTRA, INCONC, OPEN, Policy, REPRO, SEQUENTIAL_KINDS, VERDICT_OF, arms_of, boundary_table, claim_tests,
    nominal_levels, rule_step)
from specrepro.analysis.analyze import DEFAULT_SETTINGS
from specrepro.core.cost import run_cost

BINOMIAL_METRICS = ("accuracy", "invalid_rate")
Key = Tuple[str, str, str]  # (arm, benchmark, metric)


# --- analyze's statistics, vectorised over campaigns ---------------------------------------------------------------

def _welch(terms) -> Tuple[np.ndarray, np.ndarray]:
    """noise.welch_df on arrays: terms (variance, df[, stand_in]); the standard error and the df."""
    terms = [(np.asarray(t[0], float), np.asarray(t[1], float), np.asarray(t[2] if len(t) > 2 else False, bool))
             for t in terms]
    total = sum(v for v, _, _ in terms)
    measured = [(v > 0) & np.isfinite(d) for v, d, _ in terms]
    with np.errstate(divide="ignore", invalid="ignore"):
        denom = sum(np.where(m, v * v / np.where(m, d, 1.0), 0.0) for (v, d, _), m in zip(terms, measured))
        df = np.where(denom > 0, total * total / np.where(denom > 0, denom, 1.0), np.inf)
    count = sum(m.astype(int) for m in measured)
    smallest = np.min(np.stack([np.where(m, d, np.inf) for (_, d, _), m in zip(terms, measured)]), axis=0)
    summed = sum(np.where(m, d, 0.0) for (_, d, _), m in zip(terms, measured))
    df = np.where(count >= 2, np.maximum(np.maximum(np.minimum(df, noise.SMALL_DF), smallest), df - 1.0), df)
    leans = np.any(np.stack([s & (v > 0) for v, _, s in terms]), axis=0)
    df = np.where((count >= 1) & leans, np.minimum(df, summed), df)
    df = np.where(total > 0, df, np.nan)
    return np.sqrt(total), df


def arm_moments(launch_means: np.ndarray, n: int, prior_cv: Optional[float] = None):
    """noise.arm_noise on arrays, on each campaign's first n launch means: (mean, variance of the mean, df,
    stand_in).  Identical means (noise.identical) take the prior, undivided and marked as a stand-in, or keep a
    zero variance without one."""
    x = launch_means[..., :n]
    mean = x.mean(axis=-1)
    scale = np.max(np.abs(x), axis=-1)
    same = np.ptp(x, axis=-1) <= noise.ZERO_SPREAD_RTOL * scale
    var = np.where(same, 0.0, x.var(axis=-1, ddof=1) / n)
    df = np.full(mean.shape, float(n - 1))
    stand_in = same & bool(prior_cv)
    if prior_cv:
        var = np.where(same, (prior_cv * mean) ** 2, var)
        df = np.where(same, np.inf, df)
    return mean, var, df, stand_in


def relative_change(a, b, extra_se=0.0):
    """noise.relative_change on arrays: a, b = arm_moments' (mean, variance of the mean, df, stand_in)."""
    (ma, va, da, sa), (mb, vb, db, sb) = a, b
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = ma / mb - 1.0
        terms = [(va / mb ** 2, da, sa), (vb * ma ** 2 / mb ** 4, db, sb)]
        if np.any(np.asarray(extra_se) > 0):
            terms.append((np.asarray(extra_se, float) ** 2 + 0 * rel, math.inf))
        se, df = _welch(terms)
    testable = np.isfinite(rel) & (se > 0)
    return rel, se, df, testable


def restored_fraction(fixed, level, broken):
    """noise.restored_fraction on arrays, with `_judge_restores`' precondition: the gap must exceed its 95% noise."""
    (mf, vf, dff, sf), (ml, vl, dl, sl), (mb, vb, db, sb) = fixed, level, broken
    gap, closed = ml - mb, mf - mb
    with np.errstate(divide="ignore", invalid="ignore"):
        r = closed / gap
        se, df = _welch([(vf / gap ** 2, dff, sf), (vl * closed ** 2 / gap ** 4, dl, sl),
                         (vb * (closed - gap) ** 2 / gap ** 4, db, sb)])
        gap_t = special.stdtrit(np.where(np.isnan(df), np.inf, df), 0.975)
        testable = (gap != 0) & (np.abs(gap) > gap_t * np.sqrt(vl + vb)) & (se > 0) & np.isfinite(r)
    return r, se, df, testable


def claim_statistics(claim: Dict[str, Any], series: Mapping[Key, np.ndarray], n: int,
                     questions: Optional[Mapping[str, int]] = None, priors: Optional[Mapping[str, float]] = None):
    """(estimate, se, df, testable) of a sequential claim over simulated campaigns, each arm on its first n launches;
    `priors`: metric -> launch prior CV (analysis.launch_noise_prior), for arms whose launches come out identical."""
    bench, metric = claim["benchmark"], claim["metric"]
    prior = lookup(priors, metric)  # a metric per category: its base metric's prior unless its own
    mom = {a: arm_moments(series[(a, bench, metric)], n, prior) for a in arms_of(claim)}
    if claim["expect"] == "restores":
        return restored_fraction(mom[claim["arm"]], mom[claim["against"]], mom[claim["from"]])
    a, b = mom[claim["arm"]], mom[claim["against"]]
    extra = 0.0
    q = (questions or {}).get(bench)
    if base_metric(metric) in BINOMIAL_METRICS and q:
        with np.errstate(divide="ignore", invalid="ignore"):
            extra = np.where(b[0] != 0, np.sqrt(a[0] * (1 - a[0]) / q + b[0] * (1 - b[0]) / q) / b[0], 0.0)
    return relative_change(a, b, extra)


def untestable(claim: Dict[str, Any], series: Mapping[Key, np.ndarray], n: int,
               priors: Optional[Mapping[str, float]] = None) -> np.ndarray:
    """Campaigns in which every arm of the claim has identical launches and its metric no prior: NOT TESTABLE."""
    if lookup(priors, claim["metric"]):
        return np.zeros(next(iter(series.values())).shape[0], dtype=bool)
    out = None
    for a in arms_of(claim):
        x = series[(a, claim["benchmark"], claim["metric"])][..., :n]
        same = np.ptp(x, axis=-1) <= noise.ZERO_SPREAD_RTOL * np.max(np.abs(x), axis=-1)
        out = same if out is None else out & same
    return out


# --- the rule over simulated campaigns ----------------------------------------------------------------------------

def simulate_rule(claims: List[Dict[str, Any]], series: Mapping[Key, np.ndarray], schedule: Sequence[int],
                  n_max: int, alpha: float = 0.025, holm: bool = True, spending: str = "obrien_fleming",
                  rho: float = 3.0, margin: float = 0.02, questions: Optional[Mapping[str, int]] = None,
                  priors: Optional[Mapping[str, float]] = None, family: Optional[int] = None
                  ) -> Dict[str, np.ndarray]:
    """The sequential rule on S simulated campaigns of the sequential `claims` (all arms in lockstep).

    `series`: (arm, benchmark, metric) -> (S, >= max(schedule)) launch means; `priors`: metric -> launch prior CV.
    Returns status (S, m), decided_at (S, m, 0-based look), crossed_at (the look whose statistic decided it),
    est/se/df (S, m, K) and the per-claim nominal level at each look (m, K).  A claim NOT TESTABLE at a look
    (identical launches, no prior) is INCONCLUSIVE there.  A fixed design of n launches is schedule [n], n_max n.
    `family`: Holm's family when it is larger than the simulated claims (the others never reject here)."""
    K, m = len(schedule), len(claims)
    S = next(iter(series.values())).shape[0]
    est, se, df = (np.full((S, m, K), np.nan) for _ in range(3))
    p_claim, p_contra = np.full((S, m, K), np.nan), np.full((S, m, K), np.nan)
    stuck = np.zeros((S, m, K), dtype=bool)
    for j, n in enumerate(schedule):
        for i, c in enumerate(claims):
            stuck[:, i, j] = untestable(c, series, n, priors)
            e, s, d, ok = claim_statistics(c, series, n, questions, priors)
            pc, pn = claim_tests(c["expect"], e, s, d, float(c.get("margin", margin)), float(c.get("fraction", 0.9)))
            est[:, i, j], se[:, i, j], df[:, i, j] = e, s, d
            p_claim[:, i, j] = np.where(ok, pc, np.nan)
            p_contra[:, i, j] = np.where(ok, pn, np.nan)
    M = max(m, family or 0)
    R = M if holm and m else 1
    levels = [nominal_levels(schedule, n_max, alpha / (M - r) if holm else alpha, spending, rho) for r in range(R)]
    nominal_claim = np.broadcast_to(np.array(levels)[None, :, :], (m, R, K))
    per_claim = nominal_levels(schedule, n_max, alpha, spending, rho)
    nominal_contra = np.broadcast_to(per_claim[None, :], (m, K))
    status = np.zeros((S, m), dtype=int)
    decided_at, crossed_at = np.full((S, m), -1, dtype=int), np.full((S, m), -1, dtype=int)
    for j in range(K):
        rule_step(status, decided_at, j, p_claim[:, :, :j + 1], p_contra[:, :, :j + 1],
                  nominal_claim[:, :, :j + 1], nominal_contra[:, :j + 1], crossed_at)
        hold = (status == OPEN) & stuck[:, :, j]
        status[hold], decided_at[hold], crossed_at[hold] = INCONC, j, j
    decided_at[status == OPEN] = K - 1
    status[status == OPEN] = INCONC
    crossed_at = np.where(crossed_at < 0, decided_at, crossed_at)
    return {"status": status, "decided_at": decided_at, "crossed_at": crossed_at, "est": est, "se": se, "df": df, "nominal": per_claim,
            "p_claim": p_claim, "p_contra": p_contra}


def interval_at_decision(sim: Dict[str, np.ndarray], level: Optional[float] = None) -> Tuple[np.ndarray, np.ndarray]:
    """(low, high) at each claim's deciding look: the repeated CI (its look's nominal level), or the naive interval
    at a fixed one-sided `level` (0.025: the 95% interval a fixed design would print)."""
    S, m = sim["status"].shape
    k = sim.get("crossed_at", sim["decided_at"])
    pick = lambda a: np.take_along_axis(a, k[:, :, None], axis=2)[:, :, 0]  # noqa: E731
    e, s, d = pick(sim["est"]), pick(sim["se"]), pick(sim["df"])
    a = sim["nominal"][k] if level is None else np.full((S, m), level)
    q = special.stdtrit(d, 1.0 - a)
    return e - q * s, e + q * s


def arm_launches(claims: List[Dict[str, Any]], sim: Dict[str, np.ndarray], schedule: Sequence[int],
                 arms: Sequence[str]) -> Dict[str, np.ndarray]:
    """Per arm, the launches each simulated campaign ran: n at the last look an open claim needed it (round 1 for
    an arm no sequential claim names)."""
    out = {}
    for a in arms:
        idx = [i for i, c in enumerate(claims) if a in arms_of(c)]
        last = sim["decided_at"][:, idx].max(axis=1) if idx else np.zeros(sim["status"].shape[0], dtype=int)
        out[a] = np.asarray(schedule)[last]
    return out


def simulate_series(truth: Mapping[Key, float], noise: Mapping[Tuple[str, str], Tuple[float, float]],
                    repeats: Mapping[str, int], launches: int, n_sim: int, rng: np.random.Generator
                    ) -> Dict[Key, np.ndarray]:
    """Launch means mu (1 + launch effect)(1 + mean repeat error) for every (arm, benchmark, metric) of `truth`."""
    out = {}
    for key, mu in truth.items():
        launch_cv, repeat_cv = noise[(key[1], key[2])]
        r = max(int(repeats.get(key[1], 1)), 1)
        shift = rng.normal(0.0, launch_cv, (n_sim, launches)) if launch_cv else np.zeros((n_sim, launches))
        rep = rng.normal(0.0, repeat_cv / math.sqrt(r), (n_sim, launches)) if repeat_cv else 0.0
        out[key] = mu * (1 + shift) * (1 + rep)
    return out


# --- planning -------------------------------------------------------------------------------------------------------

def true_effect(claim: Dict[str, Any], truth: Mapping[Key, float]) -> Optional[float]:
    b, m = claim["benchmark"], claim.get("metric")
    try:
        if claim["expect"] == "restores":
            f, lv, br = (truth[(claim[k], b, m)] for k in ("arm", "against", "from"))
            return (f - br) / (lv - br)
        return truth[(claim["arm"], b, m)] / truth[(claim["against"], b, m)] - 1
    except (KeyError, ZeroDivisionError):
        return None


def expected_verdict(claim: Dict[str, Any], effect: Optional[float], margin: float) -> Optional[str]:
    """The verdict the stated effect earns with unlimited launches (None on a claim's boundary or without one)."""
    if effect is None:
        return None
    pc, pn = claim_tests(claim["expect"], effect, 1e-12, math.inf, float(claim.get("margin", margin)),
                         float(claim.get("fraction", 0.9)))
    return REPRODUCED_ if pc < 0.5e-3 else (NOT_REPRODUCED_ if pn < 0.5e-3 else None)


REPRODUCED_, NOT_REPRODUCED_ = VERDICT_OF[REPRO], VERDICT_OF[CONTRA]


def _se(p, n):
    return math.sqrt(max(p * (1 - p), 0.0) / n)


@dataclass(frozen=True)
class _Simulation:
    """What every design of one plan is run on: the same simulated campaigns, claims and costs."""

    planned: List[Dict[str, Any]]
    series: Any
    arms: List[str]
    cost: np.ndarray
    held_to_max: frozenset
    effects: List[Optional[float]]
    expected: List[Optional[str]]
    n_sim: int
    # simulate_rule's arguments after (claims, series, schedule, n_max)
    rule_args: Tuple[Any, ...]


def _claim_summary(sim_out: Dict[str, np.ndarray], i: int, claim: Dict[str, Any], effect, expected,
                   n_schedule: int, n_sim: int) -> Tuple[Dict[str, Any], np.ndarray]:
    """One claim's verdict shares and power over the simulated campaigns; the campaigns where it got its due."""
    st, k = sim_out["status"][:, i], sim_out["decided_at"][:, i]
    verdict = np.array([VERDICT_OF[s] for s in (REPRO, CONTRA, INCONC)], dtype=object)
    good = (st == {REPRODUCED_: REPRO, NOT_REPRODUCED_: CONTRA}[expected]) if expected else np.ones(n_sim, dtype=bool)
    p = {v: float(np.mean(st == s)) for v, s in zip(verdict, (REPRO, CONTRA, INCONC))}
    return ({"id": claim["id"], "effect": effect, "expected": expected, "p": p,
             "power": float(good.mean()) if expected else None, "mean_round": float(np.mean(k + 1)),
             "rounds": [float(np.mean(k == j)) for j in range(n_schedule)]}, good)


def _design_summary(sim: _Simulation, schedule: Sequence[int], n_max: int) -> Dict[str, Any]:
    """One design (a schedule of launches per arm) on the simulated campaigns: GPU-hours, launches, power."""
    n_sim = sim.n_sim
    out = simulate_rule(sim.planned, sim.series, schedule, n_max, *sim.rule_args) if sim.planned else None
    per_arm = arm_launches(sim.planned, out, schedule, sim.arms) if out else \
        {a: np.full(n_sim, schedule[0]) for a in sim.arms}
    for a in sim.held_to_max:
        per_arm[a] = np.full(n_sim, schedule[-1])
    launches = np.stack([per_arm[a] for a in sim.arms], axis=1)
    gpu_h = launches @ sim.cost
    rows, ok = [], np.ones(n_sim, dtype=bool)
    for i, c in enumerate(sim.planned):
        row, good = _claim_summary(out, i, c, sim.effects[i], sim.expected[i], len(schedule), n_sim)
        if sim.expected[i]:
            ok &= good
        rows.append(row)
    power = float(ok.mean())
    return {"schedule": list(schedule), "gpu_hours": float(gpu_h.mean()),
            "gpu_hours_se": float(gpu_h.std() / math.sqrt(n_sim)),
            "launches": float(launches.sum(axis=1).mean()),
            "launches_se": float(launches.sum(axis=1).std() / math.sqrt(n_sim)),
            "arm_launches": {a: float(per_arm[a].mean()) for a in sim.arms},
            "power": power, "power_se": _se(power, n_sim), "claims": rows, "_gpu": gpu_h}


def _public(summary: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in summary.items() if k != "_gpu"}


def _against_fixed(seq_sum: Dict[str, Any], fixed_rows: List[Dict[str, Any]], fixed: Optional[int],
                   n_sim: int) -> Dict[str, Any]:
    """The design beside fixed ones: the cheapest fixed design of at least its power (and the next cheaper one),
    and the configured fixed design."""
    out: Dict[str, Any] = {}
    same = next((f for f in fixed_rows if f["power"] >= seq_sum["power"]), None)
    if same is not None:
        d = same["_gpu"] - seq_sum["_gpu"]
        out["same_power"] = {"n": same["n"], "gpu_hours": same["gpu_hours"], "power": same["power"],
                             "saving_gpu_hours": float(d.mean()), "saving_se": float(d.std() / math.sqrt(n_sim)),
                             # a platform without GPUs (the CPU testbed) costs launches, not GPU-hours
                             "saving_share": float(d.mean() / same["gpu_hours"]) if same["gpu_hours"] else 0.0}
        cheaper = [f for f in fixed_rows if f["n"] < same["n"]]
        if cheaper:  # the next cheaper fixed design: what the saving buys against it is power
            out["same_power"]["below"] = {"n": cheaper[-1]["n"], "power": cheaper[-1]["power"],
                                          "gpu_hours": cheaper[-1]["gpu_hours"]}
    if fixed:
        f = next(f for f in fixed_rows if f["n"] == fixed)
        d = f["_gpu"] - seq_sum["_gpu"]
        out["configured"] = {"n": fixed, "gpu_hours": f["gpu_hours"], "power": f["power"], "power_se": f["power_se"],
                             "claims": f["claims"], "difference_gpu_hours": float(d.mean()),
                             "difference_se": float(d.std() / math.sqrt(n_sim))}
    return out


def plan_design(claims: List[Dict[str, Any]], truth: Mapping[Key, float],
                noise: Mapping[Tuple[str, str], Tuple[float, float]], repeats: Mapping[str, int], policy: Any,
                launch_gpu_hours: Mapping[str, float], settings: Optional[Dict[str, Any]] = None,
                arms: Optional[Sequence[str]] = None, fixed: Optional[int] = None, n_sim: int = 4000, seed: int = 0,
                questions: Optional[Mapping[str, int]] = None, fixed_up_to: Optional[int] = None) -> Dict[str, Any]:
    """The design's launches and GPU-hours (minimum, maximum, expected under the stated effects and noise) beside
    fixed designs of n launches per arm on the same simulated campaigns, the one of the same power among them.

    `truth`: (arm, benchmark, metric) -> true mean (published tables and stated assumptions); `noise`: (benchmark,
    metric) -> (between-launch CV, within-launch repeat CV); `repeats`: benchmark -> repeats per launch;
    `launch_gpu_hours`: arm -> GPU-hours of one launch (loading plus its runs); `arms`: every arm of the campaign
    (default: those of `launch_gpu_hours`); `fixed`: the configured fixed launches, shown beside.  Power: the chance
    that every claim with a stated effect gets the verdict that effect earns with unlimited launches.  A claim whose
    arms lack a stated mean is not simulated: it holds its arms to max (listed under `unplanned`).
    """

    settings = {**DEFAULT_SETTINGS, **(settings or {})}
    policy = Policy.parse(policy)
    alpha, holm, margin = float(settings["alpha"]) / 2, settings["multiplicity"] == "holm", settings["default_margin"]
    arms = list(arms or launch_gpu_hours)
    seq = [c for c in claims if c.get("expect") in SEQUENTIAL_KINDS]
    planned = [c for c in seq if all((a, c["benchmark"], c["metric"]) in truth for a in arms_of(c))]
    unplanned = [c for c in seq if c not in planned]
    top = max(policy.max, fixed or 0, fixed_up_to or 2 * policy.max)
    rng = np.random.default_rng(seed)
    keys = {(a, c["benchmark"], c["metric"]) for c in planned for a in arms_of(c)}
    effects = [true_effect(c, truth) for c in planned]
    sim = _Simulation(
        planned=planned, series=simulate_series({k: truth[k] for k in sorted(keys)}, noise, repeats, top, n_sim, rng),
        arms=arms, cost=np.array([float(launch_gpu_hours[a]) for a in arms]),
        held_to_max=frozenset(a for c in unplanned for a in arms_of(c)), effects=effects,
        expected=[expected_verdict(c, e, margin) for c, e in zip(planned, effects)], n_sim=n_sim,
        # the family: Holm counts every sequential claim, simulated or not (an unplanned one never rejects here)
        rule_args=(alpha, holm, policy.spending, policy.rho, margin, questions,
                   settings.get("launch_noise_prior") or {}, len(seq)))
    seq_sum = _design_summary(sim, policy.schedule, policy.max)
    fixed_rows = [{**_public(f), "n": n, "_gpu": f["_gpu"]}
                  for n, f in ((n, _design_summary(sim, [n], n)) for n in range(2, top + 1))]
    cost = sim.cost
    out = {"policy": policy.as_dict(), "schedule": policy.schedule, "n_sim": n_sim, "seed": seed,
           "boundaries": boundary_table(policy, alpha),
           "gpu_hours": {"min": float(policy.min * cost.sum()), "max": float(policy.max * cost.sum()),
                         "expected": seq_sum["gpu_hours"], "expected_se": seq_sum["gpu_hours_se"]},
           "launches": {"min": policy.min * len(arms), "max": policy.max * len(arms),
                        "expected": seq_sum["launches"], "expected_se": seq_sum["launches_se"]},
           "sequential": _public(seq_sum), "fixed": [_public(f) for f in fixed_rows],
           "unplanned": [c["id"] for c in unplanned], "launch_gpu_hours": dict(launch_gpu_hours),
           "family": len(seq)}
    against = _against_fixed(seq_sum, fixed_rows, fixed, n_sim)
    out.update({k: against[k] for k in ("same_power",) if k in against})
    # round 1 must be able to decide something, or `min` launches are only the first part of a larger fixed design
    out["first_round"] = {"decides": max((c["rounds"][0] for c in seq_sum["claims"]), default=0.0),
                          "t": out["boundaries"][0]["t"], "df": out["boundaries"][0]["df"]}
    out.update({k: against[k] for k in ("configured",) if k in against})
    return out


# --- from the campaign's configuration ------------------------------------------------------------------------------

def launch_gpu_hours(cfg: Mapping[str, Any]) -> Dict[str, float]:
    """GPU-hours of one launch of each arm, by `campaign_cost`'s model: serve.expected_load_s plus each of its
    benchmarks' repeats at run_cost's seconds, times model.gpus."""

    exp, serve = cfg["experiment"], cfg["serve"]
    gpus = int(cfg["model"]["gpus"])
    out = {}
    for name, arm in exp["arms"].items():
        seconds = float(serve["expected_load_s"])
        for b in arm["benchmarks"]:
            bench = cfg["benchmarks"][b]
            reps = bench.get("repeats") if bench.get("repeats") is not None else exp["repeats"]
            seconds += run_cost(bench, serve)["seconds"] * reps
        out[name] = seconds * gpus / 3600
    return out


def truth_from_reference(reference: Mapping[str, Any], assumed: Optional[Mapping[str, Any]] = None) -> Dict[Key, float]:
    """(arm, benchmark, metric) -> mean from the published table, then `assumed` over it: arm -> {benchmark:
    {metric: value}}, or arm -> another arm's name (the same means: "as that arm")."""
    table = {a: {b: dict(ms) for b, ms in bs.items()} for a, bs in (reference or {}).items()}
    for arm, value in (assumed or {}).items():
        if isinstance(value, str):
            table[arm] = {b: dict(ms) for b, ms in table[value].items()}
        else:
            for b, ms in value.items():
                table.setdefault(arm, {}).setdefault(b, {}).update(ms)
    return {(a, b, m): float(v) for a, bs in table.items() for b, ms in bs.items() for m, v in ms.items()}


def noise_from_settings(claims: List[Dict[str, Any]], settings: Mapping[str, Any],
                        reference_repeats: Optional[Mapping[str, Any]] = None
                        ) -> Dict[Tuple[str, str], Tuple[float, float]]:
    """(benchmark, metric) -> (between-launch CV: the prior, within-launch CV: the published repeats', else the
    fallback, else 0), as `plan`'s decidability reads them."""

    out = {}
    for c in claims:
        if c.get("expect") not in SEQUENTIAL_KINDS:
            continue
        b, m = c["benchmark"], c["metric"]
        published = ((reference_repeats or {}).get(b) or {}).get(m)
        within = (stats.coefficient_of_variation(published) if published and len(published) > 1 else
                  lookup(settings.get("within_fallback"), m, 0.0))
        out[(b, m)] = (float(lookup(settings.get("launch_noise_prior"), m, 0.0)), float(within or 0.0))
    return out


def plan_from_config(cfg: Mapping[str, Any], claims: List[Dict[str, Any]], policy: Any,
                     assumed: Optional[Mapping[str, Any]] = None, fixed: Optional[int] = None, n_sim: int = 4000,
                     seed: int = 0) -> Dict[str, Any]:
    """plan_design fed from a composed config: the published table (plus `assumed`) as truth, the priors and the
    published repeats as noise, the experiment's repeats, and campaign_cost's model of a launch."""
    exp = cfg["experiment"]
    settings = dict(cfg["analysis"])
    repeats = {b: (v.get("repeats") if v.get("repeats") is not None else exp["repeats"])
               for b, v in cfg["benchmarks"].items()}
    return plan_design(claims, truth_from_reference(exp.get("reference") or {}, assumed),
                       noise_from_settings(claims, settings, exp.get("reference_repeats")), repeats, policy,
                       launch_gpu_hours(cfg), settings, list(exp["arms"]), fixed, n_sim, seed)


def format_plan(plan: Dict[str, Any]) -> str:
    """The text `specrepro plan` prints: the boundaries, then GPU-hours of the design beside fixed designs."""
    p = Policy.parse(plan["policy"])
    lines = [f"## sequential launches {p.text()}: {plan['schedule']} launches per still-needed arm after each round",
             f"{'round':>5} {'launches':>8} {'fraction':>8} {'alpha spent':>11} {'nominal':>8} {'z':>6} {'t (df)':>12}"]
    for r in plan["boundaries"]:
        lines.append(f"{r['round']:>5} {r['launches']:>8} {r['fraction']:>8.2f} {r['spent']:>11.4%} "
                     f"{r['nominal']:>8.4%} {r['z']:>6.2f} {r['t']:>7.2f} ({r['df']:.0f})")
    g, s = plan["gpu_hours"], plan["sequential"]
    if not g["max"]:
        lines += ["", "(model.gpus = 0: this platform's launches cost no GPU-hours; the launches below are its cost)"]
    lines += ["", f"GPU-hours: minimum {g['min']:.1f}, maximum {g['max']:.1f}, expected {g['expected']:.2f} "
                  f"+- {g['expected_se']:.2f} (MC, {plan['n_sim']} simulated campaigns); launches expected "
                  f"{plan['launches']['expected']:.1f} of {plan['launches']['min']}..{plan['launches']['max']}; "
                  f"P(every claim gets its expected verdict) {s['power']:.1%} +- {s['power_se']:.1%}"]
    if plan.get("same_power"):
        sp = plan["same_power"]
        lines.append(f"cheapest fixed design of at least the same power: {sp['n']} launches per arm, "
                     f"{sp['gpu_hours']:.1f} GPU-hours (power {sp['power']:.1%}); the sequential design saves "
                     f"{sp['saving_gpu_hours']:.2f} +- {sp['saving_se']:.2f} GPU-hours ({sp['saving_share']:.0%})")
        if sp.get("below"):
            b = sp["below"]
            lines.append(f"  the next cheaper, {b['n']} launches per arm: {b['gpu_hours']:.1f} GPU-hours at power "
                         f"{b['power']:.1%}")
    else:
        lines.append("no fixed design up to the simulated launches reaches the sequential design's power")
    first = plan.get("first_round")
    if first and first["decides"] < 0.05 and p.min < p.max:  # the first round is only a down payment on max
        t = f"t > {first['t']:.1f} at {first['df']:.0f} df"
        lines.append(f"round 1 ({p.min} launches per arm, {t}) decides no claim in more than {first['decides']:.1%} "
                     f"of campaigns; min: {p.min + 1} gives a first round that can")
    if plan.get("configured"):
        c = plan["configured"]
        lines.append(f"configured fixed design: {c['n']} launches per arm, {c['gpu_hours']:.1f} GPU-hours, power "
                     f"{c['power']:.1%} +- {c['power_se']:.1%}; sequential minus fixed: "
                     f"{-c['difference_gpu_hours']:+.2f} +- {c['difference_se']:.2f} GPU-hours")
        weak = [f"{r['id']} {r['power']:.0%}" for r in c["claims"] if r["power"] is not None and r["power"] < 0.8]
        if weak:
            lines.append(f"  claims it leaves below 80% power: {', '.join(weak)}")
    lines += ["", f"{'claim':<32} {'effect':>8} {'expected':>15} {'P(REPR)':>8} {'P(NOT)':>7} {'P(INC)':>7} "
                  f"{'mean round':>10}"]
    for c in s["claims"]:
        e = c["effect"]
        eff = "-" if e is None else (f"{e:.0%}" if abs(e) > 0.5 else f"{e:+.1%}")
        lines.append(f"{c['id']:<32} {eff:>8} {c['expected'] or 'boundary':>15} {c['p']['REPRODUCED']:>8.1%} "
                     f"{c['p']['NOT REPRODUCED']:>7.1%} {c['p']['INCONCLUSIVE']:>7.1%} {c['mean_round']:>10.2f}")
    for cid in plan["unplanned"]:
        lines.append(f"{cid:<32} no stated effect: holds its arms to max")
    return "\n".join(lines)
