"""What the analysis says of a campaign before it runs: each claim's decidability, from the same noise computation
the verdicts use (specrepro.analysis.checks.decidability), fed with the published repeats and the priors.
`specrepro plan` prints it after the commands (specrepro.serving.plan_text)."""

from __future__ import annotations

from typing import Any, Dict, List

from specrepro.analysis.checks import decidability
from specrepro.analysis.claims import campaign_claims
from specrepro.core.campaign import Campaign
from specrepro.core.cost import repeats_of
from specrepro.analysis.sequential_plan import format_plan, plan_from_config


def decidability_of(campaign: Campaign) -> List[Dict[str, Any]]:
    """Per judged claim: the smallest effect this configuration can resolve."""
    cfg, exp = campaign.cfg, campaign.experiment
    n = {b: repeats_of(cfg, b) for b in cfg["benchmarks"]}
    return decidability(campaign_claims(cfg, campaign.claims_path), cfg["benchmarks"], n, exp.get("reference") or {},
                        exp.get("reference_repeats") or {}, cfg["analysis"], launches=campaign.launches)


def describe_decidability(campaign: Campaign) -> List[str]:
    launches = campaign.launches
    # a sequential design: what its last round can resolve, after max launches
    launches_text = (f"up to {launches} launches" if campaign.policy else
                     f"{launches} launch{'es' if launches > 1 else ''}")
    lines = ["## decidability: the smallest relative effect each claim's 95% interval resolves (each arm: "
             "its repeats' spread and, with one launch, the between-launch prior; Welch's degrees of freedom; "
             "distinct questions for proportions)"]
    for d in decidability_of(campaign):
        if d.get("resolvable") is None:
            lines.append(f"claim {d['id']}: {d['note']}")
            continue
        expected = f", published effect {d['expected']:+.1%}" if d.get("expected") is not None else ""
        questions = f", {d['questions']} questions" if d.get("questions") else ""
        floor = f"floor {d['floor']:.2%} from {d['floor_source']}" if d.get("floor") is not None else "no floor"
        prior = f", prior {d['prior']:.1%} between launches" if d.get("prior") and launches == 1 else ""
        lines.append(f"claim {d['id']} ({d['benchmark']} {d['metric']}, {d['expect']}): resolves "
                     f"+-{d['resolvable']:.1%} ({floor}{prior}, {d['repeats']} repeats x {launches_text}"
                     f"{questions}){expected}")
        if d.get("warning"):
            lines.append(f"WARNING: claim {d['id']}: {d['warning']}")
    return lines


# simulated campaigns behind plan's figures for a sequential design: Monte-Carlo SE of the expected GPU-hours
# about 0.1%, a few seconds for nine claims
PLAN_SIMULATIONS = 2000


def describe_sequential(campaign: Campaign, n_sim: int = PLAN_SIMULATIONS) -> List[str]:
    """A sequential design's boundaries and GPU-hours: the minimum, the maximum and the figure expected under the
    effects the published table gives (and experiment.planning_assumptions), beside the fixed design of the same
    power (specrepro.analysis.sequential_plan, by simulation through the decision rule itself)."""

    if not campaign.policy:
        return []
    claims = campaign_claims(campaign.cfg, campaign.claims_path) if campaign.claims_path else []
    if not claims:
        return [f"## sequential launches {campaign.policy.text()}: no claims, so nothing stops a round early: "
                f"every arm runs {campaign.policy.max} launches"]
    plan = plan_from_config(campaign.cfg, claims, campaign.policy,
                            assumed=campaign.experiment.get("planning_assumptions") or None, n_sim=n_sim)
    return format_plan(plan).splitlines()
