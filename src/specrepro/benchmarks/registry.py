"""The benchmark kinds, found once: every module of this package that assigns a `BenchmarkKind` to `KIND`.

Discovery (pkgutil over the package's folder) is what lets a new kind be one module and one conf/bench file: nothing
here names a kind.  The kinds are looked up by the `kind:` value of a benchmark's config (`kind_of`).
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

from specrepro.benchmarks.base import BenchmarkKind
from specrepro.util.errors import SpecreproError

# modules of the package that define no kind
INFRASTRUCTURE = {"base", "registry"}
PACKAGE = __name__.rpartition(".")[0]
_KINDS: Optional[Dict[str, BenchmarkKind]] = None


class UnknownKind(SpecreproError, ValueError):
    """A benchmark's `kind:` that no module of specrepro.benchmarks defines; the message names the key."""


def _discover() -> Dict[str, BenchmarkKind]:
    found: Dict[str, BenchmarkKind] = {}
    blocks: Dict[str, str] = {}
    # the package's folder, not the package object: importing it here would close an import loop
    for info in sorted(pkgutil.iter_modules([str(Path(__file__).parent)]), key=lambda i: i.name):
        if info.name in INFRASTRUCTURE or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{PACKAGE}.{info.name}")
        kind = getattr(module, "KIND", None)
        if kind is None:
            continue
        if not isinstance(kind, BenchmarkKind):
            raise TypeError(f"{module.__file__}: KIND must be a BenchmarkKind instance, got {type(kind).__name__}")
        for taken, what in ((found, kind.name), (blocks, kind.block)):
            if what in taken:
                raise TypeError(f"{module.__file__}: benchmark kind {kind.name!r} reuses {what!r} "
                                f"(already {getattr(taken[what], 'name', taken[what])!r})")
        found[kind.name] = kind
        blocks[kind.block] = kind.name
    return dict(sorted(found.items(), key=lambda item: (item[1].order, item[0])))


def kinds() -> Dict[str, BenchmarkKind]:
    """Every registered kind by its `kind:` value, in their order (`BenchmarkKind.order`, then name)."""
    global _KINDS
    if _KINDS is None:
        _KINDS = _discover()
    return dict(_KINDS)


def registered(bench: Mapping[str, Any]) -> bool:
    """Whether a benchmark config's kind is a registered one."""
    return str(bench.get("kind")) in kinds()


def kind_named(name: str, key: str = "kind") -> BenchmarkKind:
    """The kind called `name`; UnknownKind names `key`, the value and the registered kinds."""
    registered = kinds()
    if name not in registered:
        raise UnknownKind(f"{key}: {name!r} is not a benchmark kind (registered: {', '.join(registered)})")
    return registered[name]


def kind_of(bench: Mapping[str, Any], bench_name: str = "?") -> BenchmarkKind:
    """A benchmark config's kind (`benchmarks.<bench_name>.kind`)."""
    return kind_named(str(bench["kind"]), f"benchmarks.{bench_name}.kind")


def settings_of(bench: Mapping[str, Any], bench_name: str = "?") -> Mapping[str, Any]:
    """A benchmark config's settings block (`gsm8k:`, `serving:`, ...): its kind's."""
    return bench[kind_of(bench, bench_name).block]


def settings_blocks() -> List[BenchmarkKind]:
    """The kinds in the order their settings blocks are declared on the benchmark schema."""
    return list(kinds().values())


def greedy(bench: Mapping[str, Any]) -> bool:
    """Whether a benchmark's requests all decode greedily (the analysis compares their outputs)."""
    kind = kind_of(bench)
    return bool(bench.get(kind.block)) and kind.greedy(bench[kind.block])


def questions(bench: Mapping[str, Any]) -> Optional[int]:
    """Distinct questions a repeat of the benchmark asks (accuracy intervals); None where it scores none."""
    kind = kind_of(bench)
    return kind.questions(bench[kind.block]) if bench.get(kind.block) else None
