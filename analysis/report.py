"""Markdown and HTML reports: what ran, on what, and what it shows.

Every section is built once, as data (specrepro.util.document: sections of text, tables with coloured verdict
cells, figures), and rendered twice: report.md (GitHub-flavoured markdown) and report.html (one self-contained page,
verdicts first, plots beside the tables they illustrate, the long parts folded).  report/pr_comment.md is the short
form a reviewer pastes into the PR under test.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Dict, List, Optional

from specrepro.analysis.claims import benchmark_categories, load_claims, unjudged_metrics
from specrepro.util.metric_names import has, split_category_metric
from specrepro.benchmarks import greedy as greedy_benchmark, kind_of, kinds, questions as questions_of
from specrepro.analysis.provenance import code_lines, git_commit, provenance_record, table
from specrepro.util.document import (
    Bullets, Cell, Code, Details, Figure, Section, Table, Text, md_section, to_html, to_markdown, verdict_cell,
    verdict_class, yes_no)
from specrepro.analysis.analyze import analyze
from specrepro.analysis.categories import categorized_benchmarks, category_table, interval_text
from specrepro.analysis.claim_view import identical_commands, launches_of, views
from specrepro.analysis.plots import (
    acceptance_histograms, bars_with_ci, factor_plots, pareto_plots, theory_plot, tpot_distributions)
from specrepro.analysis.sequential import apply_to_analysis, decided_row
from specrepro.analysis.sequential_round import final_decision
from specrepro.analysis.sweep import factor_columns, level_label, level_tables, per_level
from specrepro.core.campaign import Campaign
from specrepro.core.config import PROJECT_ROOT, check_resolved, config_hash, theory_entries
from specrepro.core.series import load_series, series_folder
from specrepro.core.sweep import claims_per_level, factors_of
from specrepro.core.theory import predictions
from specrepro.measure.effective_config import invalid_arms
from specrepro.serving.gpu_facts import FINGERPRINT_KEYS, fingerprint_differences
from specrepro.stages.gpu_check import verdict_section as gpu_section
from specrepro.stages.patch_check import verdict_section as cpu_section
from specrepro.stages.toy_model import acceptance as toy_acceptance

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


def verdict_sections(verdicts: List[Path]) -> List[Section]:
    """The patch_check and gpu_check verdicts, each from its JSON record (a gpu_check verdict names its arm)."""

    out = []
    for path in verdicts:
        verdict = json.loads(Path(path).read_text())
        out.append(gpu_section(verdict["arm"], verdict) if "arm" in verdict else cpu_section(verdict))
    return out


def cpu_stages_report(cfg: Dict[str, Any], verdict_paths: List[Path]) -> str:
    head = Section(f"{cfg['experiment']['name']}: CPU stages", level=1, blocks=[Text([
        f"sglang {cfg['sglang']['version']} ({cfg['sglang']['git_ref']}), model {cfg['model']['name']}, "
        f"platform {cfg['platform']['name']}."])])
    return to_markdown([head, *verdict_sections(verdict_paths),
                        Section("What was not run here", [Text([GPU_STATEMENT])], level=2)])


def _fmt(value, digits=3):
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}"


# A spread between repeats this large is flagged beside the number: the mean hides it.
HIGH_CV = 0.20


def _cell(summary: Dict, arm: str, bench: str, metric: str, digits: int = 3) -> Any:
    s = summary.get((arm, bench, metric))
    if not s:
        return "not run"
    half = (s["ci_high"] - s["ci_low"]) / 2 if math.isfinite(s["ci_high"]) else math.inf
    pm = f" ± {half:.{digits}f}" if math.isfinite(half) else " (n=1)"
    cv = s.get("cv")
    if cv is not None and math.isfinite(cv) and cv > HIGH_CV:
        return Cell(f"{s['mean']:.{digits}f}{pm}", note=f" (CV {cv:.0%} > {HIGH_CV:.0%})", cls="bad")
    return f"{s['mean']:.{digits}f}{pm}"


# How a metric reads in a headline table: header and digits.
METRIC_FORMAT = {
    "accept_length": ("accept len (tokens/verify step)", 3), "accuracy": ("accuracy (share)", 3),
    "invalid_rate": ("invalid (share)", 3), "mean_tpot_ms": ("mean TPOT (ms)", 2),
    "median_tpot_ms": ("p50 TPOT (ms)", 2), "p99_tpot_ms": ("p99 TPOT (ms)", 2),
    "output_throughput": ("output tok/s", 1), "total_throughput": ("total tok/s", 1),
    "request_throughput": ("req/s", 2), "mean_ttft_ms": ("mean TTFT (ms)", 1), "median_ttft_ms": ("p50 TTFT (ms)", 1),
    "p99_ttft_ms": ("p99 TTFT (ms)", 1), "mean_itl_ms": ("mean ITL (ms)", 2), "median_itl_ms": ("p50 ITL (ms)", 2),
    "p99_itl_ms": ("p99 ITL (ms)", 2),
}


def metric_format(metric: str) -> tuple:
    """(header, digits) of a metric in a table; a metric per category reads as its base metric's, the category
    beside it: accept_length[mixed] -> "accept len (tokens/verify step) [mixed]"."""
    base, category = split_category_metric(metric)
    head, digits = METRIC_FORMAT.get(base, (base, 3))
    return (f"{head} [{category}]" if category else head), digits


HEADLINE_CAPTION = ("Each cell: the mean over repeats ± the 95% confidence interval's half-width (Student t over the "
                    "repeats); a coefficient of variation between repeats above {:.0%} is flagged beside its number. "
                    "Latencies in ms: p50 is the median, p99 the 99th percentile of the requests of a run.")


def reference_applies(cfg: Dict[str, Any]) -> bool:
    """The published figures sit beside results of the platform and model they were measured on only."""
    exp = cfg["experiment"]
    return ((exp.get("reference_platform") in (None, cfg["platform"]["name"]))
            and (exp.get("reference_model") in (None, cfg["model"]["name"])))


def headline_metrics(cfg: Dict[str, Any], bench: str, claims: List[Dict[str, Any]]) -> List[str]:
    """The benchmark's headline metrics (benchmarks.<b>.headline.metrics), else those its claims name."""
    own = ((cfg["benchmarks"][bench].get("headline") or {}).get("metrics") or [])
    return list(own) or list(dict.fromkeys(c["metric"] for c in claims if c.get("benchmark") == bench and c.get("metric")))


def benches_by_kind(cfg: Dict[str, Any], ran: set) -> Dict[str, List[str]]:
    """The benchmarks the campaign ran (not a sweep's cells), under their kind's title, kinds in registry order."""
    out: Dict[str, List[str]] = {kind.title: [] for kind in kinds().values()}
    for b, v in cfg["benchmarks"].items():
        if not v.get("cell") and b in ran:
            out[kind_of(v, b).title].append(b)
    return out


def headline_sections(cfg: Dict[str, Any], analysis: Dict[str, Any], plots: bool = False) -> List[Section]:
    """One table per benchmark the campaign ran (a sweep's cells are in "Across factors"), grouped by kind: every
    cell mean ± 95% CI, the published figure beside it where the experiment gives one; with `plots`, each table's
    bars beside it."""

    summary = {(s["arm"], s["benchmark"], s["metric"]): s for s in analysis["summary"]}
    ref = cfg["experiment"].get("reference") or {} if reference_applies(cfg) else {}
    ran = {s["benchmark"] for s in analysis["summary"]}
    sections: List[Section] = []
    for title, benches in benches_by_kind(cfg, ran).items():
        tables, shown = [], set()
        for bench in benches:
            metrics = headline_metrics(cfg, bench, analysis.get("claims") or [])
            if not metrics:
                continue
            shown |= set(metrics)
            published = {m for arm in ref.values() for m in (arm.get(bench) or {})}
            note = (cfg["benchmarks"][bench].get("headline") or {}).get("note")
            header = ["arm"]
            unjudged = unjudged_metrics(cfg)
            for m in metrics:
                head = metric_format(m)[0] + (", not judged" if has(unjudged, m) else "")
                header += [head] + (["published"] if m in published else [])
            rows = []
            for arm in cfg["experiment"]["arms"]:
                if not any((arm, bench, m) in summary for m in metrics):
                    continue
                cells = [arm]
                for m in metrics:
                    digits = metric_format(m)[1]
                    cells.append(_cell(summary, arm, bench, m, digits))
                    if m in published:
                        cells.append(_fmt((ref.get(arm, {}).get(bench) or {}).get(m), digits))
                rows.append(cells)
            figures = bars_with_ci(analysis, bench, metrics, {m: metric_format(m)[0] for m in metrics}) \
                if plots else []
            tables.append(Table(header, rows, title=f"**{bench}**" + (f" ({note})" if note else ""), figures=figures))
        if tables:
            unjudged = sorted(m for m in shown if has(unjudged_metrics(cfg), m))
            said = HEADLINE_CAPTION.format(HIGH_CV) + (
                f" Not judged here (shown only): {', '.join(unjudged)}." if unjudged else "")
            sections.append(Section(title, [Text([said]), *tables]))
    if not reference_applies(cfg) and cfg["experiment"].get("reference"):
        exp = cfg["experiment"]
        said = Text([f"The published figures were measured with {exp.get('reference_model')} on "
                     f"{exp.get('reference_platform')}; they are not shown beside {cfg['model']['name']} on "
                     f"{cfg['platform']['name']}."])
        if sections:
            sections[-1].blocks.append(said)
        else:
            sections.append(Section("", [said]))
    return sections


def headline_tables(cfg: Dict[str, Any], analysis: Dict[str, Any]) -> str:
    """The headline sections as markdown."""
    return "\n\n".join(md_section(s) for s in headline_sections(cfg, analysis))


def multiplicity_lines(analysis: Dict[str, Any]) -> List[str]:
    """How the family of claims is judged, and where the between-launch noise comes from."""
    lines = []
    m = analysis.get("multiplicity") or {}
    if m:
        policy = (f"Holm's step-down over the {m['family']} claims with an interval, familywise "
                  f"{m['alpha']:.0%} (each claim one-sided at {m['alpha'] / 2:.1%}, as its 95% interval)"
                  if m["policy"] == "holm" else
                  f"no multiplicity correction (each claim one-sided at {m['alpha'] / 2:.1%})")
        lines.append(f"Many claims: {policy}.")
    launch = analysis.get("launch_noise") or {}
    if launch:
        lines.append("Between-launch noise: " + (
            "measured: each arm ran 2+ launches, and their means are its replicates." if launch.get("measured") else
            f"one launch per arm, so every arm-vs-arm interval includes a prior per metric "
            f"({', '.join(f'{k} {v:.1%}' for k, v in sorted((launch.get('prior') or {}).items()))}); source: "
            f"{launch.get('source') or 'not stated'}"))
    return lines


def claim_verdict_cell(c: Dict[str, Any]) -> Cell:
    return verdict_cell(c["verdict"], " (as predicted for the pin)" if c.get("as_predicted") else "")


def claims_blocks(analysis: Dict[str, Any], shown: Optional[Dict[str, Dict[str, Any]]] = None) -> List[Any]:
    """Per claim: its verdict, its numbers, and where the noise in its interval came from.  `shown`: claim id -> its
    view (analysis/claim_view.py), whose verdict replaces the statistic's where this platform cannot test the claim
    (the statistic's then stands beside it, as analysis.json records it)."""
    rows = []
    for c in analysis["claims"]:
        at = f" (at {', '.join(f'{f} {v}' for f, v in c['levels'].items())})" if c.get("levels") else ""
        v = (shown or {}).get(c["id"])
        cell = verdict_view_cell(v) if v else claim_verdict_cell(c)
        detail = c.get("detail", "") + (f" (recorded verdict: {c['verdict']})" if v and v["verdict"] != c["verdict"]
                                         else "")
        rows.append([f"{c['text'] or c['id']}{at}", cell, detail, c.get("noise") or "-"])
    blocks: List[Any] = [Table(["claim", "verdict", "numbers", "noise from"], rows)]
    if multiplicity_lines(analysis):
        blocks.append(Text(multiplicity_lines(analysis)))
    return blocks


def claims_table(analysis: Dict[str, Any]) -> str:
    return md_section(Section("", claims_blocks(analysis)))


def claim_effect(c: Dict[str, Any]) -> str:
    """A claim's effect and its 95% interval in a few words (the numbers column says the rest)."""
    d, r, a = c.get("delta"), c.get("restored"), c.get("agreement")
    if c["verdict"] == "NOT JUDGED" or not (d or r or a):
        text = c.get("detail", "")
    elif r and "fraction" in r and not math.isnan(r.get("half_width", math.nan)):
        text = (f"{c['arm']} closes {r['fraction']:.0%} of the gap to {c['against']} (95% CI {r['ci_low']:.0%} .. "
                f"{r['ci_high']:.0%}; the claim needs more than {c.get('fraction', 0.9):.0%})")
    elif a:
        text = f"{a['identical']} of {a['pairs']} greedy outputs identical to {a['against']}'s"
    elif d and not math.isnan(d.get("half_width", math.nan)) and d.get("se"):
        text = (f"{c['arm']} vs {c['against']}: {d['relative']:+.1%} (95% CI {d['ci_low']:+.1%} .. "
                f"{d['ci_high']:+.1%})")
    else:
        text = c.get("detail", "")
    if c.get("prior_sensitive"):
        text += f"; with twice the between-launch prior: {c['prior_sensitive']}"
    return text


def effect_range(instances: List[Dict[str, Any]]) -> str:
    """The range of a swept claim's effect over its levels (relative change, or share of the gap closed)."""
    rel = [c["delta"]["relative"] for c in instances if (c.get("delta") or {}).get("relative") is not None
           and not math.isnan(c["delta"]["relative"])]
    closed = [c["restored"]["fraction"] for c in instances if (c.get("restored") or {}).get("fraction") is not None]
    if rel and len(rel) == len(instances):
        return f" ({min(rel):+.1%} .. {max(rel):+.1%} over the levels)"
    if closed and len(closed) == len(instances):
        return f" ({min(closed):.0%} .. {max(closed):.0%} of the gap closed over the levels)"
    return ""


def claim_noise(c: Dict[str, Any]) -> str:
    """Where a claim's noise came from, said once when every arm's came from the same."""
    a = c.get("agreement")
    if a and a.get("aa_pairs"):
        return f"the baseline against itself (A/A): {a['aa_differing']} of {a['aa_pairs']} differ"
    parts = [p.split(": ", 1) for p in (c.get("noise") or "").split("; ") if ": " in p]
    if len(parts) > 1 and len({src for _, src in parts}) == 1:
        return f"each arm ({', '.join(arm for arm, _ in parts)}): {parts[0][1]}"
    return c.get("noise") or "-"


def claim_summary_rows(analysis: Dict[str, Any], noise: bool = True) -> List[List[Any]]:
    """One row per claim: verdict, the claim, effect and interval, where the noise came from.  A claim judged at
    every level of a sweep is one row: its verdict where it is the same at every level, its per-level summary."""

    swept = {e["id"]: e for e in per_level(analysis["claims"])}
    rows, seen = [], set()
    for c in analysis["claims"]:
        base = c.get("base_id")
        if base in swept:
            if base in seen:
                continue
            seen.add(base)
            entry = swept[base]
            verdicts = {r["verdict"] for r in entry["rows"]}
            cell = verdict_cell(verdicts.pop()) if len(verdicts) == 1 else verdict_cell("VARIES BY LEVEL")
            row = [cell, entry["text"] or base, entry["summary"] + effect_range(
                [x for x in analysis["claims"] if x.get("base_id") == base])]
            if noise:
                row.append(f"{len(entry['rows'])} levels, each in the one family of claims")
        else:
            row = [claim_verdict_cell(c), c["text"] or c["id"], claim_effect(c)]
            if noise:
                row.append(claim_noise(c))
        rows.append(row)
    return rows


VERDICT_MEANING = (
    "What a verdict means: REPRODUCED -- the 95% interval meets what the claim asks (the last column: a direction "
    "beyond the margin asks nothing of the size, whose PR figure stands beside ours; a share of a gap asks a size); "
    "NOT REPRODUCED -- the interval contradicts it; INCONCLUSIVE -- neither, and the row says what held it back; "
    "NOT TESTABLE HERE -- this platform cannot produce the condition or the metric the claim is about (the row says "
    "why, decided from what ran), so its numbers are shown, not judged. Beside a verdict: whether the pinned code or "
    "theory predicted it, or it is a SURPRISE.")


def verdict_view_cell(v: Dict[str, Any]) -> Cell:
    """A claim's shown verdict, coloured; its prediction, or what held it back, or why it is not testable, below."""
    notes = [n for n in (v["reason"], v["expectation"]) if n]
    cls = verdict_class(v["verdict"]) + (" surprise" if v["surprise"] else " predicted" if v["surprise"] is False
                                         else "")
    return Cell(v["verdict"], strong=True, note=(" — " + "; ".join(notes)) if notes else "", cls=cls)


def verdict_rows(cfg: Dict[str, Any], analysis: Dict[str, Any], records: List[Dict[str, Any]],
                 run_records: Dict[str, Dict[str, Dict[str, Any]]], requests=None) -> List[List[Any]]:
    """One row per claim: its shown verdict, the claim, the PR's figure and ours in the metric's units, and what the
    verdict asks of the data.  A claim judged at every level of a sweep is one row (claim_summary_rows)."""

    by_id = {v["id"]: v for v in views(cfg, analysis, records, run_records, requests)}
    swept = {r[1]: r for r in claim_summary_rows(analysis, noise=False)}
    rows, seen = [], set()
    for c in analysis["claims"]:
        if c.get("base_id"):
            row = swept.get(c.get("text") or c["base_id"])
            if row is not None and id(row) not in seen:
                seen.add(id(row))
                rows.append([row[0], row[1], "-", row[2], "across the levels, each its own verdict"])
            continue
        v = by_id[c["id"]]
        rows.append([verdict_view_cell(v), c["text"] or c["id"], v["pr"], v["ours"], v["asks"]])
    return rows


def verdict_counts(rows: List[List[Any]]) -> str:
    counts: Dict[str, int] = {}
    for row in rows:
        counts[row[0].text] = counts.get(row[0].text, 0) + 1
    return ", ".join(f"{n} {v}" for v, n in counts.items())


def pr_column(cfg: Dict[str, Any]) -> str:
    exp = cfg["experiment"]
    where = " on ".join(x for x in (exp.get("reference_model"), exp.get("reference_platform")) if x)
    return f"the PR ({where})" if where else "the PR"


def summary_section(cfg: Dict[str, Any], analysis: Dict[str, Any], records: List[Dict[str, Any]],
                    run_records: Dict[str, Dict[str, Dict[str, Any]]], requests=None) -> Section:
    rows = verdict_rows(cfg, analysis, records, run_records, requests)
    said = verdict_counts(rows)
    table = Table(["verdict", "claim", pr_column(cfg), "here (95% CI)", "REPRODUCED needs"], rows)
    said_how = Text([VERDICT_MEANING, *multiplicity_lines(analysis)[:1],
                     "Each claim's full numbers and noise sources are under Claims below."])
    return Section("Verdicts" + (f": {said}" if said else ""), [table, said_how], id="verdicts")


def accuracy_section(cfg: Dict[str, Any], analysis: Dict[str, Any]) -> Optional[Section]:
    """Accuracy shown, never judged: each arm against the baseline on the same questions, paired."""
    rows = (analysis.get("gsm8k") or {}).get("paired") or []
    if not rows:
        return None
    said = cfg["experiment"].get("accuracy_note") or (
        "No claim of this experiment is about accuracy." if not any(c.get("metric") == "accuracy"
                                                                    for c in analysis.get("claims") or []) else "")
    return Section("Accuracy (shown, not judged)", [
        Text(["Per question, each arm's answer against the baseline's (the majority over repeats); n is the number of "
              f"distinct questions.  {said}".rstrip()]),
        Table(["benchmark", "arm", "against", "questions", "arm right only", "baseline right only",
               "difference (95% CI)"],
              [[r["benchmark"], r["arm"], r["baseline"], str(r["pairs"]), str(r["arm_only"]), str(r["base_only"]),
                f"{r['difference']:+.1%} ({r['ci_low']:+.1%} .. {r['ci_high']:+.1%})"] for r in rows])])


def theory_section(cfg: Dict[str, Any], analysis: Dict[str, Any], plots: bool = False) -> Optional[Section]:
    """Measured accept length beside what theory predicts for each arm's draft rule (specrepro.core.theory)."""

    # per category rows are the per-category table's (category_section)
    rows = [r for r in analysis.get("theory") or [] if r.get("category") is None]
    if not rows:
        return None
    source = (f"from the weights of `{cfg['model']['name']}`, which the pipeline builds" if cfg["model"].get("toy")
              else "from the acceptance the experiment declares")
    table = []
    for r in rows:
        band = "-" if r.get("low") is None else f"{r['low']:.3f} .. {r['high']:.3f}"
        table.append([r["arm"], r["benchmark"], r["rule"], f"{r['measured']:.3f}", _fmt(r.get("expected")), band,
                      yes_no(r.get("agrees"))])
    return Section("Accept length against theory", [
        Text([f"What theory predicts for each arm's draft rule (experiment.theory; P(accept) {source}; greedy "
              "verification), beside the measured accept length (tokens committed per verify step)."]),
        Table(["arm", "benchmark", "the draft", "measured", "expected", "band", "agrees"], table,
              figures=theory_plot(rows) if plots else [])])


CATEGORY_CAPTION = ("Accept length (tokens committed per verify step) over each category's requests: per arm the mean "
                    "over repeats, its 95% confidence interval (Student t over the repeats) and n repeats; the last "
                    "row is the whole benchmark's.")
CATEGORY_THEORY_NOTE = ("Beside a mean, theory's prediction for that arm's draft rule (experiment.theory), flagged "
                        "where the category's mean falls outside its band. The toy model's prediction does not depend "
                        "on the category: a draft's acceptance depends on the token chain it follows, not on the "
                        "prompt's category, so each category carries its benchmark's prediction; nothing is shown "
                        "where theory computes none.")


def category_claims_cell(claims: List[Dict[str, Any]]) -> Any:
    """The verdicts of the claims on one category: coloured by the verdict where they share one."""
    if not claims:
        return "-"
    text = "; ".join(f"{c['id']}: {c['verdict']}" for c in claims)
    verdicts = {c["verdict"] for c in claims}
    return Cell(text, cls=verdict_class(verdicts.pop())) if len(verdicts) == 1 else text


def category_arm_cell(summary: Optional[Dict[str, Any]], theory: Optional[Dict[str, Any]], digits: int) -> Any:
    """One arm in one category: mean (95% CI), n; theory's prediction beside it where it computed one (nothing where
    it did not), flagged where the category's measurement falls outside theory's band."""

    text = interval_text(summary, digits)
    if not summary or theory is None:
        return text
    if theory["agrees"] is False:
        return Cell(text, note=f"; theory {theory['expected']:.{digits}f} (outside its band)", cls="bad")
    return Cell(text, note=f"; theory {theory['expected']:.{digits}f}")


def category_table_block(cfg: Dict[str, Any], data: Dict[str, Any]) -> Table:
    """One benchmark's per-category table: rows the categories (then the whole benchmark), columns the arms (with
    theory's prediction where it computes one), the claims on each category with their verdicts."""
    digits = METRIC_FORMAT.get(data["metric"], (data["metric"], 3))[1]
    header = ["category", *data["arms"], "claims"]
    rows = []
    for r in data["rows"]:
        rows.append([r["category"] or "all categories",
                     *(category_arm_cell(r["cells"][a], r["theory"][a], digits) for a in data["arms"]),
                     category_claims_cell(r["claims"])])
    note = (cfg["benchmarks"].get(data["benchmark"], {}).get("headline") or {}).get("note")
    return Table(header, rows, title=f"**{data['benchmark']}**" + (f" ({note})" if note else ""))


def category_claim_rows(tables: List[Dict[str, Any]]) -> List[List[Any]]:
    """Each claim on one category: its benchmark and category, verdict, and effect with its interval."""
    return [[t["benchmark"], r["category"], c["text"] or c["id"], claim_verdict_cell(c), claim_effect(c)]
            for t in tables for r in t["rows"] for c in r["claims"]]


def category_section(cfg: Dict[str, Any], analysis: Dict[str, Any]) -> Optional[Section]:
    """Accept length per category, for each benchmark whose runs carry it per category (SPEED-Bench): one table per
    benchmark (analysis.categories.category_table), then the claims per category with their verdicts."""

    benches = categorized_benchmarks(analysis.get("summary") or [])
    if not benches:
        return None
    arms = list(cfg["experiment"]["arms"])
    tables = [category_table(analysis, b, arms, configured=benchmark_categories(cfg["benchmarks"].get(b) or {}))
              for b in benches]
    blocks: List[Any] = [Text([CATEGORY_CAPTION + (" " + CATEGORY_THEORY_NOTE if any(t["with_theory"] for t in tables)
                                                   else "")])]
    blocks += [category_table_block(cfg, t) for t in tables]
    claims = category_claim_rows(tables)
    if claims:
        blocks.append(Table(["benchmark", "category", "claim", "verdict", "effect (95% CI)"], claims,
                            title="Claims per category:"))
    return Section("Accept length per category", blocks)


def shown_metrics(cfg: Dict[str, Any], analysis: Dict[str, Any]) -> set:
    """The metrics the report's detail tables show: every benchmark's headline metrics and every claim's."""
    return ({m for b in cfg["benchmarks"] for m in headline_metrics(cfg, b, analysis.get("claims") or [])}
            | {c["metric"] for c in analysis.get("claims") or [] if c.get("metric")})


def noise_rows(analysis: Dict[str, Any], metrics: Optional[set] = None) -> Table:
    """Each benchmark and metric's noise floors (`metrics`: those shown; None: all)."""
    rows = []
    for n in analysis["noise_floors"]:
        if metrics is not None and n["metric"] not in metrics:
            continue
        floor, prior = n["noise_floor"], n.get("launch_prior")
        rows.append([n["benchmark"], n["metric"], "-" if floor is None else f"{floor:.2%}", n["source"],
                     "-" if prior is None else f"{prior:.1%}"])
    return Table(["benchmark", "metric", "within a launch (CV)", "from", "between launches (prior CV)"], rows)


def noise_table(analysis: Dict[str, Any], metrics: Optional[set] = None) -> str:
    return md_section(Section("", [noise_rows(analysis, metrics)]))


def stage_costs_section(results_dir: Path) -> Optional[Section]:
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
        rows.append([job, f"{float(last['s']):.1f}", rss if rss in ("", "-", "NA") else f"{float(rss):.0f}"])
    if not rows:
        return None
    total = sum(float(r[1]) for r in rows)
    return Section("Provenance: what each heavy stage cost (Snakemake `benchmark:`)",
                   [Table(["job", "wall time (s)", "peak RSS (MB)"], rows)], collapsed=True,
                   note=f"{len(rows)} jobs, {total:.0f} s in all")


def where_this_ran(cfg: Dict[str, Any], arm_records: List[Dict[str, Any]]) -> Optional[Section]:
    """Measured facts per arm (from inside its image), and fingerprint differences against the baseline."""

    if not arm_records:
        return None
    rows, fps = [], {}
    for rec in arm_records:
        fp = rec.get("fingerprint") or {}
        fps[rec["arm"]] = fp
        facts = (rec.get("gpu_facts") or {}).get("before") or {}
        granted = sorted({g for e in rec.get("launches", []) for g in e.get("gpus") or []})
        rows.append([rec["arm"], rec.get("host", "-"), ",".join(map(str, granted)) or "none",
                     facts.get("source", "none")] + [str(fp.get(k) if fp.get(k) is not None else "-")[:40]
                                                     for k in FINGERPRINT_KEYS])
    notes = sorted({((r.get("gpu_facts") or {}).get("before") or {}).get("note") for r in arm_records} - {None})
    mismatches = []
    for d in fingerprint_differences(fps, cfg["experiment"]["baseline_arm"]):
        what = ", ".join(f"{k}: {a} vs {b}" for k, (a, b) in d["differs"].items())
        mismatches.append(f"**Fingerprint mismatch: {d['arm']} differs from {d['baseline']} in {what}**; its deltas "
                          f"against {d['baseline']} may come from that, not from the change.")
    models = sorted({str(r[4]) for r in rows})
    header = ["arm", "host", "GPUs granted", "facts from", *FINGERPRINT_KEYS]
    # a fact no arm has (a CPU's driver, power cap) is one line below, not a column of "-"
    kept = [i for i, _ in enumerate(header) if i < 2 or any(r[i] not in ("-", "none", "None") for r in rows)]
    dropped = [header[i] for i in range(len(header)) if i not in kept]
    blocks: List[Any] = [Table([header[i] for i in kept], [[r[i] for i in kept] for r in rows])]
    if dropped:
        blocks.append(Text([f"Not measured for any arm (none on this platform): {', '.join(dropped)}."]))
    if notes or mismatches:
        blocks.append(Bullets(notes + mismatches))
    # folded unless the arms' fingerprints differ: then the deltas may come from that, and it must be seen
    return Section("Where this ran (measured inside each arm's image)", blocks, collapsed=not mismatches,
                   note=f"GPU model: {', '.join(models)}; " + (f"{len(mismatches)} fingerprint mismatch(es)"
                                                               if mismatches else "fingerprints agree"))


def changes_under_test(cfg: Dict[str, Any]) -> List[str]:
    """Each patch series the arms run, in its own words (patches/<series>/series.yaml), and which arms run it."""

    lines = []
    for name in cfg["experiment"].get("patch_series") or {}:
        arms = [a for a, v in cfg["experiment"]["arms"].items() if v.get("patch_series") == name]
        if not arms:
            continue
        spec = load_series(series_folder(cfg, name))
        source = f" ({spec['source']})" if spec.get("source") else ""
        lines.append(f"Change `{name}`: {spec['title']}{source}; arms {', '.join(arms)}.")
    return lines


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


def setup_statement(cfg: Dict[str, Any], analysis: Dict[str, Any]) -> str:
    return (f"sglang {cfg['sglang']['version']}, model {cfg['model']['name']}, baseline arm `{analysis['baseline']}`, "
            "repeats: " + ", ".join(f"{b} {(v.get('repeats') or cfg['experiment']['repeats'])}"
                                    for b, v in cfg["benchmarks"].items()) + "; one server per arm.")


def intro_blocks(cfg: Dict[str, Any], analysis: Dict[str, Any], records: List[Dict[str, Any]]) -> List[Any]:
    """What the report is about and where it ran: the experiment's own words, the changes, the platform."""
    blocks: List[Any] = []
    if cfg["experiment"].get("description"):
        blocks.append(Text([cfg["experiment"]["description"]], quote=True))
    if changes_under_test(cfg):
        blocks.append(Bullets(changes_under_test(cfg)))
    blocks += [Text([executed_statement(cfg, records)]), Text([placement_statement(cfg)]),
               Text([setup_statement(cfg, analysis)])]
    return blocks


def arm_checks_section(arm_records: List[Dict[str, Any]],
                       run_records: Dict[str, Dict[str, Dict[str, Any]]]) -> Optional[Section]:
    """Per arm: did /server_info and the decode log confirm what it asked for; accept-length consistency per run."""
    if not arm_records:
        return None
    rows = []
    for rec in arm_records:
        validity = rec.get("validity") or {"valid": None, "problems": ["not checked (recorded before this check)"]}
        on = off = 0
        for run in (run_records.get(rec["arm"]) or {}).values():
            lines_by = ((run.get("accept_length_sources") or {}).get("decode_log") or {}).get("cuda_graph_lines") or {}
            on, off = on + lines_by.get("True", 0), off + lines_by.get("False", 0)
        problems = "; ".join(validity.get("problems") or []) or "-"
        rows.append([rec["arm"], yes_no(validity.get("valid"), unknown="unknown"), f"{on} / {off}", problems[:600]])
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
                flagged.append(f"**{arm} {stem}: accept length and accept rate disagree** ({'; '.join(parts)})")

    twins = identical_commands(arm_records)
    same = [f"{a} ran exactly {b}'s server command (argv, sglang tree, patches and environment alike)"
            for a, b in twins.items()]
    blocks = [Text(["From each launch's `/server_info` (resolved server arguments, version) and the decode log's "
                    "`cuda graph:` field (`cpu graph:` on sglang's CPU engine); an invalid arm's numbers stay in the "
                    "tables but no claim is judged on them."]),
              Table(["arm", "valid", "decode lines `graph: True` / `False`", "problems"], rows),
              Text(["Accept length against accept rate (sglang 0.5.20: decode log accept len = 1 + rate x "
                    "(num_draft_tokens - 1); meta_info Σ histogram = verify steps, Σ i x histogram[i] = correct "
                    "drafts, completion = 1 + correct + verify steps less the last step's overrun): "
                    + ("every run consistent." if not flagged else "")])]
    if flagged:
        blocks.append(Bullets(flagged))
    if same:
        blocks.append(Text(["**Identical arms:** " + "; ".join(same) + ": what their configurations set apart did "
                            "not reach the server here, so a claim contrasting them is not testable on this platform."]))
    return Section("Did each arm run what it says", blocks)


def _code(text: Any) -> Cell:
    return Cell(str(text), code=True)


# How many questions the per-question listing of greedy outputs shows (a campaign of thousands lists the ones that
# differ, then the first of the others).
PER_QUESTION_ROWS = 200


def per_question_outputs(analysis: Dict[str, Any], requests) -> List[Any]:
    """Per greedy benchmark: every question's baseline answer (its first repeat) and, per arm, whether its answers
    were the same in every repeat or where they first differed (folded: a long listing)."""
    rows_by_bench: Dict[str, List[Dict[str, Any]]] = {}
    for a in analysis.get("output_agreement") or []:
        rows_by_bench.setdefault(a["benchmark"], []).append(a)
    if requests is None or requests.empty or "output" not in requests.columns:
        return []
    out = []
    for bench, agreements in rows_by_bench.items():
        baseline = agreements[0]["against"]
        base = requests[(requests["benchmark"] == bench) & (requests["arm"] == baseline) & requests["output"].notna()]
        if base.empty:
            continue
        first = base.sort_values(["request", "repeat"]).groupby("request").head(1)
        differs = {a["arm"]: {} for a in agreements}
        for a in agreements:
            for d in a["differing"]:
                differs[a["arm"]].setdefault(d["request"], []).append(d)
        # every question that differs somewhere first, then the others, up to the listing's length
        differing = {q for by_q in differs.values() for q in by_q}
        shown = first.assign(_differs=first["request"].isin(differing)).sort_values(
            ["_differs", "request"], ascending=[False, True], kind="stable").head(PER_QUESTION_ROWS)
        rows = []
        for r in shown.sort_values("request").itertuples(index=False):
            cells: List[Any] = [str(r.request), _code(str(r.output)[:200] + ("..." if len(str(r.output)) > 200 else ""))]
            for arm, by_q in differs.items():
                ds = by_q.get(int(r.request))
                cells.append(Cell("same", cls="good") if not ds else
                             Cell(f"differs in {len(ds)} repeat(s)", strong=True, cls="bad",
                                  note=f", first at character {min(d['first_difference_at'] for d in ds)}"))
            rows.append(cells)
        said = (f"{len(rows)} questions" if len(rows) == len(first) else
                f"{len(rows)} of {len(first)} questions: every one that differs, then the first of the others")
        out.append(Details(f"{bench}: every question's greedy output, arm by arm ({said})",
                           [Table(["question", f"{baseline}'s output (first repeat)", *differs], rows)], only="html"))
    return out


def output_agreement_section(analysis: Dict[str, Any], requests=None) -> Optional[Section]:
    rows = analysis.get("output_agreement") or []
    if not rows:
        return None
    table = []
    for a in rows:
        qs = sorted({d["request"] for d in a["differing"]})
        floor = f"{a['aa_differing']} of {a['aa_pairs']} differ" if a.get("aa_pairs") else "not measured (one repeat)"
        flagged = (Cell("yes", strong=True, cls="bad", note=f" (p {a['p_beyond_floor']:.2g})") if a.get("flagged") else
                   Cell("cannot tell") if a.get("flagged") is None else Cell("no", cls="good"))
        table.append([a["benchmark"], a["arm"], a["against"], f"{a['identical']} of {a['pairs']}",
                      f"{a['match_rate']:.1%}", floor, flagged,
                      f"{', '.join(map(str, qs[:30])) or '-'}{' ...' if len(qs) > 30 else ''}"])
    blocks: List[Any] = [
        Text(["Per GSM8K question at temperature 0, each arm's text against the baseline arm's (same repeat), beside "
              "the baseline against itself (its later repeats and launches against its first: the A/A floor). An arm "
              "is flagged when it differs significantly more often than the floor (one-sided 2.5%)."]),
        Table(["benchmark", "arm", "against", "identical", "match rate", "A/A floor", "beyond the floor",
               "questions that differ"], table)]
    differing = [[a["arm"], str(d["request"]), f"r{d['repeat']}", str(d["first_difference_at"]), _code(d["baseline"]),
                  _code(d["arm"])] for a in rows for d in a["differing"][:10]]
    if differing:
        blocks.append(Table(["arm", "question", "repeat", "first difference at character", "baseline's text there",
                             "the arm's text there"], differing, title="Where the first outputs that differ part:"))
    blocks += per_question_outputs(analysis, requests)
    return Section("Greedy outputs against the baseline", blocks)


def acceptance_section(analysis: Dict[str, Any], plots: bool = False) -> Optional[Section]:
    hists = analysis.get("acceptance_histograms") or []
    if not hists:
        return None
    width = max(len(h["verify_steps"]) for h in hists)
    rows = []
    for h in hists:
        shares = [f"{n / h['total']:.1%}" for n in h["verify_steps"]] + ["-"] * (width - len(h["verify_steps"]))
        rows.append([h["arm"], h["benchmark"], str(h["total"]), *shares, f"{h['mean_tokens_per_verify']:.3f}"])
    return Section("Acceptance per verify step", [
        Text(["Share of verify steps that accepted i drafts (meta_info `spec_correct_drafts_histogram`, pooled)."]),
        Table(["arm", "benchmark", "verify steps", *map(str, range(width)), "tokens / verify"], rows,
              figures=acceptance_histograms(analysis) if plots else [])],
        collapsed=True, note=f"{len(hists)} histograms (arm x benchmark), with their plots")


def attribution_section(analysis: Dict[str, Any], analysis_cfg: Optional[Dict[str, Any]] = None) -> Optional[Section]:
    rows = analysis.get("speedup_attribution") or []
    if not rows:
        return None
    unjudged = "output_throughput" in unjudged_metrics(analysis_cfg) if analysis_cfg else False
    return Section("Where the speed comes from (shown, not judged)", [
        Text(["Output tok/s = accept length x verify steps per second: each arm's change against the baseline in "
              "means over its repeats, split (log scale) into its accept-length part and its step-rate part (a slower "
              "kernel shows in the latter). Point estimates without an interval: no claim is judged on them"
              + ("; on this platform throughput is not judged at all" if unjudged else "") + "."]),
        Table(["arm", "against", "output tok/s", "from accept length", "from step rate",
               "verify steps/s (arm, baseline)"],
              [[r["arm"], r["baseline"], f"{r['throughput_change']:+.2%}", f"{r['accept_length_part']:+.2%}",
                f"{r['step_rate_part']:+.2%}", f"{r['verify_steps_per_s']:.1f}, {r['baseline_verify_steps_per_s']:.1f}"]
               for r in rows])])


def launches_section(cfg: Dict[str, Any], analysis: Dict[str, Any], metrics: set) -> Optional[Section]:
    """With 2+ launches per arm: the order they ran in, and the noise split into its two parts."""
    records = []
    for path in sorted(Path(cfg["results_dir"], "arms").glob("*/launches/*.json")):
        records.append(json.loads(path.read_text()))
    if not records and not analysis.get("launch_variance"):
        return None
    order = sorted(records, key=lambda r: r.get("started") or 0)
    rows = []
    for v in analysis.get("launch_variance") or []:
        if v["metric"] not in metrics:
            continue
        cells = [f"{x:.2%}" if x is not None else "-" for x in (v["within_launch_cv"], v["between_launch_cv"])]
        rows.append([v["arm"], v["benchmark"], v["metric"], str(v["launches"]), f"{v['repeats_per_launch']:g}", *cells])
    per_arm = {}
    for r in records:
        per_arm[r["arm"]] = per_arm.get(r["arm"], 0) + 1
    times = (f"{cfg['experiment'].get('launches', 1)} times" if len(set(per_arm.values())) <= 1 else
             "in rounds (" + ", ".join(f"{a} {n} times" for a, n in per_arm.items()) + ")")
    return Section("Launches", [
        Text([f"Each arm was launched {times}, interleaved; verdicts count "
              f"launch means as replicates ({analysis.get('replicates')}), so launch-to-launch noise is in every "
              "interval."]),
        Text(["Order as run: " + " ".join(f"{r['arm']}#{r['launch']}" for r in order)]),
        Table(["arm", "benchmark", "metric", "launches", "repeats per launch", "within-launch CV",
               "between-launch CV"], rows)],
        collapsed=True, note=f"{len(order)} launches")


def commands_section(arm_records: List[Dict[str, Any]], run_records: Dict[str, Dict[str, Dict[str, Any]]],
                     verdicts: List[Path]) -> Optional[Section]:
    """Every server launch's command and every benchmark client's, as they ran (HTML only: long lines)."""
    import ast

    twins = identical_commands(arm_records)
    blocks: List[Any] = []
    for rec in arm_records:
        lines = [f"# launch {e.get('launch_id', '?')} on {e.get('host', '?')}\n{e['argv']}"
                 for e in rec.get("launches") or [] if e.get("argv")]
        for stem, run in (run_records.get(rec["arm"]) or {}).items():
            argv = run.get("client_argv")
            if isinstance(argv, str) and argv.startswith("["):
                try:
                    argv = ast.literal_eval(argv)
                except (ValueError, SyntaxError):
                    pass
            if argv:
                lines.append(f"# {stem}\n" + (" ".join(map(str, argv)) if isinstance(argv, list) else str(argv)))
        if lines:
            same = f" (exactly {twins[rec['arm']]}'s server command)" if rec["arm"] in twins else ""
            blocks.append(Details(f"{rec['arm']}: {launches_of(rec)} server launch(es){same}, "
                                  f"{len(run_records.get(rec['arm']) or {})} benchmark runs", [Code("\n\n".join(lines))]))
    for path in verdicts:
        verdict = json.loads(Path(path).read_text())
        if "arm" in verdict and verdict.get("argv"):
            blocks.append(Details(f"gpu_check {verdict['arm']}: the probes",
                                  [Code("\n\n".join(" ".join(map(str, a)) for a in verdict["argv"]))]))
    if not blocks:
        return None
    return Section("Commands that ran", blocks, collapsed=True, only="html",
                   note="each server launch and benchmark client, as recorded (arms/<arm>/arm.json, run.json)")


def run_records_of(cfg: Dict[str, Any], arm_records: List[Dict[str, Any]]) -> Dict[str, Dict[str, Dict[str, Any]]]:
    """arm -> run stem -> run.json, for the runs each arm record holds."""
    out: Dict[str, Dict[str, Dict[str, Any]]] = {}
    for rec in arm_records:
        arm_dir = Path(cfg["results_dir"]) / "arms" / rec["arm"]
        out[rec["arm"]] = {stem: json.loads((arm_dir / stem / "run.json").read_text())
                           for stem in rec.get("runs") or {} if (arm_dir / stem / "run.json").is_file()}
    return out


def claims_section(analysis: Dict[str, Any], skipped: set, shown: Optional[Dict[str, Dict[str, Any]]] = None) -> Section:
    blocks = claims_blocks(analysis, shown)
    if skipped:
        blocks.append(Text([f"Not judged in this campaign (experiment.skip_claims): {', '.join(sorted(skipped))}."]))
    return Section("Claims", blocks)


def sequential_section(analysis: Dict[str, Any]) -> Optional[Section]:
    """A sequential design: the stopping rule, after which round each claim was decided, and what each round did."""
    decision = analysis.get("sequential")
    if not decision:
        return None

    rows = []
    for c in decision["claims"]:
        if not c["sequential"]:
            rows.append([c["id"], verdict_cell(c["verdict"]), "- (no interval: judged on every launch)", "-", "-",
                         "-"])
            continue
        row = decided_row(c, decision["round"])
        note = " (NOT TESTABLE: identical launches, no prior)" if c.get("not_testable") else ""
        rows.append([row[0], verdict_cell(c["verdict"] or "open", note), *row[2:]])
    history = [[str(h["round"]), str(h["launches"]), ", ".join(h["decided"]) or "-",
                ", ".join(h["arms_needed"]) or "- (stop)"] for h in decision["history"]]
    if history and decision["done"] and decision.get("stopped_by"):
        history[-1][3] = f"- (stop: {decision['stopped_by']})"
    stop = decision.get("budget_stop")
    blocks: List[Any] = [Text([decision["rule"]]),
                         Table(["claim", "verdict", "decided after round", "launches per arm", "repeated 95% CI",
                                "p (that round)"], rows),
                         Table(["round", "launches per still-needed arm", "claims decided", "arms still needed"],
                               history, title="Round by round")]
    if stop:
        blocks.append(Text([f"Stopped by the budget after round {decision['round']}: {stop['spent_gpu_hours']:.2f} "
                            f"GPU-hours spent, the next round would add {stop['next_round_gpu_hours']:.2f}, over "
                            f"experiment.max_gpu_hours = {stop['max_gpu_hours']:g}; open claims are INCONCLUSIVE."]))
    launches = sum(a["launches"] for a in decision["arms"].values())
    return Section("Rounds of launches (sequential design)", blocks,
                   note=f"{decision['round']} of {len(decision['schedule'])} rounds, {launches} launches")


def report_sections(cfg, runs, requests, analysis, records, verdicts, skipped, plots: bool = True) -> List[Section]:
    """Every section after the introduction, in the report's order (markdown and HTML alike)."""

    run_records = run_records_of(cfg, records)
    metrics = shown_metrics(cfg, analysis)
    sections: List[Optional[Section]] = [
        *headline_sections(cfg, analysis, plots),
        theory_section(cfg, analysis, plots),
        category_section(cfg, analysis),
        sweep_section(cfg, runs, analysis, plots) if "base_arm" in runs.columns else None,
        claims_section(analysis, skipped, {v["id"]: v for v in views(cfg, analysis, records, run_records, requests)}),
        sequential_section(analysis),
        Section("Noise floors", [noise_rows(analysis, metrics)], collapsed=True,
                note="within a launch (repeats) and between launches (measured, or the prior), per benchmark and metric"),
        launches_section(cfg, analysis, metrics),
        arm_checks_section(records, run_records),
        output_agreement_section(analysis, requests),
        accuracy_section(cfg, analysis),
        acceptance_section(analysis, plots),
        attribution_section(analysis, cfg),
    ]
    warnings = [f"{b['arm']} ({b['benchmark']}): {b['per_token']['warning']}" for b in analysis["tpot_bimodality"]
                if b["per_token"]["warning"]]
    figures = tpot_distributions(requests) if plots else []
    if warnings or figures:
        said = Text(["Per-token latency in ms, pooled over every request and repeat of an arm (bench_serving's "
                     "inter-token latencies): not the headline table's mean TPOT, which averages each run's "
                     "per-request TPOT first, so the two means differ."
                     + (" Not judged on this platform." if "mean_tpot_ms" in unjudged_metrics(cfg) else "")])
        sections.append(Section("TPOT distribution (shown, not judged)", [said] + [Bullets(warnings)] * bool(warnings)
                                + figures, only="" if warnings else "html"))
    if analysis["flags"]:
        sections.append(Section("Flags", [Bullets([f"**{f['text']}**" for f in analysis["flags"]])]))
    for s in verdict_sections(verdicts):
        s.collapsed = True
        sections.append(s)
    sections += [where_this_ran(cfg, records), stage_costs_section(Path(cfg["results_dir"])),
                 commands_section(records, run_records, verdicts)]
    return [s for s in sections if s is not None]


def lede(cfg: Dict[str, Any], recorded_hash: str = "") -> str:
    """The line under the title; `recorded_hash`: the config hash the report stage recorded (a configuration read
    back with its paths replaced hashes differently)."""

    toy = " (a toy model)" if cfg["model"].get("toy") else ""
    gpu = " (a CPU, no GPU)" if cfg["platform"].get("accelerator") == "none" else ""
    return (f"sglang {cfg['sglang']['version']} · model `{cfg['model']['name']}`{toy} · platform "
            f"`{cfg['platform']['name']}`{gpu} · {len(cfg['experiment']['arms'])} arms · config "
            f"`{recorded_hash or config_hash(cfg)}`")


def results_link(cfg: Dict[str, Any], relative: str) -> str:
    """Where a reader finds a file of the results folder: under tracking.results_url when the folder is published
    there, else its path inside the results folder (a path on this host means nothing on the PR)."""
    base = (cfg.get("tracking") or {}).get("results_url")
    if base:
        return f"{base.rstrip('/')}/{relative}"
    return f"`{relative or '.'}` in the results folder"


def reproduce_command(cfg: Dict[str, Any]) -> str:
    return f"specrepro run experiment={cfg['experiment']['name']}"


def provenance_of(cfg: Dict[str, Any], analysis: Dict[str, Any], records: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The provenance the report stage recorded (analysis.json), else taken now (an older recording)."""

    return analysis.get("provenance") or provenance_record(cfg, records)


def provenance_blocks(cfg: Dict[str, Any], prov: Dict[str, Any]) -> List[Any]:
    """The provenance block: what ran beside the PR's setup, then the code's hashes."""

    header, rows = table(prov, "the PR")
    return [Table(["What ran", *header[1:]], rows), Text(["; ".join(code_lines(prov)) + "."])]


def pr_comment(cfg: Dict[str, Any], analysis: Dict[str, Any], records: List[Dict[str, Any]], requests=None) -> str:
    """What a reviewer posts on the PR under test: what ran, the claims with the PR's figures beside ours, how to
    reproduce, where the rest is; no path of this host."""
    name = cfg["experiment"]["name"]
    prov = provenance_of(cfg, analysis, records)
    rows = verdict_rows(cfg, analysis, records, run_records_of(cfg, records), requests)
    head = Section(f"specrepro: {name}", level=3, blocks=[
        *([Text([cfg["experiment"]["description"]], quote=True)] if cfg["experiment"].get("description") else []),
        *([Bullets(changes_under_test(cfg))] if changes_under_test(cfg) else []),
        Text([executed_statement(cfg, records)]),
        *provenance_blocks(cfg, prov),
        Table(["verdict", "claim", pr_column(cfg), "here (95% CI)", "REPRODUCED needs"], rows,
              title=f"**Claims** ({verdict_counts(rows)}):"),
        Text([VERDICT_MEANING + " " + " ".join(multiplicity_lines(analysis)[:1])]),
        Text([f"Reproduce: `{reproduce_command(cfg)}`, or exactly this configuration: `snakemake --configfile "
              f"results/{name}/resolved_config.yaml`. Full report: {results_link(cfg, 'report/report.html')} "
              f"(markdown: {results_link(cfg, 'report/report.md')}); every run in MLflow: `specrepro open` on the "
              "results folder."]),
    ])
    return to_markdown([head])


def campaign_report(cfg, runs_csv: Path, requests_parquet: Path, verdicts: List[Path], claims_path,
                    markdown: Path, html: Path, analysis_json: Path, log=None,
                    arm_records: List[Path] = (), acceptance_csv: Path = None, pr_comment_md: Optional[Path] = None,
                    plots_dir: Optional[Path] = None, captions: Optional[Path] = None,
                    sequential_decision: Optional[Path] = None) -> Dict[str, Any]:
    """`sequential_decision`: a sequential design's last round's decision; its verdicts replace the fixed design's
    (which would ignore that the data were looked at after each round)."""
    import pandas as pd

    records = [json.loads(Path(p).read_text()) for p in arm_records]
    runs = pd.read_csv(runs_csv)
    requests = pd.read_parquet(requests_parquet) if Path(requests_parquet).is_file() else None
    acceptance = pd.read_csv(acceptance_csv) if acceptance_csv and Path(acceptance_csv).is_file() else None

    skipped = set(cfg["experiment"].get("skip_claims") or [])
    claims = claims_per_level([c for c in load_claims(claims_path) if c["id"] not in skipped], cfg)
    toy = cfg["model"].get("toy")
    questions = {b: n for b, v in cfg["benchmarks"].items() if (n := questions_of(v)) is not None}
    greedy = [b for b, v in cfg["benchmarks"].items() if greedy_benchmark(v)]
    analysis = analyze(runs, requests, Campaign(cfg).baseline_of(), claims,
                       cfg["experiment"].get("reference_repeats"), questions,
                       invalid_arms=invalid_arms({r["arm"]: r.get("validity") or {} for r in records}),
                       acceptance=acceptance, greedy_benchmarks=greedy, unjudged_metrics=unjudged_metrics(cfg),
                       theory=predictions(theory_entries(cfg), cfg["model"],
                                          lambda t: toy_acceptance(Path(toy["dir"]), t)) if cfg["experiment"].get("theory")
                       else None, settings=cfg.get("analysis"))
    if sequential_decision is not None:

        analysis = apply_to_analysis(analysis, json.loads(Path(sequential_decision).read_text()))

    analysis["provenance"] = provenance_record(cfg, records)
    analysis_json.parent.mkdir(parents=True, exist_ok=True)
    analysis_json.write_text(json.dumps(analysis, indent=1, default=str))
    write_report(cfg, runs, requests, analysis, records, verdicts, skipped, markdown, html, pr_comment_md,
                 plots_dir if plots_dir is not None else Path(markdown).parent / "plots", captions)
    return analysis


def render_results(results: Path, out: Path, recorded: bool = False) -> None:
    """A finished campaign's report from its results folder (wherever it now is): analysed again from its tables,
    or, `recorded`, from the analysis it recorded (report/analysis.json); written into `out`."""
    import pandas as pd

    import yaml

    results = Path(results)
    raw = yaml.safe_load((results / "resolved_config.yaml").read_text())
    raw["results_dir"] = str(results.resolve())
    if not Path(raw.get("project_root") or "").is_dir():  # recorded in a checkout that is not here: read this one's
        raw["project_root"] = str(PROJECT_ROOT)
    cfg = check_resolved(raw, str(results / "resolved_config.yaml"))
    campaign = Campaign(cfg)
    verdicts = sorted(results.glob("patch_check/*/*/verdict.json")) + [
        results / "gpu_check" / a / "verdict.json" for a in campaign.arms
        if (results / "gpu_check" / a / "verdict.json").is_file()]
    records = [Path(campaign.layout.arm_record(a)) for a in campaign.arms if Path(campaign.layout.arm_record(a)).is_file()]
    tables = results / "tables"
    out.mkdir(parents=True, exist_ok=True)
    if not recorded:

        campaign_report(cfg, tables / "runs.csv", tables / "requests.parquet", verdicts, campaign.claims_path or None,
                        out / "report.md", out / "report.html", out / "analysis.json", arm_records=records,
                        acceptance_csv=tables / "acceptance.csv", pr_comment_md=out / "pr_comment.md",
                        plots_dir=out / "plots", captions=out / "plots.rst",
                        sequential_decision=final_decision(campaign.layout) if campaign.policy else None)
        return
    requests = pd.read_parquet(tables / "requests.parquet") if (tables / "requests.parquet").is_file() else None
    write_report(cfg, pd.read_csv(tables / "runs.csv"), requests,
                 json.loads((results / "report" / "analysis.json").read_text()),
                 [json.loads(p.read_text()) for p in records], verdicts,
                 set(cfg["experiment"].get("skip_claims") or []), out / "report.md", out / "report.html",
                 out / "pr_comment.md", out / "plots", out / "plots.rst")


def write_report(cfg, runs, requests, analysis, records, verdicts, skipped, markdown: Path, html: Path,
                 pr_comment_md: Optional[Path], plots_dir: Path, captions: Optional[Path]) -> None:
    """report.md, report.html, the PR comment, and every plot as a file (MLflow and Snakemake's report show
    them) with its caption."""
    sections = report_sections(cfg, runs, requests, analysis, records, verdicts, skipped)
    title = f"{cfg['experiment']['name']}: results"
    intro = intro_blocks(cfg, analysis, records)
    prov = provenance_of(cfg, analysis, records)
    provenance = provenance_blocks(cfg, prov)
    summary = summary_section(cfg, analysis, records, run_records_of(cfg, records), requests)
    Path(markdown).write_text(to_markdown([Section(title, provenance, level=1), summary,
                                           Section("", intro), *sections]))
    footer = [f"Rendered by specrepro {git_commit() or '(commit unknown)'} from the campaign's own files "
              f"({results_link(cfg, 'report/analysis.json')}); the configuration that ran: config hash "
              f"`{prov['config_hash']}`."]
    Path(html).write_text(to_html(title, summary, sections, intro=intro, lede=lede(cfg, prov["config_hash"]),
                                  footer=footer,
                                  provenance=provenance))
    if pr_comment_md is not None:
        Path(pr_comment_md).write_text(pr_comment(cfg, analysis, records, requests))
    figures = figures_of(sections)
    plots_dir.mkdir(parents=True, exist_ok=True)
    import base64

    for f in figures:
        (plots_dir / f"{f.name}.png").write_bytes(base64.b64decode(f.png))
    if captions is not None:
        Path(captions).write_text(caption_template(figures))


def figures_of(sections: List[Section]) -> List[Figure]:
    out: List[Figure] = []

    def walk(blocks):
        for b in blocks:
            if b.kind == "figure":
                out.append(b)
            elif b.kind == "table":
                out.extend(b.figures)
            elif b.kind == "details":
                walk(b.blocks)

    def visit(s: Section):
        walk(s.blocks)
        for sub in s.subsections:
            visit(sub)

    for s in sections:
        visit(s)
    return out


def caption_template(figures: List[Figure]) -> str:
    """Snakemake's report captions for report/plots/{name}.png: one reStructuredText template that its report
    renders per file (Jinja2, with the file's `name` wildcard), each plot's caption as the HTML report gives it."""
    mapping = json.dumps({f.name: f.caption.replace("`", "") for f in figures}, ensure_ascii=True)
    return ("{% set captions = " + mapping + " %}\n"
            "{{ captions.get(snakemake.wildcards.name, snakemake.wildcards.name) }}\n")


def sweep_figures(runs) -> List[Figure]:
    return factor_plots(runs) + pareto_plots(runs) if "base_arm" in runs.columns else []


def sweep_section(cfg: Dict[str, Any], runs, analysis: Dict[str, Any], plots: bool = False) -> Section:
    """Per claim asked across factors: a one-line summary and its verdict at each level; then the headline
    metrics per level and arm, each table beside its plot (accept length and TPOT by level, throughput against
    TPOT)."""

    factors = factors_of(cfg)
    blocks: List[Any] = [Text([
        "Swept: " + "; ".join(f"{f} {list(v['levels'])} ({'server flag ' + v['server'] + ', a launch per level' if v.get('server') else 'client, on the warm server'})"
                              for f, v in factors.items())
        + ". Each claim is judged at every level, every instance in the one family of claims "
          "(its multiplicity correction counts them all)."])]
    entries = per_level(analysis["claims"])
    labels = list(dict.fromkeys(level_label(r["levels"]) for e in entries for r in e["rows"]))
    if entries:
        grid = []
        for entry in entries:
            at = {level_label(r["levels"]): r["verdict"] for r in entry["rows"]}
            grid.append([entry["id"], *(verdict_cell(at[label]) if label in at else "-" for label in labels)])
        blocks.append(Table(["claim", *labels], grid, title="Each claim's verdict at each level:"))
    if entries:
        blocks.append(Details("Each claim at each level, with its numbers", [
            Table(["level", "verdict", "detail"],
                  [[level_label(r["levels"]), verdict_cell(r["verdict"]), r["detail"]] for r in entry["rows"]],
                  title=f"**{entry['id']}**: {entry['summary']}") for entry in entries]))
    figures = {f.name: f for f in (sweep_figures(runs) if plots else [])}
    for col in factor_columns(runs):
        factor = col.split(":", 1)[1]
        for metric in ("accept_length", "mean_tpot_ms", "output_throughput"):
            for table in level_tables(runs, metric, factor):
                bench = table.title.split(",", 1)[0]
                name = f"{bench}.pareto" if metric == "output_throughput" else f"{bench}.{metric}.by_{factor}"
                if name in figures:
                    table.figures.append(figures.pop(name))
                blocks.append(table)
    blocks += list(figures.values())
    unjudged = unjudged_metrics(cfg)
    if unjudged:
        blocks.append(Text(["Shown, not judged here: " + "; ".join(f"{m} ({why})" for m, why in unjudged.items()) + "."]))
    return Section("Across factors", blocks)
