"""Serve one arm: one server, warmed once, every benchmark and repeat against it.

The server runs in its own process group (or container) and is torn down on
success, failure, timeout, SIGINT and SIGTERM.  Each repeat is a separate
benchmark invocation; its accept length is read from three sources scoped to
its window (decode-log byte offsets, per-request meta_info, /metrics deltas).
A repeat whose `run.json` exists is not measured again, so a rerun after a
crash does only the missing work.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Dict, List, Optional

import requests

from specrepro import accept_length as al
from specrepro.campaign import BenchRun, Campaign
from specrepro.redaction import redact, secret_values

READY_LINE = "The server is fired up and ready to roll!"


class ServeError(RuntimeError):
    """A server that crashed, never became ready or stopped answering."""


def gpu_facts() -> Dict[str, str]:
    """GPU model, count, driver and ROCm/CUDA versions of this host, from the vendors' tools."""
    facts: Dict[str, str] = {}
    queries = {
        "nvidia": ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
        "rocm": ["rocm-smi", "--showproductname", "--showdriverversion", "--csv"],
    }
    for vendor, cmd in queries.items():
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.returncode == 0 and out.stdout.strip():
            lines = [line for line in out.stdout.strip().splitlines() if line.strip()]
            facts[f"{vendor}_smi"] = redact(" | ".join(lines))[:500]
            facts["gpu_count"] = str(len(lines) - (1 if vendor == "rocm" else 0))
    for path, key in (("/opt/rocm/.info/version", "rocm_version"),):
        if os.path.isfile(path):
            facts[key] = Path(path).read_text().strip()
    try:
        nvcc = subprocess.run(["nvcc", "--version"], capture_output=True, text=True, timeout=30).stdout
        if "release" in nvcc:
            facts["cuda_version"] = nvcc.split("release")[1].split(",")[0].strip()
    except (OSError, subprocess.TimeoutExpired):
        pass
    return facts or {"gpu": "none found"}


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no server log)"
    return redact("\n".join(text.splitlines()[-lines:]))


class Server:
    """A launched sglang server (bare process group or container)."""

    def __init__(self, campaign: Campaign, arm: str, image: Dict[str, Any], log_path: Path, port: int):
        self.campaign = campaign
        self.cfg = campaign.cfg
        self.arm = arm
        self.image = image
        self.log_path = log_path
        self.host = self.cfg["serve"]["host"]
        self.port = port
        self.base_url = f"http://{self.host}:{port}"
        self.proc: Optional[subprocess.Popen] = None
        self.container: Optional[str] = None
        self.launch_id = uuid.uuid4().hex[:12]

    # --- command lines ------------------------------------------------------
    def env(self) -> Dict[str, str]:
        plat = self.cfg["platform"]
        env = dict(os.environ)
        env.update({k: str(v) for k, v in (plat.get("server_env") or {}).items()})
        # Millisecond timestamps in the log; UTC so windows compare across hosts.
        env.update(SGLANG_LOG_MS="1", TZ="UTC", PYTHONUNBUFFERED="1")
        if self.image.get("pythonpath"):
            env["PYTHONPATH"] = os.pathsep.join([self.image["pythonpath"], env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        return env

    def server_argv(self) -> List[str]:
        plat = self.cfg["platform"]
        python = self.image.get("python") or plat["python"]
        head = [part.replace("{python}", python) for part in plat["server_command"]]
        flags = self.campaign.server_flags(self.arm, self.host, self.port)
        runtime = plat["container_runtime"]
        if runtime == "none":
            return head + flags
        self.container = f"specrepro-{self.campaign.name}-{self.arm}-{self.launch_id}"
        arm_dir = str(self.campaign.arm_dir(self.arm))
        if runtime in ("docker", "podman"):
            argv = [runtime, "run", "--rm", "--name", self.container, "--network", "host",
                    "-v", f"{arm_dir}:{arm_dir}", *plat.get("runtime_run_args", [])]
            # Secrets pass by name only: their values never reach a command line or log.
            for name in plat.get("passthrough_env") or []:
                argv += ["-e", name]
            for k, v in (plat.get("server_env") or {}).items():
                argv += ["-e", f"{k}={v}"]
            argv += ["-e", "SGLANG_LOG_MS=1", "-e", "TZ=UTC", self.image["image"]]
            return argv + head + flags
        # apptainer: the host's environment passes through by default.
        gpu_flag = "--rocm" if plat["accelerator"] == "rocm" else "--nv"
        return ["apptainer", "exec", gpu_flag, "--bind", f"{arm_dir}:{arm_dir}", self.image["image"], *head, *flags]

    def exec_prefix(self) -> List[str]:
        """How to run a client next to the server (inside its container)."""
        runtime = self.cfg["platform"]["container_runtime"]
        if runtime in ("docker", "podman"):
            return [runtime, "exec", self.container]
        if runtime == "apptainer":
            return ["apptainer", "exec", "--bind", f"{self.campaign.arm_dir(self.arm)}:{self.campaign.arm_dir(self.arm)}", self.image["image"]]
        return []

    # --- lifecycle ------------------------------------------------------------
    def start(self) -> None:
        argv = self.server_argv()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_fh = open(self.log_path, "ab", buffering=0)
        self.log_fh.write(f"# specrepro launch {self.launch_id}: {redact(shlex.join(argv))}\n".encode())
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=self.env(),
                                     start_new_session=True, stdin=subprocess.DEVNULL)
        self.argv = argv
        # The server's output reaches the log through a filter that masks
        # secret values: nothing the server prints can leak a token.
        self.pump = threading.Thread(target=self._pump_log, daemon=True)
        self.pump.start()

    def _pump_log(self) -> None:
        secrets = [v.encode() for v in secret_values()]
        for line in iter(self.proc.stdout.readline, b""):
            for value in secrets:
                line = line.replace(value, b"***")
            try:
                self.log_fh.write(line)
            except (ValueError, OSError):  # log closed during teardown
                break

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def crashed(self, what: str) -> ServeError:
        code = self.proc.poll() if self.proc else None
        return ServeError(
            f"arm {self.arm}: server {what} (exit code {code}); last lines of {self.log_path}:\n{log_tail(self.log_path)}"
        )

    def wait_ready(self, timeout_s: float) -> float:
        start = time.monotonic()
        while time.monotonic() - start < timeout_s:
            if not self.alive():
                raise self.crashed("exited before it was ready")
            try:
                ok = requests.get(f"{self.base_url}/health_generate", timeout=5).status_code == 200
            except requests.RequestException:
                ok = False
            if ok and READY_LINE in self.log_path.read_text(errors="replace"):
                return time.monotonic() - start
            time.sleep(0.2)
        raise ServeError(
            f"arm {self.arm}: server not ready after {timeout_s:.0f} s (serve.ready_timeout_s); "
            f"last lines of {self.log_path}:\n{log_tail(self.log_path)}"
        )

    def warm_up(self, n: int, timeout_s: float) -> None:
        for i in range(n):
            try:
                r = requests.post(f"{self.base_url}/generate", timeout=timeout_s,
                                  json={"text": "Warm-up request.", "sampling_params": {"max_new_tokens": 16, "temperature": 0}})
                r.raise_for_status()
            except requests.RequestException as exc:
                if not self.alive():
                    raise self.crashed("crashed during warm-up") from exc
                raise ServeError(f"arm {self.arm}: warm-up request {i} failed: {exc}") from exc

    def stop(self, grace_s: float) -> None:
        """Tear down the whole process group / container; idempotent."""
        if self.container:
            runtime = self.cfg["platform"]["container_runtime"]
            if runtime in ("docker", "podman"):
                subprocess.run([runtime, "stop", "-t", str(int(grace_s)), self.container],
                               capture_output=True, timeout=grace_s + 30)
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(timeout=30)
        if self.proc is not None:
            # Children that outlived the leader (sglang spawns schedulers) go too.
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if getattr(self, "pump", None) is not None:
            self.pump.join(timeout=10)
        if getattr(self, "log_fh", None):
            self.log_fh.close()
            self.log_fh = None


@contextmanager
def signals_raise():
    """SIGTERM (Snakemake, Slurm) becomes an exception so `finally` tears down."""
    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may own signal handlers
        return
    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def metrics_snapshot(server: Server) -> Dict[str, float]:
    if not server.cfg["serve"]["enable_metrics"]:
        return {}
    try:
        r = requests.get(f"{server.base_url}/metrics", timeout=10)
        return al.parse_prometheus(r.text) if r.status_code == 200 else {}
    except requests.RequestException:
        return {}


def run_benchmark(server: Server, run: BenchRun, out_dir: Path, log: IO) -> Dict[str, Any]:
    """One repeat: its window, its outputs, its accept length from three sources."""
    from specrepro import gsm8k
    from specrepro.bench_serving import parse_bench_serving

    campaign = server.campaign
    bench = campaign.benchmark(run.benchmark)
    out_dir.mkdir(parents=True, exist_ok=True)
    before = metrics_snapshot(server)
    start_offset = server.log_path.stat().st_size
    started = time.time()
    if bench["kind"] == "gsm8k":
        settings = bench["gsm8k"]
        items = gsm8k.load_test_set(settings["test_data"], campaign.cache_dir, campaign.cfg.get("offline", False))
        try:
            result = gsm8k.run_gsm8k(server.base_url, settings, items, campaign.cfg["serve"]["request_timeout_s"])
        except Exception as exc:
            if not server.alive():
                raise server.crashed(f"crashed during {run.benchmark} r{run.repeat}") from exc
            if isinstance(exc, requests.Timeout):
                raise ServeError(
                    f"arm {server.arm}: server stopped answering during {run.benchmark} r{run.repeat} "
                    f"(no answer in serve.request_timeout_s={campaign.cfg['serve']['request_timeout_s']} s); "
                    f"last lines of {server.log_path}:\n{log_tail(server.log_path)}") from exc
            raise ServeError(f"arm {server.arm}: {run.benchmark} r{run.repeat} failed: {exc}") from exc
        gsm8k.write_outputs(result, out_dir)
        records = result["records"]
        metrics = {"accuracy": result["summary"]["accuracy"], "invalid_rate": result["summary"]["invalid_rate"],
                   "output_throughput": result["summary"]["output_throughput"]}
        requests_rows = [{"request": r["index"], "latency_s": r["latency_s"], "completion_tokens": r["completion_tokens"],
                          "correct": r["correct"], "invalid": r["invalid"], "spec_verify_ct": r["spec_verify_ct"]}
                         for r in records]
    else:
        output_file = out_dir / "bench_serving.jsonl"
        if output_file.exists():
            output_file.unlink()  # sglang appends; a stale line from a dead attempt must not count
        argv = server.exec_prefix() + campaign.bench_serving_argv(
            run.benchmark, run.repeat, server.base_url, str(output_file),
            python=server.image.get("python") or campaign.cfg["platform"]["python"])
        print("$ " + redact(shlex.join(argv)), file=log, flush=True)
        env = server.env()
        env.setdefault("HF_HUB_OFFLINE", "1" if campaign.cfg.get("offline") else env.get("HF_HUB_OFFLINE", "0"))
        with open(out_dir / "client.log", "wb") as client_log:
            try:
                proc = subprocess.run(argv, stdout=client_log, stderr=subprocess.STDOUT, env=env,
                                      timeout=campaign.cfg["serve"]["bench_timeout_s"], start_new_session=True)
            except subprocess.TimeoutExpired as exc:
                raise ServeError(f"arm {server.arm}: {run.benchmark} r{run.repeat} exceeded serve.bench_timeout_s") from exc
        if not server.alive():
            raise server.crashed(f"crashed during {run.benchmark} r{run.repeat}")
        if proc.returncode != 0:
            raise ServeError(f"arm {server.arm}: bench_serving r{run.repeat} failed (exit {proc.returncode}); "
                             f"see {out_dir / 'client.log'}:\n{log_tail(out_dir / 'client.log', 20)}")
        parsed = parse_bench_serving(output_file)
        metrics = parsed["metrics"]
        records = []
        requests_rows = parsed["requests"]
    time.sleep(campaign.cfg["serve"]["log_settle_s"])
    end_offset = server.log_path.stat().st_size
    after = metrics_snapshot(server)
    ended = time.time()

    decode = al.parse_decode_lines(al.read_window(server.log_path, start_offset, end_offset))
    sources = {"decode_log": decode.accept_length,
               "meta_info": al.from_meta_info(records)["accept_length"] if records else None,
               "metrics": al.from_metrics(before, after)["accept_length"] if before or after else None}
    agreement = al.agreement(sources)
    # One accept length per run: the meta_info ratio where requests carry it
    # (exact per request), else the decode log.
    metrics["accept_length"] = next((sources[k] for k in ("meta_info", "decode_log", "metrics") if sources[k] is not None), None)
    for k, v in sources.items():
        metrics[f"accept_length_{k}"] = v
    run_record = {
        "arm": server.arm, "benchmark": run.benchmark, "repeat": run.repeat, "kind": bench["kind"],
        "server_launch": server.launch_id, "window": {"start": started, "end": ended,
                                                     "log_offsets": [start_offset, end_offset]},
        "metrics": metrics,
        "accept_length_sources": {"values": sources, "agreement": agreement, "decode_log": decode.as_dict()},
        "requests": requests_rows,
    }
    if agreement["agree"] is False:
        print(f"WARNING: accept-length sources disagree by {agreement['max_relative_spread']:.1%} "
              f"(> {al.DISAGREEMENT:.0%}) in {run.arm} {run.benchmark} r{run.repeat}: {sources}", file=log, flush=True)
    return run_record


def write_run(path: Path, record: Dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1, default=str))
    tmp.replace(path)  # a half-written run never counts as done


def serve_arm(cfg: Dict[str, Any], arm: str, image_record: Path, output: Path, log_path: Path) -> Dict[str, Any]:
    campaign = Campaign(cfg)
    image = json.loads(image_record.read_text())
    arm_dir = campaign.arm_dir(arm)
    arm_dir.mkdir(parents=True, exist_ok=True)
    serve = cfg["serve"]
    pending = [r for r in campaign.bench_runs(arm) if not _run_done(arm_dir / r.stem / "run.json")]
    with open(log_path, "a") as log, signals_raise():
        print(f"arm {arm}: {len(pending)} of {len(campaign.bench_runs(arm))} runs to measure", file=log, flush=True)
        launches = []
        if pending:
            port = serve["port"] or free_port(serve["host"])
            server = Server(campaign, arm, image, arm_dir / "server.log", port)
            try:
                server.start()
                launches.append({"launch_id": server.launch_id, "port": port,
                                 "argv": redact(shlex.join(server.argv)), "started": time.time()})
                print("$ " + launches[-1]["argv"], file=log, flush=True)
                ready_s = server.wait_ready(serve["ready_timeout_s"])
                launches[-1]["ready_s"] = ready_s
                server.warm_up(serve["warmup_requests"], serve["request_timeout_s"])
                for run in pending:
                    print(f"arm {arm}: {run.benchmark} r{run.repeat}", file=log, flush=True)
                    record = run_benchmark(server, run, arm_dir / run.stem, log)
                    write_run(arm_dir / run.stem / "run.json", record)
            finally:
                server.stop(serve["shutdown_grace_s"])
                print(f"arm {arm}: server {server.launch_id} stopped", file=log, flush=True)
        record = {"arm": arm, "runs": [r.stem for r in campaign.bench_runs(arm)], "launches": launches,
                  "placement": serve["placement"], "host": socket.gethostname(), "hardware": gpu_facts(),
                  "image": image, "server_log": str(arm_dir / "server.log"),
                  "server_args": campaign.server_args(arm)}
        _append_launches(arm_dir / "launches.jsonl", launches)
        write_run(output, record)
        return record


def _run_done(path: Path) -> bool:
    try:
        return "metrics" in json.loads(path.read_text())
    except (OSError, ValueError):
        return False


def _append_launches(path: Path, launches: List[Dict[str, Any]]) -> None:
    with open(path, "a") as fh:
        for launch in launches:
            fh.write(json.dumps(launch) + "\n")
