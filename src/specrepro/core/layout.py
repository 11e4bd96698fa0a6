"""Where a campaign keeps everything under its results folder: one function per file or folder.

Each function gives a concrete path when called with values, and the Snakemake pattern when called with none
(its parameters default to Snakemake's wildcards), so the .smk files and the Python code spell every path once:

    layout.image("pr_on")  ->  <results>/image/pr_on.json
    layout.image()         ->  <results>/image/{arm}.json          (the rule's output pattern)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Union

Part = Union[str, int]


@dataclass(frozen=True)
class Layout:
    root: Path

    def _p(self, *parts: Part) -> str:
        return str(Path(self.root, *map(str, parts)))

    # --- configuration and data ------------------------------------------------------------
    def resolved_config(self) -> str:
        return self._p("resolved_config.yaml")

    def dataset(self, dataset: str = "{dataset}") -> str:
        return self._p("datasets", f"{dataset}.json")

    # --- sources, patches, checks ----------------------------------------------------------
    def source_manifest(self, ref: str = "{ref}") -> str:
        return self._p("source", ref, "manifest.json")

    def source_tree(self, ref: str = "{ref}") -> str:
        return self._p("source", ref, "tree")

    def patch_manifest(self, ref: str = "{ref}", series: str = "{series}") -> str:
        return self._p("patch", ref, series, "manifest.json")

    def patch_tree(self, ref: str = "{ref}", series: str = "{series}") -> str:
        return self._p("patch", ref, series, "tree")

    def patch_check(self, ref: str = "{ref}", series: str = "{series}", suffix: str = "json") -> str:
        return self._p("patch_check", ref, series, f"verdict.{suffix}")

    def base_image(self) -> str:
        return self._p("image", "base.json")

    def image(self, arm: str = "{arm}") -> str:
        return self._p("image", f"{arm}.json")

    def gpu_check(self, arm: str = "{arm}", suffix: str = "json") -> str:
        return self._p("gpu_check", arm, f"verdict.{suffix}")

    # --- measurements ----------------------------------------------------------------------
    def arm_dir(self, arm: str = "{arm}") -> str:
        return self._p("arms", arm)

    def arm_record(self, arm: str = "{arm}") -> str:
        return self._p("arms", arm, "arm.json")

    def launch_record(self, arm: str = "{arm}", launch: Part = "{launch}") -> str:
        return self._p("arms", arm, "launches", f"{launch}.json")

    def round_decision(self, round: Part = "{round}") -> str:
        """A sequential design's decision after a round: what is decided, which arms launch again."""
        return self._p("sequential", f"round{round}.json")

    def table(self, name: str) -> str:
        """runs.csv, requests.parquet, acceptance.csv."""
        return self._p("tables", name)

    # --- results -------------------------------------------------------------------------------
    def report(self, name: str = "report.md") -> str:
        """report.md, report.html, analysis.json, cpu_stages.md."""
        return self._p("report", name)

    def tracking(self, name: str) -> str:
        """campaign.json, cpu_stages.json: what was logged to MLflow."""
        return self._p("tracking", f"{name}.json")

    # --- what each job says and costs ------------------------------------------------------
    def log(self, stage: str, *parts: Part) -> str:
        """logs/<stage>/<parts>.log (a stage run once: logs/<stage>.log)."""
        return self._p("logs", stage, *parts[:-1], f"{parts[-1]}.log") if parts else self._p("logs", f"{stage}.log")

    def logs(self) -> str:
        return self._p("logs")

    def benchmark(self, stage: str, *parts: Part) -> str:
        """Snakemake's `benchmark:` record of a heavy job: benchmarks/<stage>/<parts>.tsv."""
        return self._p("benchmarks", stage, *parts[:-1], f"{parts[-1]}.tsv")

    def benchmarks(self) -> str:
        return self._p("benchmarks")
