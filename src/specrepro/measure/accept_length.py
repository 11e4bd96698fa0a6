"""Accept length from three sources, each scoped to one benchmark's window.

(a) sglang's decode-log lines (sglang 0.5.20, scheduler_components/
    metrics_reporter.py):
      [2026-12-02 10:00:00.123 TP0 EP0] Decode batch, #running-req: 8, #token: 9,
      token usage: 0.01, accept len: 3.86, accept rate: 0.77, cuda graph: True,
      gen throughput (token/s): 1234.56, #queue-req: 0
    One line per --decode-log-interval decode steps; `accept len` is accepted
    tokens per verify over those steps.  Weighting lines by #running-req gives
    Σ accepted / Σ verifies over the window (exact at interval 1).
    The same source fixes how the two numbers relate: accept len =
    accepted / verifies and accept rate = correct drafts / (verifies x d), with
    d = speculative_num_draft_tokens - 1 (else speculative_num_steps); every
    verify commits its correct drafts plus one bonus token, so
    accept len = 1 + accept rate x d, up to the two-decimal rounding.
    `cuda graph: True|False` says whether the logged batch ran a CUDA graph
    (counted for every Decode-batch line, speculative or not); the same field
    is spelled `cpu graph:` on sglang's CPU engine (`npu graph:`, `musa graph:`
    on those devices: the reporter's `_graph_backend_label`).
(b) per-request meta_info: 1 + Σ correct drafts / Σ spec_verify_ct (see
    `from_meta_info`).  sglang 0.5.20
    (managers/tokenizer_manager.py, schedule_batch.py) reports per request
    spec_verify_ct, spec_num_correct_drafts, spec_num_proposed_drafts =
    verify_ct x (num_draft_tokens - 1) and spec_correct_drafts_histogram
    (entry i: verify steps that accepted i drafts), so Σ histogram = verify_ct
    and Σ i x histogram[i] = correct drafts; completion_tokens = 1 (the prefill
    token) + correct + verify_ct, less what the last step accepted past the
    request's end (0 .. num_draft_tokens - 1).
(c) /metrics counter deltas (when the server runs with --enable-metrics):
    (Δ generation tokens - Δ finished requests) / Δ verify calls: emitted
    tokens, so a request that ends inside a verify step hides the drafts that
    step accepted past its end; the counters bound what was committed from
    both sides (`from_metrics`).

All three measure tokens committed per verify step.  A request's first token
comes from its prefill, not from a verify step: sglang's own per-request
spec_accept_length (completion_tokens / verify_ct) counts it, and so would a
plain ratio of the /metrics counters, higher by about one token per request's
verify count (2-4% on GSM8K-length outputs, beyond the 2% agreement band).
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
CUDA_GRAPH = re.compile(r", (?:cuda|cpu|npu|musa) graph: (True|False),")

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
    rates: List[float] = field(default_factory=list)
    running: List[int] = field(default_factory=list)
    # rank -> {"True": lines, "False": lines}
    cuda_graph_by_rank: Dict[str, Dict[str, int]] = field(default_factory=dict)

    @property
    def cuda_graph_lines(self) -> Dict[str, int]:
        """`cuda graph:` counts of the counted rank (of the first rank seen when no line was speculative)."""
        if self.rank is not None:
            return dict(self.cuda_graph_by_rank.get(self.rank, {}))
        return dict(next(iter(self.cuda_graph_by_rank.values()), {}))

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
            "cuda_graph_lines": self.cuda_graph_lines,
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
        graph = CUDA_GRAPH.search(msg)
        if graph and msg.startswith("Decode batch") and TAIL.search(msg) and len(DECODE_START.findall(msg)) == 1:
            per_rank = stats.cuda_graph_by_rank.setdefault(ranks, {"True": 0, "False": 0})
            per_rank[graph.group(1)] += 1
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
        stats.rates.append(float(d.group("accept_rate")))
        stats.running.append(running)
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
    """Tokens committed per verify step, over requests that report their counts.

    1 + Σ spec_num_correct_drafts / Σ spec_verify_ct where every request reports
    its correct drafts: the decode log's definition (drafts plus the bonus token
    per step).  Otherwise Σ (completion_tokens - 1) / Σ spec_verify_ct: the
    completion less the prefill's token.
    """
    tokens = verifies = correct = used = with_correct = 0
    for rec in records:
        meta = rec.get("meta_info") or rec
        ct, vc = meta.get("completion_tokens"), meta.get("spec_verify_ct")
        if ct is None or not vc:
            continue
        tokens += int(ct) - 1
        verifies += int(vc)
        used += 1
        if meta.get("spec_num_correct_drafts") is not None:
            correct += int(meta["spec_num_correct_drafts"])
            with_correct += 1
    if not verifies:
        value, definition = None, None
    elif with_correct == used:
        value, definition = 1 + correct / verifies, "1 + correct drafts / verify steps"
    else:
        value, definition = tokens / verifies, "(completion tokens - 1) / verify steps"
    return {"accept_length": value, "definition": definition, "requests": used,
            "committed_tokens": tokens, "spec_verify_ct": verifies}


# sglang 0.5.20 counts both per finished request (srt/observability/
# metrics_collector.py): their deltas give Σ completion tokens / Σ verifies.
SPEC_TOKENS_COUNTER = "sglang:generation_tokens_total"
SPEC_VERIFY_COUNTER = "sglang:spec_verify_calls_total"
# Incremented once per finished request in the same place (observe_one_finished_request).
REQUESTS_COUNTER = "sglang:num_requests_total"


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
                 tokens_counter: str = SPEC_TOKENS_COUNTER, verify_counter: str = SPEC_VERIFY_COUNTER,
                 drafts_per_verify: Optional[int] = None) -> Dict:
    """(Δ generation tokens - Δ finished requests) / Δ verify calls, and the most it can undercount.

    The counters see the tokens a request emitted: when a request reaches
    max_new_tokens inside a verify step, the drafts that step accepted past
    the limit were committed by the verify (the decode log and meta_info count
    them) but never emitted.  Each finished request hides at most
    `drafts_per_verify` such tokens, so tokens committed per verify lies in
    [accept_length, accept_length_upper]: the gap is negligible for long
    outputs and a few percent for short ones.
    """
    if tokens_counter not in after or verify_counter not in after:
        return {"accept_length": None, "note": f"counters {tokens_counter}, {verify_counter} not exported"}
    d_tokens = after[tokens_counter] - before.get(tokens_counter, 0.0)
    d_verify = after[verify_counter] - before.get(verify_counter, 0.0)
    # each finished request's prefill token is not a verify step's
    d_requests = after.get(REQUESTS_COUNTER, 0.0) - before.get(REQUESTS_COUNTER, 0.0)
    value = (d_tokens - d_requests) / d_verify if d_verify > 0 else None
    upper = (value + drafts_per_verify * d_requests / d_verify
             if value is not None and drafts_per_verify else None)
    return {"accept_length": value, "accept_length_upper": upper, "tokens_delta": d_tokens,
            "requests_delta": d_requests, "verify_delta": d_verify}


def agreement(values: Dict[str, Optional[float]], tolerance: float = DISAGREEMENT,
              upper: Optional[Dict[str, float]] = None) -> Dict:
    """Whether the sources agree within `tolerance` (relative).

    A source with an `upper` bound is the interval [value, upper] (see
    from_metrics); the spread is the largest gap between any two sources.
    """
    present = {k: (v, max(v, (upper or {}).get(k) or v)) for k, v in values.items() if v is not None}
    if len(present) < 2:
        return {"agree": None, "max_relative_spread": None, "sources": sorted(present)}
    top = max(hi for _, hi in present.values())
    gap = max(0.0, max(lo for lo, _ in present.values()) - min(hi for _, hi in present.values()))
    spread = gap / top if top else 0.0
    return {"agree": spread <= tolerance, "max_relative_spread": spread, "sources": sorted(present),
            **({"intervals": {k: list(v) for k, v in present.items() if v[0] != v[1]}} if upper else {})}


# The decode log prints both numbers to two decimals: a line is consistent when
# accept len and 1 + rate x d agree within that rounding.
ROUNDING = 0.005


def decode_consistency(stats: DecodeLogStats, drafts_per_verify: Optional[int]) -> Dict:
    """accept len against 1 + accept rate x d, per line and weighted over the window."""
    if not stats.values or not drafts_per_verify:
        return {"checked": False, "lines": len(stats.values), "drafts_per_verify": drafts_per_verify}
    d = drafts_per_verify
    tolerance = ROUNDING * (1 + d) + 1e-9
    off = sum(1 for v, r in zip(stats.values, stats.rates) if abs(v - (1 + r * d)) > tolerance)
    weight = sum(stats.running)
    from_len = sum(v * w for v, w in zip(stats.values, stats.running)) / weight
    from_rate = sum((1 + r * d) * w for r, w in zip(stats.rates, stats.running)) / weight
    gap = abs(from_len - from_rate) / from_len if from_len else 0.0
    return {"checked": True, "lines": len(stats.values), "inconsistent_lines": off, "drafts_per_verify": d,
            "accept_length": from_len, "accept_length_from_rate": from_rate, "relative_gap": gap,
            "consistent": gap <= DISAGREEMENT and off <= 0.05 * len(stats.values)}


def meta_info_consistency(records: Iterable[Dict], num_draft_tokens: Optional[int]) -> Dict:
    """Per request, meta_info's counts against each other (identities of sglang 0.5.20's accounting)."""
    checked = bad_histogram = bad_tokens = 0
    tokens = verifies = correct = 0
    examples: List[Dict] = []
    for rec in records:
        vc, ct, cd = rec.get("spec_verify_ct"), rec.get("completion_tokens"), rec.get("spec_num_correct_drafts")
        if not vc or ct is None or cd is None:
            continue
        checked += 1
        tokens, verifies, correct = tokens + ct, verifies + vc, correct + cd
        hist = rec.get("spec_correct_drafts_histogram")
        if hist is not None and (sum(hist) != vc or sum(i * n for i, n in enumerate(hist)) != cd):
            bad_histogram += 1
            if len(examples) < 5:
                examples.append({"request": rec.get("index"), "verify_ct": vc, "correct": cd, "histogram": hist})
        overshoot = 1 + cd + vc - ct
        if num_draft_tokens and not 0 <= overshoot <= num_draft_tokens - 1:
            bad_tokens += 1
            if len(examples) < 5:
                examples.append({"request": rec.get("index"), "completion_tokens": ct, "verify_ct": vc, "correct": cd})
    if not checked:
        return {"checked": False, "requests": 0}
    from_tokens = tokens / verifies
    from_correct = 1 + correct / verifies
    gap = abs(from_tokens - from_correct) / from_tokens
    return {"checked": True, "requests": checked, "accept_length": from_tokens,
            "accept_length_from_correct": from_correct, "relative_gap": gap,
            "histogram_mismatches": bad_histogram, "token_count_mismatches": bad_tokens, "examples": examples,
            # the gap is shown, not judged: the prefill token moves a short request's ratio by 1 / verify_ct
            "consistent": bad_histogram == 0 and bad_tokens == 0}


def pooled_histogram(records: Iterable[Dict]) -> List[int]:
    """spec_correct_drafts_histogram summed over requests: verify steps by drafts accepted."""
    total: List[int] = []
    for rec in records:
        for i, n in enumerate(rec.get("spec_correct_drafts_histogram") or []):
            if i >= len(total):
                total.extend([0] * (i + 1 - len(total)))
            total[i] += int(n)
    return total
