"""Accept length from three sources, each scoped to one benchmark's window.

(a) sglang's decode-log lines (sglang 0.5.20, scheduler_components/
    metrics_reporter.py):
      [2026-12-02 10:00:00.123 TP0 EP0] Decode batch, #running-req: 8, #token: 9,
      token usage: 0.01, accept len: 3.86, accept rate: 0.77, cuda graph: True,
      gen throughput (token/s): 1234.56, #queue-req: 0
    One line per --decode-log-interval decode steps; `accept len` is accepted
    tokens per verify over those steps.  Weighting lines by #running-req gives
    Σ accepted / Σ verifies over the window (exact at interval 1).
(b) per-request meta_info: Σ completion_tokens / Σ spec_verify_ct.
(c) /metrics counter deltas (when the server runs with --enable-metrics).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional

PREFIX = re.compile(r"^\[(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?)(?P<ranks>(?: [A-Z_]+\d+)*)\] (?P<msg>.*)$")
DECODE = re.compile(
    r"^Decode batch(?: \[\d+\])?, #running-req: (?P<running>\d+), .*?"
    r"accept len: (?P<accept_len>\d+\.\d+), accept rate: (?P<accept_rate>\d+\.\d+), "
)
# A Decode-batch line that is not whole (truncated, interleaved): counted, never parsed.
DECODE_START = re.compile(r"Decode batch")
TAIL = re.compile(r"#queue-req: \d+")

# Disagreement between sources above this fraction is flagged.
DISAGREEMENT = 0.02


@dataclass
class DecodeLogStats:
    lines: int = 0
    weighted_sum: float = 0.0
    weight: int = 0
    malformed: int = 0
    rank: Optional[str] = None
    values: List[float] = field(default_factory=list)

    @property
    def accept_length(self) -> Optional[float]:
        return self.weighted_sum / self.weight if self.weight else None

    def as_dict(self) -> Dict:
        return {
            "accept_length": self.accept_length,
            "lines": self.lines,
            "malformed_lines": self.malformed,
            "rank": self.rank,
            "unweighted_mean": sum(self.values) / len(self.values) if self.values else None,
        }


def parse_decode_lines(lines: Iterable[str]) -> DecodeLogStats:
    """Accept length over decode-log lines; one rank counted, malformed lines counted apart."""
    stats = DecodeLogStats()
    for raw in lines:
        line = raw.rstrip("\n")
        if "Decode batch" not in line:
            continue
        m = PREFIX.match(line)
        if not m:
            stats.malformed += 1
            continue
        ranks = m.group("ranks").strip()
        msg = m.group("msg")
        d = DECODE.match(msg)
        if not d or not TAIL.search(msg) or len(DECODE_START.findall(msg)) != 1:
            # Not a spec decode line (no accept len) is no error; anything else is.
            if "accept len" in msg or not msg.startswith("Decode batch") or not TAIL.search(msg):
                stats.malformed += 1
            continue
        # Every TP rank that logs would count each step again: keep the first rank seen.
        if stats.rank is None:
            stats.rank = ranks
        elif ranks != stats.rank:
            continue
        running = int(d.group("running"))
        value = float(d.group("accept_len"))
        stats.lines += 1
        stats.values.append(value)
        stats.weighted_sum += value * running
        stats.weight += running
    return stats


def read_window(log_path: Path, start: int, end: Optional[int] = None) -> List[str]:
    """Lines of a server log between two byte offsets (a benchmark's window)."""
    with open(log_path, "rb") as fh:
        fh.seek(start)
        data = fh.read() if end is None else fh.read(max(0, end - start))
    return data.decode("utf-8", errors="replace").splitlines()


def from_meta_info(records: Iterable[Dict]) -> Dict:
    """Σ completion_tokens / Σ spec_verify_ct over requests that report both."""
    tokens = verifies = used = 0
    for rec in records:
        meta = rec.get("meta_info") or rec
        ct, vc = meta.get("completion_tokens"), meta.get("spec_verify_ct")
        if ct is None or not vc:
            continue
        tokens += int(ct)
        verifies += int(vc)
        used += 1
    return {"accept_length": tokens / verifies if verifies else None, "requests": used,
            "completion_tokens": tokens, "spec_verify_ct": verifies}


# sglang 0.5.20 counts both per finished request (srt/observability/
# metrics_collector.py): their deltas give Σ completion tokens / Σ verifies.
SPEC_TOKENS_COUNTER = "sglang:generation_tokens_total"
SPEC_VERIFY_COUNTER = "sglang:spec_verify_calls_total"


def parse_prometheus(text: str) -> Dict[str, float]:
    """Sum each metric over its label sets (ranks)."""
    totals: Dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)", line)
        if not m:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        totals[m.group(1)] = totals.get(m.group(1), 0.0) + value
    return totals


def from_metrics(before: Dict[str, float], after: Dict[str, float],
                 tokens_counter: str = SPEC_TOKENS_COUNTER, verify_counter: str = SPEC_VERIFY_COUNTER) -> Dict:
    if tokens_counter not in after or verify_counter not in after:
        return {"accept_length": None, "note": f"counters {tokens_counter}, {verify_counter} not exported"}
    d_tokens = after[tokens_counter] - before.get(tokens_counter, 0.0)
    d_verify = after[verify_counter] - before.get(verify_counter, 0.0)
    return {"accept_length": d_tokens / d_verify if d_verify > 0 else None,
            "tokens_delta": d_tokens, "verify_delta": d_verify}


def agreement(values: Dict[str, Optional[float]], tolerance: float = DISAGREEMENT) -> Dict:
    present = {k: v for k, v in values.items() if v is not None}
    if len(present) < 2:
        return {"agree": None, "max_relative_spread": None, "sources": sorted(present)}
    lo, hi = min(present.values()), max(present.values())
    spread = (hi - lo) / hi if hi else 0.0
    return {"agree": spread <= tolerance, "max_relative_spread": spread, "sources": sorted(present)}
