"""Report figures as base64 PNGs (matplotlib, no display)."""

from __future__ import annotations

import base64
import io
import math
from typing import Any, Dict, List

import matplotlib
import numpy as np

from specrepro.util.document import Figure
from specrepro.analysis.stats import per_token_latencies
from specrepro.analysis.sweep import factor_columns, metric_by_level, pareto_front

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402



def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def bars_with_ci(analysis: Dict[str, Any], bench: str, metrics: List[str], titles: Dict[str, str]) -> List[Figure]:
    """One figure per benchmark: a panel per headline metric, each arm's mean as a bar with its 95% interval
    (the numbers of the benchmark's headline table, beside which the report puts it)."""
    panels = []
    for metric in metrics:
        rows = [s for s in analysis["summary"] if s["benchmark"] == bench and s["metric"] == metric]
        if rows:
            panels.append((metric, rows))
    if not panels:
        return []
    arms = list(dict.fromkeys(r["arm"] for _, rows in panels for r in rows))
    fig, axes = plt.subplots(1, len(panels), figsize=(2.3 * len(panels) + 1.2, 0.32 * len(arms) + 1.0),
                             sharey=True, squeeze=False)
    for ax, (metric, rows) in zip(axes[0], panels):
        by_arm = {r["arm"]: r for r in rows}
        y = np.arange(len(arms))
        means = [by_arm[a]["mean"] if a in by_arm else np.nan for a in arms]
        errs = [(by_arm[a]["ci_high"] - by_arm[a]["mean"]) if a in by_arm and math.isfinite(by_arm[a]["ci_high"])
                else 0 for a in arms]
        ax.barh(y, means, xerr=errs, capsize=3, color="#4c72b0")
        ax.set_yticks(y, arms)
        ax.invert_yaxis()
        ax.set_title(titles.get(metric, metric), fontsize=9)
        ax.tick_params(labelsize=8)
        top = np.nanmax([m + e for m, e in zip(means, errs)] + [0.0])
        if np.nanmin(means + [0.0]) >= 0:
            ax.set_xlim(0, top * 1.08 if top > 0 else 1)
    return [Figure(f"{bench}.headline", _png(fig),
                   f"{bench}: each arm's mean of {', '.join(m for m, _ in panels)} with its 95% interval over repeats "
                   "(the table's numbers).")]


def theory_plot(rows: List[Dict[str, Any]]) -> List[Figure]:
    """Measured accept length per (arm, benchmark) against what theory predicts: the band a dash, the expected
    value a tick, the measurement a dot (green inside the band, red outside)."""
    if not rows:
        return []
    fig, ax = plt.subplots(figsize=(5.2, 0.34 * len(rows) + 0.9))
    labels = [f"{r['arm']} / {r['benchmark']}" for r in rows]
    y = np.arange(len(rows))
    for i, r in enumerate(rows):
        if r.get("low") is not None:
            ax.plot([r["low"], r["high"]], [i, i], color="#b8c4d0", linewidth=7, solid_capstyle="butt")
        if r.get("expected") is not None:
            ax.plot([r["expected"]], [i], marker="|", markersize=13, color="#3d4752")
        ax.plot([r["measured"]], [i], marker="o", linestyle="none",
                color={True: "#1a7f37", False: "#cf222e"}.get(r.get("agrees"), "#59636e"))
    ax.set_yticks(y, labels)
    ax.invert_yaxis()
    ax.tick_params(labelsize=8)
    ax.set_xlabel("accept length (tokens per verify step)", fontsize=8)
    return [Figure("theory", _png(fig),
                   "Accept length per arm and benchmark: the dot is the measurement (green inside theory's band, red "
                   "outside), the tick the expected value, the grey bar the band.")]


def tpot_distributions(requests) -> List[Figure]:
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
    return [Figure("tpot_distribution", _png(fig),
                   "Per-token latency (bench_serving inter-token latencies) by arm: two modes mean the median and "
                   "the mean tell different stories.")]


def acceptance_histograms(analysis: Dict[str, Any]) -> List[Figure]:
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
        out.append(Figure(f"{bench}.acceptance", _png(fig),
                          f"{bench}: the share of verify steps that accepted 0, 1, 2, ... drafts, per arm (pooled over "
                          "repeats)."))
    return out


# What a sweep plots against each factor: accept length and mean TPOT, one line per arm.
FACTOR_METRICS = ("accept_length", "mean_tpot_ms")


def factor_plots(runs) -> List[Figure]:
    """Per swept factor, base benchmark and metric, the metric against the factor's levels, one line
    per arm with its 95% interval over repeats."""

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
                out.append(Figure(f"{bench}.{metric}.by_{factor}", _png(fig),
                                  f"{bench}: {metric} against {factor}, one line per arm, with its 95% interval "
                                  "over repeats."))
    return out


def pareto_plots(runs) -> List[Figure]:
    """Per base benchmark, output throughput against mean TPOT, one point per cell, one line per arm
    (in the order of its cells), each arm's Pareto front (lower TPOT, higher throughput) marked."""

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
        out.append(Figure(f"{bench}.pareto", _png(fig),
                          f"{bench}: output throughput against mean TPOT, one point per level, one line per arm; "
                          "stars mark each arm's Pareto front (lower TPOT, higher throughput)."))
    return out
