"""What a claim's verdict tells a reader: whether this platform could test the claim at all, what the claim asked
for (a direction or a size), the PR's figure beside ours in the metric's units, whether the verdict is the one the
pinned code or theory predicts, and what held an undecided claim back.

Presentation only: the verdicts are analysis/analyze.py's, recorded in analysis.json as they were reached.  A claim
this platform cannot test is shown as NOT TESTABLE HERE with the reason, decided from what ran:
- its metric is one the platform or the model marks unjudged (a CPU's latency says nothing about a GPU's);
- it names an arm configured without CUDA graphs while no arm captured one (every decode log line says
  `graph: False`): that arm ran its graph twin's command, so the contrast the claim draws did not exist here.
"""

from __future__ import annotations

import math
import re
from typing import Any, Dict, List, Optional, Tuple

from specrepro.util.metric_names import base_metric, category_metric, has, lookup
from specrepro.analysis.claims import ClaimsError, campaign_claims
from specrepro.core.campaign import Campaign

NOT_TESTABLE = "NOT TESTABLE HERE"
# The unit each metric is measured in, as the tables print it.
UNITS = {"accept_length": "tokens/verify step", "accept_length_decode_log": "tokens/verify step",
         "accept_length_meta_info": "tokens/verify step", "accept_length_metrics": "tokens/verify step",
         "accuracy": "share correct", "invalid_rate": "share invalid", "output_throughput": "tok/s",
         "total_throughput": "tok/s", "input_throughput": "tok/s", "request_throughput": "req/s", "duration": "s"}
DIGITS = {"accept_length": 3, "accuracy": 3, "invalid_rate": 3, "output_throughput": 1, "total_throughput": 1,
          "request_throughput": 2}


def unit(metric: str) -> str:
    metric = base_metric(metric)  # a metric per category is in its base metric's unit
    return "ms" if metric.endswith("_ms") else UNITS.get(metric, "")


def number(value: Optional[float], metric: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    metric = base_metric(metric)
    return f"{value:.{DIGITS.get(metric, 2 if metric.endswith('_ms') else 3)}f}"


def claim_arms(claim: Dict[str, Any]) -> List[str]:
    """Every arm a claim's verdict reads."""
    if claim.get("expect") == "zero":
        return list(claim.get("arms") or [])
    return [a for a in (claim.get("arm"), claim.get("against"), claim.get("from")) if a]


def graph_lines(run_records: Dict[str, Dict[str, Dict[str, Any]]]) -> Tuple[int, int]:
    """Decode log lines that said `graph: True` and `graph: False`, over every run of every arm."""
    on = off = 0
    for runs in run_records.values():
        for run in runs.values():
            lines = ((run.get("accept_length_sources") or {}).get("decode_log") or {}).get("cuda_graph_lines") or {}
            on, off = on + int(lines.get("True", 0)), off + int(lines.get("False", 0))
    return on, off


def command_key(record: Dict[str, Any]) -> Optional[Tuple]:
    """What a server of this arm ran: its argv less the port, its sglang tree and patches, its environment."""
    starts = [e for e in record.get("launches") or [] if e.get("argv_list") and e.get("event", "start") == "start"]
    if not starts:
        return None
    argv = list(starts[0]["argv_list"])
    for i, a in enumerate(argv[:-1]):
        if a == "--port":
            argv[i + 1] = "PORT"
    image = record.get("image") or {}
    return (tuple(argv), image.get("pythonpath"), tuple(image.get("patch_sha256") or []),
            (image.get("env") or {}).get("key"))


def identical_commands(records: List[Dict[str, Any]]) -> Dict[str, str]:
    """arm -> the first arm (in the records' order) whose server ran exactly its command, for arms that are not
    the first of their kind."""
    first: Dict[Tuple, str] = {}
    out: Dict[str, str] = {}
    for rec in records:
        key = command_key(rec)
        if key is None:
            continue
        if key in first:
            out[rec["arm"]] = first[key]
        else:
            first[key] = rec["arm"]
    return out


def launches_of(record: Dict[str, Any]) -> int:
    """Server launches an arm record holds (each launch records its start and its end)."""
    events = record.get("launches") or []
    ids = {e.get("launch_id") for e in events if e.get("launch_id") is not None}
    return len(ids) if ids else sum(1 for e in events if e.get("event", "start") == "start")


def not_testable(claim: Dict[str, Any], cfg: Dict[str, Any], unjudged: Dict[str, str], graphs: Tuple[int, int],
                 twins: Dict[str, str]) -> Optional[str]:
    """Why this platform cannot test the claim, from what ran; None when it can."""
    metric = claim.get("metric")
    if metric and has(unjudged, metric):
        return f"{metric}: {lookup(unjudged, metric)}"
    arms_cfg = cfg["experiment"]["arms"]
    no_graph = [a for a in claim_arms(claim)
                if ((arms_cfg.get(a) or {}).get("extra_server_args") or {}).get("disable_cuda_graph")]
    on, off = graphs
    if no_graph and on == 0:
        same = [f"{a} = {twins[a]}" for a in no_graph if a in twins]
        return (f"no arm captured a CUDA graph (0 of {on + off} decode log lines `graph: True`)"
                + (f": {', '.join(same)} (identical commands)" if same else ""))
    return None


def asks(claim: Dict[str, Any]) -> str:
    """What the claim asks of the data: a direction, a size, an equality."""
    margin = claim.get("margin", 0.02)
    expect = claim.get("expect")
    if expect in ("increase", "decrease"):
        return f"direction: CI {'above +' if expect == 'increase' else 'below -'}{margin:.0%}"
    if expect == "equal":
        return f"equality: CI within ±{margin:.0%}"
    if expect == "not_below":
        return f"no worse: CI above -{margin:.0%}"
    if expect == "restores":
        return f"size: more than {claim.get('fraction', 0.9):.0%} of the gap closed"
    if expect == "outputs_unchanged":
        return "no more differing outputs than the baseline's own (A/A)"
    if expect == "zero":
        return "zero in every arm"
    return expect or "-"


def reference_value(cfg: Dict[str, Any], arm: Optional[str], bench: str, metric: str) -> Optional[float]:
    return ((cfg["experiment"].get("reference") or {}).get(arm or "", {}).get(bench) or {}).get(metric)


def measured_value(analysis: Dict[str, Any], arm: Optional[str], bench: str, metric: str) -> Optional[float]:
    for s in analysis.get("summary") or []:
        if s["arm"] == arm and s["benchmark"] == bench and s["metric"] == metric:
            return s["mean"]
    return None


def restored_share(arm: float, against: float, frm: float) -> Optional[float]:
    gap = against - frm
    return None if gap == 0 else (arm - frm) / gap


def pair_text(base: Optional[float], arm: Optional[float], metric: str, frm: Optional[float] = None) -> str:
    """`base -> arm (relative)` in the metric's unit; with `frm`, the share of the gap frm -> base the arm closes."""
    if base is None or arm is None:
        return ""
    u = unit(metric)
    if frm is not None:
        share = restored_share(arm, base, frm)
        return (f"{number(frm, metric)} -> {number(arm, metric)} of {number(base, metric)} {u}".rstrip()
                + (f" ({share:.0%} of the gap)" if share is not None else ""))
    rel = f" ({arm / base - 1:+.1%})" if base else ""
    return f"{number(base, metric)} -> {number(arm, metric)} {u}".rstrip() + rel


def pr_figure(claim: Dict[str, Any], cfg: Dict[str, Any]) -> str:
    """The PR's published figures for the claim's arms, in the metric's unit ("-" where it published none)."""
    metric, bench = claim.get("metric"), claim.get("benchmark")
    if not metric or claim.get("expect") in ("zero", "outputs_unchanged"):
        return "-"
    arm = reference_value(cfg, claim.get("arm"), bench, metric)
    base = reference_value(cfg, claim.get("against"), bench, metric)
    frm = reference_value(cfg, claim.get("from"), bench, metric) if claim.get("expect") == "restores" else None
    if claim.get("expect") == "restores" and frm is None:
        return "-"
    return pair_text(base, arm, metric, frm) or "-"


def distinct_outputs(requests) -> Dict[Tuple[str, str], Tuple[int, int]]:
    """(benchmark, arm) -> (distinct outputs, distinct questions) over every repeat: how much a comparison of greedy
    outputs compares (one string compared many times says little)."""
    if requests is None or getattr(requests, "empty", True) or "output" not in requests.columns:
        return {}
    rows = requests[requests["output"].notna()]
    return {(b, a): (int(g["output"].nunique()), int(g["request"].nunique()))
            for (b, a), g in rows.groupby(["benchmark", "arm"])}


def our_figure(claim: Dict[str, Any], analysis: Dict[str, Any],
               distinct: Optional[Dict[Tuple[str, str], Tuple[int, int]]] = None) -> str:
    """Our means for the claim's arms and the effect's 95% interval, in the metric's unit."""
    distinct = distinct or {}
    d, r, a = claim.get("delta"), claim.get("restored"), claim.get("agreement")
    metric, bench = claim.get("metric"), claim.get("benchmark")
    if a:
        text = f"{a['identical']} of {a['pairs']} outputs identical"
        if distinct.get((a["benchmark"], a["arm"])):
            text += " ({} distinct outputs over {} questions)".format(*distinct[(a["benchmark"], a["arm"])])
        return text + (f"; A/A {a['aa_differing']} of {a['aa_pairs']} differ" if a.get("aa_pairs") else "")
    if r and r.get("fraction") is not None and not math.isnan(r.get("half_width", math.nan)):
        arm = measured_value(analysis, claim["arm"], bench, metric)
        base = measured_value(analysis, claim["against"], bench, metric)
        frm = measured_value(analysis, claim.get("from"), bench, metric)
        head = (f"{number(frm, metric)} -> {number(arm, metric)} of {number(base, metric)} {unit(metric)}: "
                if None not in (arm, base, frm) else "")
        return f"{head}{r['fraction']:.0%} of the gap (95% CI {r['ci_low']:.0%} .. {r['ci_high']:.0%})"
    if d and d.get("arm_mean") is not None:
        ci = ("" if math.isnan(d.get("half_width", math.nan)) else
              f", 95% CI {d['ci_low']:+.1%} .. {d['ci_high']:+.1%}")
        return (f"{number(d['base_mean'], metric)} -> {number(d['arm_mean'], metric)} {unit(metric)}".replace("  ", " ")
                + f" ({d['relative']:+.1%}{ci})")
    if metric and claim.get("arm") and claim.get("against"):
        return pair_text(measured_value(analysis, claim["against"], bench, metric),
                         measured_value(analysis, claim["arm"], bench, metric), metric) or "-"
    return "-"


def pr_size_note(claim: Dict[str, Any], cfg: Dict[str, Any]) -> str:
    """Whether the PR's own effect lies inside our interval (a direction claim does not ask it)."""
    d = claim.get("delta")
    metric, bench = claim.get("metric"), claim.get("benchmark")
    arm = reference_value(cfg, claim.get("arm"), bench, metric) if metric else None
    base = reference_value(cfg, claim.get("against"), bench, metric) if metric else None
    if not d or arm is None or not base or math.isnan(d.get("half_width", math.nan)):
        return ""
    rel = arm / base - 1
    inside = d["ci_low"] <= rel <= d["ci_high"]
    return f"; the PR's {rel:+.1%} is {'inside' if inside else 'outside'} our CI"


def theory_expected(analysis: Dict[str, Any], arm: Optional[str], bench: str,
                    metric: str = "accept_length") -> Optional[float]:
    """Theory's expected accept length for the arm there; per category (accept_length[mixed]) the category's row,
    else the benchmark's (the toy model's prediction does not depend on the category)."""
    rows = [r for r in analysis.get("theory") or [] if r["arm"] == arm and r["benchmark"] == bench
            and r.get("expected") is not None]
    for wanted in dict.fromkeys((metric, "accept_length")):
        for row in rows:
            if row.get("metric", "accept_length") == wanted:
                return float(row["expected"])
    return None


def theory_verdict(claim: Dict[str, Any], analysis: Dict[str, Any]) -> Optional[Tuple[str, str]]:
    """What theory's expected accept lengths make of an accept-length claim: (verdict, the figure it rests on)."""
    if not str(claim.get("metric") or "").startswith("accept_length"):
        return None
    bench, margin = claim["benchmark"], claim.get("margin", 0.02)
    # theory predicts accept length (tokens per verify step), the same for each of a benchmark's categories
    metric = "accept_length" if claim.get("category") is None else category_metric("accept_length", claim["category"])
    arm = theory_expected(analysis, claim.get("arm"), bench, metric)
    base = theory_expected(analysis, claim.get("against"), bench, metric)
    if arm is None or not base:
        return None
    expect = claim["expect"]
    if expect == "restores":
        frm = theory_expected(analysis, claim.get("from"), bench, metric)
        share = None if frm is None else restored_share(arm, base, frm)
        if share is None:
            return None
        return ("REPRODUCED" if share > claim.get("fraction", 0.9) else "NOT REPRODUCED"), f"{share:.0%} of the gap"
    rel = arm / base - 1
    holds = {"increase": rel > margin, "decrease": rel < -margin, "equal": abs(rel) <= margin,
             "not_below": rel >= -margin}.get(expect)
    if holds is None:
        return None
    return ("REPRODUCED" if holds else "NOT REPRODUCED"), f"{rel:+.1%}"


def expectation(claim: Dict[str, Any], analysis: Dict[str, Any], verdict: str) -> Tuple[str, Optional[bool]]:
    """What was predicted for this claim and whether the verdict is it: (text, surprise?) -- surprise None where
    nothing was predicted or the verdict decides nothing."""
    predicted = claim.get("predicted") or {}
    decided = verdict in ("REPRODUCED", "NOT REPRODUCED")
    if predicted.get("verdict"):
        if not decided:
            return f"the pin predicts {predicted['verdict']}", None
        if verdict == predicted["verdict"]:
            return "as the pin predicts", False
        return f"SURPRISE: the pin predicts {predicted['verdict']}", True
    by_theory = theory_verdict(claim, analysis)
    if by_theory:
        said, figure = by_theory
        if not decided:
            return f"theory predicts {said} ({figure})", None
        if verdict == said:
            return f"as theory predicts ({figure})", False
        return f"SURPRISE: theory predicts {said} ({figure})", True
    return "", None


def held_back(claim: Dict[str, Any], analysis: Dict[str, Any]) -> str:
    """Why an INCONCLUSIVE claim was not decided: its adjusted p against the level, the multiplicity, the noise."""
    m = analysis.get("multiplicity") or {}
    alpha = m.get("alpha", 0.05) / 2
    parts = []
    d = claim.get("delta") or {}
    if d and claim.get("margin") is not None and d.get("half_width", 0) > claim["margin"] and claim.get("expect") in (
            "equal", "not_below"):
        parts.append(f"CI ±{d['half_width']:.1%} wider than the ±{claim['margin']:.0%} margin")
    if claim.get("p_adjusted") is not None:
        family = f"Holm-adjusted over {m['family']} claims" if m.get("policy") == "holm" and m.get("family") else ""
        parts.append(f"p {claim['p_value']:.2g}, {family} {claim['p_adjusted']:.2g} > {alpha:.1%}".replace("  ", " "))
    noise = claim.get("noise") or ""
    sources = sorted({compact_noise(part.split(": ", 1)[1]) for part in noise.split("; ") if ": " in part})
    if sources:
        parts.append("noise: " + "; ".join(sources))
    return "; ".join(parts)


def compact_noise(source: str) -> str:
    """A claim's noise source in few words: "3 repeats on one server + prior 0.5% between launches" reads
    "3 repeats + 0.5% launch prior (assumed)"."""
    source = re.sub(r"(\d+) repeats on one server", r"\1 repeats", source)
    return re.sub(r"prior ([\d.]+%) between launches", r"\1 launch prior (assumed)", source)


def view(claim: Dict[str, Any], cfg: Dict[str, Any], analysis: Dict[str, Any], graphs: Tuple[int, int],
         twins: Dict[str, str], distinct: Optional[Dict[Tuple[str, str], Tuple[int, int]]] = None) -> Dict[str, Any]:
    """Everything the summary row of a claim shows."""
    unjudged = {**(cfg["model"].get("unjudged_metrics") or {}), **(cfg["platform"].get("unjudged_metrics") or {})}
    reason = not_testable(claim, cfg, unjudged, graphs, twins)
    verdict = NOT_TESTABLE if reason else claim["verdict"]
    said, surprise = expectation(claim, analysis, verdict)
    if reason:  # what was predicted for a condition that did not happen here: said, never a surprise
        said, surprise = ((f"the pin predicts {claim['predicted']['verdict']}", None)
                          if (claim.get("predicted") or {}).get("verdict") else ("", None))
    why = reason or ""
    if verdict == "INCONCLUSIVE":
        why = "held back: " + held_back(claim, analysis)
    elif verdict == "NOT JUDGED":
        why = claim.get("detail", "")
    meaning = asks(claim) + ("" if reason else pr_size_note(claim, cfg))
    ours = our_figure(claim, analysis, distinct)
    if reason and ours != "-":
        ours += " (shown, not judged)"
    return {"id": claim["id"], "verdict": verdict, "recorded": claim["verdict"], "reason": why,
            "expectation": said, "surprise": surprise, "asks": meaning, "pr": pr_figure(claim, cfg), "ours": ours}


def views(cfg: Dict[str, Any], analysis: Dict[str, Any], records: List[Dict[str, Any]],
          run_records: Dict[str, Dict[str, Dict[str, Any]]], requests=None) -> List[Dict[str, Any]]:
    """One view per claim, in the claims' order."""
    graphs = graph_lines(run_records)
    twins = identical_commands(records)
    distinct = distinct_outputs(requests)
    written = claim_definitions(cfg)
    return [view({**written.get(c["id"], {}), **c}, cfg, analysis, graphs, twins, distinct)
            for c in analysis.get("claims") or []]


def claim_definitions(cfg: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    """Each claim as its file writes it (analysis.json leaves out some keys: a restored gap's `from`)."""

    path = Campaign(cfg).claims_path
    if not path:
        return {}
    try:
        return {c["id"]: c for c in campaign_claims(cfg, path)}
    except (ClaimsError, OSError, KeyError):
        return {}

