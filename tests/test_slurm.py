"""The campaign on a real one-node Slurm (Debian's slurm-wlm), through Snakemake's Slurm executor plugin.

.ci/run installs slurm-wlm and munge; the test starts slurmctld and slurmd on
this host with 4 placeholder GPUs as gres, runs the stand-in campaign with GPU
requests through `--profile slurm`, prints Slurm's job list and compares the
results with the local run's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from pathlib import Path

import pandas as pd
import pytest

from conftest import ROOT, specrepro, standin_overrides, write_behaviour

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    if shutil.which("slurmctld") is None or shutil.which("munged") is None:
        pytest.fail("Slurm is not installed: .ci/run installs Debian's slurm-wlm and munge (apt-get)")
    scratch = tmp_path_factory.mktemp("slurm")
    start = subprocess.run([str(ROOT / "tests" / "slurm" / "start_slurm.sh"), str(scratch)], capture_output=True, text=True)
    assert start.returncode == 0, start.stdout + start.stderr
    yield scratch
    subprocess.run([str(ROOT / "tests" / "slurm" / "stop_slurm.sh"), str(scratch)])


@pytest.fixture(scope="module")
def slurm_campaign(slurm, tmp_path_factory, standin_assets, check_python):
    results = tmp_path_factory.mktemp("slurm_campaign")
    behaviour = write_behaviour(results.parent / "slurm_behaviour.json", standin_assets)
    env = {"SPECREPRO_TEST_PYTHON": str(check_python), "SPECREPRO_STANDIN_BEHAVIOUR": str(behaviour)}
    overrides = standin_overrides(results, standin_assets, arms=("main_rs_on", "pr_rs_on"), benchmarks=("gsm8k",))
    first_job = _last_job_id() + 1
    # The plugin's own polling settings: first status check after 2 s (default 40), backing off from there.
    specrepro("run", *overrides, "--profile", "slurm", "--", "--slurm-status-command", "squeue",
              "--slurm-init-seconds-before-status-checks", "2",
              "--set-resources", "serve_bench:cpus_per_task=1", "serve_bench:mem_mb=2000", env=env, timeout=3000)
    jobs = subprocess.run(["squeue", "--states=all", "--format=%i %j %T %b %R", "--noheader"],
                          capture_output=True, text=True).stdout
    print("Slurm's job list (squeue --states=all):\n" + jobs)
    return {"results": results, "jobs": jobs, "first_job": first_job}


def _last_job_id() -> int:
    out = subprocess.run(["squeue", "--states=all", "--format=%i", "--noheader"], capture_output=True, text=True).stdout
    return max((int(x) for x in out.split() if x.isdigit()), default=0)


def _job_details() -> list:
    out = subprocess.run(["scontrol", "show", "job", "--oneliner"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if line.strip()]


def test_every_stage_ran_as_a_slurm_job(slurm_campaign):
    details = [d for d in _job_details() if int(d.split("JobId=")[1].split()[0]) >= slurm_campaign["first_job"]]
    completed = [d for d in details if "JobState=COMPLETED" in d]
    rules = sorted(d.split("Comment=rule_")[1].split()[0].split("_wildcards")[0] for d in completed)
    # the image build, the CPU check and the measuring jobs are cluster jobs; light and network-bound
    # rules (source, patch, collect, report, MLflow) ran on the submit host (localrules)
    assert rules == ["base_image", "image", "image", "patch_check", "serve_bench", "serve_bench"], "\n".join(details)
    gpu_jobs = [d for d in completed if "gres/gpu=4" in d or "gres:gpu:4" in d or "gpu:4" in d]
    assert len(gpu_jobs) == 2 and all("Comment=rule_serve_bench" in d for d in gpu_jobs), "\n".join(completed)
    assert all("OverSubscribe=NO" in d for d in gpu_jobs)  # --exclusive: a whole node per measuring arm
    cpu_jobs = [d for d in completed if d not in gpu_jobs]
    assert cpu_jobs and all("OverSubscribe=OK" in d for d in cpu_jobs)  # CPU stages share nodes


def test_results_equal_a_local_run(slurm_campaign, tmp_path, standin_assets, check_python):
    local = tmp_path / "local"
    behaviour = write_behaviour(tmp_path / "behaviour.json", standin_assets)
    env = {"SPECREPRO_TEST_PYTHON": str(check_python), "SPECREPRO_STANDIN_BEHAVIOUR": str(behaviour)}
    overrides = standin_overrides(local, standin_assets, arms=("main_rs_on", "pr_rs_on"), benchmarks=("gsm8k",))
    specrepro("run", *overrides, env=env, timeout=3000)

    def deterministic(results):
        runs = pd.read_csv(results / "tables" / "runs.csv")
        keep = runs[runs.metric.isin(["accept_length", "accuracy", "invalid_rate"])]
        return keep.set_index(["arm", "benchmark", "repeat", "metric"])["value"].sort_index()

    pd.testing.assert_series_equal(deterministic(slurm_campaign["results"]), deterministic(local))
    from specrepro.stages.patch_check import verdict_rows

    verdict = lambda r: [(c["group"], c["check"], c["passed"])  # noqa: E731
                         for c in verdict_rows(json.loads(next(r.glob("patch_check/*/*/verdict.json")).read_text()))]
    assert verdict(slurm_campaign["results"]) == verdict(local)
    claims = lambda r: {c["id"]: c["verdict"] for c in json.loads((r / "report" / "analysis.json").read_text())["claims"]}
    assert claims(slurm_campaign["results"]) == claims(local)


@pytest.mark.parametrize("profile,platform,model,gpus", [("rocm", "mi355x", "glm52_mxfp4", 4),
                                                          ("cuda", "h200", "glm52_fp8", 8)])
def test_platform_profile_as_typed_selects_its_platform(tmp_path, profile, platform, model, gpus):
    """`snakemake --profile rocm -n` from the project root, as the user types it (make installs the profiles)."""
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root")}
    out = subprocess.run(["snakemake", "--profile", profile, "-n", "--config",
                          f"overrides=[results_dir={tmp_path},model={model}]"],
                         cwd=ROOT, capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    text = out.stdout + out.stderr
    assert f"on platform {platform} (gpu={gpus}, slurm_extra=--exclusive): docker run" in text
    assert f"Using profiles {profile} and workflow specific profile profiles/default" in text


def test_srun_keeps_a_value_with_commas_whole_only_from_its_own_environment(slurm):
    """Why pyxis launches go through env(1) and --export=ALL: the real srun splits --export at every comma, so
    `--export=ALL,X=a,b` gives the step X=a (and a variable named b); a value set in srun's own environment
    reaches the step whole."""
    whole = subprocess.run(["env", "X=4,5", "srun", "--ntasks=1", "--export=ALL", "printenv", "X"],
                           capture_output=True, text=True, timeout=120)
    assert whole.returncode == 0 and whole.stdout.strip() == "4,5", whole.stderr
    split = subprocess.run(["srun", "--ntasks=1", "--export=ALL,X=4,5", "printenv", "X"],
                           capture_output=True, text=True, timeout=120)
    assert split.stdout.strip() != "4,5"
