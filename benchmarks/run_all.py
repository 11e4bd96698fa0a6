"""Speed targets, measured in one run and reported as ratios to their targets.

    .venv/bin/python benchmarks/run_all.py [--json out.json]

Each line: what, measured, target, ratio (measured / target for "at most"
targets, target / measured for "at least"), ok.  Not a test: numbers depend
on the machine; the ratio says how much room there is.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from conftest import SHARED_GSM8K, standin_overrides, write_behaviour  # noqa: E402

from specrepro.core.config import compose  # noqa: E402
from specrepro.stages.sources import cached_release_tree  # noqa: E402


def bench_plan(tmp: Path) -> dict:
    times = []
    for _ in range(3):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "specrepro.cli", "plan", f"results_dir={tmp / 'plan'}"], cwd=ROOT,
                       check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return {"what": "specrepro plan (median of 3), s", "measured": statistics.median(times), "target": 3.0, "kind": "at most"}


def _instant_cfg(tmp: Path, questions: int, parallel: int):
    tmp.mkdir(parents=True, exist_ok=True)
    behaviour = write_behaviour(tmp / "behaviour.json", tmp, step_ms=0.0, ttft_ms=0.0, startup_s=0.0, jitter=0.0)
    os.environ["SPECREPRO_TEST_PYTHON"] = sys.executable
    os.environ["SPECREPRO_STANDIN_BEHAVIOUR"] = str(behaviour)
    (tmp / "tokenizer").mkdir(exist_ok=True)
    overrides = standin_overrides(tmp / "results", tmp, arms=("main_rs_on",), benchmarks=("gsm8k",)) + [
        f"benchmarks.gsm8k.gsm8k.num_questions={questions}",
        f"benchmarks.gsm8k.gsm8k.parallel={parallel}", "serve.log_settle_s=0.5", "serve.warmup_requests=1"]
    cfg = compose(overrides)
    image = tmp / "image.json"
    # the pinned release's real tree: the preflight reads its version and flags
    tree = cached_release_tree("0.5.20", ROOT / ".cache", io.StringIO())
    image.write_text(json.dumps({"kind": "tree", "python": sys.executable, "pythonpath": str(tree)}))
    return cfg, image


def bench_serve_overhead(tmp: Path) -> dict:
    """serve_arm wall time around one 1-question GSM8K repeat against an instant server."""
    from specrepro.core.config import dump_resolved
    from specrepro.stages.serve import serve_bench_job

    cfg, image = _instant_cfg(tmp / "overhead", questions=1, parallel=1)
    Path(cfg["results_dir"]).mkdir(parents=True, exist_ok=True)
    (Path(cfg["results_dir"]) / "resolved_config.yaml").write_text(dump_resolved(cfg))
    start = time.perf_counter()
    with open(Path(cfg["results_dir"]).parent / "serve.log", "w") as log:
        serve_bench_job(cfg, "main_rs_on", image, [], Path(cfg["results_dir"]) / "arm.json", log)
    wall = time.perf_counter() - start
    return {"what": "pipeline overhead per arm (preflight, launch, ready, warm-up, client, settle, teardown), s",
            "measured": wall,
            "target": 10.0, "kind": "at most"}


def bench_gsm8k_client(tmp: Path) -> dict:
    """The GSM8K client's request rate at parallel 8 against an instantly answering server."""
    from specrepro import gsm8k
    from specrepro.core.campaign import Campaign
    from specrepro.serving.launch import LaunchContext, Launcher
    from specrepro.stages.serve import Server, free_port

    cfg, image = _instant_cfg(tmp / "client", questions=200, parallel=8)
    plan = Campaign(cfg).plan("main_rs_on")
    server = Server(plan, Launcher(plan), json.loads(image.read_text()), tmp / "client" / "server.log",
                    LaunchContext(port=free_port("127.0.0.1"), launch_id="bench"))
    server.start()
    try:
        server.wait_ready(30)
        settings = cfg["benchmarks"]["gsm8k"]["gsm8k"]
        items = gsm8k.load_test_set(cfg["data"][settings["test_data"]])
        start = time.perf_counter()
        gsm8k.run_gsm8k(server.base_url, settings, items)
        rate = 200 / (time.perf_counter() - start)
    finally:
        server.stop(5)
    # A GPU server at concurrency 8 answers GSM8K at ~10-20 requests/s (seed: 200 questions in ~15 s);
    # the client must stay far above that: 5x of 20 req/s.
    return {"what": "GSM8K client request rate at parallel 8 (stand-in on the same 2 cores), req/s",
            "measured": rate, "target": 100.0, "kind": "at least"}


def bench_analysis(tmp: Path) -> dict:
    """analyze + report over 100,000 request rows."""
    from specrepro.analysis.report import campaign_report

    rng = np.random.default_rng(0)
    cfg = compose([f"results_dir={tmp / 'analysis'}"])
    arms = list(cfg["experiment"]["arms"])
    runs, requests = [], []
    per = 100_000 // (len(arms) * 3 * 2)
    for arm in arms:
        for rep in (1, 2, 3):
            for metric, base in (("accept_length", 3.5), ("accuracy", 0.94), ("invalid_rate", 0.0)):
                runs.append({"arm": arm, "benchmark": "gsm8k", "repeat": rep, "metric": metric, "value": base * (1 + rng.normal(0, .01)), "unit": ""})
            for metric, base in (("mean_tpot_ms", 3.0), ("median_tpot_ms", 2.0), ("output_throughput", 300.0)):
                runs.append({"arm": arm, "benchmark": "bench_serving", "repeat": rep, "metric": metric, "value": base * (1 + rng.normal(0, .01)), "unit": ""})
            correct = rng.random(per) < 0.94
            # greedy outputs: one question in 50 worded differently per arm (the agreement check compares them all)
            requests += [{"arm": arm, "benchmark": "gsm8k", "repeat": rep, "request": i, "correct": bool(c), "itls_ms": None,
                          "output": f"Step by step. {'So the' if (i + len(arm)) % 50 == 0 else 'The'} answer is {i}."}
                         for i, c in enumerate(correct)]
            itls = np.where(rng.random((per, 8)) < 0.75, 0.8, 4.0)
            requests += [{"arm": arm, "benchmark": "bench_serving", "repeat": rep, "request": i, "correct": None,
                          "itls_ms": list(row)} for i, row in enumerate(itls)]
    out = tmp / "analysis"
    out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(runs).to_csv(out / "runs.csv", index=False)
    pd.DataFrame(requests).to_parquet(out / "requests.parquet", index=False)
    start = time.perf_counter()
    campaign_report(cfg, out / "runs.csv", out / "requests.parquet", [], ROOT / "conf" / "claims" / "eagle_topk_greedy.yaml",
                    out / "report.md", out / "report.html", out / "analysis.json")
    wall = time.perf_counter() - start
    return {"what": f"analysis + report of {len(requests):,} request rows, s", "measured": wall, "target": 5.0, "kind": "at most"}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    assert SHARED_GSM8K.is_dir(), f"GSM8K data not found at {SHARED_GSM8K}"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for bench in (bench_plan, bench_serve_overhead, bench_gsm8k_client, bench_analysis):
            row = bench(Path(tmp))
            m, t = row["measured"], row["target"]
            row["ratio"] = m / t if row["kind"] == "at most" else t / m
            row["ok"] = row["ratio"] <= 1.0
            rows.append(row)
            print(f"{row['what']:<78} {m:10.2f}  target {row['kind']} {t:7.2f}  ratio {row['ratio']:.2f}  "
                  f"{'ok' if row['ok'] else 'MISSED'}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
