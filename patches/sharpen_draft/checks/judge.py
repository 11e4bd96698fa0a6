"""Judge the `draft_proposal` check of the sharpen_draft series.

Reads the probe records of the patched and unpatched trees (checks/probe.py) and
decides whether the patched `sample_draft_proposal` does what the PR says:

  q_is_sharpened_softmax     q == softmax(logits / (T * 0.8)) to 1e-5
  draws_follow_returned_q    X is a draw from the q that is returned (chi-square on
                             small-vocab histograms, binomial z on sharp rows): the
                             condition the CUDA rejection-sampling verify needs
  q_of_x_is_gather_of_q      the returned q(X) is q.gather(X)
  sharper_than_unpatched     P(X == argmax) on sharp rows rises over the unpatched
                             tree's, on the same logits and random draws, by a stated amount
  signature_unchanged        the function's signature equals the unpatched tree's
  call_sites_unchanged       (source, with --tree) the callers in eagle_worker_v2.py
                             and their arguments are the unpatched tree's

and, on the unpatched tree (the control: the change is visible against the pin),
  q_is_softmax_at_T          q == softmax(logits / T), and differs from the sharpened one
  draws_follow_returned_q    the pinned code was unbiased too (what the change keeps)

Protocol (patches/README.md): no specrepro import; numpy/scipy available.

    python judge.py --out VERDICT.json --record patched=P.json --record unpatched=U.json \
        [--tree patched=DIR --tree unpatched=DIR] [--role patched|control]
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

from scipy import stats

# The PR's factor: the proposal is drawn at T * SCALE.
SCALE = 0.8
# q must equal the reference softmax to this absolute tolerance (float32 softmax).
Q_TOL = 1e-5
# Draws must not be distinguishable from the returned q at this level.
CHI2_MIN_P = 1e-3
# The hit count on sharp rows must sit within this many standard deviations of
# what the returned q predicts (sum of q(argmax) over rows).
HITS_MAX_Z = 4.0
# How much P(X == argmax) on the sharp rows must rise over the unpatched tree, per
# temperature: about half of what the two reference softmaxes predict (≈0.10 at
# T = 1.0, ≈0.04 at T = 0.7 for the probe's rows).
MIN_GAIN = {"T1": 0.05, "T0.7": 0.02}

WORKER = "srt/speculative/eagle_worker_v2.py"
SPEC_UTILS = "srt/speculative/spec_utils.py"
FUNCTION = "sample_draft_proposal"


def check(name: str, tree: str, passed: bool, detail: str, executed: bool = True, **numbers) -> Dict[str, Any]:
    return {"check": name, "tree": tree, "passed": bool(passed), "executed": executed, "detail": detail, **numbers}


def chi_square_p(counts: List[int], q: List[float]) -> float:
    total = sum(counts)
    norm = sum(max(p, 0.0) for p in q)
    expected = [max(p, 0.0) / norm * total for p in q]
    keep = [(c, e) for c, e in zip(counts, expected) if e > 0]
    # A draw on a token q gives no mass is itself proof of a wrong q.
    if any(c > 0 for c, e in zip(counts, expected) if e <= 0):
        return 0.0
    return float(stats.chisquare([c for c, _ in keep], [e for _, e in keep]).pvalue)


# ---------------------------------------------------------------- the checks


def q_matches(record: Dict[str, Any], tree: str, name: str, want: str) -> Dict[str, Any]:
    """q against one reference softmax: `want` is 'scaled' (T * SCALE) or 'T'."""
    key, other = ("q_minus_softmax_scaled_T", "q_minus_softmax_T") if want == "scaled" else (
        "q_minus_softmax_T", "q_minus_softmax_scaled_T")
    cases = list(record["exact"].values())
    hist = list(record["histograms"].values())
    dev = max(c[key] for c in cases)
    dev_other = min(c[other] for c in cases)
    # The histogram rows too: their q against the reference vectors.
    ref_key = "softmax_scaled_T" if want == "scaled" else "softmax_T"
    dev_hist = max(max(abs(a - b) for a, b in zip(h["q"], h[ref_key])) for h in hist)
    worst = max(dev, dev_hist)
    # The two references must be told apart, or the check could not see the change.
    distinct = dev_other > 1e3 * Q_TOL
    label = f"softmax(logits / (T * {SCALE}))" if want == "scaled" else "softmax(logits / T)"
    return check(
        name, tree, worst <= Q_TOL and distinct,
        f"returned q vs {label}: max |diff| {worst:.3g} (tolerance {Q_TOL:g}) over "
        f"{sum(c['rows'] for c in cases) + len(hist)} rows at T in {sorted(set(cases[0]['temperatures']))}; "
        f"vs the other softmax: min max |diff| {dev_other:.3g}",
        max_abs_diff=worst, max_abs_diff_other_reference=dev_other, tolerance=Q_TOL,
    )


def draws_follow_q(record: Dict[str, Any], tree: str) -> Dict[str, Any]:
    """X is a draw from the returned q: chi-square per histogram, z on sharp-row hits."""
    parts, ok = [], True
    evidence: Dict[str, Any] = {}
    for key, h in record["histograms"].items():
        p = chi_square_p(h["counts"], h["q"])
        good = p >= CHI2_MIN_P and h["q_rows_identical"]
        ok &= good
        evidence[f"chi2_p_{key}"] = p
        parts.append(f"{key} ({h['draws']} draws, vocab {h['vocab']}): chi-square p={p:.3g}")
    for key, s in record["sharp"].items():
        expected = s["mean_q_argmax"] * s["rows"]
        sd = math.sqrt(max(s["hits_variance_under_q"], 1e-12))
        z = (s["argmax_proposals"] - expected) / sd
        good = abs(z) <= HITS_MAX_Z
        ok &= good
        evidence[f"argmax_hits_z_{key}"] = z
        parts.append(f"sharp {key}: {s['argmax_proposals']} argmax hits vs {expected:.0f} expected under q (z={z:+.2f})")
    return check(
        "draws_follow_returned_q", tree, ok,
        "; ".join(parts) + f" (need p >= {CHI2_MIN_P:g}, |z| <= {HITS_MAX_Z:g})",
        chi2_min_p=CHI2_MIN_P, **evidence,
    )


def qx_is_gather(record: Dict[str, Any], tree: str) -> Dict[str, Any]:
    devs = [c["qx_minus_gather"] for c in record["exact"].values()]
    devs += [h["qx_minus_gather"] for h in record["histograms"].values()]
    worst = max(devs)
    shapes_ok = all(c["shapes"]["q_x"] == [c["rows"], 1] and c["shapes"]["x"] == [c["rows"], 1]
                    for c in record["exact"].values())
    return check(
        "q_of_x_is_gather_of_q", tree, worst <= Q_TOL and shapes_ok,
        f"returned q(X) vs q.gather(X): max |diff| {worst:.3g}; q(X) and X shaped (rows, 1): {shapes_ok}",
        max_abs_diff=worst,
    )


def sharper(patched: Dict[str, Any], unpatched: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    if unpatched is None:
        return check("sharper_than_unpatched", "patched", False, "no unpatched record to compare with",
                     executed=False)
    parts, ok, evidence = [], True, {}
    for key, need in MIN_GAIN.items():
        a, b = patched["sharp"].get(key), unpatched["sharp"].get(key)
        if a is None or b is None:
            ok = False
            parts.append(f"{key}: missing")
            continue
        gain = a["p_argmax"] - b["p_argmax"]
        predicted = a["mean_softmax_scaled_T_argmax"] - a["mean_softmax_T_argmax"]
        ok &= gain >= need
        evidence[f"p_argmax_patched_{key}"] = a["p_argmax"]
        evidence[f"p_argmax_unpatched_{key}"] = b["p_argmax"]
        evidence[f"gain_{key}"] = gain
        parts.append(f"{key}: P(X = argmax) {b['p_argmax']:.3f} -> {a['p_argmax']:.3f} "
                     f"(+{gain:.3f}, need +{need}; the softmaxes predict +{predicted:.3f}) over {a['rows']} rows")
    return check("sharper_than_unpatched", "patched", ok,
                 "same logits and random draws, vocab 512 sharp rows: " + "; ".join(parts), **evidence)


def signature_unchanged(patched: Dict[str, Any], unpatched: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    if unpatched is None:
        return check("signature_unchanged", "patched", False, "no unpatched record to compare with", executed=False)
    same = patched["parameters"] == unpatched["parameters"]
    return check("signature_unchanged", "patched", same,
                 f"{FUNCTION}{patched['signature']} vs unpatched {FUNCTION}{unpatched['signature']}",
                 signature=patched["signature"])


def package_dir(path: Path) -> Path:
    """The `sglang` package folder; a folder that holds it is taken too."""
    return path / "sglang" if not (path / "srt").is_dir() and (path / "sglang" / "srt").is_dir() else path


def _call_sites(pkg: Path) -> List[str]:
    """Every call of FUNCTION in the worker, as source text of its arguments."""
    tree = ast.parse((pkg / WORKER).read_text())
    calls = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            fn = node.func
            name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else None
            if name == FUNCTION:
                calls.append(", ".join([ast.unparse(a) for a in node.args] +
                                       [f"{k.arg}={ast.unparse(k.value)}" for k in node.keywords]))
    return sorted(calls)


def _def_args(pkg: Path) -> Optional[str]:
    for node in ast.walk(ast.parse((pkg / SPEC_UTILS).read_text())):
        if isinstance(node, ast.FunctionDef) and node.name == FUNCTION:
            return ast.unparse(node.args)
    return None


def call_sites_unchanged(trees: Dict[str, Path]) -> Dict[str, Any]:
    patched, unpatched = trees["patched"], trees["unpatched"]
    a, b = _call_sites(patched), _call_sites(unpatched)
    da, db = _def_args(patched), _def_args(unpatched)
    return check(
        "call_sites_unchanged", "patched", a == b and len(a) > 0 and da == db,
        f"{len(a)} calls of {FUNCTION} in {WORKER} (unpatched: {len(b)}), arguments identical: {a == b}; "
        f"def arguments identical: {da == db}; structural (source) check",
        executed=False, calls=len(a),
    )


# ---------------------------------------------------------------- the verdict


def judge(records: Dict[str, Dict[str, Any]], trees: Dict[str, Path]) -> Dict[str, Any]:
    patched, unpatched = records.get("patched"), records.get("unpatched")
    notes: List[str] = []
    if patched is None:
        return {"passed": False, "summary": "No record of the patched tree: nothing to judge.",
                "checks": [], "notes": ["--record patched=... is required"]}
    patched_checks = [
        q_matches(patched, "patched", "q_is_sharpened_softmax", "scaled"),
        draws_follow_q(patched, "patched"),
        qx_is_gather(patched, "patched"),
        sharper(patched, unpatched),
        signature_unchanged(patched, unpatched),
    ]
    if "patched" in trees and "unpatched" in trees:
        patched_checks.append(call_sites_unchanged(trees))
    else:
        notes.append("call_sites_unchanged not run: it needs --tree patched=DIR and --tree unpatched=DIR")
    control_checks: List[Dict[str, Any]] = []
    if unpatched is not None:
        control_checks = [
            q_matches(unpatched, "unpatched", "q_is_softmax_at_T", "T"),
            draws_follow_q(unpatched, "unpatched"),
        ]
    else:
        notes.append("no unpatched record: the control (the change visible against the pin) was not run")
    patched_ok = all(c["passed"] for c in patched_checks)
    control_ok = bool(control_checks) and all(c["passed"] for c in control_checks)
    failed = [c["check"] for c in patched_checks if not c["passed"]]
    if patched_ok and control_ok:
        s1 = next(c for c in patched_checks if c["check"] == "sharper_than_unpatched")
        summary = (f"The draft proposal is drawn from and returns the same sharpened q = softmax(logits / "
                   f"(T * {SCALE})), so the rejection-sampling verify stays unbiased, and a sharp draft row proposes "
                   f"its argmax {s1['p_argmax_patched_T1']:.1%} of the time at T = 1 instead of "
                   f"{s1['p_argmax_unpatched_T1']:.1%}; signature and callers unchanged.")
    elif not patched_ok:
        summary = (f"The patched draft proposal does not do what the PR says: {', '.join(failed)} failed"
                   + (" (X is not drawn from the q handed to the verify: rejection sampling would be biased)."
                      if "draws_follow_returned_q" in failed else "."))
    else:
        summary = ("The patched tree behaves as the PR says, but the control does not show the pinned behaviour "
                   "(q = softmax(logits / T), drawn from it), so the change is not shown against the pin.")
    return {
        "passed": patched_ok and control_ok,
        "summary": summary,
        "checks": patched_checks + control_checks,
        "notes": notes + [
            f"Probed trees: {', '.join(sorted(records))}; patched scale in source: {patched.get('tree_scale')}.",
            "Only sample_draft_proposal is probed; the first proposal after prefill (_draft_extend_for_prefill) "
            "is out of the PR's scope and not probed.",
        ],
    }


def pairs(values: List[str], flag: str) -> Dict[str, str]:
    out = {}
    for v in values or []:
        if "=" not in v:
            raise SystemExit(f"{flag} {v!r}: expected TREE=PATH")
        k, p = v.split("=", 1)
        out[k] = p
    return out


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--record", action="append", default=[], help="TREE=RECORD.json, repeated")
    parser.add_argument("--tree", action="append", default=[], help="TREE=PACKAGE_DIR, repeated")
    parser.add_argument("--role", choices=["patched", "control"], default=None)
    args = parser.parse_args(argv)
    records = {k: json.loads(Path(p).read_text()) for k, p in pairs(args.record, "--record").items()}
    trees = {k: package_dir(Path(p)) for k, p in pairs(args.tree, "--tree").items()}
    verdict = judge(records, trees)
    if args.role:
        verdict["notes"].append(f"--role {args.role} given; this CPU check judges every tree's record the same way.")
    Path(args.out).write_text(json.dumps(verdict, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
