"""Accept length from decode logs, meta_info and /metrics, on lines in sglang 0.5.20's format."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from specrepro.measure import accept_length as al
from specrepro.core.config import PROJECT_ROOT


def decode_line(running, accept, rate=0.6, ranks=" TP0 EP0", ts="2026-12-02 10:00:00.123"):
    # metrics_reporter.py: "Decode batch, #running-req: N, " + usage parts + "accept len: ..., accept rate: ..., "
    # + "cuda graph: ..., gen throughput (token/s): ..., #queue-req: ..."
    return (f"[{ts}{ranks}] Decode batch, #running-req: {running}, #token: 5120, token usage: 0.02, "
            f"accept len: {accept:.2f}, accept rate: {rate:.2f}, cuda graph: True, "
            f"gen throughput (token/s): 1234.56, #queue-req: 0")


def test_weighted_by_running_requests():
    lines = [decode_line(8, 4.00), decode_line(2, 2.00)]
    stats = al.parse_decode_lines(lines)
    assert stats.lines == 2
    assert stats.accept_length == pytest.approx((8 * 4 + 2 * 2) / 10)
    assert stats.as_dict()["unweighted_mean"] == pytest.approx(3.0)


def test_only_one_rank_counts():
    lines = [decode_line(8, 3.0, ranks=" TP0 EP0"), decode_line(8, 3.0, ranks=" TP1 EP1"), decode_line(8, 5.0, ranks=" TP0 EP0")]
    stats = al.parse_decode_lines(lines)
    assert stats.lines == 2 and stats.rank == "TP0 EP0"
    assert stats.accept_length == pytest.approx(4.0)


def test_malformed_and_truncated_lines_are_counted_not_parsed():
    good = decode_line(4, 3.5)
    lines = [
        good,
        good[:60],  # truncated mid-line
        "[2026-12-02 10:00:00 TP0] Decode batch, #running-req: 8, accept len: 9",  # no accept rate / tail
        "Decode batch, #running-req: x, accept len: garbage, accept rate: ?, #queue-req: 0",  # no prefix
        "[2026-12-02 10:00:01 TP0] Prefill batch, #new-seq: 1, #new-token: 10",  # not a decode line
        "[2026-12-02 10:00:01 TP0] Decode batch, #running-req: 2, #token: 10, token usage: 0.00, cuda graph: True, gen throughput (token/s): 1.00, #queue-req: 0",  # no spec: fine
        good + good,  # two lines glued together
    ]
    stats = al.parse_decode_lines(lines)
    assert stats.lines == 1
    assert stats.accept_length == pytest.approx(3.5)
    assert stats.malformed == 4


def test_window_by_byte_offsets(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(decode_line(1, 1.0) + "\n")
    start = log.stat().st_size
    with open(log, "a") as fh:
        fh.write(decode_line(1, 4.0) + "\n")
    end = log.stat().st_size
    with open(log, "a") as fh:
        fh.write(decode_line(1, 9.0) + "\n")
    assert al.parse_decode_lines(al.read_window(log, start, end)).accept_length == pytest.approx(4.0)


def test_meta_info_and_metrics_sources():
    records = [{"meta_info": {"completion_tokens": 40, "spec_verify_ct": 10}},
               {"meta_info": {"completion_tokens": 30, "spec_verify_ct": 10}},
               {"meta_info": {"completion_tokens": 5}}]
    # without correct-draft counts: completion less each request's prefill token, per verify
    assert al.from_meta_info(records)["accept_length"] == pytest.approx((39 + 29) / 20)
    text = ('# TYPE sglang:generation_tokens_total counter\n'
            'sglang:generation_tokens_total{tp_rank="0",is_streaming="false"} 100.0\n'
            'sglang:generation_tokens_total{tp_rank="0",is_streaming="true"} 50.0\n'
            'sglang:spec_verify_calls_total{tp_rank="0"} 40.0\n'
            'sglang:num_requests_total{tp_rank="0",is_streaming="false"} 7.0\n')
    before = al.parse_prometheus(text)
    after = al.parse_prometheus(text.replace("100.0", "170.0").replace("40.0", "60.0").replace("7.0", "9.0"))
    # 70 tokens of 2 finished requests over 20 verifies: 2 of them came from prefills
    assert al.from_metrics(before, after)["accept_length"] == pytest.approx((70 - 2) / 20)
    # each finished request may hide up to 3 committed drafts past its max_new_tokens (4 draft tokens a verify)
    assert al.from_metrics(before, after, drafts_per_verify=3)["accept_length_upper"] == pytest.approx((68 + 6) / 20)


def test_agreement_flags_more_than_two_percent():
    assert al.agreement({"a": 3.0, "b": 3.05, "c": None})["agree"] is True
    assert al.agreement({"a": 3.0, "b": 3.2})["agree"] is False
    assert al.agreement({"a": 3.0, "b": None})["agree"] is None


def test_a_source_with_an_upper_bound_agrees_anywhere_in_its_interval():
    # counters that miss the overrun drafts of short requests: 3.03 emitted, up to 3.16 committed
    values = {"decode_log": 3.134, "meta_info": 3.120, "metrics": 3.027}
    assert al.agreement(values)["agree"] is False
    both = al.agreement(values, upper={"metrics": 3.16})
    assert both["agree"] is True and both["max_relative_spread"] == pytest.approx((3.134 - 3.120) / 3.16)
    assert both["intervals"] == {"metrics": [3.027, 3.16]}
    # an interval that still misses the others by more than 2% disagrees, by its gap
    far = al.agreement({"meta_info": 3.6, "metrics": 3.0}, upper={"metrics": 3.4})
    assert far["agree"] is False and far["max_relative_spread"] == pytest.approx(0.2 / 3.6)


def test_accept_len_cli(tmp_path):
    log = tmp_path / "decode.log"
    log.write_text("\n".join([decode_line(8, 3.86), decode_line(8, 3.80), "garbage Decode batch line"]) + "\n")
    out = subprocess.run([sys.executable, "-m", "specrepro.cli", "accept-len", str(log), "--json"],
                         capture_output=True, text=True, cwd=PROJECT_ROOT, check=True)
    result = json.loads(out.stdout)[str(log)]
    assert result["accept_length"] == pytest.approx(3.83)
    assert result["malformed_lines"] == 1
    missing = subprocess.run([sys.executable, "-m", "specrepro.cli", "accept-len", str(tmp_path / "nope.log")],
                             capture_output=True, text=True, cwd=PROJECT_ROOT)
    assert missing.returncode == 2 and "nope.log" in missing.stderr


def test_sglangs_cpu_engine_spells_the_graph_field_cpu_graph():
    # two lines as sglang 0.5.20's real server printed them on this CPU (platform cpu, 2026-12-04)
    lines = ["[2026-12-04 16:36:39.405] Decode batch, #running-req: 1, #token: 115, token usage: 0.01, accept len: "
             "3.40, accept rate: 0.80, cpu graph: False, gen throughput (token/s): 218.54, #queue-req: 0",
             "[2026-12-04 16:36:39.473] Decode batch, #running-req: 1, #token: 129, token usage: 0.02, accept len: "
             "2.80, accept rate: 0.60, cpu graph: False, gen throughput (token/s): 204.83, #queue-req: 0"]
    stats = al.parse_decode_lines(lines)
    assert stats.accept_length == pytest.approx(3.1) and stats.malformed == 0
    assert stats.cuda_graph_lines == {"True": 0, "False": 2}
