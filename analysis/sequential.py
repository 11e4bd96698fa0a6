"""Sequential launches: rounds of server launches until every claim is decided, with error rates that survive the
looks (issue #33).  Pure functions; `analysis/sequential_plan.py` simulates and plans with the same rule.

The design (`experiment.launches: {min: 2, max: 5}`): round 1 launches every arm `min` times; after round k every
still-needed arm has n_k launches (n_1 = min, n_k = min + (k - 1) * step, up to max).  After each round every claim
is judged on all the launches so far, as `analyze` judges it (each arm's launch means are its replicates, df n - 1;
Welch-Satterthwaite between arms; the delta method for relative changes and restored fractions), but against
group-sequential boundaries instead of the fixed 2.5%:

- **Boundaries.**  A claim's information at look j is its effective launches n_j = |arms| / sum(1 / n_arm) (the
  launches per arm when they are equal); its information fraction is n_j / max.  A Lan-DeMets spending function
  gives the one-sided level spent by fraction t (O'Brien-Fleming type, the default:
  a(t) = 2 - 2 Phi(z_{1-a/2} / sqrt t); Pocock type: a ln(1 + (e - 1) t); power: a t^rho).  The normal boundaries
  c_1..c_K solve P(Z_1 < c_1, .., Z_{j-1} < c_{j-1}, Z_j >= c_j) = a(t_j) - a(t_{j-1}) for the canonical joint
  distribution (corr(Z_i, Z_j) = sqrt(n_i / n_j)), by numerical integration on a grid (Armitage-McPherson-Rowe;
  Jennison & Turnbull 2000, ch. 19).  They are applied to the t statistics by matching significance levels
  (Jennison & Turnbull 2000, sec. 3.8): the look's nominal one-sided level is a'_j = 1 - Phi(c_j), and a claim
  crosses when its one-sided Welch t p-value is at most a'_j.  With 1-2 degrees of freedom per arm this is an
  approximation: tests/test_sequential_calibration.py measures what it gives.
- **Both directions.**  Every claim carries two one-sided tests, each spending 2.5% (alpha / 2) by the same
  function: the claim's own (REPRODUCED: the p-value `analyze` gives) and the contradiction (NOT REPRODUCED: the
  same conditions as `analyze`'s "the interval excludes it", as a p-value).  Each boundary is computed as if the
  other never stopped anything (non-binding), so stopping for either only lowers the other's error.
- **Holm.**  REPRODUCED is decided by Holm's step-down over the family of m claims with a test (fixed at the
  start), in its group-sequential form (closed testing with Bonferroni group-sequential intersection tests; Maurer
  & Bretz 2013, Ye et al. 2013): while r claims are reproduced, every open claim is held to the boundaries of level
  2.5% / (m - r), at this look and at every earlier look of its own (a reproduced claim passes its alpha on, so an
  earlier statistic may cross a boundary recomputed at the larger level).  NOT REPRODUCED is per claim at 2.5%,
  as in `analyze.decide`.  A NOT REPRODUCED claim keeps its share of alpha (only rejections pass it on).
- **Stopping.**  A decided claim is final.  An arm is needed while any open claim of the family names it (arm,
  against, from); the others stop.  Claims still open after the last round (max, or a budget stop) are
  INCONCLUSIVE.  A budget stop before max spends no alpha the schedule had not reached (a(n/max) < a): valid
  whatever made the budget run out.
- **Intervals.**  The interval reported with a sequential verdict is the repeated confidence interval at the
  look that decided it (estimate +- t_{df}(1 - a'_j) se): the intervals of all looks cover the truth together
  with probability >= 95%, so the one at a data-chosen look does too.  A verdict is the statement of that
  interval (REPRODUCED: it clears the claim, before Holm; NOT REPRODUCED: it excludes it), as today.  When Holm's
  passed-on alpha lets an earlier look's statistic cross, the claim's numbers are that look's (`round`), and
  `decided_after` is the look that decided.
- **Not testable.**  A claim whose arms all repeat one number (identical launches) on a metric without a launch
  prior has no noise estimate and no later round can give one: it is INCONCLUSIVE (`not_testable`) at that round
  and holds no arm.
- **Not sequential.**  `zero` and `outputs_unchanged` claims (no interval), claims on unjudged metrics and claims
  naming an invalid arm are judged as `analyze` judges them, on every launch measured, and hold no arm.

With min = max the rule is `analyze`'s fixed design exactly (one look, level 2.5%, Holm).  The decision is a pure
function of the runs table (with its `launch` column), the claims, the settings and the policy: it replays every
round from the table, so nothing but the runs needs to persist between rounds.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import pandas as pd
from scipy import optimize, special

from specrepro.analysis import checks
from specrepro.core.rounds import SPENDING, Policy, policy_of  # noqa: F401  (the design, read from the config)
from specrepro.analysis.analyze import (DEFAULT_SETTINGS, INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED,
                                        check_table, judge, judge_claim, noise_floors)

SEQUENTIAL_KINDS = ("decrease", "increase", "equal", "not_below", "restores")
# status codes of the rule's arrays
OPEN, REPRO, CONTRA, INCONC = 0, 1, 2, 3
VERDICT_OF = {REPRO: REPRODUCED, CONTRA: NOT_REPRODUCED, INCONC: INCONCLUSIVE}


# --- the design ---------------------------------------------------------------------------------------------------

def spent(fraction: float, alpha: float, spending: str = "obrien_fleming", rho: float = 3.0) -> float:
    """The one-sided level spent by information fraction t (cumulative; alpha at t >= 1, 0 at t <= 0)."""
    t = min(max(float(fraction), 0.0), 1.0)
    if t <= 0 or alpha <= 0:
        return 0.0
    if spending == "obrien_fleming":
        return float(2.0 - 2.0 * special.ndtr(special.ndtri(1.0 - alpha / 2.0) / math.sqrt(t)))
    if spending == "pocock":
        return float(alpha * math.log(1.0 + (math.e - 1.0) * t))
    if spending == "power":
        return float(alpha * t ** rho)
    raise ValueError(f"unknown spending function {spending!r}")


# The numerical integration's grid: z in [-GRID_EDGE, min(boundary, GRID_EDGE)], Simpson's rule on GRID_POINTS.
GRID_EDGE, GRID_POINTS = 9.0, 601


def _simpson(lo: float, hi: float, n: int = GRID_POINTS) -> Tuple[np.ndarray, np.ndarray]:
    z = np.linspace(lo, hi, n)
    w = np.ones(n)
    w[1:-1:2], w[2:-1:2] = 4.0, 2.0
    return z, w * (hi - lo) / (n - 1) / 3.0


@lru_cache(maxsize=65536)
def z_boundaries(information: Tuple[float, ...], cumulative: Tuple[float, ...]) -> Tuple[float, ...]:
    """Upper normal boundaries c_1..c_K for looks at `information` (increasing; only ratios matter) that spend
    `cumulative` one-sided error by each look: P(no crossing before j, Z_j >= c_j) = cumulative[j] - cumulative[j-1]
    for the canonical joint normal (independent increments of the score).  A look with no new information or no
    new spending gets +inf (it cannot cross)."""
    bounds: List[float] = []
    grid = dens = None  # the sub-density of Z_j on its continuation region
    prev, done = 0.0, 0.0
    for j, (info, cum) in enumerate(zip(information, cumulative)):
        inc = cum - done
        if j == 0:
            c = float(special.ndtri(1.0 - inc)) if inc > 0 else math.inf
            hi = min(c, GRID_EDGE)
            grid, w = _simpson(-GRID_EDGE, hi)
            dens = np.exp(-grid ** 2 / 2) / math.sqrt(2 * math.pi)
        else:
            d = info - prev
            mass = w * dens
            if inc <= 0 or d <= 0:
                c = math.inf
            else:
                s0, s1, sd = math.sqrt(prev), math.sqrt(info), math.sqrt(d)

                def excess(c_: float) -> float:
                    return float(np.sum(mass * special.ndtr(-(c_ * s1 - grid * s0) / sd))) - inc

                if excess(-GRID_EDGE) <= 0:  # nothing left to spend it on
                    c = -GRID_EDGE
                else:
                    c = float(optimize.brentq(excess, -GRID_EDGE, 60.0, xtol=1e-10)) if excess(60.0) < 0 else 60.0
            if d > 0:
                hi = min(c, GRID_EDGE)
                new, w_new = _simpson(-GRID_EDGE, hi)
                s0, s1, sd = math.sqrt(prev), math.sqrt(info), math.sqrt(d)
                u = (new[:, None] * s1 - grid[None, :] * s0) / sd
                kernel = np.exp(-u ** 2 / 2) * s1 / sd / math.sqrt(2 * math.pi)
                dens = kernel @ mass
                grid, w = new, w_new
        bounds.append(c)
        done = max(done, cum) if c < math.inf else done
        prev = info if j == 0 or info > prev else prev
    return tuple(bounds)


def nominal_levels(information: Sequence[float], n_max: float, alpha: float, spending: str = "obrien_fleming",
                   rho: float = 3.0) -> np.ndarray:
    """Each look's nominal one-sided level a'_j = 1 - Phi(c_j): the p-value a test must reach there.  `information`:
    the claim's effective launches at each look so far; the fraction spent is min(1, n_j / n_max)."""
    info = tuple(round(float(x), 9) for x in information)
    cum = tuple(round(spent(x / n_max, alpha, spending, rho), 15) for x in info)
    cum = tuple(np.maximum.accumulate(cum))
    return special.ndtr(-np.array(z_boundaries(info, cum)))


def effective_launches(launches: Iterable[float]) -> float:
    """A claim's information in launches: |arms| / sum(1 / n_arm) (= n when every arm has n)."""
    n = [float(x) for x in launches]
    return len(n) / sum(1.0 / x for x in n) if n and all(x > 0 for x in n) else 0.0


def boundary_table(policy: Policy, alpha: float = 0.025, df_per_arm: bool = True) -> List[Dict[str, Any]]:
    """Per round: launches per arm, information fraction, cumulative one-sided alpha spent, the nominal level, the
    normal boundary and the t boundary of a two-arm claim with equal variances (Welch df 2(n - 1))."""
    sched = policy.schedule
    levels = nominal_levels(sched, policy.max, alpha, policy.spending, policy.rho)
    rows = []
    for k, (n, a) in enumerate(zip(sched, levels), 1):
        df = 2.0 * (n - 1)
        rows.append({"round": k, "launches": n, "fraction": min(1.0, n / policy.max),
                     "spent": spent(n / policy.max, alpha, policy.spending, policy.rho), "nominal": float(a),
                     "z": float(special.ndtri(1 - a)) if a > 0 else math.inf,
                     "t": float(special.stdtrit(df, 1 - a)) if a > 0 else math.inf, "df": df})
    return rows


# --- one claim's two tests ----------------------------------------------------------------------------------------

def _p_above(est, th, se, df):
    """One-sided p-value of `estimate > th` by Student's t (normal at df = inf); NaN where se is not positive."""
    est, se, df = np.asarray(est, float), np.asarray(se, float), np.asarray(df, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(se > 0, (est - th) / np.where(se > 0, se, 1.0), np.nan)
    return special.stdtr(df, -z)


def _p_below(est, th, se, df):
    est, se, df = np.asarray(est, float), np.asarray(se, float), np.asarray(df, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(se > 0, (est - th) / np.where(se > 0, se, 1.0), np.nan)
    return special.stdtr(df, z)


def claim_tests(expect: str, est, se, df, margin: float = 0.02, fraction: float = 0.9) -> Tuple[np.ndarray, np.ndarray]:
    """The claim's p-value (REPRODUCED when at most the look's level: `analyze`'s p_value) and its contradiction
    p-value (NOT REPRODUCED: `analyze`'s `contradicted` at level a is exactly this p <= a).  Arrays broadcast."""
    above = lambda th: _p_above(est, th, se, df)  # noqa: E731
    below = lambda th: _p_below(est, th, se, df)  # noqa: E731
    m = margin
    if expect == "decrease":
        return below(0.0), np.fmin(above(0.0), np.maximum(above(-m), below(m)))
    if expect == "increase":
        return above(0.0), np.fmin(below(0.0), np.maximum(above(-m), below(m)))
    if expect == "equal":
        return np.maximum(above(-m), below(m)), np.fmin(above(m), below(-m))
    if expect == "not_below":
        return above(-m), below(-m)
    if expect == "restores":
        return above(fraction), below(fraction)
    raise ValueError(f"not a sequential claim kind: {expect!r}")


def repeated_interval(est: float, se: float, df: float, level: float) -> Tuple[float, float]:
    """estimate +- t_df(1 - level) se: the repeated confidence interval at a look whose nominal one-sided level is
    `level` (the 95% interval at level 2.5%)."""
    if not se or math.isnan(se) or not level or level <= 0:
        return (math.nan, math.nan)
    q = float(special.stdtrit(df, 1.0 - level)) if not math.isinf(df) else float(special.ndtri(1.0 - level))
    return (est - q * se, est + q * se)


# --- the rule: one look, for S campaigns of m claims at once ------------------------------------------------------

def rule_step(status: np.ndarray, decided_at: np.ndarray, look: int, p_claim: np.ndarray, p_contra: np.ndarray,
              nominal_claim: np.ndarray, nominal_contra: np.ndarray, crossed_at: Optional[np.ndarray] = None) -> None:
    """Apply look `look` (0-based) in place.

    status, decided_at: (S, m) int arrays (OPEN / REPRO / CONTRA; the look that decided).  p_claim, p_contra:
    (S, m, look + 1), each claim's p-values at every look so far (NaN: no test at that look).  nominal_claim:
    (m, R, look + 1), the claim's nominal level at each look when r claims are already reproduced (R = m for Holm:
    level alpha / (m - r); R = 1 without multiplicity); nominal_contra: (m, look + 1) at alpha.
    REPRODUCED first: while a reproduced claim passes its alpha on, every open claim is held against the boundaries
    of the current level at this and every earlier look; then NOT REPRODUCED at this look.  `crossed_at` (S, m),
    optional: the look whose statistic crossed (an earlier look when Holm's passed-on alpha lets an earlier
    statistic cross; the report gives that look's numbers).
    """
    S, m = status.shape
    if not m:
        return
    idx = np.arange(m)[None, :]
    R = nominal_claim.shape[1]
    while True:
        open_ = status == OPEN
        if not open_.any():
            break
        r = np.minimum((status == REPRO).sum(axis=1), R - 1)
        thr = nominal_claim[idx, r[:, None], :]  # (S, m, look + 1)
        with np.errstate(invalid="ignore"):
            crossing = p_claim[:, :, :look + 1] <= thr
        hit = open_ & crossing.any(axis=2)
        if not hit.any():
            break
        status[hit] = REPRO
        decided_at[hit] = look
        if crossed_at is not None:
            crossed_at[hit] = crossing.argmax(axis=2)[hit]
        if R == 1:
            break
    with np.errstate(invalid="ignore"):
        contra = (status == OPEN) & (p_contra[:, :, look] <= nominal_contra[None, :, look])
    status[contra] = CONTRA
    decided_at[contra] = look
    if crossed_at is not None:
        crossed_at[contra] = look


# --- the decision on a runs table ---------------------------------------------------------------------------------

def arms_of(claim: Dict[str, Any]) -> List[str]:
    """Every arm a claim's interval needs (arm, against, and a `restores` claim's `from`)."""
    return list(dict.fromkeys(a for a in (claim.get("arm"), claim.get("against"), claim.get("from"),
                                          *(claim.get("arms") or [])) if a))


def _estimate(result: Dict[str, Any]) -> Optional[Tuple[float, float, float]]:
    """(estimate, se, df) of a judged claim with a test at this look, else None."""
    if "verdict" in result or result.get("p_value") is None:
        return None
    d = result.get("restored") if result["expect"] == "restores" else result.get("delta")
    key = "fraction" if result["expect"] == "restores" else "relative"
    return (d[key], d["se"], d["df"]) if d else None


def stopping_rule(policy: Policy, settings: Dict[str, Any], family: int) -> str:
    """The sentence the report prints: the design, its boundaries and how verdicts and stops follow from them."""
    alpha = float(settings["alpha"]) / 2
    levels = ", ".join(f"{r['nominal']:.2%}" for r in boundary_table(policy, alpha))
    holm = settings.get("multiplicity") == "holm"
    name = SPENDING[policy.spending] + (f" (rho {policy.rho:g})" if policy.spending == "power" else "")
    return (f"Sequential design (experiment.launches {policy.text()}): rounds of launches until each still-needed "
            f"arm has {', '.join(map(str, policy.schedule))}; after each round every claim is judged on all its "
            f"launches against group-sequential boundaries from the {name} alpha-spending function, one-sided "
            f"{alpha:.1%} in each direction over the information fraction (launches per arm / {policy.max}): nominal "
            f"one-sided levels {levels} for the Welch t p-values; "
            + (f"REPRODUCED under Holm's step-down over the {family} claims with an interval, the alpha of a "
               f"reproduced claim passed on to the others at this and earlier rounds; " if holm else
               "REPRODUCED per claim (no multiplicity correction); ")
            + f"NOT REPRODUCED when the round's repeated 95% interval excludes the claim; an arm stops when every "
              f"claim naming it is decided; a claim still open after the last round is INCONCLUSIVE. Intervals are "
              f"repeated confidence intervals (95% over all rounds together).")


def decide_sequential(runs: pd.DataFrame, claims: List[Dict[str, Any]], settings: Optional[Dict[str, Any]],
                      policy: Any, *, requests: Optional[pd.DataFrame] = None,
                      reference_repeats: Optional[Dict[str, Dict[str, List[float]]]] = None,
                      questions: Optional[Dict[str, int]] = None, invalid_arms: Optional[Dict[str, List[str]]] = None,
                      unjudged_metrics: Optional[Dict[str, str]] = None, final: bool = False,
                      arms: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """Where a sequential campaign stands after the rounds in `runs`: per claim decided or not, its verdict and the
    round that decided it; per arm whether an open claim still needs it; what the next round launches.

    `runs`: the tidy table `analyze` takes, with `launch` (each arm's launches numbered in the order they ran).  The
    rounds are replayed from the table: round k is evaluated once every arm still needed after round k - 1 has
    n_k launches (an arm's first n_k launches are used; later ones are ignored).  `final`: no more launches will
    run (max_gpu_hours reached): the rounds are evaluated on what was measured and open claims become INCONCLUSIVE.
    `arms`: the experiment's arms (every one runs round 1; default: those in the claims and the table).  The other
    arguments are `analyze`'s.
    """
    settings = {**DEFAULT_SETTINGS, **(settings or {})}
    policy = Policy.parse(policy)
    runs = check_table(runs)
    alpha = float(settings["alpha"]) / 2
    holm = settings["multiplicity"] == "holm"
    sched, K = policy.schedule, policy.rounds
    invalid, unjudged = invalid_arms or {}, unjudged_metrics or {}

    family, others = [], []
    for c in claims:
        sequential = (c.get("expect") in SEQUENTIAL_KINDS and c.get("metric") not in unjudged
                      and not any(a in invalid for a in arms_of(c)))
        (family if sequential else others).append(c)
    m = len(family)

    labels = {arm: sorted(g.unique()) for arm, g in runs.groupby("arm")["launch"]}
    counts = {arm: len(v) for arm, v in labels.items()}
    rank = runs.groupby("arm")["launch"].rank(method="dense")
    runs = runs.assign(_rank=rank)
    by_key = {key: g for key, g in runs.groupby(["benchmark", "metric"], sort=False)}
    empty = runs.iloc[:0]

    status = np.zeros((1, m), dtype=int)
    decided_at = np.full((1, m), -1, dtype=int)
    crossed_at = np.full((1, m), -1, dtype=int)
    not_testable = np.zeros(m, dtype=bool)
    p_claim = np.full((1, m, K), np.nan)
    p_contra = np.full((1, m, K), np.nan)
    info = np.zeros((m, K))
    est = np.full((m, K, 3), np.nan)
    details: List[List[str]] = [[""] * K for _ in range(m)]
    needed = sorted({a for c in family for a in arms_of(c)})
    history, warnings = [], []
    looks, incomplete = 0, {}

    for j in range(K):
        target = sched[j]
        lacking = {a: target - counts.get(a, 0) for a in needed if counts.get(a, 0) < target}
        if lacking and not final:
            incomplete = lacking
            break
        if lacking and j > 0 and all(counts.get(a, 0) <= sched[j - 1] for a in needed):
            break  # final, and nothing measured beyond the last evaluated round
        if lacking:
            warnings.append(f"round {j + 1} evaluated on what was measured (final): "
                            + ", ".join(f"{a} has {counts.get(a, 0)} of {target} launches" for a in sorted(lacking)))
        for i, c in enumerate(family):
            if status[0, i] != OPEN:
                continue
            n_arm = {a: min(target, counts.get(a, 0)) for a in arms_of(c)}
            info[i, j] = effective_launches(n_arm.values())
            g = by_key.get((c["benchmark"], c.get("metric")), empty)
            g = g[g["arm"].isin(list(n_arm)) & (g["_rank"] <= g["arm"].map(n_arm))]
            # floors (within-launch noise) only reach an arm measured on one launch (a final, partial round)
            floors = noise_floors(g, reference_repeats, settings) if min(n_arm.values()) < 2 else {}
            result = judge_claim(c, g, floors, settings, questions)
            e = _estimate(result)
            details[i][j] = result.get("detail", "")
            if result.get("not_testable"):  # identical launches, no prior: no later round can give a test
                not_testable[i] = True
                est[i, j] = (result["delta"]["relative"], 0.0, math.nan)
                continue
            if e is None:
                continue
            est[i, j] = e
            pc, pn = claim_tests(c["expect"], e[0], e[1], e[2], float(c.get("margin", settings["default_margin"])),
                                 float(c.get("fraction", 0.9)))
            p_claim[0, i, j], p_contra[0, i, j] = float(pc), float(pn)
        # every claim open at look j has information at looks 0..j (it was open at each)
        open_rows = [i for i in range(m) if status[0, i] == OPEN]
        nominal_claim = np.full((m, m if holm and m else 1, j + 1), np.nan)
        nominal_contra = np.full((m, j + 1), np.nan)
        for i in open_rows:
            nominal_contra[i] = nominal_levels(info[i, :j + 1], policy.max, alpha, policy.spending, policy.rho)
            for r in range(nominal_claim.shape[1]):
                level = alpha / (m - r) if holm else alpha
                nominal_claim[i, r] = nominal_levels(info[i, :j + 1], policy.max, level, policy.spending, policy.rho)
        before = status.copy()
        rule_step(status, decided_at, j, p_claim[:, :, :j + 1], p_contra[:, :, :j + 1],
                  nominal_claim, nominal_contra, crossed_at)
        stuck = (status[0] == OPEN) & not_testable
        status[0, stuck], decided_at[0, stuck], crossed_at[0, stuck] = INCONC, j, j
        looks = j + 1
        decided_now = [family[i]["id"] for i in range(m) if before[0, i] == OPEN and status[0, i] != OPEN]
        needed = sorted({a for i, c in enumerate(family) if status[0, i] == OPEN for a in arms_of(c)})
        history.append({"round": j + 1, "launches": target, "decided": decided_now, "arms_needed": needed})
        if not needed or (final and lacking):
            break

    last = looks == K or not needed or final
    if last:
        status[status == OPEN] = INCONC
        decided_at[status == INCONC] = looks - 1 if looks else -1

    out_claims = []
    for i, c in enumerate(family):
        s, k = int(status[0, i]), int(decided_at[0, i])
        # the look whose numbers decided it: Holm's passed-on alpha can let an earlier look's statistic cross
        at = int(crossed_at[0, i]) if crossed_at[0, i] >= 0 else (k if k >= 0 else max(looks - 1, 0))
        e = est[i, at] if looks else (np.nan,) * 3
        lvl = float(nominal_levels(info[i, :at + 1], policy.max, alpha, policy.spending, policy.rho)[-1]) \
            if looks and info[i, at] > 0 else math.nan
        lo, hi = repeated_interval(*map(float, e), lvl) if not math.isnan(e[0]) else (math.nan, math.nan)
        verdict = VERDICT_OF.get(s)
        n_at = int(round(info[i, at])) if looks and info[i, at] > 0 else None
        row = {"id": c["id"], "expect": c["expect"], "sequential": True, "decided": s != OPEN, "verdict": verdict,
               "round": at + 1 if s != OPEN else None, "decided_after": k + 1 if s != OPEN else None,
               "not_testable": bool(not_testable[i]), "launches": n_at,
               "estimate": float(e[0]), "se": float(e[1]), "df": float(e[2]), "nominal_level": lvl,
               "rci_low": lo, "rci_high": hi, "p_value": float(p_claim[0, i, at]) if looks else math.nan,
               "p_contra": float(p_contra[0, i, at]) if looks else math.nan,
               "arms": arms_of(c), "detail": ""}
        row["detail"] = _detail(c, row, details[i][at] if looks else "", policy, looks, K)
        out_claims.append(row)
    for c in others:
        out_claims.append(_judge_other(c, runs.drop(columns="_rank"), requests, reference_repeats, questions,
                                       settings, invalid, unjudged))

    every = list(dict.fromkeys([*(arms or []), *sorted(set(counts) | {a for c in claims for a in arms_of(c)})]))
    arm_rows = {}
    for arm in every:
        holders = [family[i]["id"] for i in range(m) if status[0, i] == OPEN and arm in arms_of(family[i])]
        arm_rows[arm] = {"launches": counts.get(arm, 0), "needed": bool(holders) or (looks == 0 and not last),
                         "held_by": holders}
    nxt = None
    if not last:
        k_next = looks  # 0-based index of the round to run (or to complete)
        n_next = sched[k_next]
        runs_next = every if looks == 0 else needed  # round 1 launches every arm
        nxt = {"round": k_next + 1, "launches": n_next,
               "arms": {a: list(range(counts.get(a, 0) + 1, n_next + 1)) for a in runs_next
                        if counts.get(a, 0) < n_next}}
        extra = [a for a, n in counts.items() if a not in needed and looks and n > sched[looks - 1]]
        if extra:
            warnings.append(f"arms with launches beyond their last round (ignored by the rule): {sorted(extra)}")
    return {"policy": policy.as_dict(), "schedule": sched, "round": looks, "done": last,
            "launches": sched[looks - 1] if looks else 0, "claims": out_claims, "arms": arm_rows, "next": nxt,
            "incomplete": incomplete, "history": history, "family": m,
            "rule": stopping_rule(policy, settings, m), "warnings": warnings}


def _detail(claim, row, judged_detail: str, policy: Policy, looks: int, K: int) -> str:
    pct = claim["expect"] != "restores"
    fmt = (lambda x: f"{x:+.2%}") if pct else (lambda x: f"{x:.0%}")  # noqa: E731
    if row["not_testable"]:
        return (f"{judged_detail}; after round {row['round']} of {K}: holds no arm (the next launches would repeat "
                f"these numbers)")
    if math.isnan(row["estimate"]):
        return f"no test after round {looks}: {judged_detail}"
    names = (f"{claim['arm']} vs {claim['against']}" if pct else
             f"{claim['arm']} closes the gap {claim['from']} -> {claim['against']}")
    df = "inf" if math.isinf(row["df"]) else f"{row['df']:.1f}"
    later = row["decided_after"] and row["decided_after"] != row["round"]
    where = ((f"decided after round {row['decided_after']} of {K} by its round {row['round']} numbers "
              f"({row['launches']} launches per arm), once Holm passed alpha on" if later else
              f"decided after round {row['round']} of {K} ({row['launches']} launches per arm)")
             if row["decided"] and row["verdict"] != INCONCLUSIVE else
             f"open after round {looks} of {K}" if not row["decided"] else
             f"undecided after the last round ({looks} of {K})")
    return (f"{names}: {fmt(row['estimate'])} (repeated 95% CI {fmt(row['rci_low'])} .. {fmt(row['rci_high'])}, "
            f"nominal one-sided level {row['nominal_level']:.3%} at Welch df {df}); {where}; p {row['p_value']:.2g}"
            + (f", contradiction p {row['p_contra']:.2g}" if not math.isnan(row["p_contra"]) else ""))


def _judge_other(claim, runs, requests, reference_repeats, questions, settings, invalid, unjudged) -> Dict[str, Any]:
    """A claim without a sequential test: judged as `analyze` judges it, on every launch measured; it holds no arm."""
    floors = noise_floors(runs, reference_repeats, settings)
    r = checks.exclude_invalid(judge(claim, runs, requests, floors, questions, settings, unjudged), invalid)
    if "verdict" not in r:  # a test kind on an invalid arm is excluded above; a bare p-value: the fixed decision
        r = {**r, "verdict": INCONCLUSIVE}
    return {"id": claim["id"], "expect": claim.get("expect"), "sequential": False, "decided": True,
            "verdict": r["verdict"], "round": None, "launches": None, "arms": arms_of(claim),
            "detail": r.get("detail", "") + "; judged on every launch measured (no interval to stop on: holds no arm)"}


# --- the report -----------------------------------------------------------------------------------------------------

def apply_to_analysis(analysis: Dict[str, Any], decision: Dict[str, Any]) -> Dict[str, Any]:
    """`analyze`'s output with each sequential claim's verdict, detail and interval replaced by the decision's (the
    fixed-design verdicts on the whole table are wrong after sequential looks); the rule in `multiplicity`."""
    by_id = {c["id"]: c for c in decision["claims"] if c["sequential"]}
    claims = []
    for c in analysis["claims"]:
        d = by_id.get(c["id"])
        if d is None:
            claims.append(c)
            continue
        new = {**c, "verdict": d["verdict"], "detail": d["detail"], "p_adjusted": None,
               "sequential": {k: d.get(k) for k in ("round", "decided_after", "not_testable", "launches", "estimate",
                                                      "se", "df", "nominal_level", "rci_low", "rci_high", "p_value",
                                                      "p_contra")}}
        if c.get("predicted"):
            new["as_predicted"] = d["verdict"] == c["predicted"]["verdict"]
        claims.append(new)
    return {**analysis, "claims": claims, "sequential": decision,
            "multiplicity": {**analysis.get("multiplicity", {}), "sequential": decision["rule"]}}


def decided_row(c: Dict[str, Any], round_now: int) -> List[str]:
    """A sequential claim's row: verdict, the round that decided it and the numbers of the round whose statistic
    crossed (an earlier one when Holm passed alpha on later), with its repeated CI and p-value."""
    pct = c["expect"] != "restores"
    lo, hi = c.get("rci_low"), c.get("rci_high")
    ci = ("-" if lo is None or math.isnan(lo) else
          f"{lo:+.2%} .. {hi:+.2%}" if pct else f"{lo:.0%} .. {hi:.0%}")
    after = c.get("decided_after") or c["round"]
    rnd = (f"open after {round_now}" if not c["decided"] else
           f"{after} (round {c['round']}'s numbers)" if after != c["round"] else str(c["round"]))
    verdict = c["verdict"] or "open"
    if c.get("not_testable"):
        verdict, ci = f"{verdict} (NOT TESTABLE: identical launches, no prior)", "-"
    p = c.get("p_value")
    return [c["id"], verdict, rnd, str(c["launches"] or "-"), ci,
            "-" if p is None or math.isnan(p) else f"{p:.2g}"]


def decided_table(decision: Dict[str, Any]) -> str:
    """A markdown table for the report: per claim its verdict, the round that decided it and its interval."""
    lines = ["| claim | verdict | decided after round | launches per arm | repeated 95% CI | p |",
             "|---|---|---|---|---|---|"]
    for c in decision["claims"]:
        if not c["sequential"]:
            lines.append(f"| {c['id']} | {c['verdict']} | - (no interval; every launch) | - | - | - |")
            continue
        lines.append("| " + " | ".join(decided_row(c, decision["round"])) + " |")
    return "\n".join(lines + ["", decision["rule"]])


def next_round_gpu_hours(decision: Dict[str, Any], launch_gpu_hours: Mapping[str, float]) -> float:
    """GPU-hours the decision's next round would cost (per arm: launches to add x its GPU-hours per launch); the DAG
    compares spent + this with experiment.max_gpu_hours and, if over, calls decide_sequential(..., final=True)."""
    nxt = decision.get("next") or {}
    return float(sum(len(ls) * float(launch_gpu_hours[a]) for a, ls in (nxt.get("arms") or {}).items()))
