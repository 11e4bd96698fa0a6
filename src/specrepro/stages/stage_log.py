"""The log of a Snakemake rule: everything a stage says, and why it failed.

Snakemake shows a failed rule's `log:` with `--show-failed-logs`; an exception
that only reaches Snakemake's stderr is lost there, so every stage script runs
inside `stage_log`, which writes the traceback into the rule's log first.
"""

from __future__ import annotations

import sys
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator, List

from specrepro.util.errors import SpecreproError
from specrepro.util.patching import PatchError
from specrepro.util.redaction import redact


FAILED_MARK = "stage "


def failures_since(logs: Path, since: float) -> List[str]:
    """Why each stage whose log was written since `since` failed: its log's failure line."""
    out = []
    for path in sorted(logs.rglob("*.log")) if logs.is_dir() else []:
        if path.stat().st_mtime < since:
            continue
        for line in path.read_text(errors="replace").splitlines():
            if line.startswith(FAILED_MARK) and " failed: " in line:
                out.append(f"{line[len(FAILED_MARK):]} (log: {path})")
    return out


@contextmanager
def stage_log(smk, mode: str = "w") -> Iterator[IO]:
    with open(smk.log[0], mode) as log:
        try:
            yield log
        except BaseException as exc:
            # the first line says why, in the stage's own words (`specrepro run` repeats it at the end)
            print(f"\n{FAILED_MARK}{smk.rule} failed: {type(exc).__name__}: {redact(' '.join(str(exc).split()))}",
                  file=log)
            log.write(redact(traceback.format_exc()))
            log.flush()
            if isinstance(exc, (SpecreproError, PatchError)):
                # its message says what to fix: that, not a traceback, is what the console shows
                print(f"specrepro: stage {smk.rule} failed: {redact(str(exc))} (log: {smk.log[0]})", file=sys.stderr)
                raise SystemExit(1) from None
            raise
