"""What a campaign costs before it runs: requests, server time and GPU-hours, from the planning figures in `serve`.

Pure functions of the resolved config: `config.validate` holds a campaign to `experiment.max_gpu_hours` with them
and `specrepro plan` prints them.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Optional

from specrepro.benchmarks import kind_of, settings_of
from specrepro.core.rounds import max_launches


def repeats_of(cfg: Dict[str, Any], benchmark: str) -> int:
    own = cfg["benchmarks"][benchmark].get("repeats")
    return own if own is not None else cfg["experiment"]["repeats"]


def run_cost(bench: Dict[str, Any], serve: Dict[str, Any]) -> Dict[str, float]:
    """One run of a benchmark: its requests, and the seconds it takes at the planning TPOT (each request emits
    its token budget; `concurrency` requests at a time, each extra one slowing a step by expected_tpot_growth)."""
    figures = kind_of(bench).cost_figures(settings_of(bench))
    requests, tokens = figures.requests, figures.tokens
    conc = max(1, min(figures.concurrency, requests))
    step_s = serve["expected_tpot_ms"] / 1000 * (1 + serve["expected_tpot_growth"] * (conc - 1))
    return {"requests": requests, "seconds": math.ceil(requests / conc) * tokens * step_s}


def campaign_cost(cfg: Dict[str, Any], launches: Optional[int] = None) -> Dict[str, Any]:
    """The whole campaign's planning cost: launches, requests, seconds and GPU-hours (every launch holds the model's
    GPUs while it loads and while its runs measure).  `launches` per arm: default the most the experiment can run
    (a sequential design's max)."""
    exp, serve = cfg["experiment"], cfg["serve"]
    launches = int(launches or max_launches(exp.get("launches")))
    requests, seconds = 0, 0.0
    for arm in exp["arms"].values():
        for b in arm["benchmarks"]:
            one = run_cost(cfg["benchmarks"][b], serve)
            requests += one["requests"] * repeats_of(cfg, b) * launches
            seconds += one["seconds"] * repeats_of(cfg, b) * launches
    n_launches = len(exp["arms"]) * launches
    seconds += n_launches * float(serve["expected_load_s"])
    gpus = int(cfg["model"]["gpus"])
    return {"launches": n_launches, "requests": requests, "seconds": seconds, "gpus": gpus,
            "gpu_hours": seconds * gpus / 3600}
