"""Markdown and HTML reports: what ran, on what, and what it shows."""

from __future__ import annotations

import base64
import json
import math
from html import escape
from pathlib import Path
from typing import Any, Dict, List, Optional

GPU_STATEMENT = (
    "What needs a GPU: the image build on the GPU platform, the GPU checks the patch series declare (run by "
    "gpu_check on one GPU inside each arm's image), one sglang server per arm with the model's weights, and the "
    "benchmarks against it. Those stages were not run by this command; on a CPU machine specrepro runs the source, "
    "patch and patch_check stages for real: every series' generic checks and its own CPU checks, whose verdicts "
    "above say what they executed and what they read from source only."
)


def table_head(*cells: str) -> List[str]:
    """A markdown table's header and separator lines."""
    return ["| " + " | ".join(cells) + " |", "|" + " --- |" * len(cells)]


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


# How a metric reads in a headline table: header and digits.
METRIC_FORMAT = {
    "accept_length": ("accept len", 3), "accuracy": ("accuracy", 3), "invalid_rate": ("invalid", 3),
    "mean_tpot_ms": ("mean TPOT (ms)", 2), "median_tpot_ms": ("median TPOT (ms)", 2),
    "output_throughput": ("output tok/s", 1), "total_throughput": ("total tok/s", 1),
    "request_throughput": ("req/s", 2), "mean_ttft_ms": ("mean TTFT (ms)", 1), "mean_itl_ms": ("mean ITL (ms)", 2),
}
BENCHMARK_KIND_TITLES = {"gsm8k": "GSM8K-style benchmarks", "bench_serving": "bench_serving benchmarks"}


def reference_applies(cfg: Dict[str, Any]) -> bool:
    """The published figures sit beside results of the platform and model they were measured on only."""
    exp = cfg["experiment"]
    return ((exp.get("reference_platform") in (None, cfg["platform"]["name"]))
            and (exp.get("reference_model") in (None, cfg["model"]["name"])))


def headline_metrics(cfg: Dict[str, Any], bench: str, claims: List[Dict[str, Any]]) -> List[str]:
    """The benchmark's headline metrics (benchmarks.<b>.headline.metrics), else those its claims name."""
    own = ((cfg["benchmarks"][bench].get("headline") or {}).get("metrics") or [])
    return list(own) or list(dict.fromkeys(c["metric"] for c in claims if c.get("benchmark") == bench and c.get("metric")))


def headline_tables(cfg: Dict[str, Any], analysis: Dict[str, Any]) -> str:
    """One table per benchmark the campaign ran (a sweep's cells are in "Across factors"), grouped by kind: every
    cell mean ± 95% CI, the published figure beside it where the experiment gives one."""
    summary = {(s["arm"], s["benchmark"], s["metric"]): s for s in analysis["summary"]}
    ref = cfg["experiment"].get("reference") or {} if reference_applies(cfg) else {}
    ran = {s["benchmark"] for s in analysis["summary"]}
    lines: List[str] = []
    for kind, title in BENCHMARK_KIND_TITLES.items():
        benches = [b for b, v in cfg["benchmarks"].items() if v["kind"] == kind and not v.get("cell") and b in ran]
        if not benches:
            continue
        lines += [f"### {title}", ""]
        for bench in benches:
            metrics = headline_metrics(cfg, bench, analysis.get("claims") or [])
            if not metrics:
                continue
            published = {m for arm in ref.values() for m in (arm.get(bench) or {})}
            note = (cfg["benchmarks"][bench].get("headline") or {}).get("note")
            header = ["arm"]
            for m in metrics:
                header += [METRIC_FORMAT.get(m, (m, 3))[0]] + (["published"] if m in published else [])
            lines += [f"**{bench}**" + (f" ({note})" if note else ""), "", *table_head(*header)]
            for arm in cfg["experiment"]["arms"]:
                if not any((arm, bench, m) in summary for m in metrics):
                    continue
                cells = [arm]
                for m in metrics:
                    digits = METRIC_FORMAT.get(m, (m, 3))[1]
                    cells.append(_cell(summary, arm, bench, m, digits))
                    if m in published:
                        cells.append(_fmt((ref.get(arm, {}).get(bench) or {}).get(m), digits))
                lines.append("| " + " | ".join(cells) + " |")
            lines.append("")
    if not reference_applies(cfg) and cfg["experiment"].get("reference"):
        exp = cfg["experiment"]
        lines.append(f"The published figures were measured with {exp.get('reference_model')} on "
                     f"{exp.get('reference_platform')}; they are not shown beside {cfg['model']['name']} on "
                     f"{cfg['platform']['name']}.")
    return "\n".join(lines).rstrip()


def claims_table(analysis: Dict[str, Any]) -> str:
    """Per claim: its verdict, its numbers, and where the noise in its interval came from."""
    lines = table_head("claim", "verdict", "numbers", "noise from")
    for c in analysis["claims"]:
        verdict = f"**{c['verdict']}**" + (" (as predicted for the pin)" if c.get("as_predicted") else "")
        at = f" (at {', '.join(f'{f} {v}' for f, v in c['levels'].items())})" if c.get("levels") else ""
        lines.append(f"| {c['text'] or c['id']}{at} | {verdict} | {c.get('detail', '')} | {c.get('noise') or '-'} |")
    m = analysis.get("multiplicity") or {}
    if m:
        policy = (f"Holm's step-down over the {m['family']} claims with an interval, familywise "
                  f"{m['alpha']:.0%} (each claim one-sided at {m['alpha'] / 2:.1%}, as its 95% interval)"
                  if m["policy"] == "holm" else
                  f"no multiplicity correction (each claim one-sided at {m['alpha'] / 2:.1%})")
        lines += ["", f"Many claims: {policy}."]
    launch = analysis.get("launch_noise") or {}
    if launch:
        lines.append("Between-launch noise: " + (
            "measured: each arm ran 2+ launches, and their means are its replicates." if launch.get("measured") else
            f"one launch per arm, so every arm-vs-arm interval includes a prior per metric "
            f"({', '.join(f'{k} {v:.1%}' for k, v in sorted((launch.get('prior') or {}).items()))}); source: "
            f"{launch.get('source') or 'not stated'}"))
    return "\n".join(lines)


def accuracy_section(cfg: Dict[str, Any], analysis: Dict[str, Any]) -> str:
    """Accuracy shown, never judged: each arm against the baseline on the same questions, paired."""
    rows = (analysis.get("gsm8k") or {}).get("paired") or []
    if not rows:
        return ""
    said = cfg["experiment"].get("accuracy_note") or (
        "No claim of this experiment is about accuracy." if not any(c.get("metric") == "accuracy"
                                                                    for c in analysis.get("claims") or []) else "")
    lines = ["### Accuracy (shown, not judged)", "",
             "Per question, each arm's answer against the baseline's (the majority over repeats); n is the number of "
             f"distinct questions.  {said}".rstrip(), "",
             *table_head("benchmark", "arm", "against", "questions", "arm right only", "baseline right only",
                         "difference (95% CI)")]
    for r in rows:
        lines.append(f"| {r['benchmark']} | {r['arm']} | {r['baseline']} | {r['pairs']} | {r['arm_only']} | "
                     f"{r['base_only']} | {r['difference']:+.1%} ({r['ci_low']:+.1%} .. {r['ci_high']:+.1%}) |")
    return "\n".join(lines)


def theory_section(cfg: Dict[str, Any], analysis: Dict[str, Any]) -> str:
    """Measured accept length beside what theory predicts for each arm's draft rule (specrepro.theory)."""
    rows = analysis.get("theory") or []
    if not rows:
        return ""
    source = (f"from the weights of `{cfg['model']['name']}`, which the pipeline builds" if cfg["model"].get("toy")
              else "from the acceptance the experiment declares")
    lines = ["### Accept length against theory", "",
             f"What theory predicts for each arm's draft rule (experiment.theory; P(accept) {source}; greedy "
             "verification), beside the measured accept length (tokens committed per verify step).", "",
             *table_head("arm", "benchmark", "the draft", "measured", "expected", "band", "agrees")]
    for r in rows:
        band = "-" if r.get("low") is None else f"{r['low']:.3f} .. {r['high']:.3f}"
        agrees = {True: "yes", False: "**no**", None: "-"}[r.get("agrees")]
        lines.append(f"| {r['arm']} | {r['benchmark']} | {r['rule']} | {r['measured']:.3f} | "
                     f"{_fmt(r.get('expected'))} | {band} | {agrees} |")
    return "\n".join(lines)


def shown_metrics(cfg: Dict[str, Any], analysis: Dict[str, Any]) -> set:
    """The metrics the report's detail tables show: every benchmark's headline metrics and every claim's."""
    return ({m for b in cfg["benchmarks"] for m in headline_metrics(cfg, b, analysis.get("claims") or [])}
            | {c["metric"] for c in analysis.get("claims") or [] if c.get("metric")})


def noise_table(analysis: Dict[str, Any], metrics: Optional[set] = None) -> str:
    """Each benchmark and metric's noise floors (`metrics`: those shown; None: all)."""
    lines = table_head("benchmark", "metric", "within a launch (CV)", "from", "between launches (prior CV)")
    for n in analysis["noise_floors"]:
        if metrics is not None and n["metric"] not in metrics:
            continue
        floor, prior = n["noise_floor"], n.get("launch_prior")
        lines.append(f"| {n['benchmark']} | {n['metric']} | {'-' if floor is None else f'{floor:.2%}'} | "
                     f"{n['source']} | {'-' if prior is None else f'{prior:.1%}'} |")
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
    return "\n".join([*table_head("job", "wall time (s)", "peak RSS (MB)"), *rows])


def where_this_ran(cfg: Dict[str, Any], arm_records: List[Dict[str, Any]]) -> str:
    """Measured facts per arm (from inside its image), and fingerprint differences against the baseline."""
    from specrepro.gpu_facts import FINGERPRINT_KEYS, fingerprint_differences

    if not arm_records:
        return ""
    lines = ["### Where this ran (measured inside each arm's image)", "",
             *table_head("arm", "host", "GPUs granted", "facts from", *FINGERPRINT_KEYS)]
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


def changes_under_test(cfg: Dict[str, Any]) -> List[str]:
    """Each patch series the arms run, in its own words (patches/<series>/series.yaml), and which arms run it."""
    from specrepro.series import load_series, series_folder

    lines = []
    for name in cfg["experiment"].get("patch_series") or {}:
        arms = [a for a, v in cfg["experiment"]["arms"].items() if v.get("patch_series") == name]
        if not arms:
            continue
        spec = load_series(series_folder(cfg, name))
        source = f" ({spec['source']})" if spec.get("source") else ""
        lines.append(f"- Change `{name}`: {spec['title']}{source}; arms {', '.join(arms)}.")
    return [*lines, ""] if lines else []


def unjudged_metrics(cfg: Dict[str, Any]) -> Dict[str, str]:
    """Metrics the platform or the model cannot speak to: shown in the tables, never judged."""
    return {**(cfg["model"].get("unjudged_metrics") or {}), **(cfg["platform"].get("unjudged_metrics") or {})}


def executed_statement(cfg: Dict[str, Any], arm_records: List[Dict[str, Any]] = ()) -> str:
    """The first line of the report: where the numbers come from, as measured."""
    plat = cfg["platform"]
    models = sorted({(r.get("fingerprint") or {}).get("gpu_model") or "none" for r in arm_records})
    if plat["accelerator"] == "none":
        what = f": {plat['what_runs']}" if plat.get("what_runs") else ""
        purpose = ("with the toy model `{}` they show the change's mechanism (accept length, acceptance, greedy "
                   "outputs) against what the model predicts, not {} performance".format(
                       cfg["model"]["name"], cfg["experiment"].get("reference_platform") or "GPU")
                   if cfg["model"].get("toy") else "they prove the pipeline")
        shown = sorted(unjudged_metrics(cfg))
        return ("**Where this ran:** platform `{}` without an accelerator (measured: no GPU){}. The servers here were "
                "not sglang on a GPU, so the numbers below say nothing about the change's performance; {}.{}".format(
                    plat["name"], what, purpose,
                    f" Shown, not judged: {', '.join(shown)}." if shown else ""))
    measured = ", ".join(models) if arm_records else "not measured"
    return (f"**Where this ran:** platform `{plat['name']}`; GPUs measured inside the arms' images: {measured} "
            f"(configured: {plat.get('gpu_model') or plat['accelerator']}).")


def placement_statement(cfg: Dict[str, Any]) -> str:
    if cfg["serve"]["placement"] == "packed":
        return ("**Noise risk:** placement `packed`: arms may have shared a node (GPUs, host CPU, memory "
                "bandwidth), so deltas include interference between arms.")
    return "Placement `exclusive`: one measuring arm per node at a time."


def arm_checks_section(arm_records: List[Dict[str, Any]], run_records: Dict[str, Dict[str, Dict[str, Any]]]) -> str:
    """Per arm: did /server_info and the decode log confirm what it asked for; accept-length consistency per run."""
    if not arm_records:
        return ""
    lines = ["### Did each arm run what it says", "",
             "From each launch's `/server_info` (resolved server arguments, version) and the decode log's "
             "`cuda graph:` field (`cpu graph:` on sglang's CPU engine); an invalid arm's numbers stay in the tables "
             "but no claim is judged on them.", "",
             *table_head("arm", "valid", "decode lines `graph: True` / `False`", "problems")]
    for rec in arm_records:
        validity = rec.get("validity") or {"valid": None, "problems": ["not checked (recorded before this check)"]}
        on = off = 0
        for run in (run_records.get(rec["arm"]) or {}).values():
            lines_by = ((run.get("accept_length_sources") or {}).get("decode_log") or {}).get("cuda_graph_lines") or {}
            on, off = on + lines_by.get("True", 0), off + lines_by.get("False", 0)
        problems = "; ".join(validity.get("problems") or []) or "-"
        mark = {True: "yes", False: "**no**", None: "unknown"}[validity.get("valid")]
        lines.append(f"| {rec['arm']} | {mark} | {on} / {off} | {escape(problems)[:600]} |")
    flagged = []
    for arm, runs in run_records.items():
        for stem, run in runs.items():
            c = run.get("accept_length_consistency") or {}
            if c and not c.get("consistent", True):
                parts = [f"{k}: relative gap {v.get('relative_gap', 0):.1%}"
                         + (f", {v.get('histogram_mismatches')} histogram and {v.get('token_count_mismatches')} "
                            f"token-count mismatches" if k == "meta_info" else
                            f", {v.get('inconsistent_lines')} of {v.get('lines')} lines off")
                         for k, v in c.items() if isinstance(v, dict) and v.get("checked") and not v.get("consistent")]
                flagged.append(f"- **{arm} {stem}: accept length and accept rate disagree** ({'; '.join(parts)})")
    lines += ["", "Accept length against accept rate (sglang 0.5.20: decode log accept len = 1 + rate x "
              "(num_draft_tokens - 1); meta_info Σ histogram = verify steps, Σ i x histogram[i] = correct drafts, "
              "completion = 1 + correct + verify steps less the last step's overrun): "
              + ("every run consistent." if not flagged else "")] + flagged
    return "\n".join(lines)


def output_agreement_section(analysis: Dict[str, Any]) -> str:
    rows = analysis.get("output_agreement") or []
    if not rows:
        return ""
    lines = ["### Greedy outputs against the baseline", "",
             "Per GSM8K question at temperature 0, each arm's text against the baseline arm's (same repeat), beside "
             "the baseline against itself (its later repeats and launches against its first: the A/A floor). An arm "
             "is flagged when it differs significantly more often than the floor (one-sided 2.5%).", "",
             *table_head("benchmark", "arm", "against", "identical", "match rate", "A/A floor", "beyond the floor",
                         "questions that differ")]
    for a in rows:
        qs = sorted({d["request"] for d in a["differing"]})
        floor = f"{a['aa_differing']} of {a['aa_pairs']} differ" if a.get("aa_pairs") else "not measured (one repeat)"
        flagged = (f"**yes** (p {a['p_beyond_floor']:.2g})" if a.get("flagged") else
                   "cannot tell" if a.get("flagged") is None else "no")
        lines.append(f"| {a['benchmark']} | {a['arm']} | {a['against']} | {a['identical']} of {a['pairs']} | "
                     f"{a['match_rate']:.1%} | {floor} | {flagged} | {', '.join(map(str, qs[:30])) or '-'}"
                     f"{' ...' if len(qs) > 30 else ''} |")
    for a in rows:
        for d in a["differing"][:10]:
            lines += ["", f"- {a['arm']} question {d['request']} r{d['repeat']}, first difference at character "
                          f"{d['first_difference_at']}:", f"  - {a['against']}: `{d['baseline']}`",
                      f"  - {a['arm']}: `{d['arm']}`"]
    return "\n".join(lines)


def acceptance_section(analysis: Dict[str, Any]) -> str:
    hists = analysis.get("acceptance_histograms") or []
    if not hists:
        return ""
    width = max(len(h["verify_steps"]) for h in hists)
    lines = ["### Acceptance per verify step", "",
             "Share of verify steps that accepted i drafts (meta_info `spec_correct_drafts_histogram`, pooled).", "",
             *table_head("arm", "benchmark", "verify steps", *map(str, range(width)), "tokens / verify")]
    for h in hists:
        shares = [f"{n / h['total']:.1%}" for n in h["verify_steps"]] + ["-"] * (width - len(h["verify_steps"]))
        lines.append(f"| {h['arm']} | {h['benchmark']} | {h['total']} | " + " | ".join(shares)
                     + f" | {h['mean_tokens_per_verify']:.3f} |")
    return "\n".join(lines)


def attribution_section(analysis: Dict[str, Any]) -> str:
    rows = analysis.get("speedup_attribution") or []
    if not rows:
        return ""
    lines = ["### Where the speed comes from", "",
             "Output tok/s = accept length x verify steps per second: each arm's change against the baseline, "
             "split (log scale) into its accept-length part and its step-rate part (a slower kernel shows in the "
             "latter).", "",
             *table_head("arm", "against", "output tok/s", "from accept length", "from step rate",
                         "verify steps/s (arm, baseline)")]
    for r in rows:
        lines.append(f"| {r['arm']} | {r['baseline']} | {r['throughput_change']:+.2%} | {r['accept_length_part']:+.2%} | "
                     f"{r['step_rate_part']:+.2%} | {r['verify_steps_per_s']:.1f}, {r['baseline_verify_steps_per_s']:.1f} |")
    return "\n".join(lines)


def launches_section(cfg: Dict[str, Any], analysis: Dict[str, Any], metrics: set) -> str:
    """With 2+ launches per arm: the order they ran in, and the noise split into its two parts."""
    records = []
    for path in sorted(Path(cfg["results_dir"], "arms").glob("*/launches/*.json")):
        records.append(json.loads(path.read_text()))
    if not records and not analysis.get("launch_variance"):
        return ""
    order = sorted(records, key=lambda r: r.get("started") or 0)
    lines = ["### Launches", "",
             f"Each arm was launched {cfg['experiment'].get('launches', 1)} times, interleaved; verdicts count "
             f"launch means as replicates ({analysis.get('replicates')}), so launch-to-launch noise is in every interval.",
             "", "Order as run: " + " ".join(f"{r['arm']}#{r['launch']}" for r in order), "",
             *table_head("arm", "benchmark", "metric", "launches", "repeats per launch", "within-launch CV",
                         "between-launch CV")]
    for v in analysis.get("launch_variance") or []:
        if v["metric"] not in metrics:
            continue
        cells = [f"{x:.2%}" if x is not None else "-" for x in (v["within_launch_cv"], v["between_launch_cv"])]
        lines.append(f"| {v['arm']} | {v['benchmark']} | {v['metric']} | {v['launches']} | "
                     f"{v['repeats_per_launch']:g} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def run_records_of(cfg: Dict[str, Any], arm_records: List[Dict[str, Any]]) -> Dict[str, Dict[str, Dict[str, Any]]]:
    """arm -> run stem -> run.json, for the runs each arm record holds."""
    out: Dict[str, Dict[str, Dict[str, Any]]] = {}
    for rec in arm_records:
        arm_dir = Path(cfg["results_dir"]) / "arms" / rec["arm"]
        out[rec["arm"]] = {stem: json.loads((arm_dir / stem / "run.json").read_text())
                           for stem in rec.get("runs") or {} if (arm_dir / stem / "run.json").is_file()}
    return out


def campaign_report(cfg, runs_csv: Path, requests_parquet: Path, verdicts: List[Path], claims_path,
                    markdown: Path, html: Path, analysis_json: Path, log=None,
                    arm_records: List[Path] = (), acceptance_csv: Path = None) -> Dict[str, Any]:
    import pandas as pd

    from specrepro.analysis.analyze import analyze
    from specrepro.analysis.claims import load_claims
    from specrepro.effective_config import invalid_arms

    records = [json.loads(Path(p).read_text()) for p in arm_records]
    runs = pd.read_csv(runs_csv)
    requests = pd.read_parquet(requests_parquet) if Path(requests_parquet).is_file() else None
    acceptance = pd.read_csv(acceptance_csv) if acceptance_csv and Path(acceptance_csv).is_file() else None
    from specrepro.campaign import Campaign
    from specrepro.config import theory_entries
    from specrepro.sweep import claims_per_level
    from specrepro.theory import predictions
    from specrepro.toy_model import acceptance as toy_acceptance

    skipped = set(cfg["experiment"].get("skip_claims") or [])
    claims = claims_per_level([c for c in load_claims(claims_path) if c["id"] not in skipped], cfg)
    toy = cfg["model"].get("toy")
    questions = {b: v["gsm8k"]["num_questions"] for b, v in cfg["benchmarks"].items() if v["kind"] == "gsm8k"}
    greedy = [b for b, v in cfg["benchmarks"].items() if v["kind"] == "gsm8k" and v["gsm8k"]["temperature"] == 0]
    analysis = analyze(runs, requests, Campaign(cfg).baseline_of(), claims,
                       cfg["experiment"].get("reference_repeats"), questions,
                       invalid_arms=invalid_arms({r["arm"]: r.get("validity") or {} for r in records}),
                       acceptance=acceptance, greedy_benchmarks=greedy, unjudged_metrics=unjudged_metrics(cfg),
                       theory=predictions(theory_entries(cfg), cfg["model"],
                                          lambda t: toy_acceptance(Path(toy["dir"]), t)) if cfg["experiment"].get("theory")
                       else None, settings=cfg.get("analysis"))
    run_records = run_records_of(cfg, records)
    analysis_json.parent.mkdir(parents=True, exist_ok=True)
    analysis_json.write_text(json.dumps(analysis, indent=1, default=str))
    warnings = [b["per_token"]["warning"] for b in analysis["tpot_bimodality"] if b["per_token"]["warning"]]
    parts = [
        f"# {cfg['experiment']['name']}: results",
        "",
        *([f"> {cfg['experiment']['description']}", ""] if cfg["experiment"].get("description") else []),
        *changes_under_test(cfg),
        executed_statement(cfg, records),
        "",
        placement_statement(cfg),
        "",
        f"sglang {cfg['sglang']['version']}, model {cfg['model']['name']}, baseline arm `{analysis['baseline']}`, "
        "repeats: " + ", ".join(f"{b} {(v.get('repeats') or cfg['experiment']['repeats'])}"
                                for b, v in cfg["benchmarks"].items()) + "; one server per arm.",
        "",
        *([tables, ""] if (tables := headline_tables(cfg, analysis)) else []),
        *([theory_section(cfg, analysis), ""] if analysis.get("theory") else []),
        *([sweep_section(cfg, runs, analysis), ""] if "base_arm" in runs.columns else []),
        "### Claims",
        "",
        claims_table(analysis),
        *([f"\nNot judged in this campaign (experiment.skip_claims): {', '.join(sorted(skipped))}."] if skipped else []),
        "",
        "### Noise floors",
        "",
        noise_table(analysis, shown_metrics(cfg, analysis)),
    ]
    for section in (launches_section(cfg, analysis, shown_metrics(cfg, analysis)), arm_checks_section(records, run_records),
                    output_agreement_section(analysis), accuracy_section(cfg, analysis),
                    acceptance_section(analysis), attribution_section(analysis)):
        if section:
            parts += ["", section]
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
    figures = sweep_figures(runs)
    # the sweep's plots as files too: MLflow logs them (report/plots) beside the report
    for name, png in figures:
        (markdown.parent / "plots").mkdir(parents=True, exist_ok=True)
        (markdown.parent / "plots" / f"{name}.png").write_bytes(base64.b64decode(png))
    html.write_text(render_html(text, runs, requests, analysis, figures))
    return analysis


def sweep_figures(runs) -> List[tuple]:
    from specrepro.analysis.plots import factor_plots, pareto_plots

    return factor_plots(runs) + pareto_plots(runs) if "base_arm" in runs.columns else []


def sweep_section(cfg: Dict[str, Any], runs, analysis: Dict[str, Any]) -> str:
    """Per claim asked across factors: a one-line summary and its verdict at each level; then the headline
    metrics per level and arm (the plots show the same with intervals)."""
    from specrepro.analysis.sweep import factor_columns, level_label, level_table, per_level
    from specrepro.sweep import factors_of

    factors = factors_of(cfg)
    lines = ["### Across factors", "",
             "Swept: " + "; ".join(f"{f} {list(v['levels'])} ({'server flag ' + v['server'] + ', a launch per level' if v.get('server') else 'client, on the warm server'})"
                                   for f, v in factors.items())
             + ". Each claim is judged at every level, every instance in the one family of claims "
               "(its multiplicity correction counts them all).", ""]
    for entry in per_level(analysis["claims"]):
        lines += [f"**{entry['id']}**: {entry['summary']}", "", *table_head("level", "verdict", "detail")]
        lines += [f"| {level_label(r['levels'])} | {r['verdict']} | {r['detail']} |" for r in entry["rows"]]
        lines.append("")
    for col in factor_columns(runs):
        for metric in ("accept_length", "mean_tpot_ms", "output_throughput"):
            table = level_table(runs, metric, col.split(":", 1)[1])
            if table:
                lines += [table, ""]
    unjudged = unjudged_metrics(cfg)
    if unjudged:
        lines.append("Shown, not judged here: " + "; ".join(f"{m} ({why})" for m, why in unjudged.items()) + ".")
    return "\n".join(lines).rstrip()


def render_html(markdown_text: str, runs, requests, analysis, figures=()) -> str:
    from specrepro.analysis.plots import acceptance_histograms, bars_with_ci, tpot_distributions

    body = [f"<pre style='white-space: pre-wrap'>{escape(markdown_text)}</pre>"]
    for name, fig in figures:
        body.append(f"<img alt='{escape(name)}' src='data:image/png;base64,{fig}'/>")
    for fig in bars_with_ci(analysis):
        body.append(f"<img alt='per-arm bars' src='data:image/png;base64,{fig}'/>")
    for fig in tpot_distributions(requests):
        body.append(f"<img alt='TPOT distribution' src='data:image/png;base64,{fig}'/>")
    for fig in acceptance_histograms(analysis):
        body.append(f"<img alt='acceptance histogram' src='data:image/png;base64,{fig}'/>")
    return "<!doctype html><html><head><meta charset='utf-8'><title>specrepro report</title></head><body>" + \
        "\n".join(body) + "</body></html>\n"
