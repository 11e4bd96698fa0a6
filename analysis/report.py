"""Markdown and HTML reports: what ran, on what, and what it shows."""

from __future__ import annotations

import json
import math
from html import escape
from pathlib import Path
from typing import Any, Dict, List

GPU_STATEMENT = (
    "What needs a GPU: the image build on the GPU platform, the gpu_check of each arm (the patch's graph "
    "capture and replay on one GPU inside the arm's image), one sglang server per arm with the model's "
    "weights, and the GSM8K and bench_serving measurements against it. Those stages were not run by this "
    "command; on a CPU machine specrepro runs the source, patch and patch_check stages for real (the "
    "patched sglang functions execute on CPU tensors) and checks the CUDA-graph half of the patch in "
    "source only."
)


def cpu_stages_report(cfg: Dict[str, Any], verdict_paths: List[Path]) -> str:
    lines = [
        f"# {cfg['experiment']['name']}: CPU stages",
        "",
        f"sglang {cfg['sglang']['version']} ({cfg['sglang']['git_ref']}), model {cfg['model']['name']}, "
        f"platform {cfg['platform']['name']}.",
        "",
    ]
    for path in verdict_paths:
        md = Path(path).with_suffix(".md")
        lines.append(md.read_text() if md.is_file() else json.dumps(json.loads(Path(path).read_text()), indent=1))
    lines += ["## What was not run here", "", GPU_STATEMENT, ""]
    return "\n".join(lines)


def _fmt(value, digits=3):
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}"


def _cell(summary: Dict, arm: str, bench: str, metric: str, digits: int = 3) -> str:
    s = summary.get((arm, bench, metric))
    if not s:
        return "not run"
    half = (s["ci_high"] - s["ci_low"]) / 2 if math.isfinite(s["ci_high"]) else math.inf
    pm = f" ± {half:.{digits}f}" if math.isfinite(half) else " (n=1)"
    return f"{s['mean']:.{digits}f}{pm}"


# The seed's two tables: (title, benchmark, [(header, metric, digits, seed figure beside it)]).
SEED_TABLES = [
    ("GSM8K (accept length is the metric the fix moves)", "gsm8k",
     [("accept len", "accept_length", 3, True), ("accuracy", "accuracy", 3, True), ("invalid", "invalid_rate", 3, True)]),
    ("bench_serving (read mean TPOT, not median)", "bench_serving",
     [("mean TPOT (ms)", "mean_tpot_ms", 2, True), ("median TPOT (ms)", "median_tpot_ms", 2, False),
      ("output tok/s", "output_throughput", 1, True)]),
]


def reference_applies(cfg: Dict[str, Any]) -> bool:
    """The published figures sit beside results of the platform and model they were measured on only."""
    exp = cfg["experiment"]
    return ((exp.get("reference_platform") in (None, cfg["platform"]["name"]))
            and (exp.get("reference_model") in (None, cfg["model"]["name"])))


def seed_tables(cfg: Dict[str, Any], analysis: Dict[str, Any]) -> str:
    """The seed's two tables in its shape: every cell mean ± 95% CI, the seed's figure beside it."""
    summary = {(s["arm"], s["benchmark"], s["metric"]): s for s in analysis["summary"]}
    ref = cfg["experiment"].get("reference") or {} if reference_applies(cfg) else {}
    lines: List[str] = []
    for title, bench, columns in SEED_TABLES:
        header = ["arm"] + [h for h, _, _, seed in columns for h in ((h, "seed") if seed else (h,))]
        lines += [f"### {title}", "", "| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
        for arm in cfg["experiment"]["arms"]:
            published = ref.get(arm, {}).get(bench, {})
            cells = [arm]
            for _, metric, digits, seed in columns:
                cells.append(_cell(summary, arm, bench, metric, digits))
                if seed:
                    cells.append(_fmt(published.get(metric), digits))
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    if not reference_applies(cfg) and cfg["experiment"].get("reference"):
        exp = cfg["experiment"]
        lines.append(f"The published figures were measured with {exp.get('reference_model')} on "
                     f"{exp.get('reference_platform')}; they are not shown beside {cfg['model']['name']} on "
                     f"{cfg['platform']['name']}.")
    return "\n".join(lines).rstrip()


def claims_table(analysis: Dict[str, Any]) -> str:
    lines = ["| claim | verdict | numbers |", "| --- | --- | --- |"]
    for c in analysis["claims"]:
        lines.append(f"| {c['text'] or c['id']} | **{c['verdict']}** | {c.get('detail', '')} |")
    return "\n".join(lines)


HEADLINE_METRICS = ("accept_length", "accuracy", "invalid_rate", "mean_tpot_ms", "median_tpot_ms", "output_throughput")


def noise_table(analysis: Dict[str, Any]) -> str:
    lines = ["| benchmark | metric | noise floor (CV) | from |", "| --- | --- | --- | --- |"]
    for n in analysis["noise_floors"]:
        if n["metric"] not in HEADLINE_METRICS:
            continue
        floor = n["noise_floor"]
        lines.append(f"| {n['benchmark']} | {n['metric']} | {'-' if floor is None else f'{floor:.2%}'} | {n['source']} |")
    return "\n".join(lines)


def stage_costs_table(results_dir: Path) -> str:
    """Snakemake's `benchmark:` records of the heavy stages: wall time and peak memory per job."""
    import csv

    rows = []
    for tsv in sorted(Path(results_dir, "benchmarks").glob("**/*.tsv")):
        with open(tsv) as fh:
            records = list(csv.DictReader(fh, delimiter="\t"))
        if not records:
            continue
        last = records[-1]
        job = str(tsv.relative_to(Path(results_dir, "benchmarks")).with_suffix(""))
        rss = last.get("max_rss", "")
        rows.append(f"| {job} | {float(last['s']):.1f} | {rss if rss in ('', '-', 'NA') else f'{float(rss):.0f}'} |")
    if not rows:
        return ""
    return "\n".join(["| job | wall time (s) | peak RSS (MB) |", "| --- | --- | --- |", *rows])


def where_this_ran(cfg: Dict[str, Any], arm_records: List[Dict[str, Any]]) -> str:
    """Measured facts per arm (from inside its image), and fingerprint differences against the baseline."""
    from specrepro.gpu_facts import FINGERPRINT_KEYS, fingerprint_differences

    if not arm_records:
        return ""
    lines = ["### Where this ran (measured inside each arm's image)", "",
             "| arm | host | GPUs granted | facts from | " + " | ".join(FINGERPRINT_KEYS) + " |",
             "|" + " --- |" * (4 + len(FINGERPRINT_KEYS))]
    fps = {}
    for rec in arm_records:
        fp = rec.get("fingerprint") or {}
        fps[rec["arm"]] = fp
        facts = (rec.get("gpu_facts") or {}).get("before") or {}
        granted = sorted({g for e in rec.get("launches", []) for g in e.get("gpus") or []})
        cells = [rec["arm"], rec.get("host", "-"), ",".join(map(str, granted)) or "none",
                 facts.get("source", "none")] + [str(fp.get(k) if fp.get(k) is not None else "-")[:40]
                                                  for k in FINGERPRINT_KEYS]
        lines.append("| " + " | ".join(cells) + " |")
    notes = sorted({((r.get("gpu_facts") or {}).get("before") or {}).get("note") for r in arm_records} - {None})
    lines += [""] + [f"- {n}" for n in notes]
    for d in fingerprint_differences(fps, cfg["experiment"]["baseline_arm"]):
        what = ", ".join(f"{k}: {a} vs {b}" for k, (a, b) in d["differs"].items())
        lines.append(f"- **Fingerprint mismatch: {d['arm']} differs from {d['baseline']} in {what}**; its deltas "
                     f"against {d['baseline']} may come from that, not from the change.")
    return "\n".join(lines).rstrip()


def executed_statement(cfg: Dict[str, Any], arm_records: List[Dict[str, Any]] = ()) -> str:
    """The first line of the report: where the numbers come from, as measured."""
    plat = cfg["platform"]
    models = sorted({(r.get("fingerprint") or {}).get("gpu_model") or "none" for r in arm_records})
    if plat["accelerator"] == "none":
        return ("**Where this ran:** platform `{}` without an accelerator (measured: no GPU). The servers here were "
                "not sglang on a GPU, so the numbers below say nothing about the change's performance; they prove "
                "the pipeline.".format(plat["name"]))
    measured = ", ".join(models) if arm_records else "not measured"
    return (f"**Where this ran:** platform `{plat['name']}`; GPUs measured inside the arms' images: {measured} "
            f"(configured: {plat.get('gpu_model') or plat['accelerator']}).")


def placement_statement(cfg: Dict[str, Any]) -> str:
    if cfg["serve"]["placement"] == "packed":
        return ("**Noise risk:** placement `packed`: arms may have shared a node (GPUs, host CPU, memory "
                "bandwidth), so deltas include interference between arms.")
    return "Placement `exclusive`: one measuring arm per node at a time."


def campaign_report(cfg, runs_csv: Path, requests_parquet: Path, verdicts: List[Path], claims_path,
                    markdown: Path, html: Path, analysis_json: Path, log=None,
                    arm_records: List[Path] = ()) -> Dict[str, Any]:
    import pandas as pd

    from specrepro.analysis.analyze import analyze
    from specrepro.analysis.claims import load_claims

    records = [json.loads(Path(p).read_text()) for p in arm_records]
    runs = pd.read_csv(runs_csv)
    requests = pd.read_parquet(requests_parquet) if Path(requests_parquet).is_file() else None
    skipped = set(cfg["experiment"].get("skip_claims") or [])
    claims = [c for c in load_claims(claims_path) if c["id"] not in skipped]
    questions = {b: v["gsm8k"]["num_questions"] for b, v in cfg["benchmarks"].items() if v["kind"] == "gsm8k"}
    analysis = analyze(runs, requests, cfg["experiment"]["baseline_arm"], claims,
                       cfg["experiment"].get("reference_repeats"), questions)
    analysis_json.parent.mkdir(parents=True, exist_ok=True)
    analysis_json.write_text(json.dumps(analysis, indent=1, default=str))
    warnings = [b["per_token"]["warning"] for b in analysis["tpot_bimodality"] if b["per_token"]["warning"]]
    parts = [
        f"# {cfg['experiment']['name']}: results",
        "",
        executed_statement(cfg, records),
        "",
        placement_statement(cfg),
        "",
        f"sglang {cfg['sglang']['version']}, model {cfg['model']['name']}, baseline arm `{analysis['baseline']}`, "
        "repeats: " + ", ".join(f"{b} {(v.get('repeats') or cfg['experiment']['repeats'])}"
                                for b, v in cfg["benchmarks"].items()) + "; one server per arm.",
        "",
        seed_tables(cfg, analysis),
        "",
        "### Claims",
        "",
        claims_table(analysis),
        *([f"\nNot judged in this campaign (experiment.skip_claims): {', '.join(sorted(skipped))}."] if skipped else []),
        "",
        "### Noise floors",
        "",
        noise_table(analysis),
    ]
    if warnings:
        parts += ["", "### TPOT distribution", ""] + [f"- {w}" for w in warnings]
    if analysis["flags"]:
        parts += ["", "### Flags", ""] + [f"- **{f['text']}**" for f in analysis["flags"]]
    for v in verdicts:
        md = Path(v).with_suffix(".md")
        if md.is_file():
            parts += ["", md.read_text()]
    where = where_this_ran(cfg, records)
    if where:
        parts += ["", where]
    costs = stage_costs_table(Path(cfg["results_dir"]))
    if costs:
        parts += ["", "### Provenance: what each heavy stage cost (Snakemake `benchmark:`)", "", costs]
    text = "\n".join(parts) + "\n"
    markdown.write_text(text)
    html.write_text(render_html(text, runs, requests, analysis))
    return analysis


def render_html(markdown_text: str, runs, requests, analysis) -> str:
    from specrepro.analysis.plots import bars_with_ci, tpot_distributions

    body = [f"<pre style='white-space: pre-wrap'>{escape(markdown_text)}</pre>"]
    for fig in bars_with_ci(analysis):
        body.append(f"<img alt='per-arm bars' src='data:image/png;base64,{fig}'/>")
    for fig in tpot_distributions(requests):
        body.append(f"<img alt='TPOT distribution' src='data:image/png;base64,{fig}'/>")
    return "<!doctype html><html><head><meta charset='utf-8'><title>specrepro report</title></head><body>" + \
        "\n".join(body) + "</body></html>\n"
