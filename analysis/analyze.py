"""From a tidy runs table to noise floors, deltas, GSM8K tests and claim verdicts.

Input: `arm, benchmark, repeat, metric, value, unit` (optionally a per-request
table with `arm, benchmark, repeat, request, correct, itls_ms`).  Output:
plain dicts, so the report, `specrepro analyze --json` and tests share them.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional

import numpy as np
import pandas as pd

from specrepro.analysis import checks, stats

REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE = "REPRODUCED", "NOT REPRODUCED", "INCONCLUSIVE"
# A claim on a metric the platform or model cannot speak to (CPU timings, a toy model's accuracy).
NOT_JUDGED = "NOT JUDGED"
REQUIRED_COLUMNS = ["arm", "benchmark", "repeat", "metric", "value"]

# Where repeats cannot give a noise floor (one value per arm): the relative
# noise assumed per metric.  Accept length averages ~10^5 verifies per run;
# 1% is far above its sampling error and below what the seed claims.
FALLBACK_NOISE = {"accept_length": 0.01}
DEFAULT_MARGIN = 0.02


class TableError(ValueError):
    pass


def check_table(runs: pd.DataFrame, source: str = "table") -> pd.DataFrame:
    missing = [c for c in REQUIRED_COLUMNS if c not in runs.columns]
    if missing:
        raise TableError(f"{source}: missing columns {missing} (expected {REQUIRED_COLUMNS + ['unit']})")
    bad = pd.to_numeric(runs["value"], errors="coerce").isna() & runs["value"].notna()
    if bad.any():
        raise TableError(f"{source}: non-numeric value in rows {list(runs.index[bad][:5])}")
    runs = runs.copy()
    runs["value"] = pd.to_numeric(runs["value"])
    return runs


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    """Per (arm, benchmark, metric): n, mean, std, CV, min, max, 95% CI over repeats."""
    rows = []
    for (arm, bench, metric), g in runs.groupby(["arm", "benchmark", "metric"], sort=False):
        rows.append({"arm": arm, "benchmark": bench, "metric": metric, **stats.describe(g["value"].tolist())})
    return pd.DataFrame(rows)


def noise_floors(runs: pd.DataFrame, reference_repeats: Optional[Dict[str, Dict[str, List[float]]]] = None) -> Dict:
    """Per (benchmark, metric): pooled CV of repeats within arms, else the published repeats, else a fallback."""
    floors: Dict[tuple, Dict[str, Any]] = {}
    for (bench, metric), g in runs.groupby(["benchmark", "metric"], sort=False):
        groups = [a["value"].tolist() for _, a in g.groupby("arm")]
        cv = stats.pooled_cv(groups)
        # degrees of freedom of the floor: sum of (repeats - 1) over the arms pooled
        source, df = "repeats", float(sum(len(x) - 1 for x in groups if len(x) > 1))
        if cv is None and reference_repeats and metric in (reference_repeats.get(bench) or {}):
            cv = stats.coefficient_of_variation(reference_repeats[bench][metric])
            source, df = "published repeats", float(len(reference_repeats[bench][metric]) - 1)
        if cv is None and metric in FALLBACK_NOISE:
            cv, source, df = FALLBACK_NOISE[metric], "fallback (assumed, treated as known)", math.inf
        floors[(bench, metric)] = {"noise_floor": cv, "source": source, "df": df}
    return floors


BINOMIAL_METRICS = ("accuracy", "invalid_rate")


def _delta(a: List[float], b: List[float], floor_info: Dict[str, Any], metric: str,
           questions: Optional[int]) -> Dict[str, Any]:
    """The interval of one comparison: run noise (t with the floor's df) and, for a proportion, the question sample."""
    extra = 0.0
    if metric in BINOMIAL_METRICS and questions:
        extra = stats.binomial_relative_se(float(np.mean(a)), float(np.mean(b)), questions)
    d = stats.relative_delta(a, b, floor_info["noise_floor"], floor_info.get("df"), extra_se=extra)
    d["questions"] = questions if metric in BINOMIAL_METRICS else None
    return d


def deltas(runs: pd.DataFrame, baseline: str, floors: Dict,
           questions: Optional[Dict[str, int]] = None) -> List[Dict[str, Any]]:
    out = []
    for (bench, metric), g in runs.groupby(["benchmark", "metric"], sort=False):
        base = g[g["arm"] == baseline]["value"].tolist()
        floor = floors.get((bench, metric), {}).get("noise_floor")
        for arm, a in g.groupby("arm", sort=False):
            if arm == baseline or not base:
                continue
            row = {"arm": arm, "baseline": baseline, "benchmark": bench, "metric": metric}
            if floor is None or (isinstance(floor, float) and math.isnan(floor)):
                row.update(verdict="INCONCLUSIVE (no noise estimate)", relative=None)
            else:
                d = _delta(a["value"].tolist(), base, floors[(bench, metric)], metric, (questions or {}).get(bench))
                row.update(d, verdict="outside noise" if stats.outside_noise(d) else "within noise")
            out.append(row)
    return out


def gsm8k_tests(requests: Optional[pd.DataFrame], runs: pd.DataFrame) -> Dict[str, Any]:
    """Binomial (Wilson) CI per arm and benchmark; McNemar between arms on the same questions."""
    if requests is None or requests.empty or "correct" not in requests.columns:
        return {}
    req = requests[requests["correct"].notna()]
    out: Dict[str, Any] = {"binomial": [], "mcnemar": []}
    for (bench, arm), g in req.groupby(["benchmark", "arm"], sort=False):
        # n = distinct questions: repeats of the same questions do not multiply the sample
        per_question = g.groupby("request")["correct"].mean()
        n = len(per_question)
        p = float(per_question.mean())
        lo, hi = stats.wilson_interval(round(p * n), n)
        out["binomial"].append({"benchmark": bench, "arm": arm, "correct": round(p * n), "n": n, "accuracy": p,
                                "repeats": int(g["repeat"].nunique()), "ci_low": lo, "ci_high": hi})
    for bench, g in req.groupby("benchmark", sort=False):
        # one answer per question and arm: the majority over repeats
        pivot = g.pivot_table(index="request", columns="arm", values="correct", aggfunc="mean") >= 0.5
        arms = list(pivot.columns)
        for i, a in enumerate(arms):
            for b in arms[i + 1:]:
                pair = pivot[[a, b]].dropna().astype(bool)
                n10 = int((pair[a] & ~pair[b]).sum())
                n01 = int((~pair[a] & pair[b]).sum())
                out["mcnemar"].append({"benchmark": bench, "arm_a": a, "arm_b": b, "a_only": n10, "b_only": n01,
                                       "pairs": len(pair), "p_value": stats.mcnemar(n10, n01)})
    return out


def tpot_bimodality(requests: Optional[pd.DataFrame]) -> List[Dict[str, Any]]:
    if requests is None or requests.empty or "itls_ms" not in requests.columns:
        return []
    out = []
    for (bench, arm), g in requests[requests["itls_ms"].notna()].groupby(["benchmark", "arm"], sort=False):
        tokens = stats.per_token_latencies(g)
        if tokens.size < 4:
            continue
        out.append({"benchmark": bench, "arm": arm, "per_token": stats.median_in_one_mode(tokens)})
    return out


# An arm whose accept length rose while its per-token latency got much worse
# is more likely a slow fallback path than a win (sglang PR 29373: a HIP JIT
# fallback took accept length 3.70 -> 4.58 and inter-token latency 9.8 -> 963 ms).
ACCEPT_UP = 0.02
TPOT_MUCH_WORSE = 0.5


def accept_up_tpot_worse(runs: pd.DataFrame, baseline: str) -> List[Dict[str, Any]]:
    flags = []
    means = runs.groupby(["benchmark", "metric", "arm"])["value"].mean()
    for bench in runs["benchmark"].unique():
        try:
            al, tpot = means.loc[(bench, "accept_length")], means.loc[(bench, "mean_tpot_ms")]
        except KeyError:
            continue
        if baseline not in al or baseline not in tpot:
            continue
        for arm in al.index:
            if arm == baseline or arm not in tpot:
                continue
            d_al, d_tpot = al[arm] / al[baseline] - 1, tpot[arm] / tpot[baseline] - 1
            if d_al > ACCEPT_UP and d_tpot > TPOT_MUCH_WORSE:
                flags.append({"arm": arm, "benchmark": bench, "accept_length_change": d_al, "tpot_change": d_tpot,
                              "text": f"{arm} ({bench}): accept length {d_al:+.1%} but mean TPOT {d_tpot:+.0%} against "
                                      f"{baseline}: a slow fallback path is more likely than a win (cf. sglang PR 29373)"})
    return flags


def judge_claim(claim: Dict[str, Any], runs: pd.DataFrame, floors: Dict,
                questions: Optional[Dict[str, int]] = None) -> Dict[str, Any]:
    bench, metric, expect = claim["benchmark"], claim["metric"], claim["expect"]
    g = runs[(runs["benchmark"] == bench) & (runs["metric"] == metric)]
    result = {"id": claim["id"], "text": claim.get("text", ""), "benchmark": bench, "metric": metric, "expect": expect,
              "arm": claim.get("arm"), "against": claim.get("against"), "arms": claim.get("arms")}
    if expect == "zero":
        arms = claim.get("arms") or sorted(g["arm"].unique())
        values = {a: g[g["arm"] == a]["value"].tolist() for a in arms}
        missing = [a for a, v in values.items() if not v]
        worst = max((max(v) for v in values.values() if v), default=None)
        if missing:
            verdict = INCONCLUSIVE
        else:
            verdict = REPRODUCED if worst == 0 else NOT_REPRODUCED
        result.update(verdict=verdict, arms=arms, numbers={a: v for a, v in values.items()}, missing_arms=missing,
                      detail=f"max {metric} over arms: {worst}" + (f"; not measured: {missing}" if missing else ""))
        return result
    arm, against = claim["arm"], claim["against"]
    a, b = g[g["arm"] == arm]["value"].tolist(), g[g["arm"] == against]["value"].tolist()
    floor = floors.get((bench, metric), {}).get("noise_floor")
    if not a or not b or floor is None or (isinstance(floor, float) and math.isnan(floor)):
        result.update(verdict=INCONCLUSIVE, detail=f"not measured or no noise estimate ({arm}: {len(a)}, {against}: {len(b)} values)")
        return result
    d = _delta(a, b, floors[(bench, metric)], metric, (questions or {}).get(bench))
    margin = float(claim.get("margin", DEFAULT_MARGIN if expect != "not_below" else 0.05))
    lo, hi = d["ci_low"], d["ci_high"]
    if expect in ("decrease", "increase"):
        sign = -1 if expect == "decrease" else 1
        towards, away = (hi < 0, lo > 0) if sign < 0 else (lo > 0, hi < 0)
        if towards:
            verdict = REPRODUCED
        elif away or (lo > -margin and hi < margin):
            verdict = NOT_REPRODUCED
        else:
            verdict = INCONCLUSIVE
    elif expect == "equal":
        if lo > -margin and hi < margin:
            verdict = REPRODUCED
        elif lo > 0 or hi < 0:
            verdict = NOT_REPRODUCED
        else:
            verdict = INCONCLUSIVE
    elif expect == "not_below":
        if lo > -margin:
            verdict = REPRODUCED
        elif hi < -margin:
            verdict = NOT_REPRODUCED
        else:
            verdict = INCONCLUSIVE
    else:
        raise ValueError(f"claim {claim['id']}: unknown expect {expect!r}")
    df = "known" if d["df"] is None or math.isinf(d["df"]) else f"{d['df']:.0f}"
    sample = (f"; question sample n={d['questions']} adds {d['extra_se']:.2%} standard error"
              if d.get("questions") else "")
    why = (f"; the interval is wider than the {margin:.0%} margin: this campaign cannot decide it"
           if verdict == INCONCLUSIVE and hi - lo > 2 * margin else "")
    result.update(verdict=verdict, delta=d, margin=margin,
                  detail=f"{arm} vs {against}: {d['relative']:+.2%} (95% CI {lo:+.2%} .. {hi:+.2%}, t quantile "
                         f"{d['quantile']:.2f} at df {df}; noise floor {floor:.2%}{sample}; margin {margin:.0%}){why}")
    return result


def judge(claim: Dict[str, Any], runs: pd.DataFrame, requests: Optional[pd.DataFrame], floors: Dict,
          questions: Optional[Dict[str, int]], invalid: Dict[str, List[str]],
          unjudged: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    metric = claim.get("metric")
    if metric in (unjudged or {}):
        return {"id": claim["id"], "text": claim.get("text", ""), "benchmark": claim["benchmark"], "metric": metric,
                "expect": claim["expect"], "arm": claim.get("arm"), "against": claim.get("against"),
                "arms": claim.get("arms"), "verdict": NOT_JUDGED,
                "detail": f"{metric} is shown, not judged here: {unjudged[metric]}"}
    if claim["expect"] == "outputs_unchanged":
        result = checks.judge_outputs_unchanged(claim, requests)
    else:
        result = judge_claim(claim, runs, floors, questions)
    return predicted_on_pin(claim, checks.exclude_invalid(result, invalid))


def predicted_on_pin(claim: Dict[str, Any], result: Dict[str, Any]) -> Dict[str, Any]:
    """A claim the pinned code is known not to meet (the PR describes its own base) says so beside its verdict,
    so that NOT REPRODUCED there reads as a fact about the pin, not a failure of the reproduction."""
    predicted = claim.get("predicted")
    if not predicted:
        return result
    as_predicted = result["verdict"] == predicted["verdict"]
    note = (f"as predicted for the pinned sglang: {predicted['because']}" if as_predicted else
            f"predicted {predicted['verdict']} for the pinned sglang ({predicted['because']}); measured otherwise")
    return {**result, "predicted": predicted, "as_predicted": as_predicted, "detail": f"{result.get('detail', '')}; {note}"}


def analyze(runs: pd.DataFrame, requests: Optional[pd.DataFrame] = None, baseline: Optional[str] = None,
            claims: Optional[List[Dict[str, Any]]] = None,
            reference_repeats: Optional[Dict[str, Dict[str, List[float]]]] = None,
            questions: Optional[Dict[str, int]] = None, invalid_arms: Optional[Dict[str, List[str]]] = None,
            acceptance: Optional[pd.DataFrame] = None, greedy_benchmarks: List[str] = (),
            unjudged_metrics: Optional[Dict[str, str]] = None, toy_theory: Optional[Dict[str, Any]] = None,
            theory_expectations: Optional[Dict[str, Dict[str, str]]] = None) -> Dict[str, Any]:
    """`questions`: benchmark -> distinct questions per repeat (GSM8K), for the accuracy intervals.

    `invalid_arms`: arm -> why it is not what it says (effective configuration,
    CUDA-graph log); claims naming one are INCONCLUSIVE.  `acceptance`: verify
    steps by drafts accepted (arm, benchmark, repeat, drafts_accepted,
    verify_steps).  `greedy_benchmarks`: the temperature-0 benchmarks whose
    outputs every arm is compared on against the baseline.  `unjudged_metrics`: metric -> why claims on it
    are shown, not judged (the platform's or the model's).  `toy_theory` (a toy model's theory.json) and
    `theory_expectations` (arm -> benchmark -> argmax | sampled | argmax_after_first): measured accept
    length beside what the model predicts.
    """
    runs = check_table(runs)
    baseline = baseline or runs["arm"].iloc[0]
    invalid = invalid_arms or {}
    # Arms are different launches by construction: with 2+ launches per arm the launch means are the
    # replicates verdicts count on (their spread holds the between-launch noise), not the repeats.
    by_launch = "launch" in runs.columns and runs["launch"].nunique() > 1
    split = checks.launch_variance(runs) if by_launch else []
    all_runs, runs = runs, (checks.launch_means(runs) if by_launch else runs)
    floors = noise_floors(runs, reference_repeats)
    agreement = [checks.greedy_output_agreement(requests, bench, arm, baseline)
                 for bench in greedy_benchmarks
                 for arm in runs[runs["benchmark"] == bench]["arm"].unique() if arm != baseline]
    return {
        "invalid_arms": invalid,
        "replicates": "launch means" if by_launch else "repeats",
        "launch_variance": split,
        "output_agreement": [a for a in agreement if a["pairs"]],
        "acceptance_histograms": checks.acceptance_histograms(acceptance),
        "speedup_attribution": checks.speedup_attribution(runs, baseline),
        "baseline": baseline,
        "summary": summarize(all_runs).to_dict("records"),
        "noise_floors": [{"benchmark": b, "metric": m, **v} for (b, m), v in floors.items()],
        "deltas": deltas(runs, baseline, floors, questions),
        "gsm8k": gsm8k_tests(requests, runs),
        "tpot_bimodality": tpot_bimodality(requests),
        "flags": accept_up_tpot_worse(runs, baseline),
        "claims": [judge(c, runs, requests, floors, questions, invalid, unjudged_metrics) for c in (claims or [])],
        "unjudged_metrics": unjudged_metrics or {},
        "toy_theory": (checks.toy_theory_check(all_runs, requests, toy_theory, theory_expectations or {})
                       if toy_theory else []),
    }
