"""GPU facts measured where the server runs: inside its image, on the GPUs it was granted.

Read before and after each arm with the vendors' tools: `amd-smi` (its JSON:
`static` for the model, driver, power cap and partitions; `metric` for the
performance level, clocks, power, temperature, memory in use), `rocm-smi` as a
fallback (recorded raw), or `nvidia-smi --query-gpu ... --format=csv`.  The
image's ROCm/CUDA version comes from the image, never from the host.  A run
with no GPU says so.  The fingerprint of an arm (GPU model, driver, runtime,
image, performance level, power cap, partitions) is compared across the arms
of one table; a difference is flagged next to the deltas it could explain.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any, Dict, List, Optional

from specrepro.core.arm_plan import ArmPlan
from specrepro.serving.launch import LaunchContext, Launcher
from specrepro.measure import node_facts as nf
from specrepro.serving.probes import probe_argv, run_probe
NVIDIA_FIELDS = ["index", "name", "driver_version", "pstate", "clocks.sm", "clocks.mem", "power.limit",
                 "temperature.gpu", "memory.used", "memory.total", "compute_mode"]
FINGERPRINT_KEYS = ("gpu_model", "driver", "runtime_version", "image_id", "perf_level", "power_cap_w",
                    "compute_partition", "memory_partition")

# Runs inside the image with its python3 (standard library only): the raw outputs.
PROBE_SOURCE = '''
import json, shutil, subprocess
def run(cmd):
    if not shutil.which(cmd[0]):
        return None
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        return {"rc": p.returncode, "out": p.stdout[-200000:], "err": p.stderr[-2000:]}
    except Exception as exc:
        return {"rc": -1, "out": "", "err": str(exc)}
def read(path):
    try:
        return open(path).read().strip()
    except OSError:
        return None
out = {
    "amd_smi_static": run(["amd-smi", "static", "--json"]),
    "amd_smi_metric": run(["amd-smi", "metric", "--json"]),
    "rocm_smi": None,
    "nvidia_smi": run(["nvidia-smi", "--query-gpu=%s", "--format=csv,noheader,nounits"]),
    "rocm_version": read("/opt/rocm/.info/version"),
    "cuda_version_json": read("/usr/local/cuda/version.json"),
}
if not out["amd_smi_static"] or out["amd_smi_static"]["rc"] != 0:
    out["rocm_smi"] = run(["rocm-smi", "--showproductname", "--showdriverversion", "--showperflevel",
                           "--showmaxpower", "--showtemp", "--showclocks", "--showmeminfo", "vram", "--json"])
print(json.dumps(out))
''' % ",".join(NVIDIA_FIELDS)


def _json_list(text: str) -> List[Dict[str, Any]]:
    """amd-smi --json: a bare list or {"gpu_data": [...]}, maybe after warning lines."""
    start = min([i for i in (text.find("["), text.find("{")) if i >= 0], default=-1)
    if start < 0:
        return []
    data = json.loads(text[start:])
    if isinstance(data, dict):
        data = data.get("gpu_data", [])
    return [d for d in data if isinstance(d, dict)]


def _value(node: Any) -> Optional[float]:
    """{"value": v, "unit": u} or a number or "N/A"."""
    if isinstance(node, dict):
        node = node.get("value")
    try:
        return float(node)
    except (TypeError, ValueError):
        return None


def _mb(node: Any) -> Optional[float]:
    v = _value(node)
    if v is None:
        return None
    unit = (node.get("unit") if isinstance(node, dict) else "MB") or "MB"
    return v * {"B": 1 / 2**20, "KB": 1 / 2**10, "MB": 1, "GB": 2**10}.get(unit.upper(), 1)


def parse_amd_smi(static_text: str, metric_text: Optional[str]) -> List[Dict[str, Any]]:
    gpus: Dict[int, Dict[str, Any]] = {}
    for g in _json_list(static_text):
        limit = g.get("limit") or {}
        partition = g.get("partition") or {}
        gpus[int(g.get("gpu", len(gpus)))] = {
            "index": int(g.get("gpu", len(gpus))),
            "gpu_model": (g.get("asic") or {}).get("market_name"),
            "driver": (g.get("driver") or {}).get("version") or (g.get("driver") or {}).get("driver_version"),
            "power_cap_w": _value(limit.get("socket_power") or limit.get("max_power")),
            "compute_partition": partition.get("compute_partition"),
            "memory_partition": partition.get("memory_partition"),
        }
    for g in _json_list(metric_text or ""):
        entry = gpus.setdefault(int(g.get("gpu", 0)), {"index": int(g.get("gpu", 0))})
        clock, mem = g.get("clock") or {}, g.get("mem_usage") or {}
        entry.update(
            perf_level=g.get("perf_level"),
            sclk_mhz=_value((clock.get("gfx_0") or {}).get("clk")),
            mclk_mhz=_value((clock.get("mem_0") or {}).get("clk")),
            power_w=_value((g.get("power") or {}).get("socket_power")),
            temperature_c=_value((g.get("temperature") or {}).get("hotspot")),
            memory_used_mb=_mb(mem.get("used_vram")),
            memory_total_mb=_mb(mem.get("total_vram")),
        )
    return [gpus[k] for k in sorted(gpus)]


def parse_nvidia_smi_csv(text: str) -> List[Dict[str, Any]]:
    out = []
    for line in text.strip().splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(NVIDIA_FIELDS):
            continue
        row = dict(zip(NVIDIA_FIELDS, cells))

        def num(key):
            try:
                return float(row[key])
            except ValueError:
                return None

        out.append({"index": int(row["index"]), "gpu_model": row["name"], "driver": row["driver_version"],
                    "perf_level": row["pstate"], "sclk_mhz": num("clocks.sm"), "mclk_mhz": num("clocks.mem"),
                    "power_cap_w": num("power.limit"), "temperature_c": num("temperature.gpu"),
                    "memory_used_mb": num("memory.used"), "memory_total_mb": num("memory.total"),
                    "compute_partition": row["compute_mode"], "memory_partition": None})
    return out


def facts_from_probe(raw: Dict[str, Any]) -> Dict[str, Any]:
    """The probe's raw outputs -> facts: per-GPU rows, the image's runtime version, the source."""
    facts: Dict[str, Any] = {"gpus": [], "source": "none"}
    static, metric = raw.get("amd_smi_static"), raw.get("amd_smi_metric")
    if static and static["rc"] == 0:
        facts.update(source="amd-smi", gpus=parse_amd_smi(static["out"], metric["out"] if metric and metric["rc"] == 0 else None))
    elif raw.get("rocm_smi") and raw["rocm_smi"]["rc"] == 0:
        facts.update(source="rocm-smi", rocm_smi_raw=raw["rocm_smi"]["out"][:20000],
                     gpu_model=_rocm_smi_product(raw["rocm_smi"]["out"]))
    elif raw.get("nvidia_smi") and raw["nvidia_smi"]["rc"] == 0:
        facts.update(source="nvidia-smi", gpus=parse_nvidia_smi_csv(raw["nvidia_smi"]["out"]))
    if raw.get("rocm_version"):
        facts["runtime_version"] = f"ROCm {raw['rocm_version']}"
    elif raw.get("cuda_version_json"):
        try:
            facts["runtime_version"] = f"CUDA {json.loads(raw['cuda_version_json'])['cuda']['version']}"
        except (ValueError, KeyError, TypeError):
            pass
    if facts["source"] == "none":
        facts["note"] = "no amd-smi, rocm-smi or nvidia-smi answered inside the image"
    return facts


def _rocm_smi_product(text: str) -> Optional[str]:
    m = re.search(r'"Card (?:series|SKU|model)":\s*"([^"]+)"', text)
    return m.group(1) if m else None


def no_gpu_facts() -> Dict[str, Any]:
    return {"source": "none", "gpus": [], "note": "no GPU: this platform has no accelerator (the run was on a CPU)"}


def collect(plan: ArmPlan, launcher: Launcher, ctx: LaunchContext, image: Dict[str, Any], log) -> Dict[str, Any]:
    """Facts from inside the arm's image, on its granted GPUs (a throwaway container with the server's devices)."""

    gpus = list(ctx.gpus)
    if plan.platform["accelerator"] == "none" or not gpus:
        return no_gpu_facts()
    probe_dir = Path(plan.cache_dir) / "gpu-facts-probe"
    probe_dir.mkdir(parents=True, exist_ok=True)
    (probe_dir / "probe.py").write_text(PROBE_SOURCE)
    python = (image.get("python") or plan.platform["python"]) if launcher.runtime.is_bare else "python3"
    try:
        proc = run_probe(launcher, ctx, probe_argv(launcher, ctx, python, probe_dir / "probe.py", [], "facts"), 300)
        raw = json.loads(proc.stdout) if proc.returncode == 0 else None
    except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
        raw, proc = None, None
        print(f"gpu facts: probe failed: {exc}", file=log, flush=True)
    if raw is None:
        return {"source": "none", "gpus": [], "note": "the facts probe did not run in the image"
                + (f": {proc.stderr.strip()[-300:]}" if proc is not None else "")}
    facts = facts_from_probe(raw)
    facts["granted"] = gpus
    # the container sees only the grant, renumbered from 0: which node GPUs those are, by PCI address and unique id

    try:
        table = nf.node_gpus(plan.platform["accelerator"], Path(plan.platform.get("node_root") or "/"))
        facts["granted_devices"] = [{"index": g, "pci": table[g].pci, "uuid": table[g].uuid} for g in gpus
                                    if g < len(table)]
    except nf.NodeFactsError as exc:
        facts["granted_devices_note"] = str(exc)
    return facts


def fingerprint(facts: Optional[Dict[str, Any]], image_id: Optional[str]) -> Dict[str, Any]:
    """What must match between two arms whose numbers share a table."""
    facts = facts or {}
    rows = facts.get("gpus") or []

    def joined(key):
        values = sorted({str(r.get(key)) for r in rows if r.get(key) is not None})
        return ",".join(values) if values else None

    fp = {k: joined(k) for k in ("gpu_model", "driver", "perf_level", "power_cap_w", "compute_partition",
                                  "memory_partition")}
    fp["gpu_model"] = fp["gpu_model"] or facts.get("gpu_model") or ("none" if facts.get("source") == "none" else None)
    fp["runtime_version"] = facts.get("runtime_version")
    fp["image_id"] = image_id
    return {k: fp.get(k) for k in FINGERPRINT_KEYS}


def fingerprint_differences(fingerprints: Dict[str, Dict[str, Any]], baseline: str) -> List[Dict[str, Any]]:
    """Each arm's fields that differ from the baseline arm's (image IDs of patched arms differ by design)."""
    base = fingerprints.get(baseline)
    if not base:
        return []
    out = []
    for arm, fp in fingerprints.items():
        if arm == baseline:
            continue
        diff = {k: (base[k], fp[k]) for k in FINGERPRINT_KEYS if k != "image_id" and base[k] != fp[k]}
        if diff:
            out.append({"arm": arm, "baseline": baseline, "differs": diff})
    return out
