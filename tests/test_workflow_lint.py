"""The workflow is snakemake --lint and snakefmt clean, and parsing it writes nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import ROOT

BIN = Path(sys.executable).parent


def test_snakemake_lint_is_clean(tmp_path):
    out = subprocess.run([str(BIN / "snakemake"), "--lint", "--config", f"overrides=[results_dir={tmp_path}]"],
                         cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Congratulations" in out.stdout + out.stderr
    assert not any(tmp_path.iterdir()), "parsing the Snakefile must not write into the results folder"


def test_snakefmt_is_clean():
    out = subprocess.run([str(BIN / "snakefmt"), "--check", "Snakefile", "workflow/rules"], cwd=ROOT,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_plain_snakemake_gives_the_same_dag_as_the_cli(tmp_path):
    plain = subprocess.run([str(BIN / "snakemake"), "-n", "--quiet", "rules", "--config",
                            f"overrides=[results_dir={tmp_path},model=llama31_8b_eagle3]"],
                           cwd=ROOT, capture_output=True, text=True)
    cli = subprocess.run([sys.executable, "-m", "specrepro.cli", "plan", f"results_dir={tmp_path}", "model=llama31_8b_eagle3"],
                         cwd=ROOT, capture_output=True, text=True)
    assert plain.returncode == 0 and cli.returncode == 0, plain.stderr + cli.stderr
    table = cli.stdout.split("# DAG jobs (snakemake --dry-run):\n")[1].strip()
    assert table in plain.stdout + plain.stderr
