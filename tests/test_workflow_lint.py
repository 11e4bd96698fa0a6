"""The workflow is snakemake --lint and snakefmt clean, and parsing it writes nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

BIN = Path(sys.executable).parent


@pytest.mark.parametrize("launches", [1, 2])  # 2: the per-launch rules (serve_launch) take part
def test_snakemake_lint_is_clean(tmp_path, launches):
    out = subprocess.run([str(BIN / "snakemake"), "--lint", "--config",
                          f"overrides=[results_dir={tmp_path},experiment.launches={launches}]"],
                         cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Congratulations" in out.stdout + out.stderr
    assert not any(tmp_path.iterdir()), "parsing the Snakefile must not write into the results folder"


def test_snakefmt_is_clean():
    out = subprocess.run([str(BIN / "snakefmt"), "--check", "Snakefile", "workflow/rules"], cwd=ROOT,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def parse_job_table(text: str) -> dict:
    lines = text.splitlines()
    start = lines.index("Job stats:") + 3 if "Job stats:" in lines else 2
    counts = {}
    for line in lines[start:]:
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
            break
        counts[parts[0]] = int(parts[1])
    return counts


@pytest.mark.parametrize("target", ["all", "cpu_stages"])
@pytest.mark.parametrize("model", ["glm52_mxfp4", "llama31_8b_eagle3"])
def test_plan_job_table_equals_snakemakes_dry_run(tmp_path, target, model):
    """Plain Snakemake (the documented route) and `specrepro plan` see the same DAG."""
    plain = subprocess.run([str(BIN / "snakemake"), target, "-n", "--quiet", "rules", "--config",
                            f"overrides=[results_dir={tmp_path},model={model}]"],
                           cwd=ROOT, capture_output=True, text=True)
    cli = subprocess.run([sys.executable, "-m", "specrepro.cli", "plan", f"results_dir={tmp_path}", f"model={model}",
                          "--target", target], cwd=ROOT, capture_output=True, text=True)
    assert plain.returncode == 0 and cli.returncode == 0, plain.stderr + cli.stderr
    ours = parse_job_table(cli.stdout.split("results folder (`--snakemake`")[1].split("\n", 1)[1])
    theirs = parse_job_table(plain.stdout + plain.stderr)
    assert ours == theirs and ours["total"] > 0
    via = subprocess.run([sys.executable, "-m", "specrepro.cli", "plan", f"results_dir={tmp_path}", f"model={model}",
                          "--target", target, "--snakemake"], cwd=ROOT, capture_output=True, text=True)
    assert parse_job_table(via.stdout.split("# DAG jobs (snakemake --dry-run):\n")[1]) == theirs
