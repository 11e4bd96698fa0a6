"""A team's MLflow: a real `mlflow server --app-name basic-auth` (SQL store, artifact proxy), users made through
MLflow's own auth API, campaigns logged with a user account.

One server for the whole session.  No new measurement runs here: the stand-in campaign of the session (conftest's
`standin_campaign`) is copied, then logged by `specrepro run` with `tracking.uri` set (the DAG's own tracking jobs:
every measurement is on disk, so no other job runs) or by `specrepro log`, as a CI artifact would be.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from conftest import ROOT, mlflow_server, specrepro, standin_overrides, write_behaviour
from specrepro.stages.serve import free_port

ADMIN = ("admin", "admin-pw-7d21c4e9")
# the campaign's user: creates the experiment, logs every run
ALICE = ("alice", "sentinel-alice-pw-9c3e51")
# may read every experiment (the server's default permission), create runs in none of them
READER = ("reader", "reader-pw-44a0b7e2")
EXPERIMENT = "specrepro/eagle_topk_greedy"


class TeamServer:
    """The session's authenticated server; stop() and start() keep its address, stores and users."""

    def __init__(self, root: Path):
        self.root, self.port = root, free_port("127.0.0.1")
        self.url = f"http://127.0.0.1:{self.port}"
        ini = root / "basic_auth.ini"
        # MLflow's own basic_auth.ini keys; default_permission READ is MLflow's default too
        ini.write_text("[mlflow]\ndefault_permission = READ\n"
                       f"database_uri = sqlite:///{root}/basic_auth.db\nadmin_username = {ADMIN[0]}\n"
                       "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
                       # each password check is a slow hash (about 1-2 s on a busy 2-core host): once a minute per user
                       "auth_cache_ttl_seconds = 60\n")
        self.env = {"MLFLOW_AUTH_CONFIG_PATH": str(ini), "MLFLOW_AUTH_ADMIN_PASSWORD": ADMIN[1],
                    "MLFLOW_FLASK_SERVER_SECRET_KEY": "specrepro-tests-csrf-key",
                    # its GenAI job runner (five huey consumers) is not what a tracking server needs here
                    "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        self.artifacts = root / "artifacts"
        self._running = None

    def start(self) -> None:
        self._running = mlflow_server(f"sqlite:///{self.root}/mlflow.db", "--app-name", "basic-auth",
                                      "--serve-artifacts", "--artifacts-destination", str(self.artifacts),
                                      env=self.env, port=self.port, log=self.root / "server.log")
        self._running.__enter__()

    def stop(self) -> None:
        self._running.__exit__(None, None, None)
        self._running = None


@contextmanager
def as_user(user):
    """MLflow's client in this process, as `user` (its own environment variables, put back afterwards)."""
    saved = {k: os.environ.get(k) for k in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")}
    os.environ.update(MLFLOW_TRACKING_USERNAME=user[0], MLFLOW_TRACKING_PASSWORD=user[1])
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def user_env(user, **extra) -> dict:
    # MLflow's retries and timeouts are the campaign's own (tracking.http_max_retries, http_timeout_s): none set here
    env = {"MLFLOW_TRACKING_USERNAME": user[0], "MLFLOW_TRACKING_PASSWORD": user[1], **extra}
    assert not any(k.startswith("MLFLOW_HTTP_REQUEST_") for k in {**os.environ, **env})
    return env


@pytest.fixture(scope="session")
def team_server(tmp_path_factory):
    from mlflow.server.auth.client import AuthServiceClient

    server = TeamServer(tmp_path_factory.mktemp("team_mlflow"))
    server.start()
    with as_user(ADMIN):
        auth = AuthServiceClient(server.url)
        for name, password in (ALICE, READER):
            auth.create_user(name, password)
    yield server
    if server._running is not None:
        server.stop()


def campaign_copy(standin_campaign, dest: Path) -> Path:
    """The session's stand-in campaign as a new campaign's results folder: its files, no tracking of its own yet."""
    shutil.copytree(standin_campaign["results"], dest, symlinks=True)
    shutil.rmtree(dest / "tracking")
    (dest / "mlflow.db").unlink()
    shutil.rmtree(dest / "mlartifacts", ignore_errors=True)
    return dest


def expected_runs(results: Path) -> int:
    """Runs a complete logging of `results` holds, counted from its files: the campaign, each patch and GPU check, each
    arm and each run its arm record lists."""
    arms = [json.loads(p.read_text()) for p in results.glob("arms/*/arm.json")]
    return (1 + len(list(results.glob("patch_check/*/*/verdict.json"))) + len(list(results.glob("gpu_check/*/verdict.json")))
            + len(arms) + sum(len(a["runs"]) for a in arms))


def server_runs(url: str, campaign_id=None) -> list:
    from mlflow.tracking import MlflowClient

    with as_user(ADMIN):
        client = MlflowClient(url)
        exp = client.get_experiment_by_name(EXPERIMENT)
        if exp is None:
            return []
        runs = client.search_runs([exp.experiment_id], max_results=5000)
    # by key: a run the outage cut off after its creation has its key, not yet its other tags
    return [r for r in runs if campaign_id is None or campaign_id in r.data.tags.get("specrepro.key", "")]


def log_to(server, results: Path, user=ALICE, check=True, **env):
    return specrepro("log", str(results), "--tracking-uri", server.url, env=user_env(user, **env), check=check)


def measured_files(results: Path) -> dict:
    return {p.relative_to(results).as_posix(): p.stat().st_mtime_ns
            for p in (results / "arms").rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def logged_campaign(team_server, standin_campaign, tmp_path_factory):
    """The stand-in campaign's copy through `specrepro run` again, now with the team's server as tracking.uri and
    alice's credentials in the environment, as a user who adds a team server to a measured campaign would."""
    results = campaign_copy(standin_campaign, tmp_path_factory.mktemp("team_campaign") / "results")
    measured = measured_files(results)
    overrides = [o for o in standin_campaign["overrides"] if not o.startswith("results_dir=")]
    started = time.monotonic()
    proc = specrepro("run", *overrides, f"results_dir={results}", f"tracking.uri={team_server.url}",
                     env=user_env(ALICE, **standin_campaign["env"]), timeout=900)
    return {"results": results, "proc": proc, "seconds": time.monotonic() - started, "measured": measured,
            "jobs": set(re.findall(r"^(?:local)?rule (\w+):$", proc.stdout + proc.stderr, re.M)),
            "campaign_id": (results / "tracking" / "campaign_id").read_text().strip()}


@pytest.mark.e2e
def test_a_campaign_logs_every_run_and_artifact_with_a_user_account(team_server, logged_campaign):
    from mlflow.tracking import MlflowClient

    results, cid = logged_campaign["results"], logged_campaign["campaign_id"]
    # the DAG's tracking jobs alone ran: nothing was measured again
    assert "track_campaign" in logged_campaign["jobs"]
    assert logged_campaign["jobs"] <= {"tracking_check", "track_campaign", "all"}, logged_campaign["jobs"]
    assert measured_files(results) == logged_campaign["measured"]
    runs = server_runs(team_server.url, cid)
    assert len(runs) == expected_runs(results)
    assert {r.info.user_id for r in runs} == {ALICE[0]}  # the runs say who logged them (MLflow's User column)
    assert {r.info.status for r in runs} <= {"FINISHED", "FAILED"}
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    # through the artifact proxy: the server holds the files, the client saw mlflow-artifacts: URIs only
    assert parent.info.artifact_uri.startswith("mlflow-artifacts:")
    with as_user(ALICE):
        client = MlflowClient(team_server.url)
        report = {a.path for a in client.list_artifacts(parent.info.run_id, "report")}
        plots = client.list_artifacts(parent.info.run_id, "report/plots")
        arm = next(r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id
                   and r.info.run_name == "main_rs_on")
        server_files = {a.path for a in client.list_artifacts(arm.info.run_id, "server")}
    assert {"report/report.html", "report/pr_comment.md"} <= report
    assert len(plots) == len(list((results / "report" / "plots").glob("*.png"))) > 0
    assert "server/launches.jsonl" in server_files
    stored = list(team_server.artifacts.rglob("report.html"))
    assert len(stored) == 1 and stored[0].read_bytes() == (results / "report" / "report.html").read_bytes()
    # the dashboard link printed (and kept on the campaign's run) points at the team server
    link = parent.data.tags["specrepro.dashboard"]
    assert link.startswith(f"{team_server.url}/#/experiments/{parent.info.experiment_id}/runs?")
    proc = logged_campaign["proc"]
    assert f"MLflow dashboard, one row per arm: {link}\n" in proc.stdout + proc.stderr
    # logged again: nothing new
    again = log_to(team_server, results)
    assert ": 0 new" in again.stdout
    assert len(server_runs(team_server.url, cid)) == len(runs)


@pytest.mark.e2e
def test_the_dashboard_link_opens_on_the_team_server_once_signed_in(team_server, logged_campaign, tmp_path):
    """The link the run printed, in Chromium: a stranger gets the server's 401, alice signs in through the browser's
    own prompt and sees one folded row per arm."""
    from chromium import LOOPBACK_ONLY, Page

    runs = server_runs(team_server.url, logged_campaign["campaign_id"])
    link = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags).data.tags["specrepro.dashboard"]
    with Page(tmp_path / "stranger", 1600, 700, resolver_rules=LOOPBACK_ONLY) as page:
        page.open(link)
        document = next(e["params"]["response"] for e in page.events if e.get("method") == "Network.responseReceived"
                        and e["params"]["type"] == "Document")
        assert document["status"] == 401 and "Group: " not in page.eval("document.body.innerText")
    with Page(tmp_path / "alice", 1900, 700, resolver_rules=LOOPBACK_ONLY, credentials=ALICE) as page:
        page.open(link)
        assert page.wait_until("document.body.innerText.includes('Group: pr_rs_on')"
                               " && document.body.innerText.includes('(average)')", 120)
        page.screenshot(tmp_path / "team_dashboard.png")
        text = page.eval("document.body.innerText")
        signed_in = [e for e in page.events if e.get("method") == "Fetch.authRequired"]
    assert signed_in, "the server never asked Chromium to sign in"
    assert "Group by: arm" in text
    for arm in ("main_rs_off", "main_rs_on", "pr_rs_on"):
        assert f"Group: {arm}" in text, f"no row for arm {arm}"


@pytest.mark.e2e
def test_runs_carry_the_tags_a_team_filters_by(team_server, logged_campaign):
    import yaml

    results = logged_campaign["results"]
    cfg = yaml.safe_load((results / "resolved_config.yaml").read_text())
    runs = server_runs(team_server.url, logged_campaign["campaign_id"])
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    for run in runs:
        tags = run.data.tags
        assert (tags["experiment"], tags["model"], tags["platform"], tags["sglang_version"]) == (
            cfg["experiment"]["name"], cfg["model"]["name"], cfg["platform"]["name"], cfg["sglang"]["version"])
        assert len(tags["config_hash"]) == 16 and tags["specrepro_commit"] == commit
    source = json.loads(next(results.glob("source/*/manifest.json")).read_text())
    patch = json.loads(next(results.glob("patch/*/*/manifest.json")).read_text())
    patched = [r for r in runs if r.data.tags.get("arm") == "pr_rs_on"]
    assert len(patched) == 1 + len(json.loads((results / "arms" / "pr_rs_on" / "arm.json").read_text())["runs"])
    shas = {p["sha256"] for p in patch["patches"]}
    for run in patched:  # the arm and its runs
        tags = run.data.tags
        assert tags["series"] == "eagle_topk" and set(tags["patch_sha256"].split(",")) == shas
        assert tags["sglang_sha256"] == (source.get("archive_sha256") or source["commit"])
        assert tags["gpu_model"]
    unpatched = [r for r in runs if r.data.tags.get("arm") == "main_rs_on"]
    assert unpatched and {r.data.tags["series"] for r in unpatched} == {"none"}


@pytest.mark.e2e
def test_the_password_is_nowhere_under_results_nor_in_the_servers_params_and_tags(team_server, logged_campaign):
    results = logged_campaign["results"]
    leaks = [str(p) for p in results.rglob("*") if p.is_file() and ALICE[1].encode() in p.read_bytes()]
    assert leaks == []
    for run in server_runs(team_server.url, logged_campaign["campaign_id"]):
        assert not [k for k, v in {**run.data.params, **run.data.tags}.items() if ALICE[1] in v]
    assert ALICE[1] not in logged_campaign["proc"].stdout + logged_campaign["proc"].stderr


def small_campaign(results: Path) -> tuple:
    """A one-arm stand-in campaign (GSM8K only), its overrides and environment: the model folder and the behaviour
    file exist, nothing else is needed before the tracking check stops it."""
    assets = results.parent / "assets"
    (assets / "tokenizer").mkdir(parents=True, exist_ok=True)
    env = {"SPECREPRO_TEST_PYTHON": sys.executable,
           "SPECREPRO_STANDIN_BEHAVIOUR": str(write_behaviour(results.parent / "behaviour.json", assets))}
    return standin_overrides(results, assets, arms=("main_rs_on",), benchmarks=("gsm8k",)), env


def plan_and_run(results: Path, uri: str, user, commands=("plan", "run")) -> list:
    """`plan` and `run` of a small stand-in campaign against `uri` as `user`: (command, process, seconds)."""
    overrides, env = small_campaign(results)
    out = []
    for command in [["plan", "--no-resolve"] if c == "plan" else [c] for c in commands]:
        started = time.monotonic()
        proc = specrepro(*command, *overrides, f"tracking.uri={uri}", env=user_env(user, **env), check=False)
        out.append((command[0], proc, time.monotonic() - started))
    return out


@pytest.mark.e2e
@pytest.mark.parametrize("case", ["wrong password", "unreachable", "no permission"])
def test_plan_and_run_fail_in_seconds_before_any_launch(team_server, tmp_path, case):
    dead = f"http://127.0.0.1:{free_port('127.0.0.1')}"
    uri, user, step = {"wrong password": (team_server.url, (ALICE[0], "not-her-password"), "credentials"),
                       "unreachable": (dead, ALICE, "reach"),
                       "no permission": (team_server.url, READER, "permission")}[case]
    if case == "no permission":
        from mlflow.tracking import MlflowClient

        with as_user(ALICE):  # alice's experiment, which the reader may only read
            client = MlflowClient(team_server.url)
            if client.get_experiment_by_name(EXPERIMENT) is None:
                client.create_experiment(EXPERIMENT)
    results = tmp_path / "results"
    # the permission step is the same code in both: `plan` alone shows it
    for command, proc, seconds in plan_and_run(results, uri, user, ("plan",) if case == "no permission" else
                                               ("plan", "run")):
        assert proc.returncode == 2, (command, proc.stdout, proc.stderr)
        assert f"specrepro {command}: MLflow tracking server {uri}: step `{step}` failed" in proc.stderr
        assert seconds < 30, (command, seconds)  # a Python start, a composition and at most three short requests
        assert user[1] not in proc.stdout + proc.stderr
    # nothing started: no job ran, no log, no source, no server
    assert not (results / "logs").exists() and not (results / "arms").exists()


@pytest.mark.e2e
def test_the_dags_first_job_checks_the_server_before_any_source_or_image(team_server, tmp_path):
    """Snakemake alone (no `specrepro run`): the tracking check is the job every source and image job waits for."""
    results = tmp_path / "results"
    overrides, env = small_campaign(results)
    overrides.append(f"tracking.uri={team_server.url}")
    def snakemake(user, *targets):
        return subprocess.run([sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"), "--directory",
                               str(ROOT), "--cores", "1", *targets, "--config", "overrides=" + json.dumps(overrides)],
                              cwd=ROOT, capture_output=True, text=True, timeout=600,
                              env={**os.environ, **user_env(user, **env)})

    proc = snakemake((ALICE[0], "not-her-password"))
    assert proc.returncode != 0
    log = (results / "logs" / "track" / "server_check.log").read_text()
    assert f"MLflow tracking server {team_server.url}: step `credentials` failed" in log
    assert "not-her-password" not in log
    assert not (results / "source").exists() and not (results / "arms").exists()
    # with her password the job passes and records what it checked, no credentials in it
    record = results / "tracking" / "server_check.json"
    assert snakemake(ALICE, str(record)).returncode == 0
    checked = json.loads(record.read_text())
    assert checked["user"] == ALICE[0] and [s["step"] for s in checked["steps"]] == ["reach", "credentials", "permission"]
    assert ALICE[1] not in record.read_text()


@pytest.mark.e2e
def test_an_outage_mid_logging_loses_nothing_and_the_rerun_logs_exactly_the_missing_runs(
        team_server, standin_campaign, tmp_path):
    results = campaign_copy(standin_campaign, tmp_path / "results")
    total = expected_runs(results)
    proc = subprocess.Popen([sys.executable, "-m", "specrepro.cli", "log", str(results), "--tracking-uri",
                             team_server.url], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **user_env(ALICE)})
    # the server goes down once the campaign's first runs are there, in the middle of the logging
    cid_path = results / "tracking" / "campaign_id"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if cid_path.is_file() and len(server_runs(team_server.url, cid_path.read_text().strip())) >= 3:
            break
        time.sleep(0.2)
    stopped = time.monotonic()
    team_server.stop()
    out, err = proc.communicate(timeout=300)
    failed_after = time.monotonic() - stopped
    team_server.start()
    cid = cid_path.read_text().strip()
    before = len(server_runs(team_server.url, cid))
    assert proc.returncode == 2, (out, err)  # tracking fails, clearly and soon (MLflow's own default, 7 retries
    # with doubling back-off, takes minutes for each request the outage meets) ...
    assert failed_after < 90, failed_after
    assert f"MLflow at {team_server.url} failed while this campaign was logged" in err
    assert f"`specrepro log {results}`" in err and "nothing measured is lost" in err
    assert 3 <= before < total
    rerun = log_to(team_server, results)
    assert f": {total - before} new" in rerun.stdout  # exactly the missing ones ...
    runs = server_runs(team_server.url, cid)
    keys = [r.data.tags["specrepro.key"] for r in runs]
    assert len(runs) == total and len(set(keys)) == total  # ... and no duplicate
    assert {r.info.status for r in runs} <= {"FINISHED", "FAILED"}  # none left RUNNING by the outage


@pytest.mark.e2e
def test_two_campaigns_logging_at_once_get_two_complete_run_sets(team_server, standin_campaign, tmp_path):
    folders = [campaign_copy(standin_campaign, tmp_path / name) for name in ("first", "second")]
    procs = [subprocess.Popen([sys.executable, "-m", "specrepro.cli", "log", str(f), "--tracking-uri", team_server.url],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, **user_env(ALICE)}) for f in folders]
    outputs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    ids = [(f / "tracking" / "campaign_id").read_text().strip() for f in folders]
    assert ids[0] != ids[1]
    for folder, cid in zip(folders, ids):
        runs = server_runs(team_server.url, cid)
        assert len(runs) == expected_runs(folder) == len({r.data.tags["specrepro.key"] for r in runs})
        parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
        assert len(parents) == 1
    # the README's search: one arm across the two campaigns, one row each
    import mlflow
    import yaml

    platform = yaml.safe_load((folders[0] / "resolved_config.yaml").read_text())["platform"]["name"]
    with as_user(ALICE):
        mlflow.set_tracking_uri(team_server.url)
        try:
            rows = mlflow.search_runs(experiment_names=[EXPERIMENT], order_by=["attributes.start_time DESC"],
                                      filter_string=f"attributes.run_name = 'pr_rs_on' AND tags.platform = '{platform}'")
        finally:
            mlflow.set_tracking_uri(None)  # back to MLflow's default resolution for the rest of the session
    rows = rows[rows["tags.campaign_id"].isin(ids)]  # the session's other campaigns are on the server too
    assert sorted(rows["tags.campaign_id"]) == sorted(ids)
    arm = folders[0] / "arms" / "pr_rs_on"
    measured = [json.loads((arm / stem / "run.json").read_text())["metrics"]["accept_length"]
                for stem in json.loads((arm / "arm.json").read_text())["runs"] if stem.startswith("gsm8k/")]
    assert list(rows["metrics.gsm8k.accept_length"]) == pytest.approx([sum(measured) / len(measured)] * 2)


# --- fast: no server -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("uri", ["http://alice:hunter2-pw@mlflow.example:5000", "https://alice@mlflow.example"])
def test_a_tracking_uri_that_carries_credentials_is_refused(uri):
    from specrepro.stages.tracking import tracking_uri
    from specrepro.stages.tracking_server import TrackingServerError

    with pytest.raises(TrackingServerError) as err:
        tracking_uri({"tracking": {"uri": uri}, "results_dir": "/nonexistent"})
    assert "tracking.uri" in str(err.value) and "MLFLOW_TRACKING_PASSWORD" in str(err.value)
    assert "hunter2-pw" not in str(err.value)


def test_tracking_uri_unset_keeps_the_local_store_and_checks_no_server(tmp_path, monkeypatch):
    from specrepro.stages.tracking import tracking_uri
    from specrepro.stages.tracking_server import check_campaign_server

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = {"tracking": {"uri": None, "experiment_name": "x"}, "results_dir": str(tmp_path)}
    assert tracking_uri(cfg) == f"sqlite:///{tmp_path}/mlflow.db"
    assert check_campaign_server(cfg) is None


def test_a_campaign_id_is_written_once_and_a_folder_logged_before_ids_keeps_its_keys(tmp_path):
    from specrepro.stages.tracking import campaign_id

    fresh = tmp_path / "fresh"
    (fresh / "tracking").mkdir(parents=True)
    (fresh / "tracking" / "server_check.json").write_text("{}")  # the tracking server's check, before any logging
    first = campaign_id(fresh)
    assert len(first) == 16 and campaign_id(fresh) == first
    assert campaign_id(tmp_path / "other") != first
    legacy = tmp_path / "legacy"
    (legacy / "tracking").mkdir(parents=True)
    (legacy / "tracking" / "campaign.json").write_text("{}")  # what a tracking job wrote before campaign ids
    assert campaign_id(legacy) == "" and not (legacy / "tracking" / "campaign_id").exists()



def test_mlflow_retries_and_timeout_are_the_campaigns_unless_the_environment_sets_them(monkeypatch):
    from mlflow.environment_variables import MLFLOW_HTTP_REQUEST_MAX_RETRIES, MLFLOW_HTTP_REQUEST_TIMEOUT

    from specrepro.stages.tracking import http_limits

    for var in ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_TIMEOUT"):
        monkeypatch.delenv(var, raising=False)
    mlflows = (MLFLOW_HTTP_REQUEST_MAX_RETRIES.get(), MLFLOW_HTTP_REQUEST_TIMEOUT.get())
    assert mlflows == (7, 120)  # MLflow's own: minutes of retries for each request an outage meets
    with http_limits({"http_max_retries": 2, "http_timeout_s": 30}):
        assert (MLFLOW_HTTP_REQUEST_MAX_RETRIES.get(), MLFLOW_HTTP_REQUEST_TIMEOUT.get()) == (2, 30)
    assert (MLFLOW_HTTP_REQUEST_MAX_RETRIES.get(), MLFLOW_HTTP_REQUEST_TIMEOUT.get()) == mlflows
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "5")  # a user's own setting wins
    with http_limits({"http_max_retries": 2, "http_timeout_s": 30}):
        assert (MLFLOW_HTTP_REQUEST_MAX_RETRIES.get(), MLFLOW_HTTP_REQUEST_TIMEOUT.get()) == (5, 30)
    assert MLFLOW_HTTP_REQUEST_MAX_RETRIES.get() == 5


def test_the_dashboard_ui_is_stopped_within_its_grace_even_when_it_ignores_sigterm():
    """`specrepro open`'s Ctrl-C ends the UI's process group in bounded time: a process that ignores SIGTERM (as a
    uvicorn waiting on a client's open connection does) and a child of it are killed once the grace runs out."""
    from specrepro.stages.tracking import _stop_group

    code = ("import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "subprocess.Popen([sys.executable, '-c', 'import signal, time; signal.signal(signal.SIGTERM, "
            "signal.SIG_IGN); time.sleep(600)']); print('up', flush=True); time.sleep(600)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout.readline().strip() == "up"
    started = time.monotonic()
    assert _stop_group(proc, grace_s=1)
    took = time.monotonic() - started
    assert proc.returncode == -9 and 1 <= took < 5, (proc.returncode, took)
    left = subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True, text=True).stdout.split()
    time.sleep(0.2)
    assert not [p for p in left if os.path.exists(f"/proc/{p}") and "Z" not in open(f"/proc/{p}/stat").read().split()[2]]
    # a group that ends on SIGTERM is not waited for
    quick = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    started = time.monotonic()
    assert _stop_group(quick, grace_s=10) and quick.returncode == -15 and time.monotonic() - started < 5
