"""`make campaign`'s job: the seed campaign's arms on real sglang 0.5.20 servers on this CPU, with the toy model.

Nothing here is a stand-in but the sgl_kernel CPU operations (pure torch,
checked against sglang's own kernels in test_cpu_kernels.py): the pinned
release from the package registry, patched by the patch stage, serves every
arm through sglang's own launch_server, scheduler and EAGLE worker; GSM8K goes
to its /generate and sglang's own bench_serving client runs beside it.  The
toy model's acceptance is known from its weights, so the measured accept
lengths are held against theory, not against numbers this code made up.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import SHARED_GSM8K, specrepro

pytestmark = pytest.mark.e2e

GREEDY_ARMS = ("main_rs_off", "pr_rs_on", "pr_rs_on_nocg")
SAMPLING_ARMS = ("main_rs_on", "main_rs_on_nocg")


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    results = tmp_path_factory.mktemp("real_server_campaign")
    # as in many Python images and CI machines: the pipeline still compiles the trees it owns (Launcher.process_env)
    proc = specrepro("run", "experiment=eagle_topk_cpu", f"results_dir={results}", timeout=3000,
                     env={"PYTHONDONTWRITEBYTECODE": "1"})
    cfg = yaml.safe_load((results / "resolved_config.yaml").read_text())
    return {"results": results, "stdout": proc.stdout + proc.stderr, "cfg": cfg,
            "theory": json.loads((Path(cfg["model"]["toy"]["dir"]) / "theory.json").read_text()),
            "analysis": json.loads((results / "report" / "analysis.json").read_text()),
            "report": (results / "report" / "report.md").read_text()}


def gsm8k_accept_length(campaign):
    runs = pd.read_csv(campaign["results"] / "tables" / "runs.csv")
    g = runs[(runs.benchmark == "gsm8k") & (runs.metric == "accept_length")]
    return g.groupby("arm")["value"].mean()


def test_every_arm_ran_a_real_sglang_server(campaign):
    results = campaign["results"]
    for arm in (*GREEDY_ARMS, *SAMPLING_ARMS):
        log = (results / "arms" / arm / "server.log").read_text()
        assert log.count("# specrepro launch") == 1
        # sglang's own start-up and decode-log lines, as its CPU engine prints them
        assert "server_args=ServerArgs(" in log or "server_args={" in log
        assert "'speculative_algorithm': 'EAGLE'" in log and "'attention_backend': 'intel_amx'" in log
        assert "The server is fired up and ready to roll!" in log
        decode = [line for line in log.splitlines() if "Decode batch" in line and "accept len:" in line]
        assert len(decode) > 10 and all("cpu graph: False" in line for line in decode)
        record = json.loads((results / "arms" / arm / "arm.json").read_text())
        assert record["validity"] == {"valid": True, "problems": []}, record["validity"]
        (check,) = record["effective_config"]
        assert check["version"] == {"pinned": "0.5.20", "reported": "0.5.20"}
        image = json.loads((results / "image" / f"{arm}.json").read_text())
        assert ("/patch/" in image["sglang_root"]) == arm.startswith("pr_"), image
        assert image["python"].startswith(campaign["cfg"]["cache_dir"])


def test_the_trees_hold_sglangs_server_modules_compiled_once_by_their_first_launch(campaign):
    """A tree's first server process compiles the modules it imports into the tree; later launches and clients read
    them (each start about 5 s faster on this CPU), although the environment says PYTHONDONTWRITEBYTECODE."""
    import importlib.util

    for tree in (campaign["results"] / "source" / "v0.5.20" / "tree",
                 campaign["results"] / "patch" / "v0.5.20" / "eagle_topk" / "tree"):
        source = tree / "sglang" / "srt" / "entrypoints" / "http_server.py"
        assert Path(importlib.util.cache_from_source(str(source))).is_file(), tree
        compiled = [p for p in (tree / "sglang").rglob("*.pyc")]
        assert 300 < len(compiled) < len(list((tree / "sglang").rglob("*.py"))), (tree, len(compiled))
    # nothing of the sort in the files the patch stage records
    manifest = json.loads((campaign["results"] / "patch" / "v0.5.20" / "eagle_topk" / "manifest.json").read_text())
    assert not [f for f in json.dumps(manifest).split('"') if f.endswith(".pyc")]


def test_accept_length_agrees_with_the_toy_models_theory(campaign):
    al = gsm8k_accept_length(campaign)
    theory = campaign["theory"]
    argmax = theory["argmax_accept_length"]
    assert argmax == 4.0
    for arm in GREEDY_ARMS:
        assert abs(al[arm] / argmax - 1) <= 0.02, (arm, al[arm])
    low, high = theory["sampled_accept_length"]["min"], theory["sampled_accept_length"]["max"]
    for arm in SAMPLING_ARMS:
        assert al[arm] <= 0.9 * argmax, (arm, al[arm])
        assert low - 0.15 <= al[arm] <= high + 0.15, (arm, al[arm], low, high)
    rows = campaign["analysis"]["theory"]
    assert {(r["arm"], r["benchmark"]) for r in rows} >= {(a, "gsm8k") for a in (*GREEDY_ARMS, *SAMPLING_ARMS)}
    assert all(r["agrees"] for r in rows), [r for r in rows if not r["agrees"]]
    assert "### Accept length against theory" in campaign["report"]


def test_every_greedy_output_is_the_models_chain(campaign):
    """The prompt picks where the target's greedy chain starts (the toy model's first output token is read from the
    question's last words); after that every token is f(t), f(f(t)), ...: every arm, every question, by token id.
    Distinct questions get distinct outputs, so the greedy-output claim compares different strings."""
    from specrepro.stages.toy_model import expected_chain

    cfg = campaign["cfg"]
    g = cfg["benchmarks"]["gsm8k"]["gsm8k"]
    theory = campaign["theory"]
    off_chain = set(theory["special_ids"]) | set(theory.get("open_ids") or [])
    arms = (*GREEDY_ARMS, *SAMPLING_ARMS)
    checked = 0
    for arm in arms:
        for questions in (campaign["results"] / "arms" / arm / "gsm8k").glob("r*/questions.jsonl"):
            outputs = []
            for line in questions.read_text().splitlines():
                q = json.loads(line)
                ids = q["output_ids"]
                assert ids and ids[0] not in off_chain, (arm, q["index"], ids[:3])
                assert ids[1:] == expected_chain(theory, ids[0], len(ids) - 1), (arm, q["index"])
                outputs.append(tuple(ids))
                checked += 1
            assert len(set(outputs)) >= 0.9 * g["num_questions"], (questions, len(set(outputs)))
    repeats = cfg["benchmarks"]["gsm8k"].get("repeats") or cfg["experiment"]["repeats"]
    assert checked == len(arms) * repeats * g["num_questions"]


def test_the_three_accept_length_sources_agree(campaign):
    for run_json in (campaign["results"] / "arms").glob("*/*/r*/run.json"):
        run = json.loads(run_json.read_text())
        sources = run["accept_length_sources"]
        expected = {"decode_log", "meta_info", "metrics"} if run["kind"] == "gsm8k" else {"decode_log", "metrics"}
        assert set(sources["agreement"]["sources"]) == expected, run_json
        assert sources["agreement"]["agree"] is True, (run_json, sources["values"], sources["agreement"])
        assert run["accept_length_consistency"]["consistent"] is True, run_json


def test_the_report_says_what_ran_and_judges_only_what_it_can(campaign):
    report = campaign["report"]
    first = next(line for line in report.splitlines() if line.startswith("**Where this ran:**"))
    assert "platform `cpu` without an accelerator" in first and "real sglang servers" in first
    assert "toy model `toy_lookup`" in first and "not mi355x performance" in first
    assert "Shown, not judged: accuracy, invalid_rate, mean_tpot_ms, median_tpot_ms, output_throughput." in first
    verdicts = {c["id"]: c for c in campaign["analysis"]["claims"]}
    for cid in ("rs_costs_accept_length", "pr_keeps_greedy_outputs"):
        assert verdicts[cid]["verdict"] == "REPRODUCED", verdicts[cid]
    # +27% on three repeats of the sampling arm: its interval clears the margin every time, but since #39 charges a
    # degree of freedom for the estimated variance ratio, Holm over six claims holds it back in some runs (a CI run
    # of 2026-12-07: t 4.30 at df 2, Holm-adjusted p 0.025 against 0.025)
    raises = verdicts["pr_raises_accept_length"]
    assert raises["verdict"] == "REPRODUCED" or (
        raises["verdict"] == "INCONCLUSIVE" and raises["delta"]["ci_low"] > raises["margin"]
        and "Holm-adjusted" in raises["detail"]), raises
    # the patched arm closes the gap (theory: all but its first verify step per request); three repeats decide
    # whether more than 90% of it is closed only when the spread allows
    restores = verdicts["pr_restores_accept_length"]
    assert restores["restored"]["fraction"] > 0.9 and restores["verdict"] in ("REPRODUCED", "INCONCLUSIVE")
    for cid in ("pr_improves_tpot", "pr_improves_throughput", "rs_costs_throughput", "no_invalid_output"):
        assert verdicts[cid]["verdict"] == "NOT JUDGED", verdicts[cid]
    # the PR's no-graph sentence describes its own base: on 0.5.20 both halves fail, as predicted
    for cid in ("nocg_fixed_without_patch", "nocg_patch_changes_nothing"):
        assert verdicts[cid]["verdict"] == "NOT REPRODUCED" and verdicts[cid]["as_predicted"] is True
    # ...and no arm captured a graph here, so the report shows them as not testable on this platform, never red
    table = report.split("### Verdicts", 1)[1].split("What a verdict means", 1)[0]
    assert table.count("**NOT TESTABLE HERE** — no arm captured a CUDA graph") == 2
    head = report.split("### Verdicts", 1)[0]
    assert "sha256 `" in head and "config hash" in head
    comment = (campaign["results"] / "report" / "pr_comment.md").read_text()
    assert len(comment.splitlines()) <= 40 and not re.search(r"(^|\s|\()/[A-Za-z]", comment, re.M)


def test_mlflow_holds_the_real_server_runs(campaign):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{campaign['results']}/mlflow.db")
    exp = client.get_experiment_by_name("specrepro/eagle_topk_cpu")
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    arm_run = next(r for r in runs if r.info.run_name == "pr_rs_on")
    assert arm_run.data.metrics["gsm8k.accept_length"] > 3.9
    assert any(r.info.run_name.startswith("eagle_topk_cpu | toy_lookup | cpu | ") for r in runs)


def test_gsm8k_data_stayed_offline_and_checked(campaign):
    data = Path(campaign["cfg"]["data"][campaign["cfg"]["benchmarks"]["gsm8k"]["gsm8k"]["test_data"]]["path"])
    assert data.resolve() == (SHARED_GSM8K / "test.jsonl").resolve()
    record = json.loads((campaign["results"] / "datasets" / "gsm8k.json").read_text())
    assert record["verified_by"] == "the configured sha256" and record["fetched_now"] is False
    assert record["key"] == "data.gsm8k"


SPEED_BENCH_ARMS = ("main_rs_off", "main_rs_on", "pr_rs_on")
SPEED_BENCH_CATEGORIES = ("low_entropy", "mixed", "high_entropy")


def test_speed_bench_reports_accept_length_per_category(campaign):
    """sglang's own bench_serving on the toy corpus in SPEED-Bench's shape, one client process a repeat running the
    three categories in turn: each category's accept length (its window's /metrics counters) is a row of the tidy
    runs table, `accept_length[<category>]`, beside the whole benchmark's."""
    runs = pd.read_csv(campaign["results"] / "tables" / "runs.csv")
    sb = runs[runs.benchmark == "speed_bench"]
    assert set(sb.arm) == set(SPEED_BENCH_ARMS)
    for arm in SPEED_BENCH_ARMS:
        values = sb[sb.arm == arm].set_index("metric")["value"]
        for category in SPEED_BENCH_CATEGORIES:
            # tokens per verify step: the bonus token at least, every draft (three) and the bonus at most
            assert 1.0 <= values[f"accept_length[{category}]"] <= 4.0, (arm, category, values.to_dict())
            assert values[f"completed[{category}]"] == 2 and values[f"output_throughput[{category}]"] > 0
        assert 1.0 <= values["accept_length"] <= 4.0 and values["completed"] == 6
        run = json.loads((campaign["results"] / "arms" / arm / "speed_bench" / "r1" / "run.json").read_text())
        # one client process for the three categories (sglang imported once)
        assert run["client_argv"][1] == "-c" and "cli_main()" in run["client_argv"][2]
        assert [w["category"] for w in json.loads(
            (campaign["results"] / "arms" / arm / "speed_bench" / "r1" / "speed_bench.windows.json").read_text())] \
            == list(SPEED_BENCH_CATEGORIES)
    # greedy on argmax-proposing arms: every draft accepted, in every category (the toy model's theory)
    greedy_off = sb[(sb.arm == "main_rs_off") & sb.metric.str.startswith("accept_length[")]
    assert (greedy_off.value > 3.5).all(), greedy_off
    record = json.loads((campaign["results"] / "datasets" / "speed_bench.json").read_text())
    assert record["key"] == "data.speed_bench_toy" and record["verified_by"] == "the configured sha256"
