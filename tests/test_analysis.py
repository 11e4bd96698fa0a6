"""Statistics and verdicts with known numbers, the seed's own among them."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import yaml

from specrepro.analysis import stats
from specrepro.analysis.analyze import REPRODUCED, INCONCLUSIVE, NOT_REPRODUCED, TableError, analyze
from specrepro.core.config import CONF_DIR

SEED_TPUT = [310.2, 312.9, 309.7]
SEED_TPOT = [3.02, 3.00, 3.03]
SEED_ACC = [0.940, 0.945, 0.920]


def test_describe_known_numbers():
    d = stats.describe([1.0, 2.0, 3.0])
    assert d["mean"] == 2.0 and d["std"] == 1.0 and d["cv"] == 0.5
    # t(0.975, 2) = 4.302653; half-width = 4.302653 * 1 / sqrt(3)
    assert d["ci_high"] - d["mean"] == pytest.approx(4.302653 / math.sqrt(3), rel=1e-6)
    single = stats.describe([5.0])
    assert single["ci_low"] == -math.inf and single["ci_high"] == math.inf


def test_seed_noise_floor_is_about_half_a_percent():
    # mean 310.933; squared deviations 0.538 + 3.868 + 1.521 = 5.927; s = sqrt(5.927 / 2) = 1.7214
    assert stats.coefficient_of_variation(SEED_TPUT) == pytest.approx(1.7214 / 310.933, rel=1e-4)
    assert stats.pooled_cv([SEED_TPUT]) == pytest.approx(stats.coefficient_of_variation(SEED_TPUT))
    assert stats.pooled_cv([[1.0], [2.0]]) is None


def test_relative_change_known_numbers():
    from specrepro.analysis import noise

    # one value per arm, a known 1% noise on each (prior, no repeats): se = 1% x sqrt(1 + 0.9^2)
    d = noise.relative_change(noise.arm_noise([[90.0]], 0.01), noise.arm_noise([[100.0]], 0.01))
    assert d["relative"] == pytest.approx(-0.10)
    assert d["se"] == pytest.approx(0.01 * math.sqrt(0.9 ** 2 + 0.9 ** 2))
    assert d["ci_high"] - d["relative"] == pytest.approx(1.959964 * d["se"], rel=1e-5) and math.isinf(d["df"])


def test_wilson_and_mcnemar_known_values():
    lo, hi = stats.wilson_interval(188, 200)
    assert (lo, hi) == pytest.approx((0.8980, 0.9653), abs=5e-4)
    assert stats.mcnemar(0, 0) == 1.0
    # exact binomial: 2 * P(X <= 1 | n=10, p=.5) = 2 * 11/1024
    assert stats.mcnemar(1, 9) == pytest.approx(22 / 1024)


def test_bimodality_warning_for_speculative_latencies():
    accepted = [0.8] * 80  # tokens that came in an accepted chain
    verify = [4.0] * 20  # tokens that waited for a verify step
    result = stats.median_in_one_mode(accepted + verify)
    assert result["bimodal"] and result["median_mode"] == "low"
    assert "read mean" in result["warning"]
    assert not stats.median_in_one_mode([1.0, 1.1, 0.9, 1.05, 0.95, 1.02])["bimodal"]


def seed_table():
    rows = []
    pub = {
        "main_rs_off": ({"accept_length": 3.778, "accuracy": 0.945, "invalid_rate": 0.0}, {"mean_tpot_ms": 3.04, "output_throughput": 310.2}),
        "main_rs_on": ({"accept_length": 3.080, "accuracy": 0.930, "invalid_rate": 0.0}, {"mean_tpot_ms": 3.29, "output_throughput": 285.7}),
        "pr_rs_on": ({"accept_length": 3.882, "accuracy": 0.940, "invalid_rate": 0.0}, {"mean_tpot_ms": 3.08, "output_throughput": 303.7}),
    }
    for arm, (g, b) in pub.items():
        rows += [{"arm": arm, "benchmark": "gsm8k", "repeat": 1, "metric": m, "value": v, "unit": ""} for m, v in g.items()]
        rows += [{"arm": arm, "benchmark": "bench_serving", "repeat": 1, "metric": m, "value": v, "unit": ""} for m, v in b.items()]
    return pd.DataFrame(rows)


def campaign_settings(*overrides):
    """The analysis settings a campaign runs with (conf/config.yaml's `analysis:` block)."""
    from specrepro.core.config import compose

    return compose(list(overrides))["analysis"]


def test_seed_numbers_give_the_seed_conclusions():
    """The PR's tables (one launch per arm) and published repeats, with the campaign's between-launch priors and
    Holm over the claims: the PR's conclusions hold, and the throughput ones say they lean on the prior."""
    claims = yaml.safe_load((CONF_DIR / "claims" / "eagle_topk_greedy.yaml").read_text())["claims"]
    reference = {"bench_serving": {"output_throughput": SEED_TPUT, "mean_tpot_ms": SEED_TPOT}, "gsm8k": {"accuracy": SEED_ACC}}
    result = analyze(seed_table(), None, "main_rs_off", claims, reference, settings=campaign_settings())
    c = {x["id"]: x for x in result["claims"]}
    v = {k: x["verdict"] for k, x in c.items()}
    assert v["rs_costs_accept_length"] == REPRODUCED and v["pr_raises_accept_length"] == REPRODUCED
    assert v["rs_costs_throughput"] == REPRODUCED
    assert v["pr_restores_accept_length"] == REPRODUCED  # 115% of the gap, 95% CI 97% .. 133% > 90%
    assert "115% of it" in c["pr_restores_accept_length"]["detail"]
    assert v["pr_improves_tpot"] == REPRODUCED and v["pr_improves_throughput"] == REPRODUCED
    assert "accuracy_unchanged" not in v  # "Nothing here is an accuracy claim in either direction"
    assert v["sampled_workload_unaffected"] == INCONCLUSIVE  # not in the seed's tables
    # one launch per arm: the between-launch prior is in every interval, and verdicts say whether they would
    # survive twice that prior
    assert "prior 1.5% between launches" in c["pr_improves_throughput"]["noise"]
    assert c["pr_improves_throughput"]["prior_sensitive"] == INCONCLUSIVE
    assert c["pr_raises_accept_length"]["prior_sensitive"] is None
    assert result["multiplicity"] == {"policy": "holm", "alpha": 0.05, "family": 6}
    deltas = {(d["arm"], d["benchmark"], d["metric"]): d for d in result["deltas"]}
    assert deltas[("main_rs_on", "bench_serving", "output_throughput")]["verdict"] == "outside noise"
    assert deltas[("main_rs_on", "gsm8k", "accept_length")]["verdict"] == "outside noise"
    assert deltas[("main_rs_on", "gsm8k", "accuracy")]["verdict"] == "within noise"


def test_doubling_the_prior_is_what_the_sensitivity_says():
    claims = yaml.safe_load((CONF_DIR / "claims" / "eagle_topk_greedy.yaml").read_text())["claims"]
    reference = {"bench_serving": {"output_throughput": SEED_TPUT, "mean_tpot_ms": SEED_TPOT}}
    doubled = campaign_settings("analysis.launch_noise_prior.output_throughput=0.03",
                                "analysis.launch_noise_prior.mean_tpot_ms=0.03",
                                "analysis.launch_noise_prior.accept_length=0.01")
    v = {x["id"]: x["verdict"] for x in analyze(seed_table(), None, "main_rs_off", claims, reference,
                                                 settings=doubled)["claims"]}
    assert v["pr_improves_throughput"] == INCONCLUSIVE and v["rs_costs_accept_length"] == REPRODUCED


def test_claim_that_the_data_contradicts_is_not_reproduced():
    table = pd.DataFrame([
        {"arm": "a", "benchmark": "b", "repeat": r, "metric": "tput", "value": v, "unit": "tok/s"}
        for r, v in enumerate([100.0, 101.0, 99.0])] + [
        {"arm": "c", "benchmark": "b", "repeat": r, "metric": "tput", "value": v, "unit": "tok/s"}
        for r, v in enumerate([120.0, 121.0, 119.0])])
    claim = {"id": "x", "benchmark": "b", "metric": "tput", "arm": "c", "against": "a", "expect": "decrease"}
    settings = {"launch_noise_prior": {"tput": 0.02}}
    assert analyze(table, claims=[claim], settings=settings)["claims"][0]["verdict"] == NOT_REPRODUCED
    claim["expect"] = "increase"
    assert analyze(table, claims=[claim], settings=settings)["claims"][0]["verdict"] == REPRODUCED


def test_gsm8k_binomial_and_mcnemar_on_requests():
    requests = pd.DataFrame(
        [{"arm": "a", "benchmark": "gsm8k", "repeat": 1, "request": i, "correct": i % 10 != 0} for i in range(100)] +
        [{"arm": "b", "benchmark": "gsm8k", "repeat": 1, "request": i, "correct": i % 10 not in (0, 1)} for i in range(100)])
    runs = pd.DataFrame([{"arm": "a", "benchmark": "gsm8k", "repeat": 1, "metric": "accuracy", "value": 0.9, "unit": ""},
                         {"arm": "b", "benchmark": "gsm8k", "repeat": 1, "metric": "accuracy", "value": 0.8, "unit": ""}])
    g = analyze(runs, requests)["gsm8k"]
    assert {b["arm"]: b["correct"] for b in g["binomial"]} == {"a": 90, "b": 80}
    m = g["mcnemar"][0]
    assert (m["a_only"], m["b_only"], m["pairs"]) == (10, 0, 100)
    assert m["p_value"] == pytest.approx(2 / 1024)


def test_bad_table_names_the_problem():
    with pytest.raises(TableError, match="missing columns"):
        analyze(pd.DataFrame({"arm": ["a"], "value": [1.0]}))
    with pytest.raises(TableError, match="non-numeric"):
        analyze(pd.DataFrame([{"arm": "a", "benchmark": "b", "repeat": 1, "metric": "m", "value": "x"}]))


def test_analyze_cli_on_the_seed_table(tmp_path):
    import subprocess
    import sys

    from specrepro.core.config import PROJECT_ROOT

    table = tmp_path / "seed.csv"
    seed_table().to_csv(table, index=False)
    reference = tmp_path / "reference.yaml"
    reference.write_text(yaml.safe_dump({"bench_serving": {"output_throughput": SEED_TPUT, "mean_tpot_ms": SEED_TPOT},
                                         "gsm8k": {"accuracy": SEED_ACC}}))
    out = subprocess.run([sys.executable, "-m", "specrepro.cli", "analyze", str(table), "--baseline", "main_rs_off",
                          "--claims", str(CONF_DIR / "claims" / "eagle_topk_greedy.yaml"),
                          "--reference-repeats", str(reference)], capture_output=True, text=True, cwd=PROJECT_ROOT)
    assert out.returncode == 0, out.stderr
    assert "outside noise" in out.stdout
    assert "| The patch raises output throughput with rejection sampling on (285.7 -> 303.7 tok/s). | **REPRODUCED** |" \
        in out.stdout and "Holm-adjusted over 6 claims" in out.stdout
    assert "leans on the between-launch prior: with twice it, INCONCLUSIVE" in out.stdout
    strict = subprocess.run([sys.executable, "-m", "specrepro.cli", "analyze", str(table), "--baseline", "main_rs_off",
                             "--claims", str(CONF_DIR / "claims" / "eagle_topk_greedy.yaml"),
                             "--reference-repeats", str(reference), "--set", "launch_noise_prior.output_throughput=0.03"],
                            capture_output=True, text=True, cwd=PROJECT_ROOT)
    assert "(285.7 -> 303.7 tok/s). | **INCONCLUSIVE** |" in strict.stdout
    bad = subprocess.run([sys.executable, "-m", "specrepro.cli", "analyze", str(tmp_path / "missing.csv")],
                         capture_output=True, text=True, cwd=PROJECT_ROOT)
    assert bad.returncode == 2 and "missing.csv" in bad.stderr


def test_headline_tables_have_the_seeds_shape_in_the_experiments_words():
    from specrepro.core.config import compose
    from specrepro.analysis.report import headline_tables

    text = headline_tables(compose(), analyze(seed_table(), None, "main_rs_off"))
    # each benchmark's table, its note from the experiment's own file, the published figure beside each metric
    assert "**gsm8k** (accept length is the metric the fix moves)" in text
    assert "**bench_serving** (read mean TPOT, not median)" in text
    assert ("| arm | accept len (tokens/verify step) | published | accuracy (share) | published | invalid (share) | "
            "published |") in text
    assert "| pr_rs_on | 3.882 (n=1) | 3.882 | 0.940 (n=1) | 0.940 | 0.000 (n=1) | 0.000 |" in text
    # p50 and p99 TPOT have no published figure: no column for one
    assert "| main_rs_on | 3.29 (n=1) | 3.29 | not run | not run | 285.7 (n=1) | 285.7 |" in text
    assert text.index("### GSM8K-style benchmarks") < text.index("### bench_serving benchmarks")


def test_every_benchmark_the_campaign_ran_gets_a_headline_table():
    """gsm8k_sampled is a benchmark like any other: its table is up front, not deep in the report."""
    from specrepro.core.config import compose
    from specrepro.analysis.report import headline_tables

    runs = pd.concat([seed_table(), seed_table().query("benchmark == 'gsm8k'").assign(benchmark="gsm8k_sampled")])
    text = headline_tables(compose(), analyze(runs, None, "main_rs_off"))
    assert "**gsm8k_sampled**" in text and "**gsm8k** (" in text
    sampled = text.split("**gsm8k_sampled**", 1)[1].split("**", 1)[0]
    assert "| pr_rs_on | 3.882 (n=1) |" in sampled and "published" not in sampled.split("\n")[2]


def test_accept_length_up_with_much_worse_tpot_is_flagged():
    from specrepro.analysis.analyze import analyze

    rows = []
    for arm, al, tpot in (("base", 3.70, 9.8), ("jit_fallback", 4.58, 963.0), ("fine", 3.9, 9.6)):
        for r in (1, 2, 3):
            rows += [{"arm": arm, "benchmark": "bench_serving", "repeat": r, "metric": "accept_length", "value": al},
                     {"arm": arm, "benchmark": "bench_serving", "repeat": r, "metric": "mean_tpot_ms", "value": tpot}]
    flags = analyze(pd.DataFrame(rows), baseline="base")["flags"]
    assert [f["arm"] for f in flags] == ["jit_fallback"]
    assert "accept length +23.8% but mean TPOT +9727%" in flags[0]["text"]


def test_intervals_use_students_t_with_welchs_degrees_of_freedom():
    from specrepro.analysis import noise

    assert round(noise.t_quantile(2), 3) == 4.303 and round(noise.t_quantile(math.inf), 3) == 1.96
    # two arms of 3 repeats each on one launch, no prior: each mean's variance is s^2/3 with df 2
    a = noise.arm_noise([[303.0, 304.0, 305.0]], None)
    b = noise.arm_noise([[309.0, 310.0, 311.0]], None)
    d = noise.relative_change(a, b)
    k = (304 / 310) ** 2
    assert d["se"] == pytest.approx(math.sqrt(1 / 3 + k / 3) / 310)
    # Welch-Satterthwaite, less one for the estimated variance ratio (issue #39; never below one arm's df, 2)
    assert d["df"] == pytest.approx((1 + k) ** 2 / ((1 + k ** 2) / 2) - 1)
    assert d["half_width"] == pytest.approx(noise.t_quantile(d["df"]) * d["se"])
    # a prior is known: it widens the interval and loses no degrees of freedom
    p = noise.relative_change(noise.arm_noise([[303.0, 304.0, 305.0]], 0.02),
                              noise.arm_noise([[309.0, 310.0, 311.0]], 0.02))
    assert p["se"] > d["se"] and p["df"] > d["df"]


def test_an_arms_own_spread_is_its_own():
    """Per-arm variances: a noisy arm widens its comparisons; a steady baseline does not narrow them."""
    from specrepro.analysis import noise

    steady = noise.arm_noise([[100.0, 100.1, 99.9]], None)
    noisy = noise.arm_noise([[90.0, 100.0, 110.0]], None)
    assert noise.relative_change(noisy, steady)["se"] > 10 * noise.relative_change(steady, steady)["se"]


def test_holm_adjusts_step_down():
    from specrepro.analysis import noise

    assert noise.holm({"a": 0.01, "b": 0.04, "c": 0.03}) == pytest.approx({"a": 0.03, "c": 0.06, "b": 0.06})


def test_seed_table_with_honest_intervals():
    """The RS losses stay outside noise; the PR-vs-RS-off residual does not; accuracy is shown per question, paired,
    with an interval, and never judged."""
    claims = yaml.safe_load((CONF_DIR / "claims" / "eagle_topk_greedy.yaml").read_text())["claims"]
    reference = {"bench_serving": {"output_throughput": SEED_TPUT, "mean_tpot_ms": SEED_TPOT}, "gsm8k": {"accuracy": SEED_ACC}}
    result = analyze(seed_table(), None, "main_rs_off", claims, reference, questions={"gsm8k": 200},
                     settings=campaign_settings())
    d = {(x["arm"], x["metric"]): x for x in result["deltas"]}
    assert d[("main_rs_on", "output_throughput")]["verdict"] == "outside noise"  # -7.9%
    assert d[("main_rs_on", "mean_tpot_ms")]["verdict"] == "outside noise"  # +8.2%
    assert d[("pr_rs_on", "output_throughput")]["verdict"] == "within noise"  # -2.1%
    assert d[("pr_rs_on", "mean_tpot_ms")]["verdict"] == "within noise"  # +1.3%
    acc = d[("pr_rs_on", "accuracy")]
    assert acc["verdict"] == "within noise" and acc["extra_se"] > 0.02  # the 200-question sample dominates
    assert "accuracy" not in {c.get("metric") for c in result["claims"]}


def test_paired_accuracy_difference_is_shown_with_its_interval():
    requests = pd.DataFrame([{"arm": "a", "benchmark": "gsm8k", "repeat": 1, "request": q, "correct": q % 10 != 0}
                             for q in range(200)] +
                            [{"arm": "b", "benchmark": "gsm8k", "repeat": 1, "request": q, "correct": q % 10 not in (0, 1)}
                             for q in range(200)])
    runs = pd.DataFrame([{"arm": a, "benchmark": "gsm8k", "repeat": 1, "metric": "accuracy", "value": v}
                         for a, v in (("a", 0.9), ("b", 0.8))])
    (paired,) = analyze(runs, requests, "a")["gsm8k"]["paired"]
    # b is right only where a is: 20 discordant questions, all against b
    assert (paired["arm_only"], paired["base_only"], paired["pairs"]) == (0, 20, 200)
    assert paired["difference"] == pytest.approx(-0.1)
    assert paired["ci_low"] == pytest.approx(-0.1 - 1.959963984540054 * math.sqrt(20 - 400 / 200) / 200)


def test_repeats_do_not_multiply_the_question_sample():
    requests = pd.DataFrame([{"arm": "a", "benchmark": "gsm8k", "repeat": r, "request": q, "correct": q % 10 != 0}
                             for r in (1, 2, 3) for q in range(200)] +
                            [{"arm": "b", "benchmark": "gsm8k", "repeat": r, "request": q, "correct": q % 5 != 0}
                             for r in (1, 2, 3) for q in range(200)])
    runs = pd.DataFrame([{"arm": a, "benchmark": "gsm8k", "repeat": 1, "metric": "accuracy", "value": v}
                         for a, v in (("a", 0.9), ("b", 0.8))])
    tests = analyze(runs, requests, "a")["gsm8k"]
    a = next(x for x in tests["binomial"] if x["arm"] == "a")
    assert a["n"] == 200 and a["repeats"] == 3 and a["accuracy"] == 0.9
    pair = tests["mcnemar"][0]
    assert pair["pairs"] == 200 and (pair["a_only"], pair["b_only"]) == (20, 0)


def test_a_zero_baseline_has_no_relative_change():
    runs = pd.DataFrame([{"arm": a, "benchmark": "g", "repeat": r, "metric": "invalid_rate", "value": v}
                         for a, v in (("base", 0.0), ("arm", 0.1)) for r in (1, 2)])
    (d,) = analyze(runs, baseline="base")["deltas"]
    assert d["verdict"] == "no relative change (the baseline is zero)"
