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
