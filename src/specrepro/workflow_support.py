"""What the Snakefile needs from the package: the campaign, targets and paths.

Composing is pure (no files written), so the Snakefile may call it every time
it is parsed.  The resolved config lands in Snakemake's `config` so scripts and
cluster jobs see exactly what the entry point resolved.
"""

from __future__ import annotations

from typing import Any, Dict, List

from specrepro.campaign import Campaign
from specrepro.config import check_resolved, compose


def campaign_for_snakemake(config: Dict[str, Any]) -> Campaign:
    """`specrepro run` passes a resolved config; plain Snakemake passes overrides."""
    if "experiment" in config:
        config.update(check_resolved(config, "--configfile"))
    else:
        overrides = config.pop("overrides", []) or []
        if isinstance(overrides, str):
            overrides = [overrides]
        config.update(compose([str(o) for o in overrides]))
    return Campaign(config)


def series_targets(campaign: Campaign) -> List[tuple]:
    """(ref, series) pairs that some arm uses."""
    return sorted({(campaign.ref_of(a), s) for a in campaign.arms if (s := campaign.series_of(a))})


def arm_input_tree(campaign: Campaign, arm: str) -> str:
    """The manifest of the sglang tree an arm serves: patched or pristine."""
    r = campaign.results_dir
    series = campaign.series_of(arm)
    ref = campaign.ref_of(arm)
    if series:
        return str(r / "patch" / ref / series / "manifest.json")
    return str(r / "source" / ref / "manifest.json")


def job_counts(campaign: Campaign, target: str = "all") -> Dict[str, int]:
    """Jobs per rule that `target` needs on an empty results folder.

    The fan-out the Snakefile declares (one source per sglang ref, one patch
    and patch_check per (ref, series), one image and one serve_bench per
    arm); tests hold it equal to Snakemake's own dry run.
    """
    series = series_targets(campaign)
    if target == "cpu_stages":
        return {"source": len({ref for ref, _ in series}), "patch": len(series), "patch_check": len(series),
                "cpu_report": 1, "track_cpu_stages": 1, "cpu_stages": 1}
    if target != "all":
        raise ValueError(f"no job table for target {target!r}: use `specrepro plan --snakemake`")
    arms = len(campaign.arms)
    return {"source": len({campaign.ref_of(a) for a in campaign.arms}), "patch": len(series),
            "patch_check": len(series), "image": arms, "serve_bench": arms, "collect": 1, "report": 1,
            "track_campaign": 1, "all": 1}


def job_table(counts: Dict[str, int]) -> str:
    rows = [("job", "count"), ("-" * 14, "-" * 7)] + [(k, str(v)) for k, v in counts.items() if v]
    rows.append(("total", str(sum(counts.values()))))
    return "\n".join(f"{a:<16}{b:>7}" for a, b in rows)
