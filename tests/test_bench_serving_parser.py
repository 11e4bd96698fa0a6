"""bench_serving JSONL with the fields of sglang 0.5.20's benchmark/serving.py."""

from __future__ import annotations

import json

import pytest

from specrepro.benchmarks.bench_serving import BenchOutputError, parse_bench_serving


def result_line(**over):
    line = {"backend": "sglang", "dataset_name": "random", "completed": 2, "duration": 1.5,
            "request_throughput": 1.3, "output_throughput": 310.2, "input_throughput": 600.0, "total_throughput": 910.0,
            "mean_ttft_ms": 40.0, "median_ttft_ms": 39.0, "p99_ttft_ms": 45.0,
            "mean_tpot_ms": 3.04, "median_tpot_ms": 2.1, "p99_tpot_ms": 9.0,
            "mean_itl_ms": 3.0, "median_itl_ms": 1.0, "p99_itl_ms": 10.0, "accept_length": 3.9,
            "input_lens": [1024, 1024], "output_lens": [3, 512], "ttfts": [0.04, 0.039],
            "itls": [[0.001, 0.003], [0.002] * 511], "errors": ["", ""]}
    line.update(over)
    return json.dumps(line)


def test_summary_and_per_request_rows(tmp_path):
    path = tmp_path / "bench.jsonl"
    path.write_text(result_line(output_throughput=1.0) + "\n" + result_line() + "\n")  # appended: last line counts
    parsed = parse_bench_serving(path)
    assert parsed["metrics"]["output_throughput"] == 310.2
    assert parsed["metrics"]["mean_tpot_ms"] == 3.04
    # server-lifetime accept length is kept apart, never as the run's accept_length
    assert "accept_length" not in parsed["metrics"]
    assert parsed["metrics"]["accept_length_server_lifetime"] == 3.9
    rows = parsed["requests"]
    assert rows[0]["tpot_ms"] == pytest.approx(1000 * 0.004 / 2)
    assert rows[1]["itls_ms"][0] == pytest.approx(2.0)


@pytest.mark.parametrize("content,needle", [
    ("", "empty"),
    ("{not json", "not JSON"),
    (json.dumps({"completed": 2}), "missing"),
    (result_line(mean_tpot_ms="fast"), "mean_tpot_ms"),
])
def test_malformed_output_names_the_file(tmp_path, content, needle):
    path = tmp_path / "broken.jsonl"
    path.write_text(content)
    with pytest.raises(BenchOutputError) as info:
        parse_bench_serving(path)
    assert str(path) in str(info.value) and needle in str(info.value)
