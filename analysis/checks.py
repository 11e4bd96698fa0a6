"""Checks that decide whether a claim is really reproduced, as pure functions over tidy tables.

- greedy output agreement: at temperature 0 every arm that commits the target's
  argmax writes the same text per question as the baseline; a speculative
  decoding change that alters greedy outputs is a correctness bug that
  accuracy (about +-1.7 points at 200 questions) cannot see.
- acceptance histograms: verify steps by drafts accepted, pooled per arm.
- speedup attribution: output tok/s = accept length x verify steps per second,
  so log(T1/T0) = log(A1/A0) + log(S1/S0) splits a throughput change into its
  accept-length part and its step-rate part.
- decidability: before any GPU time, the smallest effect each claim's
  comparison can resolve with the configured repeats and questions.
"""

from __future__ import annotations

import math
import os
from typing import Any, Dict, List, Optional, Tuple

import pandas as pd

from specrepro.analysis import noise, stats
from specrepro.util.metric_names import base_metric, category_metric, category_of, has, lookup
from specrepro.benchmarks import questions as questions_of
from specrepro.core.theory import category_predictions, predict

REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE = "REPRODUCED", "NOT REPRODUCED", "INCONCLUSIVE"
# Characters of each differing output kept in the report, around the first divergence.
EXCERPT = 60


def _excerpt(text: str, at: int) -> str:
    start = max(0, at - EXCERPT // 3)
    return ("..." if start else "") + text[start:at + EXCERPT] + ("..." if at + EXCERPT < len(text) else "")


def greedy_output_agreement(requests: Optional[pd.DataFrame], benchmark: str, arm: str,
                            against: str) -> Dict[str, Any]:
    """Per (question, repeat) both arms answered: identical text or not, and where they first differ; and the
    baseline against itself (the A/A floor): its later repeats and launches against its first, per question.

    Greedy decoding is not bit-exact across launches or batch compositions (sglang refuses rejection sampling
    with deterministic inference for that reason): a near-tie can flip a token between two runs of the same
    arm.  An arm differs *beyond the floor* when it disagrees with the baseline significantly more often than
    the baseline disagrees with itself.
    """
    out: Dict[str, Any] = {"benchmark": benchmark, "arm": arm, "against": against, "pairs": 0, "identical": 0,
                           "match_rate": None, "differing": [], "baseline_unstable": [], "aa_pairs": 0,
                           "aa_differing": 0, "aa_rate": None, "p_beyond_floor": None, "flagged": False}
    if requests is None or requests.empty or "output" not in requests.columns:
        return out
    req = requests[(requests["benchmark"] == benchmark) & requests["output"].notna()]
    keys = ["request", "repeat"] + (["launch"] if "launch" in req.columns else [])
    mine = req[req["arm"] == arm][keys + ["output"]]
    base = req[req["arm"] == against][keys + ["output"]]
    per_question = base.groupby("request")["output"].nunique()
    out["baseline_unstable"] = sorted(int(q) for q in per_question[per_question > 1].index)
    if len(base):
        ordered = base.sort_values(keys)
        # each question's first answer, and every later one (a per-question apply cost ~1 ms a question)
        nth = ordered.groupby("request").cumcount().to_numpy()
        first = ordered[nth == 0].set_index("request")["output"].astype(str)
        others = ordered[nth > 0]
        if len(others):
            out["aa_pairs"] = len(others)
            out["aa_differing"] = int((others["output"].astype(str).to_numpy()
                                       != first.loc[others["request"]].to_numpy()).sum())
            out["aa_rate"] = out["aa_differing"] / out["aa_pairs"]
    pairs = mine.merge(base, on=keys, suffixes=("_arm", "_base"))
    same = pairs["output_arm"].astype(str) == pairs["output_base"].astype(str)
    out["identical"] = int(same.sum())
    for row in pairs[~same].sort_values(keys).itertuples(index=False):
        a, b = str(row.output_arm), str(row.output_base)
        at = len(os.path.commonprefix([a, b]))
        out["differing"].append({"request": int(row.request), "repeat": int(row.repeat), "first_difference_at": at,
                                 "baseline": _excerpt(b, at), "arm": _excerpt(a, at)})
    out["pairs"] = len(pairs)
    out["match_rate"] = out["identical"] / len(pairs) if len(pairs) else None
    if out["pairs"] and out["aa_pairs"]:
        out["p_beyond_floor"] = stats.two_proportion_p(out["pairs"] - out["identical"], out["pairs"],
                                                       out["aa_differing"], out["aa_pairs"])
        out["flagged"] = out["p_beyond_floor"] <= OUTPUT_FLOOR_ALPHA
    elif out["pairs"] and out["identical"] < out["pairs"]:
        out["flagged"] = None  # differs, and no A/A floor to say whether that is the server's own nondeterminism
    return out


# One-sided level at which an arm's greedy disagreement counts as beyond the baseline's own.
OUTPUT_FLOOR_ALPHA = 0.025


def judge_outputs_unchanged(claim: Dict[str, Any], requests: Optional[pd.DataFrame]) -> Dict[str, Any]:
    """"Both arms commit the target argmax": per question, the arm's greedy text against the baseline's, judged
    against the baseline's disagreement with itself (its A/A floor) rather than against byte identity."""
    agreement = greedy_output_agreement(requests, claim["benchmark"], claim["arm"], claim["against"])
    result = {"id": claim["id"], "text": claim.get("text", ""), "benchmark": claim["benchmark"],
              "metric": "greedy_output", "expect": "outputs_unchanged", "arm": claim["arm"],
              "against": claim["against"], "arms": None, "agreement": agreement}
    n, same = agreement["pairs"], agreement["identical"]
    differ = n - same
    questions = sorted({d["request"] for d in agreement["differing"]})
    floor = (f"{claim['against']} against itself: {agreement['aa_differing']} of {agreement['aa_pairs']} differ"
             if agreement["aa_pairs"] else f"no A/A floor ({claim['against']} ran one repeat and one launch)")
    if not n:
        verdict, detail = INCONCLUSIVE, f"no question answered by both {claim['arm']} and {claim['against']}"
    elif agreement["flagged"]:
        first = min(d["first_difference_at"] for d in agreement["differing"])
        verdict = NOT_REPRODUCED
        detail = (f"{differ} of {n} outputs differ from {claim['against']}'s, beyond the floor ({floor}; one-sided "
                  f"p {agreement['p_beyond_floor']:.2g}); earliest divergence at character {first}; questions "
                  f"{questions[:20]}")
    elif differ == 0 or (agreement["aa_rate"] is not None and differ / n <= agreement["aa_rate"]):
        verdict = REPRODUCED
        detail = f"{same} of {n} outputs identical to {claim['against']}'s; {floor}"
    else:
        verdict = INCONCLUSIVE
        detail = (f"{differ} of {n} outputs differ from {claim['against']}'s, more often than the floor but not "
                  f"significantly ({floor}); questions {questions[:20]}"
                  if agreement["aa_pairs"] else
                  f"{differ} of {n} outputs differ and {floor}: run 2+ repeats or launches to tell the server's own "
                  f"nondeterminism from a change; questions {questions[:20]}")
    result.update(verdict=verdict, detail=detail, differing_questions=questions)
    return result


def acceptance_histograms(acceptance: Optional[pd.DataFrame]) -> List[Dict[str, Any]]:
    """Per (arm, benchmark): verify steps by drafts accepted, pooled over requests and repeats."""
    if acceptance is None or acceptance.empty:
        return []
    out = []
    for (arm, bench), g in acceptance.groupby(["arm", "benchmark"], sort=False):
        counts = g.groupby("drafts_accepted")["verify_steps"].sum()
        total = int(counts.sum())
        if not total:
            continue
        width = int(counts.index.max()) + 1
        steps = [int(counts.get(i, 0)) for i in range(width)]
        out.append({"arm": arm, "benchmark": bench, "verify_steps": steps, "total": total,
                    "mean_tokens_per_verify": 1 + sum(i * n for i, n in enumerate(steps)) / total})
    return out


def speedup_attribution(runs: pd.DataFrame, baseline: str, benchmark: str = "bench_serving") -> List[Dict[str, Any]]:
    """Each arm's throughput change against the baseline: accept-length part x verify-step-rate part."""
    g = runs[runs["benchmark"] == benchmark]
    means = g.groupby(["metric", "arm"])["value"].mean()
    try:
        throughput, accept = means.loc["output_throughput"], means.loc["accept_length"]
    except KeyError:
        return []
    if baseline not in throughput or baseline not in accept:
        return []
    rows = []
    for arm in throughput.index:
        if arm == baseline or arm not in accept or not all(v > 0 for v in (throughput[arm], accept[arm])):
            continue
        total = math.log(throughput[arm] / throughput[baseline])
        by_accept = math.log(accept[arm] / accept[baseline])
        by_steps = total - by_accept
        rows.append({"arm": arm, "baseline": baseline, "benchmark": benchmark,
                     "throughput_change": math.expm1(total), "accept_length_part": math.expm1(by_accept),
                     "step_rate_part": math.expm1(by_steps),
                     "verify_steps_per_s": throughput[arm] / accept[arm],
                     "baseline_verify_steps_per_s": throughput[baseline] / accept[baseline],
                     "accept_length_share": by_accept / total if total else None})
    return rows


def launch_variance(runs: pd.DataFrame) -> List[Dict[str, Any]]:
    """Per (arm, benchmark, metric) measured on 2+ launches: within- and between-launch parts of the noise.

    One-way random effects: within = pooled variance of repeats inside a
    launch; between = variance of the launch means less within / repeats per
    launch (floored at 0).  Both as CVs of the arm's mean.
    """
    out = []
    for (arm, bench, metric), g in runs.groupby(["arm", "benchmark", "metric"], sort=False):
        groups = [x["value"].to_numpy(dtype=float) for _, x in g.groupby("launch")]
        if len(groups) < 2:
            continue
        mean = float(g["value"].mean())
        dfw = sum(len(x) - 1 for x in groups)
        within = sum(((x - x.mean()) ** 2).sum() for x in groups) / dfw if dfw else float("nan")
        n = sum(len(x) for x in groups) / len(groups)
        means = pd.Series([x.mean() for x in groups])
        between = max(0.0, float(means.var(ddof=1)) - (within / n if dfw else 0.0))
        out.append({"arm": arm, "benchmark": bench, "metric": metric, "launches": len(groups),
                    "repeats_per_launch": n, "mean": mean,
                    "within_launch_cv": math.sqrt(within) / abs(mean) if mean and dfw else None,
                    "between_launch_cv": math.sqrt(between) / abs(mean) if mean else None})
    return out


def involved_arms(claim: Dict[str, Any]) -> List[str]:
    return [a for a in (claim.get("arm"), claim.get("against"), *(claim.get("arms") or [])) if a]


def exclude_invalid(result: Dict[str, Any], invalid: Dict[str, List[str]]) -> Dict[str, Any]:
    """A claim that names an arm which did not run what it says cannot be decided by its numbers."""
    bad = [a for a in involved_arms(result) if a in invalid]
    if not bad:
        return result
    reasons = "; ".join(f"{a}: {', '.join(invalid[a][:3])}" for a in bad)
    return {**result, "measured_verdict": result.get("verdict"), "verdict": INCONCLUSIVE, "invalid_arms": bad,
            "detail": f"not judged: arm {', '.join(bad)} did not run what it says ({reasons}); "
                      f"its numbers are kept in the tables. Measured: {result.get('detail', '')}"}


def decidability(claims: List[Dict[str, Any]], benchmarks: Dict[str, Dict[str, Any]], repeats: Dict[str, int],
                 reference: Dict[str, Any], reference_repeats: Dict[str, Any], settings: Dict[str, Any],
                 launches: int = 1, binomial_metrics=("accuracy", "invalid_rate")) -> List[Dict[str, Any]]:
    """Per claim, before measuring: the smallest relative effect its interval can resolve.

    The same computation the analysis makes once the numbers are in (analysis.noise): each arm's mean
    carries its repeats' spread (the published repeats' CV, else the configured fallback) and, with one
    launch per arm, the between-launch prior; the two arms' variances combine with Welch's degrees of
    freedom; a proportion adds the question sample's binomial error (n = distinct questions).
    """

    out = []
    for claim in claims:
        if claim.get("expect") in ("zero", "outputs_unchanged"):
            continue
        bench, metric = claim["benchmark"], claim["metric"]
        row = {"id": claim["id"], "benchmark": bench, "metric": metric, "expect": claim["expect"],
               "arm": claim.get("arm"), "against": claim.get("against")}
        published = ((reference_repeats or {}).get(bench) or {}).get(metric)
        if published and len(published) > 1:
            floor, df, source = stats.coefficient_of_variation(published), len(published) - 1.0, "published repeats"
        elif has(settings["within_fallback"], metric):  # per category: the base metric's unless its own
            floor, df, source = lookup(settings["within_fallback"], metric), math.inf, "fallback"
        else:
            floor, df, source = None, math.inf, "this campaign's repeats"
        prior = lookup(settings["launch_noise_prior"], metric)
        n = repeats.get(bench, 1)
        if floor is None and not (prior and launches == 1):
            row.update(resolvable=None, warning=None,
                       note=f"no published repeats, fallback or prior for {bench}/{metric}: its noise is known only "
                            f"after measuring")
            out.append(row)
            continue
        planned = noise.planned_arm_noise(floor, df, n, launches, prior)
        ref_arm = ((reference or {}).get(claim.get("arm")) or {}).get(bench, {}).get(metric)
        ref_base = ((reference or {}).get(claim.get("against")) or {}).get(bench, {}).get(metric)
        extra = 0.0
        questions = questions_of(benchmarks[bench]) if bench in benchmarks else None
        if base_metric(metric) in binomial_metrics and questions:
            p_arm, p_base = ref_arm if ref_arm is not None else 0.9, ref_base if ref_base is not None else 0.9
            extra = stats.binomial_relative_se(p_arm, p_base, questions)
        resolvable = noise.relative_change(planned, planned, extra)["half_width"]
        expected = (ref_arm / ref_base - 1) if ref_arm is not None and ref_base else None
        margin = float(claim.get("margin", settings["default_margin"]))
        warning = None
        if claim["expect"] in ("increase", "decrease") and expected is not None and abs(expected) < resolvable:
            warning = (f"the published effect ({expected:+.1%}) is smaller than the {resolvable:.1%} this campaign "
                       f"can resolve: expect INCONCLUSIVE")
        elif claim["expect"] in ("equal", "not_below") and resolvable >= margin:
            warning = (f"the interval half-width ({resolvable:.1%}) is not below the claim's {margin:.0%} margin: "
                       f"it cannot come out REPRODUCED; raise repeats or launches"
                       + (" or questions (n = distinct questions)" if extra else ""))
        row.update(resolvable=resolvable, floor=floor, floor_source=source, df=df, repeats=n, launches=launches,
                   prior=prior, questions=questions if base_metric(metric) in binomial_metrics else None,
                   expected=expected,
                   margin=margin, warning=warning)
        out.append(row)
    return out


def theory_check(runs: pd.DataFrame, requests: Optional[pd.DataFrame],
                 predictions: Dict[Tuple[str, str], Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Measured accept length per (arm, benchmark) beside what theory predicts for the draft's rule there; then,
    for a benchmark whose runs carry accept length per category (accept_length[mixed]), the same per category,
    each row with its `category` and `metric`.

    `predictions`: (arm, benchmark) -> {rule, steps, first, rest} (specrepro.core.theory: the rule, its drafts per
    verify step, and the acceptance of a request's first draft and of every other one).  The run's verify steps
    (meta_info spec_verify_ct) give the prediction's sampling error and, where a request's first proposal follows
    another rule, the weight of its first step.
    """

    accept = runs[runs["metric"].map(base_metric) == "accept_length"]
    measured = accept.groupby(["arm", "benchmark", "metric"])["value"].mean()
    out = [_theory_row(arm, bench, "accept_length", float(measured[(arm, bench, "accept_length")]), model, requests)
           for (arm, bench), model in predictions.items() if (arm, bench, "accept_length") in measured.index]
    categories = {b: list(dict.fromkeys(c for c in g["metric"].map(category_of) if c))
                  for b, g in accept.groupby("benchmark", sort=False)}
    for (arm, bench, category), model in category_predictions(predictions, categories).items():
        metric = category_metric("accept_length", category)
        if (arm, bench, metric) in measured.index:
            out.append(_theory_row(arm, bench, metric, float(measured[(arm, bench, metric)]), model, requests,
                                   category))
    return out


def _theory_row(arm: str, bench: str, metric: str, value: float, model: Dict[str, Any],
                requests: Optional[pd.DataFrame], category: Optional[str] = None) -> Dict[str, Any]:
    """One measured accept length beside theory's prediction and band; per category, the verify steps of that
    category's requests where the requests table says which category a request is in, else only the benchmark's
    steps per request (to weigh a first step) and no sampling error of its own (the band keeps its tolerance)."""

    total = per_request = None
    if requests is not None and "spec_verify_ct" in requests.columns:
        r = requests[(requests["arm"] == arm) & (requests["benchmark"] == bench)]
        split = category is not None and "category" in r.columns
        if split:
            r = r[r["category"] == category]
        steps = r["spec_verify_ct"].dropna()
        if len(steps):
            total = float(steps.sum()) if category is None or split else None
            per_request = float(steps.mean())
    row = {"arm": arm, "benchmark": bench, "measured": value,
           **predict(model["rule"], model["steps"], model["first"], model["rest"], total, per_request)}
    if category is not None:
        row.update(category=category, metric=metric)
    row["agrees"] = None if row["expected"] is None else bool(row["low"] <= value <= row["high"])
    row["relative_to_argmax"] = value / (model["steps"] + 1) - 1
    return row
