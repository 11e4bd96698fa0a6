"""The checks that decide whether a claim is really reproduced, with known numbers.

Formats are sglang 0.5.20's: `/server_info` (entrypoints/http_server.py:
resolved ServerArgs fields + launch_command + version), decode-log lines
(scheduler_components/metrics_reporter.py) and per-request meta_info
(managers/tokenizer_manager.py).
"""

from __future__ import annotations

import math

import pandas as pd
import pytest

from specrepro.measure import accept_length as al
from specrepro.measure import effective_config as ec
from specrepro.analysis import checks
from specrepro.analysis.analyze import analyze
from specrepro.upstream.sglang_flags import load_table, requested_fields

SERVE = {"decode_log_interval": None, "enable_metrics": True}


def line(accept, rate, graph=True, running=1, ranks=" TP0"):
    return (f"[2026-12-02 10:00:00{ranks}] Decode batch, #running-req: {running}, #token: 700, token usage: 0.01, "
            f"accept len: {accept:.2f}, accept rate: {rate:.2f}, cuda graph: {graph}, "
            f"gen throughput (token/s): 1900.00, #queue-req: 0")


# --- effective configuration ---------------------------------------------------------------------------------


def test_requested_fields_use_server_args_field_names():
    table = load_table("0.5.20")
    req = requested_fields({"tensor-parallel-size": 4, "speculative-use-rejection-sampling": True, "kv_cache_dtype": "fp8_e4m3"},
                              table, SERVE)
    assert req == {"tp_size": 4, "speculative_use_rejection_sampling": True, "kv_cache_dtype": "fp8_e4m3",
                   "enable_metrics": True}


def test_a_dropped_flag_makes_the_launch_invalid_and_names_the_key():
    requested = {"tp_size": 4, "speculative_use_rejection_sampling": True, "speculative_num_draft_tokens": 6}
    info = {"tp_size": 4, "speculative_use_rejection_sampling": False, "speculative_num_draft_tokens": 6.0,
            "launch_command": "python -m sglang.launch_server ...", "version": "0.5.20"}
    check = ec.check_server_info(info, requested, "0.5.20")
    assert not check["valid"]
    assert list(check["differs"]) == ["speculative_use_rejection_sampling"]
    assert "speculative_use_rejection_sampling: requested True, the server resolved False" in check["problems"][0]
    assert ec.drafts_per_verify(check) == 5


def test_equal_values_in_other_spellings_and_the_version_pin():
    requested = {"tp_size": 4, "trust_remote_code": True, "cuda_graph_bs": [1, 2]}
    info = {"tp_size": 4.0, "trust_remote_code": "true", "cuda_graph_bs": (1, 2), "version": "0.5.21"}
    check = ec.check_server_info(info, requested, "0.5.20")
    assert check["differs"] == {}
    assert check["problems"] == ["version: the pin is sglang 0.5.20, the server reports '0.5.21'"]
    missing = ec.check_server_info({"version": "0.5.20"}, {"tp_size": 4}, "0.5.20")
    assert missing["differs"]["tp_size"]["resolved"] == ec.NOT_REPORTED


def test_an_unreadable_server_info_is_a_problem(tmp_path):
    from specrepro.stages.serve import free_port

    check = ec.probe(f"http://127.0.0.1:{free_port('127.0.0.1')}", {"tp_size": 1}, "0.5.20", timeout_s=2)
    assert not check["valid"] and "/server_info could not be read" in check["problems"][0]


def test_cuda_graph_lines_against_disable_cuda_graph():
    stats = al.parse_decode_lines([line(3.8, 0.56, graph=True), line(3.8, 0.56, graph=True, ranks=" TP1"),
                                   line(3.8, 0.56, graph=False)])
    assert stats.cuda_graph_lines == {"True": 1, "False": 1}  # rank TP0 only
    assert ec.cuda_graph_problems({"True": 3, "False": 1}, True, "gsm8k/r1")[0].startswith(
        "gsm8k/r1: disable_cuda_graph is set, yet 3 of 4 decode-log lines say `cuda graph: True`")
    assert ec.cuda_graph_problems({"True": 0, "False": 5}, False, "w") != []
    assert ec.cuda_graph_problems({"True": 2, "False": 5}, False, "w") == []
    assert ec.cuda_graph_problems({"True": 0, "False": 5}, True, "w") == []
    run = {"accept_length_sources": {"decode_log": {"cuda_graph_lines": {"True": 2, "False": 0}}}}
    validity = ec.arm_validity([{"launch_id": "abc", "problems": []}], {"gsm8k/r1": run}, cuda_graph_disabled=True)
    assert not validity["valid"] and "gsm8k/r1" in validity["problems"][0]


# --- accept length consistency -------------------------------------------------------------------------------


def test_decode_log_accept_length_against_accept_rate():
    # d = num_draft_tokens - 1 = 5: accept len = 1 + rate x 5
    good = al.decode_consistency(al.parse_decode_lines([line(3.80, 0.56), line(2.00, 0.20)]), 5)
    assert good["consistent"] and good["inconsistent_lines"] == 0
    assert good["accept_length_from_rate"] == pytest.approx((3.8 + 2.0) / 2)
    bad = al.decode_consistency(al.parse_decode_lines([line(3.80, 0.30), line(3.80, 0.30)]), 5)
    assert not bad["consistent"] and bad["inconsistent_lines"] == 2
    assert bad["relative_gap"] == pytest.approx(abs(3.8 - 2.5) / 3.8)


def test_meta_info_identities():
    # 3 verify steps accepting 5, 2, 4 drafts: 1 prefill token + 11 correct + 3 bonus = 15 tokens
    ok = {"index": 0, "completion_tokens": 15, "spec_verify_ct": 3, "spec_num_correct_drafts": 11,
          "spec_correct_drafts_histogram": [0, 0, 1, 0, 1, 1]}
    report = al.meta_info_consistency([ok], num_draft_tokens=6)
    assert report["consistent"] and report["accept_length_from_correct"] == pytest.approx(1 + 11 / 3)
    assert al.from_meta_info([ok])["accept_length"] == pytest.approx(1 + 11 / 3)
    assert al.from_meta_info([{"completion_tokens": 15, "spec_verify_ct": 3}])["accept_length"] == 14 / 3
    wrong_hist = dict(ok, spec_correct_drafts_histogram=[0, 0, 2, 0, 1, 1])
    assert al.meta_info_consistency([wrong_hist], 6)["histogram_mismatches"] == 1
    too_many_tokens = dict(ok, completion_tokens=40)
    assert al.meta_info_consistency([too_many_tokens], 6)["token_count_mismatches"] == 1
    assert al.pooled_histogram([ok, ok]) == [0, 0, 2, 0, 2, 2]


# --- greedy outputs ------------------------------------------------------------------------------------------


def outputs(arm, texts, repeat=1):
    return [{"arm": arm, "benchmark": "gsm8k", "repeat": repeat, "request": i, "output": t} for i, t in enumerate(texts)]


def test_greedy_outputs_first_divergence_and_verdicts():
    base = ["The answer is 18.", "So 3 + 4 = 7. The answer is 7.", "The answer is 3."]
    req = pd.DataFrame(outputs("main_rs_off", base) + outputs("pr_rs_on", base)
                       + outputs("main_rs_on", [base[0], "So 3 + 4 = 7. Hence the answer is 7.", base[2]]))
    claim = {"id": "c", "benchmark": "gsm8k", "arm": "pr_rs_on", "against": "main_rs_off", "expect": "outputs_unchanged"}
    same = checks.judge_outputs_unchanged(claim, req)
    assert same["verdict"] == "REPRODUCED" and same["agreement"]["identical"] == 3
    # one repeat: a difference cannot be told from the server's own nondeterminism (no A/A floor)
    differ = checks.judge_outputs_unchanged(dict(claim, arm="main_rs_on"), req)
    assert differ["verdict"] == "INCONCLUSIVE" and differ["differing_questions"] == [1]
    assert "no A/A floor" in differ["detail"] and differ["agreement"]["flagged"] is None
    d = differ["agreement"]["differing"][0]
    assert d["first_difference_at"] == len("So 3 + 4 = 7. ")
    assert differ["agreement"]["match_rate"] == pytest.approx(2 / 3)
    assert checks.judge_outputs_unchanged(claim, None)["verdict"] == "INCONCLUSIVE"


def test_greedy_outputs_against_the_baselines_own_floor():
    """40 questions, two repeats: the baseline agrees with itself on 39 (A/A 1 of 40); an arm that differs on 12
    questions in both repeats is beyond that floor, one that differs as often as the baseline itself is not."""
    base = [f"The answer is {q}." for q in range(40)]
    base_r2 = [t if q != 5 else "The answer is five." for q, t in enumerate(base)]
    changed = [t if q % 10 not in (1, 4, 7) else t + " Or so." for q, t in enumerate(base)]
    req = pd.DataFrame(outputs("main_rs_off", base) + outputs("main_rs_off", base_r2, repeat=2)
                       + outputs("main_rs_on", changed) + outputs("main_rs_on", changed, repeat=2)
                       + outputs("pr_rs_on", base) + outputs("pr_rs_on", base_r2, repeat=2))
    claim = {"id": "c", "benchmark": "gsm8k", "arm": "main_rs_on", "against": "main_rs_off", "expect": "outputs_unchanged"}
    beyond = checks.judge_outputs_unchanged(claim, req)
    agreement = beyond["agreement"]
    assert (agreement["aa_differing"], agreement["aa_pairs"]) == (1, 40)
    assert beyond["verdict"] == "NOT REPRODUCED" and agreement["flagged"] is True
    # 12 changed questions, and question 5 in repeat 2, where the baseline itself flipped
    assert len(beyond["differing_questions"]) == 13 and "beyond the floor" in beyond["detail"]
    within = checks.judge_outputs_unchanged(dict(claim, arm="pr_rs_on"), req)
    assert within["verdict"] == "REPRODUCED" and within["agreement"]["flagged"] is False


def test_invalid_arm_makes_its_claims_inconclusive_with_the_reason():
    runs = pd.DataFrame([{"arm": a, "benchmark": "gsm8k", "repeat": r, "metric": "accept_length", "value": v}
                         for a, v in (("main_rs_off", 3.78), ("main_rs_on", 3.08)) for r in (1, 2, 3)])
    claim = {"id": "rs_costs", "benchmark": "gsm8k", "metric": "accept_length", "arm": "main_rs_on",
             "against": "main_rs_off", "expect": "decrease"}
    settings = {"launch_noise_prior": {"accept_length": 0.005}}
    judged = analyze(runs, baseline="main_rs_off", claims=[claim], settings=settings)["claims"][0]
    assert judged["verdict"] == "REPRODUCED"
    invalid = {"main_rs_on": ["launch x: speculative_use_rejection_sampling: requested True, the server resolved False"]}
    judged = analyze(runs, baseline="main_rs_off", claims=[claim], invalid_arms=invalid, settings=settings)["claims"][0]
    assert judged["verdict"] == "INCONCLUSIVE" and judged["measured_verdict"] == "REPRODUCED"
    assert "speculative_use_rejection_sampling" in judged["detail"]


# --- acceptance histograms, speedup attribution --------------------------------------------------------------


def test_acceptance_histograms_pool_runs():
    table = pd.DataFrame([("a", "gsm8k", 1, 0, 10), ("a", "gsm8k", 1, 5, 30), ("a", "gsm8k", 2, 5, 60)],
                         columns=["arm", "benchmark", "repeat", "drafts_accepted", "verify_steps"])
    (h,) = checks.acceptance_histograms(table)
    assert h["verify_steps"] == [10, 0, 0, 0, 0, 90] and h["total"] == 100
    assert h["mean_tokens_per_verify"] == pytest.approx(1 + 5 * 0.9)


def test_speedup_attribution_splits_accept_length_from_step_rate():
    rows = []
    # the seed's RS-on loss: tok/s 310.2 -> 285.7; accept length 3.778 -> 3.080 (GSM8K's, as on one server)
    for arm, tput, accept in (("main_rs_off", 310.2, 3.778), ("main_rs_on", 285.7, 3.080), ("slow_kernel", 279.2, 3.778)):
        rows += [{"arm": arm, "benchmark": "bench_serving", "repeat": 1, "metric": "output_throughput", "value": tput},
                 {"arm": arm, "benchmark": "bench_serving", "repeat": 1, "metric": "accept_length", "value": accept}]
    by_arm = {r["arm"]: r for r in checks.speedup_attribution(pd.DataFrame(rows), "main_rs_off")}
    rs = by_arm["main_rs_on"]
    assert rs["throughput_change"] == pytest.approx(285.7 / 310.2 - 1)
    assert rs["accept_length_part"] == pytest.approx(3.080 / 3.778 - 1)
    # the parts multiply back to the whole
    assert (1 + rs["accept_length_part"]) * (1 + rs["step_rate_part"]) == pytest.approx(285.7 / 310.2)
    slow = by_arm["slow_kernel"]
    assert slow["accept_length_part"] == pytest.approx(0) and slow["step_rate_part"] == pytest.approx(279.2 / 310.2 - 1)


# --- decidability --------------------------------------------------------------------------------------------


def test_decidability_with_the_seeds_published_repeats():
    claims = [{"id": "acc", "benchmark": "gsm8k", "metric": "accuracy", "arm": "pr", "against": "main",
               "expect": "equal"},
              {"id": "tput", "benchmark": "bench_serving", "metric": "output_throughput", "arm": "pr",
               "against": "main", "expect": "increase"}]
    reference = {"pr": {"gsm8k": {"accuracy": 0.94}, "bench_serving": {"output_throughput": 303.7}},
                 "main": {"gsm8k": {"accuracy": 0.93}, "bench_serving": {"output_throughput": 285.7}}}
    published = {"gsm8k": {"accuracy": [0.940, 0.945, 0.920]},
                 "bench_serving": {"output_throughput": [310.2, 312.9, 309.7]}}
    benchmarks = {"gsm8k": {"kind": "gsm8k", "gsm8k": {"num_questions": 200}}, "bench_serving": {"kind": "bench_serving"}}
    no_prior = {"launch_noise_prior": {}, "within_fallback": {}, "default_margin": 0.02}
    acc, tput = checks.decidability(claims, benchmarks, {"gsm8k": 3, "bench_serving": 3}, reference, published,
                                    no_prior)
    # no prior: each arm's 3 repeats, the published CV with df 2 each; Welch df = 4 for two equal arms, less the one
    # the estimated variance ratio costs (analysis/noise.py): t(0.975, 3) = 3.1824
    cv = pd.Series([310.2, 312.9, 309.7]).std() / pd.Series([310.2, 312.9, 309.7]).mean()
    assert tput["resolvable"] == pytest.approx(3.1824 * cv * math.sqrt(2 / 3), rel=1e-3)
    assert tput["warning"] is None and tput["expected"] == pytest.approx(303.7 / 285.7 - 1)
    assert acc["resolvable"] > 0.05 and "cannot come out REPRODUCED" in acc["warning"]
    # one launch per arm with a 1.5% between-launch prior: the prior dominates, t near 1.96
    prior = dict(no_prior, launch_noise_prior={"output_throughput": 0.015})
    _, tput1 = checks.decidability(claims, benchmarks, {"gsm8k": 3, "bench_serving": 3}, reference, published, prior)
    assert tput1["resolvable"] == pytest.approx(1.96 * math.sqrt(2 * (0.015 ** 2 + cv ** 2 / 3)), rel=0.01)
    # three launches: the prior is what each launch mean carries, and the launch means are the replicates
    _, tput3 = checks.decidability(claims, benchmarks, {"gsm8k": 3, "bench_serving": 3}, reference, published, prior,
                                   launches=3)
    assert tput3["resolvable"] == pytest.approx(3.1824 * math.sqrt(2 * (0.015 ** 2 + cv ** 2 / 3) / 3), rel=1e-3)


# --- launches ------------------------------------------------------------------------------------------------


def test_launch_variance_separates_within_from_between():
    # two launches of 3 repeats: within-launch sd 1 (values m-1, m, m+1), launch means 100 and 104
    values = {1: [99.0, 100.0, 101.0], 2: [103.0, 104.0, 105.0]}
    runs = pd.DataFrame([{"arm": "a", "benchmark": "b", "metric": "tput", "launch": l, "repeat": r + 1, "value": v}
                         for l, vs in values.items() for r, v in enumerate(vs)])
    (v,) = checks.launch_variance(runs)
    assert v["within_launch_cv"] == pytest.approx(1 / 102)
    # var(means) = 8, less within/n = 1/3
    assert v["between_launch_cv"] == pytest.approx(math.sqrt(8 - 1 / 3) / 102)
    # verdicts count the launch means (100 and 104 here): n = 2 per arm
    runs_b = runs.assign(arm="b_arm", value=runs["value"] * 1.2)
    out = analyze(pd.concat([runs, runs_b]), baseline="a")
    assert out["replicates"] == "launch means"
    assert {s["n"] for s in out["summary"]} == {6}
    assert out["noise_floors"][0]["df"] == 8.0  # the within-launch floor: (3 repeats - 1) x 2 launches x 2 arms
    (delta,) = out["deltas"]
    assert delta["noise"] == {"arm": ["measured over 2 launches"], "base": ["measured over 2 launches"]}
    # each arm's mean: var(launch means) / 2 with df 1; Welch df of two such arms: 2 at equal relative spread
    assert delta["df"] == pytest.approx(2.0)


def test_launch_order_interleaves(tmp_path):
    from specrepro.core.campaign import Campaign
    from specrepro.core.config import compose

    cfg = compose([f"results_dir={tmp_path}", "experiment.launches=3"])
    campaign = Campaign(cfg)
    order = campaign.launch_order()
    arms = campaign.arms
    assert order[: len(arms)] == [(a, 1) for a in arms]
    assert order[len(arms): 2 * len(arms)] == [(a, 2) for a in reversed(arms)]
    assert campaign.previous_launch(arms[-1], 2) == [str(campaign.plan(arms[-1]).arm_dir / "launches" / "1.json")]
    assert campaign.previous_launch(arms[0], 1) == []
    runs = campaign.plan(arms[0]).runs
    assert {r.launch for r in runs} == {1, 2, 3} and runs[0].stem.startswith("launch1/")


def test_plan_prints_what_each_seed_claim_can_resolve():
    from conftest import specrepro

    out = specrepro("plan").stdout
    assert "## decidability: the smallest relative effect each claim's 95% interval resolves" in out
    assert "claim rs_costs_throughput (bench_serving output_throughput, decrease): resolves +-4.3% (floor 0.55% from " \
           "published repeats, prior 1.5% between launches, 3 repeats x 1 launch), published effect -7.9%" in out
    assert "WARNING: claim sampled_workload_unaffected: the interval half-width (2.4%) is not below the claim's 2% " \
           "margin" in out
    assert "## launches: 1 per arm, 5 in all" in out


def test_the_output_section_renders_every_floor_state():
    from specrepro.util.document import Section, md_section, to_html
    from specrepro.analysis.report import output_agreement_section

    base = {"benchmark": "gsm8k", "arm": "a", "against": "b", "identical": 3, "pairs": 3, "match_rate": 1.0,
            "differing": [], "aa_pairs": 0, "aa_differing": 0, "p_beyond_floor": None}
    rows = [dict(base, flagged=False), dict(base, flagged=None, identical=2, match_rate=2 / 3),
            dict(base, flagged=True, aa_pairs=40, aa_differing=1, p_beyond_floor=0.001)]
    section = output_agreement_section({"output_agreement": rows})
    text = md_section(section)
    assert "| no |" in text and "| cannot tell |" in text and "| **yes** (p 0.001) |" in text
    # the same cells in the HTML report, coloured by class
    html = to_html("t", Section("Verdicts"), [section], intro=[], lede="", footer=[])
    assert '<td class="bad"><strong>yes</strong><span class="note"> (p 0.001)</span></td>' in html
    assert '<td class="good">no</td>' in html and "<td>cannot tell</td>" in html
