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


def add_subcommands(sub) -> None:
    p = sub.add_parser("accept-len", help="accept length from sglang decode logs")
    p.add_argument("logs", nargs="+")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_accept_len)
