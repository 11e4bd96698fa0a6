"""A benchmark's results per category of its prompts (SPEED-Bench: low_entropy, mixed, high_entropy), as data for
the report's per-category table.

The runs table carries a categorized benchmark's metrics twice: over the whole benchmark (`accept_length`) and per
category (`accept_length[mixed]`, specrepro.util.metric_names).  Everything here reads the analysis' own results (its
summary, theory rows and claim verdicts), so the table shows the numbers the verdicts rest on.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Sequence

from specrepro.util.metric_names import category_metric, split_category_metric


def categories_in(metrics: Iterable[str], base: Optional[str] = None) -> List[str]:
    """The categories named by `metrics` (of base metric `base`, or any), in order of first appearance."""
    found = (split_category_metric(m) for m in metrics)
    return list(dict.fromkeys(c for b, c in found if c is not None and (base is None or b == base)))


def in_order(found: Sequence[str], configured: Optional[Sequence[str]] = None) -> List[str]:
    """The categories measured, in the config's order (its `categories` list) where it gives one, then the rest in
    the order measured: the table reads in the order the benchmark's author wrote them."""
    configured = [c for c in configured or [] if c in found]
    return configured + [c for c in found if c not in configured]


def categorized_benchmarks(summary: List[Dict[str, Any]], base: str = "accept_length") -> Dict[str, List[str]]:
    """benchmark -> its categories, for each benchmark whose summary has `base` per category."""
    out: Dict[str, List[str]] = {}
    for s in summary:
        metric, category = split_category_metric(s["metric"])
        if category is not None and metric == base and category not in out.setdefault(s["benchmark"], []):
            out[s["benchmark"]].append(category)
    return out


def interval_text(s: Optional[Dict[str, Any]], digits: int = 3) -> str:
    """A summary row as `mean (95% CI low .. high), n=N`; one repeat has no interval."""
    if not s:
        return "not run"
    if s.get("n", 0) < 2 or s["ci_low"] is None or s["ci_low"] != s["ci_low"] or abs(s["ci_low"]) == float("inf"):
        return f"{s['mean']:.{digits}f} (n={s.get('n', 1)})"
    return f"{s['mean']:.{digits}f} ({s['ci_low']:.{digits}f} .. {s['ci_high']:.{digits}f}), n={s['n']}"


def theory_by_metric(analysis: Dict[str, Any], bench: str) -> Dict[tuple, Dict[str, Any]]:
    """(arm, metric) -> theory's row on `bench` ({expected, agrees, ...}), where theory computed an expected value
    (rows without a `metric` are the whole benchmark's accept length)."""
    return {(r["arm"], r.get("metric", "accept_length")): r
            for r in analysis.get("theory") or [] if r["benchmark"] == bench and r.get("expected") is not None}


def theory_cell(theory: Dict[tuple, Dict[str, Any]], arm: str, metric: str, base: str) -> Optional[Dict[str, Any]]:
    """Theory's prediction for `metric` on one arm: {expected, agrees}, the category's own row where one was computed
    (it says whether that category's measurement agrees), else the benchmark's expected value (no verdict on the
    category: nothing measured it against); None where theory computed none."""
    own = theory.get((arm, metric))
    if own is not None:
        return {"expected": float(own["expected"]), "agrees": own.get("agrees")}
    whole = theory.get((arm, base))
    return None if whole is None else {"expected": float(whole["expected"]), "agrees": None}


def category_table(analysis: Dict[str, Any], bench: str, arms: Sequence[str], base: str = "accept_length",
                   configured: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """The per-category table of `base` on `bench` as data: its arms (those measured), one row per category (its
    summary per arm, theory's prediction per arm, the claims on it) and, last, the whole benchmark's row
    (category None).  Theory's prediction for a category is the benchmark's where no category row was computed:
    the toy model's prediction does not depend on the category (specrepro.core.theory.category_predictions)."""
    summary = {(s["arm"], s["metric"]): s for s in analysis.get("summary") or [] if s["benchmark"] == bench}
    categories = in_order(categories_in((m for _, m in summary), base), configured)
    measured = [a for a in arms if any((a, category_metric(base, c)) in summary for c in categories)]
    theory = theory_by_metric(analysis, bench)
    claims = [c for c in analysis.get("claims") or [] if c.get("benchmark") == bench and c.get("metric")]
    rows = []
    for category in [*categories, None]:
        metric = base if category is None else category_metric(base, category)
        rows.append({"category": category, "metric": metric,
                     "cells": {a: summary.get((a, metric)) for a in measured},
                     "theory": {a: theory_cell(theory, a, metric, base) for a in measured},
                     "claims": [c for c in claims if split_category_metric(c["metric"])[1] == category
                                and category is not None]})
    return {"benchmark": bench, "metric": base, "arms": measured, "rows": rows,
            "with_theory": any(v is not None for r in rows for v in r["theory"].values())}
