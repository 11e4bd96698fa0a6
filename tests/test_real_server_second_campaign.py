"""The second campaign, from its files only: "[ROCm] EAGLE: sharpen the draft proposal under rejection sampling"
(patches/sharpen_draft, conf/arm/sharpen_draft, conf/claims/sharpen_draft.yaml, conf/experiment/sharpen_draft*.yaml)
on real sglang 0.5.20 servers on this CPU, with the toy model.

sglang verifies greedily on a CPU (as on HIP), the PR's own platform class.  Its patch_check is judged by its own
checks; its accept lengths by what theory computes from the toy model's weights for its draft rules; and each of its
claims' verdicts by what that theory implies for the claim: the expectation is derived here from the theory rows,
not typed in.
"""

from __future__ import annotations

import json

import pytest
import yaml

from conftest import ROOT, specrepro

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    results = tmp_path_factory.mktemp("second_campaign")
    proc = specrepro("run", "experiment=sharpen_draft_cpu", f"results_dir={results}", timeout=3000)
    return {"results": results, "stdout": proc.stdout + proc.stderr,
            "cfg": yaml.safe_load((results / "resolved_config.yaml").read_text()),
            "analysis": json.loads((results / "report" / "analysis.json").read_text()),
            "report": (results / "report" / "report.md").read_text()}


def test_its_patch_check_is_judged_by_its_own_checks(campaign):
    verdict = json.loads((campaign["results"] / "patch_check" / "v0.5.20" / "sharpen_draft" / "verdict.json").read_text())
    assert verdict["passed"] and verdict["behavioural_checks"] == ["draft_proposal"]
    assert all(c["passed"] for c in verdict["generic"])
    [own] = verdict["results"]
    assert {c["check"] for c in own["checks"]} >= {"q_is_sharpened_softmax", "draws_follow_returned_q",
                                                  "sharper_than_unpatched", "q_is_softmax_at_T"}
    # nothing of the seed change's checks ran for it
    assert not any("top_k" in c["check"] for c in own["checks"])


def test_accept_length_agrees_with_theory_for_every_draft_rule(campaign):
    rows = {(r["arm"], r["benchmark"]): r for r in campaign["analysis"]["theory"]}
    assert set(rows) == {("main_rs_off", "gsm8k"), ("main_rs_on", "gsm8k"), ("main_rs_on", "gsm8k_sampled"),
                         ("sharpen_rs_on", "gsm8k"), ("sharpen_rs_on", "gsm8k_sampled")}
    assert all(r["agrees"] for r in rows.values()), [r for r in rows.values() if not r["agrees"]]
    # the sharpened rule sits between sampling at T and the argmax, as its weights predict (q at 0.8 T: ~0.966)
    assert rows[("main_rs_on", "gsm8k")]["expected"] < rows[("sharpen_rs_on", "gsm8k")]["expected"] < 4.0
    assert "a draw from q at 0.8 T" in rows[("sharpen_rs_on", "gsm8k")]["rule"]


def implied_verdict(claim, theory, margin=0.02):
    """What the theory's expected accept lengths say a claim's verdict should be (None: theory does not decide)."""
    if claim["expect"] == "outputs_unchanged":
        return "REPRODUCED"  # every arm commits the target's argmax under a greedy verify
    e = {arm: theory[(arm, claim["benchmark"])]["expected"] for arm in (claim["arm"], claim["against"],
                                                                        claim.get("from")) if arm}
    change = e[claim["arm"]] / e[claim["against"]] - 1
    if claim["expect"] == "increase":
        return "REPRODUCED" if change > margin else "NOT REPRODUCED"
    if claim["expect"] == "not_below":
        return "REPRODUCED" if change > -margin else "NOT REPRODUCED"
    if claim["expect"] == "restores":
        share = (e[claim["arm"]] - e[claim["from"]]) / (e[claim["against"]] - e[claim["from"]])
        return "REPRODUCED" if share > claim["fraction"] else "NOT REPRODUCED"
    return None


def test_its_verdicts_agree_with_its_theory(campaign):
    theory = {(r["arm"], r["benchmark"]): r for r in campaign["analysis"]["theory"]}
    claims = yaml.safe_load((ROOT / "conf" / "claims" / "sharpen_draft.yaml").read_text())["claims"]
    verdicts = {c["id"]: c for c in campaign["analysis"]["claims"]}
    assert set(verdicts) == {c["id"] for c in claims}
    implied = {c["id"]: implied_verdict(c, theory) for c in claims}
    # the theory decides every one of them, both ways: four hold, and "it restores the RS-off level" does not
    assert sorted(implied.values()) == ["NOT REPRODUCED"] + ["REPRODUCED"] * 4
    for cid, expected in implied.items():
        assert verdicts[cid]["verdict"] == expected, (cid, verdicts[cid])


def test_the_report_speaks_the_experiments_words(campaign):
    report = campaign["report"]
    head = report.split("### Claims")[0]
    assert "> EAGLE under rejection sampling proposes from a sharpened draft" in head
    assert "Change `sharpen_draft`: [ROCm] EAGLE: sharpen the draft proposal under rejection sampling (PR.md)" in head
    assert "**gsm8k** (greedy requests; accept length is the metric the change moves)" in head
    assert "**gsm8k_sampled** (requests that sample (T=1): on a greedy-verify platform they gain too)" in head
    assert "It restores the rejection-sampling-off level (within 2%). | **NOT REPRODUCED**" in report
    # nothing of the seed's wording
    for seed_words in ("top_k", "the fix moves", "seed", "bug"):
        assert seed_words not in report, seed_words
    assert "## patch_check: series `sharpen_draft`" in report
