"""Factor sweeps (specrepro.core.sweep, analysis.sweep): the grid as cells, plan's treatment table and budget, claims
per level, and per-level verdicts against simulated sweeps whose truth is known.

The real-server half (launches == arms, a removed cell measured alone, the report's table and plots) is
tests/test_real_server_sweep.py.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import ROOT, specrepro
from specrepro.analysis.analyze import NOT_REPRODUCED, REPRODUCED, analyze
from specrepro.analysis.sweep import pareto_front, per_level, summary_line
from specrepro.analysis.claims import campaign_claims
from specrepro.core.campaign import Campaign
from specrepro.serving.plan_text import planned_server_command
from specrepro.core.config import ConfigError, check_resolved, compose, dump_resolved
from specrepro.core.sweep import claims_per_level, treatments
from specrepro.workflow_support import job_counts

# the shipped server factor (conf/factor/cuda_graph_max_bs.yaml) added under a short name, and a budget that fits
SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")
CGBS = ["+factor@experiment.sweep.factors.cgbs=cuda_graph_max_bs", "experiment.max_gpu_hours=64"]
LEVELS = [1, 2, 3, 4, 5, 8]


def sweep_cfg(*overrides, experiment="eagle_topk_sweep"):
    return compose([f"experiment={experiment}", *overrides])


def test_a_client_factor_makes_one_benchmark_per_level_on_the_same_arms():
    cfg = sweep_cfg()
    arms = cfg["experiment"]["arms"]
    assert list(arms) == ["main_rs_off", "main_rs_on", "pr_rs_on"]  # no new arm: no new launch
    names = [f"gsm8k.concurrency-{c}" for c in LEVELS]
    assert all(a["benchmarks"] == names for a in arms.values())
    assert set(cfg["benchmarks"]) == set(names)  # the base benchmark no arm runs any more is gone
    for c in LEVELS:
        bench = cfg["benchmarks"][f"gsm8k.concurrency-{c}"]
        assert bench["gsm8k"]["parallel"] == c and bench["gsm8k"]["num_questions"] == 200
        assert bench["cell"] == {"base": "gsm8k", "levels": {"concurrency": c}}
    assert Campaign(cfg).launches == 1 and job_counts(Campaign(cfg))["serve_bench"] == 3


def test_a_server_factor_makes_one_arm_and_one_launch_per_level():
    cfg = sweep_cfg(*CGBS)
    arms = cfg["experiment"]["arms"]
    assert len(arms) == 6 and job_counts(Campaign(cfg))["serve_bench"] == 6  # two launches per arm
    arm = arms["pr_rs_on.cgbs-4"]
    assert arm["extra_server_args"] == {"speculative_use_rejection_sampling": True, "cuda_graph_max_bs_decode": 4}
    assert arm["cell"] == {"base": "pr_rs_on", "levels": {"cgbs": 4}} and arm["patch_series"] == "eagle_topk"
    assert "--cuda-graph-max-bs-decode 8" in planned_server_command(Campaign(cfg).plan("main_rs_off.cgbs-8"))
    # the baseline is the base arm's cell at the levels asked
    assert Campaign(cfg).baseline_of({"cgbs": 8}) == "main_rs_off.cgbs-8"
    assert Campaign(cfg).baseline_of() == "main_rs_off.cgbs-4"  # the report's deltas: the first server level


def test_listed_treatments_run_only_those_cells():
    cfg = sweep_cfg(*CGBS, "+experiment.sweep.treatments=[{concurrency:1,cgbs:4},{concurrency:8,cgbs:8}]")
    assert treatments(cfg) == [{"concurrency": 1, "cgbs": 4}, {"concurrency": 8, "cgbs": 8}]
    arms = cfg["experiment"]["arms"]
    assert arms["main_rs_on.cgbs-4"]["benchmarks"] == ["gsm8k.concurrency-1"]
    assert arms["main_rs_on.cgbs-8"]["benchmarks"] == ["gsm8k.concurrency-8"]


def test_the_resolved_config_reads_back_as_the_same_cells(tmp_path):
    """Jobs read the resolved config next to the results: it must not be expanded twice."""
    cfg = sweep_cfg(*CGBS, experiment="eagle_topk_sweep_cpu")
    path = tmp_path / "resolved_config.yaml"
    path.write_text(dump_resolved(cfg))
    again = check_resolved(yaml.safe_load(path.read_text()), str(path))
    assert again["experiment"]["arms"] == cfg["experiment"]["arms"] and again["benchmarks"] == cfg["benchmarks"]
    # the toy model's expectations follow every cell of the arm and benchmark they were given for
    assert again["experiment"]["theory"]["pr_rs_on.cgbs-4"]["gsm8k.concurrency-3"] == {"draft_temperature": 0,
                                                                                   "first_draft_temperature": 1}


@pytest.mark.parametrize("override,named", [
    ("experiment.sweep.factors.concurrency.client.gsm8k=parallelism",
     "experiment.sweep.factors.concurrency.client.gsm8k: 'parallelism' is not a gsm8k setting"),
    ("+experiment.sweep.factors.concurrency.server=cuda_graph_max_bs_decode",
     "experiment.sweep.factors.concurrency: give exactly one of `client`"),
    ("+experiment.sweep.treatments=[{concurrency:7,cgbs:4}]",
     "experiment.sweep.treatments[0].concurrency: 7 is not one of its levels"),
    ("experiment.sweep.factors.concurrency.levels=[1,1]", "experiment.sweep.factors.concurrency.levels: a level is listed twice"),
    ("+experiment.sweep.factors.cgbs.client={gsm8k:parallel}", "experiment.sweep.factors.cgbs: give exactly one of"),
])
def test_a_bad_sweep_is_refused_naming_its_key(override, named):
    with pytest.raises(ConfigError) as err:
        sweep_cfg(*CGBS, override)
    assert named in str(err.value)


def test_a_server_factor_flag_is_checked_against_the_pinned_sglang():
    with pytest.raises(ConfigError) as err:
        sweep_cfg(*CGBS, "experiment.sweep.factors.cgbs.server=cuda_graph_max_bs")
    # the usual name, which sglang 0.5.20 does not have (its decode graphs' flag is --cuda-graph-max-bs-decode)
    assert "experiment.arms.main_rs_off.cgbs-4.extra_server_args.cuda_graph_max_bs: sglang 0.5.20 has no server flag " \
           "--cuda-graph-max-bs; did you mean --cuda-graph-max-bs-decode" in str(err.value)


def test_claims_are_asked_at_every_level_with_arms_of_that_level():
    cfg = sweep_cfg(*CGBS)
    claims = campaign_claims(cfg, Campaign(cfg).claims_path)
    ids = [c["id"] for c in claims]
    assert len(ids) == 4 * 6 * 2 and len(set(ids)) == len(ids)
    c = next(c for c in claims if c["id"] == "pr_restores_accept_length.concurrency-3.cgbs-8")
    assert (c["benchmark"], c["arm"], c["against"], c["from"]) == \
        ("gsm8k.concurrency-3", "pr_rs_on.cgbs-8", "main_rs_off.cgbs-8", "main_rs_on.cgbs-8")
    assert c["base_id"] == "pr_restores_accept_length" and c["levels"] == {"concurrency": 3, "cgbs": 8}
    # a campaign without factors asks its claims as written
    plain = compose([])
    assert claims_per_level([{"id": "x", "benchmark": "gsm8k"}], plain) == [{"id": "x", "benchmark": "gsm8k"}]


def test_plan_prints_the_treatments_launches_and_gpu_time_and_refuses_over_budget():
    ok = specrepro("plan", "experiment=eagle_topk_sweep", *CGBS, "--no-resolve")
    out = ok.stdout
    assert "## treatments: concurrency [1, 2, 3, 4, 5, 8] (client: gsm8k.parallel, bench_serving.max_concurrency); " \
           "cgbs [4, 8] (server: cuda_graph_max_bs_decode)" in out
    rows = [line.split() for line in out.split("## treatments")[1].split("\n\n")[0].splitlines()[3:]]
    assert len(rows) == 6 * 6 and {r[4] for r in rows} == {str(i) for i in range(1, 7)}  # six launches
    assert rows[0][:6] == ["main_rs_off.cgbs-4", "gsm8k.concurrency-1", "1", "4", "1", "600"]
    assert "## launches: 1 per arm, 6 in all" in out
    cost = out.split("## cost: ")[1].splitlines()[0]
    # by hand: 512 tokens x 5 ms x (1 + 5% per extra request) x ceil(200 / c) per run: 512, 268.8, 188.672, 147.2,
    # 122.88, 86.4 s for c = 1..8; x 3 repeats x 6 arms, + 6 loads of 600 s = 27467 s = 7.63 h; x 4 GPUs = 30.52
    assert cost.startswith("21600 requests; about 7.63 h of server time x 4 GPUs = 30.52 GPU-hours"), cost
    assert "budget 64 GPU-hours" in cost
    refused = specrepro("plan", "experiment=eagle_topk_sweep", *CGBS, "experiment.max_gpu_hours=2", "--no-resolve",
                        check=False)
    assert refused.returncode == 2
    assert "experiment.max_gpu_hours: this campaign needs about" in refused.stderr and "over the budget of 2" in refused.stderr


def test_snakemake_runs_one_serving_job_per_server_treatment(tmp_path):
    """Snakemake's own dry run agrees: two server levels, two serving jobs per arm; client levels add none."""
    out = subprocess.run([SNAKEMAKE, "-n", "--quiet", "rules", "--config",
                          f"overrides=[results_dir={tmp_path},experiment=eagle_topk_sweep,{','.join(CGBS)}]"],
                         cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    counts = dict(line.split() for line in (out.stdout + out.stderr).splitlines()
                  if len(line.split()) == 2 and line.split()[1].isdigit())
    assert counts["serve_bench"] == "6" and counts["image"] == "6"


def test_runs_to_remeasure_is_the_same_before_and_after_the_job_that_measures_them(tmp_path):
    """The serving job's rerun trigger: a removed record reruns it once, and only once."""
    cfg = sweep_cfg(f"results_dir={tmp_path}", experiment="eagle_topk_sweep_cpu")
    campaign = Campaign(cfg)
    arm = "main_rs_off"
    stems = [r.stem for r in campaign.plan(arm).runs]
    assert campaign.runs_to_remeasure(arm) == stems  # nothing measured: the first job
    for stem in stems:
        (campaign.plan(arm).arm_dir / stem).mkdir(parents=True)
        (campaign.plan(arm).arm_dir / stem / "run.json").write_text("{}")
    (campaign.plan(arm).arm_dir / "arm.json").write_text(json.dumps({"missing_at_start": stems}))
    assert campaign.runs_to_remeasure(arm) == stems  # what the first job recorded: no rerun
    (campaign.plan(arm).arm_dir / stems[3] / "run.json").unlink()
    assert campaign.runs_to_remeasure(arm) == [stems[3]]  # a changed value: Snakemake reruns the job
    (campaign.plan(arm).arm_dir / stems[3] / "run.json").write_text("{}")
    (campaign.plan(arm).arm_dir / "arm.json").write_text(json.dumps({"missing_at_start": [stems[3]]}))
    assert campaign.runs_to_remeasure(arm) == [stems[3]]  # as when that job was planned: no second rerun


def test_summary_line_names_the_levels_of_each_verdict():
    rows = [{"levels": {"concurrency": c}, "verdict": NOT_REPRODUCED if c in (3, 5) else REPRODUCED} for c in LEVELS]
    assert summary_line(rows) == "holds at concurrency 1, 2, 4 and 8; NOT REPRODUCED at 3 and 5"
    two = [{"levels": {"concurrency": 1, "cgbs": 4}, "verdict": REPRODUCED},
           {"levels": {"concurrency": 1, "cgbs": 8}, "verdict": "INCONCLUSIVE"}]
    assert summary_line(two) == "holds at (concurrency 1, cgbs 4); INCONCLUSIVE at (concurrency 1, cgbs 8)"


def test_pareto_front_keeps_points_nothing_beats_on_both_axes():
    assert pareto_front([(3.0, 300), (3.5, 280), (4.0, 350), (5.0, 340), (2.5, 200)]) == \
        [(2.5, 200), (3.0, 300), (4.0, 350)]


# A simulated sweep whose truth is known: accept length as in the seed's table (3.778 off, 3.080 on, 3.882 with
# the patch), except that at concurrency 3 and 5 (batches replayed in the graphs of 4 and 8, padded rows) the
# patch does not reach the proposal and its arm sits at the broken level.  Repeats: 0.5% SD on one server,
# launches 0.5% SD (the configured prior's size).
TRUTH = {"main_rs_off": 3.778, "main_rs_on": 3.080, "pr_rs_on": 3.882}
BROKEN_AT = (3, 5)


def simulated_sweep(seed: int, repeats: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for arm, mean in TRUTH.items():
        launch = 1 + rng.normal(0, 0.005)
        for c in LEVELS:
            true = TRUTH["main_rs_on"] if arm == "pr_rs_on" and c in BROKEN_AT else mean
            for r in range(1, repeats + 1):
                rows.append({"arm": arm, "benchmark": f"gsm8k.concurrency-{c}", "repeat": r, "metric": "accept_length",
                             "value": true * launch * (1 + rng.normal(0, 0.005))})
    return pd.DataFrame(rows)


def test_per_level_verdicts_recover_a_known_sweep():
    """100 simulated sweeps (18 claim instances each, Holm over all of them), with the configured analysis settings.
    Where the truth has a claim hold, it is REPRODUCED at that level in at least 95% of sweeps; a sweep that calls
    any broken level REPRODUCED (a familywise error) is no more common than alpha allows (5%, plus two Monte-Carlo
    standard errors)."""
    cfg = sweep_cfg()
    claims = [c for c in campaign_claims(cfg, Campaign(cfg).claims_path) if c["base_id"] != "pr_keeps_greedy_outputs"]
    sweeps, held, true_rows, familywise = 100, 0, 0, 0
    for seed in range(sweeps):
        result = analyze(simulated_sweep(seed), baseline="main_rs_off", claims=claims, settings=cfg["analysis"])
        wrong = False
        for entry in per_level(result["claims"]):
            for row in entry["rows"]:
                broken = row["levels"]["concurrency"] in BROKEN_AT and entry["id"] != "rs_costs_accept_length"
                if broken:
                    wrong |= row["verdict"] == REPRODUCED
                else:
                    true_rows += 1
                    held += row["verdict"] == REPRODUCED
        familywise += wrong
    assert held / true_rows >= 0.95, held / true_rows
    assert familywise / sweeps <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / sweeps), familywise
    one = analyze(simulated_sweep(0), baseline="main_rs_off", claims=claims, settings=cfg["analysis"])
    lines = {e["id"]: e["summary"] for e in per_level(one["claims"])}
    # "increase" with no change is NOT REPRODUCED only where the interval fits inside the 2% margin: one level may
    # stay INCONCLUSIVE, never REPRODUCED
    assert lines["pr_raises_accept_length"].startswith("holds at concurrency 1, 2, 4 and 8; ")
    assert lines["pr_restores_accept_length"] == "holds at concurrency 1, 2, 4 and 8; NOT REPRODUCED at 3 and 5"
    assert lines["rs_costs_accept_length"] == "holds at concurrency 1, 2, 3, 4, 5 and 8"


def test_adding_a_level_keeps_every_other_cells_key():
    """A run's key is its benchmark's own settings: a new level re-measures that level only."""
    two = Campaign(sweep_cfg("experiment.sweep.factors.concurrency.levels=[1,3]", experiment="eagle_topk_sweep_cpu"))
    three = Campaign(sweep_cfg("experiment.sweep.factors.concurrency.levels=[1,2,3]", experiment="eagle_topk_sweep_cpu"))
    for cell in ("gsm8k.concurrency-1", "gsm8k.concurrency-3"):
        assert two.plan("pr_rs_on").run_key(cell, "img") == three.plan("pr_rs_on").run_key(cell, "img")
    assert two.plan("pr_rs_on").measurement_key != three.plan("pr_rs_on").measurement_key  # the arm's job reruns


def test_snakemake_lint_is_clean_for_a_sweep(tmp_path):
    out = subprocess.run([SNAKEMAKE, "--lint", "--config",
                          f"overrides=[results_dir={tmp_path},experiment=eagle_topk_sweep,{','.join(CGBS)}]"],
                         cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0 and "Congratulations" in out.stdout + out.stderr, out.stdout + out.stderr


def test_plan_figures_do_not_key_a_measurement():
    """Changing a cost estimate must not re-measure anything; a measured setting must."""
    base = Campaign(sweep_cfg(experiment="eagle_topk_sweep_cpu"))
    planned = Campaign(sweep_cfg("serve.expected_tpot_ms=9", "serve.expected_load_s=99",
                                 experiment="eagle_topk_sweep_cpu"))
    measured = Campaign(sweep_cfg("serve.decode_log_interval=8", experiment="eagle_topk_sweep_cpu"))
    cell = "gsm8k.concurrency-1"
    assert base.plan("main_rs_off").run_key(cell) == planned.plan("main_rs_off").run_key(cell)
    assert base.plan("main_rs_off").run_key(cell) != measured.plan("main_rs_off").run_key(cell)
