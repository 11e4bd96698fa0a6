"""GPU facts: the vendors' outputs parsed, fingerprints compared, mismatches flagged in the report.

The recorded outputs under tests/data/gpu_facts follow the tools' documented
formats: amd-smi's JSON (`static`: asic.market_name, driver.version,
limit.socket_power, partition; `metric`: perf_level, clock.gfx_0.clk,
mem_usage.used_vram/total_vram as {value, unit}, a bare list or {"gpu_data": [...]},
sometimes after a warning line) and nvidia-smi's `--query-gpu ... --format=csv,noheader,nounits`.
No MI355X was at hand: these are shaped from the documentation, not captured on one.
"""

from __future__ import annotations

import json

import pandas as pd

from conftest import ROOT
from specrepro.core.config import compose
from specrepro.serving.gpu_facts import (facts_from_probe, fingerprint, fingerprint_differences,
                                 no_gpu_facts, parse_amd_smi, parse_nvidia_smi_csv)

DATA = ROOT / "tests" / "data" / "gpu_facts"


def test_amd_smi_static_and_metric():
    gpus = parse_amd_smi((DATA / "amd_smi_static.json").read_text(), (DATA / "amd_smi_metric.json").read_text())
    assert [g["index"] for g in gpus] == [2, 3]
    g = gpus[0]
    assert (g["gpu_model"], g["driver"], g["power_cap_w"], g["compute_partition"], g["memory_partition"]) == \
        ("AMD Instinct MI355X", "6.14.14", 1400.0, "SPX", "NPS1")
    assert (g["perf_level"], g["sclk_mhz"], g["mclk_mhz"], g["temperature_c"]) == ("AMDSMI_DEV_PERF_LEVEL_AUTO", 132.0, 900.0, 38.0)
    assert (g["memory_used_mb"], gpus[1]["memory_used_mb"]) == (283.0, 120.5 * 1024)


def test_nvidia_smi_csv():
    gpus = parse_nvidia_smi_csv((DATA / "nvidia_smi.csv").read_text())
    assert [(g["index"], g["gpu_model"], g["driver"], g["power_cap_w"], g["memory_used_mb"]) for g in gpus] == \
        [(0, "NVIDIA H200", "580.159.04", 700.0, 1.0), (1, "NVIDIA H200", "580.159.04", 700.0, 140000.0)]


def test_facts_take_the_runtime_version_from_the_image_and_say_when_there_is_no_gpu():
    raw = {"amd_smi_static": {"rc": 0, "out": (DATA / "amd_smi_static.json").read_text()},
           "amd_smi_metric": {"rc": 0, "out": (DATA / "amd_smi_metric.json").read_text()},
           "rocm_version": "7.0.0-38", "cuda_version_json": None}
    facts = facts_from_probe(raw)
    assert facts["source"] == "amd-smi" and facts["runtime_version"] == "ROCm 7.0.0-38"
    assert fingerprint(facts, "sha256:abc")["gpu_model"] == "AMD Instinct MI355X"
    empty = facts_from_probe({"amd_smi_static": None, "nvidia_smi": None})
    assert empty["source"] == "none" and "no amd-smi, rocm-smi or nvidia-smi" in empty["note"]
    assert fingerprint(no_gpu_facts(), None)["gpu_model"] == "none"


def test_a_fingerprint_mismatch_is_flagged_next_to_the_deltas(tmp_path):
    from specrepro.analysis.report import campaign_report

    facts = facts_from_probe({"amd_smi_static": {"rc": 0, "out": (DATA / "amd_smi_static.json").read_text()},
                              "amd_smi_metric": {"rc": 0, "out": (DATA / "amd_smi_metric.json").read_text()},
                              "rocm_version": "7.0.0"})
    capped = json.loads(json.dumps(facts))
    for g in capped["gpus"]:
        g["power_cap_w"] = 1000.0  # another node, power-capped
    records = []
    for arm, f in (("main_rs_off", facts), ("main_rs_on", facts), ("pr_rs_on", capped)):
        rec = {"arm": arm, "host": f"node-{arm}", "launches": [{"gpus": [2, 3]}], "gpu_facts": {"before": f},
               "fingerprint": fingerprint(f, "sha256:base" if arm != "pr_rs_on" else "sha256:patched")}
        path = tmp_path / f"{arm}.json"
        path.write_text(json.dumps(rec))
        records.append(path)
    assert fingerprint_differences({json.loads(p.read_text())["arm"]: json.loads(p.read_text())["fingerprint"]
                                    for p in records}, "main_rs_off") == [
        {"arm": "pr_rs_on", "baseline": "main_rs_off", "differs": {"power_cap_w": ("1400.0", "1000.0")}}]
    rows = [{"arm": a, "benchmark": "gsm8k", "repeat": 1, "metric": "accept_length", "value": v, "unit": ""}
            for a, v in (("main_rs_off", 3.78), ("main_rs_on", 3.08), ("pr_rs_on", 3.88))]
    runs = tmp_path / "runs.csv"
    pd.DataFrame(rows).to_csv(runs, index=False)
    cfg = compose([f"results_dir={tmp_path}"])
    md = tmp_path / "report.md"
    campaign_report(cfg, runs, tmp_path / "none.parquet", [], None, md, tmp_path / "r.html", tmp_path / "a.json",
                    arm_records=records)
    text = md.read_text()
    assert "GPUs measured inside the arms' images: AMD Instinct MI355X" in text
    assert "**Fingerprint mismatch: pr_rs_on differs from main_rs_off in power_cap_w: 1400.0 vs 1000.0**" in text
