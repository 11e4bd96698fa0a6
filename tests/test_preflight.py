"""Preflight: each mistake caught before the server starts, with a message that says what to set.

Here on the platform without containers, against sglang 0.5.20's real release
tree (and copies of it changed the way a wrong image would be); the container
path (a stale labelled container removed, the probe inside the arm's image)
is in tests/test_containers.py.
"""

from __future__ import annotations

import io
import json
import shutil
import sys
from pathlib import Path

import pytest

from conftest import ROOT, standin_overrides, write_behaviour
from specrepro.config import compose
from specrepro.preflight import PreflightError, image_checks, run_preflight
from specrepro.serve import serve_arm
from specrepro.sources import cached_release_tree


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


def image_of(tree: Path) -> dict:
    return {"kind": "tree", "python": sys.executable, "pythonpath": str(tree)}


def failures(exc) -> str:
    return str(exc.value)


def test_a_right_setup_passes_every_check(env, tmp_path, release_tree):
    cfg = campaign_cfg(tmp_path)
    result = run_preflight(cfg, "main_rs_on", image_of(release_tree), [], io.StringIO())
    checks = {c["check"]: c for c in result["checks"]}
    assert result["ok"] and result["seconds"] < 60
    assert set(checks) == {"stale_containers", "gpus_idle", "image_sglang_version", "image_patch_record",
                           "server_flags_in_image", "paths_readable_in_image", "host_data_files"}
    assert "every flag of the arm is declared by the image's sglang" in checks["server_flags_in_image"]["detail"]


def test_wrong_sglang_version_in_the_image(env, tmp_path, release_tree):
    cfg = campaign_cfg(tmp_path)
    cfg["sglang"]["version"] = "0.5.21"  # what a re-pushed or mistaken image would give
    with pytest.raises(PreflightError) as info:
        run_preflight(cfg, "main_rs_on", image_of(release_tree), [], io.StringIO())
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
        run_preflight(cfg, "main_rs_on", image_of(image), [], io.StringIO())
    assert "server_flags_in_image: the image's sglang does not declare ['--speculative-use-rejection-sampling']" \
        in failures(info)


def test_unreadable_model_folder_and_dataset(env, tmp_path, release_tree):
    cfg = campaign_cfg(tmp_path, "model.server_args.model_path=/nonexistent/GLM-5.2-MXFP4")
    with pytest.raises(PreflightError) as info:
        run_preflight(cfg, "main_rs_on", image_of(release_tree), [], io.StringIO())
    assert "paths_readable_in_image: not readable inside the container: ['/nonexistent/GLM-5.2-MXFP4']" in failures(info)


def test_wrong_image_for_the_arm_is_named():
    cfg = compose()
    probe = {"version": "0.5.20", "package_dir": "/sgl-workspace/sglang/python/sglang", "readable": {},
             "flag_sources": {}, "applied": {"patches": [{"patch": "0001-eagle.patch", "sha256": "ab" * 32}]}}
    unpatched = {c["check"]: c for c in image_checks(cfg, "main_rs_on", {"kind": "container"}, probe)}
    assert not unpatched["image_patch_record"]["ok"]
    assert "unpatched arm, but the image carries patches ['0001-eagle.patch']" in unpatched["image_patch_record"]["detail"]
    patched = {c["check"]: c for c in image_checks(cfg, "pr_rs_on", {"kind": "container", "patch_sha256": ["cd" * 32]}, probe)}
    assert not patched["image_patch_record"]["ok"] and "(they differ)" in patched["image_patch_record"]["detail"]


def test_a_failed_preflight_starts_no_server(env, tmp_path, release_tree):
    cfg = campaign_cfg(tmp_path, "model.server_args.model_path=/nonexistent/model")
    image = tmp_path / "image.json"
    image.write_text(json.dumps(image_of(release_tree)))
    arm_dir = Path(cfg["results_dir"]) / "arms" / "main_rs_on"
    with pytest.raises(PreflightError):
        serve_arm(cfg, "main_rs_on", image, arm_dir / "arm.json", io.StringIO())
    assert not (arm_dir / "server.log").exists() and not (arm_dir / "launches.jsonl").exists()
    assert not json.loads((arm_dir / "preflight.json").read_text())["ok"]


def test_busy_gpus_are_waited_for_then_refused(tmp_path, monkeypatch):
    """A node whose GPU 2 still holds a killed job's memory (nvidia-smi's CSV, as the tool prints it)."""
    from specrepro.preflight import wait_gpus_idle

    state = tmp_path / "used_mb"
    state.write_text("50000")
    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\necho \"2, $(cat {state}), 143771\"\necho \"3, 1, 143771\"\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{__import__('os').environ['PATH']}")
    cfg = compose(["platform=h200", "model=glm52_fp8", "preflight.gpu_idle_timeout_s=2"])
    busy = wait_gpus_idle(cfg, [2, 3], io.StringIO())
    assert not busy["ok"] and "GPUs [2] still hold" in busy["detail"] and "preflight.gpu_idle_timeout_s=2" in busy["detail"]
    state.write_text("300")  # drained
    idle = wait_gpus_idle(cfg, [2, 3], io.StringIO())
    assert idle["ok"] and "GPUs [2, 3]: memory in use" in idle["detail"]
