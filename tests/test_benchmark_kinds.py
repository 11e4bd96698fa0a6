"""Benchmark kinds as objects (issue #40): one module and one conf/bench file make a kind, nothing outside
specrepro.benchmarks compares a kind's name, and SPEED-Bench's kind reads what sglang's own client wrote."""

from __future__ import annotations

import filecmp
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from specrepro.benchmarks import ClientCall, category_metric, kind_named, kinds, split_category_metric
from specrepro.util.metric_names import tracking_name
from specrepro.benchmarks.base import BenchOutputError

ROOT = Path(__file__).resolve().parents[1]
SPEED_BENCH_RUN = ROOT / "tests" / "data" / "speed_bench" / "r1"

THROWAWAY_MODULE = '''"""A kind made up by a test: it proves a kind is one module and one conf/bench file."""
from dataclasses import dataclass

from specrepro.benchmarks.base import BenchmarkKind, ClientStep, CostFigures, KindOutputs, Warmup


@dataclass
class ThrowawaySettings:
    requests: int = 3
    words: int = 5


class Throwaway(BenchmarkKind):
    name = "throwaway"
    block = "throwaway"
    settings_class = ThrowawaySettings
    title = "throwaway benchmarks"
    positive = ("requests", "words")
    output_files = ("throwaway.json",)

    def cost_figures(self, settings):
        return CostFigures(settings["requests"], settings["words"], 1)

    def warmup(self, settings, data, least):
        return Warmup([{"text": "word " * settings["words"], "sampling_params": {"max_new_tokens": 1}}] * least, 1)

    def client_step(self, settings, call):
        return ClientStep([call.serving_python, "-c", "pass", call.base_url, call.out_dir], beside_server=True)

    def read_outputs(self, settings, out_dir):
        return KindOutputs({"requests": float(settings["requests"])})


KIND = Throwaway()
'''
THROWAWAY_YAML = "kind: throwaway\nthrowaway: {requests: 4, words: 7}\n"

# From the copied package (first on sys.path): the seed CPU experiment's key of one run; with the throwaway kind on
# one arm, that arm's plan, its warm-up and its client argv.
THROWAWAY_SCRIPT = '''
import json, sys
import specrepro
from specrepro.core.arm_plan import BenchRun, build_arm_plan
from specrepro.core.config import compose
from specrepro.serving.launch import Launcher, planned_context
from specrepro.stages.serve import warmup_batches

overrides = ["experiment=eagle_topk_cpu", "results_dir=" + sys.argv[1]]
# the seed experiment as it is: its keys
gsm8k_key = build_arm_plan(compose(overrides), "main_rs_off").run_key("gsm8k")
if sys.argv[2] == "original":
    print(json.dumps({"package": specrepro.__file__, "gsm8k_key": gsm8k_key}))
    sys.exit(0)
cfg = compose([*overrides, "+bench@benchmarks.tw=throwaway", "experiment.arms.main_rs_off.benchmarks=[gsm8k,tw]"])
plan = build_arm_plan(cfg, "main_rs_off")
run = BenchRun("main_rs_off", "tw", 1)
print(json.dumps({"package": specrepro.__file__, "kind": plan.kind("tw").name, "gsm8k_key": gsm8k_key,
                  "warmup": [b for b in warmup_batches(plan) if b["benchmark"] == "tw"], "key": plan.run_key("tw"),
                  "argv": Launcher(plan).client_argv(planned_context(plan), run, "/out"),
                  "settings": dict(plan.settings("tw"))}))
'''


def differing_files(left: Path, right: Path, prefix: str = "") -> list:
    """Files added, removed or changed between two trees (bytecode caches aside)."""
    cmp = filecmp.dircmp(left, right, ignore=["__pycache__"])
    out = [f"{prefix}{n}" for n in cmp.left_only + cmp.right_only + cmp.diff_files + cmp.funny_files]
    for sub in cmp.common_dirs:
        out += differing_files(left / sub, right / sub, f"{prefix}{sub}/")
    return sorted(out)


def test_a_throwaway_kind_is_its_module_and_its_yaml(tmp_path):
    copy = tmp_path / "checkout"
    shutil.copytree(ROOT / "src" / "specrepro", copy / "src" / "specrepro", symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "conf", copy / "conf")
    # read, never changed: the analysis package (src/specrepro/analysis links to it), patches, requirements, data
    for name in ("analysis", "patches", "requirements", "data"):
        (copy / name).symlink_to(ROOT / name)

    def plan_facts(checkout: Path, which: str) -> dict:
        env = {**os.environ, "PYTHONPATH": f"{checkout / 'src'}{os.pathsep}{checkout}", "SPECREPRO_ROOT": str(checkout),
               "SPECREPRO_CACHE_DIR": str(tmp_path / "cache")}
        proc = subprocess.run([sys.executable, "-c", THROWAWAY_SCRIPT, str(tmp_path / "results"), which],
                              cwd=checkout, capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr[-4000:]
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        assert out["package"].startswith(str(checkout / "src")), out["package"]
        return out

    before = plan_facts(copy, "original")
    (copy / "src" / "specrepro" / "benchmarks" / "throwaway.py").write_text(THROWAWAY_MODULE)
    (copy / "conf" / "bench" / "throwaway.yaml").write_text(THROWAWAY_YAML)
    out = plan_facts(copy, "with_throwaway")
    # a registered kind adds a settings block to every benchmark's schema; the other benchmarks' keys stay
    assert out["gsm8k_key"] == before["gsm8k_key"]
    assert out["kind"] == "throwaway" and out["settings"] == {"requests": 4, "words": 7}
    assert out["warmup"] == [{"benchmark": "tw", "concurrency": 1,
                              "payloads": [{"text": "word " * 7, "sampling_params": {"max_new_tokens": 1}}] * 2}]
    assert out["argv"][1:] == ["-c", "pass", "http://127.0.0.1:$PORT", "/out"]

    changed = differing_files(ROOT / "src" / "specrepro", copy / "src" / "specrepro", "src/specrepro/")
    changed += differing_files(ROOT / "conf", copy / "conf", "conf/")
    assert sorted(changed) == ["conf/bench/throwaway.yaml", "src/specrepro/benchmarks/throwaway.py"]


# A comparison with a kind's name: `== "gsm8k"`, `"bench_serving" !=`, `in ("gsm8k", ...)`, `["kind"] ==`.
def kind_comparison(names) -> re.Pattern:
    quoted = "[\"'](?:" + "|".join(map(re.escape, names)) + ")[\"']"
    return re.compile(rf"(?:==|!=|\bin)\s*[\(\[\{{]?\s*{quoted}|{quoted}\s*(?:==|!=)"
                      rf"|\[[\"']kind[\"']\]\s*(?:==|!=|\bin\b)")


def scanned_files():
    for folder in ("src", "analysis", "workflow"):
        for path in sorted((ROOT / folder).rglob("*")):
            if (path.is_file() and path.suffix in (".py", ".smk", ".j2", "") and "__pycache__" not in path.parts
                    and ROOT / "src" / "specrepro" / "benchmarks" not in path.parents and not path.is_symlink()):
                yield path


def test_no_kind_name_is_compared_outside_the_kinds_own_modules():
    pattern = kind_comparison(kinds())
    planted = ['if bench["kind"] == "gsm8k":', "kind != 'bench_serving'", 'if kind in ("gsm8k", "speed_bench"):',
               'x = "speed_bench" == kind', 'if v.get("kind") == "gsm8k":', 'if v["kind"] in wanted:',
               'if bench["kind"] != name:']
    assert all(pattern.search(line) for line in planted), [p for p in planted if not pattern.search(p)]
    assert not pattern.search('p = sub.add_parser("gsm8k", help="...")')
    assert not pattern.search('if block.kind == "text":')
    found = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}" for p in scanned_files()
             for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1) if pattern.search(line)]
    assert found == []


def test_category_metric_names_round_trip():
    assert category_metric("accept_length", "low_entropy") == "accept_length[low_entropy]"
    assert split_category_metric("accept_length[low_entropy]") == ("accept_length", "low_entropy")
    assert split_category_metric("accept_length") == ("accept_length", None)
    assert tracking_name("mean_tpot_ms[mixed]") == "mean_tpot_ms/mixed"
    assert tracking_name("accept_length") == "accept_length"
    with pytest.raises(ValueError):
        category_metric("a[b]", "c")


def test_an_unknown_kind_names_its_key_the_value_and_the_registered_kinds():
    from specrepro.core.config import ConfigError, compose

    with pytest.raises(ConfigError) as err:
        compose(["experiment=eagle_topk_cpu", "benchmarks.gsm8k.kind=gsm9k"])
    assert "benchmarks.gsm8k.kind: 'gsm9k' is not a benchmark kind (registered: gsm8k, bench_serving, " \
           "speed_bench)" in str(err.value)
    assert set(kinds()) >= {"gsm8k", "bench_serving", "speed_bench"}


def speed_bench_call(**changes):
    values = dict(benchmark="speed_bench", repeat=1, base_url="http://h:1", out_dir="/out", serving_python="py",
                  host_python="hpy", resolved_config="cfg.yaml", data_files=("/data/sb.jsonl",))
    return ClientCall(**{**values, **changes})


def test_speed_bench_runs_sglangs_own_client_once_per_category_in_one_process():
    kind = kind_named("speed_bench")
    settings = {"dataset": "speed_bench_toy", "categories": ["low_entropy", "mixed", "high_entropy"],
                "num_prompts": 2, "output_len": 32, "max_concurrency": 1, "seed": 1, "output_details": True,
                "extra_args": []}
    step = kind.client_step(settings, speed_bench_call())
    assert step.beside_server
    assert step.argv[:2] == ["py", "-c"] and "from sglang.benchmark.serving import cli_main" in step.argv[2]
    assert step.argv[3:] == [
        "http://h:1", "/out", "low_entropy,mixed,high_entropy", "--",
        "--backend", "sglang", "--base-url", "http://h:1", "--dataset-name", "speed-bench",
        "--dataset-path", "/data/sb.jsonl", "--speed-bench-output-len", "32", "--num-prompts", "2",
        "--max-concurrency", "1", "--seed", "1", "--disable-tqdm", "--output-details"]
    # the driver is valid Python
    compile(step.argv[2], "speed_bench driver", "exec")
    assert kind.cost_figures(settings).requests == 6
    assert kind.problems("benchmarks.sb", {**settings, "categories": ["low_entropy", "spicy"]}) == [
        "benchmarks.sb.speed_bench.categories: ['spicy'] are not SPEED-Bench categories "
        "(low_entropy, mixed, high_entropy)"]


def test_speed_bench_reads_a_real_sglang_run_per_category():
    """tests/data/speed_bench/r1: what sglang 0.5.20's bench_serving wrote against a real CPU server of the toy
    model (README beside it)."""
    kind = kind_named("speed_bench")
    settings = {"categories": ["low_entropy", "mixed", "high_entropy"]}
    out = kind.read_outputs(settings, SPEED_BENCH_RUN)
    m = out.metrics
    for category in settings["categories"]:
        # tokens per verify step of the category's window, from the server's counters: at least the bonus token,
        # at most every draft (three steps) and the bonus
        assert 1.0 <= m[f"accept_length[{category}]"] <= 4.0, (category, m)
        assert m[f"completed[{category}]"] == 2
        assert m[f"output_throughput[{category}]"] > 0 and m[f"mean_tpot_ms[{category}]"] > 0
    assert m["completed"] == 6 and m["output_throughput"] > 0 and m["mean_tpot_ms"] > 0
    assert [r["category"] for r in out.requests] == ["low_entropy"] * 2 + ["mixed"] * 2 + ["high_entropy"] * 2
    assert [r["request"] for r in out.requests] == list(range(6))
    assert all(r["output_len"] == 32 for r in out.requests)


def test_speed_bench_names_the_file_it_cannot_read(tmp_path):
    kind = kind_named("speed_bench")
    with pytest.raises(BenchOutputError, match="speed_bench.windows.json"):
        kind.read_outputs({"categories": ["mixed"]}, tmp_path)
