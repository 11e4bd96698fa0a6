"""Metrics per category of a benchmark's prompts (SPEED-Bench's low_entropy / mixed / high_entropy, issue #40): the
names, the analysis' settings found by the base metric, claims per category (validated, judged), theory per category
and the report's per-category table.

Simulated runs tables whose truth is known: each arm's repeats are mean x (1 + CV x z), z a fixed vector of mean 0
and SD 1, so every mean and interval is known by hand.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from specrepro.analysis.analyze import INCONCLUSIVE, NOT_JUDGED, NOT_REPRODUCED, REPRODUCED, analyze, noise_floors

# five repeats: mean 0, SD (ddof 1) exactly 1
Z = np.array([-2.0, -1.0, 0.0, 1.0, 2.0]) / math.sqrt(2.5)
CATEGORIES = ["low_entropy", "mixed", "high_entropy"]
# the truth: the baseline's accept length per category; the patched arm +20% in low_entropy, +1% in a noisy mixed,
# nothing in high_entropy
BASE = {"low_entropy": 4.0, "mixed": 3.1, "high_entropy": 3.5}
PATCHED = {"low_entropy": 4.8, "mixed": 3.131, "high_entropy": 3.5}
CV = {"low_entropy": 0.01, "mixed": 0.05, "high_entropy": 0.01}
SETTINGS = {"launch_noise_prior": {}, "within_fallback": {}}


def rows(arm, metric, mean, cv, bench="speed_bench", z=Z):
    return [{"arm": arm, "benchmark": bench, "repeat": i + 1, "metric": metric, "value": mean * (1 + cv * x),
             "unit": "tokens/verify"} for i, x in enumerate(z)]


def speed_bench_runs():
    out = rows("base", "accept_length", 3.5, 0.01) + rows("patched", "accept_length", 3.8, 0.01)
    for c in CATEGORIES:
        out += rows("base", f"accept_length[{c}]", BASE[c], 0.01) + rows("patched", f"accept_length[{c}]", PATCHED[c],
                                                                         CV[c])
    return pd.DataFrame(out)


def claim(cid, category, expect="increase", **extra):
    return {"id": cid, "text": f"{cid} text", "benchmark": "speed_bench", "metric": "accept_length",
            "category": category, "expect": expect, "arm": "patched", "against": "base", **extra}


# --- names ----------------------------------------------------------------------------------------------------------

def test_category_names_round_trip():
    from specrepro.util.metric_names import (base_metric, category_metric, category_of, has, lookup,
                                        split_category_metric, tracking_name)

    assert category_metric("accept_length", "low_entropy") == "accept_length[low_entropy]"
    assert split_category_metric("accept_length[low_entropy]") == ("accept_length", "low_entropy")
    assert split_category_metric("output_throughput") == ("output_throughput", None)
    assert split_category_metric("odd[") == ("odd[", None)
    assert base_metric("mean_tpot_ms[mixed]") == "mean_tpot_ms" and category_of("mean_tpot_ms[mixed]") == "mixed"
    for bad in (("accept_length[x]", "y"), ("accept_length", "a b"), ("accept_length", "a]")):
        with pytest.raises(ValueError):
            category_metric(*bad)
    table = {"accept_length": 0.01, "accept_length[mixed]": 0.03}
    assert lookup(table, "accept_length[low_entropy]") == 0.01  # by its base metric
    assert lookup(table, "accept_length[mixed]") == 0.03  # its own entry wins
    assert lookup(table, "output_throughput[mixed]", 0.5) == 0.5 and lookup(None, "x") is None
    assert has(table, "accept_length[high_entropy]") and not has(table, "duration[mixed]")
    # MLflow takes no brackets in a metric's name
    assert tracking_name("accept_length[mixed]") == "accept_length/mixed"
    assert tracking_name("accept_length") == "accept_length"


def test_units_and_display_names_follow_the_base_metric():
    from specrepro.analysis.claim_view import number, unit
    from specrepro.analysis.report import metric_format
    from specrepro.stages.collect import unit_of

    assert unit("accept_length[low_entropy]") == "tokens/verify step" and unit("mean_tpot_ms[mixed]") == "ms"
    assert number(3.14159, "accept_length[mixed]") == "3.142"
    assert number(1234.56, "output_throughput[mixed]") == "1234.6"
    assert unit_of("mean_tpot_ms[mixed]") == "ms" and unit_of("output_throughput[high_entropy]") == "tok/s"
    assert unit_of("accept_length[mixed]") == "tokens/verify"
    assert metric_format("accept_length[mixed]") == ("accept len (tokens/verify step) [mixed]", 3)
    assert metric_format("accept_length") == ("accept len (tokens/verify step)", 3)


# --- noise floors and priors by the base metric ---------------------------------------------------------------------

def test_floors_and_priors_resolve_by_the_base_metric():
    one = pd.DataFrame([{"arm": a, "benchmark": "speed_bench", "repeat": 1, "metric": m, "value": 3.0, "launch": 1}
                        for a in ("base", "patched") for m in ("accept_length[low_entropy]", "accept_length[mixed]")])
    settings = {"launch_noise_prior": {"accept_length": 0.005, "accept_length[mixed]": 0.02},
                "within_fallback": {"accept_length": 0.01}}
    floors = noise_floors(one, settings=settings)
    low, mixed = floors[("speed_bench", "accept_length[low_entropy]")], floors[("speed_bench", "accept_length[mixed]")]
    assert low["noise_floor"] == 0.01 and low["source"].startswith("fallback") and low["launch_prior"] == 0.005
    assert mixed["noise_floor"] == 0.01 and mixed["launch_prior"] == 0.02  # its own prior wins


def test_a_claim_per_category_leans_on_the_base_metrics_prior_and_fallback():
    """One repeat per arm: the interval is the fallback's 1% within and the 0.5% prior between launches, both
    accept_length's: se = sqrt(2 (0.01^2 + 0.005^2)) x 1.2 (delta method at a ratio of 1.2), normal quantile."""
    one = pd.DataFrame([{"arm": "base", "benchmark": "speed_bench", "repeat": 1, "launch": 1,
                         "metric": "accept_length[low_entropy]", "value": 4.0},
                        {"arm": "patched", "benchmark": "speed_bench", "repeat": 1, "launch": 1,
                         "metric": "accept_length[low_entropy]", "value": 4.8}])
    settings = {"launch_noise_prior": {"accept_length": 0.005}, "within_fallback": {"accept_length": 0.01}}
    c = analyze(one, baseline="base", claims=[claim("low", "low_entropy")], settings=settings)["claims"][0]
    se = math.sqrt(2 * (0.01 ** 2 + 0.005 ** 2)) * 1.2
    assert c["delta"]["se"] == pytest.approx(se) and c["delta"]["df"] == math.inf
    assert c["verdict"] == REPRODUCED and "prior 0.5% between launches" in c["noise"]


def test_unjudged_metrics_cover_their_categories():
    runs = speed_bench_runs()
    extra = pd.DataFrame(rows("base", "output_throughput[mixed]", 100.0, 0.01)
                         + rows("patched", "output_throughput[mixed]", 120.0, 0.01))
    c = {**claim("tput", "mixed"), "metric": "output_throughput"}
    out = analyze(pd.concat([runs, extra]), baseline="base", claims=[c], settings=SETTINGS,
                  unjudged_metrics={"output_throughput": "a CPU's throughput says nothing of a GPU's"})
    assert out["claims"][0]["verdict"] == NOT_JUDGED
    assert out["claims"][0]["detail"].startswith("output_throughput[mixed] is shown, not judged here: a CPU's")


def test_decidability_per_category_uses_the_base_metrics_fallback_and_prior():
    from specrepro.analysis.checks import decidability
    from specrepro.analysis.claims import with_category

    settings = {"launch_noise_prior": {"accept_length": 0.005}, "within_fallback": {"accept_length": 0.01},
                "default_margin": 0.02}
    d = decidability([with_category(claim("low", "low_entropy"))], {"speed_bench": {"kind": "speed_bench"}}, {"speed_bench": 4}, {}, {},
                     settings)[0]
    assert d["metric"] == "accept_length[low_entropy]" and d["floor"] == 0.01 and d["prior"] == 0.005
    assert d["floor_source"] == "fallback" and d["resolvable"] > 0


# --- verdicts per category ------------------------------------------------------------------------------------------

def test_verdicts_per_category_follow_the_truth():
    """+20% in low_entropy (CV 1%, 5 repeats): REPRODUCED; nothing in high_entropy: an increase NOT REPRODUCED (its
    interval inside the 2% margin) and equality REPRODUCED; +1% in a mixed category at 5% CV: INCONCLUSIVE."""
    claims = [claim("low_up", "low_entropy"), claim("high_up", "high_entropy"), claim("mixed_up", "mixed"),
              claim("high_equal", "high_entropy", expect="equal"),
              {"id": "whole", "benchmark": "speed_bench", "metric": "accept_length", "expect": "increase",
               "arm": "patched", "against": "base"}]
    out = analyze(speed_bench_runs(), baseline="base", claims=claims, settings=SETTINGS)
    got = {c["id"]: c for c in out["claims"]}
    assert {k: c["verdict"] for k, c in got.items()} == {
        "low_up": REPRODUCED, "high_up": NOT_REPRODUCED, "mixed_up": INCONCLUSIVE, "high_equal": REPRODUCED,
        "whole": REPRODUCED}
    assert got["low_up"]["metric"] == "accept_length[low_entropy]" and got["low_up"]["category"] == "low_entropy"
    assert got["low_up"]["delta"]["relative"] == pytest.approx(0.20)
    assert got["mixed_up"]["delta"]["relative"] == pytest.approx(0.01)
    assert got["high_up"]["delta"]["relative"] == pytest.approx(0.0, abs=1e-12)
    # the whole benchmark's claim is judged on the whole benchmark's metric, and carries no category
    assert got["whole"]["metric"] == "accept_length" and "category" not in got["whole"]
    assert got["whole"]["delta"]["relative"] == pytest.approx(3.8 / 3.5 - 1)
    # the interval by hand: each arm's mean has variance (CV x mean)^2 / 5; delta method on the ratio
    d = got["low_up"]["delta"]
    assert d["se"] == pytest.approx(math.sqrt(2 * 0.01 ** 2 / 5) * 1.2)


def test_a_metric_written_per_category_is_the_same_claim():
    from specrepro.analysis.claims import with_category

    written = {"id": "x", "benchmark": "speed_bench", "metric": "accept_length[mixed]", "expect": "increase"}
    assert with_category(written)["category"] == "mixed"
    assert with_category(claim("x", "mixed"))["metric"] == "accept_length[mixed]"
    assert with_category(with_category(claim("x", "mixed"))) == with_category(claim("x", "mixed"))
    plain = {"id": "y", "benchmark": "gsm8k", "metric": "accept_length", "expect": "increase"}
    assert with_category(plain) is plain  # a claim without a category: untouched
    odd = {**claim("z", ["low_entropy"])}
    assert with_category(odd) is odd  # not a category's name: left for validation to name
    assert validate([odd])[0].startswith("conf/claims/speed.yaml: claim 'z'.category: ['low_entropy'] is not a "
                                         "category")


def test_the_sequential_decision_judges_the_category_metric():
    from specrepro.analysis import sequential as sq

    # three launches, each shifting every arm's values by -0.1%, 0, +0.1%: one round of three launches
    one = speed_bench_runs()
    runs = pd.concat([one.assign(launch=n, value=one["value"] * (1 + s)) for n, s in ((1, -0.001), (2, 0), (3, 0.001))],
                     ignore_index=True)
    seq = sq.decide_sequential(runs, [claim("low_up", "low_entropy"), claim("high_up", "high_entropy")], SETTINGS,
                               {"min": 3, "max": 3})
    assert {c["id"]: c["verdict"] for c in seq["claims"]} == {"low_up": REPRODUCED, "high_up": NOT_REPRODUCED}


# --- claims validation ----------------------------------------------------------------------------------------------

def validate(claims, categories=None):
    from specrepro.analysis.claims import benchmark_categories, claim_problems

    benches = {"speed_bench": {"kind": "speed_bench", "speed_bench": {"categories": CATEGORIES}},
               "gsm8k": {"kind": "gsm8k", "gsm8k": {"num_questions": 8}}}
    found = categories if categories is not None else {b: benchmark_categories(v) for b, v in benches.items()}
    return claim_problems(claims, "conf/claims/speed.yaml", ["base", "patched"],
                          {b: v["kind"] for b, v in benches.items()},
                          {"base": list(benches), "patched": list(benches)}, categories=found)


def test_claims_per_category_are_validated_naming_file_claim_and_key():
    assert validate([claim("ok", "low_entropy"), {**claim("ok2", None), "metric": "accept_length[mixed]"},
                     {**claim("ok3", "mixed"), "metric": "output_throughput"}]) == []
    assert validate([claim("typo", "low_entrop")]) == [
        "conf/claims/speed.yaml: claim 'typo'.category: 'low_entrop' is not a category of benchmark 'speed_bench' "
        "(low_entropy, mixed, high_entropy)"]
    assert validate([{**claim("gsm", "mixed"), "benchmark": "gsm8k"}]) == [
        "conf/claims/speed.yaml: claim 'gsm'.category: benchmark 'gsm8k' (kind gsm8k) has no categories; a claim on "
        "it names no `category`"]
    [both] = validate([{**claim("both", "low_entropy"), "metric": "accept_length[mixed]"}])
    assert both.startswith("conf/claims/speed.yaml: claim 'both'.category: 'low_entropy' disagrees")
    [metric] = validate([{**claim("m", "mixed"), "metric": "accept_lenght"}])
    assert metric.startswith("conf/claims/speed.yaml: claim 'm'.metric: 'accept_lenght' is not a metric")
    greedy = {"id": "g", "benchmark": "gsm8k", "expect": "outputs_unchanged", "arm": "patched", "against": "base",
              "category": "mixed"}
    assert validate([greedy]) == ["conf/claims/speed.yaml: claim 'g'.category: `outputs_unchanged` compares greedy "
                                  "outputs, not a metric per category"]
    # categories known from elsewhere (a runs table): the same check
    assert validate([claim("x", "mixed")], categories={"speed_bench": ["low_entropy"]})[0].endswith("(low_entropy)")


def test_claims_without_a_category_validate_as_before():
    from specrepro.analysis.claims import claim_problems

    plain = [{"id": "p", "benchmark": "bench", "metric": "accept_length", "expect": "increase", "arm": "a",
              "against": "b"}]
    args = (plain, "f.yaml", ["a", "b"], {"bench": "bench_serving"}, {"a": ["bench"], "b": ["bench"]})
    assert claim_problems(*args) == [] == claim_problems(*args, categories={"bench": None})


def test_a_benchmarks_categories_come_from_its_config():
    from specrepro.analysis.claims import benchmark_categories

    assert benchmark_categories({"kind": "speed_bench", "speed_bench": {"categories": CATEGORIES}}) == CATEGORIES
    assert benchmark_categories({"kind": "speed_bench", "categories": ["a"]}) == ["a"]
    assert benchmark_categories({"kind": "gsm8k", "gsm8k": {"num_questions": 8}}) is None
    assert benchmark_categories({"kind": "bench_serving", "serving": {}}) is None


# --- theory per category --------------------------------------------------------------------------------------------

RULE = {"draft_temperature": 0, "verify": "greedy", "acceptance": 0.75}
# steps 3, every draft accepted with 0.75: 1 + 0.75 + 0.75^2 + 0.75^3 tokens a verify step
EXPECTED = 1 + 0.75 + 0.75 ** 2 + 0.75 ** 3


def theory_model(p: float = 0.75):
    from specrepro.core.theory import Acceptance

    return {"rule": {**RULE, "acceptance": p}, "steps": 3, "first": Acceptance.constant(p),
            "rest": Acceptance.constant(p)}


def test_the_theory_of_a_benchmark_holds_for_each_category():
    from specrepro.core.theory import category_predictions

    model = theory_model()
    got = category_predictions({("base", "speed_bench"): model, ("base", "gsm8k"): model},
                               {"speed_bench": CATEGORIES})
    assert list(got) == [("base", "speed_bench", c) for c in CATEGORIES] and all(v is model for v in got.values())


def test_theory_rows_per_category():
    from specrepro.analysis.checks import theory_check

    runs = pd.DataFrame(rows("base", "accept_length", EXPECTED, 0.001)
                        + rows("base", "accept_length[mixed]", 2.0, 0.001)  # far from theory: disagrees
                        + rows("base", "accept_length[low_entropy]", EXPECTED, 0.001))
    out = theory_check(runs, None, {("base", "speed_bench"): theory_model()})
    assert [(r["benchmark"], r.get("category")) for r in out] == [
        ("speed_bench", None), ("speed_bench", "mixed"), ("speed_bench", "low_entropy")]
    assert all(r["expected"] == pytest.approx(EXPECTED) for r in out)
    by = {r.get("category"): r for r in out}
    assert by["mixed"]["metric"] == "accept_length[mixed]" and by["mixed"]["agrees"] is False
    assert by["low_entropy"]["agrees"] is True and "metric" not in by[None]


def test_theory_per_category_reads_that_categorys_verify_steps():
    from specrepro.analysis.checks import theory_check

    runs = pd.DataFrame(rows("base", "accept_length[mixed]", EXPECTED, 0.001) + rows("base", "accept_length", EXPECTED,
                                                                                    0.001))
    requests = pd.DataFrame({"arm": "base", "benchmark": "speed_bench", "spec_verify_ct": [10, 20, 30],
                             "category": ["mixed", "mixed", "low_entropy"]})
    by = {r.get("category"): r for r in theory_check(runs, requests, {("base", "speed_bench"): theory_model()})}
    assert by["mixed"]["verify_steps"] == 30.0 and by[None]["verify_steps"] == 60.0
    # without a category per request, a category's row has no sampling error of its own
    plain = requests.drop(columns="category")
    by = {r.get("category"): r for r in theory_check(runs, plain, {("base", "speed_bench"): theory_model()})}
    assert by["mixed"]["verify_steps"] is None and by[None]["verify_steps"] == 60.0


def test_a_category_claims_theory_verdict_uses_the_prediction():
    from specrepro.analysis.claim_view import theory_expected, theory_verdict

    analysis = {"theory": [{"arm": "base", "benchmark": "speed_bench", "expected": 2.0},
                           {"arm": "patched", "benchmark": "speed_bench", "expected": 2.5},
                           {"arm": "patched", "benchmark": "speed_bench", "expected": 2.5, "category": "mixed",
                            "metric": "accept_length[mixed]"}]}
    assert theory_expected(analysis, "patched", "speed_bench", "accept_length[mixed]") == 2.5
    assert theory_expected(analysis, "base", "speed_bench", "accept_length[mixed]") == 2.0  # the benchmark's
    c = {**claim("c", "mixed"), "metric": "accept_length[mixed]"}
    assert theory_verdict(c, analysis) == ("REPRODUCED", "+25.0%")


# --- the report's per-category table --------------------------------------------------------------------------------

def report_cfg():
    return {"experiment": {"arms": {"base": {}, "patched": {}}},
            "benchmarks": {"speed_bench": {"kind": "speed_bench", "speed_bench": {"categories": CATEGORIES}}}}


def category_report(theory=None):
    claims = [claim("low_up", "low_entropy"), claim("high_up", "high_entropy"), claim("mixed_up", "mixed")]
    return analyze(speed_bench_runs(), baseline="base", claims=claims, settings=SETTINGS, theory=theory)


def test_the_per_category_table_has_the_analysis_numbers():
    from specrepro.analysis.categories import category_table

    t = category_table(category_report(), "speed_bench", ["base", "patched", "absent"], configured=CATEGORIES)
    assert t["arms"] == ["base", "patched"] and t["with_theory"] is False
    assert [r["category"] for r in t["rows"]] == [*CATEGORIES, None]
    low = t["rows"][0]
    assert low["cells"]["patched"]["mean"] == pytest.approx(4.8) and low["cells"]["base"]["n"] == 5
    assert [c["id"] for c in low["claims"]] == ["low_up"] and t["rows"][-1]["claims"] == []


def test_the_report_renders_accept_length_per_category():
    """Markdown and HTML: rows the categories in the config's order, each arm's mean (95% CI) n, theory's prediction
    beside the arm theory computes for (every draft accepted, 3 steps: 4.000 in every category; flagged where the
    category's mean is outside its band), nothing beside the arm it does not, the claims' verdicts.
    base, low_entropy: 4.000, half-width t(4) 2.776 x 0.04 / sqrt(5) = 0.0497."""
    from specrepro.analysis.report import category_section
    from specrepro.util.document import Section, md_section, to_html

    theory = {("base", "speed_bench"): theory_model(1.0)}
    section = category_section(report_cfg(), category_report(theory))
    md = md_section(section)
    assert "### Accept length per category" in md and "prediction does not depend on the category" in md
    assert "| category | base | patched | claims |" in md
    assert ("| low_entropy | 4.000 (3.950 .. 4.050), n=5; theory 4.000 | 4.800 (4.740 .. 4.860), n=5 | "
            "low_up: REPRODUCED |") in md
    assert ("| high_entropy | 3.500 (3.457 .. 3.543), n=5; theory 4.000 (outside its band) | "
            "3.500 (3.457 .. 3.543), n=5 | high_up: NOT REPRODUCED |") in md
    assert ("| mixed | 3.100 (3.062 .. 3.138), n=5; theory 4.000 (outside its band) | 3.131 (2.937 .. 3.325), n=5 | "
            "mixed_up: INCONCLUSIVE |") in md
    assert md.index("| low_entropy") < md.index("| mixed") < md.index("| high_entropy") < md.index("| all categories")
    assert "| speed_bench | low_entropy | low_up text | **REPRODUCED** | patched vs base: +20.0% (95% CI" in md
    html = to_html("t", Section("Verdicts"), [section], intro=[], lede="", footer=[])
    assert '<td class="verdict v-reproduced">low_up: REPRODUCED</td>' in html
    assert '<td class="verdict v-not-reproduced">high_up: NOT REPRODUCED</td>' in html
    assert '<td>4.000 (3.950 .. 4.050), n=5<span class="note">; theory 4.000</span></td>' in html
    assert ('<td class="bad">3.100 (3.062 .. 3.138), n=5<span class="note">; theory 4.000 (outside its band)</span>'
            '</td>') in html
    assert "<td>4.800 (4.740 .. 4.860), n=5</td>" in html


def test_where_theory_computes_nothing_the_table_shows_no_number():
    from specrepro.analysis.report import category_section
    from specrepro.util.document import md_section

    md = md_section(category_section(report_cfg(), category_report()))
    assert "theory" not in md
    # theory computes no expected value for patched (a rule it cannot weigh): nothing beside patched's means
    analysis = category_report()
    analysis["theory"] = [{"arm": "patched", "benchmark": "speed_bench", "expected": None},
                          {"arm": "base", "benchmark": "speed_bench", "expected": 2.5, "agrees": False}]
    md = md_section(category_section(report_cfg(), analysis))
    assert "| low_entropy | 4.000 (3.950 .. 4.050), n=5; theory 2.500 | 4.800 (4.740 .. 4.860), n=5 |" in md
    assert "| all categories | 3.500 (3.457 .. 3.543), n=5; theory 2.500 (outside its band) | 3.800 " in md


def test_no_categories_no_section():
    from specrepro.analysis.report import category_section

    plain = analyze(pd.DataFrame(rows("base", "accept_length", 3.0, 0.01, bench="b")), baseline="base",
                    settings=SETTINGS)
    assert category_section({"experiment": {"arms": {"base": {}}}, "benchmarks": {"b": {"kind": "bench_serving"}}},
                            plain) is None


def test_mlflow_gets_a_name_it_accepts_for_a_metric_per_category():
    """MLflow refuses brackets in a metric's name: the tracking stage logs accept_length[mixed] as
    accept_length/mixed (a fake client records what it is given)."""
    from types import SimpleNamespace

    from mlflow.utils.validation import validate_param_and_metric_name

    from specrepro.stages.tracking import _log

    logged = []
    client = SimpleNamespace(get_run=lambda run_id: SimpleNamespace(data=SimpleNamespace(params={}, metrics={})),
                             log_batch=lambda run_id, metrics, params, tags: logged.extend(metrics))
    _log(client, "r", {}, {"accept_length[mixed]": 3.1, "accept_length": 3.5}, {}, 1000)
    assert {m.key: m.value for m in logged} == {"accept_length/mixed": 3.1, "accept_length": 3.5}
    assert all(validate_param_and_metric_name(m.key) for m in logged)
    assert not validate_param_and_metric_name("accept_length[mixed]")


def test_a_composed_campaign_refuses_a_category_on_a_benchmark_without_categories(tmp_path):
    """As every entry point holds a config to its claims file: the error names the file, the claim and the key."""
    import textwrap

    from specrepro.analysis.claims import check_campaign_claims
    from specrepro.core.config import ConfigError, compose

    claims = tmp_path / "claims.yaml"
    claims.write_text(textwrap.dedent("""
        claims:
          - {id: per_cat, benchmark: gsm8k, metric: accept_length, category: mixed, arm: pr_rs_on,
             against: main_rs_on, expect: increase}
    """))
    with pytest.raises(ConfigError) as info:
        check_campaign_claims(compose([f"experiment.claims={claims}"]))
    assert (f"{claims}: claim 'per_cat'.category: benchmark 'gsm8k' (kind gsm8k) has no categories"
            in str(info.value))


def test_the_whole_report_carries_the_per_category_table(tmp_path):
    """The recorded seed campaign's report, its analysis given accept length per category on gsm8k (simulated rows
    and a claim on one category): the section stands after theory's, in markdown and HTML, and every other part of
    the report (the verdicts, the claims, the noise floors) takes the claim per category."""
    import json
    import shutil

    from conftest import ROOT
    from specrepro.analysis.report import render_results

    results = tmp_path / "results"
    shutil.copytree(ROOT / "tests" / "data" / "report" / "eagle_topk_cpu", results)
    path = results / "report" / "analysis.json"
    analysis = json.loads(path.read_text())
    summary = {s["arm"]: s for s in analysis["summary"] if s["benchmark"] == "gsm8k" and s["metric"] == "accept_length"}
    for arm, s in summary.items():
        for category, shift in (("low_entropy", 1.1), ("high_entropy", 0.9)):
            analysis["summary"].append({**s, "metric": f"accept_length[{category}]", "mean": s["mean"] * shift,
                                        "ci_low": s["ci_low"] * shift, "ci_high": s["ci_high"] * shift})
    source = next(c for c in analysis["claims"] if c["id"] == "rs_costs_accept_length")
    analysis["claims"].append({**source, "id": "rs_costs_low", "text": "RS costs accept length on low_entropy",
                               "metric": "accept_length[low_entropy]", "category": "low_entropy"})
    path.write_text(json.dumps(analysis))
    out = tmp_path / "out"
    render_results(results, out, recorded=True)
    md, html = (out / "report.md").read_text(), (out / "report.html").read_text()
    assert md.index("## Accept length against theory") < md.index("## Accept length per category")
    low = summary["main_rs_off"]
    assert f"| low_entropy | {low['mean'] * 1.1:.3f} ({low['ci_low'] * 1.1:.3f} .. {low['ci_high'] * 1.1:.3f})" in md
    assert "| gsm8k | low_entropy | RS costs accept length on low_entropy | **REPRODUCED** |" in md
    assert 'id="accept-length-per-category"' in html and "<td>high_entropy</td>" in html
    # the claim's row in the verdicts summary reads in accept length's unit
    assert "RS costs accept length on low_entropy" in md.split("## ")[1]
