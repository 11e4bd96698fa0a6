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
degrees of freedom; a prior counts as known (infinite degrees of freedom).

Each function is pure and tested with known numbers (tests/test_noise.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

import numpy as np
from scipy import special


@dataclass(frozen=True)
class Component:
    """One variance component of a mean (absolute units squared) and its degrees of freedom (inf: known)."""
    variance: float
    df: float
    source: str


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


def arm_noise(values_by_launch: Sequence[Sequence[float]], launch_prior_cv: Optional[float],
              within_fallback_cv: Optional[float] = None, within_fallback_df: float = math.inf,
              within_fallback_source: str = "") -> ArmNoise:
    """The variance of one arm's mean from its measurements.

    2+ launches: the spread of the launch means (df launches - 1), which holds
    both kinds of noise; launch means identical to the last digit (a deterministic
    server: greedy decoding of a fixed model) leave that spread at zero, which is
    no estimate, so the launch prior (known) stands in for it.  One launch: the
    spread of its repeats / repeats (df repeats - 1; with a single repeat the
    fallback CV, e.g. pooled over the other arms or the published repeats) plus
    the launch prior (known).
    """
    launches = [np.asarray(v, dtype=float) for v in values_by_launch if len(v)]
    means = np.array([x.mean() for x in launches])
    mean = float(np.mean(np.concatenate(launches))) if launches else math.nan
    repeats = int(round(np.mean([len(x) for x in launches]))) if launches else 0
    if len(launches) >= 2:
        var = float(means.var(ddof=1)) / len(launches)
        if var == 0 and launch_prior_cv:
            return ArmNoise(mean, (Component((launch_prior_cv * mean) ** 2 / len(launches), math.inf,
                                             f"{len(launches)} identical launch means: prior {launch_prior_cv:.1%} "
                                             f"between launches"),), len(launches), repeats)
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
    """Satterthwaite's degrees of freedom of a sum of variance terms (value, df); known terms add no error."""
    total = sum(v for v, _ in terms)
    denom = sum(v * v / d for v, d in terms if v > 0 and not math.isinf(d) and d > 0)
    if total <= 0:
        return math.nan
    if any(v > 0 and d <= 0 for v, d in terms):
        return 0.0
    return math.inf if denom == 0 else total * total / denom


def relative_change(arm: ArmNoise, base: ArmNoise, extra_se: float = 0.0, level: float = 0.95) -> Dict[str, float]:
    """arm.mean / base.mean - 1 with its standard error (delta method), Welch df and the `level` interval."""
    ma, mb = arm.mean, base.mean
    if not mb or math.isnan(mb):  # no relative change from a zero baseline (an invalid rate of 0, say)
        return {"arm_mean": ma, "base_mean": mb, "relative": math.nan, "se": math.nan, "df": math.nan,
                "quantile": math.nan, "ci_low": math.nan, "ci_high": math.nan, "half_width": math.nan,
                "extra_se": extra_se, "noise": {"arm": arm.sources, "base": base.sources}}
    rel = ma / mb - 1
    # Var(A/B) ~ Var(A)/B^2 + A^2 Var(B)/B^4, each component kept with its own df
    terms = [(c.variance / mb ** 2, c.df) for c in arm.components]
    terms += [(c.variance * ma ** 2 / mb ** 4, c.df) for c in base.components]
    if extra_se:
        terms.append((extra_se ** 2, math.inf))
    se = math.sqrt(sum(v for v, _ in terms))
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
    terms = [(c.variance / gap ** 2, c.df) for c in fixed.components]
    terms += [(c.variance * closed ** 2 / gap ** 4, c.df) for c in level_arm.components]
    terms += [(c.variance * (closed - gap) ** 2 / gap ** 4, c.df) for c in broken.components]
    se = math.sqrt(sum(v for v, _ in terms)) if gap else math.nan
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
