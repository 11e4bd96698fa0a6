"""Judge of the `draft_graph` GPU check: one arm's record of probe_gpu.py (the patch on a GPU inside its image).

A patched arm must pass every executed check; an unpatched arm is the control and must show the bug (greedy rows
that miss the argmax).  Without a GPU the eager checks ran on the CPU and the graph checks say they were not
executed.  The command line is the check protocol's judge (patches/README.md): `--record patched=...` or
`--record unpatched=...`, and `--role patched|control`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Dict, List

from verdicts import CHI2_MIN_P, check, chi_square_p, judge_arguments, write_verdict


def judge(record: Dict[str, Any], patched_arm: bool) -> Dict[str, Any]:
    """Checks over one probe record; `patched_arm` says which outcome is expected."""
    eager, graph, src = record["eager"], record.get("graph"), record["runner_source"]
    on = f"on {record['device']}" + (f" ({record['gpu_name']})" if record.get("gpu_name") else "")
    g = eager["greedy"]
    checks = [check("greedy_rows_propose_argmax", g["non_argmax"] == 0,
                    f"{g['non_argmax']} of {g['rows']} greedy rows (top_k=1) proposed a non-argmax token, eager {on}")]
    s = eager["sampled"]
    p = chi_square_p(s["counts"], s["q"])
    checks.append(check("sampled_rows_draw_from_q", p >= CHI2_MIN_P and s["same_as_old_call"],
                        f"TOP_K_ALL rows: chi-square p={p:.3g} over {s['draws']} draws; identical to the old call "
                        f"on the same seed: {s['same_as_old_call']}"))
    if "host_top_ks" in eager:
        raised = eager["host_top_ks"].get("raised")
        checks.append(check("host_top_ks_asserts", raised == "AssertionError",
                            f"top_ks on the host beside device probabilities: raised {raised}"))
    if graph:
        r, m = graph["refilled"], graph["producer_missing"]
        checks.append(check("graph_replay_with_real_top_ks_proposes_argmax", r["non_argmax"] == 0,
                            f"captured once, {r['replays']} replays at batch size {r['batch_size']}, top_ks buffer "
                            f"{r['top_ks_buffer']}: {r['non_argmax']} of {r['rows']} greedy rows missed the argmax"))
        share = m["non_argmax"] / m["rows"] if m["rows"] else 0.0
        checks.append(check("graph_without_the_producer_half_samples", m["non_argmax"] > 0,
                            f"the same graph with the buffer {m['top_ks_buffer']}: {m['non_argmax']} of {m['rows']} "
                            f"greedy rows missed ({share:.3f}): the loss the buffer's producer half prevents"))
    else:
        checks.append(check("graph_capture_and_replay", False, "not executed: needs a GPU", executed=False))
    checks += runner_checks(record.get("graph_runner"), record["device"], record["top_k_all"])
    runner_ok = src["buffer_top_k_all"] and src["capture_uses_buffer"] and not src["placeholder_left"] and src["replay_copies"]
    checks.append(check("graph_runner_carries_top_ks", runner_ok,
                        f"in the image's {Path(src['file']).name}: TOP_K_ALL buffer {src['buffer_top_k_all']}, "
                        f"captured view {src['capture_uses_buffer']}, -1 placeholder left {src['placeholder_left']}, "
                        f"replay copy {src['replay_copies']} (source read inside the image)"))
    executed = [c for c in checks if c["executed"]]
    runner = record.get("graph_runner") or {}
    bug_visible = (g["non_argmax"] > 0 or (bool(graph) and graph["refilled"]["non_argmax"] > 0)
                   or any(r["greedy_missed"] > 0 for r in runner.get("replays", [])))
    if patched_arm:
        passed = all(c["passed"] for c in executed)
        summary = (f"the patch does what the PR says {on}" if passed else
                   f"the patch fails on {record['device']} (see the failed checks)")
    else:
        passed = bug_visible  # the control must show what the patch fixes
        summary = (f"the unpatched image shows the bug {on}: greedy rows miss the argmax" if passed else
                   f"the unpatched image does not show the bug {on}")
    tree = "patched" if patched_arm else "unpatched"
    notes = [] if graph else ["The graph half was not executed here: it needs a GPU. sglang's draft graph runner "
                              "ran through an eager stand-in for its graph backend (its buffers, capture and replay "
                              "copies ran; no CUDA graph was captured)."]
    return {"passed": passed, "summary": summary, "checks": [dict(c, tree=tree) for c in checks], "notes": notes,
            "bug_visible": bug_visible, "device": record["device"], "gpu_name": record.get("gpu_name"),
            "torch": record["torch"], "graph_executed": bool(graph)}


def runner_checks(runner: Dict[str, Any] | None, device: str, top_k_all: int) -> List[Dict[str, Any]]:
    """Checks over sglang's own draft graph runner, driven with fakes (probe_graph_runner.py)."""
    if runner is None:
        return [check("graph_runner_driven", False, "not in this probe's record", executed=False)]
    if "error" in runner:
        return [check("graph_runner_driven", False, f"init, capture or replay raised: {runner['error']}")]
    where = (f"{runner['graph_backend']}, capture sizes {runner['capture_bs']}" if device != "cpu" else
             "eager on the CPU (the graph backend replaced: no CUDA graph captured here)")
    buf = runner["buffer"]
    buffer_ok = (buf is not None and buf["device"].split(":")[0] == device and buf["dtype"] == "int32"
                 and buf["all_top_k_all"])
    buffer_text = ("no top_ks buffer" if buf is None else
                   f"top_ks buffer of {buf['size']} on {buf['device']}, {buf['dtype']}, all TOP_K_ALL "
                   f"({top_k_all}): {buf['all_top_k_all']}")
    captured = runner["captured"]
    views = [bs for bs, seen in captured.items() if seen["is_buffer_view"]]
    others = sorted({f"{seen['device']} {seen['values']}" for seen in captured.values() if not seen["is_buffer_view"]})
    capture_ok = bool(captured) and len(views) == len(captured) and runner["captured_sizes"] == runner["capture_bs"]
    replays = runner["replays"]
    greedy = sum(r["greedy_rows"] for r in replays)
    greedy_missed = sum(r["greedy_missed"] for r in replays)
    sampled = sum(r["sampled_rows"] for r in replays)
    sampled_missed = sum(r["sampled_missed"] for r in replays)
    padded_ok = all(r["padded_to"] == r["expected_padded_to"] for r in replays)
    shapes = ", ".join(f"{r['rows']}->{r['padded_to']}: {r['greedy_missed']}/{r['greedy_rows']}" for r in replays)
    return [
        check("graph_runner_top_ks_buffer", buffer_ok, f"sglang's EAGLEDraftCudaGraphRunner after init, {where}: "
              f"{buffer_text}"),
        check("graph_runner_captures_the_buffer", capture_ok,
              f"captured sizes {runner['captured_sizes']}: the sampling info of {len(views)} of {len(captured)} holds "
              f"a view of the buffer" + (f"; the others hold {', '.join(others)}" if others else "")),
        check("graph_runner_replay_greedy_rows_propose_argmax", greedy_missed == 0 and sampled_missed > 0 and padded_ok,
              f"{greedy_missed} of {greedy} greedy proposals (top_k 1) missed the argmax of their own q over "
              f"{replays[0]['replays']} replays per batch (rows->captured size: missed/greedy {shapes}); sampled rows "
              f"(TOP_K_ALL) still sample: {sampled_missed} of {sampled} not the argmax"),
    ]


def main() -> int:
    args = judge_arguments()
    (record,) = args.records.values()
    write_verdict(args.out, judge(record, patched_arm=args.role == "patched"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
