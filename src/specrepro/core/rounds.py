"""`experiment.launches`: a fixed number of server launches per arm, or a sequential design -- rounds of launches
until every claim is decided (issue #33).  The design as configured and the order its launches run in; the decision
after each round is the analysis's (specrepro.analysis.sequential), the DAG's rounds are Snakemake checkpoints
(workflow/rules/serve_bench.smk).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

SPENDING = {"obrien_fleming": "Lan-DeMets O'Brien-Fleming-type", "pocock": "Lan-DeMets Pocock-type",
            "power": "Kim-DeMets power-family"}


@dataclass(frozen=True)
class Policy:
    """`experiment.launches` as a sequential design: launches per arm after round 1 (min), the most (max), how many
    each later round adds (step) and the alpha-spending function (obrien_fleming | pocock | power, with rho)."""
    min: int
    max: int
    step: int = 1
    spending: str = "obrien_fleming"
    rho: float = 3.0

    def __post_init__(self):
        if self.min < 2:
            raise ValueError(f"experiment.launches.min = {self.min}: a sequential design needs 2+ launches per arm "
                             f"in round 1 (the launch means are the replicates; one launch leans on the prior, "
                             f"whose error no boundary controls)")
        if self.max < self.min or self.step < 1:
            raise ValueError(f"experiment.launches: need min <= max and step >= 1, got {self}")
        if self.spending not in SPENDING:
            raise ValueError(f"experiment.launches.spending = {self.spending!r}: one of {sorted(SPENDING)}")
        if not self.rho > 0:  # alpha t^0 = alpha: the whole 2.5% at the first look, nothing left for the others
            raise ValueError(f"experiment.launches.rho = {self.rho:g}: the power family's exponent must be > 0")

    @property
    def schedule(self) -> List[int]:
        """Launches per still-needed arm after each round: n_1 = min, ..., max (the last round tops up to max)."""
        out = list(range(self.min, self.max + 1, self.step))
        return out if out[-1] == self.max else out + [self.max]

    @property
    def rounds(self) -> int:
        return len(self.schedule)

    def as_dict(self) -> Dict[str, Any]:
        d = {"min": self.min, "max": self.max, "step": self.step, "spending": self.spending}
        return {**d, "rho": self.rho} if self.spending == "power" else d

    def text(self) -> str:
        extra = f", step: {self.step}" if self.step != 1 else ""
        return f"{{min: {self.min}, max: {self.max}{extra}, spending: {self.spending}}}"

    @classmethod
    def parse(cls, value: Any) -> "Policy":
        if isinstance(value, Policy):
            return value
        if isinstance(value, Mapping):
            unknown = set(value) - {"min", "max", "step", "spending", "rho"}
            if unknown:
                raise ValueError(f"experiment.launches: unknown keys {sorted(unknown)} (min, max, step, spending, rho)")
            rho = value.get("rho")
            return cls(int(value["min"]), int(value["max"]), int(value.get("step") or 1),
                       str(value.get("spending") or "obrien_fleming"), 3.0 if rho is None else float(rho))
        raise ValueError(f"experiment.launches = {value!r}: an int (fixed) or {{min, max}} (sequential)")


def policy_of(launches: Any) -> Optional[Policy]:
    """`experiment.launches` as configured: None for an int (the fixed design `analyze` judges), else the Policy."""
    if launches is None or isinstance(launches, numbers.Integral):  # a numpy int from a table too
        return None
    if hasattr(launches, "items") and not isinstance(launches, Mapping):  # an OmegaConf DictConfig
        launches = dict(launches.items())
    if isinstance(launches, str) and launches.strip().isdigit():
        return None
    return Policy.parse(launches)


def max_launches(launches: Any) -> int:
    """The most launches an arm can get: the fixed number, or the design's max."""
    policy = policy_of(launches)
    return policy.max if policy else int(launches or 1)


def round_of(policy: Policy, launch: int) -> int:
    """The round (1-based) in which an arm's `launch`-th launch runs."""
    for k, n in enumerate(policy.schedule, 1):
        if launch <= n:
            return k
    raise ValueError(f"launch {launch} is beyond the design's max ({policy.max})")


def interleaved(arms: Sequence[str], numbers: Mapping[str, Sequence[int]]) -> List[Tuple[str, int]]:
    """(arm, launch) in the order they run: the arms forward on odd launch numbers, backward on even ones
    (A B C C B A ...), each arm only at its own numbers.

    Interleaving spreads slow drift (clocks, thermals, other tenants) over every arm instead of loading it onto
    whichever arm ran last.
    """
    order = []
    for n in sorted({int(x) for ns in numbers.values() for x in ns}):
        for arm in (arms if n % 2 else list(reversed(arms))):
            if n in {int(x) for x in numbers.get(arm, ())}:
                order.append((arm, n))
    return order


def round_launches(policy: Policy, arms: Sequence[str], round_no: int,
                   next_arms: Optional[Dict[str, List[int]]] = None) -> Dict[str, List[int]]:
    """The launches of round `round_no`: round 1 launches every arm `min` times; a later round the launches the
    previous round's decision asks for (its `next.arms`)."""
    if round_no == 1:
        return {a: list(range(1, policy.min + 1)) for a in arms}
    return {a: [int(n) for n in ns] for a, ns in (next_arms or {}).items() if ns}
