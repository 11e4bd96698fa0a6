"""What a resolved config means: arms, jobs, paths and command lines.

The Snakefile, `specrepro plan` and the stage scripts all ask this one object,
so the plan printed is the plan run.
"""

from __future__ import annotations

import shlex
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

    @property
    def stem(self) -> str:
        return f"{self.benchmark}/r{self.repeat}"


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

    def local_patch_files(self, series: str) -> List[str]:
        """Local files a series is made of (series files and patches), for rerun triggers."""
        from specrepro.patching import read_series

        files: List[str] = []
        for entry in self.experiment["patch_series"][series]:
            if entry.get("series"):
                series_file = self.project_root / entry["series"]
                files += [str(series_file), *map(str, read_series(series_file))]
            elif entry.get("path"):
                files.append(str(self.project_root / entry["path"]))
        return files

    def repeats(self, benchmark: str) -> int:
        own = self.cfg["benchmarks"][benchmark].get("repeats")
        return own if own is not None else self.experiment["repeats"]

    def bench_runs(self, arm: str) -> List[BenchRun]:
        return [
            BenchRun(arm, b, r)
            for b in self.arm(arm)["benchmarks"]
            for r in range(1, self.repeats(b) + 1)
        ]

    def benchmark(self, name: str) -> Dict[str, Any]:
        return self.cfg["benchmarks"][name]

    @property
    def exclusive(self) -> bool:
        return self.cfg["serve"]["placement"] == "exclusive"

    # --- paths (relative to results_dir; the Snakefile prefixes them) --------
    def arm_dir(self, arm: str) -> Path:
        return self.results_dir / "arms" / arm

    # --- command lines -----------------------------------------------------
    def server_args(self, arm: str) -> Dict[str, Any]:
        merged = dict(self.cfg["model"]["server_args"])
        merged.update(self.arm(arm).get("extra_server_args") or {})
        return merged

    def server_flags(self, arm: str, host: str, port: int) -> List[str]:
        table = load_table(self.cfg["sglang"]["version"], self.cache_dir)
        serve = self.cfg["serve"]
        flags = render_flags(self.server_args(arm), table)
        flags += ["--host", host, "--port", str(port), "--decode-log-interval", str(serve["decode_log_interval"])]
        if serve["enable_metrics"]:
            flags.append("--enable-metrics")
        return flags

    def server_argv(self, arm: str, host: str, port: int, python: Optional[str] = None) -> List[str]:
        python = python or self.cfg["platform"]["python"]
        return [python, "-m", SERVER_MODULE, *self.server_flags(arm, host, port)]

    def bench_serving_argv(
        self, benchmark: str, repeat: int, base_url: str, output_file: str, python: Optional[str] = None
    ) -> List[str]:
        s = self.benchmark(benchmark)["serving"]
        argv = [
            python or self.cfg["platform"]["python"], "-m", BENCH_SERVING_MODULE,
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
        if s.get("dataset_path"):
            argv += ["--dataset-path", s["dataset_path"]]
        if s.get("output_details"):
            argv.append("--output-details")
        argv += list(s.get("extra_args") or [])
        return argv

    def gsm8k_argv(self, benchmark: str, repeat: int, base_url: str, output_dir: str) -> List[str]:
        return [
            "specrepro", "gsm8k", "--base-url", base_url, "--benchmark", benchmark,
            "--repeat", str(repeat), "--output-dir", output_dir,
            "--config", str(self.results_dir / "resolved_config.yaml"),
        ]

    def bench_argv(self, run: BenchRun, base_url: str, output_dir: str) -> List[str]:
        kind = self.benchmark(run.benchmark)["kind"]
        if kind == "gsm8k":
            return self.gsm8k_argv(run.benchmark, run.repeat, base_url, output_dir)
        return self.bench_serving_argv(run.benchmark, run.repeat, base_url, f"{output_dir}/bench_serving.jsonl")

    def describe_plan(self) -> str:
        """Per arm: the server command and every benchmark command, as shell lines."""
        host = self.cfg["serve"]["host"]
        port = self.cfg["serve"]["port"] or "PORT"
        base_url = f"http://{host}:{port}"
        lines = [
            f"# campaign {self.name}: sglang {self.cfg['sglang']['version']} ({self.cfg['sglang']['git_ref']}), "
            f"model {self.cfg['model']['name']}, platform {self.cfg['platform']['name']}",
            f"# results: {self.results_dir}",
        ]
        for arm in self.arms:
            spec = self.arm(arm)
            lines.append("")
            lines.append(f"## arm {arm}: {spec.get('description', '')}")
            lines.append(f"#  sglang ref {self.ref_of(arm)}, patch series {self.series_of(arm) or 'none'}")
            lines.append("server: " + shlex.join(self.server_argv(arm, host, port)))
            for run in self.bench_runs(arm):
                out = str(self.arm_dir(arm) / run.stem)
                lines.append(f"bench {run.benchmark} r{run.repeat}: " + shlex.join(self.bench_argv(run, base_url, out)))
        return "\n".join(lines)
