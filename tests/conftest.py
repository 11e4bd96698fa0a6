"""Shared fixtures: the real CPU stages run once per session; stand-in assets."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_GSM8K = ROOT.parent / "shared" / "data" / "gsm8k"
# The tests read GSM8K from the copy beside this checkout (its sha256 is in its README), never from the network:
# conf/config.yaml's data.gsm8k.path follows SPECREPRO_DATA_DIR.
os.environ["SPECREPRO_DATA_DIR"] = str(SHARED_GSM8K.parent)


def plan_text(cfg) -> str:
    """What `specrepro plan` prints before sglang's resolution: the commands, treatments, launches and cost, then the
    claims' decidability."""
    from specrepro.analysis.plan import describe_decidability
    from specrepro.core.campaign import Campaign
    from specrepro.serving.plan_text import describe_plan

    campaign = Campaign(cfg)
    return describe_plan(campaign) + "\n\n" + "\n".join(describe_decidability(campaign))


def series_module(series: str, module: str):
    """A module of a patch series' own checks (patches/<series>/checks/), imported as its judge imports it."""
    import importlib

    checks = str(ROOT / "patches" / series / "checks")
    if checks not in sys.path:
        sys.path.insert(0, checks)
    return importlib.import_module(module)


def series_copy(series: str, dest: Path, **check_args) -> Path:
    """A copy of patches/<series>/ whose checks take other probe arguments (check name -> args): a smaller run."""
    import shutil

    import yaml

    shutil.copytree(ROOT / "patches" / series, dest, ignore=shutil.ignore_patterns("__pycache__"))
    spec = yaml.safe_load((dest / "series.yaml").read_text())
    for check in spec.get("checks") or []:
        if check["name"] in check_args:
            check["args"] = check_args[check["name"]]
    (dest / "series.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return dest


def specrepro(*args, env=None, check=True, timeout=3600):
    """Run the real CLI as a user would."""
    proc = subprocess.run([sys.executable, "-m", "specrepro.cli", *args], cwd=ROOT, capture_output=True,
                          text=True, env={**os.environ, **(env or {})}, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"specrepro {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}")
    return proc


@pytest.fixture(scope="session")
def cpu_campaign(tmp_path_factory):
    """`specrepro run --cpu-only` on the default campaign: source -> patch -> patch_check -> MLflow."""
    results = tmp_path_factory.mktemp("cpu_campaign")
    proc = specrepro("run", "--cpu-only", f"results_dir={results}")
    verdict = json.loads(next(results.glob("patch_check/*/*/verdict.json")).read_text())
    return {"results": results, "verdict": verdict, "stdout": proc.stdout}


@pytest.fixture(scope="session")
def check_python(cpu_campaign):
    """The CPU check env's Python: it holds sglang 0.5.20's real bench_serving client."""
    return Path(cpu_campaign["verdict"]["env"]["path"]) / "bin" / "python"


@pytest.fixture(scope="session")
def standin_assets(check_python, tmp_path_factory):
    out = tmp_path_factory.mktemp("standin_assets")
    subprocess.run([str(check_python), str(ROOT / "tests" / "standin" / "make_assets.py"),
                    str(SHARED_GSM8K / "train.jsonl"), str(out)], check=True)
    return out


@pytest.fixture(scope="session")
def standin_campaign(tmp_path_factory, standin_assets, check_python):
    """The whole DAG against the stand-in (3 arms, GSM8K + bench_serving, gpu_check on), run once for the session:
    test_e2e_standin checks the campaign, test_mlflow_ui looks at its MLflow store."""
    results = tmp_path_factory.mktemp("standin_campaign")
    behaviour = write_behaviour(tmp_path_factory.mktemp("standin_behaviour") / "behaviour.json", standin_assets)
    env = {"SPECREPRO_TEST_PYTHON": str(check_python), "SPECREPRO_STANDIN_BEHAVIOUR": str(behaviour)}
    # gpu_check on: its rule runs in the DAG (on this CPU: the eager half and sglang's graph runner driven
    # eagerly; the CUDA graphs say "needs a GPU"), with the seed series' own GPU check on fewer rows and replays
    series = series_copy("eagle_topk", tmp_path_factory.mktemp("eagle_topk_series") / "eagle_topk",
                         draft_graph=["--greedy-rows", "512", "--runner-replays", "40"])
    overrides = standin_overrides(results, standin_assets) + [
        "gpu_check.enabled=always", f"experiment.patch_series.eagle_topk={series}"]
    proc = specrepro("run", *overrides, env=env, timeout=3000)
    return {"results": results, "env": env, "overrides": overrides, "stdout": proc.stdout + proc.stderr,
            "behaviour": behaviour}


def standin_processes(behaviour: Path) -> list:
    """Stand-in servers of one test: those whose environment names its behaviour file.

    Scoped so that another test's (or campaign's) stand-in on the same host never counts.
    """
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
            environ = (proc / "environ").read_bytes()
        except OSError:
            continue
        if b"sglang_standin.py" in cmdline and f"SPECREPRO_STANDIN_BEHAVIOUR={behaviour}".encode() in environ:
            found.append(proc.name)
    return found


def write_behaviour(path: Path, assets: Path, **overrides) -> Path:
    behaviour = {"tokenizer_path": str(assets / "tokenizer"), "gsm8k_test": str(SHARED_GSM8K / "test.jsonl"), **overrides}
    path.write_text(json.dumps(behaviour))
    return path


def standin_overrides(results: Path, assets: Path, arms=("main_rs_off", "main_rs_on", "pr_rs_on"),
                      benchmarks=("gsm8k", "bench_serving")) -> list:
    """A small campaign on the stand-in platform: the seed's arms, short benchmarks."""
    all_arms = ["main_rs_off", "main_rs_on", "pr_rs_on", "main_rs_on_nocg", "pr_rs_on_nocg"]
    out = [f"hydra.searchpath=[file://{ROOT / 'tests' / 'conf'}]", "platform=standin", f"results_dir={results}",
           f"model.server_args.model_path={assets / 'tokenizer'}",
           "benchmarks.gsm8k.repeats=1", "benchmarks.gsm8k.gsm8k.num_questions=24",
           "benchmarks.bench_serving.serving.input_len=64", "benchmarks.bench_serving.serving.output_len=32",
           "benchmarks.bench_serving.serving.num_prompts=4",
           f"benchmarks.bench_serving.serving.dataset_path={assets / 'sharegpt.json'}",
           "serve.ready_timeout_s=60", "serve.shutdown_grace_s=5", "serve.warmup_requests=1",
           # the stand-in's model folder is a tokenizer only: sglang cannot resolve arguments against it
           "preflight.resolve_server_args=false"]
    out += [f"~experiment.arms.{a}" for a in all_arms if a not in arms]
    out += [f"experiment.arms.{a}.benchmarks=[{','.join(benchmarks)}]" for a in arms]
    out.append(f"experiment.skip_claims=[{','.join(claims_needing_more_than(arms, benchmarks))}]")
    if "main_rs_off" not in arms:
        out.append(f"experiment.baseline_arm={arms[0]}")
    return out


def claims_needing_more_than(arms, benchmarks) -> list:
    """Seed claims that name an arm or a benchmark a reduced test campaign does not run."""
    import yaml

    claims = yaml.safe_load((ROOT / "conf" / "claims" / "eagle_topk_greedy.yaml").read_text())["claims"]
    out = []
    for c in claims:
        named = c.get("arms") or [a for a in (c.get("arm"), c.get("against"), c.get("from")) if a]
        if c["benchmark"] not in benchmarks or any(a not in arms for a in named):
            out.append(c["id"])
    return out


@contextmanager
def mlflow_server(backend_store: str, *extra: str, command: str = "server", env=None, port=None, log=None):
    """A real MLflow tracking server / UI on a free loopback port (or `port`: a restart on the same address); yields
    its URL.  `env`: added to its environment (an auth app's settings); `log`: a file for its output."""
    from specrepro.stages.serve import free_port
    from specrepro.stages.tracking import ui_answers

    port = port or free_port("127.0.0.1")
    out = open(log, "ab") if log else subprocess.DEVNULL
    proc = subprocess.Popen([str(Path(sys.executable).parent / "mlflow"), command, "--host", "127.0.0.1", "--port", str(port),
                             "--backend-store-uri", backend_store, "--workers", "1", *extra],
                            stdout=out, stderr=subprocess.STDOUT if log else subprocess.DEVNULL,
                            start_new_session=True, env={**os.environ, **(env or {})})
    url = f"http://127.0.0.1:{port}"
    try:
        if not ui_answers(url, proc, 120):
            raise AssertionError(f"mlflow {command} did not start on {url}")
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        if log:
            out.close()


# What the container runtime itself said about the images and containers of the
# container tests: shown in the test log whether the tests pass or fail.  Under pytest-xdist a worker's list
# reaches the controller's summary through a file in the run's shared temporary folder.
RUNTIME_OUTPUT: list = []


def _shared_tmp(config) -> Path:
    """The folder every process of one pytest run sees: the controller's basetemp (a worker's is below it)."""
    base = config._tmp_path_factory.getbasetemp()
    return base.parent if hasattr(config, "workerinput") else base


def pytest_sessionfinish(session):
    if RUNTIME_OUTPUT and hasattr(session.config, "workerinput"):
        out = _shared_tmp(session.config) / "runtime-output"
        out.mkdir(exist_ok=True)
        (out / f"{session.config.workerinput['workerid']}.json").write_text(json.dumps(RUNTIME_OUTPUT))


def pytest_terminal_summary(terminalreporter):
    blocks = list(RUNTIME_OUTPUT)
    for f in sorted((_shared_tmp(terminalreporter.config) / "runtime-output").glob("*.json")):
        blocks += json.loads(f.read_text())
    if blocks:
        terminalreporter.section("container runtime output (podman images / podman ps)")
        for block in blocks:
            terminalreporter.write_line(block)


# Scheduling (pytest-xdist; tests/run_layers.py runs each layer on two workers): every test belongs to one group,
# run by one worker in collection order, so a module's (and a runtime's) campaign is paid once.  A group is its
# module, except the container tests, one group per runtime.  Groups start longest first (tests/budget.toml's
# measured costs), which two workers turn into two lanes of about equal length.  The group is read from the node ID
# alone: the controller schedules by node IDs (and xdist's own `loadgroup` marks do not reach pytest 9's node IDs).
RUNTIMES = ("podman", "docker")
# Modules that read one session campaign share its group: a session fixture is made once per worker that asks.
SHARED_CAMPAIGN = {"test_mlflow_ui": "test_e2e_standin", "test_team_tracking": "test_e2e_standin"}


def group_of(nodeid: str) -> str:
    module = nodeid.split("::", 1)[0].rsplit("/", 1)[-1].removesuffix(".py")
    params = nodeid.rsplit("[", 1)[1].rstrip("]").split("-") if nodeid.endswith("]") else []
    runtime = next((p for p in params if p in RUNTIMES), None)
    return f"{module}[{runtime}]" if runtime else SHARED_CAMPAIGN.get(module, module)


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return GroupScheduling(config, log)


def group_costs() -> dict:
    import tomllib

    return tomllib.loads((ROOT / "tests" / "budget.toml").read_text()).get("group_cost_s", {})


def pytest_itemcollected(item):
    # in the junit XML, for tests/run_layers.py's time per group
    item.user_properties.append(("group", group_of(item.nodeid)))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    costs = group_costs()
    order = {id(item): i for i, item in enumerate(items)}
    items.sort(key=lambda item: (-costs.get(group_of(item.nodeid), 0), order[id(item)]))


def kfd_tree(layout: str, root: Path) -> Path:
    """A KFD topology under `root` from tests/data/node_facts/<layout>.json (each file names its source)."""
    spec = json.loads((ROOT / "tests" / "data" / "node_facts" / f"{layout}.json").read_text())
    nodes = root / "sys" / "class" / "kfd" / "kfd" / "topology" / "nodes"
    for i, node in enumerate(spec["nodes"]):
        d = nodes / str(i)
        d.mkdir(parents=True, exist_ok=True)
        (d / "gpu_id").write_text(f"{node['gpu_id']}\n")
        (d / "properties").write_text("".join(f"{k} {v}\n" for k, v in node["properties"].items()))
    return root


def nvidia_proc_tree(layout: str, root: Path) -> Path:
    """/proc/driver/nvidia/gpus/<pci>/information under `root` for tests/data/node_facts/<layout>.json, each file in the
    format captured on the lent H200 (tests/data/node_facts/h200_proc/)."""
    captured = next((ROOT / "tests" / "data" / "node_facts" / "h200_proc" / "proc" / "driver" / "nvidia" / "gpus")
                    .glob("*/information")).read_text()
    spec = json.loads((ROOT / "tests" / "data" / "node_facts" / f"{layout}.json").read_text())
    for gpu in spec["gpus"]:
        text = "".join(
            line.split(":", 1)[0] + ":" + line.split(":", 1)[1].replace(line.split(":", 1)[1].strip(), value)
            if (value := {"GPU UUID": gpu["uuid"], "Bus Location": gpu["pci"],
                          "Device Minor": str(gpu["minor"])}.get(line.split(":", 1)[0])) else line
            for line in captured.splitlines(keepends=True))
        d = root / "proc" / "driver" / "nvidia" / "gpus" / gpu["pci"]
        d.mkdir(parents=True, exist_ok=True)
        (d / "information").write_text(text)
    return root


def vram_sysfs(root: Path, pci: str, used_bytes: int, total_bytes: int) -> None:
    """The amdgpu driver's VRAM counters of one PCI device (bytes, one number a file, as the kernel documents)."""
    dev = root / "sys" / "bus" / "pci" / "devices" / pci
    dev.mkdir(parents=True, exist_ok=True)
    (dev / "mem_info_vram_used").write_text(f"{used_bytes}\n")
    (dev / "mem_info_vram_total").write_text(f"{total_bytes}\n")
