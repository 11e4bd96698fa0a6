"""Read sglang 0.5.20's bench_serving JSONL (benchmark/serving.py).

One line per invocation (the file is appended to): the summary fields
(`mean_tpot_ms`, `output_throughput`, ...) and, with --output-details,
per-request lists (`input_lens`, `output_lens`, `ttfts`, `itls`, `errors`).
Its `accept_length` comes from /server_info's server-lifetime average, so it
is kept only as `accept_length_server_lifetime`, never as the run's value.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List
from specrepro.util.errors import SpecreproError

SUMMARY_FIELDS = [
    "completed", "duration", "request_throughput", "output_throughput", "input_throughput", "total_throughput",
    "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms",
    "mean_itl_ms", "median_itl_ms", "p99_itl_ms", "mean_e2e_latency_ms", "median_e2e_latency_ms",
]
REQUIRED = ["completed", "output_throughput", "mean_tpot_ms", "median_tpot_ms"]


class BenchOutputError(SpecreproError, ValueError):
    """A bench_serving output that cannot be read; the message names the file."""


def parse_bench_serving(path: Path) -> Dict[str, Any]:
    path = Path(path)
    try:
        lines = [line for line in path.read_text().splitlines() if line.strip()]
    except OSError as exc:
        raise BenchOutputError(f"{path}: cannot read bench_serving output ({exc})") from exc
    if not lines:
        raise BenchOutputError(f"{path}: empty bench_serving output (the client wrote no result line)")
    try:
        result = json.loads(lines[-1])
    except ValueError as exc:
        raise BenchOutputError(f"{path}: last line is not JSON ({exc}): {lines[-1][:120]!r}") from exc
    missing = [k for k in REQUIRED if not isinstance(result.get(k), (int, float))]
    if missing:
        raise BenchOutputError(f"{path}: missing or non-numeric fields {missing}")
    metrics = {k: float(result[k]) for k in SUMMARY_FIELDS if isinstance(result.get(k), (int, float))}
    if result.get("accept_length") is not None:
        metrics["accept_length_server_lifetime"] = float(result["accept_length"])
    rows: List[Dict[str, Any]] = []
    itls_all = result.get("itls") or []
    for i, out_len in enumerate(result.get("output_lens") or []):
        itls = itls_all[i] if i < len(itls_all) else []
        ttft = (result.get("ttfts") or [None] * (i + 1))[i]
        error = (result.get("errors") or [""] * (i + 1))[i]
        rows.append({
            "request": i,
            "input_len": (result.get("input_lens") or [None] * (i + 1))[i],
            "output_len": out_len,
            "ttft_ms": ttft * 1000 if ttft is not None else None,
            # TPOT as bench_serving defines it: (latency - ttft) / (output_len - 1).
            "tpot_ms": 1000 * sum(itls) / (out_len - 1) if out_len and out_len > 1 and itls else None,
            "itls_ms": [x * 1000 for x in itls],
            "error": error or None,
        })
    return {"metrics": metrics, "requests": rows}
