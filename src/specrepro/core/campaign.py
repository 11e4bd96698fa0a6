"""A campaign: its arms' plans, built once, and what belongs to the experiment as a whole.

`Campaign(cfg)` builds every arm's plan once (specrepro.core.arm_plan) and answers the experiment-level questions the
Snakefile's DAG asks: which series and sources the arms need, the order of launches, the datasets, the GPU checks,
the rerun triggers.  What one arm needs travels as its `ArmPlan`; nothing takes an arm's name to look it up again
below the stage that chose it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Dict, List, Optional

from specrepro.core.arm_plan import ArmPlan, arm_plans
from specrepro.core.layout import Layout
from specrepro.core.rounds import Policy, interleaved, max_launches, policy_of
from specrepro.core.config import config_hash, data_sources
from specrepro.core.series import check_files, checks_of, load_series, local_files, series_folder
from specrepro.core.sweep import resolve_arm


class Campaign:
    def __init__(self, cfg: Dict[str, Any]):
        self.cfg = cfg
        self.experiment = cfg["experiment"]
        self.results_dir = Path(cfg["results_dir"])
        self.cache_dir = Path(cfg["cache_dir"])
        self.project_root = Path(cfg["project_root"])
        self.layout = Layout(self.results_dir)
        self.plans: Dict[str, ArmPlan] = arm_plans(cfg)
        self._series: Dict[str, Dict[str, Any]] = {}

    # --- arms --------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.experiment["name"]

    @property
    def arms(self) -> List[str]:
        return list(self.plans)

    def plan(self, arm: str) -> ArmPlan:
        return self.plans[arm]

    @property
    def launches(self) -> int:
        """Launches per arm: the fixed number, or the most a sequential design runs."""
        return max_launches(self.experiment.get("launches"))

    @property
    def policy(self) -> Optional[Policy]:
        """The sequential design, or None for a fixed number of launches."""
        return policy_of(self.experiment.get("launches"))

    @property
    def patch_series_used(self) -> List[str]:
        return sorted({p.series for p in self.plans.values() if p.series})

    @property
    def claims_path(self) -> str:
        claims = self.experiment.get("claims")
        if not claims:
            return ""
        path = Path(claims)
        return str(path if path.is_absolute() else self.project_root / "conf" / path)

    def baseline_of(self, levels: Optional[Dict[str, Any]] = None) -> str:
        """The baseline arm (at the server levels given, where a server factor splits it into cells)."""

        base = self.experiment["baseline_arm"]
        return base if base in self.experiment["arms"] else (resolve_arm(self.cfg, base, levels or {}) or base)

    # --- patch series -------------------------------------------------------------------------
    def series_dir(self, series: str) -> Path:
        return series_folder(self.cfg, series)

    def series_spec(self, series: str) -> Dict[str, Any]:
        if series not in self._series:
            self._series[series] = load_series(self.series_dir(series))
        return self._series[series]

    def local_patch_files(self, series: str) -> List[str]:
        """Local files a series is made of (series.yaml and its patches), for rerun triggers."""

        return [str(f) for f in local_files(self.series_spec(series))]

    def check_files(self, series: str, where: str) -> List[str]:
        """The files of the series' checks that run `where` (cpu, gpu), for rerun triggers."""

        return [str(f) for f in check_files(self.series_spec(series), where)]

    def series_targets(self) -> List[tuple]:
        """(ref, series) pairs that some arm uses."""
        return sorted({(p.ref, p.series) for p in self.plans.values() if p.series})

    # --- launches ------------------------------------------------------------------------------
    def launch_order(self) -> List[tuple]:
        """(arm, launch) in the order they run (A B C C B A ...); a sequential design's first round."""
        n = self.policy.min if self.policy else self.launches
        return interleaved(self.arms, {a: range(1, n + 1) for a in self.arms})

    def previous_launch(self, arm: str, launch: int, order: Optional[List[tuple]] = None) -> List[str]:
        """The launch record this launch waits for: the one before it in `order` (default `launch_order`)."""
        order = order if order is not None else self.launch_order()
        i = order.index((arm, int(launch)))
        if i == 0:
            return []
        prev_arm, prev_launch = order[i - 1]
        return [self.layout.launch_record(prev_arm, prev_launch)]

    def runs_to_remeasure(self, arm: str, launch: Optional[int] = None) -> List[str]:
        """The serving job's rerun trigger (a Snakemake param): the runs whose record is gone, else what the job's
        last record says was gone when it started.

        Run records are not Snakemake outputs (a failed job must not take measured runs with it), so a removed one
        is invisible to Snakemake's file checks.  The value is the same before and after the job that measures
        them, so that job is the only rerun: a removed cell is measured once, alone, on one launch.
        """
        plan = self.plans[arm]
        missing = plan.runs_without_record(launch)
        record = Path(self.layout.launch_record(arm, launch) if launch else self.layout.arm_record(arm))
        if missing or not record.is_file():
            return missing
        try:
            return list(json.loads(record.read_text()).get("missing_at_start") or [])
        except (OSError, ValueError):
            return missing

    # --- images ---------------------------------------------------------------------------------
    @property
    def base_image_ref(self) -> str:
        """The platform's base image with the pinned version filled in ('' without containers)."""
        base = self.cfg["platform"].get("base_image") or ""
        return base.format(version=self.cfg["sglang"]["version"])

    def tree_manifest(self, arm: str) -> str:
        """The manifest of the sglang tree an arm serves: patched or pristine."""
        plan = self.plans[arm]
        return self.layout.patch_manifest(plan.ref, plan.series) if plan.series else self.layout.source_manifest(plan.ref)

    # --- data and models ---------------------------------------------------------------------------
    @property
    def toy_theory(self) -> str:
        """theory.json of a model the pipeline builds (model.toy), '' for a model from outside."""
        toy = self.cfg["model"].get("toy")
        return str(Path(toy["dir"]) / "theory.json") if toy else ""

    def model_inputs(self) -> List[str]:
        """Files a server needs that the DAG makes (a toy model's pair)."""
        return [self.toy_theory] if self.toy_theory else []

    def data_source(self, dataset: str) -> tuple:
        """(source, the config key a user sets) of a data file the campaign reads (config.data_sources)."""

        return data_sources(self.cfg)[dataset]

    @property
    def datasets(self) -> List[str]:
        """The names of every data file the campaign reads: its records under results/<campaign>/datasets/."""

        return sorted(data_sources(self.cfg))

    def datasets_for_arm(self, arm: str) -> List[str]:
        """The dataset records an arm's measuring job waits for (fetched and verified on the submit host)."""
        return [self.layout.dataset(b) for b in self.plans[arm].benchmarks if b in self.datasets]

    # --- GPU checks ---------------------------------------------------------------------------------
    def gpu_checked_series(self, arm: str) -> List[Dict[str, Any]]:
        """(series, role, spec) the arm's GPU check runs: its own series as `patched`, or, for an unpatched arm,
        every series of the campaign as its `control`; only series that declare GPU checks."""

        own = self.plans[arm].series
        names = [own] if own else self.patch_series_used
        return [{"series": name, "role": "patched" if own else "control", "spec": self.series_spec(name)}
                for name in names if checks_of(self.series_spec(name), "gpu")]

    def gpu_check_runs(self, arm: str) -> bool:
        """Whether the arm's measuring job waits for a GPU check: the mode allows it and some series it is checked
        against declares GPU checks."""
        mode = self.cfg["gpu_check"]["enabled"]
        allowed = mode == "always" or (mode == "auto" and self.cfg["platform"]["accelerator"] != "none")
        return allowed and bool(self.gpu_checked_series(arm))

    def gpu_check_for_arm(self, arm: str) -> List[str]:
        return [self.layout.gpu_check(arm)] if self.gpu_check_runs(arm) else []

    def gpu_check_files(self, arm: str) -> List[str]:
        """The files of the GPU checks the arm runs, for rerun triggers."""
        return [f for e in self.gpu_checked_series(arm) for f in self.check_files(e["series"], "gpu")]

    def gpu_check_key(self, arm: str) -> Dict[str, Any]:
        plan = self.plans[arm]
        return {"gpu_check": self.cfg["gpu_check"], "platform": self.cfg["platform"]["name"],
                "series": plan.series, "ref": plan.ref,
                "checks": {e["series"]: [c for c in e["spec"]["checks"] if c["where"] == "gpu"]
                           for e in self.gpu_checked_series(arm)}}

    # --- what the results depend on -----------------------------------------------------------------
    @property
    def config_hash(self) -> str:
        return config_hash(self.cfg)

    def analysis_key(self) -> Dict[str, Any]:
        """What the report depends on besides the measured tables."""
        claims = Path(self.claims_path)
        return {"claims_sha256": hashlib.sha256(claims.read_bytes()).hexdigest() if claims.is_file() else None,
                "reference": self.experiment.get("reference"),
                "reference_repeats": self.experiment.get("reference_repeats"),
                "baseline_arm": self.experiment["baseline_arm"],
                "skip_claims": self.experiment.get("skip_claims") or [],
                "analysis": self.cfg.get("analysis"),
                # the PR comment links the report there
                "results_url": (self.cfg.get("tracking") or {}).get("results_url")}
