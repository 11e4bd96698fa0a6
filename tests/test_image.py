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

from specrepro.config import PROJECT_ROOT, compose
from specrepro.image import ImageError, image_stage
from specrepro.sources import registry_archive, unpack_archive

FAKE_DOCKER = """#!/usr/bin/env bash
# tests only: records calls; `image inspect` succeeds once `build` made the tag
echo "$*" >> "{calls}"
case "$1 $2" in
  "image inspect") grep -qx -- "${{@: -1}}" "{built}" 2>/dev/null && echo sha256:feedface || exit 1 ;;
  "build -t") echo "$3" >> "{built}" ;;
esac
"""


def write_manifest(path: Path, patched: bool, pass_=True):
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.parent / "tree").mkdir(exist_ok=True)
    manifest = {"package_dir": "sglang", "layout": "installed"}
    if patched:
        manifest = {"patches": [{"patch": "0001", "sha256": "ab" * 32}], "source": manifest}
    path.write_text(json.dumps(manifest))
    verdict = path.parent / "verdict.json"
    verdict.write_text(json.dumps({"passed": pass_}))
    return verdict


def test_failed_patch_check_blocks_the_image(tmp_path):
    cfg = compose([f"results_dir={tmp_path}", "platform=local"])
    verdict = write_manifest(tmp_path / "m" / "manifest.json", patched=True, pass_=False)
    with pytest.raises(ImageError, match="patch_check failed"):
        image_stage(cfg, "pr_rs_on", tmp_path / "m" / "manifest.json", [verdict], tmp_path / "image.json", io.StringIO())
    assert not (tmp_path / "image.json").exists()


def test_local_platform_serves_the_arms_tree(tmp_path):
    cfg = compose([f"results_dir={tmp_path}", "platform=local"])
    verdict = write_manifest(tmp_path / "m" / "manifest.json", patched=True)
    record = image_stage(cfg, "pr_rs_on", tmp_path / "m" / "manifest.json", [verdict], tmp_path / "image.json", io.StringIO())
    assert record["kind"] == "tree" and record["pythonpath"] == str(tmp_path / "m" / "tree")


def test_docker_image_is_built_once_per_content_hash(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    calls, built = tmp_path / "calls.txt", tmp_path / "built.txt"
    (bindir / "docker").write_text(FAKE_DOCKER.format(calls=calls, built=built))
    (bindir / "docker").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    cfg = compose([f"results_dir={tmp_path / 'r'}", "platform=mi355x"])
    verdict = write_manifest(tmp_path / "m" / "manifest.json", patched=True)
    out = tmp_path / "r" / "image" / "pr_rs_on.json"
    first = image_stage(cfg, "pr_rs_on", tmp_path / "m" / "manifest.json", [verdict], out, io.StringIO())
    second = image_stage(cfg, "pr_rs_on", tmp_path / "m" / "manifest.json", [verdict], out, io.StringIO())
    assert first["built"] and not second["built"]
    assert first["image"] == second["image"] and first["image"].startswith("specrepro/sglang:0.5.20-eagle_topk-")
    assert sum(line.startswith("build ") for line in calls.read_text().splitlines()) == 1
    dockerfile = (out.parent / "pr_rs_on.context" / "Dockerfile").read_text()
    assert "FROM lmsysorg/sglang:v0.5.20-rocm700-mi35x" in dockerfile
    assert "patching.py apply --tree /sgl-workspace/sglang --layout repository" in dockerfile
    # an unpatched arm runs the pinned image itself
    plain = write_manifest(tmp_path / "s" / "manifest.json", patched=False)
    record = image_stage(cfg, "main_rs_on", tmp_path / "s" / "manifest.json", [], tmp_path / "r" / "image" / "main.json", io.StringIO())
    assert record["image"] == "lmsysorg/sglang:v0.5.20-rocm700-mi35x" and not record["built"]
    assert plain.exists()


def test_the_images_apply_step_patches_a_repository_checkout(tmp_path, monkeypatch):
    """What the Dockerfile's RUN line does, done here on sglang 0.5.20 laid out as in the image."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "docker").write_text(FAKE_DOCKER.format(calls=tmp_path / "c", built=tmp_path / "b"))
    (bindir / "docker").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    cfg = compose([f"results_dir={tmp_path / 'r'}", "platform=mi355x"])
    verdict = write_manifest(tmp_path / "m" / "manifest.json", patched=True)
    out = tmp_path / "r" / "image" / "pr_rs_on.json"
    image_stage(cfg, "pr_rs_on", tmp_path / "m" / "manifest.json", [verdict], out, io.StringIO())
    ctx = out.parent / "pr_rs_on.context"
    workspace = tmp_path / "sgl-workspace" / "sglang"
    release = tmp_path / "release"
    unpack_archive(registry_archive("0.5.20", PROJECT_ROOT / ".cache", io.StringIO()), release)
    (workspace / "python").mkdir(parents=True)
    shutil.copytree(release / "sglang", workspace / "python" / "sglang")
    run = subprocess.run([sys.executable, str(ctx / "patching.py"), "apply", "--tree", str(workspace), "--layout",
                          "repository", "--series", str(ctx / "patches" / "series")], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "top_ks" in (workspace / "python/sglang/srt/speculative/spec_utils.py").read_text()
