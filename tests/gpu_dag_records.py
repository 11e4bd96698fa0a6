"""Judges of what `specrepro run` did on a lent GPU (tests/gpu/run_dag_on_device.sh, issue #38): pure functions of the
run's own records, the files the device script writes to $OUT (under tests/data/gpu/ once a device run is recorded):

    gpu.txt             the machine (nvidia-smi's name, driver and memory; torch, CUDA, Triton, Python; cores) and
                        the two runs' exit codes and seconds
    gpu_memory.csv      nvidia-smi's memory in use, sampled every second (epoch_s,index,memory_used_mib,...)
    kill.txt            the server killed mid-benchmark (epoch, pid, command line)
    launch_records.txt  each launch record (arms/<arm>/launches/<n>.json) with its mtime, after run 1 and after run 2
    run1.log, run2.log  the two runs' output (run 1 stopped by the killed server; run 2 the same command)
    results/            the results folder (records.tar.gz unpacked, without the sglang trees): report/,
                        tables/runs.csv and requests.parquet, sequential/round<k>.json, arms/<arm>/launches.jsonl
                        and server.log, resolved_config.yaml

The device run: experiment eagle_topk_toy_gpu on platform gpu_local_lent (gpu_local, compiled kernels stood in for),
`experiment.launches={min: 2, max: 3}`; pr_rs_on's first launch (the third of round 1) is killed during its first
GSM8K repeat, and the same command run again.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Dict, List

import pandas as pd

from conftest import ROOT
from specrepro.measure.accept_length import parse_decode_lines

DATA = ROOT / "tests" / "data" / "gpu"
RESULTS = DATA / "results"
ARMS = ("main_rs_off", "main_rs_on", "pr_rs_on", "main_rs_on_nocg", "pr_rs_on_nocg")
GRAPH_ARMS = ("main_rs_off", "main_rs_on", "pr_rs_on")
KILLED = ("pr_rs_on", 1)
# the target (issue #38): what a launch costs the node beyond the server's start-up and the measurements
NODE_SECONDS_PER_LAUNCH = 5.0
# memory a GPU may show in use once a launch is torn down, beyond what it showed before the first launch
MEMORY_LEFT_MIB = 512


# --- the judges (pure functions of the records) ------------------------------------------------------------------

def launch_events(results: Path, arm: str) -> List[Dict]:
    return [json.loads(line) for line in (results / "arms" / arm / "launches.jsonl").read_text().splitlines() if line]


def launches_ok(results: Path, arm: str) -> List[int]:
    """Launch numbers of the arm whose end event says ok."""
    events = launch_events(results, arm)
    ok = {e["launch_id"] for e in events if e["event"] == "end" and e.get("status") == "ok"}
    return sorted(e["launch"] for e in events if e["event"] == "start" and e["launch_id"] in ok)


def cuda_graph_lines(results: Path, arm: str) -> Dict[str, int]:
    return parse_decode_lines((results / "arms" / arm / "server.log").read_text().splitlines()).cuda_graph_lines


def memory_after_each_launch(results: Path, samples: pd.DataFrame, arms=ARMS, within_s: float = 3.0,
                             from_s: float = 0.15) -> List[Dict]:
    """Per ended launch (its end is written once the server is gone: SIGTERM, SIGKILL a second later): the first
    sample from `from_s` to `within_s` after it, against the smallest reading before the first launch.  A sample is
    stamped before nvidia-smi queries (run_dag_on_device.sh), and the driver frees a context just after its process
    exits: in call 3 a sample stamped 0.07 s after an end still read the server's 72103 MiB, the next 0 (and every
    other first sample, 0.16-0.67 s after its end, read 0).  The next launch may
    have started by then; its server imports for tens of seconds before it touches the GPU (ready after 30-50 s in
    the records), so what the sample shows is what the last one left."""
    events = [e for arm in arms for e in launch_events(results, arm)]
    starts = sorted(e["started"] for e in events if e["event"] == "start")
    before = samples[samples.epoch_s < starts[0]].memory_used_mib
    baseline = float(before.min()) if len(before) else float(samples.memory_used_mib.min())
    out = []
    for end in (e for e in events if e["event"] == "end"):
        window = samples[(samples.epoch_s >= end["ended"] + from_s) & (samples.epoch_s <= end["ended"] + within_s)]
        if len(window):
            first = window.iloc[0]
            out.append({"launch_id": end["launch_id"], "status": end.get("status"), "after_s": first.epoch_s - end["ended"],
                        "used_mib": float(first.memory_used_mib), "baseline_mib": baseline})
    return out


def records_after(text: str) -> Dict[str, Dict[str, float]]:
    """launch_records.txt: '# after run N ...' headers, then 'arms/<arm>/launches/<n>.json <mtime>' lines."""
    out: Dict[str, Dict[str, float]] = {}
    current = None
    for line in text.splitlines():
        m = re.match(r"# after run (\d+)", line)
        if m:
            current = out.setdefault(f"run{m.group(1)}", {})
        elif line.strip() and current is not None:
            path, mtime = line.rsplit(" ", 1)
            current[path] = float(mtime)
    return out


def gpu_hours_used(results: Path, arms=ARMS, gpus: int = 1, ok_only: bool = False) -> float:
    """Each launch's node time (start to end; failed launches too unless `ok_only`) times its GPUs."""
    seconds = 0.0
    for arm in arms:
        events = launch_events(results, arm)
        ends = {e["launch_id"]: e for e in events if e["event"] == "end" and (e["status"] == "ok" or not ok_only)}
        seconds += sum(ends[e["launch_id"]]["ended"] - e["started"] for e in events
                       if e["event"] == "start" and e["launch_id"] in ends)
    return seconds * gpus / 3600



def judge_killed_server_and_rerun(data: Path, results: Path, arms=ARMS) -> None:
    """Run 1 stopped at the killed server with the stage's error and the log's tail; run 2 kept every launch record
    run 1 wrote and wrote the killed launch's."""
    assert "killed the process group of server" in (data / "kill.txt").read_text()
    run1 = (data / "run1.log").read_text()
    arm, launch = KILLED
    assert re.search(rf"arm {arm}: server crashed during gsm8k r1 \(exit code -?\d+\); last lines of this launch in",
                     run1), run1[-3000:]
    assert "what failed, in each stage's own words" in run1
    failed = [e for e in launch_events(results, arm) if e["event"] == "end" and e.get("status") != "ok"]
    assert len(failed) == 1, failed
    records = records_after((data / "launch_records.txt").read_text())
    killed = f"arms/{arm}/launches/{launch}.json"
    assert killed not in records["run1"] and killed in records["run2"]
    # everything run 1 measured is kept as it was: the rerun wrote only what was missing
    assert records["run1"] and {k: records["run2"][k] for k in records["run1"]} == records["run1"]
    # run 1 recorded exactly the launches that started before the killed one (launches.jsonl's clock)
    starts = [e for a in arms for e in launch_events(results, a) if e["event"] == "start"]
    killed_at = min(e["started"] for e in starts if e["arm"] == arm and e["launch"] == launch)
    before = {f"arms/{e['arm']}/launches/{e['launch']}.json" for e in starts if e["started"] < killed_at}
    assert set(records["run1"]) == before, (sorted(records["run1"]), sorted(before))
