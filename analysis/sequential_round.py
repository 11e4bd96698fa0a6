"""The checkpoint after each round of a sequential design: every launch so far as a runs table, the decision on it
(`sequential.decide_sequential`), and the budget.  Its JSON is what the DAG reads to know the next round's
launches (`specrepro.workflow_support.Rounds`) and what the report reads for "decided after round k".

The decision replays every round from the table, so the files are a record, not state: rerunning a round's
checkpoint on the same launches writes the same decision.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Any, Dict, List, Optional

from specrepro.analysis.analyze import INCONCLUSIVE
from specrepro.analysis.sequential import decide_sequential, next_round_gpu_hours
from specrepro.analysis.sequential_plan import launch_gpu_hours
from specrepro.benchmarks import questions as questions_of
from specrepro.analysis.claims import campaign_claims, unjudged_metrics
from specrepro.core.arm_plan import arm_plans
from specrepro.core.rounds import policy_of
from specrepro.measure import effective_config
from specrepro.measure.effective_config import invalid_arms
from specrepro.stages.collect import run_tables
from specrepro.util.fileio import write_json


def launch_validity(plan, launch_records: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The arm's validity over its launches so far, as its arm record will state it (effective_config)."""

    ids = sorted({i for r in launch_records for i in r.get("launch_ids") or []})
    checks = [effective_config.read_check(plan.arm_dir / "effective_config" / f"{i}.json", i) for i in ids]
    measured = {stem: json.loads((plan.arm_dir / stem / "run.json").read_text())
                for r in launch_records for stem in r.get("runs") or []}
    return effective_config.arm_validity(checks, measured, bool(plan.requested_fields.get("disable_cuda_graph")))


def spent_gpu_hours(plans, launch_records: List[Dict[str, Any]]) -> float:
    """GPU-hours the launches so far held their GPUs, as their launch logs timed them (start to end)."""
    total = 0.0
    for arm in {r["arm"] for r in launch_records}:
        plan = plans[arm]
        ids = {i for r in launch_records if r["arm"] == arm for i in r.get("launch_ids") or []}
        path = plan.arm_dir / "launches.jsonl"
        events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []
        started = {e["launch_id"]: e["started"] for e in events if e.get("event") == "start" and e["launch_id"] in ids}
        ended = {e["launch_id"]: e["ended"] for e in events if e.get("event") == "end" and e["launch_id"] in ids}
        total += sum(max(0.0, ended[i] - started[i]) for i in started if i in ended) * plan.model_gpus / 3600
    return total


def decide_round(cfg: Dict[str, Any], round_no: int, launch_records: List[Path], claims_path: Optional[str],
                 output: Path, log: IO) -> Dict[str, Any]:
    """Round `round_no`'s decision from every launch record so far; written to `output`."""

    exp = cfg["experiment"]
    policy = policy_of(exp["launches"])
    plans = arm_plans(cfg)
    records = [json.loads(Path(p).read_text()) for p in launch_records]
    measured: Dict[str, List[str]] = {}
    for r in records:
        measured.setdefault(r["arm"], []).extend(r["runs"])
    runs, requests, _ = run_tables(cfg, plans, measured)
    claims = campaign_claims(cfg, claims_path) if claims_path else []
    validity = {arm: launch_validity(plans[arm], [r for r in records if r["arm"] == arm]) for arm in measured}
    questions = {b: n for b, v in cfg["benchmarks"].items() if (n := questions_of(v)) is not None}
    args = dict(requests=requests if len(requests) else None, reference_repeats=exp.get("reference_repeats"),
                questions=questions, invalid_arms=invalid_arms(validity), unjudged_metrics=unjudged_metrics(cfg),
                arms=list(plans))
    decision = decide_sequential(runs, claims, cfg["analysis"], policy, **args)
    spent = spent_gpu_hours(plans, records)
    budget = exp.get("max_gpu_hours")
    stop = None
    if not decision["done"] and budget is not None:
        upcoming = next_round_gpu_hours(decision, launch_gpu_hours(cfg))
        if spent + upcoming > budget:
            stop = {"spent_gpu_hours": spent, "next_round_gpu_hours": upcoming, "max_gpu_hours": budget}
            decision = decide_sequential(runs, claims, cfg["analysis"], policy, final=True, **args)
    if decision["round"] != round_no:
        lacking = ", ".join(f"{a} lacks {n}" for a, n in sorted(decision["incomplete"].items()))
        raise RuntimeError(f"round {round_no}: the launches measured so far complete round {decision['round']} "
                           f"({lacking or 'nothing lacking'}); the launch records given: "
                           f"{[str(p) for p in launch_records]}")
    decision.update({"budget_stop": stop, "spent_gpu_hours": spent, "stopped_by": None,
                     "launch_records": [str(p) for p in launch_records]})
    sequential = [c for c in decision["claims"] if c["sequential"]]
    decided = [f"{c['id']} {c['verdict']}" for c in sequential if c["decided"] and c["verdict"] != INCONCLUSIVE]
    print(f"round {round_no} of {policy.rounds} ({decision['launches']} launches per still-needed arm): "
          f"{len(decided)} of {decision['family']} claims decided ({', '.join(decided) or 'none'}); "
          f"GPU-hours so far {spent:.3f}", file=log, flush=True)
    if decision["done"]:
        open_ids = [c["id"] for c in sequential if c["verdict"] == INCONCLUSIVE]
        why = (f"the budget: {spent:.2f} spent + {stop['next_round_gpu_hours']:.2f} for the next round > "
               f"{budget:g} (experiment.max_gpu_hours)" if stop else
               f"the design's last round ({', '.join(open_ids)} INCONCLUSIVE)" if open_ids else
               "every claim decided")
        decision["stopped_by"] = why
        print(f"sequential design done after round {round_no}: {why}", file=log, flush=True)
    else:
        nxt = decision["next"]
        print(f"round {nxt['round']} launches " + ", ".join(f"{a} #{','.join(map(str, ns))}"
                                                             for a, ns in nxt["arms"].items()), file=log, flush=True)
    write_json(output, decision)
    return decision


def final_decision(layout) -> Optional[Path]:
    """The last round's decision in a results folder (the one that says done), or None while rounds remain."""
    k = 1
    while Path(layout.round_decision(k)).is_file():
        if json.loads(Path(layout.round_decision(k)).read_text())["done"]:
            return Path(layout.round_decision(k))
        k += 1
    return None
