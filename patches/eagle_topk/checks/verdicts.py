"""What both judges of this series share: a check row of the protocol, and the chi-square test of draws against q."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Dict, List

from scipy import stats

# A sampled row's draws must not be distinguishable from q at this level.
CHI2_MIN_P = 1e-3


def check(name: str, passed: bool, detail: str, executed: bool = True, tree: str = "patched",
          **evidence) -> Dict[str, Any]:
    return {"check": name, "tree": tree, "passed": bool(passed), "executed": executed, "detail": detail, **evidence}


def chi_square_p(counts: List[int], q: List[float]) -> float:
    total = sum(counts)
    expected = [max(p, 0.0) * total for p in q]
    norm = sum(expected)
    expected = [e * total / norm for e in expected]
    keep = [(c, e) for c, e in zip(counts, expected) if e > 0]
    return float(stats.chisquare([c for c, _ in keep], [e for _, e in keep]).pvalue)


def judge_arguments() -> argparse.Namespace:
    """The judge's command line of the check protocol (patches/README.md)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--record", action="append", default=[], metavar="TREE=PATH")
    parser.add_argument("--tree", action="append", default=[], metavar="TREE=PACKAGE_DIR")
    parser.add_argument("--role", default=None, choices=["patched", "control"])
    args = parser.parse_args()
    args.records = {k: json.loads(Path(v).read_text()) for k, v in (r.split("=", 1) for r in args.record)}
    args.trees = {k: Path(v) for k, v in (t.split("=", 1) for t in args.tree)}
    return args


def write_verdict(path: str, verdict: Dict[str, Any]) -> None:
    Path(path).write_text(json.dumps(verdict, indent=1))
