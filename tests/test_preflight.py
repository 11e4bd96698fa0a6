"""Preflight: each mistake caught before the server starts, with a message that says what to set.

Here on the platform without containers, against sglang 0.5.20's real release
tree (and copies of it changed the way a wrong image would be); the container
path (a stale labelled container removed, the probe inside the arm's image)
is in tests/test_containers.py.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from conftest import (ROOT, kfd_tree, nvidia_proc_tree, standin_overrides, standin_processes, vram_sysfs,
                      write_behaviour)
from specrepro.core.arm_plan import build_arm_plan
from specrepro.core.config import compose
from specrepro.serving.launch import Launcher, job_context
from specrepro.stages.preflight import PreflightError, image_checks, run_preflight
from specrepro.stages.serve import serve_arm
from specrepro.stages.sources import cached_release_tree


def preflight(cfg, arm: str, image: dict, gpus=()):
    """The measuring job's preflight: the arm's plan and one launch context, as serve_arm makes them."""
    plan = build_arm_plan(cfg, arm)
    return run_preflight(plan, Launcher(plan), job_context(plan, image, list(gpus)), image, io.StringIO())


@pytest.fixture(scope="module")
def release_tree():
    return cached_release_tree("0.5.20", ROOT / ".cache", io.StringIO())


def campaign_cfg(tmp_path, *extra):
    (tmp_path / "tokenizer").mkdir(exist_ok=True)
    write_behaviour(tmp_path / "behaviour.json", tmp_path)
    overrides = standin_overrides(tmp_path / "results", tmp_path, arms=("main_rs_on",), benchmarks=("gsm8k",))
    return compose([*overrides, *extra])


@pytest.fixture
def env(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECREPRO_TEST_PYTHON", sys.executable)
    monkeypatch.setenv("SPECREPRO_STANDIN_BEHAVIOUR", str(tmp_path / "behaviour.json"))


def write_resolved(cfg) -> None:
    """What the resolved_config rule writes before a measuring job (its host-side clients read it)."""
    from specrepro.core.config import dump_resolved

    path = Path(cfg["results_dir"]) / "resolved_config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dump_resolved(cfg))


def image_of(tree: Path) -> dict:
    return {"kind": "tree", "python": sys.executable, "pythonpath": str(tree)}


def failures(exc) -> str:
    return str(exc.value)


def test_a_right_setup_passes_every_check(env, tmp_path, release_tree):
    cfg = campaign_cfg(tmp_path)
    result = preflight(cfg, "main_rs_on", image_of(release_tree))
    checks = {c["check"]: c for c in result["checks"]}
    assert result["ok"] and result["seconds"] < 60
    assert set(checks) == {"stale_containers", "gpus_idle", "image_sglang_version", "image_patch_record",
                           "server_flags_in_image", "paths_readable_in_image", "host_data_files"}
    assert "every flag of the arm is declared by the image's sglang" in checks["server_flags_in_image"]["detail"]


def test_wrong_sglang_version_in_the_image(env, tmp_path, release_tree):
    cfg = campaign_cfg(tmp_path)
    cfg["sglang"]["version"] = "0.5.21"  # what a re-pushed or mistaken image would give
    with pytest.raises(PreflightError) as info:
        preflight(cfg, "main_rs_on", image_of(release_tree))
    assert "image_sglang_version: the image's sglang" in failures(info) and "is 0.5.20, the campaign pins 0.5.21" in failures(info)


def test_a_flag_the_images_sglang_does_not_declare(env, tmp_path, release_tree):
    """An image whose sglang lacks --speculative-use-rejection-sampling (the flag table is the image's own)."""
    image = tmp_path / "image-tree"
    for rel in ("sglang/version.py", "sglang/srt/server_args.py"):
        (image / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(release_tree / rel, image / rel)
    shutil.copytree(release_tree / "sglang/srt/arg_groups", image / "sglang/srt/arg_groups")
    spec = image / "sglang/srt/arg_groups/fields/spec.py"
    text = spec.read_text()
    start = text.index("    speculative_use_rejection_sampling: A[")
    end = text.index("    speculative_token_map: A[")
    spec.write_text(text[:start] + text[end:])
    cfg = campaign_cfg(tmp_path)
    with pytest.raises(PreflightError) as info:
        preflight(cfg, "main_rs_on", image_of(image))
    assert "server_flags_in_image: the image's sglang does not declare ['--speculative-use-rejection-sampling']" \
        in failures(info)


def test_unreadable_model_folder_and_dataset(env, tmp_path, release_tree):
    cfg = campaign_cfg(tmp_path, "model.server_args.model_path=/nonexistent/GLM-5.2-MXFP4")
    with pytest.raises(PreflightError) as info:
        preflight(cfg, "main_rs_on", image_of(release_tree))
    assert "paths_readable_in_image: not readable inside the container: ['/nonexistent/GLM-5.2-MXFP4']" in failures(info)


def test_wrong_image_for_the_arm_is_named():
    cfg = compose()
    probe = {"version": "0.5.20", "package_dir": "/sgl-workspace/sglang/python/sglang", "readable": {},
             "flag_sources": {}, "applied": {"patches": [{"patch": "0001-eagle.patch", "sha256": "ab" * 32}]}}
    unpatched = {c["check"]: c for c in image_checks(build_arm_plan(cfg, "main_rs_on"), {"kind": "container"}, probe)}
    assert not unpatched["image_patch_record"]["ok"]
    assert "unpatched arm, but the image carries patches ['0001-eagle.patch']" in unpatched["image_patch_record"]["detail"]
    patched = {c["check"]: c for c in image_checks(build_arm_plan(cfg, "pr_rs_on"),
                                                        {"kind": "container", "patch_sha256": ["cd" * 32]}, probe)}
    assert not patched["image_patch_record"]["ok"] and "(they differ)" in patched["image_patch_record"]["detail"]


def test_a_failed_preflight_starts_no_server(env, tmp_path, release_tree):
    # the checks inside the image before the start (preflight.during_load=false; the default runs them during load)
    cfg = campaign_cfg(tmp_path, "model.server_args.model_path=/nonexistent/model", "preflight.during_load=false")
    image = tmp_path / "image.json"
    image.write_text(json.dumps(image_of(release_tree)))
    arm_dir = Path(cfg["results_dir"]) / "arms" / "main_rs_on"
    with pytest.raises(PreflightError):
        write_resolved(cfg)
        serve_arm(build_arm_plan(cfg, "main_rs_on"), image, arm_dir / "arm.json", io.StringIO())
    assert not (arm_dir / "server.log").exists() and not (arm_dir / "launches.jsonl").exists()
    assert not json.loads((arm_dir / "preflight.json").read_text())["ok"]


@pytest.mark.parametrize("first", ["the_check", "the_server"])
def test_a_check_failed_while_the_model_loaded_stops_the_server_before_any_measurement(env, tmp_path, release_tree,
                                                                                       monkeypatch, first):
    """preflight.during_load (the default): the node's checks pass, the server starts, the image's check of the
    model folder fails while it loads: the server is stopped, nothing is measured, the launch says why.  Also when
    the server dies first (the stand-in, like sglang, exits at once on an unreadable model folder; on a loaded CI
    machine the check inside the image once finished later): the check's verdict names the cause, the crash is
    chained to it."""
    if first == "the_server":
        import time

        import specrepro.stages.serve as serve_module

        # where the measuring job calls it from
        real = serve_module.in_image_checks

        def slow_in_image_checks(*args, **kwargs):
            time.sleep(3)  # the stand-in exits within about a second of its start
            return real(*args, **kwargs)

        monkeypatch.setattr(serve_module, "in_image_checks", slow_in_image_checks)
    cfg = campaign_cfg(tmp_path, "model.server_args.model_path=/nonexistent/model")
    image = tmp_path / "image.json"
    image.write_text(json.dumps(image_of(release_tree)))
    arm_dir = Path(cfg["results_dir"]) / "arms" / "main_rs_on"
    write_resolved(cfg)
    with pytest.raises(PreflightError) as info:
        serve_arm(build_arm_plan(cfg, "main_rs_on"), image, arm_dir / "arm.json", io.StringIO())
    assert "preflight failed while the model loaded; the server was stopped before any measurement" in str(info.value)
    assert "paths_readable_in_image" in str(info.value)
    if first == "the_server":
        assert "exited before it was ready" in str(info.value.__context__)
        assert "is not a readable folder" in (arm_dir / "server.log").read_text()
    record = json.loads((arm_dir / "preflight.json").read_text())
    assert not record["ok"] and {c["check"] for c in record["checks"]} >= {"gpus_idle", "host_data_files",
                                                                           "paths_readable_in_image"}
    events = [json.loads(line) for line in (arm_dir / "launches.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events] == ["start", "end"] and events[1]["status"] == "failed"
    assert "PreflightError" in events[1]["error"] and "measure_s" not in events[1]["timings"]
    assert not list(arm_dir.glob("**/run.json"))
    assert standin_processes(tmp_path / "behaviour.json") == []


def fake_nvidia_smi(tmp_path, monkeypatch, lines_file):
    """nvidia-smi answering the preflight's query with the lines in `lines_file`, in the format the real one printed on
    the lent H200 (tests/data/node_facts/h200_nvidia_smi_pci_memory.csv: `00000000:00:06.0, 0, 143771`)."""
    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir(exist_ok=True)
    fake.write_text(f"#!/bin/sh\ncat {lines_file}\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")


def hgx_node(tmp_path, monkeypatch, smi_lines: str, timeout_s: int):
    """An 8-GPU NVIDIA node (its driver's procfs) whose nvidia-smi answers `smi_lines`; the campaign config on it."""
    root = nvidia_proc_tree("hgx_8gpu_nvidia", tmp_path / "node")
    smi = tmp_path / "smi.csv"
    smi.write_text(smi_lines)
    fake_nvidia_smi(tmp_path, monkeypatch, smi)
    cfg = compose(["platform=h200", "model=glm52_fp8", f"preflight.gpu_idle_timeout_s={timeout_s}",
                   f"platform.node_root={root}"])
    return cfg, smi


def test_busy_gpus_are_waited_for_then_refused(tmp_path, monkeypatch):
    """An 8-GPU node whose GPU 2 still holds a killed job's memory; the grant is matched by PCI address."""
    from specrepro.stages.preflight import wait_gpus_idle

    cfg, state = hgx_node(tmp_path, monkeypatch, "00000000:3A:00.0, 50000, 143771\n00000000:5D:00.0, 1, 143771\n", 2)
    busy = wait_gpus_idle(build_arm_plan(cfg, "main_rs_on"), [2, 3], io.StringIO())
    assert not busy["ok"] and "GPUs [2] still hold" in busy["detail"] and "preflight.gpu_idle_timeout_s=2" in busy["detail"]
    state.write_text("00000000:3A:00.0, 300, 143771\n00000000:5D:00.0, 1, 143771\n")  # drained
    idle = wait_gpus_idle(build_arm_plan(cfg, "main_rs_on"), [2, 3], io.StringIO())
    assert idle["ok"] and "GPUs [2, 3]: memory in use" in idle["detail"]


def test_a_constrained_job_sees_its_gpus_numbered_from_0_and_is_still_matched(tmp_path, monkeypatch):
    """Slurm granted node GPUs 4 and 5 with ConstrainDevices: nvidia-smi inside the job lists only those two, as its 0
    and 1.  By index, 4 and 5 matched nothing and read as idle; by PCI address, busy GPU 5 is found."""
    from specrepro.stages.preflight import wait_gpus_idle

    cfg, smi = hgx_node(tmp_path, monkeypatch, "00000000:9A:00.0, 2, 143771\n00000000:AB:00.0, 90000, 143771\n", 1)
    check = wait_gpus_idle(build_arm_plan(cfg, "main_rs_on"), [4, 5], io.StringIO())
    assert not check["ok"] and "GPUs [5] still hold" in check["detail"]
    # a granted GPU the tool does not report is unknown, never idle
    smi.write_text("00000000:9A:00.0, 2, 143771\n")
    check = wait_gpus_idle(build_arm_plan(cfg, "main_rs_on"), [4, 5], io.StringIO())
    assert not check["ok"] and "GPUs [5] of the grant [4, 5]: no memory reading at their PCI address" in check["detail"]


def test_rocm_idleness_is_read_from_the_drivers_sysfs_by_pci_address(tmp_path):
    """MI355X node (the SPX layout): GPUs 1 and 5 granted, GPU 5's VRAM in use per the amdgpu driver's counters."""
    from specrepro.measure import node_facts as nf
    from specrepro.stages.preflight import wait_gpus_idle

    root = kfd_tree("mi355x_spx_8gpu", tmp_path / "node")
    table = nf.rocm_gpus(root)
    total = 288 * 2**30
    for g in table:
        vram_sysfs(root, g.pci, 40 * 2**30 if g.index == 5 else 300 * 2**20, total)
    cfg = compose(["preflight.gpu_idle_timeout_s=1", f"platform.node_root={root}"])
    check = wait_gpus_idle(build_arm_plan(cfg, "main_rs_on"), [1, 5], io.StringIO())
    assert not check["ok"] and "GPUs [5] still hold" in check["detail"]
    assert wait_gpus_idle(build_arm_plan(cfg, "main_rs_on"), [1, 2], io.StringIO())["ok"]
    bare = compose(["preflight.gpu_idle_timeout_s=1", f"platform.node_root={kfd_tree('mi355x_spx_8gpu', tmp_path / 'bare')}"])
    unread = wait_gpus_idle(build_arm_plan(bare, "main_rs_on"), [1, 2], io.StringIO())  # a driver without the counters: said, not guessed
    assert unread["ok"] and unread["detail"].startswith("not checked")
