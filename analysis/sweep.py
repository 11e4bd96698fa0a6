"""A sweep's results regrouped by factor: claims per level with a one-line summary, metrics per level and arm.

Inputs are the analysis's own outputs and the tidy runs table with its sweep columns (specrepro.stages.collect adds
`base_arm`, `base_benchmark` and one column per factor); nothing here judges anew: a claim's verdict at a level
is the verdict of its instance in the family (analysis.analyze.decide, Holm over every instance).
"""

from __future__ import annotations

import math
from typing import Any, Dict, List

import pandas as pd

from specrepro.analysis import stats
from specrepro.util.document import Table


def level_label(levels: Dict[str, Any]) -> str:
    return ", ".join(f"{f} {v}" for f, v in levels.items())


def _join(values: List[str]) -> str:
    return values[0] if len(values) == 1 else ", ".join(values[:-1]) + " and " + values[-1]


def summary_line(rows: List[Dict[str, Any]]) -> str:
    """"holds at concurrency 1, 2, 4, 8; NOT REPRODUCED at 3 and 5" (one factor), or levels spelled out in full."""
    factors = list(rows[0]["levels"]) if rows else []
    one = len(factors) == 1
    groups: Dict[str, List[str]] = {}
    for r in rows:
        label = str(r["levels"][factors[0]]) if one else f"({level_label(r['levels'])})"
        groups.setdefault(r["verdict"], []).append(label)
    parts = []
    for verdict, labels in groups.items():
        head = "holds" if verdict == "REPRODUCED" else verdict
        parts.append(f"{head} at " + (f"{factors[0]} " if one and not parts else "") + _join(labels))
    return "; ".join(parts)


def per_level(verdicts: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Per claim asked across factors: its verdict at each level, in the order judged, and its summary line."""
    out: Dict[str, Dict[str, Any]] = {}
    for v in verdicts:
        if not v.get("base_id"):
            continue
        entry = out.setdefault(v["base_id"], {"id": v["base_id"], "text": v.get("text", ""), "rows": []})
        entry["rows"].append({"levels": v["levels"], "verdict": v["verdict"], "detail": v.get("detail", ""),
                              "instance": v["id"]})
    for entry in out.values():
        entry["factors"] = list(entry["rows"][0]["levels"])
        entry["summary"] = summary_line(entry["rows"])
    return list(out.values())


def factor_columns(runs: pd.DataFrame) -> List[str]:
    """The swept factors' columns of a runs table (collect's `factor:` prefix)."""
    return [c for c in runs.columns if c.startswith("factor:")]


def metric_by_level(runs: pd.DataFrame, metric: str, factor: str) -> pd.DataFrame:
    """Mean and 95% interval of `metric` per (base benchmark, base arm, level of `factor`), over repeats (and over
    the other factors' levels, when there are any: they are shown as separate lines by the caller)."""
    col = f"factor:{factor}"
    data = runs[(runs["metric"] == metric) & runs[col].notna()]
    rows = []
    for (bench, arm, level), g in data.groupby(["base_benchmark", "base_arm", col], sort=True):
        d = stats.describe(g["value"].tolist())
        rows.append({"benchmark": bench, "arm": arm, "level": level, "mean": d["mean"], "ci_low": d["ci_low"],
                     "ci_high": d["ci_high"], "n": d["n"]})
    return pd.DataFrame(rows, columns=["benchmark", "arm", "level", "mean", "ci_low", "ci_high", "n"])


def _num(x: float, significant: int) -> str:
    """`significant` digits, never in exponent form (1.8e+02 reads as 180)."""
    return f"{x:.0f}" if abs(x) >= 10 ** significant else f"{x:.{significant}g}"


def level_tables(runs: pd.DataFrame, metric: str, factor: str, digits: int = 3) -> List[Table]:
    """Per base benchmark, one table: a row per level, a column per arm (mean, and the interval's half width)."""
    data = metric_by_level(runs, metric, factor)
    tables = []
    for bench, g in data.groupby("benchmark", sort=False):
        arms = list(dict.fromkeys(g["arm"]))
        rows = []
        for level, lg in g.groupby("level", sort=True):
            cells = []
            for a in arms:
                r = lg[lg["arm"] == a]
                if r.empty:
                    cells.append("-")
                    continue
                r = r.iloc[0]
                half = (r["ci_high"] - r["mean"]) if math.isfinite(r["ci_high"]) else float("nan")
                cells.append(_num(r["mean"], digits) + (f" ± {_num(half, 2)}" if math.isfinite(half) else ""))
            rows.append([f"{level:g}" if isinstance(level, float) else str(level), *cells])
        tables.append(Table([factor, *arms], rows,
                            title=f"{bench}, {metric} by {factor} (mean ± 95% half width over repeats):"))
    return tables


def pareto_front(points: List[tuple]) -> List[tuple]:
    """(tpot, throughput) points no other point beats on both (lower TPOT, higher throughput), by TPOT."""
    front = []
    for p in sorted(points):
        if not front or p[1] > front[-1][1]:
            front.append(p)
    return front
