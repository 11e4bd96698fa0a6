"""Data files resolved before any job reads them (specrepro.util.datasets, the datasets rule): fetched once on the submit
host over real HTTP, checksummed, recorded, handed to sglang's client as --dataset-path; refused offline naming the key
to set."""

from __future__ import annotations

import functools
import http.server
import io
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import ROOT
from specrepro.core.campaign import Campaign
from specrepro.core.config import ConfigError, compose
from specrepro.util.datasets import DatasetError, resolve_dataset

# the shape sglang 0.5.20's sharegpt/random loaders read (benchmark/datasets/sharegpt.py: "conversations", "value")
SHAREGPT = [{"id": str(i), "conversations": [{"from": "human", "value": f"question {i}"},
                                             {"from": "gpt", "value": f"answer {i}"}]} for i in range(50)]


@pytest.fixture
def http_folder(tmp_path):
    served = tmp_path / "served"
    served.mkdir()
    (served / "ShareGPT_V3_unfiltered_cleaned_split.json").write_text(json.dumps(SHAREGPT))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield served, f"http://127.0.0.1:{server.server_address[1]}/ShareGPT_V3_unfiltered_cleaned_split.json"
    server.shutdown()


def test_fetched_once_recorded_then_held_to_its_hash(tmp_path, http_folder):
    served, url = http_folder
    source = {"path": str(tmp_path / "cache" / "sharegpt.json"), "url": url, "sha256": None}
    log = io.StringIO()
    first = resolve_dataset(source, tmp_path / "r1.json", False, log, "benchmarks.b.serving.sharegpt")
    assert first["fetched_now"] and first["bytes"] == (served / "ShareGPT_V3_unfiltered_cleaned_split.json").stat().st_size
    assert "none published" in first["verified_by"] and "datasets: fetching" in log.getvalue()
    (served / "ShareGPT_V3_unfiltered_cleaned_split.json").unlink()  # no second download happens
    again = resolve_dataset(source, tmp_path / "r2.json", False, io.StringIO(), "benchmarks.b.serving.sharegpt")
    assert not again["fetched_now"] and again["sha256"] == first["sha256"] and "recorded at its first fetch" in again["verified_by"]
    Path(source["path"]).write_text("[]")  # another file under the same name
    with pytest.raises(DatasetError, match=r"benchmarks.b.serving.sharegpt: .* has sha256 .* expected"):
        resolve_dataset(source, tmp_path / "r3.json", False, io.StringIO(), "benchmarks.b.serving.sharegpt")


def test_missing_offline_or_unreachable_names_the_file_to_provide(tmp_path):
    source = {"path": str(tmp_path / "absent.json"), "url": "http://127.0.0.1:9/none.json", "sha256": None}
    with pytest.raises(DatasetError, match=r"benchmarks.b.serving.sharegpt.path: .*absent.json is not there \(offline"):
        resolve_dataset(source, tmp_path / "r.json", True, io.StringIO(), "benchmarks.b.serving.sharegpt")
    with pytest.raises(DatasetError, match=r"benchmarks.b.serving.sharegpt.url: .* could not be fetched .*put the file at"):
        resolve_dataset(source, tmp_path / "r.json", False, io.StringIO(), "benchmarks.b.serving.sharegpt")


def test_offline_campaign_without_the_file_is_refused_at_validation(tmp_path):
    with pytest.raises(ConfigError, match=r"benchmarks.bench_serving.serving.sharegpt.path: .* is not there and it "
                                          r"cannot be fetched \(offline=true\): put the file there"):
        compose(["offline=true", f"cache_dir={tmp_path}"])


def test_an_empty_data_dir_variable_counts_as_unset(tmp_path, monkeypatch):
    """A clone with no ../shared beside it: the Makefile used to export SPECREPRO_DATA_DIR="" and OmegaConf's oc.env
    read that as the folder "", so GSM8K was looked for at /gsm8k/test.jsonl.  Empty is unset, as in the shell."""
    monkeypatch.setenv("SPECREPRO_DATA_DIR", "")
    monkeypatch.setenv("SPECREPRO_CACHE_DIR", "")
    cfg = compose([f"cache_dir={tmp_path}", "offline=false"])
    assert cfg["data"]["gsm8k"]["path"] == str(tmp_path / "datasets" / "gsm8k" / "test.jsonl")
    assert compose(["offline=false"])["cache_dir"] == str(ROOT / ".cache")
    monkeypatch.setenv("SPECREPRO_DATA_DIR", str(tmp_path / "data"))
    assert compose([f"cache_dir={tmp_path}", "offline=false"])["data"]["gsm8k"]["path"] == \
        str(tmp_path / "data" / "gsm8k" / "test.jsonl")


def test_gsm8k_is_read_from_its_configured_path_and_nothing_points_outside_the_repository(tmp_path, monkeypatch):
    """The default GSM8K path is the cache; offline without it, the error names data.gsm8k.path and the sha256."""
    monkeypatch.delenv("SPECREPRO_DATA_DIR")
    cfg = compose([f"cache_dir={tmp_path}", "offline=false"])
    assert cfg["data"]["gsm8k"]["path"] == str(tmp_path / "datasets" / "gsm8k" / "test.jsonl")
    with pytest.raises(ConfigError) as info:
        compose([f"cache_dir={tmp_path}", "offline=true"])
    assert (f"data.gsm8k.path: {tmp_path}/datasets/gsm8k/test.jsonl is not there and it cannot be fetched "
            f"(offline=true): put the file there (sha256 3730d312") in str(info.value)
    assert "set data.gsm8k.path=FILE" in str(info.value)
    # every gsm8k benchmark and the toy model's corpus read that one entry
    toy = compose([f"cache_dir={tmp_path}", "experiment=eagle_topk_cpu"])
    assert {b["gsm8k"]["test_data"] for b in toy["benchmarks"].values() if b["kind"] == "gsm8k"} == {"gsm8k"}
    assert toy["model"]["toy"]["corpus"] == "gsm8k"
    for path in (ROOT / "conf").rglob("*.yaml"):
        assert "../shared" not in path.read_text(), path


def test_the_client_gets_the_resolved_file_and_the_measuring_job_waits_for_it(tmp_path):
    campaign = Campaign(compose([f"results_dir={tmp_path / 'r'}", f"cache_dir={tmp_path / 'c'}"]))
    from specrepro.core.arm_plan import BenchRun

    # the bench_serving kind's client step (specrepro.benchmarks.bench_serving)
    argv = campaign.plan("main_rs_on").client_step(BenchRun("main_rs_on", "bench_serving", 1), "http://h:1", "out").argv
    assert argv[argv.index("--dataset-path") + 1] == str(tmp_path / "c" / "datasets" / "ShareGPT_V3_unfiltered_cleaned_split.json")
    assert campaign.datasets_for_arm("main_rs_on") == [str(tmp_path / "r" / "datasets" / f"{b}.json")
                                                      for b in ("gsm8k", "gsm8k_sampled", "bench_serving")]
    # GSM8K's test set is resolved the same way, once for every benchmark that reads it
    assert campaign.datasets_for_arm("main_rs_on_nocg") == [str(tmp_path / "r" / "datasets" / "gsm8k.json")]
    assert campaign.data_source("gsm8k_sampled") == (campaign.cfg["data"]["gsm8k"], "data.gsm8k")


def test_the_datasets_rule_runs_on_the_submit_host_with_real_snakemake(tmp_path, http_folder):
    _, url = http_folder
    results = tmp_path / "results"
    target = results / "datasets" / "bench_serving.json"
    out = subprocess.run([str(Path(sys.executable).parent / "snakemake"), str(target), "-c1", "--config",
                          f"overrides=[results_dir={results},cache_dir={tmp_path / 'cache'},"
                          f"benchmarks.bench_serving.serving.sharegpt.url={url}]"],
                         cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    record = json.loads(target.read_text())
    assert record["path"] == str(tmp_path / "cache" / "datasets" / "ShareGPT_V3_unfiltered_cleaned_split.json")
    assert "datasets: fetching" in (results / "logs" / "datasets" / "bench_serving.log").read_text()
