"""The existing-environment platform's check of its interpreter (platform.environment_imports, issue #38): what the
environment lacks is named before any server starts."""

from __future__ import annotations

import io
import sys

import pytest

from specrepro.stages.preflight import PreflightError, environment_check, environment_problems


def test_a_chain_missing_two_modules_names_both_and_who_asked(tmp_path):
    """A package whose import chain lacks two modules, one imported by the other's importer: the probe stands in for
    the first and finds the second in the same run."""
    pkg = tmp_path / "fakeserver"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "launch.py").write_text("import json\nfrom fakeserver import engine\n")
    (pkg / "engine.py").write_text("import absent_kernels\nfrom absent_kernels.ops import topk\nimport absent_tokenizer\n")
    plat = {"name": "gpu_local", "accelerator": "cuda", "environment_imports": ["fakeserver.launch"], "server_env": {}}
    with pytest.raises(PreflightError) as err:
        environment_check(plat, sys.executable, str(tmp_path), io.StringIO())
    text = str(err.value)
    assert "absent_kernels (imported by" in text and "absent_tokenizer (imported by" in text, text
    assert text.index("absent_kernels") < text.index("absent_tokenizer")
    assert "engine.py" in text and "No server was started" in text
    # this test environment has no torch: named too
    assert "torch (" in text


def test_torch_built_for_another_accelerator_is_named():
    found = {"torch": {"version": "2.11.0+cpu", "cuda": None, "hip": None}, "triton": {"version": "3.6.0"},
             "missing": [], "import_error": None}
    assert environment_problems("cuda", found) == ["torch with CUDA (torch 2.11.0+cpu is built for CPU only)"]
    rocm_torch = {**found, "torch": {"version": "2.9.1+rocm7.0", "cuda": None, "hip": "7.0"}}
    assert environment_problems("cuda", rocm_torch) == ["torch with CUDA (torch 2.9.1+rocm7.0 is built for ROCm 7.0)"]
    assert environment_problems("rocm", rocm_torch) == []
    no_triton = {**found, "torch": {"version": "2.11.0+cu130", "cuda": "13.0", "hip": None},
                 "triton": {"error": "ModuleNotFoundError: No module named 'triton'"}}
    assert environment_problems("cuda", no_triton) == ["triton (ModuleNotFoundError: No module named 'triton')"]
    # a CPU platform asks for no accelerator build and no Triton
    assert environment_problems("none", {**no_triton, "torch": found["torch"]}) == []


def test_an_interpreter_that_is_not_there_is_named():
    plat = {"name": "gpu_local", "accelerator": "cuda", "environment_imports": ["sglang.launch_server"],
            "server_env": {}}
    with pytest.raises(PreflightError, match="platform.python=/no/such/python: no such interpreter"):
        environment_check(plat, "/no/such/python", "", io.StringIO())


def test_one_box_takes_the_machines_gpus_and_its_server_sees_only_the_grant(tmp_path):
    """platform=gpu_local without a scheduler or serve.gpus: the node's own table (procfs, as captured on the lent
    H200) gives the GPUs; the bare server is told them in PCI order, its clients are not."""
    from conftest import nvidia_proc_tree
    from specrepro.core.arm_plan import build_arm_plan
    from specrepro.core.config import compose
    from specrepro.serving.launch import Launcher, granted_gpus, job_context

    root = nvidia_proc_tree("hgx_8gpu_nvidia", tmp_path / "node")
    cfg = compose(["experiment=eagle_topk_toy_gpu", "platform=gpu_local", f"platform.node_root={root}",
                   f"results_dir={tmp_path / 'results'}"])
    plan = build_arm_plan(cfg, "main_rs_off")
    gpus, source = granted_gpus(plan, environ={})
    assert (gpus, source) == ([0], "node")
    launcher = Launcher(plan)
    ctx = job_context(plan, {"python": "python3"}, gpus, source, port=1234, launch_id="x")
    env = launcher.env(ctx)
    assert env["CUDA_VISIBLE_DEVICES"] == "0" and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert "CUDA_VISIBLE_DEVICES" not in launcher.env(ctx, client=True)
    # a scheduler's grant comes with its own variable, which the server inherits untouched
    slurm = job_context(plan, {}, *granted_gpus(plan, environ={"SLURM_JOB_GPUS": "3"}), port=1, launch_id="y")
    assert slurm.gpus == [3] and "CUDA_VISIBLE_DEVICES" not in launcher.env(slurm)
