"""Structured-config schemas for every Hydra config group.

The YAML files under conf/ hold the values; these dataclasses hold the types,
so OmegaConf rejects a wrong type or an unknown key while composing, naming the
full key.  Values that a campaign must supply are MISSING here.
"""

from __future__ import annotations

from dataclasses import dataclass, field, make_dataclass
from enum import Enum
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from specrepro.benchmarks import settings_blocks
from specrepro.benchmarks.base import DataSource


class Accelerator(Enum):
    rocm = "rocm"
    cuda = "cuda"
    none = "none"


class ImageDistribution(Enum):
    # only the build context travels; the node brings the base by digest and builds the patch layer, held to the
    # build host's applied record
    layer = "layer"
    # a full `save` under cache_dir/images, loaded on the GPU node when missing there
    archive = "archive"
    # one host builds and runs
    node = "node"


class BaseDistribution(Enum):
    # by the base's repository digest
    pull = "pull"
    archive = "archive"


class SourceMethod(Enum):
    # git where reachable, else the package registry's release
    auto = "auto"
    git = "git"
    registry = "registry"


class Placement(Enum):
    # one measuring arm per node at a time
    exclusive = "exclusive"
    # arms share a node (GPUs permitting): recorded with every result and flagged as a noise risk
    packed = "packed"


class GpuCheckMode(Enum):
    # the GPU checks the arms' series declare, on every arm of a platform with an accelerator
    auto = "auto"
    # also on a CPU, where a probe reports what it could not execute
    always = "always"
    never = "never"


class Multiplicity(Enum):
    # Holm's step-down over every claim judged
    holm = "holm"
    none = "none"


@dataclass
class ToyModelConfig:
    # Folder the pair is written to: target/, draft/, theory.json (server_args point inside it).
    dir: str = MISSING
    seed: int = 0
    vocab_size: int = 361
    hidden: int = 64
    # Logit of the next token is sharpness * cos(...): 8 gives P(argmax) about 0.8-0.86 at T=1.
    sharpness: float = 8.0
    # Text the tokenizer is trained on: the name of a `data` entry (a GSM8K-style JSONL of questions and answers).
    corpus: str = "gsm8k"
    # The text every prompt of the campaign ends with: its last token is left open, so the prompt (the words before
    # it) decides the first output token and greedy outputs differ between prompts; "" leaves none.
    prompt_end: str = ""


@dataclass
class ModelConfig:
    # Short name used in run names and result paths.
    name: str = MISSING
    # sglang server flags as field names (`tp_size`, `speculative_num_steps`);
    # every key is checked against the pinned sglang's declared flags.
    server_args: Dict[str, Any] = field(default_factory=dict)
    # Accelerators one server of this model needs (placement and GPU requests).
    gpus: int = MISSING
    # Where this checkpoint runs (rocm, cuda): a platform of another kind is refused.
    accelerators: List[str] = field(default_factory=lambda: ["rocm", "cuda"])
    # What an offline cluster must provide for this model (docs only).
    notes: str = ""
    # A model the pipeline builds itself (no download): `specrepro toy-model`'s pair.
    toy: Optional[ToyModelConfig] = None
    # Metrics this model cannot speak to (metric -> why): shown, never judged.
    unjudged_metrics: Dict[str, str] = field(default_factory=dict)


@dataclass
class PlatformConfig:
    name: str = MISSING
    accelerator: Accelerator = MISSING
    gpu_model: Optional[str] = None
    gpu_arch: Optional[str] = None
    gpus_per_node: int = 0
    # a runtime of specrepro.runtimes (docker, podman, apptainer, pyxis; none: a bare process on the node), checked
    # against its registry by config validation: a new runtime is a module there, not a value here
    container_runtime: str = "none"
    # How to call the runtime (e.g. [podman, --root, /scratch/podman] or a full path); None: its name.
    runtime_command: Optional[List[str]] = None
    # Base image to patch; `{version}` is the pinned sglang version.  Resolved to
    # a digest once per campaign; every arm runs that digest.
    base_image: Optional[str] = None
    # Where the base image has sglang installed (editable checkout).
    image_sglang_root: Optional[str] = None
    # How a patched image reaches the node that runs it (docker/podman).  apptainer and pyxis images are single files
    # on the shared filesystem either way.
    image_distribution: ImageDistribution = ImageDistribution.archive
    # How the base image reaches GPU nodes.
    base_distribution: BaseDistribution = BaseDistribution.pull
    # Node-local folder for the locks that serialise image loads on one node.
    node_lock_dir: str = "/tmp"
    # Extra arguments for the container runtime's run command (ipc, shm, security).
    runtime_run_args: List[str] = field(default_factory=list)
    # Device files every GPU container gets (ROCm: the KFD compute interface).
    gpu_shared_devices: List[str] = field(default_factory=list)
    # Device file of one granted GPU; `{index}` is the GPU's index on the node,
    # `{render}` its DRI render minor as the node's KFD topology says (specrepro.measure.node_facts).
    # None: the runtime's own GPU selection (docker --gpus, podman CDI, apptainer/pyxis env).
    gpu_device_pattern: Optional[str] = None
    # Where the node's sysfs is (the KFD topology is read under it); tests point it at captured trees.
    node_root: str = "/"
    # One host without a scheduler: with no grant variable set and no serve.gpus, a job takes the node's GPUs as its
    # own table lists them (specrepro.measure.node_facts: nvidia-smi / procfs, the KFD topology), the first model.gpus.
    gpus_from_node: bool = False
    # Environment variables that name the GPUs a job was granted, in the order read.
    gpu_grant_env: List[str] = field(default_factory=lambda: ["SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "ROCR_VISIBLE_DEVICES",
                                                               "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"])
    # Extra bind mounts, `host[:container][:ro]`, for every container of the campaign.
    mounts: List[str] = field(default_factory=list)
    # JIT caches kept across launches (Triton, inductor, aiter): env name ->
    # folder under cache_dir/compile/<image id>, mounted read-write.
    compile_cache_env: Dict[str, str] = field(default_factory=dict)
    # Host folder of the model hub cache (HF_HOME), mounted read-write; None: not mounted.
    hf_home: Optional[str] = None
    # Environment for the server process (never secrets: those come from the
    # caller's environment and are passed by name only).
    server_env: Dict[str, str] = field(default_factory=dict)
    # Names of environment variables passed through to servers (HF_TOKEN, ...).
    passthrough_env: List[str] = field(default_factory=list)
    # Python used to launch sglang and its benchmark client (inside the
    # image, or the local environment that holds sglang's dependencies).
    python: str = "python3"
    # How a server starts; `{python}` is replaced.  A wrapper (numactl, a
    # profiler) goes in front; the arm's flags are appended.
    server_command: List[str] = field(default_factory=lambda: ["{python}", "-m", "sglang.launch_server"])
    # Server arguments every arm on this platform gets (device, backends); an arm's own win.
    server_args: Dict[str, Any] = field(default_factory=dict)
    # No container: folders put on the server's PYTHONPATH after the arm's sglang tree.
    pythonpath: List[str] = field(default_factory=list)
    # No container: a requirements file under requirements/ the pipeline builds a venv from
    # (cached under cache_dir/envs); its Python serves and runs the clients.  None: `python` as is.
    python_env: Optional[str] = None
    # No container and no pipeline-built venv: modules the caller's own environment (`python`) must import with the
    # arm's sglang tree first on PYTHONPATH (sglang's server), checked with torch's accelerator build and Triton by
    # each arm's image job, before any server starts (specrepro.stages.preflight.environment_check); []: not checked.
    environment_imports: List[str] = field(default_factory=list)
    # Metrics this platform cannot speak to (metric -> why): shown, never judged.
    unjudged_metrics: Dict[str, str] = field(default_factory=dict)
    # Platform facts the launch itself establishes for sglang (sglang.srt.runtime_context names), applied
    # when sglang resolves the arms' arguments before launch (plan, preflight).
    sglang_platform_facts: Dict[str, Any] = field(default_factory=dict)
    # What serves on this platform, in a few words, for the report's first line ("" on a GPU platform,
    # where the measured GPU facts say it).
    what_runs: str = ""


@dataclass
class SglangConfig:
    version: str = MISSING
    git_url: str = "https://github.com/sgl-project/sglang.git"
    git_ref: str = MISSING
    source: SourceMethod = SourceMethod.auto


@dataclass
class PatchEntry:
    # Exactly one of path (relative to the series folder) / url (fetched once, held to its sha256).
    path: Optional[str] = None
    url: Optional[str] = None
    sha256: Optional[str] = None


class CheckWhere(Enum):
    # once per series, on CPU tensors, before any image is built
    cpu = "cpu"
    # on one GPU inside each arm's image, before its server starts
    gpu = "gpu"


class SeriesTree(Enum):
    patched = "patched"
    unpatched = "unpatched"
    # the upstream release `reference_sglang` names
    reference = "reference"


@dataclass
class SeriesCheck:
    """One of a series' own checks: a probe run per tree (or per arm, on a GPU) and a judge over the records
    (the protocol: patches/README.md)."""

    name: str = MISSING
    where: CheckWhere = CheckWhere.cpu
    # Paths relative to the series folder.
    probe: str = MISSING
    judge: str = MISSING
    # CPU checks: the trees the probe runs on.
    trees: List[SeriesTree] = field(default_factory=lambda: [SeriesTree.patched, SeriesTree.unpatched])
    # Appended to the probe's command line.
    args: List[str] = field(default_factory=list)
    timeout_s: float = 1800.0


@dataclass
class SeriesSpec:
    """patches/<series>/series.yaml: one change under test, with everything that belongs to it."""

    # The change in its own words (report, MLflow).
    title: str = MISSING
    description: str = ""
    # Where the change comes from: a file in the series folder (its PR text) or a URL.
    source: str = ""
    # Applied in order to the pinned sglang, all or nothing, no fuzz.
    patches: List[PatchEntry] = MISSING
    # An upstream sglang release that carries the change: the behavioural reference of its CPU checks.
    reference_sglang: Optional[str] = None
    checks: List[SeriesCheck] = field(default_factory=list)


@dataclass
class CellOf:
    # A sweep cell (written by specrepro.core.sweep, never by hand): the benchmark or arm it was made from, and the
    # level of each factor that made it.
    base: str = MISSING
    levels: Dict[str, Any] = field(default_factory=dict)


@dataclass
class HeadlineTable:
    # The metrics of the benchmark's headline table, in order; empty: those its claims name.
    metrics: List[str] = field(default_factory=list)
    # Said beside the table's title, in the experiment's words ("accept length is the metric the change moves").
    note: str = ""


def benchmark_config_class() -> type:
    """A benchmark's schema: its kind (a registered kind's name: config.validate names the key and the kinds), and
    one optional settings block per registered kind (specrepro.benchmarks), so a new kind never edits this file."""
    blocks = [(kind.block, Optional[kind.settings_class], None) for kind in settings_blocks()]
    cls = make_dataclass("BenchmarkConfig", [
        ("kind", str, MISSING),
        # None: experiment.repeats
        ("repeats", Optional[int], None),
        *blocks,
        ("cell", Optional[CellOf], None),
        # How the report shows it (no part of what is measured).
        ("headline", HeadlineTable, field(default_factory=HeadlineTable)),
    ])
    cls.__module__ = __name__
    return cls


BenchmarkConfig = benchmark_config_class()


@dataclass
class ArmConfig:
    description: str = ""
    # None: sglang.git_ref
    sglang_ref: Optional[str] = None
    # Name of an entry in experiment.patch_series, or None for unpatched.
    patch_series: Optional[str] = None
    extra_server_args: Dict[str, Any] = field(default_factory=dict)
    benchmarks: List[str] = field(default_factory=list)
    cell: Optional[CellOf] = None


@dataclass
class FactorConfig:
    # The values the factor takes, in the order the report shows them.
    levels: List[Any] = MISSING
    # A client factor: the setting it sets, per benchmark kind (gsm8k: parallel, bench_serving: max_concurrency);
    # benchmarks of other kinds are not swept by it.  Runs on the arm's one warm server.
    client: Dict[str, str] = field(default_factory=dict)
    # A server factor: the sglang server flag it sets (a ServerArgs field name); one launch per level.
    server: Optional[str] = None


@dataclass
class SweepConfig:
    # Factor name -> its levels and what it sets (conf/factor/ holds the usual ones).
    factors: Dict[str, FactorConfig] = field(default_factory=dict)
    # None: the full grid of every factor's levels; else the treatments to run, each {factor: level} naming
    # every factor.
    treatments: Optional[List[Dict[str, Any]]] = None


class VerifyRule(Enum):
    # the target's argmax decides each draft: sglang 0.5.20 on CPU, HIP and XPU, and any all-greedy batch
    greedy = "greedy"


@dataclass
class DraftTheory:
    """How an arm's draft proposes on one benchmark, for the accept length theory predicts (specrepro.core.theory)."""

    # The draft proposes at this multiple of the request's temperature: 0 is its argmax, 1 samples q at the
    # request's temperature (sglang rewrites temperature 0 to 1 with top_k 1, so a greedy request samples at 1).
    draft_temperature: float = MISSING
    # The first draft of a request's first verify step, proposed after its prefill by another code path; None: as
    # draft_temperature.
    first_draft_temperature: Optional[float] = None
    verify: VerifyRule = VerifyRule.greedy
    # Drafts per verify step; None: model.server_args.speculative_num_steps.
    steps: Optional[int] = None
    # P(a draft is accepted) at draft_temperature / first_draft_temperature; None: computed from the weights of a
    # model the pipeline builds (model.toy).
    acceptance: Optional[float] = None
    first_acceptance: Optional[float] = None


@dataclass
class ExperimentConfig:
    name: str = MISSING
    description: str = ""
    repeats: int = 3
    # Server launches per arm.  With 2 or more, each launch serves `repeats` of every benchmark, the
    # arms' launches run interleaved (A B C C B A ...), and verdicts use the between-launch noise.
    # A mapping {min: 2, max: 5} (optional step, spending: obrien_fleming | pocock | power, rho) is a
    # sequential design: rounds of launches until every claim is decided (specrepro.core.rounds).
    launches: Any = 1
    baseline_arm: str = MISSING
    arms: Dict[str, ArmConfig] = field(default_factory=dict)
    # Series name -> its folder (patches/<series>/, with series.yaml); arms name the series.
    patch_series: Dict[str, str] = field(default_factory=dict)
    # Published figures: arm -> benchmark -> metric -> value.
    reference: Dict[str, Dict[str, Dict[str, float]]] = field(default_factory=dict)
    # Where the published figures were measured: shown beside results of this platform and model only.
    reference_platform: Optional[str] = None
    reference_model: Optional[str] = None
    # The experiment (conf/experiment/<name>) that composes the published figures' setup: its model's speculative
    # settings, its platform and its workloads are shown beside this campaign's in the report's provenance.
    reference_experiment: Optional[str] = None
    # Published repeats on one unchanged server: benchmark -> metric -> values.
    reference_repeats: Dict[str, Dict[str, List[float]]] = field(default_factory=dict)
    # Claims file (conf-relative path) judged by the report.
    claims: Optional[str] = None
    # Claim ids not judged in this campaign (e.g. when some arms were dropped); reported as skipped.
    skip_claims: List[str] = field(default_factory=list)
    # What theory predicts per arm and benchmark (arm -> benchmark -> the draft's proposal rule), beside the
    # measured accept length; specrepro.core.theory computes it.  Each entry is a DraftTheory (checked by
    # config.validate: OmegaConf 2.3 cannot type a dict of dicts of dataclasses).
    theory: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    # What this experiment says of accuracy, in its own words (the report prints it above the accuracy table).
    accuracy_note: str = ""
    # Factors with levels: client factors run on each arm's one warm server, server factors add a launch per
    # level (specrepro.core.sweep turns the grid into cells: benchmarks `gsm8k@concurrency=3`, arms
    # `patched@cuda_graph_max_bs=4`).
    sweep: SweepConfig = field(default_factory=SweepConfig)
    # `plan` and `run` refuse a campaign whose estimated GPU time exceeds this (None: no budget).  Under a
    # sequential design it refuses only a first round over it, and stops the rounds before one would cross it.
    max_gpu_hours: Optional[float] = None
    # What a sequential design's plan assumes where `reference` has no figure: arm -> benchmark -> metric ->
    # value, or arm -> another arm's name ("measures as that arm").  `plan`'s expected GPU-hours only.
    planning_assumptions: Dict[str, Any] = field(default_factory=dict)


@dataclass
class ServeConfig:
    host: str = "127.0.0.1"
    # 0: pick a free port at launch.
    port: int = 0
    ready_timeout_s: float = 1800.0
    request_timeout_s: float = 600.0
    # Planning figure for `specrepro plan`: seconds one server launch takes to load and capture graphs.
    expected_load_s: float = 600.0
    # Planning figures for the GPU-time estimate: seconds per output token of one request at concurrency 1
    # (mean TPOT), and the share of that TPOT each extra concurrent request adds.
    expected_tpot_ms: float = 10.0
    expected_tpot_growth: float = 0.05
    # Warm-up per benchmark of the arm: max(this, the benchmark's concurrency) requests shaped like it.
    warmup_requests: int = 2
    # None: sglang's default (40 decode steps a line).
    decode_log_interval: Optional[int] = None
    enable_metrics: bool = True
    # Seconds to wait for a graceful exit after SIGTERM before SIGKILL, when a launch failed or was interrupted.
    shutdown_grace_s: float = 30.0
    # The same after a launch measured everything: no request is in flight, and sglang (0.5.20) looks for SIGTERM
    # only every 5 s (TokenizerManager.sigterm_watchdog), so a longer grace is node time spent waiting.
    idle_shutdown_grace_s: float = 1.0
    # Upper bound for one benchmark invocation.
    bench_timeout_s: float = 7200.0
    # After a failed benchmark client or warm-up request, how long the server may take to exit before the failure
    # counts as the client's, not a crash (a container runtime reports a crash a moment late).
    crash_settle_s: float = 10.0
    # Seconds the log may take to show a window's last decode lines.
    log_settle_s: float = 0.5
    placement: Placement = Placement.exclusive
    # Containers run as this `uid:gid`; `caller`: the user running the campaign,
    # so results/ holds no root-owned files (root-squashed NFS).
    container_user: str = "caller"
    # GPUs for a server when no scheduler granted any (one host, no Slurm): node indices.
    gpus: Optional[List[int]] = None


@dataclass
class PreflightConfig:
    # Remove specrepro containers left on the node (by label) before the server starts.
    remove_stale_containers: bool = True
    # The granted GPUs count as idle below this fraction of their memory in use ...
    gpu_idle_max_used_fraction: float = 0.1
    # ... and are waited for this long (memory reclaim after a killed job takes minutes).
    gpu_idle_timeout_s: float = 900.0
    # Read the image's sglang version, patch record and flags, and the paths, inside the image.
    inside_image: bool = True
    # Run sglang's own resolution of the arm's arguments inside the image (with the model's config.json):
    # a field it would rewrite, or arguments it refuses, stop the arm before any measurement.  An answer for the
    # same arguments, tree and model config (from `plan`, or an earlier launch) is reused.
    resolve_server_args: bool = True
    # false: resolve afresh on every launch (say, after changing the image's Python packages under the same tree)
    reuse_resolution: bool = True
    # Run the checks inside the image while the model loads (a failed one stops the server before any
    # measurement), so that each launch costs the node a second or two before its server starts; false: before
    # the server starts (a failed check then costs no GPU time, every launch waits for them).
    during_load: bool = True


@dataclass
class GpuCheckConfig:
    enabled: GpuCheckMode = GpuCheckMode.auto
    # Upper bound for one series' GPU checks on one arm (probe and judge); a check's own timeout_s bounds its probe.
    timeout_s: float = 900.0


@dataclass
class AnalysisConfig:
    # Familywise level of the claim verdicts: each claim is one-sided at alpha / 2 (its 95% interval).
    alpha: float = 0.05
    multiplicity: Multiplicity = Multiplicity.holm
    # Relative band of `equal` and `not_below` claims that give none.
    default_margin: float = 0.02
    # Relative SD between two server launches of one arm, per metric: what a comparison of arms measured on one
    # launch each cannot measure itself.  A metric without one gets none (and zero-spread data stay undecided).
    launch_noise_prior: Dict[str, float] = field(default_factory=dict)
    # Where those numbers come from (shown in the report next to every interval that uses them).
    launch_noise_source: str = ""
    # Within-launch relative SD per metric when an arm has one repeat and neither the other arms nor the
    # published repeats give one.
    within_fallback: Dict[str, float] = field(default_factory=dict)


@dataclass
class TrackingConfig:
    # None: an SQLite store under the results folder (or MLFLOW_TRACKING_URI).
    uri: Optional[str] = None
    experiment_name: str = MISSING
    # Where readers reach this campaign's results folder (CI artifacts, a web server), if it is published: the PR
    # comment (report/pr_comment.md) links the report there; None: it gives the path on this host.
    results_url: Optional[str] = None
    # A server's requests while a campaign is logged: MLflow's own default (7 retries, doubling back-off, 120 s each)
    # lets an outage take many minutes to fail.  MLFLOW_HTTP_REQUEST_MAX_RETRIES / _TIMEOUT in the environment win.
    http_max_retries: int = 2
    http_timeout_s: int = 30


@dataclass
class SpecreproConfig:
    experiment: ExperimentConfig = field(default_factory=ExperimentConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    platform: PlatformConfig = field(default_factory=PlatformConfig)
    sglang: SglangConfig = field(default_factory=SglangConfig)
    benchmarks: Dict[str, BenchmarkConfig] = field(default_factory=dict)
    serve: ServeConfig = field(default_factory=ServeConfig)
    gpu_check: GpuCheckConfig = field(default_factory=GpuCheckConfig)
    preflight: PreflightConfig = field(default_factory=PreflightConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    analysis: AnalysisConfig = field(default_factory=AnalysisConfig)
    # Data files the campaign reads (GSM8K's test set, a tokenizer corpus), by name; benchmarks and models point at
    # them (${data.gsm8k}).
    data: Dict[str, DataSource] = field(default_factory=dict)
    results_dir: str = MISSING
    cache_dir: str = MISSING
    project_root: str = MISSING
    # true: never download data (GSM8K must be at its configured path) and
    # tell sglang's clients to stay off the model hub
    offline: bool = False


def register_configs() -> None:
    # One schema for the whole tree: every group option merges into a typed node.
    ConfigStore.instance().store(name="specrepro_schema", node=SpecreproConfig)
