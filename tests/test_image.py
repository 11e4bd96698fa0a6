"""The image stage: gate on patch_check, content-hash tags, skip when the tag exists, the same apply step."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from specrepro.core.arm_plan import build_arm_plan as plan_of
from specrepro.core.config import PROJECT_ROOT, compose
from specrepro.stages.image import ImageError, build_context, image_stage
from specrepro.core.series import load_series, resolve_patches
from specrepro.stages.sources import registry_archive, unpack_archive


def read_series(folder: Path):
    return resolve_patches(load_series(folder), PROJECT_ROOT / ".cache", io.StringIO())


def write_manifest(path: Path, patched: bool, pass_=True):
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.parent / "tree").mkdir(exist_ok=True)
    manifest = {"package_dir": "sglang", "layout": "installed"}
    if patched:
        manifest = {"patches": [{"patch": "0001", "sha256": "ab" * 32}], "source": manifest}
    path.write_text(json.dumps(manifest))
    verdict = path.parent / "verdict.json"
    failed = {"check": "greedy_rows_propose_argmax", "tree": "patched", "passed": False, "executed": True, "detail": ""}
    verdict.write_text(json.dumps({"series": "eagle_topk", "passed": pass_, "generic": [],
                                   "results": [] if pass_ else [{"name": "draft_proposal", "checks": [failed]}]}))
    return verdict


def test_failed_patch_check_blocks_the_image(tmp_path):
    cfg = compose([f"results_dir={tmp_path}", "platform=local"])
    verdict = write_manifest(tmp_path / "m" / "manifest.json", patched=True, pass_=False)
    with pytest.raises(ImageError, match="patch_check of series eagle_topk failed .*draft_proposal/greedy_rows_propose_argmax"):
        image_stage(plan_of(cfg, "pr_rs_on"), None, tmp_path / "m" / "manifest.json", [verdict], tmp_path / "image.json",
                    io.StringIO())
    assert not (tmp_path / "image.json").exists()


def test_local_platform_serves_the_arms_tree(tmp_path):
    cfg = compose([f"results_dir={tmp_path}", "platform=local"])
    verdict = write_manifest(tmp_path / "m" / "manifest.json", patched=True)
    record = image_stage(plan_of(cfg, "pr_rs_on"), None, tmp_path / "m" / "manifest.json", [verdict],
                         tmp_path / "image.json", io.StringIO())
    assert record["kind"] == "tree" and record["pythonpath"] == str(tmp_path / "m" / "tree")


def test_the_images_apply_step_patches_a_repository_checkout(tmp_path):
    """What the Dockerfile's RUN line does, done here on sglang 0.5.20 laid out as in the image."""
    ctx = tmp_path / "ctx"
    content_hash = build_context(ctx, read_series(PROJECT_ROOT / "patches" / "eagle_topk"),
                                 {"base_from": "sha256:base", "base_id": "sha256:base", "ref": "v0.5.20",
                                  "runtime": "docker", "version": "0.5.20", "series": "eagle_topk",
                                  "sglang_root": "/sgl-workspace/sglang"})
    dockerfile = (ctx / "Dockerfile").read_text()
    assert "FROM sha256:base" in dockerfile and content_hash in dockerfile
    workspace = tmp_path / "sgl-workspace" / "sglang"
    release = tmp_path / "release"
    unpack_archive(registry_archive("0.5.20", PROJECT_ROOT / ".cache", io.StringIO()), release)
    (workspace / "python").mkdir(parents=True)
    shutil.copytree(release / "sglang", workspace / "python" / "sglang")
    run = subprocess.run([sys.executable, str(ctx / "patching.py"), "apply", "--tree", str(workspace), "--layout",
                          "repository", "--series", str(ctx / "patches" / "series")], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "top_ks" in (workspace / "python/sglang/srt/speculative/spec_utils.py").read_text()
