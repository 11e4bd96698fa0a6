"""The measuring job's steps: one arm, one server launch, warmed once, every benchmark and repeat against it.

The server's lifecycle (start, readiness, warm-up, a teardown on success, failure, timeout, SIGINT and SIGTERM) is
`specrepro.serving.server_process`'s; this module runs the preflight, the launch and its measurements.  Each repeat is a separate
benchmark invocation (the argv `plan` prints); its accept length is read from
three sources scoped to its window (decode-log byte offsets of this launch,
per-request meta_info, /metrics deltas).

Every run record carries its key (`ArmPlan.run_key`: the arm's resolved
server command, its image inputs, the benchmark's settings, the platform).  A
record is reused only under the same key; one whose key no longer matches is
moved aside to `superseded/` (kept, never counted) and measured again.  Every
launch, failed ones included, is appended to `launches.jsonl` when it starts
and when it ends.
"""

from __future__ import annotations

import io
import json
import os
import shlex
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import IO, Any, Dict, List, Optional, Sequence

import requests

from specrepro.measure import accept_length as al, effective_config
from specrepro.serving import gpu_facts
from specrepro.core.arm_plan import ArmPlan, BenchRun
from specrepro.util.fileio import write_json
from specrepro.serving.launch import LaunchContext, Launcher, granted_gpus, job_context
from specrepro.util.procs import free_port
from specrepro.util.redaction import redact
# ServeError is what a measuring job raises for its server: callers catch it from here
from specrepro.serving.server_process import ServeError, Server, log_tail, signals_raise
from specrepro.stages.gpu_check import refuse_failed
from specrepro.stages.image import ensure_image
from specrepro.stages.preflight import in_image_checks, judge_preflight, node_checks


def warmup_batches(plan: ArmPlan) -> List[Dict[str, Any]]:
    """Per benchmark of the arm: max(serve.warmup_requests, its concurrency) requests shaped like its own.

    Shaped like the measured requests (prompt length, output length, sampling,
    concurrency), so graph capture, allocator growth and kernel autotuning of
    that shape happen before the first measured window, not inside it.  Each
    kind says what its requests look like (GSM8K warms on the few-shot prefix
    and the test set's last questions, which the measured head of the set does
    not include).
    """
    batches = []
    for name in plan.benchmarks:
        warm = plan.kind(name).warmup(plan.settings(name), plan.data, plan.serve["warmup_requests"])
        n = len(warm.payloads)
        batches.append({"benchmark": name, "payloads": warm.payloads, "concurrency": max(1, min(warm.concurrency, n))})
    return batches


def metrics_snapshot(server: Server) -> Dict[str, float]:
    if not server.plan.serve["enable_metrics"]:
        return {}
    try:
        r = requests.get(f"{server.base_url}/metrics", timeout=10)
        return al.parse_prometheus(r.text) if r.status_code == 200 else {}
    except requests.RequestException:
        return {}


def _run_client(server: Server, run: BenchRun, argv: List[str], out_dir: Path, log: IO) -> None:
    serve = server.plan.serve
    print("$ " + redact(shlex.join(argv)), file=log, flush=True)
    with open(out_dir / "client.log", "wb") as client_log:
        try:
            proc = subprocess.run(argv, stdout=client_log, stderr=subprocess.STDOUT, env=server.env(),
                                  timeout=serve["bench_timeout_s"], start_new_session=True)
        except subprocess.TimeoutExpired as exc:
            raise ServeError(f"arm {server.arm}: {run.benchmark} r{run.repeat} exceeded serve.bench_timeout_s") from exc
    if not server.alive() or (proc.returncode != 0 and server.exited_within(serve["crash_settle_s"])):
        raise server.crashed(f"crashed during {run.benchmark} r{run.repeat}")
    if proc.returncode != 0:
        tail = log_tail(out_dir / "client.log", 20)
        if "timed out" in tail.lower() or "timeout" in tail.lower():
            raise ServeError(
                f"arm {server.arm}: server stopped answering during {run.benchmark} r{run.repeat} "
                f"(no answer in serve.request_timeout_s={serve['request_timeout_s']} s); "
                f"client log {out_dir / 'client.log'}:\n{tail}\nlast lines of this launch in {server.log_path}:\n"
                f"{server.tail()}")
        raise ServeError(f"arm {server.arm}: {run.benchmark} r{run.repeat} client failed (exit {proc.returncode}); "
                         f"see {out_dir / 'client.log'}:\n{tail}")


def _accept_length_sources(server: Server, records: List[Dict[str, Any]], window: Dict[str, Any],
                           metrics: Dict[str, Any]) -> Dict[str, Any]:
    """The window's accept length from three sources (decode log, meta_info, /metrics), their agreement and
    consistency; sets metrics["accept_length"] and one metric per source."""
    start_offset, end_offset = window["log_offsets"]
    decode = al.parse_decode_lines(al.read_window(server.log_path, start_offset, end_offset))
    d = effective_config.drafts_per_verify(server.effective)
    before, after = window["metrics_before"], window["metrics_after"]
    counters = al.from_metrics(before, after, drafts_per_verify=d) if before or after else {}
    sources = {"decode_log": decode.accept_length,
               "meta_info": al.from_meta_info(records)["accept_length"] if records else None,
               "metrics": counters.get("accept_length")}
    agreement = al.agreement(sources, upper={"metrics": counters.get("accept_length_upper")})
    consistency = {"decode_log": al.decode_consistency(decode, d),
                   "meta_info": al.meta_info_consistency(records, d + 1 if d else None)}
    consistency["consistent"] = all(c.get("consistent", True) for c in consistency.values())
    # One accept length per run, from the sources that need no log lines: the
    # meta_info counts where requests carry them (exact per request), else the
    # /metrics counters; the decode log (what users grep) is the cross-check.
    metrics["accept_length"] = next((sources[k] for k in ("meta_info", "metrics", "decode_log") if sources[k] is not None), None)
    for k, v in sources.items():
        metrics[f"accept_length_{k}"] = v
    return {"sources": sources, "agreement": agreement, "consistency": consistency, "decode": decode,
            "counters": counters}


def _measured_window(server: Server, run: BenchRun, argv: List[str], out_dir: Path, log: IO) -> Dict[str, Any]:
    """Run the client once; its window: wall times, server-log byte offsets and /metrics before and after."""
    before = metrics_snapshot(server)
    start_offset = server.log_path.stat().st_size
    started = time.time()
    _run_client(server, run, argv, out_dir, log)
    time.sleep(server.plan.serve["log_settle_s"])
    end_offset = server.log_path.stat().st_size
    after = metrics_snapshot(server)
    return {"start": started, "end": time.time(), "log_offsets": [start_offset, end_offset],
            "metrics_before": before, "metrics_after": after}


def run_benchmark(server: Server, run: BenchRun, out_dir: Path, log: IO) -> Dict[str, Any]:
    """One repeat: its window, its outputs (read by its kind), its accept length from three sources."""
    kind, settings = server.plan.kind(run.benchmark), server.plan.settings(run.benchmark)
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in kind.output_files:
        # sglang appends; a stale line from a dead attempt must not count
        (out_dir / stale).unlink(missing_ok=True)
    argv = server.launcher.client_argv(server.ctx, run, str(out_dir), python=server.python)
    window = _measured_window(server, run, argv, out_dir, log)
    outputs = kind.read_outputs(settings, out_dir)
    metrics, records = outputs.metrics, outputs.records
    found = _accept_length_sources(server, records, window, metrics)
    sources, agreement, consistency = found["sources"], found["agreement"], found["consistency"]
    run_record = {
        "arm": server.arm, "benchmark": run.benchmark, "repeat": run.repeat, "launch": run.launch,
        "kind": kind.name,
        "key": server.plan.run_key(run.benchmark, server.image.get("image_id", "")),
        "server_launch": server.launch_id, "client_argv": argv,
        "window": {"start": window["start"], "end": window["end"], "log_offsets": window["log_offsets"]},
        "metrics": metrics,
        "accept_length_sources": {"values": sources, "agreement": agreement, "decode_log": found["decode"].as_dict(),
                                  "metrics": found["counters"]},
        "accept_length_consistency": consistency,
        # verify steps by drafts accepted, pooled over the run's requests (meta_info)
        "acceptance_histogram": al.pooled_histogram(records),
        "effective_config": {"launch_id": server.launch_id, "valid": server.effective.get("valid")},
        "requests": outputs.requests,
    }
    if not consistency["consistent"]:
        print(f"WARNING: accept length and accept rate disagree in {run.arm} {run.benchmark} r{run.repeat}: "
              f"{json.dumps({k: v for k, v in consistency.items() if k != 'consistent'}, default=str)[:600]}",
              file=log, flush=True)
    if agreement["agree"] is False:
        print(f"WARNING: accept-length sources disagree by {agreement['max_relative_spread']:.1%} "
              f"(> {al.DISAGREEMENT:.0%}) in {run.arm} {run.benchmark} r{run.repeat}: {sources}", file=log, flush=True)
    return run_record


def record_state(path: Path, key: str) -> str:
    """`done` (a whole record under this key), `stale` (another key), `missing`."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return "missing"
    if "metrics" not in record:
        return "missing"
    return "done" if record.get("key") == key else "stale"


def set_aside(arm_dir: Path, run: BenchRun, log: IO) -> Path:
    """Move a run measured under another key out of the way: kept, never counted."""
    dest = arm_dir / "superseded" / time.strftime("%Y%m%dT%H%M%S") / run.stem
    dest.parent.mkdir(parents=True, exist_ok=True)
    (arm_dir / run.stem).rename(dest)
    print(f"arm {run.arm}: {run.stem} was measured under another configuration; kept in {dest}, measuring again",
          file=log, flush=True)
    return dest


class LaunchLog:
    """launches.jsonl: one line when a launch starts, one when it ends (ok or failed)."""

    def __init__(self, path: Path):
        self.path = path

    def append(self, event: Dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as fh:
            fh.write(json.dumps(event, default=str) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def read(self) -> List[Dict[str, Any]]:
        try:
            return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]
        except (OSError, ValueError):
            return []


def pending_runs(plan: ArmPlan, runs: List[BenchRun], image_id: str, log: IO) -> List[BenchRun]:
    """The runs to measure: no whole record under this key (one measured under another key is set aside)."""
    pending = []
    for run in runs:
        state = record_state(plan.arm_dir / run.stem / "run.json", plan.run_key(run.benchmark, image_id))
        if state == "stale":
            set_aside(plan.arm_dir, run, log)
        if state != "done":
            pending.append(run)
    return pending


def launch_event(plan: ArmPlan, server: Server, ctx: LaunchContext, launch: Optional[int], image_id: str,
                 preflight: Dict[str, Any], pending: List[BenchRun]) -> Dict[str, Any]:
    """The launch record's first line: everything the launch ran with, written before the server starts."""
    return {"event": "start", "launch_id": ctx.launch_id, "arm": plan.name, "launch": launch or 0,
            "host": socket.gethostname(), "port": ctx.port, "gpus": list(ctx.gpus), "gpu_source": ctx.gpu_source,
            "render_minors": ctx.renders, "device_gid": ctx.device_gid, "image": ctx.image, "image_id": image_id,
            "user": ctx.user, "placement": plan.serve["placement"], "argv": redact(shlex.join(server.argv)),
            "argv_list": [redact(a) for a in server.argv], "substitutions": ctx.substitutions(plan),
            "started": time.time(), "preflight_seconds": preflight["seconds"], "runs": [r.stem for r in pending]}


class ChecksWhileLoading:
    """Preflight's checks inside the image, run in a thread while the model loads (`preflight.during_load`): the
    server waits for no check, and a failed one stops it before any measurement."""

    def __init__(self, plan: ArmPlan, launcher: Launcher, ctx: LaunchContext, image: Dict[str, Any],
                 node: Dict[str, Any]):

        self.plan, self.node, self.started = plan, node, time.monotonic()
        self.checks: Optional[List[Dict[str, Any]]] = None
        self.error: Optional[BaseException] = None

        def run() -> None:
            try:
                self.checks = in_image_checks(plan, launcher, ctx, image)
            except BaseException as exc:  # raised where the job waits for it (`result`)
                self.error = exc

        self.thread = threading.Thread(target=run, name=f"preflight-{plan.name}", daemon=True)
        self.thread.start()

    def failed_early(self) -> None:
        """While the server loads: raise as soon as the checks have finished with a failure."""
        if not self.thread.is_alive() and (self.error or not all(c["ok"] for c in self.checks or [])):
            self.result(None)

    def result(self, log: Optional[IO]) -> Dict[str, Any]:
        """Wait for the checks; the whole preflight's record (the node's checks and these); PreflightError on a
        failure."""

        self.thread.join()
        if self.error is not None:
            raise self.error
        return judge_preflight(self.plan, self.node["checks"] + self.checks, self.node["seconds"]
                               + time.monotonic() - self.started, log or io.StringIO(),
                               self.plan.arm_dir / "preflight.json",
                               "while the model loaded; the server was stopped before any measurement")


def measure_launch(server: Server, pending: List[BenchRun], log: IO, checks: Optional[ChecksWhileLoading] = None,
                   timings: Optional[Dict[str, float]] = None) -> None:
    """One started server's measurements: readiness (and the checks that ran meanwhile), the /server_info check, warm-up,
    every pending run in turn."""
    plan, serve = server.plan, server.plan.serve
    timings = {} if timings is None else timings
    try:
        ready_s = server.wait_ready(serve["ready_timeout_s"], progress=log,
                                    abort=checks.failed_early if checks is not None else None)
    except ServeError:
        # A server that dies while the checks still run most likely died of what they check (a model folder the
        # image cannot read): their verdict names the cause, the crash stays chained to it.
        if checks is not None:
            checks.result(log)
        raise
    timings["ready_s"] = round(ready_s, 3)
    print(f"arm {plan.name}: server ready after {ready_s:.1f} s", file=log, flush=True)
    if checks is not None:
        ready = time.monotonic()
        checks.result(log)
        timings["checks_after_ready_s"] = round(time.monotonic() - ready, 3)
    measuring = time.monotonic()
    check = effective_config.probe(server.base_url, dict(plan.requested_fields), plan.sglang_version)
    check["launch_id"] = server.launch_id
    write_json(plan.arm_dir / "effective_config" / f"{server.launch_id}.json", check)
    for problem in check["problems"]:
        print(f"WARNING: arm {plan.name} is not what it says (its numbers will not count toward verdicts): "
              f"{problem}", file=log, flush=True)
    server.effective = check
    server.warm_up(warmup_batches(plan), serve["request_timeout_s"], log)
    for i, run in enumerate(pending, 1):
        print(f"arm {plan.name}: {run.benchmark} r{run.repeat} ({i} of {len(pending)})", file=log, flush=True)
        record = run_benchmark(server, run, plan.arm_dir / run.stem, log)
        write_json(plan.arm_dir / run.stem / "run.json", record)
    timings["measure_s"] = round(time.monotonic() - measuring, 3)


def launch_and_measure(plan: ArmPlan, image: Dict[str, Any], pending: List[BenchRun], launch: Optional[int],
                       launches: LaunchLog, log: IO) -> None:
    """Preflight, one server launch, its measurements, and its teardown, with the job's one launch context.

    The node's own time around the server's start-up and measurements (what a launch costs beyond them) is timed
    into the launch's end event: the checks before the start, the GPU facts, the teardown.
    """

    job_started = time.monotonic()
    serve = plan.serve
    gpus, gpu_source = granted_gpus(plan)
    image_id = image.get("image_id", "")
    image = ensure_image(plan, image, log)
    launcher = Launcher(plan)
    ctx = job_context(plan, image, gpus, gpu_source, port=serve["port"] or free_port(serve["host"]))
    during_load = plan.preflight["during_load"]
    # Before the model loads: seconds here, not GPU-hours after it.
    started = time.monotonic()
    checks = node_checks(plan, launcher, ctx, log)
    if not during_load:
        checks += in_image_checks(plan, launcher, ctx, image)
    preflight = judge_preflight(plan, checks, time.monotonic() - started, log, plan.arm_dir / "preflight.json",
                                "before the server started")
    facts_started = time.monotonic()
    facts = {"before": gpu_facts.collect(plan, launcher, ctx, image, log)}
    timings = {"preflight_before_start_s": preflight["seconds"],
               "gpu_facts_before_s": round(time.monotonic() - facts_started, 3)}
    server = Server(plan, launcher, image, plan.arm_dir / "server.log", ctx)
    event = launch_event(plan, server, ctx, launch, image_id, preflight, pending)
    launches.append(event)
    status, error = "failed", None
    stopping = time.monotonic()

    def gpus_after() -> Dict[str, Any]:
        nonlocal stopping
        stopping = time.monotonic()
        return gpu_facts.collect(plan, launcher, ctx, image, log)

    try:
        print("$ " + event["argv"], file=log, flush=True)
        while_loading = ChecksWhileLoading(plan, launcher, ctx, image, preflight) if during_load else None
        with server.running(serve["idle_shutdown_grace_s"], serve["shutdown_grace_s"], while_stopping=gpus_after):
            measure_launch(server, pending, log, while_loading, timings)
        status = "ok"
    except BaseException as exc:
        error = redact(f"{type(exc).__name__}: {exc}")[:4000]
        raise
    finally:
        facts["after"] = getattr(server, "stopped_with", None)
        write_json(plan.arm_dir / "gpu_facts.json", facts)
        timings["teardown_s"] = round(time.monotonic() - stopping, 3)
        timings["job_s"] = round(time.monotonic() - job_started, 3)
        timings["node_overhead_s"] = round(timings["job_s"] - timings.get("ready_s", 0.0)
                                           - timings.get("measure_s", 0.0), 3)
        launches.append({"event": "end", "launch_id": ctx.launch_id, "status": status, "error": error,
                         "ended": time.time(), "log_offsets": [server.log_start, _size(server.log_path)],
                         "timings": timings})
        print(f"arm {plan.name}: server {server.launch_id} stopped ({status}); the node's time beyond start-up and "
              f"measurement {timings['node_overhead_s']:.1f} s ({', '.join(f'{k} {v}' for k, v in timings.items())})",
              file=log, flush=True)


def launch_record(plan: ArmPlan, launch: int, measured: Dict[str, Dict[str, Any]], launches: LaunchLog,
                  missing: List[str]) -> Dict[str, Any]:
    """One launch's record: what it measured and when (the launch order is read from these)."""
    used = sorted({rec["server_launch"] for rec in measured.values()})
    events = {e["launch_id"]: e for e in launches.read() if e.get("event") == "start"}
    return {"arm": plan.name, "launch": launch, "launch_ids": used,
            "started": min((events[u]["started"] for u in used if u in events), default=None),
            "runs": sorted(measured), "missing_at_start": missing}


def arm_record(plan: ArmPlan, image: Dict[str, Any], measured: Dict[str, Dict[str, Any]], launches: LaunchLog,
               missing: List[str]) -> Dict[str, Any]:
    """The arm's record: its runs, the launches that measured them, where it ran, and whether it ran what it says."""
    arm_dir = plan.arm_dir
    used = sorted({rec["server_launch"] for rec in measured.values()})
    facts_path = arm_dir / "gpu_facts.json"
    facts = json.loads(facts_path.read_text()) if facts_path.is_file() else {"before": gpu_facts.no_gpu_facts()}
    checks = [effective_config.read_check(arm_dir / "effective_config" / f"{launch_id}.json", launch_id)
              for launch_id in used]
    validity = effective_config.arm_validity(checks, measured, bool(plan.requested_fields.get("disable_cuda_graph")))
    return {"arm": plan.name, "runs": {stem: {"key": rec["key"], "server_launch": rec["server_launch"]}
                                       for stem, rec in measured.items()},
            "launches": [e for e in launches.read() if e.get("launch_id") in used],
            "placement": plan.serve["placement"], "host": socket.gethostname(), "image": image,
            "server_log": str(arm_dir / "server.log"), "server_args": dict(plan.server_args),
            "gpu_facts": facts, "fingerprint": gpu_facts.fingerprint(facts.get("before"), image.get("image_id")),
            "effective_config": checks, "validity": validity, "missing_at_start": missing}


def serve_arm(plan: ArmPlan, image_record: Path, output: Path, log: IO,
              launch: Optional[int] = None, measure: bool = True,
              launch_numbers: Optional[Sequence[int]] = None,
              scheduled_remeasure: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """Measure the arm's missing runs on one server launch, then write its record.

    `launch`: one of the arm's `experiment.launches` (its runs only; `output` is
    that launch's record).  `measure=False`: every run must be measured already
    (by the launch jobs); only the arm record is written, of the launches in
    `launch_numbers` (default all: a sequential design's arm ran those its rounds asked for).
    `scheduled_remeasure`: the rerun trigger's value this job was scheduled with (Campaign.runs_to_remeasure),
    kept in the record as it was, so that the next invocation reads the same value and does not run the job again.
    """
    image = json.loads(image_record.read_text())
    plan.arm_dir.mkdir(parents=True, exist_ok=True)
    runs = plan.runs_of(launch)
    if launch_numbers is not None:
        runs = [r for r in runs if r.launch in set(launch_numbers)]
    # the runs with no record at all: Snakemake's rerun trigger for this job (Campaign.runs_to_remeasure); a job
    # run again for another reason (a rebuilt input) with nothing missing keeps the value it was scheduled with
    missing = plan.runs_without_record(launch)
    if scheduled_remeasure is not None and not missing:
        missing = list(scheduled_remeasure)
    pending = pending_runs(plan, runs, image.get("image_id", ""), log)
    launches = LaunchLog(plan.arm_dir / "launches.jsonl")
    if not Path(plan.resolved_config).is_file():
        raise ServeError(f"{plan.resolved_config} is missing: the host-side clients read it (the resolved_config rule, "
                         f"or `specrepro run`, writes it first)")
    with signals_raise():
        which = f"arm {plan.name}" + (f" launch {launch} of {plan.launches}" if launch else "")
        print(f"{which}: {len(pending)} of {len(runs)} runs to measure", file=log, flush=True)
        if pending and not measure:
            raise ServeError(f"arm {plan.name}: {len(pending)} runs not measured by its launch jobs "
                             f"({', '.join(r.stem for r in pending[:5])}); run the campaign again")
        if pending:
            launch_and_measure(plan, image, pending, launch, launches, log)
        measured = {r.stem: json.loads((plan.arm_dir / r.stem / "run.json").read_text()) for r in runs}
        record = (launch_record(plan, launch, measured, launches, missing) if launch
                  else arm_record(plan, image, measured, launches, missing))
        write_json(output, record)
        return record


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def serve_bench_job(plan: ArmPlan, image_record: Path, gpu_checks: List[Path], output: Path,
                    log: IO, launch: Optional[int] = None, measure: bool = True,
                    launch_numbers: Optional[Sequence[int]] = None,
                    scheduled_remeasure: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """The measuring job: the arm's plan, as the Snakefile built it, handed to everything below."""

    refuse_failed(gpu_checks)
    return serve_arm(plan, image_record, output, log, launch=launch, measure=measure,
                     launch_numbers=launch_numbers, scheduled_remeasure=scheduled_remeasure)
