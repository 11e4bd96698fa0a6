"""What docker and podman do differently, caught before any job (no container started here; tests/test_containers.py
runs the real ones): run arguments a runtime refuses or ignores, secrets as files, a runtime that does not answer,
and images named by ID or digest."""

from __future__ import annotations

import os
import shlex
import stat
from pathlib import Path

import pytest

from specrepro.core.campaign import Campaign
from specrepro.serving.plan_text import describe_plan
from specrepro.core.config import ConfigError, compose
from specrepro.serving.launch import LaunchContext, Launcher, RuntimeUnreachable, check_runtime, planned_context


@pytest.mark.parametrize("runtime", ["docker", "podman"])
@pytest.mark.parametrize("args", ['["--ipc=host","--shm-size=16g"]', '["--ipc","host","--shm-size","16g"]'])
def test_shm_size_beside_the_hosts_ipc_namespace_is_refused(runtime, args):
    """podman refuses the pair; docker (seen with 20.10) starts the container and silently drops --shm-size."""
    with pytest.raises(ConfigError) as info:
        compose([f"platform.container_runtime={runtime}", f"platform.runtime_run_args={args}"])
    said = str(info.value)
    assert f"--ipc=host with --shm-size on {runtime}" in said
    assert ("ignores it without a word" if runtime == "docker" else "podman refuses --shm-size") in said
    # either flag alone is fine
    assert compose([f"platform.container_runtime={runtime}", 'platform.runtime_run_args=["--shm-size=16g"]'])


def test_the_shipped_platforms_run_arguments_pass_both_runtimes():
    for platform, model in (("mi355x", "glm52_mxfp4"), ("h200", "glm52_fp8")):
        for runtime in ("docker", "podman"):
            assert compose([f"platform={platform}", f"model={model}", f"platform.container_runtime={runtime}"])


def test_layer_distribution_accepts_a_base_shipped_as_an_archive_under_either_runtime():
    """Every build names the base by its node-local ID tag, which a loaded base gets like a pulled one."""
    for runtime in ("docker", "podman"):
        cfg = compose(["platform.base_distribution=archive", f"platform.container_runtime={runtime}"])
        assert cfg["platform"]["image_distribution"] == "layer"


def test_a_secret_without_a_file_variable_is_refused_where_inspect_would_show_it():
    with pytest.raises(ConfigError, match=r"OPENAI_API_KEY: `docker inspect` shows every -e value"):
        compose(["platform.passthrough_env=[HF_TOKEN,OPENAI_API_KEY]"])
    with pytest.raises(ConfigError, match=r"OPENAI_API_KEY: `podman inspect`"):
        compose(["platform.container_runtime=podman", "platform.passthrough_env=[OPENAI_API_KEY]"])
    cfg = compose(["platform.passthrough_env=[HF_TOKEN,'OPENAI_API_KEY:OPENAI_API_KEY_FILE']"])
    server = _server_argv(cfg, "pr_rs_on")
    assert "OPENAI_API_KEY_FILE=/run/specrepro/secrets/OPENAI_API_KEY" in server
    # apptainer and pyxis hand the environment over themselves; nothing there shows it
    assert compose(["platform.container_runtime=apptainer", "platform.runtime_run_args=[]",
                    "platform.passthrough_env=[OPENAI_API_KEY]"])


def _server_argv(cfg, arm):
    plan = describe_plan(Campaign(cfg))
    line = next(line for line in plan.split(f"## arm {arm}:")[1].splitlines() if line.startswith("server: "))
    return shlex.split(line[len("server: "):])


@pytest.mark.parametrize("runtime", ["docker", "podman"])
def test_the_planned_server_gets_its_token_as_a_read_only_file_and_an_owner_label(runtime):
    argv = _server_argv(compose([f"platform.container_runtime={runtime}"]), "pr_rs_on")
    assert "$SECRETS/HF_TOKEN:/run/specrepro/secrets/HF_TOKEN:ro" in argv
    assert "HF_TOKEN_PATH=/run/specrepro/secrets/HF_TOKEN" in argv
    assert "HF_TOKEN" not in argv and not any(a.startswith("HF_TOKEN=") for a in argv)
    assert "org.specrepro.user=$OWNER" in argv


def test_secret_files_are_private_per_launch_and_go_with_the_server(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    cfg = compose()
    launcher = Launcher(Campaign(cfg).plan("pr_rs_on"))
    ctx = LaunchContext(port=1, launch_id="abc123", user="1000:1000")
    assert ctx.secrets_dir == str(tmp_path / f"specrepro-secrets-{os.getuid()}" / "abc123")
    launcher.write_secrets(ctx, {"HF_TOKEN": "hf_value"})
    folder, token = Path(ctx.secrets_dir), Path(ctx.secrets_dir) / "HF_TOKEN"
    assert token.read_text() == "hf_value" and stat.S_IMODE(token.stat().st_mode) == 0o400
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700 and stat.S_IMODE(folder.parent.stat().st_mode) == 0o700
    if os.getuid() == 0:  # root hands the file to the server's user (else only root could read it)
        assert (token.stat().st_uid, token.stat().st_gid) == (1000, 1000)
    mounts, env = launcher.secret_mounts(ctx)
    assert [m.spec() for m in mounts] == [f"{token}:/run/specrepro/secrets/HF_TOKEN:ro"]
    assert env == {"HF_TOKEN_PATH": "/run/specrepro/secrets/HF_TOKEN"}
    with pytest.raises(FileExistsError):  # a launch's folder is never reused
        launcher.write_secrets(ctx, {"HF_TOKEN": "hf_value"})
    launcher.remove_secrets(ctx)
    assert not folder.exists()
    # unset: an empty file, which huggingface_hub reads as no token
    other = LaunchContext(port=1, launch_id="def456", user="1000:1000")
    launcher.write_secrets(other, {})
    assert (Path(other.secrets_dir) / "HF_TOKEN").read_text() == ""
    launcher.remove_secrets(other)
    assert planned_context(Campaign(cfg).plan("pr_rs_on")).secrets_dir == "$SECRETS"


def _fake_runtime(folder: Path, name: str, stderr: str, code: int = 1) -> str:
    path = folder / name
    path.write_text(f"#!/bin/sh\necho '{stderr}' >&2\nexit {code}\n")
    path.chmod(0o755)
    return str(path)


def test_a_docker_daemon_that_does_not_answer_is_named_by_its_socket(tmp_path, monkeypatch):
    said = "Cannot connect to the Docker daemon at unix:///nowhere/docker.sock. Is the docker daemon running?"
    fake = _fake_runtime(tmp_path, "docker", said)
    plat = compose([f"platform.runtime_command=[{fake}]"])["platform"]
    monkeypatch.setenv("DOCKER_HOST", "unix:///nowhere/docker.sock")
    with pytest.raises(RuntimeUnreachable) as info:
        check_runtime(plat)
    assert "docker is not reachable at DOCKER_HOST=unix:///nowhere/docker.sock" in str(info.value)
    assert said in str(info.value) and "Nothing was built or started" in str(info.value)
    monkeypatch.delenv("DOCKER_HOST")
    monkeypatch.delenv("DOCKER_CONTEXT", raising=False)
    with pytest.raises(RuntimeUnreachable, match=r"unix:///var/run/docker.sock \(DOCKER_HOST is not set\)"):
        check_runtime(plat)
    missing = compose(["platform.runtime_command=[/nonexistent/docker]"])["platform"]
    with pytest.raises(RuntimeUnreachable, match="`/nonexistent/docker` is not installed on this host"):
        check_runtime(missing)


def test_an_inspect_failure_other_than_no_such_image_is_an_error(tmp_path):
    from specrepro.stages.image import ImageError, inspect_image

    absent = _fake_runtime(tmp_path, "docker", "Error: No such image: localhost/x:1")
    assert inspect_image([absent], "localhost/x:1") is None
    podman_absent = _fake_runtime(tmp_path, "podman", "Error: localhost/x:1: image not known", 125)
    assert inspect_image([podman_absent], "localhost/x:1") is None
    (tmp_path / "down").mkdir()
    down = _fake_runtime(tmp_path / "down", "docker", "Cannot connect to the Docker daemon at unix:///x.sock.")
    with pytest.raises(ImageError, match="Cannot connect to the Docker daemon"):
        inspect_image([down], "localhost/x:1")  # never "not here: pull it"
