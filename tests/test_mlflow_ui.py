"""The real MLflow UI on a campaign's store, looked at in headless Chromium.

Uses the session's stand-in campaign (conftest.standin_campaign, its SQLite store), starts
`mlflow ui` on it, and checks in Debian's Chromium, in a new browser profile
(a user who never opened MLflow), what the dashboard link printed at the end of
`specrepro run` shows without a click, that the plain runs page lists the
campaign's runs, and that `specrepro open` serves the dashboard until Ctrl-C.
.ci/run installs chromium.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import mlflow_server

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def campaign(standin_campaign):
    return standin_campaign


@pytest.fixture(scope="module")
def mlflow_ui(campaign):
    with mlflow_server(f"sqlite:///{campaign['results']}/mlflow.db", command="ui") as url:
        yield url


def dump_dom(url: str, tmp_path: Path, window: str = "1600,1200") -> str:
    if CHROMIUM is None:
        pytest.fail("chromium is not installed: .ci/run installs Debian's chromium (apt-get)")
    out = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                          "--disable-background-networking", "--disable-component-update", "--disable-sync",
                          f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=20000",
                          f"--window-size={window}", f"--screenshot={tmp_path / 'page.png'}", "--dump-dom", url],
                         capture_output=True, text=True, timeout=120)
    return out.stdout


def test_ui_lists_the_campaign_runs_and_metrics(mlflow_ui, tmp_path):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(mlflow_ui)
    exp = client.get_experiment_by_name("specrepro/eagle_topk_greedy")
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    # The runs page: the campaign's parent run (arms and repeats nest under it) and the count of all runs.
    dom = dump_dom(f"{mlflow_ui}/#/experiments/{exp.experiment_id}/runs", tmp_path)
    text = re.sub(r"<[^>]+>", "", dom)
    assert "eagle_topk_greedy" in text
    assert f"{len(runs)} matching runs" in text
    # A repeat's page: its name, and the metrics the campaign logged.
    run = next(r for r in runs if r.info.run_name == "pr_rs_on/gsm8k/r1")
    dom = dump_dom(f"{mlflow_ui}/#/experiments/{exp.experiment_id}/runs/{run.info.run_id}", tmp_path)
    assert "pr_rs_on/gsm8k/r1" in dom
    for metric in ("accept_length", "accept_length_decode_log", "accept_length_meta_info", "accuracy", "invalid_rate"):
        assert metric in dom, f"metric {metric} not shown"


def js_number(value: float) -> str:
    """A float as the UI's JavaScript prints it (shortest round-trip; integers without `.0`)."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def printed_dashboard_link(stdout: str) -> str:
    """The dashboard link the end of `specrepro run` printed (after the report's path)."""
    tail = stdout[stdout.rindex("\nReport: "):]
    return re.search(r"^MLflow dashboard, one row per arm: (\S+)$", tail, re.M).group(1)


def test_the_dashboard_link_printed_at_the_end_shows_one_row_per_arm(mlflow_ui, campaign, tmp_path):
    """The link `specrepro run` printed last, opened in Chromium as a user who never opened MLflow: the runs page
    grouped by arm, one folded row per arm with its headline numbers, without a click."""
    from mlflow.tracking import MlflowClient

    from chromium import LOOPBACK_ONLY, Page

    link = printed_dashboard_link(campaign["stdout"])
    logged = json.loads((campaign["results"] / "tracking" / "campaign.json").read_text())
    assert link == logged["dashboard"]
    # for `mlflow ui` on its default address, as the lines under it say: here the test's port
    assert link.startswith("http://127.0.0.1:5000/#/experiments/") and "workflowType=machine_learning" in link
    assert f"specrepro open {campaign['results']}" in campaign["stdout"]
    with Page(tmp_path / "profile", 1900, 700, resolver_rules=LOOPBACK_ONLY) as page:
        page.open(link.replace("http://127.0.0.1:5000", mlflow_ui))
        assert page.wait_until("document.body.innerText.includes('Group: pr_rs_on')"
                               " && document.body.innerText.includes('(average)')", 120)
        page.screenshot(campaign["results"] / "dashboard.png")  # kept with the campaign, for a look
        text = page.eval("document.body.innerText")
    # The model-training runs page (not the GenAI overview), one folded row per arm.
    assert "Group by: arm" in text and "Traces" in text
    client = MlflowClient(mlflow_ui)
    exp = client.get_experiment_by_name("specrepro/eagle_topk_greedy")
    arm_runs = {r.info.run_name: r for r in client.search_runs([exp.experiment_id], "tags.arm != ''")
                if r.info.run_name in ("main_rs_off", "main_rs_on", "pr_rs_on")}
    assert sorted(arm_runs) == ["main_rs_off", "main_rs_on", "pr_rs_on"]
    for arm, run in arm_runs.items():
        assert f"Group: {arm}" in text, f"no row for arm {arm}"
        # The headline numbers are in the row, without a click: means over repeats, and the claim counts.
        for metric in ("gsm8k.accept_length", "bench_serving.output_throughput", "claims.reproduced"):
            assert js_number(run.data.metrics[metric]) in text, f"{arm}: {metric} not shown"
    assert text.count("(average)") >= 3 * 4  # the folded rows show values, not placeholders
    assert "matching runs" in text


def test_specrepro_open_serves_the_dashboard_until_ctrl_c(campaign, tmp_path):
    """`specrepro open RESULTS_DIR`: mlflow ui on the campaign's store on a free loopback port, the dashboard link
    for that port printed; Ctrl-C (SIGINT) stops the UI and nothing is left listening."""
    import signal
    import socket
    import sys
    import time

    from chromium import LOOPBACK_ONLY, Page

    # started as a shell without job control starts a background command (`specrepro open DIR &` in a script, a CI
    # runner): with SIGINT ignored, which Python keeps unless the command installs its own handler
    proc = subprocess.Popen([sys.executable, "-m", "specrepro.cli", "open", str(campaign["results"])],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        first = proc.stdout.readline()
        link = re.match(r"MLflow dashboard, one row per arm: (http://127\.0\.0\.1:(\d+)/#/experiments/\S+)$",
                        first.strip())
        assert link, first
        port = int(link.group(2))
        with Page(tmp_path / "profile", 1600, 700, resolver_rules=LOOPBACK_ONLY) as page:
            page.open(link.group(1))
            assert page.wait_until("document.body.innerText.includes('Group: main_rs_on')", 120)
        proc.send_signal(signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            tree = subprocess.run(["ps", "-ww", "-eo", "pid,pgid,stat,etime,wchan:20,cmd", "--forest"], capture_output=True,
                                  text=True).stdout
            raise AssertionError(f"specrepro open did not stop within 60 s of SIGINT; processes:\n{tree}") from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out
    assert "mlflow ui stopped" in out
    time.sleep(1)
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0, f"something still listens on {port}"
