"""Read sglang 0.5.20's bench_serving JSONL (benchmark/serving.py).

One line per invocation (the file is appended to): the summary fields
(`mean_tpot_ms`, `output_throughput`, ...) and, with --output-details,
per-request lists (`input_lens`, `output_lens`, `ttfts`, `itls`, `errors`).
Its `accept_length` comes from /server_info's server-lifetime average, so it
is kept only as `accept_length_server_lifetime`, never as the run's value.

The kind `bench_serving` (settings block `serving:`): sglang's own client beside the server, on its random or
ShareGPT prompts; its accept length comes from the decode log and /metrics of the repeat's window.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

from specrepro.benchmarks.base import (BenchmarkKind, BenchOutputError, ClientCall, ClientStep, CostFigures,
                                       DataSource, KindOutputs, Warmup, fixed_length_payloads)

SUMMARY_FIELDS = [
    "completed", "duration", "request_throughput", "output_throughput", "input_throughput", "total_throughput",
    "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms",
    "mean_itl_ms", "median_itl_ms", "p99_itl_ms", "mean_e2e_latency_ms", "median_e2e_latency_ms",
]
REQUIRED = ["completed", "output_throughput", "mean_tpot_ms", "median_tpot_ms"]
CLIENT_MODULE = "sglang.benchmark.serving"
OUTPUT_FILE = "bench_serving.jsonl"


def needs_sharegpt(serving: Dict[str, Any]) -> bool:
    """Whether sglang's client would fetch ShareGPT for these settings (random-ids draws token ids itself)."""
    return serving["dataset_name"] in ("random", "sharegpt") and not serving.get("dataset_path")


@dataclass
class ServingSettings:
    dataset_name: str = "random"
    input_len: int = 1024
    output_len: int = 512
    num_prompts: int = 12
    max_concurrency: int = 1
    range_ratio: float = 1.0
    seed: int = 1
    # The random dataset samples ShareGPT text; without a path sglang fetches it
    # from the model hub.  Offline clusters must point this at a local copy.
    dataset_path: Optional[str] = None
    # What the random/sharegpt datasets read when dataset_path is not given: resolved before any GPU job
    # (specrepro.util.datasets) and passed as --dataset-path, so the client never downloads inside the GPU job.
    sharegpt: Optional[DataSource] = None
    output_details: bool = True
    extra_args: List[str] = field(default_factory=list)


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


class BenchServing(BenchmarkKind):
    name = "bench_serving"
    block = "serving"
    settings_class = ServingSettings
    title = "bench_serving benchmarks"
    order = 1
    record_metrics = (*SUMMARY_FIELDS, "accept_length_server_lifetime")
    positive = ("input_len", "output_len", "num_prompts", "max_concurrency")
    client_settings = ("input_len", "output_len", "num_prompts", "max_concurrency", "range_ratio")
    output_files = (OUTPUT_FILE,)

    def problems(self, key: str, settings: Mapping[str, Any]) -> List[str]:
        problems = super().problems(key, settings)
        if needs_sharegpt(settings) and not settings.get("sharegpt"):
            problems.append(f"{key}.serving.sharegpt: sglang's {settings['dataset_name']} dataset reads ShareGPT, "
                            f"and without a file its client downloads it inside the GPU job; give "
                            f"serving.sharegpt (path, url) or serving.dataset_path")
        if not 0.0 <= settings["range_ratio"] <= 1.0:
            problems.append(f"{key}.serving.range_ratio: must be in [0, 1], got {settings['range_ratio']}")
        return problems

    def data_sources(self, bench_name: str, settings: Mapping[str, Any], data: Mapping[str, Any]) -> List:
        if needs_sharegpt(settings) and settings.get("sharegpt"):
            return [(settings["sharegpt"], f"benchmarks.{bench_name}.serving.sharegpt")]
        return []

    def client_data_files(self, settings: Mapping[str, Any], data: Mapping[str, Any]) -> List[str]:
        """Its dataset_path, or the ShareGPT file the datasets stage resolves for it."""
        if settings.get("dataset_path"):
            return [settings["dataset_path"]]
        return [settings["sharegpt"]["path"]] if needs_sharegpt(settings) else []

    def cost_figures(self, settings: Mapping[str, Any]) -> CostFigures:
        return CostFigures(settings["num_prompts"], settings["output_len"], settings["max_concurrency"])

    def warmup(self, settings: Mapping[str, Any], data: Mapping[str, Any], least: int) -> Warmup:
        n = max(least, settings["max_concurrency"])
        # about input_len tokens of text; the measured prompts are random too
        payloads = fixed_length_payloads([" ".join(f"warm{i}x{j}" for j in range(settings["input_len"]))
                                          for i in range(n)], settings["output_len"])
        return Warmup(payloads, settings["max_concurrency"])

    def client_step(self, settings: Mapping[str, Any], call: ClientCall) -> ClientStep:
        s = settings
        argv = [
            call.serving_python, "-m", CLIENT_MODULE,
            "--backend", "sglang",
            "--base-url", call.base_url,
            "--dataset-name", s["dataset_name"],
            "--random-input-len", str(s["input_len"]),
            "--random-output-len", str(s["output_len"]),
            "--random-range-ratio", str(s["range_ratio"]),
            "--num-prompts", str(s["num_prompts"]),
            "--max-concurrency", str(s["max_concurrency"]),
            # Each repeat draws the same prompts: the repeats measure the server, not the sample.
            "--seed", str(s["seed"]),
            "--output-file", f"{call.out_dir}/{OUTPUT_FILE}",
            "--disable-tqdm",
        ]
        if call.data_files:
            argv += ["--dataset-path", call.data_files[0]]
        if s.get("output_details"):
            argv.append("--output-details")
        return ClientStep(argv + list(s.get("extra_args") or []), beside_server=True)

    def read_outputs(self, settings: Mapping[str, Any], out_dir: Path) -> KindOutputs:
        parsed = parse_bench_serving(Path(out_dir) / OUTPUT_FILE)
        return KindOutputs(parsed["metrics"], [], parsed["requests"])

    def workload(self, settings: Mapping[str, Any]) -> str:
        s = settings
        return (f"{s.get('dataset_name')} prompts {s.get('input_len')}/{s.get('output_len')} tokens in/out x "
                f"{s.get('num_prompts')}, concurrency {s.get('max_concurrency')}")


KIND = BenchServing()
