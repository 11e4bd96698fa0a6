"""One arm resolved once: everything its jobs need, as plain immutable values.

`arm_plans(cfg)` builds the plan of every arm from the composed config, once per process: the Snakefile at parse
time, `specrepro plan`, and each stage script for its own arm.  A stage then hands its plan down (the launcher, the
preflight, the GPU facts and checks, the server, the benchmark clients): nothing below asks for the config again by
the arm's name.  The plan holds the arm's sglang ref and patch series, its merged server arguments and the flags they
render to, the Python that serves it, its runs and the keys that say what each measures, the data its clients read,
its paths inside and outside the container, and the platform and serve settings it launches with.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any, Dict, List, Mapping, Optional, Tuple

from specrepro.benchmarks import BenchmarkKind, ClientCall, ClientStep, kind_named, kind_of, settings_blocks
from specrepro.core.cost import repeats_of
from specrepro.core.layout import Layout
from specrepro.core.rounds import max_launches
from specrepro.upstream.sglang_flags import load_table, owned_argv, render_flags, requested_fields
from specrepro.core.series import content_key, load_series, series_folder
from specrepro.upstream.sglang_env import env_dir

SERVER_MODULE = "sglang.launch_server"
# serve settings that decide nothing a server measures (timeouts, plan's cost figures)
UNMEASURED_SERVE = ("ready_timeout_s", "request_timeout_s", "shutdown_grace_s", "idle_shutdown_grace_s", "bench_timeout_s",
                    "crash_settle_s", "expected_load_s", "expected_tpot_ms", "expected_tpot_growth")


def frozen(value: Any) -> Any:
    """A read-only copy: mappings become MappingProxyType, lists tuples, all the way down."""
    if isinstance(value, Mapping):
        return MappingProxyType({k: frozen(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(frozen(v) for v in value)
    return value


def thawed(value: Any) -> Any:
    """Plain dicts and lists again (JSON, YAML, hashing)."""
    if isinstance(value, Mapping):
        return {k: thawed(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [thawed(v) for v in value]
    return value


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


@dataclass(frozen=True)
class ArmPlan:
    name: str
    campaign: str
    description: str
    sglang_version: str
    ref: str
    # the campaign's pinned release (its tree is what `plan` resolves arguments against)
    pinned_ref: str
    series: Optional[str]
    # the series' patches by content: what the arm measures, wherever the folder is
    series_key: Optional[Mapping[str, Any]]
    # the model's arguments, then the platform's, then the arm's own
    server_args: Mapping[str, Any]
    # those arguments rendered as sglang's flags (canonical names), and the flags specrepro owns per launch
    arm_flags: Tuple[str, ...]
    owned_flags: Tuple[str, ...]
    # the arguments by ServerArgs field, as /server_info must report them back
    requested_fields: Mapping[str, Any]
    python: str
    benchmarks: Mapping[str, Mapping[str, Any]]
    # benchmark -> its kind (specrepro.benchmarks)
    kinds: Mapping[str, BenchmarkKind]
    runs: Tuple[BenchRun, ...]
    launches: int
    # benchmark -> local files its client reads next to the server (mounted read-only)
    client_data: Mapping[str, Tuple[str, ...]]
    # data entries (data.<name>) the arm's host-side clients read: name -> source
    data: Mapping[str, Mapping[str, Any]]
    measurement_key: Mapping[str, Any]
    layout: Layout
    platform: Mapping[str, Any]
    serve: Mapping[str, Any]
    preflight: Mapping[str, Any]
    gpu_check: Mapping[str, Any]
    model_gpus: int
    offline: bool
    cache_dir: str
    project_root: str

    # --- where things are -------------------------------------------------------------------
    @property
    def arm_dir(self) -> Path:
        return Path(self.layout.arm_dir(self.name))

    @property
    def image_record(self) -> str:
        return self.layout.image(self.name)

    @property
    def resolved_config(self) -> str:
        return self.layout.resolved_config()

    @property
    def patch_check_verdicts(self) -> List[str]:
        """A patched arm waits for (and is gated by) its series' patch_check verdict."""
        return [self.layout.patch_check(self.ref, self.series)] if self.series else []

    @property
    def container_runtime(self) -> str:
        return self.platform["container_runtime"]

    @property
    def gpus_needed(self) -> int:
        """GPUs one server needs on this platform (none without an accelerator)."""
        return self.model_gpus if self.platform["accelerator"] != "none" else 0

    # --- runs and their keys -----------------------------------------------------------------
    def runs_of(self, launch: Optional[int] = None) -> List[BenchRun]:
        """The arm's runs (of one launch when given; with one launch per arm, launch 0)."""
        return [r for r in self.runs if not launch or r.launch == int(launch)]

    def runs_without_record(self, launch: Optional[int] = None) -> List[str]:
        return [r.stem for r in self.runs_of(launch) if not (self.arm_dir / r.stem / "run.json").is_file()]

    def run_key(self, benchmark: str, image_id: str = "") -> str:
        """The key of one benchmark's records of the arm: the server command, the image it ran (by ID: a re-pushed
        base tag re-measures), the benchmark's settings, the platform."""
        key = thawed(self.measurement_key)
        key["benchmarks"] = {benchmark: key["benchmarks"][benchmark]}
        key.pop("repeats")
        key["image_id"] = image_id
        return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]

    # --- command lines -----------------------------------------------------------------------
    def server_flags(self, port: Any) -> List[str]:
        return [*self.arm_flags, "--host", self.serve["host"], "--port", str(port), *self.owned_flags]

    def kind(self, benchmark: str) -> BenchmarkKind:
        """The benchmark's kind (looked up once, when the plan was built)."""
        return self.kinds[benchmark]

    def settings(self, benchmark: str) -> Mapping[str, Any]:
        """The benchmark's settings block (its kind's)."""
        return self.benchmarks[benchmark][self.kinds[benchmark].block]

    def client_step(self, run: BenchRun, base_url: str, out_dir: str, python: Optional[str] = None) -> ClientStep:
        """One repeat's client: its argv and whether it runs beside the server."""
        call = ClientCall(benchmark=run.benchmark, repeat=run.repeat, base_url=base_url, out_dir=out_dir,
                          serving_python=python or self.python, host_python=sys.executable,
                          resolved_config=self.resolved_config,
                          data_files=tuple(self.client_data.get(run.benchmark) or ()))
        return self.kind(run.benchmark).client_step(self.settings(run.benchmark), call)

def merged_server_args(cfg: Dict[str, Any], arm: Dict[str, Any]) -> Dict[str, Any]:
    """The model's arguments, then the platform's (device, backends), then the arm's own."""
    return {**cfg["model"]["server_args"], **(cfg["platform"].get("server_args") or {}),
            **(arm.get("extra_server_args") or {})}


def serving_python(cfg: Dict[str, Any]) -> str:
    """The Python that serves and runs the clients: the platform's, or the venv the pipeline builds for it."""
    plat = cfg["platform"]
    if plat.get("python_env"):

        return str(env_dir(Path(cfg["cache_dir"]), Path(cfg["project_root"]) / "requirements" / plat["python_env"])
                   / "bin" / "python")
    return plat["python"]


def client_data_files(bench: Dict[str, Any], data: Dict[str, Any]) -> List[str]:
    """Local files a benchmark's client reads next to the server (its kind says which)."""
    kind = kind_of(bench)
    return kind.client_data_files(bench[kind.block], data)


def arm_runs(name: str, benchmarks: List[str], cfg: Dict[str, Any]) -> List[BenchRun]:
    launches = max_launches(cfg["experiment"].get("launches"))
    numbers = [0] if launches == 1 else range(1, launches + 1)
    return [BenchRun(name, b, r, lt) for lt in numbers for b in benchmarks for r in range(1, repeats_of(cfg, b) + 1)]


def build_arm_plan(cfg: Dict[str, Any], name: str, table=None) -> ArmPlan:
    arm = cfg["experiment"]["arms"][name]
    table = table or load_table(cfg["sglang"]["version"], Path(cfg["cache_dir"]))
    series = arm.get("patch_series")
    args = merged_server_args(cfg, arm)
    benchmarks = {b: cfg["benchmarks"][b] for b in dict.fromkeys(arm["benchmarks"])}
    kinds = {b: kind_of(v, b) for b, v in benchmarks.items()}
    settings_block_names = {k.block for k in settings_blocks()}
    data_names = {name for b, v in benchmarks.items() for _, name in kinds[b].data_entries(v[kinds[b].block])}
    if cfg["model"].get("toy"):
        data_names.add(cfg["model"]["toy"]["corpus"])
    data = {n: cfg["data"][n] for n in sorted(data_names) if n in (cfg.get("data") or {})}
    series_key = content_key(load_series(series_folder(cfg, series))) if series else None
    ref = arm.get("sglang_ref") or cfg["sglang"]["git_ref"]
    measurement_key = {
        "sglang": {k: cfg["sglang"][k] for k in ("version", "git_ref")},
        "sglang_ref": ref,
        "patch_series": series_key,
        "server_args": args,
        # a sweep cell's settings carry its levels; its name, base and headline say nothing more, and the blocks
        # of other kinds are empty (left out, so that registering a kind changes no key)
        "benchmarks": {b: {k: v for k, v in bench.items() if k not in ("cell", "headline")
                           and not (k in settings_block_names and v is None)}
                       for b, bench in benchmarks.items()},
        "repeats": {b: repeats_of(cfg, b) for b in benchmarks},
        "serve": {k: v for k, v in cfg["serve"].items() if k not in UNMEASURED_SERVE},
        "offline": cfg.get("offline", False),
        "platform": {k: v for k, v in cfg["platform"].items() if k not in ("mounts", "runtime_command")},
        "model_gpus": cfg["model"]["gpus"],
        # a model the pipeline builds: its recipe is part of what is measured
        "model_toy": cfg["model"].get("toy"),
        # the data files by content (their path says nothing of what was measured)
        "data": {n: (source.get("sha256") or n) for n, source in data.items()},
    }
    return ArmPlan(
        name=name, campaign=cfg["experiment"]["name"], description=arm.get("description", ""),
        sglang_version=cfg["sglang"]["version"], ref=ref, pinned_ref=cfg["sglang"]["git_ref"], series=series,
        series_key=frozen(series_key),
        server_args=frozen(args), arm_flags=tuple(render_flags(args, table)),
        owned_flags=tuple(owned_argv(cfg["serve"])),
        requested_fields=frozen(requested_fields(args, table, cfg["serve"])), python=serving_python(cfg),
        benchmarks=frozen(benchmarks), kinds=MappingProxyType(kinds), runs=tuple(arm_runs(name, list(benchmarks), cfg)),
        launches=max_launches(cfg["experiment"].get("launches")),
        client_data=frozen({b: client_data_files(v, cfg.get("data") or {}) for b, v in benchmarks.items()}),
        data=frozen(data),
        measurement_key=frozen(measurement_key), layout=Layout(Path(cfg["results_dir"])),
        platform=frozen(cfg["platform"]), serve=frozen(cfg["serve"]), preflight=frozen(cfg["preflight"]),
        gpu_check=frozen(cfg["gpu_check"]), model_gpus=int(cfg["model"]["gpus"]), offline=bool(cfg.get("offline")),
        cache_dir=str(cfg["cache_dir"]), project_root=str(cfg["project_root"]))


def arm_plans(cfg: Dict[str, Any]) -> Dict[str, ArmPlan]:
    """Every arm's plan, in the experiment's order."""
    table = load_table(cfg["sglang"]["version"], Path(cfg["cache_dir"]))
    return {name: build_arm_plan(cfg, name, table) for name in cfg["experiment"]["arms"]}


def plan_as_params(plan: ArmPlan) -> Dict[str, Any]:
    """The plan as plain values, for a Snakemake `params:` entry: a job's script gets the plan the Snakefile built
    (`plan_from_params`) instead of the whole config to build it again.  Plain, so Snakemake can pickle it into the
    script and compare it for its params rerun trigger."""
    out = {f.name: thawed(getattr(plan, f.name)) for f in fields(plan)}
    out["runs"] = [asdict(r) for r in plan.runs]
    out["layout"] = str(plan.layout.root)
    # by name: an object's repr carries its address, which Snakemake's params trigger would read as a change
    out["kinds"] = {b: kind.name for b, kind in plan.kinds.items()}
    return out


def plan_from_params(params: Mapping[str, Any]) -> ArmPlan:
    values = {f.name: frozen(params[f.name]) for f in fields(ArmPlan)}
    values["runs"] = tuple(BenchRun(**r) for r in params["runs"])
    values["layout"] = Layout(Path(params["layout"]))
    values["kinds"] = MappingProxyType({b: kind_named(name) for b, name in params["kinds"].items()})
    return ArmPlan(**values)
