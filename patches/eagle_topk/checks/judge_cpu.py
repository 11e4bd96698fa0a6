"""Judge of the `draft_proposal` CPU check: the probe records of the patched, unpatched and 0.5.21 trees.

Pure functions over the JSON probe_draft_proposal.py writes, plus structural checks of the CUDA-graph half (which
needs a GPU to execute) read from the patched source.  The command line is the check protocol's judge
(patches/README.md).
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

from verdicts import CHI2_MIN_P, check, chi_square_p, judge_arguments, write_verdict

RUNNER = "srt/speculative/eagle_draft_cuda_graph_runner.py"
WORKER = "srt/speculative/eagle_worker_v2.py"


def greedy_argmax(record: Dict[str, Any]) -> Dict[str, Any]:
    g = record["greedy"]
    return check(
        "greedy_rows_propose_argmax",
        g["non_argmax"] == 0 and g["p_not_from_probs"] == 0,
        f"{g['non_argmax']} of {g['rows']} greedy rows (top_k=1) proposed a non-argmax token",
        rows=g["rows"], non_argmax=g["non_argmax"],
    )


def sampled_rows_are_draws_from_q(record: Dict[str, Any]) -> Dict[str, Any]:
    h = record["sampled_top_k_all"]
    p = chi_square_p(h["counts"], h["q"])
    same_as_old = h["counts"] == record["sampled_top_ks_none"]["counts"]
    return check(
        "sampled_rows_draw_from_q",
        p >= CHI2_MIN_P and same_as_old,
        f"top_k=TOP_K_ALL: chi-square p={p:.3g} over {h['draws']} draws (min {CHI2_MIN_P}); "
        f"identical to the top_ks=None draws on the same seed: {same_as_old}",
        chi2_p=p, draws=h["draws"],
    )


def none_keeps_old_behaviour(patched: Dict[str, Any], unpatched: Dict[str, Any]) -> Dict[str, Any]:
    pairs = [("mixed_none", "mixed_none"), ("all_sampled_none", "all_sampled_none")]
    diffs = sum(
        a != b
        for case, _ in pairs
        for a, b in zip(patched["cases"][case]["index"], unpatched["cases"][case]["index"])
    )
    return check(
        "top_ks_none_keeps_old_behaviour",
        diffs == 0,
        f"top_ks=None vs unpatched 0.5.20 on the same seeds: {diffs} differing proposals",
        differing=diffs,
    )


def mixed_batch(record: Dict[str, Any]) -> Dict[str, Any]:
    mixed, old = record["cases"]["mixed"], record["cases"]["mixed_none"]
    bad = []
    for row, top_k in enumerate(mixed["top_ks"]):
        want = mixed["argmax"][row] if top_k <= 1 else old["index"][row]
        if mixed["index"][row] != want:
            bad.append(row)
    return check(
        "mixed_batch_rows_independent",
        not bad,
        f"greedy rows argmax, sampled rows unchanged from the old draw; wrong rows: {bad or 'none'}",
        rows=len(mixed["top_ks"]),
    )


def device_mismatch(record: Dict[str, Any]) -> Dict[str, Any]:
    d = record["device_mismatch"]
    return check(
        "top_ks_device_mismatch_asserts",
        d.get("raised") == "AssertionError",
        f"top_ks on another device: raised {d.get('raised')}",
    )


def agrees_with_reference(patched: Dict[str, Any], reference: Dict[str, Any], ref_version: str) -> Dict[str, Any]:
    differing = []
    for case, out in patched["cases"].items():
        other = reference["cases"].get(case)
        if other is None or out["index"] != other["index"] or any(
            abs(a - b) > 1e-6 for a, b in zip(out["p"], other["p"])
        ):
            differing.append(case)
    for key in ("greedy", "sampled_top_k_all"):
        if patched[key] != reference[key]:
            differing.append(key)
    return check(
        f"agrees_with_sglang_{ref_version}",
        not differing,
        f"same inputs and seeds as sglang {ref_version}'s upstream function; differing: {differing or 'none'}",
        cases=len(patched["cases"]) + 2,
    )


def structural_cuda_graph(pkg_dir: Path) -> List[Dict[str, Any]]:
    """The CUDA-graph half, read from source; it needs a GPU to execute."""
    runner = (pkg_dir / RUNNER).read_text()
    worker = (pkg_dir / WORKER).read_text()
    note = "structural (source) check; not executed: the draft CUDA graph needs a GPU"

    buffer_in_device_block = _buffer_inside_device_block(runner)
    fill = re.search(r"self\.top_ks\s*=\s*torch\.full\(\s*\(self\.max_bs,\)\s*,\s*TOP_K_ALL", runner) is not None
    captured = re.search(r"top_ks\s*=\s*self\.top_ks\[:\s*num_seqs\s*\]", runner) is not None
    placeholder_left = re.search(r"top_ks\s*=\s*torch\.full\(\(num_seqs,\),\s*-1", runner) is not None
    replay = re.search(r"self\.top_ks\[:\s*raw_bs\s*\]\.copy_\(\s*forward_batch\.sampling_info\.top_ks", runner) is not None
    calls = re.findall(r"sample_draft_proposal\(([^()]*(?:\([^()]*\))?[^()]*)\)", worker)
    calls_with_top_ks = [c for c in calls if "top_ks" in c]
    return [
        check("cuda_graph_top_ks_device_buffer", buffer_in_device_block and fill,
              f"top_ks buffer allocated with the static device buffers, filled with TOP_K_ALL: {fill}; {note}",
              executed=False),
        check("cuda_graph_capture_uses_buffer", captured and not placeholder_left,
              f"captured SamplingBatchInfo takes the buffer: {captured}; -1 placeholder left: {placeholder_left}; {note}",
              executed=False),
        check("cuda_graph_replay_copies_top_ks", replay,
              f"replay copies the real top_ks into the buffer: {replay}; {note}", executed=False),
        check("worker_call_sites_pass_top_ks", len(calls) > 0 and len(calls_with_top_ks) == len(calls),
              f"{len(calls_with_top_ks)} of {len(calls)} sample_draft_proposal calls in eagle_worker_v2.py pass top_ks",
              executed=False),
    ]


def _buffer_inside_device_block(source: str) -> bool:
    """Is `self.top_ks = ...` assigned inside a `with torch.device(...)` block?"""
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.With):
            continue
        if not any("torch.device" in ast.unparse(item.context_expr) for item in node.items):
            continue
        for inner in ast.walk(node):
            if isinstance(inner, ast.Assign) and any(ast.unparse(t) == "self.top_ks" for t in inner.targets):
                return True
    return False


def judge(
    patched: Dict[str, Any],
    unpatched: Dict[str, Any],
    reference: Optional[Dict[str, Any]],
    patched_pkg: Path,
    unpatched_pkg: Path,
    ref_version: Optional[str],
) -> Dict[str, Any]:
    """All checks on the patched tree; on the unpatched one, whether it shows the bug the patch fixes."""
    patched_checks = [
        greedy_argmax(patched),
        sampled_rows_are_draws_from_q(patched),
        none_keeps_old_behaviour(patched, unpatched),
        mixed_batch(patched),
        device_mismatch(patched),
    ]
    if reference is not None:
        patched_checks.append(agrees_with_reference(patched, reference, ref_version))
    patched_checks += structural_cuda_graph(patched_pkg)
    version = unpatched.get("sglang_version") or "the pin"
    g = unpatched["greedy"]
    bug = check("bug_visible_on_unpatched", g["non_argmax"] > 0,
                f"on unpatched {version}, {g['non_argmax']} of {g['rows']} greedy rows (top_k=1) proposed a non-argmax "
                f"token: that is the bug the patch fixes", tree="unpatched", rows=g["rows"], non_argmax=g["non_argmax"])
    # the CUDA-graph half of unpatched sglang: shown for comparison, expected to lack what the patch adds
    unpatched_structure = [dict(c, tree="unpatched", passed=not c["passed"], check=c["check"] + "_absent",
                                detail="absent before the patch, as expected: " + c["detail"])
                           for c in structural_cuda_graph(unpatched_pkg)[:3]]
    checks = [*patched_checks, bug, *unpatched_structure]
    passed = all(c["passed"] for c in patched_checks) and bug["passed"]
    return {
        "passed": passed,
        "summary": ("greedy rows propose the argmax on the patched tree, sampled rows still draw from q, and the "
                    "unpatched tree shows the bug" if passed else
                    "the patched sglang does not do what the PR says (see the failed checks)"),
        "checks": checks,
        "notes": ["The CUDA-graph half was checked in source only here; it executes in the GPU check "
                  "(draft_graph) on a GPU."],
    }


def main() -> int:
    args = judge_arguments()
    r = args.records
    verdict = judge(r["patched"], r["unpatched"], r.get("reference"), args.trees["patched"], args.trees["unpatched"],
                    (r.get("reference") or {}).get("sglang_version"))
    write_verdict(args.out, verdict)
    return 0


if __name__ == "__main__":
    sys.exit(main())
