"""Tidy tables from the per-run records.

runs table (CSV), one row per (arm, benchmark, repeat, metric):
    arm, benchmark, repeat, metric, value, unit, server_launch, launch (1.. experiment.launches)
    and, with a sweep: base_arm, base_benchmark, factor:<name> (the cell's level of each factor)
requests table (Parquet), one row per request of a run:
    arm, benchmark, repeat, request, and what the benchmark reports per request
    (GSM8K: latency_s, completion_tokens, correct, invalid, spec_verify_ct;
    bench_serving: input_len, output_len, ttft_ms, tpot_ms, itls_ms (list), error)
acceptance table (CSV), verify steps by drafts accepted, per run (from meta_info):
    arm, benchmark, repeat, launch, drafts_accepted, verify_steps
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Any, Dict, List, Optional

import pandas as pd

from specrepro.util.metric_names import base_metric
from specrepro.core.arm_plan import arm_plans
from specrepro.core.sweep import cell_columns

RUN_COLUMNS = ["arm", "benchmark", "repeat", "metric", "value", "unit", "server_launch", "launch"]


def unit_of(metric: str) -> str:
    metric = base_metric(metric)  # accept_length[mixed]: per category, in accept length's unit
    if metric.endswith("_ms"):
        return "ms"
    if metric.startswith("accept_length"):
        return "tokens/verify"
    if metric in ("accuracy", "invalid_rate"):
        return "fraction"
    if metric.endswith("throughput"):
        return "tok/s" if "request" not in metric else "req/s"
    if metric == "duration":
        return "s"
    if metric == "completed":
        return "requests"
    return ""


def run_rows(record: Dict[str, Any]) -> List[Dict[str, Any]]:
    return [
        {"arm": record["arm"], "benchmark": record["benchmark"], "repeat": record["repeat"], "metric": metric,
         "value": float(value), "unit": unit_of(metric), "server_launch": record.get("server_launch"),
         "launch": record.get("launch") or 1}
        for metric, value in record["metrics"].items()
        if value is not None
    ]


ACCEPTANCE_COLUMNS = ["arm", "benchmark", "repeat", "launch", "drafts_accepted", "verify_steps"]


def run_tables(cfg: Dict[str, Any], plans: Dict[str, Any], measured: Dict[str, List[str]]):
    """The runs, requests and acceptance tables of the runs named (arm -> run stems), from their run records."""

    rows: List[Dict[str, Any]] = []
    request_rows: List[Dict[str, Any]] = []
    acceptance_rows: List[Dict[str, Any]] = []
    for arm, stems in measured.items():
        plan = plans[arm]
        wanted = set(stems)
        for run in plan.runs:
            if run.stem not in wanted:
                continue
            record = json.loads((plan.arm_dir / run.stem / "run.json").read_text())
            cell = cell_columns(cfg, arm, run.benchmark)
            rows += [{**row, **cell} for row in run_rows(record)]
            acceptance_rows += [{"arm": arm, "benchmark": run.benchmark, "repeat": run.repeat,
                                 "launch": run.launch or 1, "drafts_accepted": i,
                                 "verify_steps": n} for i, n in enumerate(record.get("acceptance_histogram") or [])]
            for req in record.get("requests") or []:
                request_rows.append({"arm": arm, "benchmark": run.benchmark, "repeat": run.repeat,
                                     "launch": run.launch or 1, **req})
    runs = pd.DataFrame(rows, columns=RUN_COLUMNS + [c for c in (rows[0] if rows else {}) if c not in RUN_COLUMNS])
    return runs, pd.DataFrame(request_rows), pd.DataFrame(acceptance_rows, columns=ACCEPTANCE_COLUMNS)


def collect_campaign(cfg: Dict[str, Any], arm_records: List[Path], runs_csv: Path, requests_parquet: Path,
                     log: Optional[IO] = None, acceptance_csv: Optional[Path] = None) -> pd.DataFrame:
    """The tables of every run the arm records list (a sequential design's arms list the launches they ran)."""

    records = [json.loads(Path(p).read_text()) for p in arm_records]
    bases = {r["arm"]: ((r.get("image") or {}).get("base") or {}).get("image_id") for r in records}
    if len({b for b in bases.values() if b}) > 1:
        raise ValueError("arms ran on different base images, so their deltas would mix builds: "
                         + ", ".join(f"{a}: {b}" for a, b in bases.items()) + "; re-run the image stage for every arm")
    plans = arm_plans(cfg)
    runs, requests, acceptance = run_tables(cfg, plans, {r["arm"]: list(r["runs"]) for r in records})
    runs_csv.parent.mkdir(parents=True, exist_ok=True)
    runs.to_csv(runs_csv, index=False)
    requests.to_parquet(requests_parquet, index=False)
    if acceptance_csv is not None:
        acceptance.to_csv(acceptance_csv, index=False)
    if log:
        print(f"{len(runs)} metric rows, {len(requests)} request rows", file=log)
    return runs
