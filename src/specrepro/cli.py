"""`specrepro` command line: config, plan, run and the tools around them."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import List, Optional, Sequence

from specrepro.config import PROJECT_ROOT, ConfigError, compose, dump_resolved

# The Snakemake target that holds every stage a machine without a GPU can run.
CPU_TARGET = "cpu_stages"


def _split_snakemake_args(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    argv = list(argv)
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, []


def cmd_config(args) -> int:
    cfg = compose(args.overrides)
    sys.stdout.write(dump_resolved(cfg))
    return 0


def cmd_plan(args) -> int:
    from specrepro.campaign import Campaign
    from specrepro.workflow_support import job_counts, job_table

    cfg = compose(args.overrides)
    campaign = Campaign(cfg)
    print(campaign.describe_plan())
    if not args.snakemake:
        target = args.targets[0] if args.targets else "all"
        print(f"\n# DAG jobs for `{target}` on an empty results folder "
              "(`--snakemake`: Snakemake's own dry run, which skips what is already done):")
        print(job_table(job_counts(campaign, target)))
        return 0
    print("\n# DAG jobs (snakemake --dry-run):")
    sys.stdout.flush()
    proc = subprocess.run(
        _snakemake_argv(None, args.profile, [*args.targets, "--dry-run", "--quiet", "rules"], overrides=args.overrides),
        cwd=PROJECT_ROOT, text=True, capture_output=True,
    )
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout + proc.stderr)
        return proc.returncode
    print(_job_table(proc.stdout + proc.stderr))
    return 0


def _job_table(output: str) -> str:
    """The first `Job stats` table of Snakemake's dry-run output."""
    lines = output.splitlines()
    if "Job stats:" not in lines:
        return output
    start = lines.index("Job stats:") + 1
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return "\n".join(lines[start:end])


def _write_resolved(cfg) -> Path:
    """Write the resolved config next to the results; untouched if unchanged.

    Unchanged content keeps its mtime, so Snakemake never sees a new config
    where there is none.
    """
    path = Path(cfg["results_dir"]) / "resolved_config.yaml"
    text = dump_resolved(cfg)
    if not path.is_file() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(path)
    return path


def _snakemake_argv(resolved: Optional[Path], profile: Optional[str], extra: List[str],
                    overrides: Sequence[str] = ()) -> List[str]:
    argv = [
        sys.executable, "-m", "snakemake",
        "--snakefile", str(PROJECT_ROOT / "Snakefile"),
        "--directory", str(PROJECT_ROOT),
    ]
    if resolved is not None:
        argv += ["--configfile", str(resolved)]
    else:
        argv += ["--config", "overrides=" + json.dumps(list(overrides))]
    if profile:
        prof = Path(profile)
        if not prof.is_dir() and (PROJECT_ROOT / "profiles" / profile).is_dir():
            prof = PROJECT_ROOT / "profiles" / profile
        argv += ["--profile", str(prof)]
    elif not any(a.startswith(("--cores", "-c", "--jobs", "-j")) for a in extra):
        argv += ["--cores", str(os.cpu_count() or 1)]
    return argv + extra


def cmd_run(args) -> int:
    cfg = compose(args.overrides)
    resolved = _write_resolved(cfg)
    extra = list(args.snakemake_args)
    if args.cpu_only:
        extra.append(CPU_TARGET)
    argv = _snakemake_argv(resolved, args.profile, extra)
    print(f"specrepro: resolved config {resolved}", file=sys.stderr)
    rc = subprocess.call(argv, cwd=PROJECT_ROOT)
    if args.cpu_only and rc == 0:
        report = Path(cfg["results_dir"]) / "report" / "cpu_stages.md"
        if report.is_file():
            print(report.read_text())
    return rc


def cmd_flags_table(args) -> int:
    from specrepro.sglang_flags import TABLE_DIR, table_from_source

    table = table_from_source(Path(args.sglang_pkg), args.version)
    out = Path(args.output) if args.output else TABLE_DIR / f"{args.version}.json"
    out.write_text(table.to_json())
    print(f"{len(table.flags)} flags of sglang {args.version} -> {out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specrepro", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("config", help="print the resolved config as YAML")
    p.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. model=llama31_8b_eagle3")
    p.set_defaults(func=cmd_config)

    p = sub.add_parser("plan", help="print server and benchmark commands per arm, then the DAG's jobs; runs nothing")
    p.add_argument("overrides", nargs="*")
    p.add_argument("--profile", default=None)
    p.add_argument("--target", dest="targets", action="append", default=[], help="Snakemake target(s) to plan")
    p.add_argument("--snakemake", action="store_true",
                   help="list the jobs from Snakemake's dry run (state-aware, slower) instead of the campaign's fan-out")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("run", help="compose once, write the resolved config, run Snakemake")
    p.add_argument("overrides", nargs="*")
    p.add_argument("--profile", default=None, help="profile name under profiles/ or a path")
    p.add_argument("--cpu-only", action="store_true", help=f"run only the stages a CPU runs ({CPU_TARGET})")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("flags-table", help="regenerate the server-flag table from an sglang source tree")
    p.add_argument("sglang_pkg", help="path to the `sglang` package directory")
    p.add_argument("--version", required=True)
    p.add_argument("--output", default=None)
    p.set_defaults(func=cmd_flags_table)

    from specrepro import tools

    tools.add_subcommands(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    argv, snakemake_args = _split_snakemake_args(argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    args.snakemake_args = snakemake_args
    try:
        return args.func(args)
    except ConfigError as exc:
        print(f"specrepro: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
