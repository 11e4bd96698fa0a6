"""Subcommands that work on files and servers directly (no campaign run)."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def cmd_accept_len(args) -> int:
    from specrepro.accept_length import parse_decode_lines

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
    from specrepro import gsm8k

    return gsm8k.cli(args)


def cmd_analyze(args) -> int:
    import pandas as pd
    import yaml

    from specrepro.analysis.verdicts import TableError, analyze

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
    claims = yaml.safe_load(Path(args.claims).read_text())["claims"] if args.claims else None
    reference = yaml.safe_load(Path(args.reference_repeats).read_text()) if args.reference_repeats else None
    try:
        result = analyze(runs, requests, args.baseline, claims, reference)
    except TableError as exc:
        print(f"specrepro analyze: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, indent=1, default=str))
        return 0
    from specrepro.report import claims_table, noise_table

    for d in result["deltas"]:
        if d.get("relative") is not None:
            print(f"{d['benchmark']:>14} {d['metric']:<22} {d['arm']:>16} vs {d['baseline']}: {d['relative']:+.2%} "
                  f"[{d['ci_low']:+.2%}, {d['ci_high']:+.2%}] {d['verdict']}")
    print()
    print(noise_table(result))
    if claims:
        print()
        print(claims_table(result))
    return 0


def cmd_log(args) -> int:
    """Log a campaign's results from disk to MLflow (idempotent)."""
    from specrepro.config import load_resolved
    from specrepro.tracking import CampaignTracker

    results = Path(args.results_dir)
    cfg_path = results / "resolved_config.yaml"
    if not cfg_path.is_file():
        print(f"specrepro log: {cfg_path} not found: is {results} a campaign's results folder?", file=sys.stderr)
        return 2
    cfg = load_resolved(cfg_path)
    if args.tracking_uri:
        cfg["tracking"]["uri"] = args.tracking_uri
    tracker = CampaignTracker(cfg)
    for verdict in sorted(results.glob("patch_check/*/*/verdict.json")):
        tracker.log_patch_check(verdict)
    created = tracker.log_results(results)
    print(f"logged {len(created)} runs of {results} to {tracker.uri} (parent run {tracker.parent})")
    return 0


def add_subcommands(sub) -> None:
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
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_analyze)

    p = sub.add_parser("log", help="log a results folder to MLflow later (idempotent)")
    p.add_argument("results_dir")
    p.add_argument("--tracking-uri", default=None)
    p.set_defaults(func=cmd_log)

    p = sub.add_parser("accept-len", help="accept length from sglang decode logs")
    p.add_argument("logs", nargs="+")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_accept_len)
