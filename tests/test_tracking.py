"""MLflow: unreachable server loses nothing, `specrepro log` later never duplicates, secrets never land."""

from __future__ import annotations

import sys

import pytest

from conftest import ROOT, mlflow_server, specrepro, standin_overrides, write_behaviour
from specrepro.stages.serve import free_port

SENTINELS = {"HF_TOKEN": "sentinel-hf-7f3a9c", "MLFLOW_TRACKING_PASSWORD": "sentinel-pw-51be02"}

pytestmark = pytest.mark.e2e


def small_campaign(tmp_path, **behaviour):
    assets = tmp_path  # no bench_serving here: GSM8K only
    (tmp_path / "tokenizer").mkdir(exist_ok=True)  # the model folder the server is given
    beh = write_behaviour(tmp_path / "behaviour.json", assets, **behaviour)
    env = {"SPECREPRO_TEST_PYTHON": sys.executable, "SPECREPRO_STANDIN_BEHAVIOUR": str(beh)}
    results = tmp_path / "results"
    overrides = standin_overrides(results, assets, arms=("main_rs_on",), benchmarks=("gsm8k",)) + [
        "benchmarks.gsm8k.gsm8k.num_questions=8"]
    return results, overrides, env


@pytest.fixture
def tracking_server(tmp_path):
    store = tmp_path / "server"
    store.mkdir()
    with mlflow_server(f"sqlite:///{store}/mlflow.db", "--artifacts-destination", str(store / "artifacts")) as url:
        yield url


def count_runs(uri: str) -> int:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("specrepro/eagle_topk_greedy")
    return len(client.search_runs([exp.experiment_id], max_results=1000)) if exp else 0


def test_unreachable_tracking_server_loses_nothing_and_log_later_is_idempotent(tmp_path, tracking_server):
    results, overrides, env = small_campaign(tmp_path)
    dead = f"http://127.0.0.1:{free_port('127.0.0.1')}"
    env.update(MLFLOW_HTTP_REQUEST_MAX_RETRIES="0", MLFLOW_HTTP_REQUEST_TIMEOUT="5")
    proc = specrepro("run", *overrides, f"tracking.uri={dead}", env=env, check=False)
    # the server is checked first: nothing starts (an outage after the check: tests/test_team_tracking.py)
    assert proc.returncode == 2 and f"MLflow tracking server {dead}: step `reach` failed" in proc.stderr
    assert not (results / "arms").exists()
    specrepro("run", *overrides, env=env)  # measured with the local store
    assert (results / "tables" / "runs.csv").is_file() and (results / "report" / "report.md").is_file()
    assert list(results.glob("arms/main_rs_on/gsm8k/r1/run.json"))
    # later, with the server up: log it, twice
    specrepro("log", str(results), "--tracking-uri", tracking_server)
    first = count_runs(tracking_server)
    assert first >= 3  # campaign, arm, run
    specrepro("log", str(results), "--tracking-uri", tracking_server)
    assert count_runs(tracking_server) == first


def test_secrets_never_reach_any_output(tmp_path):
    # The stand-in even prints the secrets into its own log.
    results, overrides, env = small_campaign(tmp_path, print_env=list(SENTINELS))
    env.update(SENTINELS)
    specrepro("run", *overrides, env=env)
    leaks = []
    for root in (results, ROOT / ".snakemake" / "log"):
        for path in root.rglob("*"):
            if path.is_file():
                data = path.read_bytes()
                leaks += [f"{path}: {name}" for name, value in SENTINELS.items() if value.encode() in data]
    assert leaks == []
    assert "environment HF_TOKEN=***" in (results / "arms" / "main_rs_on" / "server.log").read_text()


def test_secret_in_config_is_rejected():
    proc = specrepro("config", "+platform.server_env.HF_TOKEN=abc", check=False)
    assert proc.returncode == 2 and "platform.server_env.HF_TOKEN" in proc.stderr and "passthrough_env" in proc.stderr


def test_a_changed_server_command_re_measures_and_keeps_the_old_records_aside(tmp_path):
    """The stale-label sequence: rejection sampling on, then off; the second run must not reuse the first's numbers."""
    import json

    import pandas as pd
    from mlflow.tracking import MlflowClient

    results, overrides, env = small_campaign(tmp_path)
    specrepro("run", *overrides, env=env)  # main_rs_on: rejection sampling on (the stand-in's accept length drops)
    first = json.loads((results / "arms" / "main_rs_on" / "gsm8k" / "r1" / "run.json").read_text())
    off = ["experiment.arms.main_rs_on.extra_server_args={speculative_use_rejection_sampling: false}"]
    specrepro("run", *overrides, *off, env=env)
    second = json.loads((results / "arms" / "main_rs_on" / "gsm8k" / "r1" / "run.json").read_text())
    assert second["key"] != first["key"] and second["server_launch"] != first["server_launch"]
    assert second["metrics"]["accept_length"] > first["metrics"]["accept_length"] * 1.1  # really re-measured
    kept = list((results / "arms" / "main_rs_on" / "superseded").glob("*/gsm8k/r1/run.json"))
    assert len(kept) == 1 and json.loads(kept[0].read_text())["key"] == first["key"]  # kept aside, never deleted
    arm = json.loads((results / "arms" / "main_rs_on" / "arm.json").read_text())
    assert arm["server_args"]["speculative_use_rejection_sampling"] is False
    assert arm["runs"]["gsm8k/r1"] == {"key": second["key"], "server_launch": second["server_launch"]}
    runs = pd.read_csv(results / "tables" / "runs.csv")
    al = runs[(runs.metric == "accept_length")]["value"].tolist()
    assert al == [second["metrics"]["accept_length"]]
    client = MlflowClient(f"sqlite:///{results}/mlflow.db")
    exp = client.get_experiment_by_name("specrepro/eagle_topk_greedy")
    parents = [r for r in client.search_runs([exp.experiment_id]) if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 2 and len({p.info.run_name for p in parents}) == 2  # told apart at a glance
    newest = max(parents, key=lambda r: r.info.start_time)
    child = [r for r in client.search_runs([exp.experiment_id], f"tags.`mlflow.parentRunId` = '{newest.info.run_id}'")
             if r.info.run_name == "main_rs_on"][0]
    assert child.data.params["server_args.speculative_use_rejection_sampling"] == "False"
    assert child.data.metrics["gsm8k.accept_length"] == second["metrics"]["accept_length"]
