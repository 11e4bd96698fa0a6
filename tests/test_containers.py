"""Serving in real podman containers: images built on one node and run on another, mounts, GPU grant, cleanup.

Real parts: podman 4 (runc, cgroupfs; ../shared/notes/podman-sandbox.md), a
base image assembled from Debian packages with sglang 0.5.20's real source at
the image's sglang root, the project's own image recipe (the patch applied
inside the image), sglang 0.5.20's bench_serving client running inside the
server's container, Snakemake.  Stand-ins: the server (tests/standin) and the
GPUs (placeholder device files where ROCm's render nodes would be).  Two image
stores stand for a build node and a GPU node: the image stage runs on store A,
the measuring jobs on store B, which starts empty.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from conftest import ROOT, RUNTIME_OUTPUT, kfd_tree, specrepro, standin_overrides, write_behaviour

pytestmark = [pytest.mark.containers, pytest.mark.e2e]

PODMAN = str(ROOT / "tests" / "container" / "bin" / "podman")
CAMPAIGN_LABEL = "label=org.specrepro.campaign=eagle_topk_greedy"


def podman(store: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([PODMAN, *args], capture_output=True, text=True,
                          env={**os.environ, "SPECREPRO_TEST_NODE_STORE": str(store)})
    if check and proc.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)}: {proc.stderr}")
    return proc


def show(store: Path, title: str) -> str:
    """The runtime's own view, printed into the test log."""
    text = (podman(store, "images", "--all").stdout + podman(store, "ps", "--all", "--filter", CAMPAIGN_LABEL).stdout)
    RUNTIME_OUTPUT.append(f"--- {title} ({store.name}) ---\n{text}")
    return text


@pytest.fixture(scope="session")
def node_stores(tmp_path_factory):
    if shutil.which("podman") is None or shutil.which("mmdebstrap") is None:
        pytest.fail("podman and mmdebstrap are not installed: .ci/run installs Debian's podman, runc and mmdebstrap")
    root = tmp_path_factory.mktemp("nodes")
    stores = {"A": root / "build-node", "B": root / "gpu-node"}
    yield stores
    for store in stores.values():  # unmount and empty each store, so nothing outlives the tests
        podman(store, "system", "reset", "--force", check=False)


@pytest.fixture(scope="session")
def base_image(node_stores):
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "container" / "base_image.py"), str(ROOT / ".cache")],
                          capture_output=True, text=True,
                          env={**os.environ, "SPECREPRO_TEST_NODE_STORE": str(node_stores["A"])})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


# The group that owns the placeholder GPU device files: not the caller's, as `render` on a ROCm host.
DEVICE_GID = 4242


@pytest.fixture(scope="session")
def fake_node(tmp_path_factory):
    """An 8-GPU MI355X node in SPX mode: its KFD topology (tests/data/node_facts) and character devices where it has
    /dev/kfd and /dev/dri/renderD128, 136, ..., 184, owned root:4242 0660 as on current ROCm hosts."""
    root = kfd_tree("mi355x_spx_8gpu", tmp_path_factory.mktemp("node"))
    dev = tmp_path_factory.mktemp("dev")
    for name in ["kfd"] + [f"renderD{128 + 8 * i}" for i in range(8)]:
        subprocess.run(["mknod", str(dev / name), "c", "1", "3"], check=True)
        os.chown(dev / name, 0, DEVICE_GID)
        os.chmod(dev / name, 0o660)
    return {"root": root, "dev": dev}


@pytest.fixture(scope="session")
def fake_devices(fake_node):
    return fake_node["dev"]


@pytest.fixture(scope="module")
def container_env(tmp_path_factory, base_image, fake_devices, fake_node, standin_assets, check_python):
    work = tmp_path_factory.mktemp("container_campaign")
    behaviour = write_behaviour(work / "behaviour.json", standin_assets)
    site = next((Path(check_python).parent.parent / "lib").glob("python3*/site-packages"))
    env = {"SPECREPRO_TEST_BASE_IMAGE": base_image, "SPECREPRO_TEST_FAKE_DEV": str(fake_devices),
           "SPECREPRO_TEST_CLIENT_SITE": str(site), "SPECREPRO_TEST_ASSETS": str(standin_assets),
           "SPECREPRO_STANDIN_BEHAVIOUR": str(behaviour), "SPECREPRO_TEST_PYTHON": str(check_python),
           "SPECREPRO_TEST_NODE_ROOT": str(fake_node["root"])}
    return {"work": work, "env": env, "behaviour": behaviour}


def overrides_for(results: Path, assets: Path, arms=("main_rs_on", "pr_rs_on")) -> list:
    out = standin_overrides(results, assets, arms=arms)
    out = [o for o in out if not o.startswith("platform=")]
    return out + ["platform=standin_podman", "model.gpus=2", "gpu_check.enabled=never", "offline=true",
                  "benchmarks.bench_serving.repeats=1"]


@pytest.fixture(scope="module")
def campaign(container_env, node_stores, standin_assets):
    results = container_env["work"] / "results"
    overrides = overrides_for(results, standin_assets)
    env = dict(container_env["env"])
    # Build node: everything up to the images, which land in store A and in archives.
    specrepro("run", *overrides, "--", "--until", "image", env={**env, "SPECREPRO_TEST_NODE_STORE": str(node_stores["A"])})
    show(node_stores["A"], "build node after the image stage")
    before_b = show(node_stores["B"], "GPU node before the measuring jobs")
    # GPU node: the granted GPUs as Slurm would set them.
    proc = specrepro("run", *overrides, env={**env, "SPECREPRO_TEST_NODE_STORE": str(node_stores["B"]),
                                             "ROCR_VISIBLE_DEVICES": "2,3"})
    after_b = show(node_stores["B"], "GPU node after the campaign")
    return {"results": results, "overrides": overrides, "env": env, "before_b": before_b, "after_b": after_b,
            "stdout": proc.stdout + proc.stderr}


def launches(results: Path, arm: str) -> list:
    return [json.loads(line) for line in (results / "arms" / arm / "launches.jsonl").read_text().splitlines()]


def test_images_built_on_one_node_run_on_the_other(campaign, node_stores):
    results = campaign["results"]
    base = json.loads((results / "image" / "base.json").read_text())
    patched = json.loads((results / "image" / "pr_rs_on.json").read_text())
    plain = json.loads((results / "image" / "main_rs_on.json").read_text())
    assert patched["built"] and Path(patched["archive"]).is_file() and Path(base["archive"]).is_file()
    assert plain["image_id"] == base["image_id"]  # the unpatched arm runs the resolved base itself
    assert base["image_id"][7:19] not in campaign["before_b"] and patched["image_id"][7:19] not in campaign["before_b"]
    assert patched["image_id"][7:19] in campaign["after_b"] and base["image_id"][7:19] in campaign["after_b"]
    # the patched image is FROM the resolved base and carries the applied series
    labels = json.loads(podman(node_stores["B"], "image", "inspect", patched["image_id"]).stdout)[0]["Labels"]
    assert labels["org.specrepro.base-id"] == base["image_id"]
    assert [p["sha256"] for p in patched["applied"]["patches"]] == patched["patch_sha256"]
    for arm, image in (("main_rs_on", plain), ("pr_rs_on", patched)):
        start = next(e for e in launches(results, arm) if e["event"] == "start")
        assert start["image_id"] == image["image_id"] and start["image"] == image["image_id"]
    logs = (results / "logs" / "serve_bench" / "pr_rs_on.log").read_text()
    assert "not on this node; loading" in logs


def test_patch_reached_only_the_patched_arm_through_its_image(campaign):
    logs = {arm: (campaign["results"] / "arms" / arm / "server.log").read_text() for arm in ("main_rs_on", "pr_rs_on")}
    assert "standin: sglang tree patched=True" in logs["pr_rs_on"]
    assert "standin: sglang tree patched=False" in logs["main_rs_on"]
    runs = pd.read_csv(campaign["results"] / "tables" / "runs.csv")
    al = runs[(runs.benchmark == "gsm8k") & (runs.metric == "accept_length")].set_index("arm")["value"]
    assert al["pr_rs_on"] > al["main_rs_on"] * 1.15


def test_container_sees_only_the_granted_gpus_and_the_model(campaign):
    for arm in ("main_rs_on", "pr_rs_on"):
        log = (campaign["results"] / "arms" / arm / "server.log").read_text()
        # GPUs 2 and 3 of this node are renderD144 and renderD152 (its KFD topology), not 128 + index
        assert f"standin: devices kfd=True dri=renderD144,renderD152 uid={os.getuid()}" in log, log[-2000:]
        start = next(e for e in launches(campaign["results"], arm) if e["event"] == "start")
        assert start["gpus"] == [2, 3] and start["gpu_source"] == "ROCR_VISIBLE_DEVICES"
        assert start["render_minors"] == [144, 152] and start["device_gid"] == DEVICE_GID
        assert "--group-add" in start["argv_list"] and str(DEVICE_GID) in start["argv_list"]
        # GPU facts are read inside the arm's image, before and after; this image has no vendor tool, and says so
        record = json.loads((campaign["results"] / "arms" / arm / "arm.json").read_text())
        assert record["gpu_facts"]["before"]["note"] == "no amd-smi, rocm-smi or nvidia-smi answered inside the image"
        assert record["gpu_facts"]["after"]["granted"] == [2, 3] and record["fingerprint"]["image_id"] == start["image_id"]
        assert json.loads((campaign["results"] / "arms" / arm / "preflight.json").read_text())["ok"]


def test_bench_serving_ran_inside_the_container_offline(campaign):
    run = json.loads((campaign["results"] / "arms" / "pr_rs_on" / "bench_serving" / "r1" / "run.json").read_text())
    argv = run["client_argv"]
    assert argv[1] == "exec" and "HF_HUB_OFFLINE=1" in argv and "sglang.benchmark.serving" in argv
    assert argv[argv.index("--dataset-path") + 1].endswith("sharegpt.json")
    assert run["metrics"]["completed"] == 4


def test_results_belong_to_the_caller_and_no_container_is_left(campaign, node_stores):
    owners = {p.stat().st_uid for p in campaign["results"].rglob("*")}
    assert owners == {os.getuid()}
    assert podman(node_stores["B"], "ps", "--all", "--quiet", "--filter", CAMPAIGN_LABEL).stdout.strip() == ""


def test_plan_prints_the_argv_that_ran(campaign):
    plan = specrepro("plan", *campaign["overrides"], env=campaign["env"]).stdout
    from specrepro.launch import substitute

    for arm in ("main_rs_on", "pr_rs_on"):
        section = plan.split(f"## arm {arm}:")[1].split("## arm")[0]
        start = next(e for e in launches(campaign["results"], arm) if e["event"] == "start")
        planned = shlex.split(next(line for line in section.splitlines() if line.startswith("server: "))[8:])
        assert substitute(planned, start["substitutions"]) == start["argv_list"]
        assert planned[:2] == [PODMAN, "run"] and "--user" in planned
        for line in section.splitlines():
            if line.startswith("bench "):
                name, argv = line[6:].split(": ", 1)
                bench, rep = name.split(" r")
                ran = json.loads((campaign["results"] / "arms" / arm / bench / f"r{rep}" / "run.json").read_text())
                assert substitute(shlex.split(argv), start["substitutions"]) == ran["client_argv"]


def test_a_crash_leaves_no_container_and_is_in_the_launch_record(campaign, container_env, node_stores, standin_assets,
                                                                 tmp_path):
    behaviour = write_behaviour(tmp_path / "crash.json", standin_assets, crash_after_requests=3)
    results = tmp_path / "results"
    env = {**container_env["env"], "SPECREPRO_STANDIN_BEHAVIOUR": str(behaviour),
           "SPECREPRO_TEST_NODE_STORE": str(node_stores["B"]), "ROCR_VISIBLE_DEVICES": "2,3"}
    overrides = overrides_for(results, standin_assets, arms=("main_rs_on",))
    proc = specrepro("run", *overrides, env=env, check=False)
    assert proc.returncode != 0
    log = (results / "logs" / "serve_bench" / "main_rs_on.log").read_text()
    assert "server exited" in log or "crashed during" in log, log[-3000:]
    events = launches(results, "main_rs_on")
    assert [e["event"] for e in events] == ["start", "end"] and events[1]["status"] == "failed"
    assert podman(node_stores["B"], "ps", "--all", "--quiet", "--filter", CAMPAIGN_LABEL).stdout.strip() == ""


def test_sigterm_leaves_no_container(campaign, container_env, node_stores, standin_assets, tmp_path):
    behaviour = write_behaviour(tmp_path / "slow.json", standin_assets, step_ms=200.0)
    results = tmp_path / "results"
    env = {**os.environ, **container_env["env"], "SPECREPRO_STANDIN_BEHAVIOUR": str(behaviour),
           "SPECREPRO_TEST_NODE_STORE": str(node_stores["B"]), "ROCR_VISIBLE_DEVICES": "2,3"}
    overrides = overrides_for(results, standin_assets, arms=("main_rs_on",))
    proc = subprocess.Popen([sys.executable, "-m", "specrepro.cli", "run", *overrides], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    server_log = results / "arms" / "main_rs_on" / "server.log"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        if server_log.is_file() and "ready to roll" in server_log.read_text(errors="replace"):
            break
        time.sleep(0.5)
    else:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail("the server never became ready")
    running = podman(node_stores["B"], "ps", "--quiet", "--filter", CAMPAIGN_LABEL).stdout.split()
    assert len(running) == 1
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=120)
    # The measuring job tears its container down before it exits (within serve.shutdown_grace_s).
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (podman(node_stores["B"], "ps", "--all", "--quiet", "--filter",
                                                  CAMPAIGN_LABEL).stdout.strip() or _job_alive(results)):
        time.sleep(1)
    show(node_stores["B"], "GPU node after SIGTERM")
    assert podman(node_stores["B"], "ps", "--all", "--quiet", "--filter", CAMPAIGN_LABEL).stdout.strip() == ""
    events = launches(results, "main_rs_on")
    assert events[-1]["event"] == "end" and events[-1]["status"] == "failed"


def _job_alive(results: Path) -> bool:
    """Is a serve job of this campaign still running (its script names the results folder)?"""
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and str(results).encode() in (proc / "cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False


@pytest.mark.parametrize("runtime", ["apptainer", "pyxis"])
def test_plan_equals_run_for_apptainer_and_pyxis(runtime, tmp_path, standin_assets, check_python, cpu_campaign):
    """Neither tool installs here: a recording fake runs the inner command (see fake_runtime.py)."""
    results = tmp_path / "results"
    record = tmp_path / "argv.jsonl"
    behaviour = write_behaviour(tmp_path / "behaviour.json", standin_assets)
    env = {"SPECREPRO_TEST_ASSETS": str(standin_assets), "SPECREPRO_STANDIN_BEHAVIOUR": str(behaviour),
           "SPECREPRO_TEST_PYTHON": str(check_python), "SPECREPRO_FAKE_RUNTIME_RECORD": str(record),
           "SPECREPRO_TEST_SGLANG_TREE": str(next(cpu_campaign["results"].glob("source/*/tree"))),
           "PATH": f"{ROOT / 'tests' / 'container' / 'fakebin'}{os.pathsep}{os.environ['PATH']}",
           "SLURM_JOB_GPUS": "4,5"}
    overrides = [o for o in overrides_for(results, standin_assets, arms=("pr_rs_on",)) if not o.startswith("platform=")]
    # the fake runs the inner command on this host, where the image's paths do not exist
    overrides += [f"platform=standin_{runtime}", "preflight.inside_image=false"]
    specrepro("run", *overrides, env=env)
    plan = specrepro("plan", *overrides, env=env).stdout
    from specrepro.launch import substitute

    start = next(e for e in launches(results, "pr_rs_on") if e["event"] == "start")
    assert start["gpus"] == [4, 5] and start["gpu_source"] == "SLURM_JOB_GPUS"
    section = plan.split("## arm pr_rs_on:")[1]
    planned = shlex.split(next(line for line in section.splitlines() if line.startswith("server: "))[8:])
    assert substitute(planned, start["substitutions"]) == start["argv_list"]
    ran = [json.loads(line) for line in record.read_text().splitlines()]
    tool = "srun" if runtime == "pyxis" else "apptainer"
    tool_at = start["argv_list"].index(next(a for a in start["argv_list"] if a.endswith(f"/{tool}")))
    assert [tool, *start["argv_list"][tool_at + 1:]] in ran  # the fake saw exactly that argv
    bench = json.loads((results / "arms" / "pr_rs_on" / "bench_serving" / "r1" / "run.json").read_text())
    planned_bench = next(line for line in section.splitlines() if line.startswith("bench bench_serving r1: "))
    assert substitute(shlex.split(planned_bench.split(": ", 1)[1]), start["substitutions"]) == bench["client_argv"]
    if runtime == "pyxis":
        assert "--gres=gpu:2" in start["argv_list"] and any(a.startswith("--container-mounts=") for a in planned)
        # values reach srun whole through env(1) (srun would split --export=ALL,K=a,b at the comma); the nested step
        # gets its GPUs from its own --gres, so no visible-devices variable names the job's indices
        assert start["argv_list"][0] == "env" and "--export=ALL" in start["argv_list"]
        assert not any("VISIBLE_DEVICES" in a for a in start["argv_list"])
    else:
        assert "--rocm" in planned and "--cleanenv" in planned
        assert "ROCR_VISIBLE_DEVICES=4,5" in start["argv_list"]


def test_preflight_removes_a_stale_labelled_container_and_checks_inside_the_image(campaign, container_env, node_stores):
    """A container a killed job left behind holds the GPUs: the next measuring job's preflight removes it."""
    base = json.loads((campaign["results"] / "image" / "base.json").read_text())
    podman(node_stores["B"], "run", "-d", "--name", "specrepro-stale-left-by-a-killed-job", "--label",
           "org.specrepro.campaign=an_older_campaign", base["image_id"], "sleep", "600")
    assert podman(node_stores["B"], "ps", "--quiet", "--filter", "label=org.specrepro.campaign").stdout.strip()
    env = {**container_env["env"], "SPECREPRO_TEST_NODE_STORE": str(node_stores["B"]), "ROCR_VISIBLE_DEVICES": "2,3"}
    proc = specrepro("preflight", *campaign["overrides"], "--arm", "pr_rs_on", env=env)
    out = proc.stdout
    assert "removing stale container specrepro-stale-left-by-a-killed-job" in out
    assert "preflight ok   image_sglang_version: sglang 0.5.20 at /sgl-workspace/sglang/python/sglang" in out
    assert "preflight ok   image_patch_record: patched arm: the image's /specrepro/applied.json lists 1 patch(es)" in out
    assert "preflight ok   server_flags_in_image" in out and "arm pr_rs_on: preflight passed" in out
    show(node_stores["B"], "GPU node after the preflight")
    assert podman(node_stores["B"], "ps", "--all", "--quiet", "--filter", "label=org.specrepro.campaign").stdout.strip() == ""


def test_a_non_root_server_opens_the_granted_devices_through_their_group(campaign, container_env, node_stores):
    """Device files root:4242 0660, the server as uid 1000: preflight's probe, inside the arm's container with the
    launch's own device flags, opens /dev/kfd and both render nodes; without the group it cannot, and the check
    names the files."""
    import io

    from specrepro import launch
    from specrepro.config import compose
    from specrepro.preflight import image_checks, probe_image

    old = dict(os.environ)
    os.environ.update({**container_env["env"], "SPECREPRO_TEST_NODE_STORE": str(node_stores["B"])})
    try:
        cfg = compose(campaign["overrides"] + ["serve.container_user=1000:1000"])
        image = json.loads((campaign["results"] / "image" / "pr_rs_on.json").read_text())
        probe = probe_image(cfg, "pr_rs_on", image, [], io.StringIO(), [2, 3])
        assert probe["uid"] == 1000 and DEVICE_GID in probe["groups"]
        assert probe["devices"] == {"/dev/kfd": True, "/dev/dri/renderD144": True, "/dev/dri/renderD152": True}
        opened = next(c for c in image_checks(cfg, "pr_rs_on", image, probe) if c["check"] == "gpu_devices_open")
        assert opened["ok"]
        real = launch.device_context
        launch.device_context = lambda cfg, gpus: {**real(cfg, gpus), "device_gid": None}
        try:
            closed = probe_image(cfg, "pr_rs_on", image, [], io.StringIO(), [2, 3])
        finally:
            launch.device_context = real
        assert set(closed["devices"].values()) == {"Permission denied"}
        check = next(c for c in image_checks(cfg, "pr_rs_on", image, closed) if c["check"] == "gpu_devices_open")
        assert not check["ok"] and "cannot open" in check["detail"] and "/dev/dri/renderD152" in check["detail"]
    finally:
        os.environ.clear()
        os.environ.update(old)


def test_the_shipped_mi355x_run_arguments_start_a_podman_container(campaign, container_env, node_stores):
    """The README's podman path, `platform=mi355x platform.container_runtime=podman`: the shipped platform's own run
    arguments (--ipc=host, seccomp, SYS_PTRACE; no --shm-size, which podman refuses beside --ipc=host) start a
    container with the node's GPU devices and their group."""
    from specrepro.campaign import Campaign
    from specrepro.config import compose
    from specrepro.launch import LaunchContext, Launcher

    cfg = compose(["platform=mi355x", "platform.container_runtime=podman", f"platform.runtime_command=[{PODMAN}]",
                   f"model.server_args.model_path={container_env['env']['SPECREPRO_TEST_ASSETS']}/tokenizer",
                   # the file the client_data stage would have fetched before this job (mounted read-only)
                   f"benchmarks.bench_serving.serving.dataset_path={container_env['env']['SPECREPRO_TEST_ASSETS']}"
                   "/sharegpt.json",
                   f"platform.node_root={container_env['env']['SPECREPRO_TEST_NODE_ROOT']}",
                   f"platform.gpu_shared_devices=[{container_env['env']['SPECREPRO_TEST_FAKE_DEV']}/kfd:/dev/kfd]",
                   f"platform.gpu_device_pattern='{container_env['env']['SPECREPRO_TEST_FAKE_DEV']}/renderD{{render}}"
                   ":/dev/dri/renderD{render}'", f"results_dir={campaign['results'].parent / 'mi355x_podman'}"])
    shipped = compose(["platform=mi355x"])["platform"]["runtime_run_args"]
    assert cfg["platform"]["runtime_run_args"] == shipped and not any("shm-size" in a for a in shipped)
    base = json.loads((campaign["results"] / "image" / "base.json").read_text())
    from specrepro.launch import device_context

    launcher = Launcher(Campaign(cfg), "main_rs_off")
    ctx = LaunchContext(port=0, launch_id="mi355x-args", image=base["image_id"], image_id=base["image_id"], gpus=[1],
                        user=f"{os.getuid()}:{os.getgid()}", **device_context(cfg, [1]))
    launcher.prepare(ctx)
    argv = launcher.wrap(ctx, ["sh", "-c", "ls /dev/dri; test -e /dev/kfd"], server=True)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "SPECREPRO_TEST_NODE_STORE": str(node_stores["B"])})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["renderD136"]
    for flag in shipped:
        assert flag in argv


def test_a_gpu_node_receives_only_the_patch_layer(campaign, container_env, node_stores, standin_assets, tmp_path):
    """image_distribution=layer (the shipped platforms'): the build node builds and checks the patched image as
    before, but only its build context travels; a fresh GPU node (store C) brings the base (here from its archive,
    on a cluster by digest) and builds the patch layer itself, held to the build node's applied record."""
    results = tmp_path / "results"
    overrides = overrides_for(results, standin_assets) + ["platform.image_distribution=layer"]
    env = container_env["env"]
    specrepro("run", *overrides, "--", "--until", "image", env={**env, "SPECREPRO_TEST_NODE_STORE": str(node_stores["A"])})
    record = json.loads((results / "image" / "pr_rs_on.json").read_text())
    assert record["distribution"] == "layer" and "archive" not in record
    store_c = node_stores["A"].parent / "gpu-node-2"
    try:
        run_env = {**env, "SPECREPRO_TEST_NODE_STORE": str(store_c), "ROCR_VISIBLE_DEVICES": "2,3"}
        first = specrepro("preflight", *overrides, "--arm", "pr_rs_on", env=run_env).stdout
        assert "building the patch layer from" in first and "arm pr_rs_on: preflight passed" in first
        labels = json.loads(podman(store_c, "image", "inspect", record["tag"]).stdout)[0]["Labels"]
        assert labels["org.specrepro.content-hash"] == record["content_hash"]
        assert labels["org.specrepro.base-id"] == record["base"]["image_id"]
        again = specrepro("preflight", *overrides, "--arm", "pr_rs_on", env=run_env).stdout
        assert "building the patch layer" not in again and "arm pr_rs_on: preflight passed" in again
        show(store_c, "second GPU node after building the patch layer")
        # what each route moves to a GPU node for the patched image, measured
        archive = json.loads((campaign["results"] / "image" / "pr_rs_on.json").read_text())["archive"]
        full = Path(archive).stat().st_size
        RUNTIME_OUTPUT.append(f"--- bytes a GPU node receives for the patched image ---\nlayer: build context "
                              f"{record['context_bytes']} bytes; archive: {full} bytes; base image "
                              f"{record['base_bytes']} bytes (reaches each node once, shared by every arm)\n")
        assert record["context_bytes"] < 1_000_000 < full and record["context_bytes"] * 100 < full
    finally:
        podman(store_c, "system", "reset", "--force", check=False)
