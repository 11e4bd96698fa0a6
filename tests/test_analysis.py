"""Statistics and verdicts with known numbers, the seed's own among them."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import yaml

from specrepro.analysis import stats
from specrepro.analysis.analyze import REPRODUCED, INCONCLUSIVE, NOT_REPRODUCED, TableError, analyze
from specrepro.config import CONF_DIR

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


def test_relative_delta_ci():
    d = stats.relative_delta([90.0], [100.0], noise_floor=0.01)
    assert d["relative"] == pytest.approx(-0.10)
    assert d["ci_high"] - d["relative"] == pytest.approx(1.959964 * 0.01 * math.sqrt(2), rel=1e-5)
    assert stats.outside_noise(d)
    assert not stats.outside_noise(stats.relative_delta([100.5], [100.0], 0.01))


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


def test_seed_numbers_give_the_seed_conclusions():
    claims = yaml.safe_load((CONF_DIR / "claims" / "eagle_topk_greedy.yaml").read_text())["claims"]
    reference = {"bench_serving": {"output_throughput": SEED_TPUT, "mean_tpot_ms": SEED_TPOT}, "gsm8k": {"accuracy": SEED_ACC}}
    result = analyze(seed_table(), None, "main_rs_off", claims, reference)
    v = {c["id"]: c["verdict"] for c in result["claims"]}
    assert v["rs_costs_accept_length"] == REPRODUCED
    assert v["rs_costs_throughput"] == REPRODUCED
    assert v["pr_restores_accept_length"] == REPRODUCED
    assert v["pr_improves_tpot"] == REPRODUCED and v["pr_improves_throughput"] == REPRODUCED
    assert v["accuracy_unchanged"] == INCONCLUSIVE
    assert v["sampled_workload_unaffected"] == INCONCLUSIVE  # not in the seed's tables
    deltas = {(d["arm"], d["benchmark"], d["metric"]): d for d in result["deltas"]}
    assert deltas[("main_rs_on", "bench_serving", "output_throughput")]["verdict"] == "outside noise"
    assert deltas[("main_rs_on", "gsm8k", "accept_length")]["verdict"] == "outside noise"
    assert deltas[("main_rs_on", "gsm8k", "accuracy")]["verdict"] == "within noise"


def test_claim_that_the_data_contradicts_is_not_reproduced():
    table = pd.DataFrame([
        {"arm": "a", "benchmark": "b", "repeat": r, "metric": "tput", "value": v, "unit": "tok/s"}
        for r, v in enumerate([100.0, 101.0, 99.0])] + [
        {"arm": "c", "benchmark": "b", "repeat": r, "metric": "tput", "value": v, "unit": "tok/s"}
        for r, v in enumerate([120.0, 121.0, 119.0])])
    claim = {"id": "x", "benchmark": "b", "metric": "tput", "arm": "c", "against": "a", "expect": "decrease"}
    assert analyze(table, claims=[claim])["claims"][0]["verdict"] == NOT_REPRODUCED
    claim["expect"] = "increase"
    assert analyze(table, claims=[claim])["claims"][0]["verdict"] == REPRODUCED


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

    from specrepro.config import PROJECT_ROOT

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
    assert "No accuracy claim either way; the seed's repeats span every arm. | **INCONCLUSIVE**" in out.stdout
    bad = subprocess.run([sys.executable, "-m", "specrepro.cli", "analyze", str(tmp_path / "missing.csv")],
                         capture_output=True, text=True, cwd=PROJECT_ROOT)
    assert bad.returncode == 2 and "missing.csv" in bad.stderr


def test_seed_tables_have_the_seeds_shape():
    from specrepro.config import compose
    from specrepro.analysis.report import seed_tables

    text = seed_tables(compose(), analyze(seed_table(), None, "main_rs_off"))
    assert "| arm | accept len | seed | accuracy | seed | invalid | seed |" in text
    assert "| pr_rs_on | 3.882 (n=1) | 3.882 | 0.940 (n=1) | 0.940 | 0.000 (n=1) | 0.000 |" in text
    assert "| main_rs_on | 3.29 (n=1) | 3.29 | not run | 285.7 (n=1) | 285.7 |" in text


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


def test_intervals_use_students_t_with_the_floors_degrees_of_freedom():
    assert round(stats.t_quantile(2), 3) == 4.303 and round(stats.t_quantile(None), 3) == 1.96
    d = stats.relative_delta([303.7], [310.2], noise_floor=0.005536, df=2)
    # se = 0.5536% * sqrt(2) = 0.783%; half-width = 4.303 * 0.783% = 3.37%
    assert round(d["relative"], 4) == -0.021 and round(d["half_width"], 4) == 0.0337


def test_seed_table_with_honest_intervals():
    """The RS losses and the PR's recovery stay outside noise; the PR-vs-RS-off residual does not; accuracy
    cannot be decided by 200 questions and three published repeats."""
    claims = yaml.safe_load((CONF_DIR / "claims" / "eagle_topk_greedy.yaml").read_text())["claims"]
    reference = {"bench_serving": {"output_throughput": SEED_TPUT, "mean_tpot_ms": SEED_TPOT}, "gsm8k": {"accuracy": SEED_ACC}}
    result = analyze(seed_table(), None, "main_rs_off", claims, reference, questions={"gsm8k": 200})
    d = {(x["arm"], x["metric"]): x for x in result["deltas"]}
    assert d[("main_rs_on", "output_throughput")]["verdict"] == "outside noise"  # -7.9%
    assert d[("main_rs_on", "mean_tpot_ms")]["verdict"] == "outside noise"  # +8.2%
    assert d[("pr_rs_on", "output_throughput")]["verdict"] == "within noise"  # -2.1% +- 3.4%
    assert d[("pr_rs_on", "mean_tpot_ms")]["verdict"] == "within noise"  # +1.3% +- 3.1%
    claims_by_id = {c["id"]: c for c in result["claims"]}
    acc = claims_by_id["accuracy_unchanged"]
    assert acc["verdict"] == INCONCLUSIVE and "question sample n=200" in acc["detail"]
    assert "this campaign cannot decide it" in acc["detail"]
    assert claims_by_id["pr_improves_throughput"]["verdict"] == REPRODUCED


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
