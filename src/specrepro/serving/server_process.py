"""A launched sglang server's lifecycle: start, readiness, warm-up, stop, as a context manager.

`Server(...).running(...)` starts the server (a bare process group, or a container through the platform's runtime,
`specrepro.serving.launch.Launcher`) and, whatever happens inside the block (a failed check, a crash, a timeout, SIGINT or
SIGTERM turned into an exception by `signals_raise`), stops it on the way out: the process group or container goes,
its secrets are removed, its log is closed.  What the server's output says reaches its log through a filter that
masks secret values.  This module owns the process and its HTTP readiness; what is measured against it (the runs,
their windows and records) is `specrepro.stages.serve`'s.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Callable, Dict, Iterator, List, Optional

import requests

from specrepro.core.arm_plan import ArmPlan
from specrepro.util.errors import SpecreproError
from specrepro.serving.launch import LaunchContext, Launcher
from specrepro.util.redaction import mask_bytes, redact, secret_values

READY_LINE = "The server is fired up and ready to roll!"


class ServeError(SpecreproError, RuntimeError):
    """A server that crashed, never became ready or stopped answering."""


def log_tail(path: Path, lines: int = 40, start: int = 0) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(start)
            text = fh.read().decode(errors="replace")
    except OSError:
        return "(no server log)"
    return redact("\n".join(text.splitlines()[-lines:]))


class Server:
    """A launched sglang server (bare process group or container); `running` is its lifecycle."""

    def __init__(self, plan: ArmPlan, launcher: Launcher, image: Dict[str, Any], log_path: Path, ctx: LaunchContext):
        self.plan = plan
        self.arm = plan.name
        self.image = image
        self.log_path = log_path
        self.ctx = ctx
        self.launcher = launcher
        self.host = plan.serve["host"]
        self.base_url = f"http://{self.host}:{ctx.port}"
        self.proc: Optional[subprocess.Popen] = None
        self.launch_id = ctx.launch_id
        self.python = image.get("python") or plan.platform["python"]
        self.argv = self.launcher.server_argv(ctx, self.python)
        self.log_start = 0
        # what /server_info said after readiness (effective_config.probe)
        self.effective: Dict[str, Any] = {}

    def env(self) -> Dict[str, str]:
        """The environment of processes specrepro starts (the runtime, a bare server, host clients)."""
        env = self.launcher.process_env(self.ctx)
        if self.image.get("pythonpath"):
            env["PYTHONPATH"] = os.pathsep.join([self.image["pythonpath"], env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        return env

    # --- lifecycle ------------------------------------------------------------
    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.launcher.prepare(self.ctx)
        self.launcher.write_secrets(self.ctx)  # read-only files for docker/podman; removed in stop()
        self.log_fh = open(self.log_path, "ab", buffering=0)
        # Readiness and windows read this launch's part of the log only.
        self.log_start = self.log_path.stat().st_size
        self.log_fh.write(f"# specrepro launch {self.launch_id}: {redact(shlex.join(self.argv))}\n".encode())
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=self.env(),
                                     start_new_session=True, stdin=subprocess.DEVNULL)
        # The server's output reaches the log through a filter that masks
        # secret values: nothing the server prints can leak a token.
        self.pump = threading.Thread(target=self._pump_log, daemon=True)
        self.pump.start()

    def _pump_log(self) -> None:
        secrets = secret_values()
        for line in iter(self.proc.stdout.readline, b""):
            try:
                self.log_fh.write(mask_bytes(line, secrets))
            except (ValueError, OSError):  # log closed during teardown
                break

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def exited_within(self, seconds: float) -> bool:
        """Whether the server exits within `seconds` (a container runtime reports a crash a moment late)."""
        deadline = time.monotonic() + seconds
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.2)
        return not self.alive()

    def tail(self, lines: int = 40) -> str:
        return log_tail(self.log_path, lines, self.log_start)

    def crashed(self, what: str) -> ServeError:
        code = self.proc.poll() if self.proc else None
        return ServeError(f"arm {self.arm}: server {what} (exit code {code}); last lines of this launch in "
                          f"{self.log_path}:\n{self.tail()}")

    def _this_launch_log(self) -> str:
        with open(self.log_path, "rb") as fh:
            fh.seek(self.log_start)
            return fh.read().decode(errors="replace")

    def wait_ready(self, timeout_s: float, progress: Optional[IO] = None,
                   abort: Optional[Callable[[], None]] = None) -> float:
        """Seconds until the server answers and its log says ready; `abort` is called while waiting and may raise
        (checks that run while the model loads and failed)."""
        start = time.monotonic()
        last_note = start
        while time.monotonic() - start < timeout_s:
            if abort is not None:
                abort()
            if not self.alive():
                raise self.crashed("exited before it was ready")
            try:
                ok = requests.get(f"{self.base_url}/health_generate", timeout=5).status_code == 200
            except requests.RequestException:
                ok = False
            if ok and READY_LINE in self._this_launch_log():
                return time.monotonic() - start
            if progress is not None and time.monotonic() - last_note > 30:
                last_note = time.monotonic()
                tail = self.tail(1).strip()
                print(f"arm {self.arm}: waiting for the server ({last_note - start:.0f} s of "
                      f"serve.ready_timeout_s={timeout_s:.0f}); log: {tail[-160:]}", file=progress, flush=True)
            time.sleep(0.2)
        raise ServeError(
            f"arm {self.arm}: server not ready after {timeout_s:.0f} s (serve.ready_timeout_s); "
            f"last lines of this launch in {self.log_path}:\n{self.tail()}"
        )

    def warm_up(self, batches: List[Dict[str, Any]], timeout_s: float, log: Optional[IO] = None) -> None:
        """Each benchmark's warm-up batch, sent at that benchmark's concurrency (see `warmup_batches`)."""
        from concurrent.futures import ThreadPoolExecutor

        def send(payload: Dict[str, Any]) -> None:
            r = requests.post(f"{self.base_url}/generate", timeout=timeout_s, json=payload)
            r.raise_for_status()

        for batch in batches:
            if log is not None:
                print(f"arm {self.arm}: warm-up for {batch['benchmark']}: {len(batch['payloads'])} requests at "
                      f"concurrency {batch['concurrency']}", file=log, flush=True)
            try:
                with ThreadPoolExecutor(max_workers=batch["concurrency"]) as pool:
                    list(pool.map(send, batch["payloads"]))
            except requests.RequestException as exc:
                if self.exited_within(self.plan.serve["crash_settle_s"]):
                    raise self.crashed("crashed during warm-up") from exc
                raise ServeError(f"arm {self.arm}: a warm-up request for {batch['benchmark']} failed: {exc}") from exc

    @contextmanager
    def running(self, grace_s: float, failed_grace_s: float,
                while_stopping: Optional[Callable[[], Any]] = None) -> Iterator["Server"]:
        """Started on entry, always stopped on exit: after `grace_s` when the block ended normally, `failed_grace_s`
        when it raised.  `while_stopping` runs beside the teardown (the GPUs' state while the server goes down: the
        teardown costs the longer of the two, not their sum); its result is `self.stopped_with`."""
        ok = False
        try:
            self.start()
            yield self
            ok = True
        finally:
            with ThreadPoolExecutor(1) as pool:
                beside = pool.submit(while_stopping) if while_stopping is not None else None
                self.stop(grace_s if ok else failed_grace_s)
                self.stopped_with = beside.result() if beside is not None else None

    def stop(self, grace_s: float) -> None:
        """Tear down the whole process group / container; idempotent."""
        for cmd in self.launcher.stop_argv(self.ctx, grace_s):
            try:
                subprocess.run(cmd, capture_output=True, timeout=grace_s + 30)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if self.proc is not None and self.proc.poll() is None:
            # SIGTERM to the server alone, as `docker stop` and a user's Ctrl-C give it: sglang drains and ends its
            # schedulers itself.  Signalled too, a scheduler dies first and sglang takes that for a crash and
            # sleeps 5 s for crash diagnostics (0.5.20's SIGQUIT handler) on every launch.
            try:
                os.kill(self.proc.pid, signal.SIGTERM)
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
        self.launcher.remove_secrets(self.ctx)
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
