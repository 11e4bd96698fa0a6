"""GSM8K with the semantics of sglang 0.5.20's `sglang.test.few_shot_gsm8k`.

Shots are the test set's first `num_shots` items; the questions are its first
`num_questions` (the shots included, as sglang does); prompt "Question: q\\nAnswer:"
with "Question: q\\nAnswer: a\\n\\n" per shot; stop at "Question",
"Assistant:", "<|separator|>"; the answer is the last integer of the output
(commas dropped); no integer is INVALID.  Requests go to sglang's native
`/generate`, `parallel` at a time, and every question's record is kept.

The kind `gsm8k` (settings block `gsm8k:`): its client is `specrepro gsm8k` on the host (plain HTTP), its accept
length comes from every question's meta_info.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import time
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

import requests

from specrepro.benchmarks.base import (
    BenchOutputError, BenchmarkKind, ClientCall, ClientStep, CostFigures, KindOutputs, Warmup)
from specrepro.util.fileio import write_json, write_text_atomic
from specrepro.util.datasets import verify_file

INVALID = -9999999
STOP = ["Question", "Assistant:", "<|separator|>"]


@dataclass
class Gsm8kSettings:
    num_questions: int = 200
    num_shots: int = 5
    temperature: float = 0.0
    # None: sglang's default (the whole vocabulary); set it for a sampled workload.
    top_k: Optional[int] = None
    max_new_tokens: int = 512
    parallel: int = 8
    # The test set: the name of a `data` entry.
    test_data: str = "gsm8k"


def answer_value(text: str) -> int:
    numbers = re.findall(r"\d+", text.replace(",", ""))
    if not numbers:
        return INVALID
    try:
        return ast.literal_eval(numbers[-1])
    except (SyntaxError, ValueError):
        return INVALID


def one_example(item: Dict[str, str], include_answer: bool) -> str:
    text = "Question: " + item["question"] + "\nAnswer:"
    if include_answer:
        text += " " + item["answer"]
    return text


def few_shot_prefix(items: List[Dict[str, str]], k: int) -> str:
    return "".join(one_example(items[i], True) + "\n\n" for i in range(k))


def load_test_set(data: Dict[str, Any], key: str = "data.gsm8k") -> List[Dict[str, str]]:
    """The test file at its configured path, held to its sha256 (the datasets stage fetched and verified it)."""

    with open(verify_file(data, key)) as fh:
        return [json.loads(line) for line in fh if line.strip()]


def server_tpot_ms(meta: Dict[str, Any]) -> Optional[float]:
    """A request's time per output token after its first, from sglang 0.5.20's own meta_info timestamps
    (observability/req_time_stats.py: `prefill_finished_time`, converted to wall time, and `request_finished_ts`):
    the client does not stream, so the server's clock is the one that sees the first token.  It includes the
    detokenizer's hop, as bench_serving's client-side TPOT includes the HTTP stream's.  None without the two
    timestamps (an older server) or with fewer than two tokens."""
    first, last, tokens = meta.get("prefill_finished_time"), meta.get("request_finished_ts"), meta.get("completion_tokens")
    if not first or not last or not tokens or tokens < 2 or last < first:
        return None
    return (last - first) * 1000.0 / (tokens - 1)


def run_gsm8k(base_url: str, settings: Dict[str, Any], items: List[Dict[str, str]],
              timeout_s: float = 600.0) -> Dict[str, Any]:
    """Ask every question; return the per-question records and the summary."""
    prefix = few_shot_prefix(items, settings["num_shots"])
    questions = items[: settings["num_questions"]]
    sampling = sampling_params(settings)
    session = requests.Session()
    adapter = requests.adapters.HTTPAdapter(pool_connections=settings["parallel"], pool_maxsize=settings["parallel"])
    session.mount("http://", adapter)

    def ask(index: int) -> Dict[str, Any]:
        prompt = prefix + one_example(questions[index], False)
        label = answer_value(questions[index]["answer"])
        start = time.perf_counter()
        resp = session.post(f"{base_url}/generate", json={"text": prompt, "sampling_params": sampling},
                            timeout=timeout_s)
        latency = time.perf_counter() - start
        if resp.status_code != 200:
            raise RuntimeError(f"/generate answered {resp.status_code} for question {index}: {resp.text[:300]}")
        try:
            body = resp.json()
            output = body["text"]
            meta = body.get("meta_info") or {}
            output_ids = body.get("output_ids")
        except (ValueError, KeyError, TypeError) as exc:
            raise RuntimeError(f"/generate returned malformed JSON for question {index}: {resp.text[:300]!r}") from exc
        pred = answer_value(output)
        return {
            "index": index,
            "prompt_sha256": hashlib.sha256(prompt.encode()).hexdigest(),
            "output": output,
            # the tokens themselves (sglang's /generate returns them): a toy model's outputs are checked by id
            "output_ids": output_ids,
            "answer": pred,
            "label": label,
            "correct": pred == label,
            "invalid": pred == INVALID,
            "latency_s": latency,
            "completion_tokens": meta.get("completion_tokens"),
            "spec_verify_ct": meta.get("spec_verify_ct"),
            "spec_accept_length": meta.get("spec_accept_length"),
            "spec_accept_rate": meta.get("spec_accept_rate"),
            "spec_num_correct_drafts": meta.get("spec_num_correct_drafts"),
            "spec_correct_drafts_histogram": meta.get("spec_correct_drafts_histogram"),
            "tpot_ms": server_tpot_ms(meta),
            "meta_info": meta,
        }

    started = time.time()
    tic = time.perf_counter()
    with ThreadPoolExecutor(max_workers=settings["parallel"]) as pool:
        futures = [pool.submit(ask, i) for i in range(len(questions))]
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        failed = [f for f in futures if f in done and f.exception() is not None]
        if failed:
            # The repeat has failed: questions not yet sent are not sent, so a server that stopped answering costs
            # one request timeout, not one per question left.
            pool.shutdown(wait=False, cancel_futures=True)
            raise failed[0].exception()
        records = [f.result() for f in futures]
    wall = time.perf_counter() - tic
    n = len(records)
    tokens = sum(r["completion_tokens"] or 0 for r in records)
    tpots = [r["tpot_ms"] for r in records if r["tpot_ms"] is not None]
    return {
        "records": records,
        "summary": {
            "questions": n,
            "accuracy": sum(r["correct"] for r in records) / n,
            "invalid_rate": sum(r["invalid"] for r in records) / n,
            "correct": sum(r["correct"] for r in records),
            "latency_s": wall,
            "output_throughput": tokens / wall if wall > 0 else None,
            # bench_serving's mean TPOT averages per request too; None where sglang gave no timestamps
            "mean_tpot_ms": sum(tpots) / len(tpots) if tpots else None,
            "started_at": started,
        },
    }


def write_outputs(result: Dict[str, Any], output_dir: Path) -> None:
    write_text_atomic(output_dir / "questions.jsonl", "".join(json.dumps(rec) + "\n" for rec in result["records"]))
    write_json(output_dir / "summary.json", result["summary"])


def read_outputs(output_dir: Path) -> Dict[str, Any]:
    """What `write_outputs` wrote (the client ran as its own process)."""
    try:
        records = [json.loads(line) for line in (output_dir / "questions.jsonl").read_text().splitlines() if line]
        summary = json.loads((output_dir / "summary.json").read_text())
    except (OSError, ValueError) as exc:
        raise BenchOutputError(f"{output_dir}: GSM8K client outputs missing or malformed ({exc})") from exc
    return {"records": records, "summary": summary}


def sampling_params(settings: Mapping[str, Any]) -> Dict[str, Any]:
    sampling = {"temperature": settings["temperature"], "max_new_tokens": settings["max_new_tokens"], "stop": STOP}
    if settings.get("top_k") is not None:
        sampling["top_k"] = settings["top_k"]
    return sampling


class Gsm8k(BenchmarkKind):
    name = "gsm8k"
    block = "gsm8k"
    settings_class = Gsm8kSettings
    title = "GSM8K-style benchmarks"
    order = 0
    record_metrics = ("accuracy", "invalid_rate", "output_throughput", "mean_tpot_ms")
    positive = ("num_questions", "max_new_tokens", "parallel")
    client_settings = ("num_questions", "num_shots", "temperature", "top_k", "max_new_tokens", "parallel")
    output_files = ("questions.jsonl", "summary.json")

    def problems(self, key: str, settings: Mapping[str, Any]) -> List[str]:
        problems = super().problems(key, settings)
        if settings["num_shots"] < 0:
            problems.append(f"{key}.gsm8k.num_shots: must be >= 0")
        if settings["temperature"] < 0:
            problems.append(f"{key}.gsm8k.temperature: must be >= 0")
        return problems

    def data_entries(self, settings: Mapping[str, Any]) -> List[Tuple[str, str]]:
        return [("gsm8k.test_data", settings["test_data"])]

    def cost_figures(self, settings: Mapping[str, Any]) -> CostFigures:
        return CostFigures(settings["num_questions"], settings["max_new_tokens"], settings["parallel"])

    def warmup(self, settings: Mapping[str, Any], data: Mapping[str, Any], least: int) -> Warmup:
        """The few-shot prefix and the test set's last questions, which the measured head of the set does not
        include."""
        n = max(least, settings["parallel"])
        items = load_test_set(data[settings["test_data"]], f"data.{settings['test_data']}")
        prefix = few_shot_prefix(items, settings["num_shots"])
        sampling = sampling_params(settings)
        payloads = [{"text": prefix + one_example(item, False), "sampling_params": sampling} for item in items[-n:]]
        return Warmup(payloads, settings["parallel"])

    def client_step(self, settings: Mapping[str, Any], call: ClientCall) -> ClientStep:
        return ClientStep([
            call.host_python, "-m", "specrepro.cli", "gsm8k", "--base-url", call.base_url, "--benchmark",
            call.benchmark, "--repeat", str(call.repeat), "--output-dir", call.out_dir, "--config",
            call.resolved_config,
        ], beside_server=False)

    def read_outputs(self, settings: Mapping[str, Any], out_dir: Path) -> KindOutputs:
        result = read_outputs(out_dir)
        records, summary = result["records"], result["summary"]
        metrics = {"accuracy": summary["accuracy"], "invalid_rate": summary["invalid_rate"],
                   "output_throughput": summary["output_throughput"], "mean_tpot_ms": summary.get("mean_tpot_ms")}
        rows = [{"request": r["index"], "latency_s": r["latency_s"], "completion_tokens": r["completion_tokens"],
                 "correct": r["correct"], "invalid": r["invalid"], "spec_verify_ct": r["spec_verify_ct"],
                 "tpot_ms": r.get("tpot_ms"), "spec_num_correct_drafts": r.get("spec_num_correct_drafts"),
                 "output": r["output"], "prompt_sha256": r["prompt_sha256"]}
                for r in records]
        return KindOutputs(metrics, records, rows)

    def greedy(self, settings: Mapping[str, Any]) -> bool:
        return settings.get("temperature") == 0

    def questions(self, settings: Mapping[str, Any]) -> Optional[int]:
        return settings["num_questions"]

    def workload(self, settings: Mapping[str, Any]) -> str:
        return (f"GSM8K {settings['num_questions']} questions, {settings['num_shots']}-shot, "
                f"<= {settings['max_new_tokens']} new tokens, T {settings['temperature']:g}")


KIND = Gsm8k()
