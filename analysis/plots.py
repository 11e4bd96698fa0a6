"""Report figures as base64 PNGs (matplotlib, no display)."""

from __future__ import annotations

import base64
import io
import math
from typing import Any, Dict, List

import matplotlib
import numpy as np

from specrepro.analysis.stats import per_token_latencies

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

BAR_METRICS = [("gsm8k", "accept_length"), ("gsm8k", "accuracy"), ("bench_serving", "mean_tpot_ms"),
               ("bench_serving", "output_throughput")]


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def bars_with_ci(analysis: Dict[str, Any]) -> List[str]:
    out = []
    for bench, metric in BAR_METRICS:
        rows = [s for s in analysis["summary"] if s["benchmark"] == bench and s["metric"] == metric]
        if not rows:
            continue
        fig, ax = plt.subplots(figsize=(6, 3))
        means = [r["mean"] for r in rows]
        errs = [(r["ci_high"] - r["mean"]) if math.isfinite(r["ci_high"]) else 0 for r in rows]
        ax.bar([r["arm"] for r in rows], means, yerr=errs, capsize=4)
        ax.set_title(f"{bench}: {metric} (mean, 95% CI)")
        ax.tick_params(axis="x", labelrotation=30)
        out.append(_png(fig))
    return out


def tpot_distributions(requests) -> List[str]:
    if requests is None or requests.empty or "itls_ms" not in requests.columns:
        return []
    data = requests[requests["itls_ms"].notna()]
    if data.empty:
        return []
    by_arm = {arm: per_token_latencies(g) for arm, g in data.groupby("arm", sort=False)}
    by_arm = {arm: v for arm, v in by_arm.items() if v.size}
    if not by_arm:
        return []
    hi = np.percentile(np.concatenate(list(by_arm.values())), 99.5)
    edges = np.linspace(0, hi, 61)
    fig, ax = plt.subplots(figsize=(6, 3))
    for arm, values in by_arm.items():
        counts, _ = np.histogram(values, bins=edges)
        ax.stairs(counts, edges, label=arm)
    ax.set_xlabel("per-token latency (ms)")
    ax.set_title("bench_serving per-token latency by arm")
    ax.legend(fontsize=7)
    return [_png(fig)]


def acceptance_histograms(analysis: Dict[str, Any]) -> List[str]:
    """Per benchmark: each arm's share of verify steps by drafts accepted, bars side by side."""
    out = []
    hists = analysis.get("acceptance_histograms") or []
    for bench in dict.fromkeys(h["benchmark"] for h in hists):
        rows = [h for h in hists if h["benchmark"] == bench]
        width = max(len(h["verify_steps"]) for h in rows)
        fig, ax = plt.subplots(figsize=(6, 3))
        bar = 0.8 / len(rows)
        for k, h in enumerate(rows):
            shares = [n / h["total"] for n in h["verify_steps"]] + [0.0] * (width - len(h["verify_steps"]))
            ax.bar(np.arange(width) + k * bar, shares, width=bar, label=h["arm"])
        ax.set_xticks(np.arange(width) + bar * (len(rows) - 1) / 2, [str(i) for i in range(width)])
        ax.set_xlabel("drafts accepted in a verify step")
        ax.set_ylabel("share of verify steps")
        ax.set_title(f"{bench}: acceptance histogram by arm")
        ax.legend(fontsize=7)
        out.append(_png(fig))
    return out


# What a sweep plots against each factor: accept length and mean TPOT, one line per arm.
FACTOR_METRICS = ("accept_length", "mean_tpot_ms")


def factor_plots(runs) -> List[tuple]:
    """(name, PNG): per swept factor, base benchmark and metric, the metric against the factor's levels, one line
    per arm with its 95% interval over repeats."""
    from specrepro.analysis.sweep import factor_columns, metric_by_level

    out = []
    for col in factor_columns(runs):
        factor = col.split(":", 1)[1]
        for metric in FACTOR_METRICS:
            data = metric_by_level(runs, metric, factor)
            for bench, g in data.groupby("benchmark", sort=False):
                fig, ax = plt.subplots(figsize=(6, 3.2))
                for arm, a in g.groupby("arm", sort=False):
                    lo = (a["mean"] - a["ci_low"]).where(np.isfinite(a["ci_low"]), 0)
                    hi = (a["ci_high"] - a["mean"]).where(np.isfinite(a["ci_high"]), 0)
                    ax.errorbar(a["level"], a["mean"], yerr=[lo, hi], marker="o", capsize=3, label=arm)
                ax.set_xlabel(factor)
                ax.set_ylabel(metric)
                ax.set_title(f"{bench}: {metric} by {factor} (mean, 95% CI)")
                ax.legend(fontsize=7)
                out.append((f"{bench}.{metric}.by_{factor}", _png(fig)))
    return out


def pareto_plots(runs) -> List[tuple]:
    """(name, PNG): per base benchmark, output throughput against mean TPOT, one point per cell, one line per arm
    (in the order of its cells), each arm's Pareto front (lower TPOT, higher throughput) marked."""
    from specrepro.analysis.sweep import factor_columns, pareto_front

    if not factor_columns(runs):
        return []
    means = runs[runs["metric"].isin(["mean_tpot_ms", "output_throughput"])].groupby(
        ["base_benchmark", "base_arm", "benchmark", "arm", "metric"], sort=False)["value"].mean().unstack("metric")
    if not {"mean_tpot_ms", "output_throughput"} <= set(means.columns):
        return []
    out = []
    for bench, g in means.groupby(level="base_benchmark", sort=False):
        fig, ax = plt.subplots(figsize=(6, 3.6))
        for arm, a in g.groupby(level="base_arm", sort=False):
            pts = list(zip(a["mean_tpot_ms"], a["output_throughput"]))
            line = ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", alpha=0.6, label=arm)[0]
            front = pareto_front(pts)
            ax.plot([p[0] for p in front], [p[1] for p in front], marker="*", markersize=11, linestyle="none",
                    color=line.get_color())
        ax.set_xlabel("mean TPOT (ms)")
        ax.set_ylabel("output throughput (tok/s)")
        ax.set_title(f"{bench}: throughput against TPOT per arm (stars: its Pareto front)")
        ax.legend(fontsize=7)
        out.append((f"{bench}.pareto", _png(fig)))
    return out
