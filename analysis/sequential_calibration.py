"""The sequential rule's calibration where the noise is odd (issue #39): simulated campaigns whose truth is known,
vectorised over campaigns through `sequential_plan.simulate_rule` (the `rule_step` that `decide_sequential`
applies, on `analyze`'s statistics in array form).  tests/test_sequential_noise.py runs every cell cheaply;
benchmarks/sequential_calibration.py runs them with >= 20,000 campaigns a cell for the README's table.

A campaign is one claim between two arms; each arm's launch means are mu (1 + launch effect)(1 + mean of 3 repeat
errors, SD 0.3%), launch effects N(0, SD^2) with its own SD per arm.  A deterministic arm (SD 0: greedy decoding of
a fixed model) repeats one number, as a real server does up to float rounding: its launch means differ by about
1e-16 relative, the rounding that `noise.identical` must see through.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

from specrepro.analysis import sequential_plan as sp
from specrepro.analysis.sequential import CONTRA, INCONC, REPRO, Policy

METRIC, BASE_MEAN, REPEAT_SD, REPEATS = "output_throughput", 300.0, 0.003, 3
# float rounding of a deterministic server's launch means (relative): sums of identical per-request numbers in
# another order differ in their last bits
ROUNDING = 1e-16


@dataclass(frozen=True)
class Cell:
    """One scenario: the arm's true effect, each arm's launch SD (0: deterministic), the claim, the metric's prior."""
    name: str
    effect: float
    arm_sd: float
    base_sd: float
    expect: str = "decrease"
    margin: float = 0.02
    prior: Optional[float] = None
    policy: Mapping = field(default_factory=lambda: {"min": 2, "max": 5})

    @property
    def null(self) -> bool:
        """The truth makes the claim false (so REPRODUCED is an error)."""
        return self.effect >= 0 if self.expect == "decrease" else abs(self.effect) >= self.margin


# The null cells the issue names: false REPRODUCED <= 3% (nominal 2.5%), repeated-interval coverage >= 94%.
NULL_CELLS = (
    Cell("normal: launch SD 2% both arms", 0.0, 0.02, 0.02),
    Cell("deterministic base vs noisy arm (SD 4%), throughput prior 1.5%", 0.0, 0.04, 0.0, prior=0.015),
    Cell("deterministic base vs noisy arm (SD 2%), accept-length prior 0.5%", 0.0, 0.02, 0.0, prior=0.005),
    Cell("noisy base (SD 2%) vs deterministic arm, accept-length prior 0.5%", 0.0, 0.0, 0.02, prior=0.005),
    Cell("SD ratio 3: base 6%, arm 2%", 0.0, 0.02, 0.06),
    Cell("SD ratio 3: base 1%, arm 3%", 0.0, 0.03, 0.01),
    Cell("SD ratio 3 at 1-2 df a look ({min 2, max 3}): base 6%, arm 2%", 0.0, 0.02, 0.06,
         policy={"min": 2, "max": 3}),
    Cell("equal within 2%, truth on the +2% margin (launch SD 0.5%)", 0.02, 0.005, 0.005, expect="equal"),
)
POWER_CELL = Cell("true -8%, launch SD 2% both arms", -0.08, 0.02, 0.02)


def launch_means(cell: Cell, n: int, rng: np.random.Generator, launches: int) -> Dict[Tuple[str, str, str], np.ndarray]:
    """(arm, benchmark, metric) -> (n, launches) launch means for the cell's two arms."""
    out = {}
    for arm, mu, sd in (("base", BASE_MEAN, cell.base_sd), ("arm", BASE_MEAN * (1 + cell.effect), cell.arm_sd)):
        if sd:
            shift = 1 + rng.normal(0, sd, (n, launches))
            repeat = 1 + rng.normal(0, REPEAT_SD / math.sqrt(REPEATS), (n, launches))
            out[(arm, "c", METRIC)] = mu * shift * repeat
        else:
            out[(arm, "c", METRIC)] = mu * (1 + rng.normal(0, ROUNDING, (n, launches)))
    return out


def claim_of(cell: Cell) -> Dict:
    return {"id": "c", "benchmark": "c", "metric": METRIC, "arm": "arm", "against": "base", "expect": cell.expect,
            "margin": cell.margin}


def se(p: float, n: int) -> float:
    """The Monte-Carlo standard error of a rate p measured on n campaigns."""
    return math.sqrt(max(p * (1 - p), 0.0) / n)


def run_cell(cell: Cell, n: int, seed: int, schedule: Optional[Sequence[int]] = None,
             series: Optional[Mapping] = None) -> Dict[str, float]:
    """REPRODUCED / NOT REPRODUCED / INCONCLUSIVE rates, the repeated interval's coverage of the truth at the round
    whose numbers decided, launches per arm and the share decided in round 1, each rate with its MC SE."""
    policy = Policy.parse(cell.policy)
    sched = list(schedule or policy.schedule)
    n_max = sched[-1] if schedule else policy.max
    series = series or launch_means(cell, n, np.random.default_rng(seed), max(sched))
    priors = {METRIC: cell.prior} if cell.prior else {}
    sim = sp.simulate_rule([claim_of(cell)], series, sched, n_max, holm=False, spending=policy.spending,
                           rho=policy.rho, margin=cell.margin, priors=priors)
    status, k = sim["status"][:, 0], sim["decided_at"][:, 0]
    lo, hi = sp.interval_at_decision(sim)
    truth = cell.effect
    covered = (lo[:, 0] <= truth) & (truth <= hi[:, 0])
    launches = np.asarray(sched)[k]
    out = {"n": n, "reproduced": float(np.mean(status == REPRO)), "not_reproduced": float(np.mean(status == CONTRA)),
           "inconclusive": float(np.mean(status == INCONC)), "coverage": float(np.mean(covered)),
           "launches": float(launches.mean()), "launches_se": float(launches.std() / math.sqrt(n)),
           "round1": float(np.mean((k == 0) & (status != INCONC)))}
    for key in ("reproduced", "not_reproduced", "coverage", "round1"):
        out[key + "_se"] = se(out[key], n)
    return out


def fixed_powers(cell: Cell, n: int, seed: int, sizes: Sequence[int]) -> Dict[int, float]:
    """P(REPRODUCED) of the fixed designs of `sizes` launches per arm on the same campaigns as run_cell(cell, n,
    seed)."""
    series = launch_means(cell, n, np.random.default_rng(seed), max(max(sizes), Policy.parse(cell.policy).max))
    return {k: run_cell(cell, n, seed, [k], series)["reproduced"] for k in sizes}


def efficiency(cell: Cell, n: int, seed: int, sizes: Sequence[int] = range(2, 9)) -> Dict[str, object]:
    """The sequential design's launches per arm against the cheapest fixed design of at least its power (and the
    next cheaper one, with the power it gives up), on the same simulated campaigns."""
    policy = Policy.parse(cell.policy)
    series = launch_means(cell, n, np.random.default_rng(seed), max(max(sizes), policy.max))
    seq = run_cell(cell, n, seed, series=series)
    powers = {k: run_cell(cell, n, seed, [k], series)["reproduced"] for k in sizes}
    at_least = next((k for k in sorted(powers) if powers[k] >= seq["reproduced"]), None)
    below = max((k for k in powers if k < (at_least or 0)), default=None)
    return {"sequential": seq, "fixed": powers, "cheapest_at_least": at_least,
            "saving": 1 - seq["launches"] / at_least if at_least else None,
            "below": below, "saving_below": 1 - seq["launches"] / below if below else None}
