"""The whole DAG on a CPU: 3 arms x (GSM8K + 3 bench_serving repeats) against the stand-in.

The stand-in replaces only the GPU server; Snakemake, the patch stages, the
bench_serving client (sglang 0.5.20's own), MLflow and the analysis are real.
"""

from __future__ import annotations

import json
import os
import subprocess

import pandas as pd
import pytest

from conftest import specrepro, standin_processes

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def campaign(standin_campaign):
    return standin_campaign


def test_one_server_launch_per_arm(campaign):
    arms_dir = campaign["results"] / "arms"
    assert sorted(p.name for p in arms_dir.iterdir()) == ["main_rs_off", "main_rs_on", "pr_rs_on"]
    launches = [json.loads(line) for arm in arms_dir.iterdir() for line in (arm / "launches.jsonl").read_text().splitlines()]
    assert [e["event"] for e in launches].count("start") == 3 and all(e.get("status", "ok") == "ok" for e in launches)
    for arm in arms_dir.iterdir():
        log = (arm / "server.log").read_text()
        assert log.count("# specrepro launch") == 1
        assert "The server is fired up and ready to roll!" in log
        # every repeat ran against that one server
        runs = [json.loads(p.read_text()) for p in arm.glob("*/r*/run.json")]
        assert len(runs) == 4 and len({r["server_launch"] for r in runs}) == 1


def test_no_server_left_behind(campaign):
    assert standin_processes(campaign["behaviour"]) == []


def test_tidy_tables(campaign):
    runs = pd.read_csv(campaign["results"] / "tables" / "runs.csv")
    assert list(runs.columns[:6]) == ["arm", "benchmark", "repeat", "metric", "value", "unit"]
    serving = runs[(runs.benchmark == "bench_serving") & (runs.metric == "mean_tpot_ms")]
    assert sorted(serving.groupby("arm")["repeat"].apply(sorted).tolist()) == [[1, 2, 3]] * 3
    gsm = runs[(runs.benchmark == "gsm8k") & (runs.metric == "accuracy")]
    assert len(gsm) == 3 and gsm["value"].between(0.5, 1.0).all()
    requests = pd.read_parquet(campaign["results"] / "tables" / "requests.parquet")
    assert {"arm", "benchmark", "repeat", "request"} <= set(requests.columns)
    assert len(requests[requests.benchmark == "gsm8k"]) == 3 * 24
    questions = (campaign["results"] / "arms" / "pr_rs_on" / "gsm8k" / "r1" / "questions.jsonl").read_text().splitlines()
    record = json.loads(questions[0])
    assert {"index", "prompt_sha256", "output", "answer", "correct", "invalid", "latency_s", "completion_tokens",
            "spec_verify_ct"} <= set(record)


def test_three_accept_length_sources_agree(campaign):
    for run_json in (campaign["results"] / "arms").glob("*/gsm8k/r1/run.json"):
        run = json.loads(run_json.read_text())
        sources = run["accept_length_sources"]
        assert set(sources["agreement"]["sources"]) == {"decode_log", "meta_info", "metrics"}, run_json
        assert sources["agreement"]["agree"] is True, sources
        assert sources["decode_log"]["lines"] > 0


def test_each_arm_ran_what_it_says(campaign):
    for arm in ("main_rs_off", "main_rs_on", "pr_rs_on"):
        record = json.loads((campaign["results"] / "arms" / arm / "arm.json").read_text())
        assert record["validity"] == {"valid": True, "problems": []}, record["validity"]
        (check,) = record["effective_config"]
        assert check["valid"] and check["version"] == {"pinned": "0.5.20", "reported": "0.5.20"}
        assert check["requested"]["tp_size"] == 4
        assert ("speculative_use_rejection_sampling" in check["requested"]) == (arm != "main_rs_off")
        run = json.loads((campaign["results"] / "arms" / arm / "gsm8k" / "r1" / "run.json").read_text())
        lines = run["accept_length_sources"]["decode_log"]["cuda_graph_lines"]
        assert lines["True"] > 0 and lines["False"] == 0
        assert run["accept_length_consistency"]["consistent"] is True
        assert run["accept_length_consistency"]["meta_info"]["requests"] == 24
        assert sum(run["acceptance_histogram"]) == sum(r["spec_verify_ct"] for r in run["requests"])
        log = (campaign["results"] / "arms" / arm / "server.log").read_text()
        assert "--decode-log-interval" not in log.split("\n", 1)[0]  # sglang's default interval
    acceptance = pd.read_csv(campaign["results"] / "tables" / "acceptance.csv")
    assert set(acceptance.arm) == {"main_rs_off", "main_rs_on", "pr_rs_on"}


def test_warm_up_is_shaped_like_the_benchmarks(campaign):
    log = (campaign["results"] / "logs" / "serve_bench" / "pr_rs_on.log").read_text()
    # gsm8k: max(serve.warmup_requests=1, parallel=8) at its concurrency; bench_serving: max(1, concurrency 1)
    assert "warm-up for gsm8k: 8 requests at concurrency 8" in log
    assert "warm-up for bench_serving: 1 requests at concurrency 1" in log


def test_patched_arm_restores_accept_length(campaign):
    runs = pd.read_csv(campaign["results"] / "tables" / "runs.csv")
    al = runs[(runs.benchmark == "gsm8k") & (runs.metric == "accept_length")].set_index("arm")["value"]
    # The stand-in reads the sglang tree each arm serves: the patch stage's output reached pr_rs_on only.
    assert al["pr_rs_on"] > al["main_rs_on"] * 1.15
    assert abs(al["pr_rs_on"] - al["main_rs_off"]) / al["main_rs_off"] < 0.05


def test_report_and_verdicts(campaign):
    report = (campaign["results"] / "report" / "report.md").read_text()
    assert "| pr_rs_on |" in report and "REPRODUCED" in report
    assert "were not sglang on a GPU" in report
    analysis = json.loads((campaign["results"] / "report" / "analysis.json").read_text())
    verdicts = {c["id"]: c["verdict"] for c in analysis["claims"]}
    assert verdicts["rs_costs_accept_length"] == "REPRODUCED"
    assert verdicts["pr_raises_accept_length"] == "REPRODUCED"
    assert verdicts["pr_keeps_greedy_outputs"] == "REPRODUCED"  # the stand-in answers the same text in every arm
    for section in ("### Did each arm run what it says", "### Greedy outputs against the baseline",
                    "### Acceptance per verify step", "### Where the speed comes from"):
        assert section in report, section
    attribution = {r["arm"]: r for r in analysis["speedup_attribution"]}
    assert attribution["main_rs_on"]["accept_length_part"] < -0.1  # the stand-in's RS loss is all accept length
    assert "nocg_fixed_without_patch" not in verdicts  # those arms were not run here: skipped, and said so
    assert "Not judged in this campaign (experiment.skip_claims): " in report and "nocg_fixed_without_patch" in report
    assert "## gpu_check: arm pr_rs_on\n" in report and "## gpu_check: arm main_rs_on\n" in report
    assert "(patched: every executed check must pass)" in report and "(control (unpatched):" in report
    assert "The graph half was not executed here: it needs a GPU." in report
    assert "### Provenance" in report and "| serve_bench/pr_rs_on |" in report
    html = (campaign["results"] / "report" / "report.html").read_text()
    assert html.count("data:image/png;base64,") >= 4
    assert "alt='gsm8k.acceptance'" in html and "<table>" in html and 'class="verdict v-reproduced"' in html
    comment = (campaign["results"] / "report" / "pr_comment.md").read_text()
    assert comment.startswith("### specrepro: eagle_topk_greedy") and "| **REPRODUCED** |" in comment


def test_mlflow_holds_the_campaign_and_a_rerun_adds_nothing(campaign):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{campaign['results']}/mlflow.db"
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("specrepro/eagle_topk_greedy")
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    names = sorted(r.info.run_name for r in runs)
    assert "pr_rs_on" in names and "pr_rs_on/bench_serving/r3" in names and "gpu_check/pr_rs_on" in names
    arm_run = next(r for r in runs if r.info.run_name == "pr_rs_on")
    assert arm_run.data.params["server_args.speculative_use_rejection_sampling"] == "True"
    child = next(r for r in runs if r.info.run_name == "pr_rs_on/gsm8k/r1")
    for metric in ("accept_length", "accept_length_decode_log", "accept_length_meta_info", "accuracy", "invalid_rate"):
        assert metric in child.data.metrics
    assert "config_hash" in child.data.tags
    # the dashboard answers on first open: runs, not traces; arms' headline numbers on the arm runs
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    assert {"gsm8k.accept_length", "gsm8k.accuracy", "bench_serving.mean_tpot_ms",
            "bench_serving.output_throughput"} <= set(arm_run.data.metrics)
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    assert parent.info.run_name.startswith("eagle_topk_greedy | glm52_mxfp4 | standin | ")
    assert "mlflow.source.git.commit" in parent.data.tags
    # runs are timed by their measurement windows; none is left RUNNING
    record = json.loads((campaign["results"] / "arms" / "pr_rs_on" / "gsm8k" / "r1" / "run.json").read_text())
    assert child.info.start_time == int(record["window"]["start"] * 1000)
    assert child.info.end_time == int(record["window"]["end"] * 1000)
    assert {r.info.status for r in runs} == {"FINISHED"}
    before = len(runs)
    specrepro("run", *campaign["overrides"], "--", "--forcerun", "track_campaign", env=campaign["env"])
    assert len(client.search_runs([exp.experiment_id], max_results=1000)) == before
    assert len(client.get_metric_history(child.info.run_id, "accept_length")) == 1  # re-logging adds no history


def test_snakemake_report_carries_the_campaign_report(campaign, tmp_path):
    import sys
    import zipfile
    from pathlib import Path

    from conftest import ROOT

    out = tmp_path / "report.zip"
    proc = subprocess.run([str(Path(sys.executable).parent / "snakemake"), "--report", str(out), "--configfile",
                           str(campaign["results"] / "resolved_config.yaml")], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, **campaign["env"]})
    assert proc.returncode == 0, proc.stderr[-3000:]
    names = zipfile.ZipFile(out).namelist()
    assert any(n.endswith("report.html") and "/data/raw/" in n for n in names), names
    # every plot of the HTML report, with the caption the report gives it
    plots = sorted(p.name for p in (campaign["results"] / "report" / "plots").glob("*.png"))
    assert plots and all(any(n.endswith("/" + p) and "/data/raw/" in n for n in names) for p in plots), names
    page = zipfile.ZipFile(out).read(next(n for n in names if n.endswith("/report.html") and "/data/" not in n))
    assert b"the share of verify steps that accepted 0, 1, 2" in page


def dry_run_jobs(campaign, *overrides) -> dict:
    """Snakemake's own dry run of the campaign with `overrides` on top: the jobs it would run, per rule."""
    out = specrepro("run", *campaign["overrides"], *overrides, "--", "--dry-run", "--quiet", "rules",
                    env=campaign["env"]).stdout
    jobs = {}
    lines = out.splitlines()
    if "Job stats:" in lines:
        for line in lines[lines.index("Job stats:") + 3:]:
            parts = line.split()
            if len(parts) != 2 or not parts[1].isdigit():
                break
            jobs[parts[0]] = int(parts[1])
    return jobs


def test_reruns_follow_content(campaign, tmp_path):
    """Editing the claims reruns the report and its logging, no measuring job; a benchmark's setting re-measures
    only the arms that run that benchmark (here every arm runs GSM8K; none runs gsm8k_sampled)."""
    import shutil

    from conftest import ROOT

    claims = tmp_path / "claims.yaml"
    shutil.copy(ROOT / "conf" / "claims" / "eagle_topk_greedy.yaml", claims)
    claims.write_text(claims.read_text().replace("(seed -18%)", "(the seed says -18%)"))
    edited = dry_run_jobs(campaign, f"experiment.claims={claims}")
    assert "serve_bench" not in edited and "collect" not in edited and "gpu_check" not in edited, edited
    assert edited.get("report") == 1 and edited.get("track_campaign") == 1
    unused = dry_run_jobs(campaign, "benchmarks.gsm8k_sampled.gsm8k.num_questions=7")
    assert "serve_bench" not in unused, unused
    gsm8k = dry_run_jobs(campaign, "benchmarks.gsm8k.gsm8k.num_questions=23")
    assert gsm8k.get("serve_bench") == 3 and "image" not in gsm8k and "patch_check" not in gsm8k, gsm8k
