"""The cpu platform's pure-torch sgl_kernel stand-ins against sglang 0.5.20's own kernels (Triton, interpreted)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from conftest import ROOT

pytestmark = pytest.mark.e2e

CHECK = ROOT / "tests" / "cpu_kernels" / "check_against_sglang.py"
STAND_INS = ROOT / "src" / "specrepro" / "cpu_platform"


def run_check(check_python, tree, cases=12, **env):
    proc = subprocess.run([str(check_python), str(CHECK)], capture_output=True, text=True, timeout=1200,
                          env={**os.environ, "PYTHONPATH": f"{tree}:{STAND_INS}", "SPECREPRO_PLATFORM": "cpu",
                               "SGLANG_USE_CPU_ENGINE": "1", "SPECREPRO_KERNEL_CASES": str(cases), **env})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def sglang_tree(cpu_campaign):
    return next(cpu_campaign["results"].glob("source/*/tree"))


def test_every_stand_in_computes_what_sglangs_kernel_computes(check_python, sglang_tree):
    results = run_check(check_python, sglang_tree)
    source = (STAND_INS / "sgl_kernel" / "__init__.py").read_text()
    exported = {line.split("(")[0].split()[-1] for line in source.splitlines()
                if line.startswith("def ") and line.split("(")[0].endswith("_cpu")}
    checked = {name.split("[")[0] for name in results}
    assert exported == checked, f"stand-ins without a check: {exported - checked}"
    for name, r in results.items():
        assert r["cases"] >= 12 and r["mismatches"] == 0, (name, r)
    triton = [n for n, r in results.items() if "(Triton" in r["reference"]]
    assert len(triton) >= 9  # all but the raw-address row copy and the req_to_token expansion


@pytest.mark.parametrize("kernel", ["verify_tree_greedy_cpu", "fill_bonus_tokens_cpu", "extend_attention_cpu"])
def test_a_wrong_stand_in_is_caught(check_python, sglang_tree, kernel):
    results = run_check(check_python, sglang_tree, cases=3, SPECREPRO_KERNEL_SABOTAGE=kernel)
    assert results[kernel]["mismatches"] == 3
    assert all(r["mismatches"] == 0 for n, r in results.items() if n != kernel)


def test_the_stand_in_refuses_to_load_outside_the_cpu_platform(check_python):
    env = {k: v for k, v in os.environ.items() if k not in ("SPECREPRO_PLATFORM", "SGLANG_USE_CPU_ENGINE")}
    proc = subprocess.run([str(check_python), "-c", "import sgl_kernel"], capture_output=True, text=True,
                          env={**env, "PYTHONPATH": str(STAND_INS), "SGLANG_USE_CPU_ENGINE": "1"})
    assert proc.returncode != 0
    assert "serves only specrepro's `cpu` platform" in proc.stderr
