"""The lent GPU's run on this CPU (issue #38): tests/gpu/run_dag_on_device.sh itself, with the GPU the only difference.

The device run is `specrepro run` on an interpreter that already holds sglang's dependencies, with specrepro,
Snakemake, Hydra and MLflow installed from carried wheels and no package index, offline, resuming the results folder
whose CPU stages ran where the registry is reachable.  Here the interpreter is the CPU check environment's
(`check_python`), the platform is gpu_local on a CPU (tests/gpu/conf/platform/gpu_local_cpu.yaml: platform cpu's
launcher and sgl_kernel stand-ins), the wheels are the same lists for this Python, and the CPU stages are the
session's `cpu_campaign`.  Smaller than the device run: two arms (one patched), one repeat of 8 questions,
`experiment.launches={min: 2, max: 2}`; the same server (pr_rs_on's first launch) is killed during its first GSM8K
repeat, and the same command run again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from conftest import ROOT, SHARED_GSM8K, claims_needing_more_than
from gpu_dag_records import judge_killed_server_and_rerun, launch_events, launches_ok

pytestmark = pytest.mark.e2e

ARMS = ("main_rs_off", "pr_rs_on")
OTHERS = ("main_rs_on", "main_rs_on_nocg", "pr_rs_on_nocg")


@pytest.fixture(scope="module")
def device_run(tmp_path_factory, cpu_campaign, check_python):
    work = tmp_path_factory.mktemp("device_run_cpu")
    python_version = subprocess.run([str(check_python), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                    capture_output=True, text=True, check=True).stdout.strip()
    wheels, carried, out = work / "whl", work / "gpu", work / "out"
    # what prepare_device_run.sh makes, for this Python: the same wheel lists (with what the GPU machine's image
    # holds and the check environment lacks), the CPU stages packed; specrepro is the checkout's src/
    subprocess.run(["bash", "tests/gpu/fetch_device_wheels.sh"], cwd=ROOT, check=True, capture_output=True,
                   env={**os.environ, "PYTHON_VERSION": python_version, "WHEEL_DIR": str(wheels),
                        "WHEEL_LISTS": "tests/gpu/device-wheels.txt tests/gpu/cpu-test-wheels.txt"})
    subprocess.run(["bash", "tests/gpu/pack_cpu_stages.sh", str(cpu_campaign["results"]), str(carried),
                    str(SHARED_GSM8K / "test.jsonl")], cwd=ROOT, check=True, capture_output=True,
                   env={**os.environ, "XZ_OPT": "-0"})  # the size matters on the way to a GPU only
    overrides = ["model.gpus=0", *[f"~experiment.arms.{a}" for a in OTHERS],
                 *[f"~experiment.theory.{a}" for a in OTHERS],
                 f"experiment.skip_claims=[{','.join(claims_needing_more_than(ARMS, ('gsm8k',)))}]",
                 "benchmarks.gsm8k.repeats=1", "benchmarks.gsm8k.gsm8k.num_questions=8",
                 "experiment.launches={min:2,max:2}"]
    # the script's own environment: nothing of this test's venv
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(CPU_TEST="1", PYTHON=str(check_python), SPECREPRO_TEST_PYTHON=str(check_python),
               CPU_PLATFORM="gpu_local_cpu", WHEELS=str(wheels), CARRIED=str(carried), DEVICE_BASE=str(work / "base"),
               OUT=str(out), EXTRA_OVERRIDES=" ".join(overrides), BUDGET_S="3000")
    proc = subprocess.run(["bash", "tests/gpu/run_dag_on_device.sh"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=3600)
    return {"out": out, "results": work / "base" / "results", "site": work / "base" / "site",
            "stdout": proc.stdout + proc.stderr}


def test_the_dag_ran_from_the_carried_wheels_on_the_existing_environment(device_run):
    machine = (device_run["out"] / "gpu.txt").read_text()
    assert "run 2 exit 0" in machine, device_run["stdout"][-4000:]
    site = device_run["site"]
    for dist in ("snakemake-9.27.1", "hydra_core-1.3.8", "mlflow_skinny-3.17.2"):
        assert (site / f"{dist}.dist-info").is_dir(), dist
    # specrepro itself is the checkout's src/, which every device call carries: no wheel of it to go stale
    assert not list(site.glob("specrepro-*.dist-info"))
    results = device_run["results"]
    resolved = yaml.safe_load((results / "resolved_config.yaml").read_text())
    assert resolved["platform"]["name"] == "gpu_local_cpu" and resolved["offline"] is True
    for arm in ARMS:
        image = json.loads((results / "image" / f"{arm}.json").read_text())
        # the interpreter was read before any server started, and held what sglang's server imports
        assert image["environment"]["missing"] == [] and image["environment"]["import_error"] is None, image
        assert launches_ok(results, arm) == [1, 2]
        timings = [e["timings"] for e in launch_events(results, arm) if e["event"] == "end" and e["status"] == "ok"]
        assert all(t["node_overhead_s"] <= 5.0 for t in timings), (arm, timings)
    assert (results / "sequential" / "round1.json").is_file()
    analysis = json.loads((results / "report" / "analysis.json").read_text())
    theory = {r["arm"]: r for r in analysis["theory"]}
    assert theory["main_rs_off"]["agrees"] and theory["pr_rs_on"]["agrees"], theory
    assert (results / "mlflow.db").is_file()


def test_the_killed_server_stopped_run_1_and_the_rerun_measured_only_what_was_missing(device_run):
    judge_killed_server_and_rerun(device_run["out"], device_run["results"], arms=ARMS)
