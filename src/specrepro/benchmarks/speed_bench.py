"""SPEED-Bench (nvidia/SPEED-Bench) through sglang 0.5.20's own bench_serving, accept length per category.

sglang's client reads the prepared JSONL (`--dataset-name speed-bench --dataset-path FILE`: rows
{"category": ..., "turns": [...]}, the first turn the prompt; sglang/benchmark/datasets/speed_bench.py), keeps one
category with `--speed-bench-category` and fixes the output length with `--speed-bench-output-len`.  An accept length
per category needs a window per category, so one repeat runs the client once per category; sglang's client
spends about 12-25 s importing itself on a CPU, so the repeat is one process (`DRIVER`, run with the serving Python
beside the server) that imports it once and calls its own entry (`cli_main`) for each category in turn, writing
`speed_bench.<category>.jsonl` per category and, around each, the server's /metrics counters
(`speed_bench.windows.json`).  bench_serving's per-request output keeps no verify counts, so a category's accept
length is the counters' delta over its window (specrepro.measure.accept_length.from_metrics: tokens emitted per verify
step, a bound from below); the whole repeat's comes from the decode log and /metrics as bench_serving's does.

The kind `speed_bench` (settings block `speed_bench:`) records the whole benchmark's metrics and, per category,
`metric[category]` (specrepro.benchmarks.category_metric).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

from specrepro.measure import accept_length as al
from specrepro.benchmarks import category_metric
from specrepro.benchmarks.base import (BenchmarkKind, BenchOutputError, ClientCall, ClientStep, CostFigures,
                                       KindOutputs, Warmup, fixed_length_payloads)
from specrepro.benchmarks.bench_serving import parse_bench_serving
from specrepro.util.datasets import verify_file

CATEGORIES = ["low_entropy", "mixed", "high_entropy"]
WINDOWS_FILE = "speed_bench.windows.json"
COUNTERS = (al.SPEC_TOKENS_COUNTER, al.SPEC_VERIFY_COUNTER, al.REQUESTS_COUNTER)
# Per category: these of its bench_serving summary, beside its accept length.
CATEGORY_METRICS = ("completed", "output_throughput", "mean_tpot_ms", "median_tpot_ms", "mean_ttft_ms")

# One process per repeat: sglang's client imported once, its entry called once per category.  Run as
# `python -c DRIVER BASE_URL OUT_DIR CATEGORIES -- <bench_serving arguments>` with the serving Python (which has
# sglang, not specrepro).  Only the three accept-length counters of /metrics are kept.
DRIVER = f"""\
import json, sys, time, urllib.request
from sglang.benchmark.serving import cli_main
url, out, categories, common = sys.argv[1], sys.argv[2], sys.argv[3].split(","), sys.argv[5:]
def counters():
    try:
        text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    except OSError:
        return ""
    return "\\n".join(line for line in text.splitlines() if line.startswith({COUNTERS!r}))
windows = []
for category in categories:
    before, start = counters(), time.time()
    sys.argv = ["sglang.benchmark.serving", *common, "--speed-bench-category", category,
                "--output-file", f"{{out}}/speed_bench.{{category}}.jsonl"]
    cli_main()
    windows.append(dict(category=category, start=start, end=time.time(), metrics_before=before,
                        metrics_after=counters()))
    with open(f"{{out}}/{WINDOWS_FILE}", "w") as fh:
        json.dump(windows, fh)
"""


@dataclass
class SpeedBenchSettings:
    # The SPEED-Bench JSONL: the name of a `data` entry (conf/config.yaml: data.speed_bench, the prepared
    # throughput file; data.speed_bench_toy, the CPU testbed's small file in the same shape).
    dataset: str = "speed_bench"
    # Each runs as its own window (its own accept length), in this order.
    categories: List[str] = field(default_factory=lambda: list(CATEGORIES))
    # Requests per category (sampled from its rows, with replacement past their number; sglang's sampling).
    num_prompts: int = 16
    output_len: int = 512
    max_concurrency: int = 1
    seed: int = 1
    output_details: bool = True
    extra_args: List[str] = field(default_factory=list)


def category_file(category: str) -> str:
    return f"speed_bench.{category}.jsonl"


def read_windows(out_dir: Path) -> Dict[str, Dict[str, Any]]:
    path = Path(out_dir) / WINDOWS_FILE
    try:
        return {w["category"]: w for w in json.loads(path.read_text())}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BenchOutputError(f"{path}: speed_bench's category windows missing or malformed ({exc})") from exc


def category_accept_length(window: Mapping[str, Any]) -> Optional[float]:
    """Tokens emitted per verify step over one category's window (/metrics counters); None without them."""
    before = al.parse_prometheus(window.get("metrics_before") or "")
    after = al.parse_prometheus(window.get("metrics_after") or "")
    return al.from_metrics(before, after)["accept_length"] if after else None


def whole_metrics(rows: List[Dict[str, Any]], per_category: Dict[str, Dict[str, float]]) -> Dict[str, Any]:
    """The benchmark's own metrics over every category's requests."""
    duration = sum(m.get("duration", 0.0) for m in per_category.values())
    tokens = sum(r["output_len"] or 0 for r in rows if not r.get("error"))
    tpots = [r["tpot_ms"] for r in rows if r.get("tpot_ms") is not None]
    ttfts = [r["ttft_ms"] for r in rows if r.get("ttft_ms") is not None]
    return {"completed": float(sum(m["completed"] for m in per_category.values())), "duration": duration,
            "output_throughput": tokens / duration if duration > 0 else None,
            # per request, as bench_serving averages them
            "mean_tpot_ms": statistics.fmean(tpots) if tpots else None,
            "median_tpot_ms": statistics.median(tpots) if tpots else None,
            "mean_ttft_ms": statistics.fmean(ttfts) if ttfts else None}


def read_speed_bench(out_dir: Path, categories: List[str]) -> KindOutputs:
    """Every category's bench_serving output and window: the whole benchmark's metrics, then per category
    `metric[category]`; one requests table with each request's category."""
    windows = read_windows(out_dir)
    per_category: Dict[str, Dict[str, float]] = {}
    rows: List[Dict[str, Any]] = []
    for category in categories:
        parsed = parse_bench_serving(Path(out_dir) / category_file(category))
        if category not in windows:
            raise BenchOutputError(f"{Path(out_dir) / WINDOWS_FILE}: no window for category {category!r}")
        per_category[category] = parsed["metrics"]
        rows += [{**r, "request": len(rows) + i, "category": category} for i, r in enumerate(parsed["requests"])]
    metrics = whole_metrics(rows, per_category)
    for category, found in per_category.items():
        metrics[category_metric("accept_length", category)] = category_accept_length(windows[category])
        for name in CATEGORY_METRICS:
            metrics[category_metric(name, category)] = found.get(name)
    return KindOutputs(metrics, [], rows)


def first_turns(path: Path, categories: List[str]) -> List[Tuple[str, str]]:
    """(category, first turn) of the file's rows of these categories, in file order."""
    out = []
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            if row.get("category") in categories and row.get("turns"):
                out.append((row["category"], row["turns"][0]))
    return out


class SpeedBench(BenchmarkKind):
    name = "speed_bench"
    block = "speed_bench"
    settings_class = SpeedBenchSettings
    title = "SPEED-Bench benchmarks"
    record_metrics = ("completed", "duration", "output_throughput", "mean_tpot_ms", "median_tpot_ms",
                      "mean_ttft_ms")
    positive = ("num_prompts", "output_len", "max_concurrency")
    client_settings = ("num_prompts", "output_len", "max_concurrency")
    output_files = (*(category_file(c) for c in CATEGORIES), WINDOWS_FILE)

    def problems(self, key: str, settings: Mapping[str, Any]) -> List[str]:
        problems = super().problems(key, settings)
        categories = list(settings["categories"] or [])
        if not categories:
            problems.append(f"{key}.speed_bench.categories: name at least one ({', '.join(CATEGORIES)})")
        unknown = [c for c in categories if c not in CATEGORIES]
        if unknown:
            problems.append(f"{key}.speed_bench.categories: {unknown} are not SPEED-Bench categories "
                            f"({', '.join(CATEGORIES)})")
        if len(set(categories)) != len(categories):
            problems.append(f"{key}.speed_bench.categories: a category is listed twice")
        return problems

    def data_entries(self, settings: Mapping[str, Any]) -> List[Tuple[str, str]]:
        return [("speed_bench.dataset", settings["dataset"])]

    def client_data_files(self, settings: Mapping[str, Any], data: Mapping[str, Any]) -> List[str]:
        source = data.get(settings["dataset"])
        return [source["path"]] if source else []

    def cost_figures(self, settings: Mapping[str, Any]) -> CostFigures:
        return CostFigures(settings["num_prompts"] * len(settings["categories"]), settings["output_len"],
                           settings["max_concurrency"])

    def warmup(self, settings: Mapping[str, Any], data: Mapping[str, Any], least: int) -> Warmup:
        """The file's first turns, the categories taken in turn, at the measured output length."""
        name = settings["dataset"]
        turns = first_turns(verify_file(data[name], f"data.{name}"), list(settings["categories"]))
        if not turns:
            raise BenchOutputError(f"data.{name}: no rows of categories {list(settings['categories'])}")
        n = max(least, settings["max_concurrency"])
        groups = [[t for cat, t in turns if cat == c] for c in settings["categories"]]
        order = [g[i] for i in range(max(map(len, groups))) for g in groups if i < len(g)]
        payloads = fixed_length_payloads([order[i % len(order)] for i in range(n)], settings["output_len"])
        return Warmup(payloads, settings["max_concurrency"])

    def client_step(self, settings: Mapping[str, Any], call: ClientCall) -> ClientStep:
        s = settings
        common = [
            "--backend", "sglang", "--base-url", call.base_url,
            "--dataset-name", "speed-bench", "--dataset-path", call.data_files[0],
            "--speed-bench-output-len", str(s["output_len"]),
            "--num-prompts", str(s["num_prompts"]),
            "--max-concurrency", str(s["max_concurrency"]),
            # each repeat draws the same prompts of each category
            "--seed", str(s["seed"]),
            "--disable-tqdm",
            *(["--output-details"] if s.get("output_details") else []),
            *list(s.get("extra_args") or []),
        ]
        argv = [call.serving_python, "-c", DRIVER, call.base_url, call.out_dir, ",".join(s["categories"]), "--",
                *common]
        return ClientStep(argv, beside_server=True)

    def read_outputs(self, settings: Mapping[str, Any], out_dir: Path) -> KindOutputs:
        return read_speed_bench(Path(out_dir), list(settings["categories"]))

    def workload(self, settings: Mapping[str, Any]) -> str:
        return (f"SPEED-Bench ({settings['dataset']}) {', '.join(settings['categories'])}: "
                f"{settings['num_prompts']} prompts each, {settings['output_len']} tokens out, "
                f"concurrency {settings['max_concurrency']}")


KIND = SpeedBench()
