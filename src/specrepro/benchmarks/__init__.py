"""Benchmark kinds: what one `kind:` of benchmark is, one module each, found by the registry.

A benchmark kind (`gsm8k`, `bench_serving`, `speed_bench`) owns everything that differs between benchmarks of
different kinds: its settings schema (a dataclass and the name of its settings block in a benchmark's config), the
problems a config can have in that block, the data entries and client files it reads, its cost figures (requests,
tokens per request, concurrency), the warm-up requests shaped like its own, the client step of one repeat (its argv
and whether it runs beside the server), what it reads from the client's outputs (metrics and per-request records,
per category where the workload has categories: `category_metric`), whether it is greedy and how many distinct
questions it asks (for the analysis), and the output files a dead attempt may leave behind.  The rest of the
pipeline looks a benchmark's kind up once (`kind_of`) and calls these methods; no code outside this package compares
a kind's name.  A new kind is one module here (a subclass of `BenchmarkKind` assigned to `KIND`) and one
conf/bench/*.yaml: `registry` discovers the modules.  This package may import leaf utilities only (errors, fileio,
datasets, accept_length, patching): plain values in, plain values out; it never imports the config or a stage.
"""

from __future__ import annotations

# A per-category metric's name (`accept_length[low_entropy]`): one definition, the analysis's too.
from specrepro.util.metric_names import category_metric, split_category_metric
from specrepro.benchmarks.base import (
    BenchOutputError, BenchmarkKind, ClientCall, ClientStep, CostFigures, KindOutputs, Warmup)
from specrepro.benchmarks.registry import (
    UnknownKind, greedy, kind_named, kind_of, kinds, questions, registered, settings_blocks, settings_of)

__all__ = ["BenchOutputError", "BenchmarkKind", "ClientCall", "ClientStep", "CostFigures", "KindOutputs", "UnknownKind", "Warmup",
           "category_metric", "greedy", "kind_named", "kind_of", "kinds", "questions", "settings_blocks",
           "registered", "settings_of", "split_category_metric"]
