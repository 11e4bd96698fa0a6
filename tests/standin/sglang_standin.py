"""A stand-in for `python -m sglang.launch_server`, for tests only.

It takes the same command line as sglang 0.5.20's launch_server (unknown flags
are accepted and ignored), answers the same HTTP endpoints with the same
shapes, and writes the same log lines (formats from sglang 0.5.20:
entrypoints/http_server.py, managers/scheduler_components/metrics_reporter.py,
observability/metrics_collector.py, managers/tokenizer_manager.py).  It runs
no model: answers and timings come from a behaviour file named by
SPECREPRO_STANDIN_BEHAVIOUR (JSON), and its accept length follows what the
sglang tree on its PYTHONPATH does: a tree whose sample_draft_proposal takes
top_ks keeps the greedy accept length under rejection sampling; an unpatched
tree loses `rs_penalty` of it.  Never used outside tests.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import random
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

DEFAULTS = {
    "accept_length": 3.8,  # tokens per verify, greedy, argmax path
    "rs_penalty": 0.8,  # fraction kept by an unpatched tree with rejection sampling on
    "sampled_accept_length": 2.6,  # temperature>0, top_k all: same for every tree
    "step_ms": 2.0,  # one verify step
    "ttft_ms": 4.0,
    "jitter": 0.01,  # relative noise of step time
    "startup_s": 0.3,
    "accuracy": 0.94,
    "invalid_rate": 0.0,
    "gsm8k_test": None,  # path of test.jsonl: answers are looked up there
    "tokenizer_path": None,
    "seed": 0,
    # faults
    "crash_after_requests": None,
    "hang_after_requests": None,
    "never_ready": False,
    "malformed_json_after_requests": None,
    "garbage_log_lines": False,
    # names of environment variables printed to the log (a server that leaks secrets)
    "print_env": [],
    # misbehaviours, each applied only when its `when` matches the launch ({"patched": bool, <field>: value}):
    # {"when": {...}, "fields": [...]}: these flags are dropped (resolved to their default) and /server_info says so
    "ignore_flags": None,
    # {"when": {...}}: the decode log says `cuda graph: True` whatever the server runs
    "cuda_graph_log_true": None,
    # {"when": {...}, "fraction": f}: greedy answers of that share of questions (by hash) change
    "alter_outputs": None,
}

# sglang 0.5.20's flag -> ServerArgs field table (what its argument parser knows), shipped with specrepro;
# beside the stand-in where a test image copies both.
FLAG_TABLE = next(p for p in (Path(__file__).resolve().parent / "flag_table.json",
                              Path(__file__).resolve().parents[2] / "src" / "specrepro" / "flag_tables" / "0.5.20.json")
                  if p.is_file())


def _value(text: str):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def resolved_fields(argv) -> dict:
    """Every flag given, by ServerArgs field, typed as sglang's parser would (/server_info's fields)."""
    flags = {}
    for f in json.loads(FLAG_TABLE.read_text())["flags"]:
        for spelling in [f["name"], *f["aliases"]]:
            flags[spelling] = f
    out = {}
    i = 0
    while i < len(argv):
        tok = argv[i]
        f = flags.get(tok)
        if f is None:
            i += 1
            continue
        if f["kind"] == "bool":
            out[f["dest"]] = True
            i += 1
        elif f["kind"] == "list":
            vals = []
            i += 1
            while i < len(argv) and not argv[i].startswith("--"):
                vals.append(_value(argv[i]))
                i += 1
            out[f["dest"]] = vals
        else:
            out[f["dest"]] = _value(argv[i + 1]) if i + 1 < len(argv) else None
            i += 2
    return out

log = logging.getLogger("standin")


def parse_args(argv):
    p = argparse.ArgumentParser(allow_abbrev=True)
    p.add_argument("--model-path", "--model", dest="model_path", required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--tp-size", "--tensor-parallel-size", dest="tp_size", type=int, default=1)
    p.add_argument("--ep-size", "--ep", dest="ep_size", type=int, default=1)
    p.add_argument("--decode-log-interval", type=int, default=40)
    p.add_argument("--enable-metrics", action="store_true")
    p.add_argument("--speculative-algorithm", default=None)
    p.add_argument("--speculative-num-draft-tokens", type=int, default=None)
    p.add_argument("--speculative-use-rejection-sampling", action="store_true")
    p.add_argument("--disable-cuda-graph", action="store_true")
    p.add_argument("--served-model-name", default=None)
    args, _unknown = p.parse_known_args(argv)
    args.argv = list(argv)
    return args


def tree_is_patched() -> bool:
    """Does the sglang on PYTHONPATH carry top_ks into the draft proposal?"""
    for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        spec = Path(entry) / "sglang" / "srt" / "speculative" / "spec_utils.py"
        if spec.is_file():
            m = re.search(r"def sample_draft_proposal\((.*?)\):", spec.read_text(), re.S)
            return bool(m and "top_ks" in m.group(1))
    return False


class State:
    def __init__(self, args, behaviour):
        self.args = args
        self.b = behaviour
        self.lock = threading.Lock()
        self.requests = 0
        self.running = 0
        self.gen_tokens = 0
        self.verify_ct = 0
        self.finished = 0
        self.prompt_tokens = 0
        self.ready = False
        self.patched = tree_is_patched()
        self.fields = {"decode_log_interval": 40, "enable_metrics": False, **resolved_fields(args.argv)}
        ignored = self.matching("ignore_flags")
        for name in (ignored or {}).get("fields", []):
            # a server that drops the flag: it runs, and reports, the default
            self.fields[name] = False
            if hasattr(args, name):
                setattr(args, name, False)
        self.graph_log_lies = self.matching("cuda_graph_log_true") is not None
        self.alter = self.matching("alter_outputs")
        self.rng = random.Random(behaviour["seed"])
        self.answers = {}
        if behaviour.get("gsm8k_test"):
            with open(behaviour["gsm8k_test"]) as fh:
                for line in fh:
                    item = json.loads(line)
                    self.answers[item["question"].strip()] = item["answer"].split("####")[-1].strip().replace(",", "")
        self.prefix = " ".join(
            f"{k}{v}" for k, v in (("TP", 0 if args.tp_size > 1 else None), ("EP", 0 if args.ep_size > 1 else None))
            if v is not None
        )

    def matching(self, name: str):
        """The behaviour entry `name` when its `when` matches this launch, else None."""
        entry = self.b.get(name)
        if not entry:
            return None
        facts = {"patched": self.patched, **vars(self.args), **self.fields}
        return entry if all(facts.get(k) == v for k, v in (entry.get("when") or {}).items()) else None

    def accept_length(self, greedy: bool) -> float:
        if not self.args.speculative_algorithm:
            return 1.0
        if not greedy:
            return self.b["sampled_accept_length"]
        base = self.b["accept_length"]
        # The seed: with CUDA graphs off the real top_ks already reach the proposal.
        fixed = self.patched or self.args.disable_cuda_graph
        if self.args.speculative_use_rejection_sampling and not fixed:
            return base * self.b["rs_penalty"]
        return base


def log_line(msg: str) -> None:
    log.info(msg)


def make_handler(state: State):
    b = state.b

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # access log like uvicorn's, on stderr
            sys.stderr.write(f'INFO:     {self.client_address[0]} - "{self.requestline}" {args[1] if len(args) > 1 else ""}\n')

        def _json(self, code, obj):
            data = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _text(self, code, text, ctype="text/plain"):
            data = text.encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            path = self.path.split("?")[0]
            if path == "/health":
                return self._text(200 if state.ready else 503, "")
            if path == "/health_generate":
                return self._text(200 if state.ready else 503, "")
            if path == "/v1/models":
                name = state.args.served_model_name or state.args.model_path
                return self._json(200, {"object": "list", "data": [
                    {"id": name, "object": "model", "created": int(time.time()), "owned_by": "sglang", "root": name}]})
            if path in ("/model_info", "/get_model_info"):
                return self._json(200, {"model_path": state.args.model_path,
                                        "tokenizer_path": b.get("tokenizer_path") or state.args.model_path,
                                        "is_generation": True})
            if path in ("/server_info", "/get_server_info"):
                with state.lock:
                    avg = state.gen_tokens / state.verify_ct if state.verify_ct else None
                # sglang 0.5.20: {**server_args.resolved_dict(), "launch_command", scheduler info, "version"}
                return self._json(200, {**state.fields, "launch_command": " ".join(state.args.argv),
                                        "internal_states": [{"avg_spec_accept_length": avg}], "version": "0.5.20"})
            if path == "/metrics":
                if not state.args.enable_metrics:
                    return self._text(404, "Not Found")
                with state.lock:
                    labels = f'model_name="{state.args.model_path}",engine_type="unified",tp_rank="0",pp_rank="0"'
                    text = (
                        "# HELP sglang:generation_tokens_total Number of generation tokens processed.\n"
                        "# TYPE sglang:generation_tokens_total counter\n"
                        f'sglang:generation_tokens_total{{{labels},is_streaming="false"}} {float(state.gen_tokens)}\n'
                        "# HELP sglang:spec_verify_calls_total Number of speculative decoding verification calls.\n"
                        "# TYPE sglang:spec_verify_calls_total counter\n"
                        f"sglang:spec_verify_calls_total{{{labels}}} {float(state.verify_ct)}\n"
                        "# HELP sglang:num_requests_total Number of requests processed.\n"
                        "# TYPE sglang:num_requests_total counter\n"
                        f'sglang:num_requests_total{{{labels},is_streaming="false"}} {float(state.finished)}\n'
                        "# HELP sglang:prompt_tokens_total Number of prefill tokens processed.\n"
                        "# TYPE sglang:prompt_tokens_total counter\n"
                        f'sglang:prompt_tokens_total{{{labels},is_streaming="false"}} {float(state.prompt_tokens)}\n'
                    )
                return self._text(200, text, "text/plain; version=0.0.4; charset=utf-8")
            return self._text(404, "Not Found")

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            path = self.path.split("?")[0]
            if path == "/flush_cache":
                return self._text(200, "Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n")
            if path != "/generate":
                return self._text(404, "Not Found")
            req = json.loads(body or b"{}")
            with state.lock:
                state.requests += 1
                n = state.requests
            if b["crash_after_requests"] is not None and n > b["crash_after_requests"]:
                log_line("Scheduler hit an exception: RuntimeError: HIP error: an illegal memory access was encountered")
                sys.stderr.flush()
                os._exit(1)
            if b["hang_after_requests"] is not None and n > b["hang_after_requests"]:
                time.sleep(3600)
            if b["malformed_json_after_requests"] is not None and n > b["malformed_json_after_requests"]:
                return self._text(200, '{"text": "truncated', "application/json")
            return self._generate(req)

        def _generate(self, req):
            sp = req.get("sampling_params") or {}
            temperature = float(sp.get("temperature", 1.0))
            top_k = sp.get("top_k", -1)
            # SamplingParams: temperature 0 becomes temperature 1, top_k 1.
            greedy = temperature < 1e-6 or top_k == 1
            max_new = int(sp.get("max_new_tokens", 128))
            prompt = req.get("text") if req.get("text") is not None else req.get("input_ids")
            prompt_tokens = len(prompt.split()) if isinstance(prompt, str) else len(prompt or [])
            text = self._answer(prompt if isinstance(prompt, str) else "", max_new, bool(sp.get("ignore_eos")))
            completion = max_new if sp.get("ignore_eos") else max(1, min(max_new, len(text.split())))
            al = state.accept_length(greedy)
            # the prefill gives the first token; each verify step commits its correct drafts plus one bonus token
            steps = self._steps(completion - 1, al)
            verifies = len(steps)
            stream = bool(req.get("stream"))
            with state.lock:
                state.running += 1
            try:
                time.sleep(b["ttft_ms"] / 1000)
                if stream:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                produced = 1
                for step, step_tokens in enumerate(steps):
                    produced += step_tokens
                    time.sleep(b["step_ms"] / 1000 * (1 + state.rng.uniform(-b["jitter"], b["jitter"])))
                    self._decode_log(step_tokens)
                    if stream:
                        words = text.split()
                        partial = " ".join(words[: max(1, round(len(words) * produced / completion))])
                        self._chunk("data: " + json.dumps({"text": partial, "meta_info": self._meta(produced, steps[: step + 1], prompt_tokens, None)}) + "\n\n")
                meta = self._meta(completion, steps, prompt_tokens, {"type": "length", "length": completion})
                with state.lock:
                    state.gen_tokens += completion
                    state.verify_ct += verifies
                    state.finished += 1
                    state.prompt_tokens += prompt_tokens
                if stream:
                    self._chunk("data: " + json.dumps({"text": text, "meta_info": meta}) + "\n\n")
                    self._chunk("data: [DONE]\n\n")
                    self._chunk("")
                    return
                self._json(200, {"text": text, "output_ids": list(range(completion)), "meta_info": meta})
            finally:
                with state.lock:
                    state.running -= 1

        def _chunk(self, s):
            data = s.encode()
            self.wfile.write(f"{len(data):X}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        def _steps(self, tokens, al):
            """Tokens committed per verify step (1 + its correct drafts), `al` on average, summing to `tokens`."""
            if tokens <= 0 or not state.args.speculative_algorithm:
                return [1] * max(0, tokens)  # plain decoding: a token a step
            verifies = max(1, round(tokens / al))
            return [round((i + 1) * tokens / verifies) - round(i * tokens / verifies) for i in range(verifies)]

        def _meta(self, completion, steps, prompt_tokens, finish):
            draft = (state.args.speculative_num_draft_tokens or 2) - 1
            verifies = len(steps)
            correct = sum(t - 1 for t in steps)
            meta = {"id": hashlib.md5(str(time.time_ns()).encode()).hexdigest(), "finish_reason": finish,
                    "prompt_tokens": prompt_tokens, "completion_tokens": completion, "cached_tokens": 0,
                    "e2e_latency": 0.0}
            if state.args.speculative_algorithm and verifies:  # tokenizer_manager: only when spec_verify_ct > 0
                histogram = [0] * (max((t - 1 for t in steps), default=0) + 1)
                for t in steps:
                    histogram[t - 1] += 1
                meta.update(spec_verify_ct=verifies, spec_accept_length=completion / verifies,
                            spec_accept_rate=correct / (verifies * draft), spec_num_correct_drafts=correct,
                            spec_num_proposed_drafts=verifies * draft, spec_correct_drafts_histogram=histogram)
            return meta

        def _decode_log(self, al):
            # One line per verify step of one request (#running-req: 1), so the
            # line-weighted mean is exactly this stand-in's tokens per verify.
            running = 1
            usage = 0.01
            msg = (f"Decode batch, #running-req: {running}, #token: {running * 700}, token usage: {usage:.2f}, ")
            if state.args.speculative_algorithm:
                # metrics_reporter.py: rate = correct drafts / (verifies x (num_draft_tokens - 1))
                d = (state.args.speculative_num_draft_tokens or 2) - 1
                msg += f"accept len: {al:.2f}, accept rate: {(al - 1) / d:.2f}, "
            graph = state.graph_log_lies or not state.args.disable_cuda_graph
            msg += f"cuda graph: {graph}, gen throughput (token/s): {1000 * al / max(b['step_ms'], 1e-3):.2f}, #queue-req: 0"
            log_line(msg)
            if b["garbage_log_lines"]:
                sys.stderr.write("[2026-01-01 00:00:00 TP0] Decode batch, #running-req: 8, accept len: 9\n")
                sys.stderr.write("Decode batch, #running-req: x, accept len: garbage, accept rate: ?, #queue-req: 0\n")
                sys.stderr.write("\x00\x00 partial line without newline")
                sys.stderr.write("\n")

        def _answer(self, prompt, max_new, ignore_eos):
            if ignore_eos or "Question:" not in prompt:
                return " ".join(["tok"] * max_new)
            question = prompt.rsplit("Question:", 1)[1].rsplit("\nAnswer:", 1)[0].strip()
            truth = state.answers.get(question)
            h = int(hashlib.sha256(question.encode()).hexdigest(), 16) % 10_000 / 10_000
            if h < b["invalid_rate"]:
                return " I cannot tell."
            # a server that alters some greedy outputs keeps their answers: accuracy cannot see it, text agreement can
            lead = "So the answer is" if state.alter and h > 1 - state.alter["fraction"] else "The answer is"
            if truth is not None and h < b["invalid_rate"] + b["accuracy"] * (1 - b["invalid_rate"]):
                return f" Let me work it out step by step. {lead} {truth}."
            wrong = (int(truth) + 1) if truth and truth.lstrip("-").isdigit() else 7
            return f" Let me work it out step by step. {lead} {wrong}."

    return Handler


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    behaviour = dict(DEFAULTS)
    path = os.environ.get("SPECREPRO_STANDIN_BEHAVIOUR")
    if path:
        behaviour.update(json.loads(Path(path).read_text()))
    ms = ".%(msecs)03d" if os.environ.get("SGLANG_LOG_MS") else ""
    state = State(args, behaviour)
    prefix = (" " + state.prefix) if state.prefix else ""
    logging.basicConfig(level=logging.INFO, format=f"[%(asctime)s{ms}{prefix}] %(message)s",
                        datefmt="%Y-%m-%d %H:%M:%S", stream=sys.stderr)
    log_line(f"server_args=ServerArgs(model_path='{args.model_path}', tp_size={args.tp_size}, "
             f"speculative_algorithm={args.speculative_algorithm!r}, "
             f"speculative_use_rejection_sampling={args.speculative_use_rejection_sampling})")
    log_line(f"standin: sglang tree patched={state.patched}")
    # What a container gave this process: GPUs (device files), the model folder.
    dri = sorted(os.listdir("/dev/dri")) if os.path.isdir("/dev/dri") else []
    log_line(f"standin: devices kfd={os.path.exists('/dev/kfd')} dri={','.join(dri) or '-'} uid={os.getuid()}")
    if args.model_path.startswith("/") and not os.path.isdir(args.model_path):
        # sglang would take it for a hub id and fail offline; fail as plainly.
        log_line(f"standin: model path {args.model_path} is not a readable folder")
        sys.exit(1)
    for name in behaviour["print_env"]:
        log_line(f"environment {name}={os.environ.get(name, '')}")
    server = ThreadingHTTPServer((args.host, args.port), make_handler(state))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    if behaviour["never_ready"]:
        log_line("Load weight begin. avail mem=0.00 GB")
        while True:
            time.sleep(1)
    time.sleep(behaviour["startup_s"])
    state.ready = True
    log_line(f"INFO:     Uvicorn running on http://{args.host}:{args.port} (Press CTRL+C to quit)")
    log_line("The server is fired up and ready to roll!")
    try:
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
