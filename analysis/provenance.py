"""What ran, stated where a reader starts: the sglang release and its sha256, each patch series' sha256, the model
and its speculative settings, the hardware, the workloads -- each beside the published figures' setup where the
experiment names it (experiment.reference_experiment) -- the specrepro commit and the config hash.

`provenance_record` is taken once, by the report stage on the host the campaign ran on (its CPU is read there) and
recorded in report/analysis.json; a report rendered later elsewhere reads it from there.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from specrepro.benchmarks import kind_of
from specrepro.core.campaign import Campaign
from specrepro.core.config import ConfigError, compose, config_hash


def git_commit() -> str:
    """This checkout's commit, `+changes` when its tracked files differ from it ("" outside a git checkout)."""
    here = Path(__file__).parent
    try:
        commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                                timeout=10, cwd=here).stdout.strip()
        changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                                 text=True, timeout=10, cwd=here).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return f"{commit}+changes" if commit and changed else commit


def cpu_facts(cpuinfo: Path = Path("/proc/cpuinfo")) -> Dict[str, Any]:
    """This host's CPU model and the cores this process may use."""
    model = None
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.lower().startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count()
    return {"cpu_model": model, "cores": cores}


def speculative_settings(server_args: Dict[str, Any]) -> str:
    """A model's speculative flags in a few words (its paths left out)."""
    a = server_args or {}
    if not a.get("speculative_algorithm"):
        return "no speculative decoding"
    parts = [str(a["speculative_algorithm"])]
    for key, word in (("speculative_num_steps", "steps"), ("speculative_eagle_topk", "topk"),
                      ("speculative_num_draft_tokens", "draft tokens")):
        if a.get(key) is not None:
            parts.append(f"{word} {a[key]}")
    return ", ".join(parts)


def workload(bench: Dict[str, Any], repeats: int) -> str:
    """One benchmark's workload in a few words."""
    kind = kind_of(bench)
    text = kind.workload(bench.get(kind.block) or {})
    return f"{text}; {repeats} repeats"


def setup_of(cfg: Dict[str, Any]) -> Dict[str, Any]:
    """The parts of a composed config the provenance compares: model, speculative settings, hardware, workloads."""
    plat, model = cfg["platform"], cfg["model"]
    return {"model": model["name"], "toy": bool(model.get("toy")),
            "speculative": speculative_settings(model.get("server_args") or {}),
            "platform": plat["name"], "accelerator": plat.get("accelerator"), "gpu_model": plat.get("gpu_model"),
            "gpus": model.get("gpus"),
            "workloads": {b: workload(v, v.get("repeats") or cfg["experiment"]["repeats"])
                          for b, v in cfg["benchmarks"].items() if not v.get("cell")}}


def reference_setup(cfg: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The published figures' setup, composed from experiment.reference_experiment; None where none is named or it
    does not compose here (the reason is then recorded)."""
    name = cfg["experiment"].get("reference_experiment")
    if not name:
        return None

    try:
        return {"experiment": name, **setup_of(compose([f"experiment={name}"]))}
    except ConfigError as exc:
        return {"experiment": name, "error": str(exc).splitlines()[0]}


def read_json(path: Path) -> Optional[Dict[str, Any]]:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def provenance_record(cfg: Dict[str, Any], records: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Everything the provenance block shows, read from the campaign's own files and this host."""

    layout = Campaign(cfg).layout
    ref = cfg["sglang"]["git_ref"]
    source = read_json(Path(layout.source_manifest(ref))) or {}
    patches = {}
    for series in cfg["experiment"].get("patch_series") or {}:
        manifest = read_json(Path(layout.patch_manifest(ref, series))) or {}
        patches[series] = [{"patch": p.get("patch"), "sha256": p.get("sha256")} for p in manifest.get("patches") or []]
    hosts = sorted({r.get("host") for r in records if r.get("host")})
    gpu_models = sorted({(r.get("fingerprint") or {}).get("gpu_model") for r in records} - {None, "none"})
    per_server = sorted({len(e.get("gpus") or []) for r in records for e in r.get("launches") or []
                         if e.get("event", "start") == "start"})
    host = {"hosts": hosts, "gpu_models": gpu_models, "gpus_per_server": per_server}
    if hosts == [socket.gethostname()]:
        host.update(cpu_facts(), read_on=hosts[0])
    return {"sglang": {"version": cfg["sglang"]["version"], "ref": ref, "method": source.get("method"),
                       "archive": source.get("archive"), "sha256": source.get("archive_sha256"),
                       "commit": source.get("commit")},
            "patches": patches, "host": host, "ours": setup_of(cfg), "reference": reference_setup(cfg),
            "specrepro_commit": git_commit(), "config_hash": config_hash(cfg)}


def hardware(setup: Dict[str, Any], host: Optional[Dict[str, Any]] = None) -> str:
    """The hardware a setup runs on: measured (`host`) where given, else as configured."""
    host = host or {}
    if setup.get("accelerator") == "none":
        if host.get("cpu_model"):
            return f"CPU {host['cpu_model']}, {host['cores']} cores (read on {host['read_on']}), no GPU"
        return f"platform {setup['platform']}: a CPU, no GPU (its model was not recorded)"
    if host.get("gpu_models"):
        count = "/".join(map(str, host.get("gpus_per_server") or [])) or "?"
        return f"{', '.join(host['gpu_models'])} x {count} per server (measured)"
    return f"{setup.get('gpu_model') or setup['platform']} x {setup.get('gpus')} per server (configured)"


def table(prov: Dict[str, Any], pr_label: str) -> Tuple[List[str], List[List[str]]]:
    """The provenance table: a column per fact (model, speculative settings, hardware, each workload), a row for this
    campaign and one for the published figures' setup."""
    ours, theirs = prov["ours"], prov.get("reference") or {}
    header = ["", "model", "speculative", "hardware", *(f"`{b}`" for b in ours["workloads"])]
    here = ["this campaign", f"`{ours['model']}`" + (" (a toy pair the pipeline builds)" if ours["toy"] else ""),
            ours["speculative"], hardware(ours, prov.get("host")), *ours["workloads"].values()]
    if theirs and not theirs.get("error"):
        pr = [pr_label, f"`{theirs['model']}`" + (" (toy)" if theirs.get("toy") else ""), theirs["speculative"],
              hardware(theirs), *((theirs.get("workloads") or {}).get(b, "-") for b in ours["workloads"])]
    else:
        why = (f"not composed ({theirs['error']})" if theirs.get("error") else
               "not declared (experiment.reference_experiment)")
        pr = [pr_label, why, *[""] * (len(header) - 2)]
    return header, [here, pr]


def code_lines(prov: Dict[str, Any]) -> List[str]:
    """What the code was: the release and its hash, each patch's hash, specrepro's commit, the config hash."""
    sg = prov["sglang"]
    origin = f"{sg['archive']} sha256 `{sg['sha256']}`" if sg.get("sha256") else (
        f"commit `{sg['commit']}`" if sg.get("commit") else "hash not recorded")
    lines = [f"sglang {sg['version']} ({sg['ref']}, {sg.get('method') or 'source'}): {origin}"]
    for series, patches in (prov.get("patches") or {}).items():
        lines += [f"series `{series}`: {p['patch']} sha256 `{p['sha256']}`" for p in patches] or [
            f"series `{series}`: no patch manifest found"]
    lines.append(f"specrepro `{prov.get('specrepro_commit') or 'commit unknown'}`, config hash `{prov['config_hash']}`")
    return lines
