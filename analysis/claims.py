"""The claims file: what a campaign sets out to reproduce, checked before any job runs.

    claims:
      - id: patched_raises_accept_length   # unique
        text: ...                          # what the PR says, shown in the report
        benchmark: gsm8k                   # a benchmark of the experiment
        metric: accept_length              # a metric that benchmark's kind records
        expect: increase                   # decrease | increase | equal | not_below | zero | outputs_unchanged
        arm: patched                       # not for `zero`
        against: baseline                  # not for `zero`
        arms: [..]                         # `zero` only; default every arm that runs the benchmark
        margin: 0.02                       # optional: relative band for equal / not_below
        from: broken                       # `restores` only: the broken level; `against` is the level to reach
        fraction: 0.9                      # `restores` only: the share of the gap the arm must close
        category: low_entropy              # optional: judge the metric over one category's prompts only
                                           #   (accept_length[low_entropy]); the benchmark must have categories
        predicted:                         # optional: what the pinned code is known to give, and why
          verdict: NOT REPRODUCED          #   (the PR describes its own base); shown beside the verdict
          because: ...

`outputs_unchanged` takes no metric: per question of a temperature-0 GSM8K
benchmark, `arm`'s text must equal `against`'s (analysis/checks.py).

A typo in an arm, a benchmark, a metric, a category or `expect` is an error naming
the file, the claim and the key, raised by `plan`, `run` and the Snakefile alike.
A benchmark's categories are its config's `categories` list (its kind's settings
block, e.g. `speed_bench.categories`, or the benchmark's own).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional

import yaml

from specrepro.util.metric_names import CATEGORY, category_metric, split_category_metric
from specrepro.benchmarks import greedy as greedy_benchmark, kinds
from specrepro.core.config import CONF_DIR, ConfigError
from specrepro.core.sweep import claims_per_level

EXPECTATIONS = ("decrease", "increase", "equal", "not_below", "restores", "zero", "outputs_unchanged")
ACCEPT_LENGTH_METRICS = ("accept_length", "accept_length_decode_log", "accept_length_meta_info",
                         "accept_length_metrics")
# What each benchmark kind records per run (its kind's record_metrics, and every run's accept length).
KIND_METRICS = {name: (*kind.record_metrics, *ACCEPT_LENGTH_METRICS) for name, kind in kinds().items()}
CLAIM_KEYS = {"id", "text", "benchmark", "metric", "expect", "arm", "against", "arms", "margin", "predicted", "from",
              "fraction", "category",
              # a claim's instance at one level of a sweep (specrepro.core.sweep.claims_per_level)
              "base_id", "levels"}
VERDICTS = ("REPRODUCED", "NOT REPRODUCED", "INCONCLUSIVE")


class ClaimsError(ValueError):
    def __init__(self, problems: List[str]):
        self.problems = problems
        super().__init__("\n".join(problems))


def load_claims(path: Optional[Path]) -> List[Dict[str, Any]]:
    """The claims of a claims file ([] for no file); the file's shape only, not its names."""
    if not path:
        return []
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ClaimsError([f"{path}: cannot read the claims file ({exc})"]) from exc
    if not isinstance(data, dict) or not isinstance(data.get("claims"), list):
        raise ClaimsError([f"{path}: expected a mapping with a `claims:` list"])
    return data["claims"]


def claim_problems(claims: List[Any], source: str, arms: List[str], benchmark_kinds: Dict[str, str],
                   arm_benchmarks: Dict[str, List[str]], greedy_benchmarks=None,
                   categories: Optional[Dict[str, Optional[List[str]]]] = None) -> List[str]:
    """Everything wrong with `claims` against an experiment's arms, benchmarks, metrics and (`categories`:
    benchmark -> its categories, None or absent: it has none) the benchmarks' categories."""
    problems: List[str] = []
    seen = set()
    for i, claim in enumerate(claims):
        where = f"{source}: claims[{i}]"
        if not isinstance(claim, dict):
            problems.append(f"{where}: expected a mapping, got {claim!r}")
            continue
        cid = claim.get("id")
        where = f"{source}: claim {cid or i!r}"
        if not cid:
            problems.append(f"{where}: `id` is required")
        elif cid in seen:
            problems.append(f"{where}: duplicate id")
        seen.add(cid)
        unknown = sorted(set(claim) - CLAIM_KEYS)
        if unknown:
            problems.append(f"{where}: unknown keys {unknown} (known: {sorted(CLAIM_KEYS)})")
        expect = claim.get("expect")
        if expect not in EXPECTATIONS:
            problems.append(f"{where}.expect: {expect!r} is not one of {list(EXPECTATIONS)}")
        bench = claim.get("benchmark")
        if bench not in benchmark_kinds:
            problems.append(f"{where}.benchmark: {bench!r} is not a benchmark of this experiment "
                            f"({', '.join(benchmark_kinds)})")
        elif expect == "outputs_unchanged":
            if greedy_benchmarks is not None and bench not in greedy_benchmarks:
                problems.append(f"{where}.benchmark: {bench!r} is not a temperature-0 GSM8K benchmark; "
                                f"`outputs_unchanged` compares greedy outputs ({', '.join(sorted(greedy_benchmarks))})")
            if claim.get("category") is not None:
                problems.append(f"{where}.category: `outputs_unchanged` compares greedy outputs, not a metric per "
                                f"category")
        else:
            problems += metric_problems(claim, where, bench, benchmark_kinds[bench], (categories or {}).get(bench))
        named = claim.get("arms") or [] if expect == "zero" else [claim.get("arm"), claim.get("against")]
        if expect == "restores":
            named.append(claim.get("from"))
            if not claim.get("from"):
                problems.append(f"{where}.from: required for expect 'restores' (the arm whose gap is restored)")
            if not (isinstance(claim.get("fraction", 0.9), (int, float)) and 0 < claim.get("fraction", 0.9) <= 1):
                problems.append(f"{where}.fraction: a share of the gap in (0, 1], got {claim.get('fraction')!r}")
        elif claim.get("from") is not None or claim.get("fraction") is not None:
            problems.append(f"{where}: `from` and `fraction` belong to expect 'restores' only")
        if expect != "zero":
            for key in ("arm", "against"):
                if not claim.get(key):
                    problems.append(f"{where}.{key}: required for expect {expect!r}")
        for arm in named:
            if arm and arm not in arms:
                problems.append(f"{where}: arm {arm!r} is not an arm of this experiment ({', '.join(arms)})")
            elif arm and bench in benchmark_kinds and bench not in arm_benchmarks.get(arm, []):
                problems.append(f"{where}: arm {arm!r} does not run benchmark {bench!r}")
        predicted = claim.get("predicted")
        if predicted is not None and not (isinstance(predicted, dict) and predicted.get("verdict") in VERDICTS
                                          and isinstance(predicted.get("because"), str) and predicted["because"]):
            problems.append(f"{where}.predicted: a mapping with `verdict` (one of {list(VERDICTS)}) and `because` "
                            f"(the reason), got {predicted!r}")
        if "margin" in claim and not (isinstance(claim["margin"], (int, float)) and 0 <= claim["margin"] < 1):
            problems.append(f"{where}.margin: a fraction in [0, 1), got {claim['margin']!r}")
    return problems


def claim_metric(claim: Dict[str, Any]) -> Optional[str]:
    """The metric a claim judges: its `metric`, over its `category`'s prompts where it names one."""
    metric, category = claim.get("metric"), claim.get("category")
    if metric is None or category is None or split_category_metric(metric)[1] is not None:
        return metric
    return category_metric(metric, category)


def with_category(claim: Any) -> Any:
    """The claim as the analysis judges it: a `category:` folded into its metric (accept_length + low_entropy ->
    accept_length[low_entropy]), a metric written per category given its `category` key; any other claim unchanged
    (the same object), so claims without a category behave exactly as before."""
    if not isinstance(claim, dict) or not claim.get("metric"):
        return claim
    metric, written = split_category_metric(str(claim["metric"]))
    category = claim.get("category", written)
    if category is None or (written is not None and category != written) or not CATEGORY.match(str(category)):
        return claim  # no category; or two that disagree, or one no metric can be named by: validation names them
    return {**claim, "metric": category_metric(metric, category), "category": category}


def benchmark_categories(bench_cfg: Dict[str, Any]) -> Optional[List[str]]:
    """A benchmark's prompt categories from its config: `categories` in its kind's settings block (e.g.
    `speed_bench.categories`) or on the benchmark itself; None for a benchmark without categories."""
    kind_settings = bench_cfg.get(str(bench_cfg.get("kind")))
    found = ((kind_settings.get("categories") if isinstance(kind_settings, dict) else None)
             or bench_cfg.get("categories"))
    return [str(c) for c in found] if found else None


def metric_problems(claim: Dict[str, Any], where: str, bench: str, kind: str,
                    categories: Optional[List[str]]) -> List[str]:
    """A claim's metric against what its benchmark's kind records, and its category against the benchmark's."""
    problems = []
    metric, written = split_category_metric(str(claim.get("metric")))
    known = KIND_METRICS.get(kind, ())
    if metric not in known:
        problems.append(f"{where}.metric: {claim.get('metric')!r} is not a metric a {kind} benchmark records "
                        f"({', '.join(known)})")
    category = claim.get("category", written)
    if category is None:
        return problems
    if written is not None and claim.get("category") not in (None, written):
        problems.append(f"{where}.category: {claim['category']!r} disagrees with the metric's own category "
                        f"({claim['metric']!r}); name it once")
    elif not categories:
        problems.append(f"{where}.category: benchmark {bench!r} (kind {kind}) has no categories; a claim on it names "
                        f"no `category`")
    elif str(category) not in categories:
        problems.append(f"{where}.category: {category!r} is not a category of benchmark {bench!r} "
                        f"({', '.join(categories)})")
    return problems


def campaign_claim_problems(cfg: Dict[str, Any]) -> List[str]:
    """The claims file against this experiment's arms, benchmarks and metrics (skipped claims aside); every entry
    point holds a composed config to it before anything runs."""

    exp = cfg["experiment"]
    if not exp.get("claims"):
        return []
    path = Path(exp["claims"]) if Path(exp["claims"]).is_absolute() else CONF_DIR / exp["claims"]
    if not path.is_file():
        return []  # config.validate names the missing file
    try:
        claims = load_claims(path)
    except ClaimsError as exc:
        return [f"experiment.claims: {exc}"]
    skip = set(exp.get("skip_claims") or [])
    ids = {c.get("id") for c in claims if isinstance(c, dict)}
    problems = [f"experiment.skip_claims: {sorted(skip - ids)} are not claims of {path}"] if skip - ids else []
    kinds = {b: v["kind"] for b, v in (cfg.get("benchmarks") or {}).items()}
    arm_benchmarks = {a: list(v.get("benchmarks") or []) for a, v in exp["arms"].items()}
    judged = claims_per_level([c for c in claims if not (isinstance(c, dict) and c.get("id") in skip)], cfg)
    greedy = {b for b, v in (cfg.get("benchmarks") or {}).items() if greedy_benchmark(v)}
    categories = {b: benchmark_categories(v) for b, v in (cfg.get("benchmarks") or {}).items()}
    found = claim_problems(judged, str(path), list(exp["arms"]), kinds, arm_benchmarks, greedy, categories)
    if found:
        found[-1] += " (a claim this campaign cannot judge: list its id in experiment.skip_claims)"
    return problems + found


def check_campaign_claims(cfg: Dict[str, Any]) -> Dict[str, Any]:
    """The composed config, its claims file held to it: a ConfigError naming the file, claim and key."""

    problems = campaign_claim_problems(cfg)
    if problems:
        raise ConfigError(problems)
    return cfg


def campaign_claims(cfg: Dict[str, Any], claims_path: str) -> List[Dict[str, Any]]:
    """The claims judged: the file's, less experiment.skip_claims, each swept one once per level."""

    skip = set(cfg["experiment"].get("skip_claims") or [])
    return [with_category(c) for c in
            claims_per_level([c for c in load_claims(claims_path) if c["id"] not in skip], cfg)]


def unjudged_metrics(cfg: Dict[str, Any]) -> Dict[str, str]:
    """Metrics the platform or the model cannot speak to: shown in the tables, never judged."""
    return {**(cfg["model"].get("unjudged_metrics") or {}), **(cfg["platform"].get("unjudged_metrics") or {})}
