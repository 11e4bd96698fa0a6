"""What the Snakefile needs from the package: the campaign, its fan-out, and paths.

Composing is pure (no files written), so the Snakefile may call it every time
it is parsed.  The resolved config lands in Snakemake's `config` so scripts and
cluster jobs see exactly what the entry point resolved.

`fan_out` is the one description of the DAG's width: the Snakefile expands its
targets from it and `specrepro plan` counts its jobs from it (a test holds the
count equal to Snakemake's own dry run).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Dict, List

from specrepro.analysis.claims import check_campaign_claims
from specrepro.core.campaign import Campaign
from specrepro.core.config import ConfigError, check_resolved, compose
from specrepro.core.rounds import interleaved, round_launches, round_of

# Rules of each target, in DAG order; the rules not listed by fan_out run once.
TARGET_RULES = {
    "all": ["source", "patch", "patch_check", "base_image", "image", "datasets", "toy_model", "gpu_check",
            "resolved_config",
            "serve_launch", "sequential_round", "serve_bench", "collect", "report",
            "track_campaign", "all"],
    "cpu_stages": ["source", "patch", "patch_check", "cpu_report", "track_cpu_stages", "cpu_stages"],
}
# What a platform profile (profiles/rocm, profiles/cuda) selects: `--config profile_platform=NAME`.
PROFILE_PLATFORM_KEY = "profile_platform"
# ... and a model that fits that platform (`--config profile_model=NAME`), unless the overrides choose one.
PROFILE_MODEL_KEY = "profile_model"


def campaign_for_snakemake(config: Dict[str, Any]) -> Campaign:
    """`specrepro run` passes a resolved config; plain Snakemake passes overrides (and a profile's platform)."""
    profile_platform = config.pop(PROFILE_PLATFORM_KEY, None)
    profile_model = config.pop(PROFILE_MODEL_KEY, None)
    if "experiment" in config:
        config.update(check_resolved(config, "--configfile"))
        if profile_platform and config["platform"]["name"] != profile_platform:
            raise ConfigError([f"the profile selects platform {profile_platform!r} ({PROFILE_PLATFORM_KEY}), but the "
                               f"resolved config has platform {config['platform']['name']!r}: run with "
                               f"platform={profile_platform} or another profile"])
    else:
        overrides = config.pop("overrides", []) or []
        if isinstance(overrides, str):
            overrides = [overrides]
        overrides = [str(o) for o in overrides]
        chosen = {o.split("=", 1)[0].lstrip("+~") for o in overrides}
        # an experiment may choose its own platform and model (a CPU experiment): the profile's defaults yield to it
        if profile_platform and "platform" not in chosen and "experiment" not in chosen:
            overrides.insert(0, f"platform={profile_platform}")
        if profile_model and "model" not in chosen and "experiment" not in chosen:
            overrides.insert(0, f"model={profile_model}")
        config.update(compose(overrides))
    # the claims file against this experiment's arms, benchmarks and metrics, before any job
    check_campaign_claims(config)
    return Campaign(config)


def fan_out(campaign: Campaign) -> Dict[str, List[Dict[str, str]]]:
    """Wildcards of every job of each rule that runs more than once."""
    series = campaign.series_targets()
    return {
        "source": [{"ref": r} for r in sorted({p.ref for p in campaign.plans.values()})],
        "patch": [{"ref": r, "series": s} for r, s in series],
        "patch_check": [{"ref": r, "series": s} for r, s in series],
        "image": [{"arm": a} for a in campaign.arms],
        "gpu_check": [{"arm": a} for a in campaign.arms if campaign.gpu_check_runs(a)],
        # a sequential design: its first round (later rounds are decided by the checkpoint after each)
        "serve_launch": [{"arm": a, "launch": str(n)} for a, n in campaign.launch_order()]
        if campaign.launches > 1 else [],
        "sequential_round": [{"round": "1"}] if campaign.policy else [],
        "serve_bench": [{"arm": a} for a in campaign.arms],
        "toy_model": [{}] if campaign.toy_theory else [],
        "datasets": [{"dataset": d} for d in sorted({Path(p).stem for a in campaign.arms
                                                     for p in campaign.datasets_for_arm(a)}
                                                    | ({"toy_corpus"} if campaign.toy_theory else set()))],
    }


def targets(campaign: Campaign, rule: str, pattern: str) -> List[str]:
    """`pattern` (with {wildcards}) for every job of `rule`."""
    return [pattern.format(**w) for w in fan_out(campaign)[rule]]


def arm_constraint(campaign: Campaign) -> str:
    """The arms' names exactly: image/base.json is never an arm's image."""
    return "|".join(re.escape(a) for a in campaign.arms)


def job_counts(campaign: Campaign, target: str = "all") -> Dict[str, int]:
    """Jobs per rule that `target` needs on an empty results folder."""
    if target not in TARGET_RULES:
        raise ValueError(f"no job table for target {target!r}: use `specrepro plan --snakemake`")
    widths = fan_out(campaign)
    if target == "cpu_stages":
        # The CPU target checks only the sources the patch series need.
        widths["source"] = [{"ref": r} for r in sorted({w["ref"] for w in widths["patch"]})]
    return {rule: len(widths[rule]) if rule in widths else 1 for rule in TARGET_RULES[target]}


def job_table(counts: Dict[str, int]) -> str:
    rows = [("job", "count"), ("-" * 14, "-" * 7)] + [(k, str(v)) for k, v in counts.items() if v]
    rows.append(("total", str(sum(counts.values()))))
    return "\n".join(f"{a:<16}{b:>7}" for a, b in rows)


class Rounds:
    """A sequential design's rounds as the DAG sees them (Snakemake checkpoints, one per round).

    Round 1 launches every arm `min` times; round k's launches are what round k - 1's decision asks for, so each
    lookup past round 1 reads a checkpoint's output: Snakemake runs that checkpoint first and then re-evaluates the
    DAG.  A rerun reads the decisions already written, so it resumes where the sequence stopped, and `-n` lists
    the current round's launches and its checkpoint.
    """

    def __init__(self, campaign: Campaign, checkpoints):
        self.campaign, self.checkpoints = campaign, checkpoints
        self.policy, self.layout = campaign.policy, campaign.layout

    def decision(self, round_no: int) -> Dict[str, Any]:
        path = self.checkpoints.sequential_round.get(round=str(round_no)).output[0]
        return json.loads(Path(path).read_text())

    def launches(self, round_no: int) -> Dict[str, List[int]]:
        """arm -> the launch numbers round `round_no` runs."""
        if round_no == 1:
            return round_launches(self.policy, self.campaign.arms, 1)
        before = self.decision(round_no - 1)
        return {} if before["done"] else round_launches(self.policy, self.campaign.arms, round_no,
                                                        before["next"]["arms"])

    def previous_launch(self, arm: str, launch: int) -> List[str]:
        """What a launch waits for: the launch before it in its round's interleaved order; a round's first launch
        waits for the decision that asked for it."""
        round_no = round_of(self.policy, int(launch))
        order = interleaved(self.campaign.arms, self.launches(round_no))
        if order and order[0] == (arm, int(launch)) and round_no > 1:
            return [self.layout.round_decision(round_no - 1)]
        return self.campaign.previous_launch(arm, launch, order)

    def launch_records(self, round_no: int) -> List[str]:
        """Every launch record of rounds 1..round_no (a round's decision reads all the launches so far)."""
        records = []
        for k in range(1, round_no + 1):
            records += [self.layout.launch_record(a, n) for a, n in interleaved(self.campaign.arms, self.launches(k))]
        return records

    def last_round(self) -> int:
        """The round whose decision is final (every claim decided, max reached, or the budget spent)."""
        k = 1
        while not self.decision(k)["done"]:
            k += 1
        return k

    def final_decision(self) -> List[str]:
        return [self.layout.round_decision(self.last_round())]

    def arm_launches(self, arm: str) -> List[str]:
        """The launch records of an arm over every round it was needed in."""
        last = self.last_round()
        return [self.layout.launch_record(arm, n) for k in range(1, last + 1) for n in self.launches(k).get(arm, [])]
