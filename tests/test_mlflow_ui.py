"""The real MLflow UI on a campaign's store, looked at in headless Chromium.

Uses the stand-in campaign of test_e2e_standin (its SQLite store), starts
`mlflow ui` on it, and checks in Debian's Chromium that the page lists the
campaign's runs and shows a run's metrics.  .ci/run installs chromium.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from test_e2e_standin import campaign  # noqa: F401  (the module-scoped stand-in campaign)

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def mlflow_ui(campaign):  # noqa: F811
    port = free_port()
    proc = subprocess.Popen([str(Path(sys.executable).parent / "mlflow"), "ui", "--host", "127.0.0.1", "--port", str(port),
                             "--backend-store-uri", f"sqlite:///{campaign['results']}/mlflow.db", "--workers", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            if requests.get(f"{url}/health", timeout=2).status_code == 200:
                break
        except requests.RequestException:
            time.sleep(0.5)
    else:
        os.killpg(proc.pid, 9)
        pytest.fail("mlflow ui did not start")
    yield url
    os.killpg(proc.pid, 15)
    proc.wait(timeout=30)


def dump_dom(url: str, tmp_path: Path) -> str:
    if CHROMIUM is None:
        pytest.fail("chromium is not installed: .ci/run installs Debian's chromium (apt-get)")
    out = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                          "--disable-background-networking", "--disable-component-update", "--disable-sync",
                          f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=20000",
                          "--window-size=1600,1200", f"--screenshot={tmp_path / 'page.png'}", "--dump-dom", url],
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
