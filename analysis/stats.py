"""Small statistics, each a pure function tested with known numbers."""

from __future__ import annotations

import math
from typing import Dict, Optional, Sequence, Tuple

import numpy as np
# scipy.special, not scipy.stats: the same distributions, a tenth of the import time.
from scipy import special

Z95 = 1.959963984540054


def mean_ci(values: Sequence[float], level: float = 0.95) -> Tuple[float, float, float]:
    """Mean and its t-interval; a single value has an infinite interval."""
    x = np.asarray(values, dtype=float)
    m = float(x.mean())
    if len(x) < 2:
        return m, -math.inf, math.inf
    half = float(special.stdtrit(len(x) - 1, 0.5 + level / 2) * x.std(ddof=1) / math.sqrt(len(x)))
    return m, m - half, m + half


def describe(values: Sequence[float]) -> Dict[str, float]:
    x = np.asarray(values, dtype=float)
    m, lo, hi = mean_ci(x)
    std = float(x.std(ddof=1)) if len(x) > 1 else math.nan
    return {"n": int(len(x)), "mean": m, "std": std, "cv": std / abs(m) if m else math.nan,
            "min": float(x.min()), "max": float(x.max()), "ci_low": lo, "ci_high": hi}


def coefficient_of_variation(values: Sequence[float]) -> float:
    x = np.asarray(values, dtype=float)
    return float(x.std(ddof=1) / abs(x.mean())) if len(x) > 1 and x.mean() else math.nan


def pooled_cv(groups: Sequence[Sequence[float]]) -> Optional[float]:
    """Noise floor: the root-mean-square CV of groups measured on an unchanged server."""
    cvs, weights = [], []
    for g in groups:
        if len(g) > 1:
            cv = coefficient_of_variation(g)
            if not math.isnan(cv):
                cvs.append(cv)
                weights.append(len(g) - 1)
    if not cvs:
        return None
    return float(math.sqrt(sum(w * c * c for w, c in zip(weights, cvs)) / sum(weights)))


def binomial_relative_se(p_arm: float, p_base: float, questions: int) -> float:
    """Relative standard error of a difference of two accuracies on `questions` questions each.

    n is the number of distinct questions: repeats of the same questions inform
    run-to-run noise, they do not multiply n.
    """
    if not questions or not p_base:
        return 0.0
    return math.sqrt(p_arm * (1 - p_arm) / questions + p_base * (1 - p_base) / questions) / p_base


def wilson_interval(successes: int, n: int, z: float = Z95) -> Tuple[float, float]:
    if n == 0:
        return (math.nan, math.nan)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return centre - half, centre + half


def mcnemar(b: int, c: int) -> float:
    """Exact two-sided McNemar p-value from the discordant counts b (A right, B wrong) and c."""
    n = b + c
    if n == 0:
        return 1.0
    return float(min(1.0, 2 * special.bdtr(min(b, c), n, 0.5)))


def bimodality_coefficient(values: Sequence[float]) -> float:
    """Sarle's coefficient; above 5/9 suggests two modes."""
    x = np.asarray(values, dtype=float)
    n = len(x)
    if n < 4 or x.std() == 0:
        return 0.0
    # Sample skewness and excess kurtosis, bias-corrected (as scipy.stats with bias=False).
    d = x - x.mean()
    m2, m3, m4 = (d ** 2).mean(), (d ** 3).mean(), (d ** 4).mean()
    g1 = m3 / m2 ** 1.5
    g = float(math.sqrt(n * (n - 1)) / (n - 2) * g1)
    k = float((n - 1) / ((n - 2) * (n - 3)) * ((n + 1) * (m4 / m2 ** 2 - 3) + 6))
    return (g * g + 1) / (k + 3 * (n - 1) ** 2 / ((n - 2) * (n - 3)))


def two_modes(values: Sequence[float]) -> Optional[Dict[str, float]]:
    """Split at the threshold that best separates two groups (Otsu on sorted values)."""
    x = np.sort(np.asarray(values, dtype=float))
    n = len(x)
    if n < 4:
        return None
    csum = np.cumsum(x)
    i = np.arange(1, n)
    m0 = csum[:-1] / i
    m1 = (csum[-1] - csum[:-1]) / (n - i)
    between = (i / n) * ((n - i) / n) * (m0 - m1) ** 2
    best_i = int(np.argmax(between)) + 1
    lo, hi = x[:best_i], x[best_i:]
    return {"threshold": float((lo[-1] + hi[0]) / 2), "low_mean": float(lo.mean()), "high_mean": float(hi.mean()),
            "low_share": len(lo) / n, "low_max": float(lo[-1]), "high_min": float(hi[0])}


def median_in_one_mode(values: Sequence[float]) -> Dict[str, object]:
    """With two modes (speculative decoding's accepted and rejected steps), the median sits inside one and hides the
    other."""
    x = np.asarray(values, dtype=float)
    bc = bimodality_coefficient(x)
    modes = two_modes(x)
    median, mean = float(np.median(x)), float(np.mean(x))
    bimodal = bool(bc > 5 / 9 and modes is not None and modes["high_mean"] > 1.5 * modes["low_mean"])
    inside = None
    if bimodal:
        inside = "low" if median <= modes["threshold"] else "high"
    return {"bimodality_coefficient": bc, "bimodal": bimodal, "median": median, "mean": mean,
            "median_mode": inside, "modes": modes,
            "warning": (f"per-token latency is bimodal; the median ({median:.3g}) sits in the {inside} mode, "
                        f"read mean ({mean:.3g}) not median") if bimodal else None}


def per_token_latencies(requests) -> np.ndarray:
    """All per-token latencies (`itls_ms` lists) of a group of request rows, as one array."""
    lists = [np.asarray(x, dtype=float) for x in requests["itls_ms"].to_numpy() if x is not None and len(x)]
    return np.concatenate(lists) if lists else np.empty(0)


def paired_difference(arm_only: int, base_only: int, n: int, z: float = Z95) -> Dict[str, float]:
    """Accuracy difference of two arms on the same n questions from the discordant counts, with its Wald interval
    (the paired variance: concordant questions add nothing)."""
    if n == 0:
        return {"difference": math.nan, "ci_low": math.nan, "ci_high": math.nan, "pairs": 0}
    d = (arm_only - base_only) / n
    var = ((arm_only + base_only) - (arm_only - base_only) ** 2 / n) / (n * n)
    half = z * math.sqrt(max(var, 0.0))
    return {"difference": d, "ci_low": d - half, "ci_high": d + half, "pairs": n, "arm_only": arm_only,
            "base_only": base_only}


def two_proportion_p(x1: int, n1: int, x2: int, n2: int) -> float:
    """One-sided p-value that rate x1/n1 exceeds rate x2/n2 (pooled two-proportion z test)."""
    if not n1 or not n2:
        return math.nan
    pooled = (x1 + x2) / (n1 + n2)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    diff = x1 / n1 - x2 / n2
    if se == 0:
        return 1.0 if diff <= 0 else 0.0
    return float(special.ndtr(-diff / se))
