"""What theory predicts for a speculative draft: tokens committed per verify step, from the draft's proposal rule.

A rule (schema.DraftTheory, declared per arm and benchmark in `experiment.theory`) says how the draft proposes:
at `draft_temperature` times the request's temperature (0: its argmax), the first draft of a request's first verify
step at `first_draft_temperature` (that proposal comes from the prefill, often by another code path), `steps`
drafts per verify step, verified greedily (the target's argmax decides each draft: sglang on CPU, HIP and XPU, and
every all-greedy batch).  A draft is accepted with probability a(t) given the token t it follows; a verify step
that starts at t commits

    1 + a1(t) * (1 + a(f(t)) + a(f(t)) a(f(f(t))) + ...)        (`steps` drafts; f: the target's greedy chain)

tokens, and a request of n verify steps averages (first step + (n - 1) later steps) / n.  a(t) comes from a model
the pipeline builds (its logits: the draft's probability of the target's argmax at that temperature,
specrepro.stages.toy_model.acceptance) or is declared (`acceptance`: one number for every token).  A regime this cannot
compute (another verify rule, an unknown acceptance) is a config error naming what is missing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
from specrepro.util.errors import SpecreproError

# How far a measurement may sit from a deterministic prediction (every draft accepted: an argmax draft on the toy
# model), relative; sampling rules get their per-token range and 3 standard errors of the run's verify steps.
TOLERANCE = 0.02


class TheoryError(SpecreproError, ValueError):
    """A draft rule theory cannot compute; the message names the missing piece."""


@dataclass(frozen=True)
class Acceptance:
    """P(a draft is accepted) given the token it follows, over a token chain (`next`); one token for a constant."""

    per_token: np.ndarray
    next: np.ndarray
    tokens: Sequence[int]

    @classmethod
    def constant(cls, p: float) -> "Acceptance":
        return cls(np.array([float(p)]), np.array([0]), [0])


def steps_of(rule: Dict[str, Any], model: Dict[str, Any]) -> int:
    steps = rule.get("steps") or (model.get("server_args") or {}).get("speculative_num_steps")
    if not steps:
        raise TheoryError("steps: not given, and model.server_args has no speculative_num_steps")
    return int(steps)


def first_temperature(rule: Dict[str, Any]) -> float:
    first = rule.get("first_draft_temperature")
    return float(rule["draft_temperature"] if first is None else first)


def rule_problems(rule: Dict[str, Any], model: Dict[str, Any]) -> List[str]:
    """What stops theory from computing this rule for this model (each item names its key)."""
    problems = []
    for key in ("draft_temperature", "first_draft_temperature"):
        if rule.get(key) is not None and rule[key] < 0:
            problems.append(f"{key}: a multiple of the request's temperature, >= 0 (0: the argmax), got {rule[key]}")
    for key in ("acceptance", "first_acceptance"):
        if rule.get(key) is not None and not 0 <= rule[key] <= 1:
            problems.append(f"{key}: a probability in [0, 1], got {rule[key]}")
    if rule.get("verify") != "greedy":
        problems.append(f"verify: theory knows greedy verification only, got {rule.get('verify')!r}")
    try:
        steps_of(rule, model)
    except TheoryError as exc:
        problems.append(str(exc))
    if not model.get("toy"):
        if rule.get("acceptance") is None:
            problems.append(f"acceptance: model {model.get('name')} is not built by the pipeline (model.toy), so "
                            f"P(accept) of a draft at temperature {rule.get('draft_temperature')} x T cannot be "
                            f"computed from its weights; give it")
        if rule.get("first_draft_temperature") is not None and rule.get("first_acceptance") is None:
            problems.append("first_acceptance: needed with first_draft_temperature on a model the pipeline does not "
                            "build")
    return problems


def describe(rule: Dict[str, Any]) -> str:
    """The rule in words, for the report."""

    def at(t: float) -> str:
        return "the argmax" if t == 0 else "a draw from q at T" if t == 1 else f"a draw from q at {t:g} T"

    main, first = float(rule["draft_temperature"]), first_temperature(rule)
    text = f"proposes {at(main)}"
    if first != main:
        text = f"proposes {at(first)} first (after prefill), then {at(main)}"
    if rule.get("acceptance") is not None:
        text += f" (P accept {rule['acceptance']:g})"
    return text


def on_chain(a: Acceptance, chain: Acceptance) -> Acceptance:
    """`a` over `chain`'s tokens (a constant spread over every token)."""
    if len(a.per_token) == len(chain.per_token):
        return a
    if len(a.per_token) != 1:
        raise TheoryError("two acceptance tables over different token chains")
    return Acceptance(np.full(len(chain.per_token), float(a.per_token[0])), chain.next, chain.tokens)


def step_lengths(first: Acceptance, rest: Acceptance, steps: int) -> np.ndarray:
    """Expected tokens committed by one verify step starting at each token of the chain: the first draft accepted
    with first's probability, each later one with rest's, until the first rejection."""
    chain = rest if len(rest.per_token) >= len(first.per_token) else first
    first, rest = on_chain(first, chain), on_chain(rest, chain)
    out = []
    for t in chain.tokens:
        run = float(first.per_token[t])
        total, cur = 1.0 + run, int(chain.next[t])
        for _ in range(steps - 1):
            run *= float(rest.per_token[cur])
            total += run
            cur = int(chain.next[cur])
        out.append(total)
    return np.array(out)


def step_variance(a_first: float, a_rest: float, steps: int) -> float:
    """Variance of tokens committed in one verify step whose drafts are accepted until the first rejection."""
    probs, reach = [], a_first
    probs.append(1 - a_first)
    for k in range(1, steps):
        probs.append(reach * (1 - a_rest))
        reach *= a_rest
    probs.append(reach)
    mean = sum((1 + k) * p for k, p in enumerate(probs))
    return sum(((1 + k) - mean) ** 2 * p for k, p in enumerate(probs))


def predict(rule: Dict[str, Any], steps: int, first: Acceptance, rest: Acceptance,
            verify_steps: Optional[float] = None, steps_per_request: Optional[float] = None) -> Dict[str, Any]:
    """Expected accept length (tokens committed per verify step) and the band a measurement should fall in.

    `verify_steps`: the run's verify steps in all (the sampling error of its mean); `steps_per_request`: their mean
    per request, which weighs a request's first step (needed only when its first proposal follows another rule).
    """
    later = step_lengths(rest, rest, steps)
    opening = step_lengths(first, rest, steps)
    mixed = first_temperature(rule) != float(rule["draft_temperature"]) or (
        rule.get("first_acceptance") is not None and rule.get("first_acceptance") != rule.get("acceptance"))
    out: Dict[str, Any] = {"rule": describe(rule), "steps": steps}
    if mixed and not steps_per_request:
        return {**out, "expected": None, "low": None, "high": None,
                "why": "needs verify steps per request (meta_info spec_verify_ct)"}
    n = float(steps_per_request) if mixed else 1.0

    def mix(a: float, b: float) -> float:
        return (a + (n - 1) * b) / n if mixed else b

    expected = mix(float(opening.mean()), float(later.mean()))
    var = step_variance(float(rest.per_token[list(rest.tokens)].mean()), float(rest.per_token[list(rest.tokens)].mean()),
                        steps)
    se = math.sqrt(var / verify_steps) if verify_steps else 0.0
    low = min(mix(float(opening.min()), float(later.min())) - 3 * se, expected * (1 - TOLERANCE))
    high = max(mix(float(opening.max()), float(later.max())) + 3 * se, expected * (1 + TOLERANCE))
    return {**out, "expected": expected, "low": low, "high": high, "range": [float(later.min()), float(later.max())],
            "verify_steps": verify_steps, "steps_per_request": steps_per_request if mixed else None}


def acceptance_for(rule: Dict[str, Any], first: bool, tables: Dict[float, Acceptance]) -> Acceptance:
    """The acceptance the rule uses for a request's first draft (`first`) or every other one: declared, or the model's
    table at that temperature (`tables`, temperature -> Acceptance, from specrepro.stages.toy_model.acceptance)."""
    declared = rule.get("first_acceptance" if first else "acceptance")
    if first and declared is None and rule.get("first_draft_temperature") is None:
        declared = rule.get("acceptance")
    if declared is not None:
        return Acceptance.constant(declared)
    temperature = first_temperature(rule) if first else float(rule["draft_temperature"])
    if temperature not in tables:
        raise TheoryError(f"no acceptance table at draft temperature {temperature:g} (the model's weights were not read "
                          f"at it)")
    return tables[temperature]


def temperatures_needed(rules: Sequence[Dict[str, Any]]) -> List[float]:
    """Draft temperatures whose acceptance must come from the model's weights."""
    out = set()
    for rule in rules:
        if rule.get("acceptance") is None:
            out.add(float(rule["draft_temperature"]))
        if rule.get("first_acceptance") is None and rule.get("first_draft_temperature") is not None:
            out.add(float(rule["first_draft_temperature"]))
    return sorted(out)


def predictions(entries: Dict[str, Dict[str, Dict[str, Any]]], model: Dict[str, Any],
                acceptance_at) -> Dict[tuple, Dict[str, Any]]:
    """(arm, benchmark) -> what theory needs to predict there: the rule, its steps, and the acceptance of a request's
    first draft and of every other one.  `entries`: config.theory_entries; `acceptance_at(temperature)`: the model's
    Acceptance at that draft temperature (specrepro.stages.toy_model.acceptance), called once per temperature."""
    rules = [rule for per_bench in entries.values() for rule in per_bench.values()]
    tables = {t: acceptance_at(t) for t in temperatures_needed(rules)}
    return {(arm, bench): {"rule": rule, "steps": steps_of(rule, model),
                           "first": acceptance_for(rule, True, tables), "rest": acceptance_for(rule, False, tables)}
            for arm, per_bench in entries.items() for bench, rule in per_bench.items()}
