"""What a resolved config means: arms, jobs, paths and command lines.

The Snakefile, `specrepro plan` and the stage scripts all ask this one object,
so the plan printed is the plan run.
"""

from __future__ import annotations

import hashlib
import json
import math
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

from specrepro.sglang_flags import load_table, render_flags

SERVER_MODULE = "sglang.launch_server"
BENCH_SERVING_MODULE = "sglang.benchmark.serving"


@dataclass(frozen=True)
class BenchRun:
    arm: str
    benchmark: str
    repeat: int
    # 0: the arm's only launch (experiment.launches = 1); else which of its launches serves this run
    launch: int = 0

    @property
    def stem(self) -> str:
        return f"{self.benchmark}/r{self.repeat}" if not self.launch else f"launch{self.launch}/{self.benchmark}/r{self.repeat}"


def run_cost(bench: Dict[str, Any], serve: Dict[str, Any]) -> Dict[str, float]:
    """One run of a benchmark: its requests, and the seconds it takes at the planning TPOT (each request emits
    its token budget; `concurrency` requests at a time, each extra one slowing a step by expected_tpot_growth)."""
    if bench["kind"] == "gsm8k":
        s = bench["gsm8k"]
        requests, tokens, conc = s["num_questions"], s["max_new_tokens"], s["parallel"]
    else:
        s = bench["serving"]
        requests, tokens, conc = s["num_prompts"], s["output_len"], s["max_concurrency"]
    conc = max(1, min(conc, requests))
    step_s = serve["expected_tpot_ms"] / 1000 * (1 + serve["expected_tpot_growth"] * (conc - 1))
    return {"requests": requests, "seconds": math.ceil(requests / conc) * tokens * step_s}


def campaign_cost(cfg: Dict[str, Any]) -> Dict[str, Any]:
    """The whole campaign's planning cost: launches, requests, seconds and GPU-hours (every launch holds the model's
    GPUs while it loads and while its runs measure)."""
    exp, serve = cfg["experiment"], cfg["serve"]
    launches = int(exp.get("launches") or 1)
    repeats = {b: (v.get("repeats") if v.get("repeats") is not None else exp["repeats"]) for b, v in cfg["benchmarks"].items()}
    requests, seconds = 0, 0.0
    for arm in exp["arms"].values():
        for b in arm["benchmarks"]:
            one = run_cost(cfg["benchmarks"][b], serve)
            requests += one["requests"] * repeats[b] * launches
            seconds += one["seconds"] * repeats[b] * launches
    n_launches = len(exp["arms"]) * launches
    seconds += n_launches * float(serve["expected_load_s"])
    gpus = int(cfg["model"]["gpus"])
    return {"launches": n_launches, "requests": requests, "seconds": seconds, "gpus": gpus,
            "gpu_hours": seconds * gpus / 3600}


class Campaign:
    def __init__(self, cfg: Dict[str, Any]):
        self.cfg = cfg
        self.experiment = cfg["experiment"]
        self.results_dir = Path(cfg["results_dir"])
        self.cache_dir = Path(cfg["cache_dir"])
        self.project_root = Path(cfg["project_root"])

    # --- arms and runs -----------------------------------------------------
    @property
    def name(self) -> str:
        return self.experiment["name"]

    @property
    def arms(self) -> List[str]:
        return list(self.experiment["arms"])

    def arm(self, name: str) -> Dict[str, Any]:
        return self.experiment["arms"][name]

    def series_of(self, arm: str) -> Optional[str]:
        return self.arm(arm).get("patch_series")

    def ref_of(self, arm: str) -> str:
        return self.arm(arm).get("sglang_ref") or self.cfg["sglang"]["git_ref"]

    @property
    def patch_series_used(self) -> List[str]:
        return sorted({s for a in self.arms if (s := self.series_of(a))})

    @property
    def claims_path(self) -> str:
        claims = self.experiment.get("claims")
        if not claims:
            return ""
        path = Path(claims)
        return str(path if path.is_absolute() else self.project_root / "conf" / path)

    def verdicts_for_arm(self, arm: str) -> List[str]:
        """A patched arm waits for (and is gated by) its patch_check verdict."""
        series = self.series_of(arm)
        if not series:
            return []
        return [str(self.results_dir / "patch_check" / self.ref_of(arm) / series / "verdict.json")]

    def series_dir(self, series: str) -> Path:
        from specrepro.series import series_folder

        return series_folder(self.cfg, series)

    def series_spec(self, series: str) -> Dict[str, Any]:
        from specrepro.series import load_series

        return load_series(self.series_dir(series))

    def local_patch_files(self, series: str) -> List[str]:
        """Local files a series is made of (series.yaml and its patches), for rerun triggers."""
        from specrepro.series import local_files

        return [str(f) for f in local_files(self.series_spec(series))]

    def check_files(self, series: str, where: str) -> List[str]:
        """The files of the series' checks that run `where` (cpu, gpu), for rerun triggers."""
        from specrepro.series import check_files

        return [str(f) for f in check_files(self.series_spec(series), where)]

    def repeats(self, benchmark: str) -> int:
        own = self.cfg["benchmarks"][benchmark].get("repeats")
        return own if own is not None else self.experiment["repeats"]

    @property
    def launches(self) -> int:
        return int(self.experiment.get("launches") or 1)

    def bench_runs(self, arm: str, launch: Optional[int] = None) -> List[BenchRun]:
        """The arm's runs (of one launch when `launch` is given); with one launch per arm, launch 0."""
        launches = [0] if self.launches == 1 else ([launch] if launch else range(1, self.launches + 1))
        return [
            BenchRun(arm, b, r, lt)
            for lt in launches
            for b in self.arm(arm)["benchmarks"]
            for r in range(1, self.repeats(b) + 1)
        ]

    def launch_order(self) -> List[tuple]:
        """(arm, launch) in the order they run: arms forward, then backward (A B C C B A ...).

        Interleaving spreads slow drift (clocks, thermals, other tenants) over every
        arm instead of loading it onto whichever arm ran last.
        """
        order = []
        for n in range(1, self.launches + 1):
            arms = self.arms if n % 2 else list(reversed(self.arms))
            order += [(a, n) for a in arms]
        return order

    def previous_launch(self, arm: str, launch: int) -> List[str]:
        """The launch record this launch waits for (the one before it in `launch_order`)."""
        order = self.launch_order()
        i = order.index((arm, int(launch)))
        if i == 0:
            return []
        prev_arm, prev_launch = order[i - 1]
        return [str(self.arm_dir(prev_arm) / "launches" / f"{prev_launch}.json")]

    def benchmark(self, name: str) -> Dict[str, Any]:
        return self.cfg["benchmarks"][name]

    @property
    def base_image_ref(self) -> str:
        """The platform's base image with the pinned version filled in ('' without containers)."""
        base = self.cfg["platform"].get("base_image") or ""
        return base.format(version=self.cfg["sglang"]["version"])

    @property
    def config_hash(self) -> str:
        from specrepro.config import config_hash

        return config_hash(self.cfg)

    @property
    def exclusive(self) -> bool:
        return self.cfg["serve"]["placement"] == "exclusive"

    # --- paths (relative to results_dir; the Snakefile prefixes them) --------
    def arm_dir(self, arm: str) -> Path:
        return self.results_dir / "arms" / arm

    # --- command lines -----------------------------------------------------
    def server_args(self, arm: str) -> Dict[str, Any]:
        """The model's arguments, then the platform's (device, backends), then the arm's own."""
        merged = dict(self.cfg["model"]["server_args"])
        merged.update(self.cfg["platform"].get("server_args") or {})
        merged.update(self.arm(arm).get("extra_server_args") or {})
        return merged

    @property
    def toy_theory(self) -> str:
        """theory.json of a model the pipeline builds (model.toy), '' for a model from outside."""
        toy = self.cfg["model"].get("toy")
        return str(Path(toy["dir"]) / "theory.json") if toy else ""

    def model_inputs(self) -> List[str]:
        """Files a server needs that the DAG makes (a toy model's pair)."""
        return [self.toy_theory] if self.toy_theory else []

    @property
    def server_gpus(self) -> int:
        """GPUs a measuring job asks the scheduler for: the model's (a CPU campaign's model says 0)."""
        return self.cfg["model"]["gpus"]

    def requested_fields(self, arm: str) -> Dict[str, Any]:
        """The arm's server arguments by ServerArgs field, as /server_info must report them back."""
        from specrepro.effective_config import requested_fields

        return requested_fields(self.server_args(arm), load_table(self.cfg["sglang"]["version"], self.cache_dir),
                                self.cfg["serve"])

    def server_flags(self, arm: str, host: str, port: int) -> List[str]:
        table = load_table(self.cfg["sglang"]["version"], self.cache_dir)
        serve = self.cfg["serve"]
        flags = render_flags(self.server_args(arm), table)
        flags += ["--host", host, "--port", str(port)]
        if serve["decode_log_interval"] is not None:
            # unset: sglang's own default (40), so the log costs the measured server what it costs users
            flags += ["--decode-log-interval", str(serve["decode_log_interval"])]
        if serve["enable_metrics"]:
            flags.append("--enable-metrics")
        return flags

    @property
    def python(self) -> str:
        """The Python that serves and runs the clients: the platform's, or the venv the pipeline builds for it."""
        plat = self.cfg["platform"]
        if plat.get("python_env"):
            from specrepro.sglang_env import env_dir

            return str(env_dir(self.cache_dir, self.project_root / "requirements" / plat["python_env"]) / "bin" / "python")
        return plat["python"]

    def server_argv(self, arm: str, host: str, port: int, python: Optional[str] = None) -> List[str]:
        python = python or self.python
        return [python, "-m", SERVER_MODULE, *self.server_flags(arm, host, port)]

    def bench_serving_argv(
        self, benchmark: str, repeat: int, base_url: str, output_file: str, python: Optional[str] = None
    ) -> List[str]:
        s = self.benchmark(benchmark)["serving"]
        argv = [
            python or self.python, "-m", BENCH_SERVING_MODULE,
            "--backend", "sglang",
            "--base-url", base_url,
            "--dataset-name", s["dataset_name"],
            "--random-input-len", str(s["input_len"]),
            "--random-output-len", str(s["output_len"]),
            "--random-range-ratio", str(s["range_ratio"]),
            "--num-prompts", str(s["num_prompts"]),
            "--max-concurrency", str(s["max_concurrency"]),
            # Each repeat draws the same prompts: the repeats measure the server, not the sample.
            "--seed", str(s["seed"]),
            "--output-file", output_file,
            "--disable-tqdm",
        ]
        if self.client_data_files(benchmark):
            argv += ["--dataset-path", self.client_data_files(benchmark)[0]]
        if s.get("output_details"):
            argv.append("--output-details")
        argv += list(s.get("extra_args") or [])
        return argv

    def gsm8k_argv(self, benchmark: str, repeat: int, base_url: str, output_dir: str) -> List[str]:
        return [
            sys.executable, "-m", "specrepro.cli", "gsm8k", "--base-url", base_url, "--benchmark", benchmark,
            "--repeat", str(repeat), "--output-dir", output_dir,
            "--config", str(self.results_dir / "resolved_config.yaml"),
        ]

    def client_data_files(self, benchmark: str) -> List[str]:
        """Local files a benchmark's client reads next to the server (mounted read-only into its container): its
        dataset_path, or the ShareGPT file the datasets stage resolves for it."""
        from specrepro.datasets import needs_sharegpt

        bench = self.benchmark(benchmark)
        if bench["kind"] != "bench_serving":
            return []
        if bench["serving"].get("dataset_path"):
            return [bench["serving"]["dataset_path"]]
        return [bench["serving"]["sharegpt"]["path"]] if needs_sharegpt(bench["serving"]) else []

    def data_used(self, arm: str) -> List[str]:
        """The `data` entries the arm's benchmarks and model read."""
        names = {self.benchmark(b)["gsm8k"]["test_data"] for b in self.arm(arm)["benchmarks"]
                 if self.benchmark(b)["kind"] == "gsm8k"}
        if self.cfg["model"].get("toy"):
            names.add(self.cfg["model"]["toy"]["corpus"])
        return sorted(n for n in names if n in (self.cfg.get("data") or {}))

    def data_source(self, dataset: str) -> tuple:
        """(source, the config key a user sets) of a data file the campaign reads (config.data_sources)."""
        from specrepro.config import data_sources

        return data_sources(self.cfg)[dataset]

    @property
    def datasets(self) -> List[str]:
        """The names of every data file the campaign reads: its records under results/<campaign>/datasets/."""
        from specrepro.config import data_sources

        return sorted(data_sources(self.cfg))

    def datasets_for_arm(self, arm: str) -> List[str]:
        """The dataset records an arm's measuring job waits for (fetched and verified on the submit host)."""
        return [str(self.results_dir / "datasets" / f"{b}.json") for b in dict.fromkeys(self.arm(arm)["benchmarks"])
                if b in self.datasets]

    # --- GPU check -------------------------------------------------------------
    def gpu_check_runs(self, arm: str) -> bool:
        """Whether the arm's measuring job waits for a GPU check: the mode allows it and some series it is checked
        against (its own, or every series for an unpatched arm) declares GPU checks."""
        from specrepro.gpu_check import series_checked_on

        mode = self.cfg["gpu_check"]["enabled"]
        allowed = mode == "always" or (mode == "auto" and self.cfg["platform"]["accelerator"] != "none")
        return allowed and bool(series_checked_on(self, arm))

    def gpu_check_for_arm(self, arm: str) -> List[str]:
        return [str(self.results_dir / "gpu_check" / arm / "verdict.json")] if self.gpu_check_runs(arm) else []

    def gpu_check_files(self, arm: str) -> List[str]:
        """The files of the GPU checks the arm runs, for rerun triggers."""
        from specrepro.gpu_check import series_checked_on

        return [f for e in series_checked_on(self, arm) for f in self.check_files(e["series"], "gpu")]

    def gpu_check_key(self, arm: str) -> Dict[str, Any]:
        from specrepro.gpu_check import series_checked_on

        return {"gpu_check": self.cfg["gpu_check"], "platform": self.cfg["platform"]["name"],
                "series": self.series_of(arm), "ref": self.ref_of(arm),
                "checks": {e["series"]: [c for c in e["spec"]["checks"] if c["where"] == "gpu"]
                           for e in series_checked_on(self, arm)}}

    # --- what determines a measurement ---------------------------------------
    def measurement_key(self, arm: str) -> Dict[str, Any]:
        """Everything that determines what an arm measures (not where results are stored).

        Its hash keys every run record: a record is reused only under the same key.
        """
        # timeouts and plan's cost figures decide nothing a server measures
        serve = {k: v for k, v in self.cfg["serve"].items()
                 if k not in ("ready_timeout_s", "request_timeout_s", "shutdown_grace_s", "bench_timeout_s",
                              "expected_load_s", "expected_tpot_ms", "expected_tpot_growth")}
        return {
            "sglang": {k: self.cfg["sglang"][k] for k in ("version", "git_ref")},
            "sglang_ref": self.ref_of(arm),
            "patch_series": self.series_key(arm),
            "server_args": self.server_args(arm),
            # a sweep cell's settings carry its levels; its name and base say nothing more
            "benchmarks": {b: {k: v for k, v in self.benchmark(b).items() if k not in ("cell", "headline")}
                           for b in self.arm(arm)["benchmarks"]},
            "repeats": {b: self.repeats(b) for b in self.arm(arm)["benchmarks"]},
            "serve": serve,
            "offline": self.cfg.get("offline", False),
            "platform": {k: v for k, v in self.cfg["platform"].items() if k not in ("mounts", "runtime_command")},
            "model_gpus": self.cfg["model"]["gpus"],
            # a model the pipeline builds: its recipe is part of what is measured
            "model_toy": self.cfg["model"].get("toy"),
            # the data files by content (their path says nothing of what was measured)
            "data": {name: (self.cfg["data"][name].get("sha256") or name) for name in self.data_used(arm)},
        }

    def series_key(self, arm: str) -> Optional[Dict[str, Any]]:
        """The arm's series by content (its patches' sha256): what it measures, wherever the folder is."""
        from specrepro.series import content_key

        series = self.series_of(arm)
        return content_key(self.series_spec(series)) if series else None

    def run_key(self, arm: str, benchmark: str, image_id: str = "") -> str:
        """The key of one benchmark's records of an arm: the server command, the image it ran
        (by ID: a re-pushed base tag re-measures), the benchmark's settings, the platform."""
        key = self.measurement_key(arm)
        key["benchmarks"] = {benchmark: key["benchmarks"][benchmark]}
        key.pop("repeats")
        key["image_id"] = image_id
        return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]

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

    def warnings(self) -> List[str]:
        """Known hazards of this campaign's setup, as data; `plan` prints them."""
        out = []
        args = self.cfg["model"]["server_args"]
        if self.cfg["platform"]["accelerator"] == "rocm" and str(args.get("speculative_algorithm", "")).startswith("EAGLE"):
            for arm in self.arms:
                if self.server_args(arm).get("disable_custom_all_reduce"):
                    continue
                for b in self.arm(arm)["benchmarks"]:
                    bench = self.benchmark(b)
                    conc = bench["gsm8k"]["parallel"] if bench["kind"] == "gsm8k" else bench["serving"]["max_concurrency"]
                    if conc >= 16:
                        out.append(f"arm {arm}, benchmark {b}: EAGLE on ROCm at client concurrency {conc} can deadlock "
                                   f"in aiter's custom all-reduce (sglang issue 29313); add "
                                   f"--disable-custom-all-reduce (model.server_args.disable_custom_all_reduce=true)")
        return out

    def planned_server_command(self, arm: str) -> str:
        from specrepro.launch import Launcher, planned_context

        return shlex.join(Launcher(self, arm).server_argv(planned_context(self, arm)))

    def describe_plan(self) -> str:
        """Per arm: the server command and every benchmark command, exactly as they run.

        Values known only at launch are symbols: $PORT (a free port), $GPU<i>
        (the GPUs the job is granted), $IMAGE (the image the image stage resolved),
        $USER (the caller's uid:gid), $LAUNCH (the launch id).
        """
        from specrepro.launch import Launcher, planned_context

        lines = [
            f"# campaign {self.name}: sglang {self.cfg['sglang']['version']} ({self.cfg['sglang']['git_ref']}), "
            f"model {self.cfg['model']['name']}, platform {self.cfg['platform']['name']} "
            f"({self.cfg['platform']['container_runtime']})",
            f"# results: {self.results_dir}",
            "# $PORT: a free port; $GPU<i>: the GPUs the job is granted; $IMAGE: the image the image stage resolved; "
            "$USER: the caller's uid:gid; $LAUNCH: the launch id",
        ]
        for arm in self.arms:
            spec = self.arm(arm)
            launcher = Launcher(self, arm)
            ctx = planned_context(self, arm)
            lines.append("")
            lines.append(f"## arm {arm}: {spec.get('description', '')}")
            lines.append(f"#  sglang ref {self.ref_of(arm)}, patch series {self.series_of(arm) or 'none'}")
            if self.gpu_check_runs(arm):
                from specrepro.gpu_check import series_checked_on

                named = ", ".join(f"{e['series']}: {', '.join(c['name'] for c in e['spec']['checks'] if c['where'] == 'gpu')}"
                                  for e in series_checked_on(self, arm))
                lines.append(f"#  gpu_check first (one GPU, in this arm's image; {named}; "
                             f"{'a failure stops this arm' if self.series_of(arm) else 'as the control of each series'})")
            lines.append("server: " + shlex.join(launcher.server_argv(ctx)))
            for run in self.bench_runs(arm):
                out = str(self.arm_dir(arm) / run.stem)
                lines.append(f"bench {run.benchmark} r{run.repeat}: " + shlex.join(launcher.client_argv(ctx, run, out)))
        lines += ["", *self.describe_treatments(), *self.describe_launches(), "", *self.describe_decidability()]
        return "\n".join(lines)

    def describe_launches(self) -> List[str]:
        """How many server launches the campaign costs, in which order they run, and what it costs in all."""
        n = len(self.arms) * self.launches
        load = float(self.cfg["serve"].get("expected_load_s") or 0)
        cost = campaign_cost(self.cfg)
        budget = self.experiment.get("max_gpu_hours")
        lines = [f"## launches: {self.launches} per arm, {n} in all; loading costs about {n} x {load:.0f} s = "
                 f"{n * load / 60:.0f} min (serve.expected_load_s) before any measurement",
                 f"## cost: {cost['requests']} requests; about {cost['seconds'] / 3600:.2f} h of server time x "
                 f"{cost['gpus']} GPUs = {cost['gpu_hours']:.2f} GPU-hours (serve.expected_load_s, "
                 f"serve.expected_tpot_ms at concurrency 1, +{self.cfg['serve']['expected_tpot_growth']:.0%} a "
                 f"step per extra request); budget "
                 + (f"{budget:g} GPU-hours (experiment.max_gpu_hours)" if budget is not None else
                    "none (experiment.max_gpu_hours)")]
        if self.launches > 1:
            lines.append("order (interleaved; verdicts use the between-launch noise): "
                         + " ".join(f"{a}#{k}" for a, k in self.launch_order()))
        return lines

    def describe_treatments(self) -> List[str]:
        """The sweep's treatment table: per arm cell and benchmark cell, its levels, launch, requests and time."""
        from specrepro.sweep import factors_of, level_text, treatment_table

        factors = factors_of(self.cfg)
        if not factors:
            return []
        kinds = {f: ("server: " + v["server"]) if v.get("server") else
                 "client: " + ", ".join(f"{k}.{s}" for k, s in v["client"].items()) for f, v in factors.items()}
        lines = ["## treatments: " + "; ".join(f"{f} {[*v['levels']]} ({kinds[f]})" for f, v in factors.items()),
                 "# client factors run on the arm's one warm server; each server level is a launch of its own",
                 f"{'arm':<34} {'benchmark':<30} " + " ".join(f"{f:>12}" for f in factors)
                 + f" {'launch':>7} {'requests':>9} {'minutes':>8}"]
        launches = {a: i for i, a in enumerate(self.arms, 1)}
        for row in treatment_table(self.cfg):
            one = run_cost(self.benchmark(row["benchmark"]), self.cfg["serve"])
            reps = self.repeats(row["benchmark"]) * self.launches
            levels = " ".join(f"{level_text(row['levels'][f]) if f in row['levels'] else '-':>12}" for f in factors)
            lines.append(f"{row['arm']:<34} {row['benchmark']:<30} {levels} {launches[row['arm']]:>7} "
                         f"{one['requests'] * reps:>9} {one['seconds'] * reps / 60:>8.1f}")
        lines.append("")
        return lines

    def baseline_of(self, levels: Optional[Dict[str, Any]] = None) -> str:
        """The baseline arm (at the server levels given, where a server factor splits it into cells)."""
        from specrepro.sweep import resolve_arm

        base = self.experiment["baseline_arm"]
        return base if base in self.experiment["arms"] else (resolve_arm(self.cfg, base, levels or {}) or base)

    def claims(self) -> List[Dict[str, Any]]:
        """The claims judged: the file's, less experiment.skip_claims, each swept one once per level."""
        from specrepro.analysis.claims import load_claims
        from specrepro.sweep import claims_per_level

        skip = set(self.experiment.get("skip_claims") or [])
        return claims_per_level([c for c in load_claims(self.claims_path) if c["id"] not in skip], self.cfg)

    def runs_without_record(self, arm: str, launch: Optional[int] = None) -> List[str]:
        """The runs of this arm (and launch) that have no run record on disk."""
        return [r.stem for r in self.bench_runs(arm, launch) if not (self.arm_dir(arm) / r.stem / "run.json").is_file()]

    def runs_to_remeasure(self, arm: str, launch: Optional[int] = None) -> List[str]:
        """The serving job's rerun trigger (a Snakemake param): the runs whose record is gone, else what the job's
        last record says was gone when it started.

        Run records are not Snakemake outputs (a failed job must not take measured runs with it), so a removed one
        is invisible to Snakemake's file checks.  The value is the same before and after the job that measures
        them, so that job is the only rerun: a removed cell is measured once, alone, on one launch.
        """
        missing = self.runs_without_record(arm, launch)
        record = self.arm_dir(arm) / ("launches" if launch else "") / (f"{launch}.json" if launch else "arm.json")
        if missing or not record.is_file():
            return missing
        try:
            return list(json.loads(record.read_text()).get("missing_at_start") or [])
        except (OSError, ValueError):
            return missing

    def decidability(self) -> List[Dict[str, Any]]:
        """Per judged claim: the smallest effect this configuration can resolve (analysis.checks.decidability,
        the analysis's own noise computation fed with the published repeats and the priors)."""
        from specrepro.analysis.checks import decidability

        n = {b: self.repeats(b) for b in self.cfg["benchmarks"]}
        return decidability(self.claims(), self.cfg["benchmarks"], n,
                            self.experiment.get("reference") or {}, self.experiment.get("reference_repeats") or {},
                            self.cfg["analysis"], launches=self.launches)

    def describe_decidability(self) -> List[str]:
        lines = ["## decidability: the smallest relative effect each claim's 95% interval resolves (each arm: "
                 "its repeats' spread and, with one launch, the between-launch prior; Welch's degrees of freedom; "
                 "distinct questions for proportions)"]
        for d in self.decidability():
            if d.get("resolvable") is None:
                lines.append(f"claim {d['id']}: {d['note']}")
                continue
            expected = f", published effect {d['expected']:+.1%}" if d.get("expected") is not None else ""
            questions = f", {d['questions']} questions" if d.get("questions") else ""
            floor = f"floor {d['floor']:.2%} from {d['floor_source']}" if d.get("floor") is not None else "no floor"
            prior = (f", prior {d['prior']:.1%} between launches" if d.get("prior") and self.launches == 1 else "")
            lines.append(f"claim {d['id']} ({d['benchmark']} {d['metric']}, {d['expect']}): resolves "
                         f"+-{d['resolvable']:.1%} ({floor}{prior}, {d['repeats']} repeats x {self.launches} "
                         f"launch{'es' if self.launches > 1 else ''}{questions}){expected}")
            if d.get("warning"):
                lines.append(f"WARNING: claim {d['id']}: {d['warning']}")
        return lines
