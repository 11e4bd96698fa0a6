"""Serving faults: crash, never ready, stops answering, malformed answers, garbage logs, resume, signals."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
import time
from pathlib import Path

import pytest

from conftest import ROOT, standin_processes, standin_overrides, write_behaviour
from specrepro.core.config import compose
from specrepro.stages.serve import ServeError, serve_bench_job
from specrepro.stages.sources import cached_release_tree


@pytest.fixture
def arm_cfg(tmp_path, monkeypatch):
    """One arm, GSM8K only, on the stand-in; the behaviour file is the test's to write."""
    behaviour = tmp_path / "behaviour.json"
    monkeypatch.setenv("SPECREPRO_TEST_PYTHON", sys.executable)
    monkeypatch.setenv("SPECREPRO_STANDIN_BEHAVIOUR", str(behaviour))

    (tmp_path / "tokenizer").mkdir(exist_ok=True)  # the model folder the server is given

    def make(repeats=1, questions=8, **faults):
        write_behaviour(behaviour, tmp_path, **faults)
        overrides = standin_overrides(tmp_path / "results", tmp_path, arms=("main_rs_on",), benchmarks=("gsm8k",))
        overrides += [f"benchmarks.gsm8k.repeats={repeats}",
                      f"benchmarks.gsm8k.gsm8k.num_questions={questions}", "benchmarks.gsm8k.gsm8k.parallel=2",
                      "serve.ready_timeout_s=20", "serve.request_timeout_s=3", "serve.log_settle_s=0.1",
                      # the stand-in exits at once when it crashes; a container's late report is test_containers'
                      "serve.crash_settle_s=2"]
        cfg = compose(overrides)
        image = tmp_path / "image.json"
        # the pinned release's real tree: the preflight reads its version and flags
        tree = cached_release_tree("0.5.20", ROOT / ".cache", io.StringIO())
        image.write_text(json.dumps({"kind": "tree", "python": sys.executable, "pythonpath": str(tree)}))
        return cfg, image

    return make


def run_arm(cfg, image):
    """The measuring job as its script runs it, after the resolved_config rule wrote the config its clients read."""
    from specrepro.core.config import dump_resolved

    out = Path(cfg["results_dir"]) / "arms" / "main_rs_on" / "arm.json"
    log = Path(cfg["results_dir"]) / "logs" / "serve_bench.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    resolved = Path(cfg["results_dir"]) / "resolved_config.yaml"
    if not resolved.is_file():
        resolved.write_text(dump_resolved(cfg))
    with open(log, "a") as fh:
        return serve_bench_job(cfg, "main_rs_on", image, [], out, fh)


def behaviour_of(cfg):
    return Path(cfg["results_dir"]).parent / "behaviour.json"


def launch_events(cfg):
    path = Path(cfg["results_dir"]) / "arms" / "main_rs_on" / "launches.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def runs_done(cfg):
    return sorted(Path(cfg["results_dir"]).glob("arms/main_rs_on/gsm8k/r*/run.json"))


def test_crash_mid_benchmark_fails_fast_with_log_tail(arm_cfg):
    cfg, image = arm_cfg(crash_after_requests=4)
    start = time.monotonic()
    with pytest.raises(ServeError) as info:
        run_arm(cfg, image)
    assert time.monotonic() - start < 60
    message = str(info.value)
    assert "crashed" in message and "Scheduler hit an exception" in message
    assert standin_processes(behaviour_of(cfg)) == []
    assert runs_done(cfg) == []


def test_never_ready_times_out_with_log_tail(arm_cfg):
    cfg, image = arm_cfg(never_ready=True)
    cfg["serve"]["ready_timeout_s"] = 3
    with pytest.raises(ServeError) as info:
        run_arm(cfg, image)
    assert "not ready after 3 s" in str(info.value) and "serve.ready_timeout_s" in str(info.value)
    assert "Load weight begin" in str(info.value)
    assert standin_processes(behaviour_of(cfg)) == []


def test_server_that_stops_answering_times_out(arm_cfg):
    # 40 questions at concurrency 2 after the first hangs: one request timeout (3 s), not 20 in turn (60 s)
    cfg, image = arm_cfg(hang_after_requests=3, questions=40)
    start = time.monotonic()
    with pytest.raises(ServeError) as info:
        run_arm(cfg, image)
    assert time.monotonic() - start < 30
    assert "stopped answering" in str(info.value)
    assert standin_processes(behaviour_of(cfg)) == []


def test_malformed_json_answer_is_an_error_not_a_number(arm_cfg):
    cfg, image = arm_cfg(malformed_json_after_requests=2)
    with pytest.raises(ServeError) as info:
        run_arm(cfg, image)
    assert "malformed JSON" in str(info.value)
    assert runs_done(cfg) == []


def test_garbage_log_lines_are_skipped_and_counted(arm_cfg):
    cfg, image = arm_cfg(garbage_log_lines=True)
    run_arm(cfg, image)
    run = json.loads(runs_done(cfg)[0].read_text())
    decode = run["accept_length_sources"]["decode_log"]
    assert decode["malformed_lines"] > 0
    assert run["accept_length_sources"]["agreement"]["agree"] is True


def test_rerun_after_a_crash_measures_only_what_is_missing(arm_cfg):
    # 1 warm-up + 8 questions of r1 + 2 of r2, then the crash
    cfg, image = arm_cfg(repeats=2, crash_after_requests=11)
    with pytest.raises(ServeError):
        run_arm(cfg, image)
    done = runs_done(cfg)
    assert [p.parent.name for p in done] == ["r1"]
    first = json.loads(done[0].read_text())
    cfg, image = arm_cfg(repeats=2)
    record = run_arm(cfg, image)
    again = [json.loads(p.read_text()) for p in runs_done(cfg)]
    assert again[0] == first  # r1 kept as measured
    assert again[1]["server_launch"] != first["server_launch"]
    # both launches are on record, the failed one with its error; the arm record names the ones its runs used
    events = launch_events(cfg)
    assert [(e["event"], e.get("status")) for e in events] == [("start", None), ("end", "failed"), ("start", None),
                                                               ("end", "ok")]
    assert "crashed" in events[1]["error"]
    assert {e["launch_id"] for e in record["launches"]} == {first["server_launch"], again[1]["server_launch"]}
    assert record["runs"]["gsm8k/r1"]["server_launch"] == first["server_launch"]


def test_two_campaigns_at_once_do_not_collide(arm_cfg, tmp_path):
    cfg_a, image = arm_cfg()
    cfg_b = json.loads(json.dumps(cfg_a))
    cfg_b["results_dir"] = str(tmp_path / "results_b")
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        records = list(pool.map(run_arm, (cfg_a, cfg_b), (image, image)))
    for cfg, record in zip((cfg_a, cfg_b), records):
        # each campaign measured against its own server only: its runs name its one launch, whose log it holds
        events = launch_events(cfg)
        assert [e["event"] for e in events] == ["start", "end"] and events[1]["status"] == "ok"
        assert {r["server_launch"] for r in record["runs"].values()} == {events[0]["launch_id"]}
        log = (Path(cfg["results_dir"]) / "arms" / "main_rs_on" / "server.log").read_text()
        assert log.count("# specrepro launch ") == 1 and events[0]["launch_id"] in log


@pytest.mark.e2e  # a whole `specrepro run` (Snakemake) is interrupted
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_to_the_campaign_tears_every_server_down(tmp_path, sig):
    behaviour = write_behaviour(tmp_path / "behaviour.json", tmp_path, step_ms=50.0)
    (tmp_path / "tokenizer").mkdir()
    env = {**os.environ, "SPECREPRO_TEST_PYTHON": sys.executable, "SPECREPRO_STANDIN_BEHAVIOUR": str(behaviour)}
    results = tmp_path / "results"
    overrides = standin_overrides(results, tmp_path, arms=("main_rs_on",), benchmarks=("gsm8k",)) + [
        "benchmarks.gsm8k.gsm8k.num_questions=200"]
    target = str(results / "arms" / "main_rs_on" / "arm.json")
    proc = subprocess.Popen([sys.executable, "-m", "specrepro.cli", "run", *overrides, "--", target],
                            cwd=ROOT, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log = results / "arms" / "main_rs_on" / "server.log"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (log.is_file() and "ready to roll" in log.read_text()):
        time.sleep(0.2)
    assert log.is_file(), "the server never started"
    time.sleep(1.0)
    os.killpg(proc.pid, sig)
    proc.wait(timeout=90)
    time.sleep(1.0)
    assert standin_processes(behaviour) == []
    assert not (results / "arms" / "main_rs_on" / "arm.json").exists()
    assert not list(results.glob("arms/main_rs_on/gsm8k/r*/run.json"))


def test_one_measuring_job_composes_once_and_builds_one_plan_and_one_launch_context(arm_cfg, monkeypatch):
    """The measuring job hands its arm's plan down: the config is composed once (by the entry point: here, before the
    job), the job builds one ArmPlan and one launch context, and preflight, GPU facts, the server and its clients all
    run with them."""
    from specrepro.core import arm_plan, campaign, config
    from specrepro.stages import serve

    cfg, image = arm_cfg(repeats=1, questions=4)
    counts = {"compose": 0, "check_resolved": 0, "plan": 0, "context": 0, "campaign": 0}

    def counting(name, fn):
        def wrapper(*args, **kwargs):
            counts[name] += 1
            return fn(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(config, "compose", counting("compose", config.compose))
    monkeypatch.setattr(config, "check_resolved", counting("check_resolved", config.check_resolved))
    monkeypatch.setattr(arm_plan, "build_arm_plan", counting("plan", arm_plan.build_arm_plan))
    monkeypatch.setattr(serve, "job_context", counting("context", serve.job_context))
    monkeypatch.setattr(campaign.Campaign, "__init__", counting("campaign", campaign.Campaign.__init__))
    record = run_arm(cfg, image)
    assert counts == {"compose": 0, "check_resolved": 0, "plan": 1, "context": 1, "campaign": 0}, counts
    # the server, its preflight and its GPU facts ran under that one context's launch id
    [event] = [e for e in launch_events(cfg) if e["event"] == "start"]
    assert record["launches"][0]["launch_id"] == event["launch_id"]


def test_a_second_run_on_the_same_results_folder_is_refused_and_changes_nothing(tmp_path):
    """Two campaigns from one checkout each hold their own results folder (Snakemake's lock, shared by the checkout's
    .snakemake/ and removed whole by any run that ends, is off); a second `specrepro run` on a folder a run holds
    exits 2 at once, before it rewrites the resolved config or starts Snakemake."""
    import fcntl

    from conftest import specrepro

    results = tmp_path / "results"
    results.mkdir()
    (results / "resolved_config.yaml").write_text("# the running campaign's\n")
    with open(results / ".specrepro-run.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        proc = specrepro("run", f"results_dir={results}", check=False, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"another `specrepro run` is running on {results}" in proc.stderr
    assert (results / "resolved_config.yaml").read_text() == "# the running campaign's\n"
    assert "Building DAG" not in proc.stdout + proc.stderr and not (results / "logs").exists()

