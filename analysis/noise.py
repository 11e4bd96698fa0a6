"""The noise of an arm's mean, and of a comparison between two arms: one computation for plan and analysis.

Every arm is its own server launch (or launches), so every arm-against-arm
comparison crosses servers.  Two kinds of noise reach an arm's mean:

- within a launch: repeats on one warm server (the spread of its repeats);
- between launches: what a server restart moves (clocks, memory layout,
  batch composition, nondeterministic kernels).  Repeats on one server can
  never show it.

An arm measured on 2+ launches carries both in the spread of its launch means
(the launches are the replicates).  An arm measured on one launch cannot
measure the second kind: it is taken from a stated prior per metric
(`analysis.launch_noise_prior`, with its source), and the report says so.
Each arm keeps its own variance (arms differ: rejection sampling on or off
moves the spread too), and the two are combined with Welch-Satterthwaite
degrees of freedom.

Where the noise is odd (issue #39; benchmarks/sequential_calibration.py measures each rule):

- **Zero spread** is decided with a relative tolerance (`ZERO_SPREAD_RTOL`), not `var == 0`: identical launch
  means of a deterministic server come out of float sums with a variance of ~1e-28, which is rounding, not a
  measurement.
- **Identical relaunches add no information**: the prior that stands in for a zero spread is one launch's
  between-launch variance, not divided by the launches (n identical numbers are one number).
- **A stand-in prior adds variance, not degrees of freedom**: a comparison that leans on one is held to the
  degrees of freedom of what was measured beside it (Satterthwaite capped at their sum), so a lucky small
  variance on a noisy arm cannot turn a deterministic-against-noisy comparison into a normal one.  With nothing
  measured (every arm a stand-in or a prior) the prior counts as known.
- **An estimated variance ratio costs a degree of freedom**: with two or more measured variances, Satterthwaite's
  df less one, never below the smallest of theirs (Hsu's conservative bound) nor below min(Satterthwaite, 2).
  Welch's test is liberal at 1-8 df when the spreads differ (an SD ratio of 3: 3.2-3.4% for a nominal 2.5% over
  four looks); the charge brings it under 3% and leaves equal spreads under their nominal rate.
- **Nothing to test**: identical launches and no prior leave no noise estimate; `ArmNoise.untestable` says so,
  and more launches cannot change it (the analysis reports the claim NOT TESTABLE, it holds no arm).

Each function is pure and tested with known numbers (tests/test_noise.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

import numpy as np
from scipy import special


# The one-df charge for an estimated variance ratio stops here: at one df per arm (two launches) Satterthwaite's 1-2
# df stand, a look there asks t > 35 already and its error contribution is below 0.02% (the calibration measures it).
SMALL_DF = 2.0

# Launch means whose SD is within this share of their mean are identical: the spread is rounding (a
# deterministic server's means differ by 1e-16 relative; no real measurement of a serving metric repeats to 1e-9).
ZERO_SPREAD_RTOL = 1e-9


@dataclass(frozen=True)
class Component:
    """One variance component of a mean (absolute units squared) and its degrees of freedom (inf: known).
    `stand_in`: a prior standing in for a spread that came out zero (it adds variance, no degrees of freedom)."""
    variance: float
    df: float
    source: str
    stand_in: bool = False


@dataclass(frozen=True)
class ArmNoise:
    mean: float
    components: tuple  # of Component
    n_launches: int
    n_repeats: int

    @property
    def variance(self) -> float:
        return sum(c.variance for c in self.components)

    @property
    def untestable(self) -> bool:
        """2+ identical launches and no prior: no noise estimate, and no number of launches will give one."""
        return self.n_launches >= 2 and not any(c.variance > 0 for c in self.components)

    @property
    def sources(self) -> List[str]:
        return [c.source for c in self.components if c.variance > 0 or c.df < math.inf]


def t_quantile(df: float, level: float = 0.95) -> float:
    """Two-sided quantile of Student's t (the normal one for df = inf)."""
    if df is None or math.isinf(df):
        return float(special.ndtri(0.5 + level / 2))
    if df <= 0 or math.isnan(df):
        return math.inf
    return float(special.stdtrit(df, 0.5 + level / 2))


def t_cdf(x: float, df: float) -> float:
    if df is None or math.isinf(df):
        return float(special.ndtr(x))
    return float(special.stdtr(df, x))


def identical(values: np.ndarray) -> bool:
    """Launch means equal up to float rounding (their SD within ZERO_SPREAD_RTOL of their magnitude)."""
    values = np.asarray(values, dtype=float)
    scale = float(np.max(np.abs(values))) if values.size else 0.0
    return values.size < 2 or float(np.ptp(values)) <= ZERO_SPREAD_RTOL * scale


def arm_noise(values_by_launch: Sequence[Sequence[float]], launch_prior_cv: Optional[float],
              within_fallback_cv: Optional[float] = None, within_fallback_df: float = math.inf,
              within_fallback_source: str = "") -> ArmNoise:
    """The variance of one arm's mean from its measurements.

    2+ launches: the spread of the launch means (df launches - 1), which holds
    both kinds of noise; launch means identical up to rounding (a deterministic
    server: greedy decoding of a fixed model) leave that spread at zero, which is
    no estimate, so the launch prior stands in for it: one launch's variance (the
    launches repeat one number), marked as a stand-in.  One launch: the
    spread of its repeats / repeats (df repeats - 1; with a single repeat the
    fallback CV, e.g. pooled over the other arms or the published repeats) plus
    the launch prior (known).
    """
    launches = [np.asarray(v, dtype=float) for v in values_by_launch if len(v)]
    means = np.array([x.mean() for x in launches])
    mean = float(np.mean(np.concatenate(launches))) if launches else math.nan
    repeats = int(round(np.mean([len(x) for x in launches]))) if launches else 0
    if len(launches) >= 2:
        if identical(means):
            if not launch_prior_cv:
                return ArmNoise(mean, (Component(0.0, len(launches) - 1.0,
                                                 f"{len(launches)} identical launch means, no prior"),),
                                len(launches), repeats)
            return ArmNoise(mean, (Component((launch_prior_cv * mean) ** 2, math.inf,
                                             f"{len(launches)} identical launch means: prior {launch_prior_cv:.1%} "
                                             f"between launches, not divided by the launches", stand_in=True),),
                            len(launches), repeats)
        var = float(means.var(ddof=1)) / len(launches)
        return ArmNoise(mean, (Component(var, len(launches) - 1.0, f"measured over {len(launches)} launches"),),
                        len(launches), repeats)
    comps = []
    if launches and len(launches[0]) >= 2:
        x = launches[0]
        comps.append(Component(float(x.var(ddof=1)) / len(x), len(x) - 1.0, f"{len(x)} repeats on one server"))
    elif within_fallback_cv is not None and not math.isnan(within_fallback_cv):
        comps.append(Component((within_fallback_cv * mean) ** 2 / max(repeats, 1), within_fallback_df,
                               within_fallback_source or "fallback within-launch noise"))
    if launch_prior_cv:
        comps.append(Component((launch_prior_cv * mean) ** 2, math.inf,
                               f"prior {launch_prior_cv:.1%} between launches"))
    return ArmNoise(mean, tuple(comps), len(launches), repeats)


def welch_df(terms: Sequence[tuple]) -> float:
    """Satterthwaite's degrees of freedom of a sum of variance terms (value, df[, stand_in]); known terms add no
    error.  Two or more measured terms: less one for the estimated ratio, never below the smallest measured df nor
    below min(Satterthwaite, SMALL_DF);
    with a stand-in prior among the terms, at most the measured terms' total df (see the module's notes)."""
    terms = [(t[0], t[1], bool(t[2]) if len(t) > 2 else False) for t in terms]
    total = sum(v for v, _, _ in terms)
    measured = [d for v, d, _ in terms if v > 0 and not math.isinf(d)]
    denom = sum(v * v / d for v, d, _ in terms if v > 0 and not math.isinf(d) and d > 0)
    if total <= 0:
        return math.nan
    if any(d <= 0 for d in measured):
        return 0.0
    df = math.inf if denom == 0 else total * total / denom
    if len(measured) >= 2:
        df = max(min(df, SMALL_DF), min(measured), df - 1.0)
    if measured and any(s and v > 0 for v, _, s in terms):
        df = min(df, sum(measured))
    return df


def relative_change(arm: ArmNoise, base: ArmNoise, extra_se: float = 0.0, level: float = 0.95) -> Dict[str, float]:
    """arm.mean / base.mean - 1 with its standard error (delta method), Welch df and the `level` interval."""
    ma, mb = arm.mean, base.mean
    if not mb or math.isnan(mb):  # no relative change from a zero baseline (an invalid rate of 0, say)
        return {"arm_mean": ma, "base_mean": mb, "relative": math.nan, "se": math.nan, "df": math.nan,
                "quantile": math.nan, "ci_low": math.nan, "ci_high": math.nan, "half_width": math.nan,
                "extra_se": extra_se, "noise": {"arm": arm.sources, "base": base.sources}}
    rel = ma / mb - 1
    # Var(A/B) ~ Var(A)/B^2 + A^2 Var(B)/B^4, each component kept with its own df
    terms = [(c.variance / mb ** 2, c.df, c.stand_in) for c in arm.components]
    terms += [(c.variance * ma ** 2 / mb ** 4, c.df, c.stand_in) for c in base.components]
    if extra_se:
        terms.append((extra_se ** 2, math.inf))
    se = math.sqrt(sum(t[0] for t in terms))
    df = welch_df(terms)
    q = t_quantile(df, level)
    half = q * se if se > 0 else math.nan
    return {"arm_mean": ma, "base_mean": mb, "relative": rel, "se": se, "df": df, "quantile": q,
            "ci_low": rel - half, "ci_high": rel + half, "half_width": half, "extra_se": extra_se,
            "noise": {"arm": arm.sources, "base": base.sources}}


def restored_fraction(fixed: ArmNoise, level_arm: ArmNoise, broken: ArmNoise, level: float = 0.95) -> Dict[str, float]:
    """How much of the gap broken -> level the fixed arm closes: (fixed - broken) / (level - broken), delta method."""
    gap = level_arm.mean - broken.mean
    closed = fixed.mean - broken.mean
    gap_se = math.sqrt(level_arm.variance + broken.variance)
    if not gap:
        return {"fraction": math.nan, "se": math.nan, "df": math.nan, "quantile": math.nan, "ci_low": math.nan,
                "ci_high": math.nan, "gap": 0.0, "gap_se": gap_se, "half_width": math.nan}
    r = closed / gap
    terms = [(c.variance / gap ** 2, c.df, c.stand_in) for c in fixed.components]
    terms += [(c.variance * closed ** 2 / gap ** 4, c.df, c.stand_in) for c in level_arm.components]
    terms += [(c.variance * (closed - gap) ** 2 / gap ** 4, c.df, c.stand_in) for c in broken.components]
    se = math.sqrt(sum(t[0] for t in terms)) if gap else math.nan
    df = welch_df(terms)
    q = t_quantile(df, level)
    half = q * se if se > 0 else math.nan
    return {"fraction": r, "se": se, "df": df, "quantile": q, "ci_low": r - half, "ci_high": r + half,
            "gap": gap, "gap_se": gap_se, "half_width": half}


def one_sided_p(estimate: float, threshold: float, se: float, df: float, above: bool) -> float:
    """P-value of the claim `estimate > threshold` (above) or `< threshold`, by Student's t."""
    if not se or math.isnan(se) or se <= 0:
        return math.nan
    z = (estimate - threshold) / se
    return 1.0 - t_cdf(z, df) if above else t_cdf(z, df)


def holm(p_values: Dict[str, float]) -> Dict[str, float]:
    """Holm's step-down adjusted p-values (familywise error control over every claim judged)."""
    ordered = sorted(((p, k) for k, p in p_values.items() if p is not None and not math.isnan(p)))
    m = len(ordered)
    adjusted, running = {}, 0.0
    for i, (p, k) in enumerate(ordered):
        running = max(running, min(1.0, (m - i) * p))
        adjusted[k] = running
    return adjusted


def planned_arm_noise(within_cv: Optional[float], within_df: float, repeats: int, launches: int,
                      prior_cv: Optional[float], mean: float = 1.0) -> ArmNoise:
    """What an arm's mean will carry before it is measured, by `arm_noise`'s rules: the within-launch CV (published
    repeats or the fallback) for its repeats' spread, the prior for what a launch moves."""
    within, prior = (within_cv or 0.0) * mean, (prior_cv or 0.0) * mean
    if launches >= 2:
        var = (prior ** 2 + within ** 2 / max(repeats, 1)) / launches
        return ArmNoise(mean, (Component(var, launches - 1.0, f"{launches} launches (planned)"),), launches, repeats)
    comps = []
    if within:
        comps.append(Component(within ** 2 / max(repeats, 1), repeats - 1.0 if repeats >= 2 else within_df,
                               f"{repeats} repeats (planned)"))
    if prior:
        comps.append(Component(prior ** 2, math.inf, f"prior {prior_cv:.1%} between launches"))
    return ArmNoise(mean, tuple(comps), launches, repeats)
