"""`specrepro` command line: config, plan, run and the tools around them."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import List, Optional, Sequence

from specrepro.core.config import PROJECT_ROOT, ConfigError, compose, dump_resolved

# Each command imports what it runs inside its own function (the one module whose imports are deferred, a choice
# tests/test_architecture.py holds to): `specrepro plan` and `--help` load neither MLflow, pandas, scipy nor
# Snakemake's API; only hydra, which composing the config needs anyway.

# The Snakemake target that holds every stage a machine without a GPU can run.
CPU_TARGET = "cpu_stages"


def _split_snakemake_args(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    argv = list(argv)
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, []


def compose_campaign(overrides: Sequence[str]):
    """The one composition of an entry point: the config, then its claims file held to it (the analysis's rules)."""
    from specrepro.analysis.claims import check_campaign_claims

    return check_campaign_claims(compose(overrides))


def check_tracking_server(cfg, command: str, record: Optional[Path] = None) -> bool:
    """The campaign's tracking server (when it logs to one) before anything else runs; False: it said why.
    `record`: where what was checked is written (the DAG's first job then finds it done)."""
    from specrepro.util.fileio import write_json
    from specrepro.stages.tracking_server import TrackingServerError, check_campaign_server

    try:
        checked = check_campaign_server(cfg, out=sys.stderr)
    except TrackingServerError as exc:
        print(f"specrepro {command}: {exc}", file=sys.stderr)
        return False
    if checked is not None and record is not None:
        write_json(record, checked)
    return True


def cmd_config(args) -> int:
    cfg = compose_campaign(args.overrides)
    sys.stdout.write(dump_resolved(cfg))
    return 0


def cmd_plan(args) -> int:
    from specrepro.serving import plan_text
    from specrepro.analysis.plan import describe_decidability, describe_sequential
    from specrepro.core.campaign import Campaign
    from specrepro.stages.resolution import describe_resolution, plan_resolution, refused_arms
    from specrepro.workflow_support import job_counts, job_table

    campaign = Campaign(compose_campaign(args.overrides))
    if not check_tracking_server(campaign.cfg, "plan"):
        return 2
    print(plan_text.describe_plan(campaign))
    print()
    print("\n".join(describe_decidability(campaign)))
    if campaign.policy:
        print()
        print("\n".join(describe_sequential(campaign)))
    for warning in plan_text.warnings(campaign):
        print(f"WARNING: {warning}", file=sys.stderr)
    resolution = ({"skipped": "--no-resolve"} if args.no_resolve else
                  plan_resolution(list(campaign.plans.values())))
    print()
    print("\n".join(describe_resolution(resolution)))
    refused = refused_arms(resolution)
    if refused:
        print(f"specrepro plan: sglang would rewrite what arms {', '.join(refused)} ask for (above); fix their "
              f"arguments before spending GPU time", file=sys.stderr)
        return 2
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
    from specrepro.util.fileio import write_text_atomic

    path = Path(cfg["results_dir"]) / "resolved_config.yaml"
    text = dump_resolved(cfg)
    if not path.is_file() or path.read_text() != text:
        write_text_atomic(path, text)
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
    from specrepro.core.layout import Layout

    cfg = compose_campaign(args.overrides)
    # the team's tracking server first, in seconds: a wrong password found after the GPU hours loses their logging
    if not check_tracking_server(cfg, "run", Path(Layout(Path(cfg["results_dir"])).tracking("server_check"))):
        return 2
    # One run per results folder, held by this process (released however it ends).  Snakemake's own lock is left
    # off (--nolock): it lives in the checkout's .snakemake/locks, shared by every campaign run from the checkout,
    # and a run that ends removes that whole folder, so a second campaign starting at that moment failed on its
    # lock file (FileNotFoundError: .snakemake/locks/0.input.lock).
    import fcntl

    results_dir = Path(cfg["results_dir"])
    results_dir.mkdir(parents=True, exist_ok=True)
    run_lock = open(results_dir / ".specrepro-run.lock", "w")
    try:
        fcntl.flock(run_lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        run_lock.close()
        print(f"specrepro run: another `specrepro run` is running on {results_dir}; wait for it to end, or give this "
              f"one another results_dir=", file=sys.stderr)
        return 2
    try:
        return _run_locked(args, cfg)
    finally:
        run_lock.close()


def _run_locked(args, cfg) -> int:
    from specrepro.core.config import data_sources
    from specrepro.core.layout import Layout

    resolved = _write_resolved(cfg)
    extra = [*args.snakemake_args, "--nolock"]
    if args.cpu_only:
        extra.append(CPU_TARGET)
    argv = _snakemake_argv(resolved, args.profile, extra)
    print(f"specrepro: resolved config {resolved}", file=sys.stderr)
    import time

    from specrepro.stages.stage_log import failures_since

    started = time.time()
    # the data every job reads first, alone (its own rule, on this host): a file that cannot be had stops the run
    # here, in seconds, before builds and servers start
    layout = Layout(Path(cfg["results_dir"]))
    records = [] if args.cpu_only else sorted(layout.dataset(d) for d in data_sources(cfg))
    rc = subprocess.call(_snakemake_argv(resolved, args.profile, [*records, "--quiet", "rules", "--nolock"]),
                         cwd=PROJECT_ROOT) if records else 0
    if rc == 0:
        rc = subprocess.call(argv, cwd=PROJECT_ROOT)
    if rc == 0:
        print_report_summary(Path(cfg["results_dir"]), args.cpu_only)
    else:
        failed = failures_since(Path(cfg["results_dir"]) / "logs", started)
        if failed:
            print("\nspecrepro: what failed, in each stage's own words (what was measured stays on disk; run again "
                  "to continue):\n" + "\n".join(f"  - {f}" for f in failed), file=sys.stderr)
    return rc


def print_report_summary(results: Path, cpu_only: bool) -> None:
    """What a finished run shows in the terminal: the report's head (what ran, the tables, the claims)."""
    if cpu_only:
        report = results / "report" / "cpu_stages.md"
        if report.is_file():
            print(report.read_text())
        return
    report = results / "report" / "report.md"
    if not report.is_file():
        return
    from specrepro.stages.tracking import closing_lines

    head = report.read_text().split("\n### Noise floors", 1)[0]
    print(head.rstrip())
    print()
    print("\n".join(closing_lines(results)))


def cmd_preflight(args) -> int:
    """The measuring job's preflight, by hand, for each arm whose image the image stage resolved."""
    from specrepro.core.campaign import Campaign
    from specrepro.stages.image import ensure_image
    from specrepro.serving.launch import Launcher, LaunchError, granted_gpus, job_context
    from specrepro.stages.preflight import PreflightError, run_preflight

    campaign = Campaign(compose_campaign(args.overrides))
    arms = args.arms or campaign.arms
    failed = 0
    for arm in arms:
        plan = campaign.plan(arm)
        record = Path(plan.image_record)
        if not record.is_file():
            print(f"specrepro preflight: {record} not found: run the image stage first "
                  f"(specrepro run ... -- --until image)", file=sys.stderr)
            return 2
        image = json.loads(record.read_text())
        try:
            gpus, source = granted_gpus(plan)
            image = ensure_image(plan, image, sys.stdout)
            run_preflight(plan, Launcher(plan), job_context(plan, image, gpus, source), image, sys.stdout)
            print(f"arm {arm}: preflight passed")
        except (PreflightError, LaunchError) as exc:
            print(f"specrepro preflight: {exc}", file=sys.stderr)
            failed += 1
    return 2 if failed else 0


def cmd_flags_table(args) -> int:
    from specrepro.upstream.sglang_flags import TABLE_DIR, table_from_source

    table = table_from_source(Path(args.sglang_pkg), args.version)
    out = Path(args.output) if args.output else TABLE_DIR / f"{args.version}.json"
    out.write_text(table.to_json())
    print(f"{len(table.flags)} flags of sglang {args.version} -> {out}")
    return 0


def cmd_accept_len(args) -> int:
    from specrepro.measure.accept_length import parse_decode_lines

    results = {}
    for path in args.logs:
        p = Path(path)
        if not p.is_file():
            print(f"specrepro accept-len: {p}: no such file", file=sys.stderr)
            return 2
        with open(p, encoding="utf-8", errors="replace") as fh:
            results[str(p)] = parse_decode_lines(fh).as_dict()
    if args.json:
        print(json.dumps(results, indent=1))
    else:
        for path, r in results.items():
            value = "n/a" if r["accept_length"] is None else f"{r['accept_length']:.3f}"
            print(f"{path}: accept length {value} over {r['lines']} decode lines "
                  f"(rank {r['rank'] or '-'}; {r['malformed_lines']} malformed lines skipped)")
    return 0


def cmd_gsm8k(args) -> int:
    """`specrepro gsm8k`: one repeat against a running server."""
    from specrepro.benchmarks import gsm8k
    from specrepro.core.config import load_resolved

    cfg = load_resolved(Path(args.config))
    settings = cfg["benchmarks"][args.benchmark]["gsm8k"]
    items = gsm8k.load_test_set(cfg["data"][settings["test_data"]], f"data.{settings['test_data']}")
    result = gsm8k.run_gsm8k(args.base_url.rstrip("/"), settings, items, cfg["serve"]["request_timeout_s"])
    gsm8k.write_outputs(result, Path(args.output_dir))
    s = result["summary"]
    print(f"Accuracy: {s['accuracy']:.3f}\nInvalid: {s['invalid_rate']:.3f}\nLatency: {s['latency_s']:.3f} s")
    return 0


def cmd_analyze(args) -> int:
    import pandas as pd
    import yaml

    from specrepro.analysis.analyze import TableError, analyze
    from specrepro.analysis.claims import load_claims

    path = Path(args.table)
    if not path.is_file():
        print(f"specrepro analyze: {path}: no such file", file=sys.stderr)
        return 2
    try:
        runs = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
    except Exception as exc:  # pandas raises many kinds; the user needs the file name
        print(f"specrepro analyze: {path}: cannot read as a table ({exc})", file=sys.stderr)
        return 2
    requests = None
    if args.requests:
        requests = pd.read_parquet(args.requests) if args.requests.endswith(".parquet") else pd.read_csv(args.requests)
    claims = load_claims(Path(args.claims)) if args.claims else None
    reference = yaml.safe_load(Path(args.reference_repeats).read_text()) if args.reference_repeats else None
    try:
        questions = {k: int(v) for k, v in (q.split("=", 1) for q in args.questions)}
    except ValueError:
        print(f"specrepro analyze: --questions takes BENCHMARK=N, got {args.questions}", file=sys.stderr)
        return 2
    # the analysis settings a campaign would use (conf/config.yaml's `analysis:` block, overridable)
    settings = compose([f"analysis.{o}" for o in args.set])["analysis"]
    try:
        result = analyze(runs, requests, args.baseline, claims, reference, questions, settings=settings)
    except TableError as exc:
        print(f"specrepro analyze: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, indent=1, default=str))
        return 0
    from specrepro.analysis.report import claims_table, noise_table

    for d in result["deltas"]:
        if d.get("relative") is not None:
            print(f"{d['benchmark']:>14} {d['metric']:<22} {d['arm']:>16} vs {d['baseline']}: {d['relative']:+.2%} "
                  f"[{d['ci_low']:+.2%}, {d['ci_high']:+.2%}] (±{d['half_width']:.2%}, t {d['quantile']:.2f}) "
                  f"{d['verdict']}")
    print()
    print(noise_table(result))
    if claims:
        print()
        print(claims_table(result))
    return 0


def cmd_log(args) -> int:
    """Log a campaign's results from disk to MLflow (idempotent)."""
    from specrepro.core.config import load_resolved
    from specrepro.stages.tracking import log_campaign

    results = Path(args.results_dir)
    cfg_path = results / "resolved_config.yaml"
    if not cfg_path.is_file():
        print(f"specrepro log: {cfg_path} not found: is {results} a campaign's results folder?", file=sys.stderr)
        return 2
    from specrepro.stages.tracking_server import TrackingServerError

    cfg = load_resolved(cfg_path)
    # this folder's files, wherever the campaign ran (a CI artifact downloaded, a copy)
    cfg["results_dir"] = str(results.resolve())
    if args.tracking_uri:
        cfg["tracking"]["uri"] = args.tracking_uri
    if not check_tracking_server(cfg, "log"):
        return 2
    try:
        logged = log_campaign(cfg, sorted(results.glob("patch_check/*/*/verdict.json")), with_results=True,
                              gpu_checks=sorted(results.glob("gpu_check/*/verdict.json")))
    except TrackingServerError as exc:
        print(f"specrepro log: {exc}", file=sys.stderr)
        return 2
    print(f"logged {len(logged['children']) + 1} runs of {results} to {logged['tracking_uri']}: "
          f"{logged['created']} new, the rest already there (parent run {logged['parent_run']})")
    return 0


def cmd_report(args) -> int:
    """A finished campaign's report rendered again from its own files (no server runs): report.md, report.html,
    pr_comment.md and the plots, into --out (default: the campaign's report/ folder)."""
    from specrepro.analysis.report import render_results

    results = Path(args.results_dir)
    if not (results / "resolved_config.yaml").is_file() or not (results / "tables" / "runs.csv").is_file():
        print(f"specrepro report: {results} holds no finished campaign (resolved_config.yaml and tables/runs.csv)",
              file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else results / "report"
    render_results(results, out, recorded=args.recorded)
    print(f"report: {out / 'report.html'} (markdown {out / 'report.md'}, PR comment {out / 'pr_comment.md'})")
    return 0


def cmd_open(args) -> int:
    """The campaign's MLflow dashboard: `mlflow ui` on its store on a free loopback port until Ctrl-C."""
    from specrepro.stages.tracking import open_dashboard

    return open_dashboard(Path(args.results_dir), port=args.port)


def cmd_toy_model(args) -> int:
    """Build the toy target + EAGLE draft pair (the toy_lookup model's recipe, overridable)."""
    import tempfile

    from specrepro.util.datasets import DatasetError, resolve_dataset
    from specrepro.stages.toy_model import toy_model_stage

    cfg = compose(["model=toy_lookup", *args.overrides])
    toy = dict(cfg["model"]["toy"], dir=str(Path(args.dir).resolve()))
    source = cfg["data"][toy["corpus"]]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            resolve_dataset(source, Path(tmp) / "corpus.json", cfg["offline"], sys.stdout, f"data.{toy['corpus']}")
        record = toy_model_stage(toy, cfg["model"]["server_args"].get("speculative_num_steps", 3), source, sys.stdout)
    except DatasetError as exc:
        print(f"specrepro toy-model: {exc}", file=sys.stderr)
        return 2
    print(f"serve it with: --model-path {record['target']} --speculative-draft-model-path {record['draft']} "
          f"--speculative-algorithm EAGLE --speculative-num-steps {record['num_steps']} --speculative-eagle-topk 1 "
          f"--speculative-num-draft-tokens {record['num_steps'] + 1}")
    return 0


def cmd_new_experiment(args) -> int:
    """Write the files a user fills in to reproduce their own PR, then prove they compose."""
    from specrepro.new_experiment import NewExperimentError, new_experiment

    root = Path(args.root).resolve()
    try:
        written = new_experiment(args.name, [Path(p) for p in args.patch], Path(args.pr) if args.pr else None, root,
                                 PROJECT_ROOT, force=args.force)
    except NewExperimentError as exc:
        print(f"specrepro new-experiment: {exc}", file=sys.stderr)
        return 2
    search = [] if root == PROJECT_ROOT.resolve() else [f"hydra.searchpath=[file://{root / 'conf'}]"]
    for experiment in (args.name, f"{args.name}_cpu"):
        compose_campaign([*search, f"experiment={experiment}"])  # a ConfigError names the file and key
    print("wrote:\n" + "\n".join(f"  {p.relative_to(root)}" for p in written))
    where = f" '{search[0]}'" if search else ""
    over = f'"{search[0]}",' if search else ""
    print(f"""
next, in this order:
  1. patches/{args.name}/PR.md: the PR's text; patches/{args.name}/series.yaml: its title and description, and
     its own checks if it has any (patches/README.md: the check protocol)
  2. conf/arm/{args.name}/*.yaml: the arms the PR compares (server flags, benchmarks); add arms as files there
  3. conf/claims/{args.name}.yaml: one claim per sentence to judge
  4. conf/experiment/{args.name}.yaml: published figures, benchmarks, repeats; {args.name}_cpu.yaml: theory
  5. specrepro plan{where} experiment={args.name}_cpu          (commands, cost, decidability; runs nothing)
     specrepro run --cpu-only{where} experiment={args.name}    (the patch applies and passes its checks)
     specrepro run{where} experiment={args.name}_cpu           (every stage on this CPU, real sglang servers)
     snakemake --profile rocm --config 'overrides=[{over}"experiment={args.name}"]'   (the GPU campaign)""")
    return 0


def cmd_node_facts(args) -> int:
    """The node's GPUs as the pipeline reads them, and the devices a grant maps to."""
    from specrepro.measure import node_facts as nf

    try:
        gpus = nf.node_gpus(args.accelerator, Path(args.root))
        granted = nf.grant(gpus, explicit=args.gpus.split(",") if args.gpus else None)
        if args.gpus:
            granted["source"] = "--gpus"
    except nf.NodeFactsError as exc:
        print(f"specrepro node-facts: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"gpus": nf.as_records(gpus), "granted": {"source": granted["source"],
                          "gpus": nf.as_records(granted["gpus"])}}, indent=1))
    else:
        print(nf.describe(gpus, granted))
    return 0


def add_tool_subcommands(sub) -> None:
    p = sub.add_parser("node-facts", help="this node's GPUs (KFD topology / nvidia-smi) and what a grant maps to")
    p.add_argument("--root", default="/", help="where sysfs is (a captured tree, for checks elsewhere)")
    p.add_argument("--gpus", default=None, help="a grant to map (indices, ranges, device files, UUIDs); default: "
                                               "SLURM_STEP_GPUS, SLURM_JOB_GPUS, ROCR/HIP/CUDA_VISIBLE_DEVICES")
    p.add_argument("--accelerator", choices=["rocm", "cuda"], default="rocm")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_node_facts)

    p = sub.add_parser("new-experiment", help="write the files to reproduce a PR: series, arms, claims, experiment")
    p.add_argument("name", help="the change's name: patches/NAME/, conf/experiment/NAME.yaml, ...")
    p.add_argument("--patch", action="append", default=[], required=True, help="a patch file, in order (repeat)")
    p.add_argument("--pr", default=None, help="the PR's text (markdown), copied to patches/NAME/PR.md")
    p.add_argument("--root", default=str(PROJECT_ROOT), help="where conf/ and patches/ are (default: this checkout)")
    p.add_argument("--force", action="store_true", help="write over existing files")
    p.set_defaults(func=cmd_new_experiment)

    p = sub.add_parser("toy-model", help="build the toy target + EAGLE draft pair whose acceptance theory predicts")
    p.add_argument("dir", help="folder to write target/, draft/ and theory.json into")
    p.add_argument("overrides", nargs="*", help="Hydra overrides of the recipe, e.g. model.toy.seed=3 "
                                                "model.toy.sharpness=6")
    p.set_defaults(func=cmd_toy_model)

    p = sub.add_parser("gsm8k", help="one GSM8K repeat against a running server (few_shot_gsm8k semantics)")
    p.add_argument("--base-url", required=True)
    p.add_argument("--benchmark", default="gsm8k")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--output-dir", required=True)
    p.add_argument("--config", required=True, help="a resolved config (results/<campaign>/resolved_config.yaml)")
    p.set_defaults(func=cmd_gsm8k)

    p = sub.add_parser("analyze", help="noise floors, deltas, tests and claim verdicts on a tidy table")
    p.add_argument("table", help="CSV or Parquet with arm, benchmark, repeat, metric, value, unit")
    p.add_argument("--requests", default=None, help="optional per-request table")
    p.add_argument("--baseline", default=None)
    p.add_argument("--claims", default=None, help="claims YAML (conf/claims/...)")
    p.add_argument("--reference-repeats", default=None, help="YAML benchmark -> metric -> [values] of an unchanged server")
    p.add_argument("--questions", action="append", default=[],
                   help="BENCHMARK=N: distinct questions per repeat (accuracy intervals), e.g. gsm8k=200")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="an analysis setting, e.g. --set multiplicity=none --set launch_noise_prior.output_throughput=0.03")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_analyze)

    p = sub.add_parser("report", help="render a finished campaign's report again from its files (no servers)")
    p.add_argument("results_dir")
    p.add_argument("--out", default=None, help="folder to write into (default: RESULTS_DIR/report)")
    p.add_argument("--recorded", action="store_true",
                   help="render the recorded analysis (report/analysis.json) instead of analysing the tables again")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("open", help="start mlflow ui on a campaign's store and print its dashboard link (Ctrl-C stops)")
    p.add_argument("results_dir")
    p.add_argument("--port", type=int, default=None, help="port on 127.0.0.1 (default: a free one)")
    p.set_defaults(func=cmd_open)

    p = sub.add_parser("log", help="log a results folder to MLflow later (idempotent)")
    p.add_argument("results_dir")
    p.add_argument("--tracking-uri", default=None)
    p.set_defaults(func=cmd_log)

    p = sub.add_parser("accept-len", help="accept length from sglang decode logs")
    p.add_argument("logs", nargs="+")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_accept_len)


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
    p.add_argument("--no-resolve", action="store_true",
                   help="skip sglang's own resolution of each arm's arguments (it needs the local sglang env)")
    p.add_argument("--snakemake", action="store_true",
                   help="list the jobs from Snakemake's dry run (state-aware, slower) instead of the campaign's fan-out")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("run", help="compose once, write the resolved config, run Snakemake")
    p.add_argument("overrides", nargs="*")
    p.add_argument("--profile", default=None, help="profile name under profiles/ or a path")
    p.add_argument("--cpu-only", action="store_true", help=f"run only the stages a CPU runs ({CPU_TARGET})")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("preflight", help="the measuring jobs' checks before a server starts, by hand")
    p.add_argument("overrides", nargs="*")
    p.add_argument("--arm", dest="arms", action="append", default=[], help="arm(s) to check (default: all)")
    p.set_defaults(func=cmd_preflight)

    p = sub.add_parser("flags-table", help="regenerate the server-flag table from an sglang source tree")
    p.add_argument("sglang_pkg", help="path to the `sglang` package directory")
    p.add_argument("--version", required=True)
    p.add_argument("--output", default=None)
    p.set_defaults(func=cmd_flags_table)

    add_tool_subcommands(sub)
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
