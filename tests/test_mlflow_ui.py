"""The real MLflow UI on a campaign's store, looked at in headless Chromium.

Uses the stand-in campaign of test_e2e_standin (its SQLite store), starts
`mlflow ui` on it, and checks in Debian's Chromium that the page lists the
campaign's runs and shows a run's metrics.  .ci/run installs chromium.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import mlflow_server
from test_e2e_standin import campaign  # noqa: F401  (the module-scoped stand-in campaign)

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def mlflow_ui(campaign):  # noqa: F811
    with mlflow_server(f"sqlite:///{campaign['results']}/mlflow.db", command="ui") as url:
        yield url


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
