"""A metric's name and its category: `accept_length[low_entropy]` is accept length over one category's prompts.

A benchmark whose prompts fall into categories (SPEED-Bench: low_entropy, mixed, high_entropy) records, beside the
whole benchmark's metrics, each metric per category under `<metric>[<category>]`.  Everything keyed by a metric
(priors, fallbacks, units, display names, unjudged metrics) is written for the base metric; `lookup` finds a
categorized metric's entry by its base when it has none of its own, so a category needs no settings of its own.

A leaf: the benchmark kinds (which write the names) and the analysis (which reads them) both import it.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Optional, Tuple

# A category is one word of a benchmark's data (it becomes part of a metric's name, a report's row, a YAML key); no
# dot: the tracking stage names an arm's headline numbers `<benchmark>.<metric>` and splits them at the last dot.
CATEGORY = re.compile(r"^[A-Za-z0-9_\-]+$")
_CATEGORIZED = re.compile(r"^(?P<metric>[^\[\]]+)\[(?P<category>[^\[\]]+)\]$")


def category_metric(metric: str, category: str) -> str:
    """`metric` over one category's prompts: accept_length, low_entropy -> accept_length[low_entropy]."""
    if not CATEGORY.match(str(category)):
        raise ValueError(f"category {category!r}: letters, digits, '_' and '-' only")
    if "[" in metric or "]" in metric:
        raise ValueError(f"metric {metric!r} is already per category (or not a metric's name)")
    return f"{metric}[{category}]"


def split_category_metric(name: str) -> Tuple[str, Optional[str]]:
    """(base metric, category), or (name, None) for a metric of the whole benchmark."""
    m = _CATEGORIZED.match(name)
    return (m["metric"], m["category"]) if m else (name, None)


def base_metric(name: str) -> str:
    return split_category_metric(name)[0]


def category_of(name: str) -> Optional[str]:
    return split_category_metric(name)[1]


def lookup(table: Optional[Mapping[str, Any]], name: str, default: Any = None) -> Any:
    """`table`'s entry for the metric `name`: its own, else its base metric's, else `default`."""
    table = table or {}
    if name in table:
        return table[name]
    base = base_metric(name)
    return table[base] if base != name and base in table else default


def has(table: Optional[Mapping[str, Any]], name: str) -> bool:
    """Whether `table` has an entry for `name` or, per category, for its base metric."""
    table = table or {}
    return name in table or base_metric(name) in table


def tracking_name(name: str) -> str:
    """The metric's name as MLflow accepts it (letters, digits, `_ - . / :` and spaces; no brackets):
    accept_length[low_entropy] -> accept_length/low_entropy (MLflow's UI groups by the slash)."""
    metric, category = split_category_metric(name)
    return f"{metric}/{category}" if category else name
