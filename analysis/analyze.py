"""From a tidy runs table to noise floors, deltas, GSM8K tests and claim verdicts.

Input: `arm, benchmark, repeat, metric, value, unit` (optionally a per-request
table with `arm, benchmark, repeat, request, correct, itls_ms`).  Output:
plain dicts, so the report, `specrepro analyze --json` and tests share them.
"""

from __future__ import annotations

import math
import weakref
from typing import Any, Dict, List, Optional, Tuple

import pandas as pd

from specrepro.analysis import checks, noise, stats
from specrepro.analysis.claims import with_category
from specrepro.util.metric_names import base_metric, has, lookup

REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE = "REPRODUCED", "NOT REPRODUCED", "INCONCLUSIVE"
# A claim on a metric the platform or model cannot speak to (CPU timings, a toy model's accuracy).
NOT_JUDGED = "NOT JUDGED"
REQUIRED_COLUMNS = ["arm", "benchmark", "repeat", "metric", "value"]

# The analysis settings when none are given (conf/config.yaml's `analysis:` block is the one users edit;
# `specrepro analyze` and tests compose it from there).
DEFAULT_SETTINGS = {"alpha": 0.05, "multiplicity": "holm", "default_margin": 0.02,
                    "launch_noise_prior": {}, "launch_noise_source": "", "within_fallback": {"accept_length": 0.01}}
DEFAULT_MARGIN = DEFAULT_SETTINGS["default_margin"]


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
    if "launch" not in runs.columns:
        runs["launch"] = 1
    runs["launch"] = runs["launch"].fillna(1)
    return runs


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    """Per (arm, benchmark, metric): n, mean, std, CV, min, max, 95% CI over repeats."""
    rows = []
    for (arm, bench, metric), g in runs.groupby(["arm", "benchmark", "metric"], sort=False):
        rows.append({"arm": arm, "benchmark": bench, "metric": metric, **stats.describe(g["value"].tolist())})
    return pd.DataFrame(rows)


def noise_floors(runs: pd.DataFrame, reference_repeats: Optional[Dict[str, Dict[str, List[float]]]] = None,
                 settings: Optional[Dict[str, Any]] = None) -> Dict:
    """Per (benchmark, metric): the within-launch CV (repeats on one server, pooled over arms), else the published
    repeats', else the configured fallback; and the between-launch prior that single-launch arms add."""
    settings = {**DEFAULT_SETTINGS, **(settings or {})}
    floors: Dict[tuple, Dict[str, Any]] = {}
    for (bench, metric), g in runs.groupby(["benchmark", "metric"], sort=False):
        groups = values_by(g, ("arm", "launch"))
        cv = stats.pooled_cv(groups)
        source, df = "repeats", float(sum(len(x) - 1 for x in groups if len(x) > 1))
        if cv is None and reference_repeats and metric in (reference_repeats.get(bench) or {}):
            cv = stats.coefficient_of_variation(reference_repeats[bench][metric])
            source, df = "published repeats", float(len(reference_repeats[bench][metric]) - 1)
        # a metric per category (accept_length[mixed]) takes its base metric's fallback and prior unless it has its own
        if cv is None and has(settings["within_fallback"], metric):
            cv, df = lookup(settings["within_fallback"], metric), math.inf
            source = "fallback (assumed, treated as known)"
        floors[(bench, metric)] = {"noise_floor": cv, "source": source, "df": df,
                                   "launch_prior": lookup(settings["launch_noise_prior"], metric)}
    return floors


BINOMIAL_METRICS = ("accuracy", "invalid_rate")


# (arm, benchmark, metric) -> its rows, one index per runs table while it lives: each claim's lookup scanning the
# whole table made many claims quadratic (the calibration's thousands of simulated claims, a long sweep).
_ROW_INDEX: Dict[int, Dict[tuple, pd.DataFrame]] = {}


def arm_rows(runs: pd.DataFrame, arm: str, bench: str, metric: str) -> pd.DataFrame:
    key = id(runs)
    if key not in _ROW_INDEX:
        _ROW_INDEX[key] = {k: g for k, g in runs.groupby(["arm", "benchmark", "metric"], sort=False)}
        weakref.finalize(runs, _ROW_INDEX.pop, key, None)
    return _ROW_INDEX[key].get((arm, bench, metric), runs.iloc[0:0])


def values_by(g: pd.DataFrame, columns: Tuple[str, ...]) -> List[List[float]]:
    """The values of `g` split by `columns`, in sorted key order (what `g.groupby(columns)` gives, without its
    per-call cost on thousands of small groups)."""
    split: Dict[tuple, List[float]] = {}
    for key, value in zip(zip(*(g[c].tolist() for c in columns)), g["value"].tolist()):
        split.setdefault(key, []).append(value)
    return [split[k] for k in sorted(split)]


def arm_noise_of(runs: pd.DataFrame, arm: str, bench: str, metric: str, floors: Dict,
                 settings: Dict[str, Any]) -> Optional[noise.ArmNoise]:
    """An arm's mean and its variance from its own values: launches when it has 2+, else repeats plus the prior."""
    g = arm_rows(runs, arm, bench, metric)
    if g.empty:
        return None
    floor = floors.get((bench, metric), {})
    return noise.arm_noise(values_by(g, ("launch",)),
                           lookup(settings["launch_noise_prior"], metric), floor.get("noise_floor"),
                           floor.get("df") or math.inf, f"within-launch noise from {floor.get('source')}")


def _binomial_se(metric: str, a: noise.ArmNoise, b: noise.ArmNoise, questions: Optional[int]) -> float:
    if base_metric(metric) in BINOMIAL_METRICS and questions:
        return stats.binomial_relative_se(a.mean, b.mean, questions)
    return 0.0


def deltas(runs: pd.DataFrame, baseline: str, floors: Dict, settings: Dict[str, Any],
           questions: Optional[Dict[str, int]] = None) -> List[Dict[str, Any]]:
    out = []
    for (bench, metric), g in runs.groupby(["benchmark", "metric"], sort=False):
        base = arm_noise_of(runs, baseline, bench, metric, floors, settings)
        for arm in g["arm"].unique():
            if arm == baseline or base is None:
                continue
            row = {"arm": arm, "baseline": baseline, "benchmark": bench, "metric": metric}
            mine = arm_noise_of(runs, arm, bench, metric, floors, settings)
            d = noise.relative_change(mine, base, _binomial_se(metric, mine, base, (questions or {}).get(bench)))
            if math.isnan(d["relative"]):
                row.update(d, verdict="no relative change (the baseline is zero)")
            elif not d["se"] or math.isnan(d["half_width"]):
                row.update(d, verdict="INCONCLUSIVE (no noise estimate)")
            else:
                row.update(d, verdict="outside noise" if d["ci_low"] > 0 or d["ci_high"] < 0 else "within noise")
            out.append(row)
    return out


def gsm8k_tests(requests: Optional[pd.DataFrame], runs: pd.DataFrame, baseline: Optional[str] = None) -> Dict[str, Any]:
    """Binomial (Wilson) CI per arm and benchmark; McNemar between arms on the same questions; each arm's paired
    accuracy difference against the baseline with its interval (shown, never a verdict: accuracy claims are
    judged only where a claims file names them)."""
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
        if baseline in arms:
            for a in arms:
                if a == baseline:
                    continue
                pair = pivot[[a, baseline]].dropna().astype(bool)
                n10 = int((pair[a] & ~pair[baseline]).sum())
                n01 = int((~pair[a] & pair[baseline]).sum())
                out.setdefault("paired", []).append({"benchmark": bench, "arm": a, "baseline": baseline,
                                                     **stats.paired_difference(n10, n01, len(pair))})
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


def noise_statement(d: Dict[str, Any], arm: str, against: str) -> str:
    parts = [f"{arm}: {' + '.join(d['noise']['arm']) or 'none'}", f"{against}: {' + '.join(d['noise']['base']) or 'none'}"]
    if d.get("extra_se"):
        parts.append(f"question sample {d['extra_se']:.2%}")
    return "; ".join(parts)


def judge_claim(claim: Dict[str, Any], runs: pd.DataFrame, floors: Dict, settings: Dict[str, Any],
                questions: Optional[Dict[str, int]] = None) -> Dict[str, Any]:
    """One claim's interval, its p-value (the chance of data this far towards the claim if it were false) and
    the verdicts the data alone allow; `decide` applies the family's multiplicity policy to the p-values."""
    bench, metric, expect = claim["benchmark"], claim["metric"], claim["expect"]
    result = {"id": claim["id"], "text": claim.get("text", ""), "benchmark": bench, "metric": metric, "expect": expect,
              "arm": claim.get("arm"), "against": claim.get("against"), "arms": claim.get("arms")}
    if expect == "zero":
        g = runs[(runs["benchmark"] == bench) & (runs["metric"] == metric)]
        arms = claim.get("arms") or sorted(g["arm"].unique())
        values = {a: g[g["arm"] == a]["value"].tolist() for a in arms}
        missing = [a for a, v in values.items() if not v]
        worst = max((max(v) for v in values.values() if v), default=None)
        verdict = INCONCLUSIVE if missing else (REPRODUCED if worst == 0 else NOT_REPRODUCED)
        result.update(verdict=verdict, arms=arms, numbers={a: v for a, v in values.items()}, missing_arms=missing,
                      detail=f"max {metric} over arms: {worst}" + (f"; not measured: {missing}" if missing else ""))
        return result
    arm, against = claim["arm"], claim["against"]
    a = arm_noise_of(runs, arm, bench, metric, floors, settings)
    b = arm_noise_of(runs, against, bench, metric, floors, settings)
    if a is None or b is None:
        result.update(verdict=INCONCLUSIVE, detail=f"not measured ({arm}: {a is not None}, {against}: {b is not None})")
        return result
    margin = float(claim.get("margin", settings["default_margin"]))
    if expect == "restores":
        broken = arm_noise_of(runs, claim["from"], bench, metric, floors, settings)
        if broken is None:
            result.update(verdict=INCONCLUSIVE, detail=f"not measured: {claim['from']}")
            return result
        return _judge_restores(claim, result, a, b, broken)
    d = noise.relative_change(a, b, _binomial_se(metric, a, b, (questions or {}).get(bench)))
    result.update(delta=d, margin=margin, noise=noise_statement(d, arm, against))
    if math.isnan(d["relative"]):
        result.update(verdict=INCONCLUSIVE, p_value=None,
                      detail=f"{arm} vs {against}: {against}'s {metric} is zero, so no relative change exists")
        return result
    if not d["se"] or math.isnan(d["half_width"]):
        if a.untestable and b.untestable:
            result.update(verdict=INCONCLUSIVE, p_value=None, not_testable=True,
                          detail=f"NOT TESTABLE: {arm} vs {against}: {d['relative']:+.2%}, every launch of both "
                                 f"identical and no launch prior for {metric} (analysis.launch_noise_prior): no noise "
                                 f"estimate, and more launches of a deterministic server add none")
            return result
        result.update(verdict=INCONCLUSIVE, p_value=None,
                      detail=f"{arm} vs {against}: {d['relative']:+.2%} with no noise estimate (identical values and "
                             f"no prior for {metric}): a zero-width interval decides nothing")
        return result
    lo, hi, rel, se, df = d["ci_low"], d["ci_high"], d["relative"], d["se"], d["df"]
    if expect == "decrease":
        p, against_claim = noise.one_sided_p(rel, 0.0, se, df, above=False), lo > 0 or (lo > -margin and hi < margin)
    elif expect == "increase":
        p, against_claim = noise.one_sided_p(rel, 0.0, se, df, above=True), hi < 0 or (lo > -margin and hi < margin)
    elif expect == "equal":
        p = max(noise.one_sided_p(rel, -margin, se, df, above=True), noise.one_sided_p(rel, margin, se, df, above=False))
        against_claim = lo > margin or hi < -margin
    elif expect == "not_below":
        p, against_claim = noise.one_sided_p(rel, -margin, se, df, above=True), hi < -margin
    else:
        raise ValueError(f"claim {claim['id']}: unknown expect {expect!r}")
    df_text = "inf" if math.isinf(df) else f"{df:.1f}"
    result.update(p_value=p, contradicted=against_claim,
                  detail=f"{arm} vs {against}: {rel:+.2%} (95% CI {lo:+.2%} .. {hi:+.2%}, t {d['quantile']:.2f} at "
                         f"Welch df {df_text}; margin {margin:.0%})")
    return result


def _judge_restores(claim, result, fixed, level, broken) -> Dict[str, Any]:
    """`restores`: the fraction of the gap (from -> against) that the arm closes, against the claim's `fraction`."""
    f = float(claim.get("fraction", 0.9))
    r = noise.restored_fraction(fixed, level, broken)
    names = f"{claim['arm']} closes the gap {claim['from']} -> {claim['against']}"
    result.update(restored=r, fraction=f, noise=f"{claim['arm']}: {' + '.join(fixed.sources)}; {claim['against']}: "
                  f"{' + '.join(level.sources)}; {claim['from']}: {' + '.join(broken.sources)}")
    gap_t = noise.t_quantile(math.inf if math.isnan(r["df"]) else r["df"])
    if not abs(r["gap"]) > gap_t * r["gap_se"]:
        result.update(verdict=INCONCLUSIVE, p_value=None,
                      detail=f"{names}: the gap itself ({r['gap']:+.3g}) is within noise: nothing to restore")
    elif not r["se"] or math.isnan(r["half_width"]):
        result.update(verdict=INCONCLUSIVE, p_value=None, detail=f"{names}: no noise estimate")
    else:
        result.update(p_value=noise.one_sided_p(r["fraction"], f, r["se"], r["df"], above=True),
                      contradicted=r["ci_high"] < f,
                      detail=f"{names}: {r['fraction']:.0%} of it (95% CI {r['ci_low']:.0%} .. {r['ci_high']:.0%}); "
                             f"the claim needs more than {f:.0%}")
    return result


def decide(results: List[Dict[str, Any]], settings: Dict[str, Any]) -> List[Dict[str, Any]]:
    """Verdicts over the family of claims: REPRODUCED only where the multiplicity-adjusted p-value clears alpha/2
    (each claim is one-sided, as its 95% interval is); NOT REPRODUCED where the data contradict the claim."""
    alpha = float(settings["alpha"]) / 2
    family = {r["id"]: r["p_value"] for r in results if r.get("p_value") is not None and "verdict" not in r}
    adjusted = noise.holm(family) if settings["multiplicity"] == "holm" else dict(family)
    out = []
    for r in results:
        if "verdict" in r:
            out.append(r)
            continue
        p = adjusted.get(r["id"])
        if p is not None and p <= alpha:
            verdict = REPRODUCED
        elif r.get("contradicted"):
            verdict = NOT_REPRODUCED
        else:
            verdict = INCONCLUSIVE
        why = ""
        if verdict == INCONCLUSIVE and r.get("delta") and r["delta"]["half_width"] > r.get("margin", 1):
            why = f"; the interval is wider than the {r['margin']:.0%} margin: this campaign cannot decide it"
        policy = (f"; p {r['p_value']:.2g}, Holm-adjusted over {len(family)} claims {p:.2g}"
                  if settings["multiplicity"] == "holm" and p is not None else
                  (f"; p {r['p_value']:.2g}" if p is not None else ""))
        out.append({**r, "verdict": verdict, "p_adjusted": p, "detail": r["detail"] + policy + why})
    return out


def judge(claim: Dict[str, Any], runs: pd.DataFrame, requests: Optional[pd.DataFrame], floors: Dict,
          questions: Optional[Dict[str, int]], settings: Dict[str, Any],
          unjudged: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    metric = claim.get("metric")
    if metric and has(unjudged, metric):
        return {"id": claim["id"], "text": claim.get("text", ""), "benchmark": claim["benchmark"], "metric": metric,
                "expect": claim["expect"], "arm": claim.get("arm"), "against": claim.get("against"),
                "arms": claim.get("arms"), "verdict": NOT_JUDGED,
                "detail": f"{metric} is shown, not judged here: {lookup(unjudged, metric)}"}
    if claim["expect"] == "outputs_unchanged":
        return checks.judge_outputs_unchanged(claim, requests)
    return judge_claim(claim, runs, floors, settings, questions)


def prior_sensitivity(verdicts, claims, runs, requests, reference_repeats, questions, invalid, settings,
                      unjudged) -> List[Dict[str, Any]]:
    """A verdict that leans on the between-launch prior says whether it survives twice the prior."""
    doubled = {**settings, "launch_noise_prior": {k: 2 * v for k, v in settings["launch_noise_prior"].items()}}
    floors = noise_floors(runs, reference_repeats, doubled)
    again = [checks.exclude_invalid(r, invalid) for r in
             decide([judge(c, runs, requests, floors, questions, doubled, unjudged) for c in claims], doubled)]
    out = []
    for v, w in zip(verdicts, again):
        leans = any("prior" in s for s in (v.get("noise") or "").split(";"))
        if leans and v["verdict"] != w["verdict"]:
            v = {**v, "prior_sensitive": w["verdict"],
                 "detail": v["detail"] + f"; leans on the between-launch prior: with twice it, {w['verdict']}"}
        elif leans:
            v = {**v, "prior_sensitive": None}
        out.append(v)
    return out


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
            unjudged_metrics: Optional[Dict[str, str]] = None,
            theory: Optional[Dict[Tuple[str, str], Dict[str, Any]]] = None,
            settings: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """`questions`: benchmark -> distinct questions per repeat (GSM8K), for the accuracy intervals.

    `invalid_arms`: arm -> why it is not what it says (effective configuration,
    CUDA-graph log); claims naming one are INCONCLUSIVE.  `acceptance`: verify
    steps by drafts accepted (arm, benchmark, repeat, drafts_accepted,
    verify_steps).  `greedy_benchmarks`: the temperature-0 benchmarks whose
    outputs every arm is compared on against the baseline.  `unjudged_metrics`: metric -> why claims on it
    are shown, not judged (the platform's or the model's).  `theory`: (arm, benchmark) -> the draft's rule and
    its acceptance (checks.theory_check): measured accept length beside what theory predicts.  `settings`: the campaign's `analysis:` block (alpha, the
    multiplicity policy, the between-launch priors).
    """
    settings = {**DEFAULT_SETTINGS, **(settings or {})}
    runs = check_table(runs)
    baseline = baseline or runs["arm"].iloc[0]
    # a claim on one category judges that category's metric (accept_length[low_entropy]); the rest are unchanged
    claims = [with_category(c) for c in claims or []]
    invalid = invalid_arms or {}
    # Arms are different launches by construction: with 2+ launches per arm the launch means are the
    # replicates (their spread holds the between-launch noise); with one, the prior stands in for it.
    by_launch = runs["launch"].nunique() > 1
    split = checks.launch_variance(runs) if by_launch else []
    floors = noise_floors(runs, reference_repeats, settings)
    judged = [judge(c, runs, requests, floors, questions, settings, unjudged_metrics) for c in (claims or [])]
    # a claim asked at one level of a sweep keeps what it is an instance of (analysis.sweep regroups them)
    verdicts = [{**predicted_on_pin(c, checks.exclude_invalid(r, invalid)),
                 **{k: c[k] for k in ("base_id", "levels", "category") if k in c}}
                for c, r in zip(claims or [], decide(judged, settings))]
    if not by_launch and settings["launch_noise_prior"]:
        verdicts = prior_sensitivity(verdicts, claims or [], runs, requests, reference_repeats, questions, invalid,
                                     settings, unjudged_metrics)
    agreement = [checks.greedy_output_agreement(requests, bench, arm, baseline)
                 for bench in greedy_benchmarks
                 for arm in runs[runs["benchmark"] == bench]["arm"].unique() if arm != baseline]
    return {
        "invalid_arms": invalid,
        "replicates": "launch means" if by_launch else "repeats, plus the between-launch prior",
        "launch_variance": split,
        "output_agreement": [a for a in agreement if a["pairs"]],
        "acceptance_histograms": checks.acceptance_histograms(acceptance),
        "speedup_attribution": checks.speedup_attribution(runs, baseline),
        "baseline": baseline,
        "summary": summarize(runs).to_dict("records"),
        "noise_floors": [{"benchmark": b, "metric": m, **v} for (b, m), v in floors.items()],
        "deltas": deltas(runs, baseline, floors, settings, questions),
        "gsm8k": gsm8k_tests(requests, runs, baseline),
        "tpot_bimodality": tpot_bimodality(requests),
        "flags": accept_up_tpot_worse(runs, baseline),
        "claims": verdicts,
        "multiplicity": {"policy": settings["multiplicity"], "alpha": settings["alpha"],
                         "family": sum(1 for r in judged if r.get("p_value") is not None and "verdict" not in r)},
        "launch_noise": {"prior": settings["launch_noise_prior"], "source": settings["launch_noise_source"],
                         "measured": by_launch},
        "unjudged_metrics": unjudged_metrics or {},
        "theory": checks.theory_check(runs, requests, theory) if theory else [],
    }
