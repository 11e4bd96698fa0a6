"""The sweep on real sglang 0.5.20 servers on this CPU, with the toy model (`experiment=eagle_topk_sweep_cpu`, made
smaller): one launch per arm serves every client level; a removed cell is measured again alone; the report holds
the per-level verdicts and the plots, and MLflow holds the plots; a server factor's levels are launches.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from conftest import specrepro

pytestmark = pytest.mark.e2e

ARMS = ("main_rs_off", "main_rs_on", "pr_rs_on")
# two levels (3 replays the graph of 4 with a padded row on a GPU), two repeats, 8 questions
SMALL = ["experiment=eagle_topk_sweep_cpu", "experiment.sweep.factors.concurrency.levels=[1,3]",
         "benchmarks.gsm8k.gsm8k.num_questions=8", "experiment.repeats=2"]


def starts(results: Path, arm: str):
    path = results / "arms" / arm / "launches.jsonl"
    return [e for e in map(json.loads, path.read_text().splitlines()) if e["event"] == "start"]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    results = tmp_path_factory.mktemp("real_server_sweep")
    first = specrepro("run", *SMALL, f"results_dir={results}", timeout=3000)
    return {"results": results, "stdout": first.stdout + first.stderr,
            "cfg": yaml.safe_load((results / "resolved_config.yaml").read_text())}


def test_one_launch_per_arm_serves_every_level(sweep):
    results = sweep["results"]
    for arm in ARMS:
        (start,) = starts(results, arm)
        assert sorted(start["runs"]) == ["gsm8k.concurrency-1/r1", "gsm8k.concurrency-1/r2",
                                         "gsm8k.concurrency-3/r1", "gsm8k.concurrency-3/r2"]
        assert (results / "arms" / arm / "server.log").read_text().count("# specrepro launch") == 1
        for c in (1, 3):
            record = json.loads((results / "arms" / arm / f"gsm8k.concurrency-{c}" / "r1" / "run.json").read_text())
            assert record["benchmark"] == f"gsm8k.concurrency-{c}" and record["server_launch"] == start["launch_id"]
            assert record["metrics"]["mean_tpot_ms"] > 0
            summary = json.loads((results / "arms" / arm / f"gsm8k.concurrency-{c}" / "r1" / "summary.json").read_text())
            assert summary["questions"] == 8


def test_the_report_gives_per_level_verdicts_and_plots(sweep):
    results = sweep["results"]
    report = (results / "report" / "report.md").read_text()
    assert "### Across factors" in report
    for claim in ("rs_costs_accept_length", "pr_raises_accept_length", "pr_keeps_greedy_outputs"):
        line = next(line for line in report.splitlines() if line.startswith(f"**{claim}**: "))
        assert "concurrency 1" in line or "at concurrency" in line, line
    assert "| concurrency 3 | " in report
    assert "gsm8k, accept_length by concurrency" in report
    html = (results / "report" / "report.html").read_text()
    names = ("gsm8k.accept_length.by_concurrency", "gsm8k.mean_tpot_ms.by_concurrency", "gsm8k.pareto")
    for name in names:
        assert f"<img alt='{name}'" in html
        assert (results / "report" / "plots" / f"{name}.png").stat().st_size > 5000
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{results / 'mlflow.db'}")
    parent = json.loads((results / "tracking" / "campaign.json").read_text())["parent_run"]
    logged = {Path(a.path).stem for a in client.list_artifacts(parent, "report/plots")}
    assert set(names) <= logged  # with the other plots of the report (theory, acceptance per level)


def test_a_removed_cell_is_measured_again_alone(sweep):
    results = sweep["results"]
    cell = results / "arms" / "pr_rs_on" / "gsm8k.concurrency-3" / "r2"
    before = json.loads((cell / "run.json").read_text())
    kept = {arm: starts(results, arm) for arm in ARMS}
    shutil.rmtree(cell)
    specrepro("run", *SMALL, f"results_dir={results}", timeout=3000)
    again = starts(results, "pr_rs_on")
    assert len(again) == 2 and again[1]["runs"] == ["gsm8k.concurrency-3/r2"]
    after = json.loads((cell / "run.json").read_text())
    assert after["server_launch"] == again[1]["launch_id"] != before["server_launch"]
    other = json.loads((results / "arms" / "pr_rs_on" / "gsm8k.concurrency-3" / "r1" / "run.json").read_text())
    assert other["server_launch"] == again[0]["launch_id"]  # kept, not measured again
    for arm in ("main_rs_off", "main_rs_on"):
        assert starts(results, arm) == kept[arm]
    # and once measured, nothing is left to do: no job starts a server again
    specrepro("run", *SMALL, f"results_dir={results}", timeout=3000)
    assert all(len(starts(results, arm)) == (2 if arm == "pr_rs_on" else 1) for arm in ARMS)


def test_a_server_factor_gives_one_launch_per_level(tmp_path):
    results = tmp_path / "server_factor"
    specrepro("run", "experiment=eagle_topk_sweep_cpu", f"results_dir={results}",
              "+factor@experiment.sweep.factors.cuda_graph_max_bs=cuda_graph_max_bs",
              "experiment.sweep.factors.concurrency.levels=[2]", "benchmarks.gsm8k.gsm8k.num_questions=4",
              "experiment.repeats=1", "~experiment.arms.main_rs_on", "~experiment.arms.pr_rs_on",
              "experiment.claims=null", "~experiment.theory.main_rs_on", "~experiment.theory.pr_rs_on", timeout=3000)
    arms = sorted(p.name for p in (results / "arms").iterdir())
    assert arms == ["main_rs_off.cuda_graph_max_bs-4", "main_rs_off.cuda_graph_max_bs-8"]
    for arm, level in zip(arms, (4, 8)):
        (start,) = starts(results, arm)
        assert f"--cuda-graph-max-bs-decode {level}" in start["argv"]
        assert start["runs"] == ["gsm8k.concurrency-2/r1"]
