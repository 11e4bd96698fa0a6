"""The log of a Snakemake rule: everything a stage says, and why it failed.

Snakemake shows a failed rule's `log:` with `--show-failed-logs`; an exception
that only reaches Snakemake's stderr is lost there, so every stage script runs
inside `stage_log`, which writes the traceback into the rule's log first.
"""

from __future__ import annotations

import traceback
from contextlib import contextmanager
from typing import IO, Iterator

from specrepro.redaction import redact


@contextmanager
def stage_log(smk, mode: str = "w") -> Iterator[IO]:
    with open(smk.log[0], mode) as log:
        try:
            yield log
        except BaseException as exc:
            print(f"\nstage {smk.rule} failed: {type(exc).__name__}", file=log)
            log.write(redact(traceback.format_exc()))
            log.flush()
            raise
