"""Serving in real containers, podman and docker alike: images built on one node and run on another, mounts, the
GPU grant, secrets, faults and cleanup.

Real parts: podman 4 (runc, cgroupfs; ../shared/notes/podman-sandbox.md) and Debian's docker.io 20.10 (a daemon per
node, cgroupfs, no bridge; ../shared/notes/docker-sandbox.md), one base image root filesystem assembled from Debian
packages with sglang 0.5.20's real source at the image's sglang root (imported into each runtime), the project's own
image recipe (the patch applied inside the image), the shipped `mi355x` platform's run arguments, sglang 0.5.20's
bench_serving client running inside the server's container, huggingface_hub reading the token file, Snakemake.
Stand-ins: the server (tests/standin) and the GPUs (placeholder device files where ROCm's render nodes would be).

Each test runs once per runtime, with the same assertions.  Two nodes: podman's are two image stores
(tests/container/bin/podman), docker's two daemons with their own data roots and sockets (tests/container/dockerd-node;
.ci/run starts them and names them in SPECREPRO_TEST_DOCKER_BUILD_HOST / _GPU_NODE, else the tests start their own).
The image stage runs on the build node, the measuring jobs on the GPU node, which starts empty.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import ROOT, RUNTIME_OUTPUT, kfd_tree, specrepro, standin_overrides, write_behaviour

pytestmark = [pytest.mark.containers, pytest.mark.e2e]

RUNTIMES = ["podman", "docker"]
PODMAN = str(ROOT / "tests" / "container" / "bin" / "podman")
DOCKERD_NODE = str(ROOT / "tests" / "container" / "dockerd-node")
# Debian's docker.io client: what .ci/run installs (this machine may have another docker earlier in PATH)
DEBIAN_DOCKER = "/usr/bin/docker"
CAMPAIGN_LABEL = "label=org.specrepro.campaign=eagle_topk_greedy"
# A token the server needs: in the caller's environment for every container campaign, never anywhere else.
TOKEN = "hf_specreproTEST" + secrets.token_hex(12)
SHIPPED_MI355X = yaml.safe_load((ROOT / "conf" / "platform" / "mi355x.yaml").read_text())
# The group that owns the placeholder GPU device files: not the caller's, as `render` on a ROCm host.
DEVICE_GID = 4242


class Node:
    """One node's container engine: a podman image store, or a docker daemon (its socket in DOCKER_HOST)."""

    def __init__(self, runtime: str, name: str, env: dict):
        self.runtime, self.name, self.env = runtime, name, env
        # what the stand-in platforms call, so what `plan` prints first
        self.command = [PODMAN] if runtime == "podman" else ["docker"]

    def __call__(self, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
        proc = subprocess.run([*self.command, *args], capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **self.env})
        if check and proc.returncode != 0:
            raise AssertionError(f"{self.runtime} ({self.name}) {' '.join(args)}: {proc.stderr}")
        return proc

    def containers(self, label: str = CAMPAIGN_LABEL, running: bool = False) -> list:
        return self("ps", *([] if running else ["--all"]), "--quiet", "--filter", label).stdout.split()

    def labels(self, ref: str) -> dict:
        info = json.loads(self("image", "inspect", ref).stdout)[0]
        return (info.get("Config") or {}).get("Labels") or info.get("Labels") or {}

    def show(self, title: str) -> str:
        """The runtime's own view, printed into the test log."""
        text = self("images", "--all").stdout + self("ps", "--all", "--filter", CAMPAIGN_LABEL).stdout
        RUNTIME_OUTPUT.append(f"--- {self.runtime}: {title} ({self.name}) ---\n{text}")
        return text


class Cluster:
    """A build node and a GPU node of one runtime, and fresh nodes on demand."""

    def __init__(self, runtime: str, build: Node, gpu: Node, fresh):
        self.runtime, self.build, self.gpu, self._fresh = runtime, build, gpu, fresh

    @contextmanager
    def fresh_node(self, name: str):
        with self._fresh(name) as node:
            yield node


def _need(*tools: str) -> None:
    missing = [t for t in tools if not (os.path.exists(t) if t.startswith("/") else shutil.which(t))]
    if missing:
        pytest.fail(f"{', '.join(missing)} not installed: .ci/run installs Debian's podman, runc, docker.io and "
                    f"mmdebstrap")


@pytest.fixture(scope="session")
def podman_cluster(tmp_path_factory):
    _need("podman", "runc", "mmdebstrap")
    root = tmp_path_factory.mktemp("nodes")

    def node(name):
        return Node("podman", name, {"SPECREPRO_TEST_NODE_STORE": str(root / name)})

    @contextmanager
    def fresh(name):
        n = node(name)
        try:
            yield n
        finally:
            n("system", "reset", "--force", check=False)

    build, gpu = node("build-node"), node("gpu-node")
    yield Cluster("podman", build, gpu, fresh)
    for n in (build, gpu):  # unmount and empty each store, so nothing outlives the tests
        n("system", "reset", "--force", check=False)


def start_dockerd(folder: str) -> str:
    proc = subprocess.run([DOCKERD_NODE, "start", folder], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@pytest.fixture(scope="session")
def docker_cluster(tmp_path_factory):
    _need("dockerd", DEBIAN_DOCKER, "mmdebstrap")
    client = tmp_path_factory.mktemp("docker-client")
    (client / "docker").symlink_to(DEBIAN_DOCKER)
    path = f"{client}{os.pathsep}{os.environ['PATH']}"
    hosts = {key: os.environ.get(f"SPECREPRO_TEST_DOCKER_{key}") for key in ("BUILD_HOST", "GPU_NODE")}
    started = []
    if not all(hosts.values()):
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but SPECREPRO_TEST_DOCKER_BUILD_HOST / _GPU_NODE are not set: .ci/run starts the two "
                        "docker daemons (tests/container/dockerd-node) before `make test`")
        for key in hosts:
            folder = tempfile.mkdtemp(prefix="srdk-", dir="/tmp")  # short: unix socket paths are limited
            hosts[key] = start_dockerd(folder)
            started.append(folder)

    def node(name, host):
        return Node("docker", name, {"DOCKER_HOST": host, "PATH": path})

    @contextmanager
    def fresh(name):
        folder = tempfile.mkdtemp(prefix="srdk-", dir="/tmp")
        try:
            yield node(name, start_dockerd(folder))
        finally:
            subprocess.run([DOCKERD_NODE, "stop", folder], capture_output=True)

    build, gpu = node("build-host", hosts["BUILD_HOST"]), node("gpu-node", hosts["GPU_NODE"])
    yield Cluster("docker", build, gpu, fresh)
    for n in (build, gpu):
        leftover = n("ps", "--all", "--quiet", "--filter", "label=org.specrepro.campaign", check=False).stdout.split()
        if leftover:
            n("rm", "--force", *leftover, check=False)
    for folder in started:
        subprocess.run([DOCKERD_NODE, "stop", folder], capture_output=True)


@pytest.fixture(scope="module", params=RUNTIMES)
def runtime(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def cluster(runtime, request) -> Cluster:
    return request.getfixturevalue(f"{runtime}_cluster")


@pytest.fixture(scope="module")
def base_image(cluster):
    """The test base image on the build node: one root filesystem (built once, cached), imported into each runtime."""
    started = time.monotonic()
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "container" / "base_image.py"), str(ROOT / ".cache"),
                           cluster.runtime], capture_output=True, text=True, env={**os.environ, **cluster.build.env})
    assert proc.returncode == 0, proc.stderr
    RUNTIME_OUTPUT.append(f"--- {cluster.runtime}: test base image on the build node in "
                          f"{time.monotonic() - started:.1f} s ---\n{proc.stderr[-500:]}")
    return proc.stdout.strip()


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
           "SPECREPRO_TEST_NODE_ROOT": str(fake_node["root"]), "HF_TOKEN": TOKEN}
    return {"work": work, "env": env, "behaviour": behaviour}


def overrides_for(runtime: str, results: Path, assets: Path, arms=("main_rs_on", "pr_rs_on")) -> list:
    """The stand-in campaign on this runtime, every container with the shipped mi355x platform's run arguments."""
    out = standin_overrides(results, assets, arms=arms)
    out = [o for o in out if not o.startswith("platform=")]
    run_args = ",".join(f"'{a}'" for a in SHIPPED_MI355X["runtime_run_args"])
    return out + [f"platform=standin_{runtime}", f"platform.runtime_run_args=[{run_args}]", "model.gpus=2",
                  "gpu_check.enabled=never", "offline=true", "benchmarks.bench_serving.repeats=1"]


@contextmanager
def environ(env: dict):
    """os.environ with a node's settings, for the pipeline's own functions called in this process."""
    old = dict(os.environ)
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(old)


@pytest.fixture(scope="module")
def campaign(cluster, container_env, standin_assets):
    results = container_env["work"] / "results"
    overrides = overrides_for(cluster.runtime, results, standin_assets)
    env = dict(container_env["env"])
    # Build node: everything up to the images, which land in its store and in archives.
    specrepro("run", *overrides, "--", "--until", "image", env={**env, **cluster.build.env})
    cluster.build.show("build node after the image stage")
    before_b = cluster.gpu.show("GPU node before the measuring jobs")
    # GPU node: the granted GPUs as Slurm would set them.
    started = time.monotonic()
    proc = specrepro("run", *overrides, env={**env, **cluster.gpu.env, "ROCR_VISIBLE_DEVICES": "2,3"})
    after_b = cluster.gpu.show("GPU node after the campaign")
    ready = {arm: next(e for e in launches(results, arm) if e["event"] == "start") for arm in ("main_rs_on", "pr_rs_on")}
    RUNTIME_OUTPUT.append(f"--- {cluster.runtime}: measuring jobs on the GPU node: {time.monotonic() - started:.1f} s; "
                          + "; ".join(f"{arm}: preflight {e['preflight_seconds']} s" for arm, e in ready.items())
                          + "; " + "; ".join(_ready_line(results, arm) for arm in ready) + " ---")
    return {"results": results, "overrides": overrides, "env": env, "before_b": before_b, "after_b": after_b,
            "stdout": proc.stdout + proc.stderr}


def _ready_line(results: Path, arm: str) -> str:
    log = (results / "logs" / "serve_bench" / f"{arm}.log").read_text()
    return next((line.strip() for line in log.splitlines() if "server ready after" in line), f"{arm}: no ready line")


def launches(results: Path, arm: str) -> list:
    return [json.loads(line) for line in (results / "arms" / arm / "launches.jsonl").read_text().splitlines()]


def logged_commands(log: Path, *words: str) -> list:
    """The commands a stage ran (`$ ...` lines of its log) that contain every word."""
    return [line for line in log.read_text().splitlines() if line.startswith("$ ") and all(w in line for w in words)]


def test_images_built_on_one_node_run_on_the_other(campaign, cluster):
    results = campaign["results"]
    base = json.loads((results / "image" / "base.json").read_text())
    patched = json.loads((results / "image" / "pr_rs_on.json").read_text())
    plain = json.loads((results / "image" / "main_rs_on.json").read_text())
    assert patched["built"] and Path(patched["archive"]).is_file() and Path(base["archive"]).is_file()
    assert plain["image_id"] == base["image_id"]  # the unpatched arm runs the resolved base itself
    if cluster.runtime == "docker":
        # an imported image has no repository digest under docker (a push or pull makes one): pinned by its image ID
        assert base["repo_digest"] is None and base["pinned"] == base["image_id"]
        assert base["pinned_by"].startswith("image ID")
    else:
        # podman lists the manifest digest it computed for a local image; no registry serves it, hence the archive
        assert base["repo_digest"] == base["pinned"] and base["pinned"].startswith(base["ref"].rsplit(":", 1)[0] + "@")
    short = lambda image_id: image_id.split(":")[-1][:12]
    assert short(base["image_id"]) not in campaign["before_b"] and short(patched["image_id"]) not in campaign["before_b"]
    assert short(patched["image_id"]) in campaign["after_b"] and short(base["image_id"]) in campaign["after_b"]
    # the patched image is FROM the resolved base (its layers first) and carries the applied series
    labels = cluster.gpu.labels(patched["image_id"])
    assert labels["org.specrepro.base-id"] == base["image_id"]
    layers = lambda ref: json.loads(cluster.gpu("image", "inspect", ref).stdout)[0]["RootFS"]["Layers"]
    assert layers(patched["image_id"])[:len(base["layers"])] == base["layers"] == layers(base["image_id"])
    assert [p["sha256"] for p in patched["applied"]["patches"]] == patched["patch_sha256"]
    for arm, image in (("main_rs_on", plain), ("pr_rs_on", patched)):
        start = next(e for e in launches(results, arm) if e["event"] == "start")
        assert start["image_id"] == image["image_id"] and start["image"] == image["image_id"]
    # `archive`: each image saved at most once on the build node (the base's archive, named by its ID, may be left
    # in the cache by an earlier session), loaded once on the GPU node
    logs = results / "logs"
    assert len(logged_commands(logs / "image" / "base.log", " save ")) <= 1
    assert len(logged_commands(logs / "image" / "pr_rs_on.log", " save ")) == 1
    assert not logged_commands(logs / "image" / "main_rs_on.log", " save ")
    loads = {arm: logged_commands(logs / "serve_bench" / f"{arm}.log", " load -i ") for arm in ("main_rs_on", "pr_rs_on")}
    assert [Path(c.split()[-1]).name for c in loads["main_rs_on"]] == [Path(base["archive"]).name]
    assert [Path(c.split()[-1]).name for c in loads["pr_rs_on"]] == [Path(patched["archive"]).name]
    # the patch layer was built with no network (a daemon without a bridge has none to give it)
    assert logged_commands(logs / "image" / "pr_rs_on.log", " build --network=none ")


def test_patch_reached_only_the_patched_arm_through_its_image(campaign):
    logs = {arm: (campaign["results"] / "arms" / arm / "server.log").read_text() for arm in ("main_rs_on", "pr_rs_on")}
    assert "standin: sglang tree patched=True" in logs["pr_rs_on"]
    assert "standin: sglang tree patched=False" in logs["main_rs_on"]
    runs = pd.read_csv(campaign["results"] / "tables" / "runs.csv")
    al = runs[(runs.benchmark == "gsm8k") & (runs.metric == "accept_length")].set_index("arm")["value"]
    assert al["pr_rs_on"] > al["main_rs_on"] * 1.15


def test_container_sees_only_the_granted_gpus_and_the_model(campaign, standin_assets):
    model = str(standin_assets / "tokenizer")
    for arm in ("main_rs_on", "pr_rs_on"):
        log = (campaign["results"] / "arms" / arm / "server.log").read_text()
        # GPUs 2 and 3 of this node are renderD144 and renderD152 (its KFD topology), not 128 + index
        assert f"standin: devices kfd=True dri=renderD144,renderD152 uid={os.getuid()}" in log, log[-2000:]
        start = next(e for e in launches(campaign["results"], arm) if e["event"] == "start")
        assert start["gpus"] == [2, 3] and start["gpu_source"] == "ROCR_VISIBLE_DEVICES"
        assert start["render_minors"] == [144, 152] and start["device_gid"] == DEVICE_GID
        argv = start["argv_list"]
        assert "--group-add" in argv and str(DEVICE_GID) in argv
        assert argv[argv.index("--user") + 1] == f"{os.getuid()}:{os.getgid()}"
        assert f"{model}:{model}:ro" in argv  # the model read-only at its own path
        assert all(a in argv for a in SHIPPED_MI355X["runtime_run_args"])
        # GPU facts are read inside the arm's image, before and after; this image has no vendor tool, and says so
        record = json.loads((campaign["results"] / "arms" / arm / "arm.json").read_text())
        assert record["gpu_facts"]["before"]["note"] == "no amd-smi, rocm-smi or nvidia-smi answered inside the image"
        assert record["gpu_facts"]["after"]["granted"] == [2, 3] and record["fingerprint"]["image_id"] == start["image_id"]
        assert json.loads((campaign["results"] / "arms" / arm / "preflight.json").read_text())["ok"]


def test_bench_serving_ran_inside_the_container_offline(campaign, cluster):
    run = json.loads((campaign["results"] / "arms" / "pr_rs_on" / "bench_serving" / "r1" / "run.json").read_text())
    argv = run["client_argv"]
    assert argv[:2] == [*cluster.gpu.command, "exec"] and "HF_HUB_OFFLINE=1" in argv
    assert "sglang.benchmark.serving" in argv
    assert argv[argv.index("--dataset-path") + 1].endswith("sharegpt.json")
    assert run["metrics"]["completed"] == 4


def test_results_belong_to_the_caller_and_no_container_is_left(campaign, cluster):
    owners = {p.stat().st_uid for p in campaign["results"].rglob("*")}
    assert owners == {os.getuid()}
    assert cluster.gpu.containers() == []


def test_plan_prints_the_argv_that_ran(campaign, cluster):
    plan = specrepro("plan", *campaign["overrides"], env=campaign["env"]).stdout
    from specrepro.serving.launch import substitute

    for arm in ("main_rs_on", "pr_rs_on"):
        section = plan.split(f"## arm {arm}:")[1].split("## arm")[0]
        start = next(e for e in launches(campaign["results"], arm) if e["event"] == "start")
        planned = shlex.split(next(line for line in section.splitlines() if line.startswith("server: "))[8:])
        assert substitute(planned, start["substitutions"]) == start["argv_list"]
        assert planned[:2] == [*cluster.gpu.command, "run"] and "--user" in planned
        assert "org.specrepro.user=$OWNER" in planned and "$SECRETS/HF_TOKEN:/run/specrepro/secrets/HF_TOKEN:ro" in planned
        for line in section.splitlines():
            if line.startswith("bench "):
                name, argv = line[6:].split(": ", 1)
                bench, rep = name.split(" r")
                ran = json.loads((campaign["results"] / "arms" / arm / bench / f"r{rep}" / "run.json").read_text())
                assert substitute(shlex.split(argv), start["substitutions"]) == ran["client_argv"]


def test_the_token_is_in_no_argv_log_result_or_mlflow_record(campaign):
    """HF_TOKEN was in the caller's environment for the whole campaign: it reached the server as a read-only file
    (HF_TOKEN_PATH), so no argv, log, result file or MLflow record holds it, and its file is gone."""
    results = campaign["results"]
    assert (results / "mlflow.db").is_file()
    holding = [str(p) for p in results.rglob("*") if p.is_file() and TOKEN.encode() in p.read_bytes()]
    assert holding == []
    for arm in ("main_rs_on", "pr_rs_on"):
        start = next(e for e in launches(results, arm) if e["event"] == "start")
        argv = start["argv_list"]
        assert "HF_TOKEN_PATH=/run/specrepro/secrets/HF_TOKEN" in argv
        assert f"{start['substitutions']['$SECRETS']}/HF_TOKEN:/run/specrepro/secrets/HF_TOKEN:ro" in argv
        assert not any(a == "HF_TOKEN" or a.startswith("HF_TOKEN=") for a in argv)
        assert not Path(start["substitutions"]["$SECRETS"]).exists()  # removed when the server stopped


def _warmup_requests(overrides: list, env: dict, arm: str) -> int:
    from specrepro.core.campaign import Campaign
    from specrepro.core.config import compose
    from specrepro.stages.serve import warmup_batches

    with environ(env):
        return sum(len(b["payloads"]) for b in warmup_batches(Campaign(compose(overrides)).plan(arm)))


def _measured(results: Path, arm: str) -> dict:
    return {p.parent.parent.name + "/" + p.parent.name: json.loads(p.read_text())["server_launch"]
            for p in (results / "arms" / arm).glob("*/r*/run.json")}


def test_a_crash_leaves_no_container_and_a_rerun_measures_only_what_is_missing(campaign, cluster, container_env,
                                                                                standin_assets, tmp_path):
    """The server dies at bench_serving's first request (after GSM8K was measured): the job fails with the log's tail,
    no container survives, and the next run launches once more and measures bench_serving only."""
    results = tmp_path / "results"
    overrides = overrides_for(cluster.runtime, results, standin_assets, arms=("main_rs_on",))
    behaviour = tmp_path / "behaviour.json"
    env = {**container_env["env"], **cluster.gpu.env, "SPECREPRO_STANDIN_BEHAVIOUR": str(behaviour),
           "ROCR_VISIBLE_DEVICES": "2,3"}
    crash_at = _warmup_requests(overrides, env, "main_rs_on") + 24  # warm-up, then the 24 GSM8K questions
    write_behaviour(behaviour, standin_assets, crash_after_requests=crash_at)
    proc = specrepro("run", *overrides, env=env, check=False)
    assert proc.returncode != 0
    log = (results / "logs" / "serve_bench" / "main_rs_on.log").read_text()
    assert "server exited" in log or "crashed during" in log, log[-3000:]
    events = launches(results, "main_rs_on")
    assert [e["event"] for e in events] == ["start", "end"] and events[1]["status"] == "failed"
    assert cluster.gpu.containers() == []
    first = _measured(results, "main_rs_on")
    assert first == {"gsm8k/r1": events[0]["launch_id"]}
    # the same server command (same behaviour file), now healthy: only the missing repeat is measured
    write_behaviour(behaviour, standin_assets)
    specrepro("run", *overrides, env=env)
    events = launches(results, "main_rs_on")
    assert [e["event"] for e in events] == ["start", "end", "start", "end"] and events[3]["status"] == "ok"
    assert events[2]["runs"] == ["bench_serving/r1"]
    assert _measured(results, "main_rs_on") == {**first, "bench_serving/r1": events[2]["launch_id"]}
    assert cluster.gpu.containers() == []


def test_sigterm_leaves_no_container_and_the_running_server_shows_no_token(campaign, cluster, container_env,
                                                                          standin_assets, tmp_path):
    """While the server runs (hung in bench_serving, GSM8K measured): `inspect` of its container, the argv of every
    process on the host and its environment hold no token, yet huggingface_hub inside reads it from HF_TOKEN_PATH; the
    model is read-only and the container offline.  Then SIGTERM of the whole run: no container survives, and a rerun
    measures bench_serving only."""
    results = tmp_path / "results"
    overrides = overrides_for(cluster.runtime, results, standin_assets, arms=("main_rs_on",))
    behaviour = tmp_path / "behaviour.json"
    env = {**container_env["env"], **cluster.gpu.env, "SPECREPRO_STANDIN_BEHAVIOUR": str(behaviour),
           "ROCR_VISIBLE_DEVICES": "2,3"}
    write_behaviour(behaviour, standin_assets, hang_after_requests=_warmup_requests(overrides, env, "main_rs_on") + 24)
    proc = subprocess.Popen([sys.executable, "-m", "specrepro.cli", "run", *overrides], cwd=ROOT, env={**os.environ, **env},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    gsm8k = results / "arms" / "main_rs_on" / "gsm8k" / "r1" / "run.json"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not gsm8k.is_file():
        if proc.poll() is not None:
            pytest.fail(f"the run ended ({proc.returncode}) before GSM8K was measured")
        time.sleep(0.5)
    if not gsm8k.is_file():
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail("GSM8K was never measured")
    try:
        running = cluster.gpu.containers(running=True)
        assert len(running) == 1
        inspect = cluster.gpu("inspect", running[0]).stdout
        assert TOKEN not in inspect
        info = json.loads(inspect)[0]
        assert "HF_TOKEN_PATH=/run/specrepro/secrets/HF_TOKEN" in info["Config"]["Env"]
        assert not any(e.startswith("HF_TOKEN=") for e in info["Config"]["Env"])
        secret = next(m for m in info["Mounts"] if m["Destination"] == "/run/specrepro/secrets/HF_TOKEN")
        assert secret["RW"] is False
        # the server's own huggingface_hub (the client site the stand-in image mounts) reads the token from the file
        want = hashlib.sha256(TOKEN.encode()).hexdigest()
        got = cluster.gpu("exec", running[0], "python3", "-c", "import hashlib, huggingface_hub; "
                          "print(hashlib.sha256(huggingface_hub.get_token().encode()).hexdigest())").stdout.strip()
        assert got == want
        model = str(standin_assets / "tokenizer")
        refused = cluster.gpu("exec", running[0], "touch", f"{model}/written-by-the-server", check=False)
        assert refused.returncode != 0 and "Read-only file system" in refused.stderr
        assert cluster.gpu("exec", running[0], "printenv", "HF_HUB_OFFLINE").stdout.strip() == "1"
        for pid in Path("/proc").iterdir():
            try:
                if pid.name.isdigit():
                    assert TOKEN.encode() not in (pid / "cmdline").read_bytes(), (pid / "cmdline").read_bytes()
            except OSError:
                continue
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=120)
    # The measuring job tears its container down before it exits (within serve.shutdown_grace_s).
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (cluster.gpu.containers() or _job_alive(results)):
        time.sleep(1)
    cluster.gpu.show("GPU node after SIGTERM")
    assert cluster.gpu.containers() == []
    events = launches(results, "main_rs_on")
    assert events[-1]["event"] == "end" and events[-1]["status"] == "failed"
    first = _measured(results, "main_rs_on")
    assert first == {"gsm8k/r1": events[0]["launch_id"]}
    write_behaviour(behaviour, standin_assets)
    specrepro("run", *overrides, env=env)
    events = launches(results, "main_rs_on")
    assert events[-2]["event"] == "start" and events[-2]["runs"] == ["bench_serving/r1"]
    assert _measured(results, "main_rs_on") == {**first, "bench_serving/r1": events[-2]["launch_id"]}
    assert cluster.gpu.containers() == []


def _job_alive(results: Path) -> bool:
    """Is a serve job of this campaign still running (its script names the results folder)?"""
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and str(results).encode() in (proc / "cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False


def test_an_unreachable_runtime_is_an_error_before_any_gpu_time(campaign, cluster, container_env, standin_assets,
                                                                tmp_path):
    """docker: no daemon at DOCKER_HOST; podman: its remote service (CONTAINER_HOST) not there.  The image stage on
    the build host, the measuring job and `specrepro preflight` on the GPU node each stop with an error naming where
    they looked, before any server starts."""
    results = tmp_path / "results"
    overrides = overrides_for(cluster.runtime, results, standin_assets, arms=("main_rs_on",))
    dead = f"unix://{tmp_path}/no-daemon.sock"
    # podman reached through CONTAINER_HOST is podman's remote mode, talking to a podman service
    variable = "DOCKER_HOST" if cluster.runtime == "docker" else "CONTAINER_HOST"
    broken, named = {variable: dead}, f"{cluster.runtime} is not reachable at {variable}={dead}"
    env = {**container_env["env"], **cluster.build.env}
    proc = specrepro("run", *overrides, "--", "--until", "image", env={**env, **broken}, check=False)
    assert proc.returncode != 0
    base_log = (results / "logs" / "image" / "base.log").read_text()
    assert named in base_log and "Nothing was built or started" in base_log, base_log[-2000:]
    specrepro("run", *overrides, "--", "--until", "image", env=env)
    gpu_env = {**container_env["env"], **cluster.gpu.env, "ROCR_VISIBLE_DEVICES": "2,3", **broken}
    started = time.monotonic()
    proc = specrepro("run", *overrides, env=gpu_env, check=False)
    assert proc.returncode != 0
    job_log = (results / "logs" / "serve_bench" / "main_rs_on.log").read_text()
    assert named in job_log, job_log[-2000:]
    assert not (results / "arms" / "main_rs_on" / "launches.jsonl").exists()  # no server was started
    assert not (results / "arms" / "main_rs_on" / "preflight.json").exists()
    by_hand = specrepro("preflight", *overrides, "--arm", "main_rs_on", env=gpu_env, check=False)
    assert by_hand.returncode == 2 and named in by_hand.stderr and "Traceback" not in by_hand.stderr
    RUNTIME_OUTPUT.append(f"--- {cluster.runtime}: with the runtime unreachable the measuring run failed after "
                          f"{time.monotonic() - started:.1f} s: {by_hand.stderr.strip()[:400]} ---")
    assert cluster.gpu.containers() == []


def test_preflight_removes_the_callers_stale_container_and_never_another_users(campaign, cluster, container_env):
    """A container a killed job left behind holds the GPUs: the next measuring job's preflight removes it, and the
    secret files of its launch; a specrepro container of another user on the same daemon is named and left alone."""
    from specrepro.serving.launch import secrets_root

    base = json.loads((campaign["results"] / "image" / "base.json").read_text())
    me = str(os.getuid())
    # one launch id per runtime: both runtimes' tests may run at once, and the secret files live on this host
    stale_launch = f"stalelaunch-{cluster.runtime}"
    cluster.gpu("run", "-d", "--name", "specrepro-stale-left-by-a-killed-job", "--label",
                "org.specrepro.campaign=an_older_campaign", "--label", f"org.specrepro.user={me}", "--label",
                f"org.specrepro.launch={stale_launch}", base["image_id"], "sleep", "600")
    cluster.gpu("run", "-d", "--name", "specrepro-of-another-user", "--label", "org.specrepro.campaign=theirs",
                "--label", "org.specrepro.user=4321", "--label", "org.specrepro.launch=theirlaunch1",
                base["image_id"], "sleep", "600")
    left_secrets = secrets_root() / stale_launch
    left_secrets.mkdir(parents=True, mode=0o700)
    (left_secrets / "HF_TOKEN").write_text("left by a killed job")
    try:
        names = cluster.gpu("ps", "--filter", "label=org.specrepro.campaign", "--format", "{{.Names}}").stdout.split()
        assert {"specrepro-stale-left-by-a-killed-job", "specrepro-of-another-user"} <= set(names)
        env = {**container_env["env"], **cluster.gpu.env, "ROCR_VISIBLE_DEVICES": "2,3"}
        out = specrepro("preflight", *campaign["overrides"], "--arm", "pr_rs_on", env=env).stdout
        assert "removing stale container specrepro-stale-left-by-a-killed-job" in out
        assert f"leaving container specrepro-of-another-user alone: it is not yours (owner 4321, you are uid {me})" in out
        assert "preflight ok   image_sglang_version: sglang 0.5.20 at /sgl-workspace/sglang/python/sglang" in out
        assert "preflight ok   image_patch_record: patched arm: the image's /specrepro/applied.json lists 1 patch(es)" in out
        assert "preflight ok   server_flags_in_image" in out and "arm pr_rs_on: preflight passed" in out
        cluster.gpu.show("GPU node after the preflight")
        remaining = cluster.gpu("ps", "--all", "--filter", "label=org.specrepro.campaign", "--format", "{{.Names}}").stdout
        assert remaining.split() == ["specrepro-of-another-user"]
        assert not left_secrets.exists()
    finally:
        cluster.gpu("rm", "--force", "specrepro-of-another-user", check=False)
        cluster.gpu("rm", "--force", "specrepro-stale-left-by-a-killed-job", check=False)
        shutil.rmtree(left_secrets, ignore_errors=True)


def test_a_non_root_server_opens_the_granted_devices_through_their_group(campaign, cluster, container_env):
    """Device files root:4242 0660, the server as uid 1000: preflight's probe, inside the arm's container with the
    launch's own device flags, opens /dev/kfd and both render nodes; without the group it cannot, and the check
    names the files."""
    import io

    from specrepro.core.arm_plan import build_arm_plan
    from specrepro.core.config import compose
    from specrepro.serving.launch import Launcher, job_context
    from specrepro.stages.preflight import image_checks, probe_image

    with environ({**container_env["env"], **cluster.gpu.env}):
        cfg = compose(campaign["overrides"] + ["serve.container_user=1000:1000"])
        plan = build_arm_plan(cfg, "pr_rs_on")
        image = json.loads((campaign["results"] / "image" / "pr_rs_on.json").read_text())
        ctx = job_context(plan, image, [2, 3])
        probe = probe_image(plan, Launcher(plan), ctx, image, [])
        assert probe["uid"] == 1000 and DEVICE_GID in probe["groups"]
        assert probe["devices"] == {"/dev/kfd": True, "/dev/dri/renderD144": True, "/dev/dri/renderD152": True}
        opened = next(c for c in image_checks(plan, image, probe) if c["check"] == "gpu_devices_open")
        assert opened["ok"]
        # the same launch without the device files' group
        ctx.device_gid = None
        closed = probe_image(plan, Launcher(plan), ctx, image, [])
        assert set(closed["devices"].values()) == {"Permission denied"}
        check = next(c for c in image_checks(plan, image, closed) if c["check"] == "gpu_devices_open")
        assert not check["ok"] and "cannot open" in check["detail"] and "/dev/dri/renderD152" in check["detail"]


def test_the_readmes_rocm_command_starts_a_real_container(campaign, cluster, container_env, tmp_path):
    """The README's command for this runtime, `snakemake --profile rocm` (docker, the shipped `mi355x` platform), or
    with `platform.container_runtime=podman`: its dry run's measuring job prints the server's container command; that
    command, with the launch's values, starts a real container on the GPU node, which runs the image's
    `python3 -m sglang.launch_server` with the arm's flags (which stops at sglang's first import of a dependency the
    test image lacks: numpy), and with
    the same arguments before the image, sees exactly the granted render nodes and /dev/kfd, as the caller, with
    the token as a file only."""
    from specrepro.core.campaign import Campaign
    from specrepro.core.config import compose
    from specrepro.serving.launch import Launcher, job_context, substitute

    env = container_env["env"]
    dev = env["SPECREPRO_TEST_FAKE_DEV"]
    overrides = [f"results_dir={tmp_path / 'results'}", f"model.server_args.model_path={env['SPECREPRO_TEST_ASSETS']}/tokenizer",
                 # the file the client_data stage would have fetched before this job (mounted read-only)
                 f"benchmarks.bench_serving.serving.dataset_path={env['SPECREPRO_TEST_ASSETS']}/sharegpt.json",
                 f"platform.node_root={env['SPECREPRO_TEST_NODE_ROOT']}",
                 f"platform.gpu_shared_devices=['{dev}/kfd:/dev/kfd']",
                 f"platform.gpu_device_pattern='{dev}/renderD{{render}}:/dev/dri/renderD{{render}}'"]
    if cluster.runtime == "podman":
        overrides += ["platform.container_runtime=podman", f"platform.runtime_command=[{PODMAN}]"]
    # `make` links the profiles into the user's Snakemake folder: the same here, in a folder of this test's own
    config_home = tmp_path / "xdg"
    (config_home / "snakemake").mkdir(parents=True)
    (config_home / "snakemake" / "rocm").symlink_to(ROOT / "profiles" / "rocm")
    dry = subprocess.run(["snakemake", "--profile", "rocm", "-n", "--config",
                          "overrides=[" + ",".join(json.dumps(o) for o in overrides) + "]"], cwd=ROOT,
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, **env, **cluster.gpu.env, "XDG_CONFIG_HOME": str(config_home),
                              "PATH": f"{Path(sys.executable).parent}{os.pathsep}{cluster.gpu.env.get('PATH', os.environ['PATH'])}"})
    assert dry.returncode == 0, dry.stderr[-3000:]
    text = dry.stdout + dry.stderr
    lead = "arm main_rs_off on platform mi355x (gpu=4, slurm_extra=--exclusive): "
    line = next(line for line in text.splitlines() if lead in line)  # "Job 3: arm main_rs_off ..."
    planned = shlex.split(line.split(lead, 1)[1])
    assert planned[:2] == [*cluster.gpu.command, "run"]
    shipped = compose(["platform=mi355x"])["platform"]["runtime_run_args"]
    assert all(flag in planned for flag in shipped) and not any("shm-size" in a for a in shipped)

    with environ({**env, **cluster.gpu.env}):
        cfg = compose(["platform=mi355x", "model=glm52_mxfp4", *overrides])
        plan = Campaign(cfg).plan("main_rs_off")
        base = json.loads((campaign["results"] / "image" / "base.json").read_text())
        ctx = job_context(plan, {"image": base["image_id"], "image_id": base["image_id"]}, [1, 2, 3, 4], "test",
                          port=30999)
        argv = substitute(planned, ctx.substitutions(plan))
        launcher = Launcher(plan)
        launcher.prepare(ctx)
        launcher.write_secrets(ctx)
        try:
            started = time.monotonic()
            server = subprocess.run(argv, capture_output=True, text=True, timeout=300)
            seconds = time.monotonic() - started
            at = argv.index(base["image_id"])
            probe = argv[:at + 1] + ["sh", "-c", 'ls /dev/dri; test -e /dev/kfd && echo kfd; id -u; id -G; '
                                     'test -r "$HF_TOKEN_PATH" && wc -c < "$HF_TOKEN_PATH"; printenv HF_TOKEN || true']
            probe[probe.index("--name") + 1] += "-probe"
            seen = subprocess.run(probe, capture_output=True, text=True, timeout=300)
        finally:
            launcher.remove_secrets(ctx)
    # the container ran the image's sglang entry point with the arm's arguments (exit 1 from Python, not the
    # runtime's 125-127), and it stopped where the test image ends: sglang's dependencies are not in it
    assert server.returncode == 1, server.stderr[-2000:]
    assert 'File "/sgl-workspace/sglang/python/sglang/__init__.py"' in server.stderr, server.stderr[-2000:]
    assert "ModuleNotFoundError: No module named 'numpy'" in server.stderr, server.stderr[-2000:]
    assert seen.returncode == 0, seen.stderr
    lines = seen.stdout.split("\n")
    assert lines[:4] == ["renderD136", "renderD144", "renderD152", "renderD160"]
    assert lines[4] == "kfd" and lines[5] == str(os.getuid()) and str(DEVICE_GID) in lines[6].split()
    assert lines[7] == str(len(TOKEN)) and TOKEN not in seen.stdout
    RUNTIME_OUTPUT.append(f"--- {cluster.runtime}: the README's rocm command (shipped mi355x arguments): the container "
                          f"ran the image's sglang.launch_server up to its numpy import in {seconds:.1f} s ---")
    assert cluster.gpu.containers("label=org.specrepro.campaign=eagle_topk_greedy") == []


def test_a_gpu_node_receives_only_the_patch_layer(campaign, cluster, container_env, standin_assets, tmp_path):
    """image_distribution=layer (the shipped platforms'): the build node builds and checks the patched image as
    before, but only its build context travels; a fresh GPU node brings the base (here from its archive, on a cluster
    by digest) and builds the patch layer itself, held to the build node's labels, the base's layers and applied
    record."""
    results = tmp_path / "results"
    overrides = overrides_for(cluster.runtime, results, standin_assets) + ["platform.image_distribution=layer"]
    env = container_env["env"]
    specrepro("run", *overrides, "--", "--until", "image", env={**env, **cluster.build.env})
    record = json.loads((results / "image" / "pr_rs_on.json").read_text())
    assert record["distribution"] == "layer" and "archive" not in record
    with cluster.fresh_node("gpu-node-2") as fresh:
        run_env = {**env, **fresh.env, "ROCR_VISIBLE_DEVICES": "2,3"}
        started = time.monotonic()
        first = specrepro("preflight", *overrides, "--arm", "pr_rs_on", env=run_env).stdout
        seconds = time.monotonic() - started
        assert "building the patch layer from" in first and "arm pr_rs_on: preflight passed" in first
        assert " build --network=none " in first
        labels = fresh.labels(record["tag"])
        assert labels["org.specrepro.content-hash"] == record["content_hash"]
        assert labels["org.specrepro.base-id"] == record["base"]["image_id"]
        built = json.loads(fresh("image", "inspect", record["tag"]).stdout)[0]["RootFS"]["Layers"]
        assert built[:len(record["base"]["layers"])] == record["base"]["layers"]
        again = specrepro("preflight", *overrides, "--arm", "pr_rs_on", env=run_env).stdout
        assert "building the patch layer" not in again and "arm pr_rs_on: preflight passed" in again
        fresh.show("second GPU node after building the patch layer")
        # what each route moves to a GPU node for the patched image, measured
        archive = json.loads((campaign["results"] / "image" / "pr_rs_on.json").read_text())["archive"]
        full = Path(archive).stat().st_size
        RUNTIME_OUTPUT.append(f"--- {cluster.runtime}: bytes a GPU node receives for the patched image ---\nlayer: "
                              f"build context {record['context_bytes']} bytes; archive: {full} bytes; base image "
                              f"{record['base_bytes']} bytes (reaches each node once, shared by every arm); a fresh "
                              f"node loaded the base, built the layer and passed preflight in {seconds:.1f} s\n")
        assert record["context_bytes"] < 1_000_000 < full and record["context_bytes"] * 100 < full


@pytest.mark.parametrize("tool", ["apptainer", "pyxis"])
def test_plan_equals_run_for_apptainer_and_pyxis(tool, tmp_path, standin_assets, check_python, cpu_campaign):
    """Neither tool installs here: a recording fake runs the inner command (see fake_runtime.py)."""
    results = tmp_path / "results"
    record = tmp_path / "argv.jsonl"
    behaviour = write_behaviour(tmp_path / "behaviour.json", standin_assets)
    env = {"SPECREPRO_TEST_ASSETS": str(standin_assets), "SPECREPRO_STANDIN_BEHAVIOUR": str(behaviour),
           "SPECREPRO_TEST_PYTHON": str(check_python), "SPECREPRO_FAKE_RUNTIME_RECORD": str(record),
           "SPECREPRO_TEST_SGLANG_TREE": str(next(cpu_campaign["results"].glob("source/*/tree"))),
           "PATH": f"{ROOT / 'tests' / 'container' / 'fakebin'}{os.pathsep}{os.environ['PATH']}",
           "SLURM_JOB_GPUS": "4,5"}
    overrides = [o for o in standin_overrides(results, standin_assets, arms=("pr_rs_on",)) if not o.startswith("platform=")]
    # the fake runs the inner command on this host, where the image's paths do not exist
    overrides += [f"platform=standin_{tool}", "model.gpus=2", "gpu_check.enabled=never", "offline=true",
                  "benchmarks.bench_serving.repeats=1", "preflight.inside_image=false"]
    specrepro("run", *overrides, env=env)
    plan = specrepro("plan", *overrides, env=env).stdout
    from specrepro.serving.launch import substitute

    start = next(e for e in launches(results, "pr_rs_on") if e["event"] == "start")
    assert start["gpus"] == [4, 5] and start["gpu_source"] == "SLURM_JOB_GPUS"
    section = plan.split("## arm pr_rs_on:")[1]
    planned = shlex.split(next(line for line in section.splitlines() if line.startswith("server: "))[8:])
    assert substitute(planned, start["substitutions"]) == start["argv_list"]
    ran = [json.loads(line) for line in record.read_text().splitlines()]
    binary = "srun" if tool == "pyxis" else "apptainer"
    tool_at = start["argv_list"].index(next(a for a in start["argv_list"] if a.endswith(f"/{binary}")))
    assert [binary, *start["argv_list"][tool_at + 1:]] in ran  # the fake saw exactly that argv
    bench = json.loads((results / "arms" / "pr_rs_on" / "bench_serving" / "r1" / "run.json").read_text())
    planned_bench = next(line for line in section.splitlines() if line.startswith("bench bench_serving r1: "))
    assert substitute(shlex.split(planned_bench.split(": ", 1)[1]), start["substitutions"]) == bench["client_argv"]
    if tool == "pyxis":
        assert "--gres=gpu:2" in start["argv_list"] and any(a.startswith("--container-mounts=") for a in planned)
        # values reach srun whole through env(1) (srun would split --export=ALL,K=a,b at the comma); the nested step
        # gets its GPUs from its own --gres, so no visible-devices variable names the job's indices
        assert start["argv_list"][0] == "env" and "--export=ALL" in start["argv_list"]
        assert not any("VISIBLE_DEVICES" in a for a in start["argv_list"])
    else:
        assert "--rocm" in planned and "--cleanenv" in planned
        assert "ROCR_VISIBLE_DEVICES=4,5" in start["argv_list"]
