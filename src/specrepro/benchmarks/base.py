"""What every benchmark kind answers: the base class and the plain values its methods take and give."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Dict, List, Mapping, Optional, Sequence, Tuple

from omegaconf import MISSING

from specrepro.util.errors import SpecreproError


class BenchOutputError(SpecreproError, ValueError):
    """A client output that cannot be read; the message names the file."""


@dataclass
class DataSource:
    # Where the file is read from (the submit host and the GPU nodes see it: a shared folder).  Online, a missing
    # file is fetched here once from `url` and verified; offline it must be there.
    path: str = MISSING
    # The file's sha256.  None: none is published; the first fetch records the file's hash beside it and every
    # later use is held to that.
    sha256: Optional[str] = None
    # Canonical download, used only when `path` is absent and downloads are allowed.
    url: Optional[str] = None


@dataclass(frozen=True)
class CostFigures:
    """What one run of a benchmark asks of the server, for `plan`'s cost estimate."""

    requests: int
    # the most new tokens one request may emit
    tokens: int
    concurrency: int


@dataclass(frozen=True)
class Warmup:
    """Requests to sglang's /generate shaped like the benchmark's own, and how many at a time."""

    payloads: List[Dict[str, Any]]
    concurrency: int


@dataclass(frozen=True)
class ClientCall:
    """Where one repeat's client sends and writes, and the Pythons and files it may use."""

    benchmark: str
    repeat: int
    base_url: str
    out_dir: str
    # the Python that serves (and has sglang's own client), and specrepro's own
    serving_python: str
    host_python: str
    resolved_config: str
    # the local files the benchmark's client reads beside the server (ArmPlan.client_data)
    data_files: Tuple[str, ...] = ()


@dataclass(frozen=True)
class ClientStep:
    """One repeat's client process: its argv, and whether it runs beside the server (in the server's container,
    with the client data mounted) or on the host (plain HTTP)."""

    argv: List[str]
    beside_server: bool


@dataclass
class KindOutputs:
    """What a repeat's client wrote, read: the run's metrics (whole benchmark, and `metric[category]` rows where the
    workload has categories), the per-request records accept length is counted from (sglang's meta_info; empty where
    the client does not keep them) and the per-request rows of the requests table."""

    metrics: Dict[str, Any]
    records: List[Dict[str, Any]] = field(default_factory=list)
    requests: List[Dict[str, Any]] = field(default_factory=list)


class BenchmarkKind:
    """One kind of benchmark.  Subclasses set the class attributes and the methods that differ; a module that
    defines one assigns an instance to `KIND` (the registry finds it there).  `settings` arguments are the
    benchmark's settings block as a plain mapping (OmegaConf has checked its types against `settings_class`)."""

    # the value of a benchmark's `kind:` and the name of its settings block (`gsm8k:`, `serving:`)
    name: ClassVar[str]
    block: ClassVar[str]
    settings_class: ClassVar[type]
    # the report's heading over this kind's headline tables
    title: ClassVar[str]
    # where the kind comes among the others (the report's sections, the schema's settings blocks); then by name
    order: ClassVar[int] = 100
    # the metrics one run records (claims may name these); a kind with categories also records metric[category]
    record_metrics: ClassVar[Tuple[str, ...]] = ()
    # settings that must be >= 1
    positive: ClassVar[Tuple[str, ...]] = ()
    # settings a sweep's client factor may set
    client_settings: ClassVar[Tuple[str, ...]] = ()
    # files the client writes into a repeat's folder: removed before a repeat (sglang's client appends, and a
    # stale line from a dead attempt must not count) and kept as the run's artifacts
    output_files: ClassVar[Tuple[str, ...]] = ()

    # --- config ------------------------------------------------------------------------------------------------
    def problems(self, key: str, settings: Mapping[str, Any]) -> List[str]:
        """What is wrong with a benchmark's settings block, each naming its key (`key` is `benchmarks.<name>`)."""
        return [f"{key}.{self.block}.{f}: must be >= 1, got {settings[f]}" for f in self.positive if settings[f] < 1]

    def data_entries(self, settings: Mapping[str, Any]) -> List[Tuple[str, str]]:
        """The `data:` entries the benchmark reads: (the settings key that names it, the entry's name)."""
        return []

    def data_sources(self, bench_name: str, settings: Mapping[str, Any], data: Mapping[str, Any]
                     ) -> List[Tuple[Mapping[str, Any], str]]:
        """The files the datasets stage resolves for the benchmark: (DataSource, the config key a user sets)."""
        return [(data[name], f"data.{name}") for _, name in self.data_entries(settings) if name in data]

    def client_data_files(self, settings: Mapping[str, Any], data: Mapping[str, Any]) -> List[str]:
        """Local files the client reads beside the server (mounted read-only into its container)."""
        return []

    def cost_figures(self, settings: Mapping[str, Any]) -> CostFigures:
        raise NotImplementedError(f"benchmark kind {self.name}: cost_figures")

    # --- measuring ---------------------------------------------------------------------------------------------
    def warmup(self, settings: Mapping[str, Any], data: Mapping[str, Any], least: int) -> Warmup:
        """max(least, the benchmark's concurrency) requests shaped like its own (prompt and output length, sampling)."""
        raise NotImplementedError(f"benchmark kind {self.name}: warmup")

    def client_step(self, settings: Mapping[str, Any], call: ClientCall) -> ClientStep:
        raise NotImplementedError(f"benchmark kind {self.name}: client_step")

    def read_outputs(self, settings: Mapping[str, Any], out_dir: Path) -> KindOutputs:
        raise NotImplementedError(f"benchmark kind {self.name}: read_outputs")

    # --- analysis ----------------------------------------------------------------------------------------------
    def greedy(self, settings: Mapping[str, Any]) -> bool:
        """Whether every request decodes greedily (outputs comparable token by token between arms)."""
        return False

    def questions(self, settings: Mapping[str, Any]) -> Optional[int]:
        """Distinct questions a repeat asks, where it scores answers (accuracy intervals); None otherwise."""
        return None

    def workload(self, settings: Mapping[str, Any]) -> str:
        """The workload in a few words (the report's provenance)."""
        return self.name


def fixed_length_payloads(texts: Sequence[str], output_len: int) -> List[Dict[str, Any]]:
    """Warm-up requests that decode `output_len` tokens greedily whatever the text (ignore_eos), as the measured
    requests of a fixed-output-length workload do."""
    return [{"text": t, "sampling_params": {"max_new_tokens": output_len, "temperature": 0, "ignore_eos": True}}
            for t in texts]
