"""Preflight: every mistake that would otherwise surface after the model loaded, caught in seconds.

Runs in each measuring job before its server starts (and by hand:
`specrepro preflight`).  Each check says what it found and what to set:

- stale specrepro containers on this node (by label) are removed: a killed
  job's container keeps its GPUs (exclusive placement: every specrepro
  container; packed: this arm's only);
- the granted GPUs are idle (memory in use under `preflight.gpu_idle_max_used_fraction`),
  waiting up to `preflight.gpu_idle_timeout_s` (GPU memory reclaim after a
  killed job takes minutes, and a half-drained node fails collective init);
- inside the image the arm runs: its sglang version is the pin; its patch
  record matches the arm (a patched arm's image carries exactly the series'
  patches, an unpatched arm's none); every server flag of the arm is declared
  by the image's own sglang source; the model folder and every data file a
  client reads there are readable;
- on the host: the data files the host-side clients read.

The checks of the node (containers, GPUs, host files) run before the server starts; the checks inside the image
run, by default, while the model loads (`preflight.during_load`): the node's time before the server starts stays a
second or two, and a failed check still stops the server before any measurement.  sglang's resolution of the arm's
arguments is reused when it already ran on the same arguments, tree and model config (by `plan`, or by an earlier
launch), keyed by their hashes (specrepro.stages.resolution).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any, Dict, List, Optional
from specrepro.core.arm_plan import ArmPlan
from specrepro.util.errors import SpecreproError
from specrepro.serving.launch import LABEL_PREFIX, LaunchContext, Launcher, PATH_ARGS
from specrepro.measure import node_facts as nf
from specrepro.serving.probes import probe_argv, run_probe
from specrepro.stages.resolution import (
    HIDDEN_ACCELERATOR, RESOLVE_PROBE, cached_resolution, resolution_key, resolve_arms, store_resolution)
from specrepro.upstream.sglang_flags import table_from_source
from specrepro.util.fileio import write_json

PROBE = Path(__file__).parent / "probe_image.py"
ENV_PROBE = Path(__file__).parent / "probe_env.py"
PROBE_DIR_INSIDE = "/opt/specrepro-preflight"


class PreflightError(SpecreproError, RuntimeError):
    """Preflight failures; the message lists every one with what to set."""


def _check(name: str, ok: bool, detail: str, started: float) -> Dict[str, Any]:
    return {"check": name, "ok": bool(ok), "detail": detail, "seconds": round(time.monotonic() - started, 2)}


def remove_stale_containers(plan: ArmPlan, launcher: Launcher, log: IO) -> Dict[str, Any]:
    """The caller's own specrepro containers left on this node by a killed job (exclusive placement: all of them;
    packed: this arm's), removed with their secret files.  A docker daemon (or rootful podman) is shared by every user
    of the node: containers whose owner label is another uid, or that carry none, are reported and left alone (if
    they hold the granted GPUs, the idle check says so).  The runtime's own `remove_stale_containers`."""
    started = time.monotonic()
    scope = (f"label={LABEL_PREFIX}.campaign" if plan.serve["placement"] == "exclusive"
             else f"label={LABEL_PREFIX}.arm={plan.name}")
    ok, detail = launcher.runtime.remove_stale_containers(scope, str(os.getuid()), log)
    return _check("stale_containers", ok, detail, started)


def gpu_memory_used_fraction(plat: Dict[str, Any], gpus: List[int],
                             nvidia_smi: Optional[str] = None) -> Optional[Dict[int, Optional[float]]]:
    """Memory in use per granted GPU (node index -> fraction; None: the tool does not report that GPU), matched by
    PCI address through the node's own table (specrepro.measure.node_facts), never by the tool's index: inside a job whose
    devices Slurm constrains, nvidia-smi numbers the job's GPUs from 0.  None where nothing can be read."""

    root = Path(plat.get("node_root") or "/")
    try:
        table = nf.node_gpus(plat["accelerator"], root)
    except nf.NodeFactsError:
        return None
    chosen = {g: table[g] for g in gpus if g < len(table)}
    if plat["accelerator"] == "rocm":
        used = nf.rocm_memory_used(list(chosen.values()), root)
        if not used:
            return None  # this driver exposes no VRAM counters at all: nothing to read, unlike one GPU missing
    else:
        if nvidia_smi is None:
            if not shutil.which("nvidia-smi"):
                return None
            out = subprocess.run(["nvidia-smi", "--query-gpu=pci.bus_id,memory.used,memory.total",
                                  "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=60)
            if out.returncode != 0:
                return None
            nvidia_smi = out.stdout
        used = nf.nvidia_memory_used(nvidia_smi)
    return {g: used.get(gpu.pci) for g, gpu in chosen.items()} | {g: None for g in gpus if g not in chosen}


def wait_gpus_idle(plan: ArmPlan, gpus: List[int], log: IO, read=gpu_memory_used_fraction) -> Dict[str, Any]:
    started = time.monotonic()
    if not gpus:
        return _check("gpus_idle", True, "no GPUs granted (no accelerator)", started)
    pf = plan.preflight
    limit = pf["gpu_idle_max_used_fraction"]
    last = None
    while True:
        used = read(plan.platform, gpus)
        if used is None:
            return _check("gpus_idle", True, "not checked: the node's GPU table or memory counters cannot be read "
                          "on this host (node_facts)", started)
        unseen = sorted(g for g, f in used.items() if f is None)
        if unseen:
            # a GPU the tool does not report is not idle: it is unknown (and reading it as idle hid busy GPUs)
            return _check("gpus_idle", False, f"GPUs {unseen} of the grant {gpus}: no memory reading at their PCI "
                          f"address (`specrepro node-facts` shows the node's table); cannot tell they are idle", started)
        last = used
        busy = {g: f for g, f in used.items() if f > limit}
        if not busy:
            return _check("gpus_idle", True, f"GPUs {gpus}: memory in use {used} (limit {limit:.0%}; by PCI address)",
                          started)
        if time.monotonic() - started > pf["gpu_idle_timeout_s"]:
            return _check("gpus_idle", False,
                          f"GPUs {sorted(busy)} still hold {busy} of their memory after "
                          f"preflight.gpu_idle_timeout_s={pf['gpu_idle_timeout_s']} s (limit {limit:.0%}): another "
                          f"job's process or a stale container holds them", started)
        print(f"preflight: waiting for GPUs {sorted(busy)} to drain ({last})", file=log, flush=True)
        time.sleep(min(15.0, max(1.0, pf["gpu_idle_timeout_s"] / 20)))


def probe_image(plan: ArmPlan, launcher: Launcher, ctx: LaunchContext, image: Dict[str, Any],
                paths: List[str]) -> Dict[str, Any]:
    """Run probe_image.py where the server will run: inside its image, with its mounts, user and GPU devices."""

    if launcher.runtime.is_bare:
        root = image.get("sglang_root") or image["pythonpath"]
        argv = probe_argv(launcher, ctx, sys.executable, PROBE, [root, json.dumps(paths)], "preflight")
    else:
        inside = [d.split(":")[-1] for d in launcher.device_files(ctx)]
        argv = probe_argv(launcher, ctx, "python3", PROBE,
                          [plan.platform["image_sglang_root"], json.dumps(paths), json.dumps(inside)], "preflight")
    proc = run_probe(launcher, ctx, argv, 600)
    if proc.returncode != 0:
        raise PreflightError(f"arm {plan.name}: the preflight probe could not run in the image ({proc.returncode}): "
                             f"{proc.stderr.strip()[-1500:]}")
    return json.loads(proc.stdout)


def image_checks(plan: ArmPlan, image: Dict[str, Any], probe: Dict[str, Any]) -> List[Dict[str, Any]]:
    started = time.monotonic()
    checks = []
    pin = plan.sglang_version
    checks.append(_check("image_sglang_version", probe["version"] == pin,
                         f"the image's sglang ({probe.get('package_dir')}) is {probe['version']}, the campaign pins {pin}"
                         if probe["version"] != pin else f"sglang {pin} at {probe.get('package_dir')}", started))
    series = plan.series
    applied = probe.get("applied")
    if image.get("kind") == "tree":
        checks.append(_check("image_patch_record", True, "local tree from the patch stage (its manifest is the record)",
                             started))
    elif series:
        got = [p["sha256"] for p in (applied or {}).get("patches", [])]
        want = image.get("patch_sha256") or []
        checks.append(_check("image_patch_record", applied is not None and got == want,
                             f"patched arm: the image's /specrepro/applied.json lists {len(got)} patch(es), the series "
                             f"{series} has {len(want)}" + ("" if got == want else " (they differ)"), started))
    else:
        checks.append(_check("image_patch_record", applied is None,
                             "unpatched arm: the image carries no patch record" if applied is None
                             else f"unpatched arm, but the image carries patches "
                                  f"{[p['patch'] for p in applied.get('patches', [])]}: wrong image", started))
    with tempfile.TemporaryDirectory() as tmp:
        pkg = Path(tmp) / "sglang"
        for name, text in probe.get("flag_sources", {}).items():
            (pkg / name).parent.mkdir(parents=True, exist_ok=True)
            (pkg / name).write_text(text)
        try:
            table = table_from_source(pkg, probe["version"] or "?")
            known = {n for f in table.flags.values() for n in (f.name, *f.aliases)}
            flags = [t for t in plan.server_flags(0) if t.startswith("--")]
            missing = [f for f in flags if f not in known]
            checks.append(_check("server_flags_in_image", not missing,
                                 f"every flag of the arm is declared by the image's sglang ({len(table.flags)} flags)"
                                 if not missing else f"the image's sglang does not declare {missing}", started))
        except FileNotFoundError as exc:
            checks.append(_check("server_flags_in_image", False, f"no flag sources in the image: {exc}", started))
    devices = probe.get("devices") or {}
    if devices:
        closed = {d: why for d, why in devices.items() if why is not True}
        checks.append(_check("gpu_devices_open", not closed,
                             f"the server's user (uid {probe.get('uid')}, groups {probe.get('groups')}) opens "
                             f"{sorted(devices)} inside the container" if not closed else
                             f"the server's user (uid {probe.get('uid')}, groups {probe.get('groups')}) cannot open "
                             f"{closed} inside the container: HIP would find no GPU (add the device files' group, "
                             f"which specrepro passes as --group-add, or run as root: serve.container_user=0:0)",
                             started))
    unreadable = [p for p, ok in probe.get("readable", {}).items() if not ok]
    checks.append(_check("paths_readable_in_image", not unreadable,
                         f"readable where the server and its clients read them: {sorted(probe.get('readable', {}))}"
                         if not unreadable else f"not readable inside the container: {unreadable} (check "
                                                f"model.server_args paths, benchmarks.*.serving.dataset_path, mounts)",
                         started))
    return checks


def resolution_check(plan: ArmPlan, launcher: Launcher, ctx: LaunchContext, image: Dict[str, Any]) -> Dict[str, Any]:
    """sglang's own resolution of the arm's arguments, run where the server will run (its Python, tree, model), with
    the accelerator hidden and its facts told, as `plan` asks it (so a loading server shares its GPUs with nothing);
    an answer already given for the same arguments, tree and model config is reused."""

    started = time.monotonic()
    key = resolution_key(plan, image.get("patch_sha256") or [])
    reused = cached_resolution(plan, key) if plan.preflight["reuse_resolution"] else None
    if reused is not None:
        result, where = reused["arm"], f"reused: {reused['by']} resolved the same arguments, tree and model config"
    else:
        off_node = plan.platform["accelerator"] != "none"
        bare = launcher.runtime.is_bare
        python = image.get("python") or plan.python if bare else plan.platform["python"]
        hidden = HIDDEN_ACCELERATOR if off_node else {}
        try:
            argv = probe_argv(launcher, ctx, python, RESOLVE_PROBE, [], "resolve", extra_env=hidden or None)
            env = launcher.process_env(ctx)
            env.update(hidden if bare else {})
            result = resolve_arms([plan], python, image.get("pythonpath", "") if bare else "",
                                  off_node=off_node, argv=argv, env=env)[plan.name]
        except (RuntimeError, ValueError, subprocess.TimeoutExpired) as exc:
            return _check("server_args_resolution", False, f"sglang's resolution could not run in the image: {exc}",
                          started)
        store_resolution(plan, key, result, f"launch {ctx.launch_id}")
        where = "resolved in the image"
    if result["ok"]:
        return _check("server_args_resolution", True,
                      f"sglang's own resolution keeps every field the arm asks for ({where})", started)
    return _check("server_args_resolution", False, "; ".join(result["problems"]) + f" ({where})", started)


def host_checks(plan: ArmPlan) -> List[Dict[str, Any]]:
    """The data files the host-side clients read (the datasets stage put them there on the submit host: a node that
    does not see them lacks the shared folder)."""
    started = time.monotonic()
    missing = [f"data.{name}.path={source['path']}" for name, source in plan.data.items()
               if not os.path.isfile(source["path"])]
    return [_check("host_data_files", not missing,
                   "the host-side clients' data files are here" if not missing
                   else f"not on this host: {missing}", started)]


def container_paths(plan: ArmPlan) -> List[str]:
    """Paths the server and the in-container clients read: local model paths and client data files."""

    paths = [v for k in PATH_ARGS if isinstance(v := plan.server_args.get(k), str) and v.startswith("/")]
    return paths + [f for files in plan.client_data.values() for f in files]


def node_checks(plan: ArmPlan, launcher: Launcher, ctx: LaunchContext, log: IO) -> List[Dict[str, Any]]:
    """What must hold before the server starts: no stale container, idle GPUs, the host's data files."""
    checks = [remove_stale_containers(plan, launcher, log)] if plan.preflight["remove_stale_containers"] else []
    checks.append(wait_gpus_idle(plan, list(ctx.gpus), log))
    return checks + host_checks(plan)


def in_image_checks(plan: ArmPlan, launcher: Launcher, ctx: LaunchContext, image: Dict[str, Any]) -> List[Dict[str, Any]]:
    """What the image on this node holds: its sglang, patch record and flags, the paths, sglang's resolution."""
    if not plan.preflight["inside_image"]:
        return [_check("inside_image", True, "skipped: preflight.inside_image=false", time.monotonic())]
    probe = probe_image(plan, launcher, ctx, image, container_paths(plan))
    checks = image_checks(plan, image, probe)
    if plan.preflight["resolve_server_args"]:
        checks.append(resolution_check(plan, launcher, ctx, image))
    return checks


def judge_preflight(plan: ArmPlan, checks: List[Dict[str, Any]], seconds: float, log: IO, record: Optional[Path],
                    when: str) -> Dict[str, Any]:
    """The checks' record (written either way) and verdict: PreflightError naming every failure."""

    result = {"arm": plan.name, "ok": all(c["ok"] for c in checks), "checks": checks, "seconds": round(seconds, 2)}
    for c in checks:
        print(f"preflight {'ok  ' if c['ok'] else 'FAIL'} {c['check']}: {c['detail']}", file=log, flush=True)
    if record is not None:
        write_json(record, result)
    if not result["ok"]:
        failed = "\n".join(f"  - {c['check']}: {c['detail']}" for c in checks if not c["ok"])
        raise PreflightError(f"arm {plan.name}: preflight failed {when} ({result['seconds']} s):\n{failed}")
    return result


def run_preflight(plan: ArmPlan, launcher: Launcher, ctx: LaunchContext, image: Dict[str, Any], log: IO,
                  record: Optional[Path] = None) -> Dict[str, Any]:
    """All checks, before the server starts, with the job's one launch context; raises PreflightError naming every
    failure.  The record is written either way."""
    started = time.monotonic()
    checks = node_checks(plan, launcher, ctx, log)
    checks += in_image_checks(plan, launcher, ctx, image)
    return judge_preflight(plan, checks, time.monotonic() - started, log, record, "before the server started")


def environment_problems(accelerator: str, found: Dict[str, Any]) -> List[str]:
    """What an existing environment lacks for sglang's server on this accelerator, from probe_env.py's record."""
    problems = []
    torch = found.get("torch") or {}
    if "error" in torch:
        problems.append(f"torch ({torch['error']})")
    elif accelerator == "cuda" and not torch.get("cuda"):
        problems.append(f"torch with CUDA (torch {torch.get('version')} is built for "
                        f"{'ROCm ' + torch['hip'] if torch.get('hip') else 'CPU only'})")
    elif accelerator == "rocm" and not torch.get("hip"):
        problems.append(f"torch with ROCm (torch {torch.get('version')} is built for "
                        f"{'CUDA ' + torch['cuda'] if torch.get('cuda') else 'CPU only'})")
    if accelerator != "none" and "error" in (found.get("triton") or {}):
        problems.append(f"triton ({found['triton']['error']})")
    if found.get("missing"):
        problems.append("modules sglang's server imports: " + ", ".join(
            f"{m['module']} (imported by {m['asked_by']})" for m in found["missing"]))
    if found.get("import_error"):
        problems.append(f"an import of sglang's server failed: {found['import_error']}")
    return problems


def environment_check(plat: Dict[str, Any], python: str, pythonpath: str, log: IO) -> Dict[str, Any]:
    """The platform's own Python (no container, an environment the pipeline did not build) holds what sglang's
    server needs: torch built for the platform's accelerator, Triton, every module of `platform.environment_imports`
    with the arm's tree first on PYTHONPATH, as the server gets it.  Raises PreflightError naming everything missing;
    returns the probe's record."""
    env = {**os.environ, **{k: str(v) for k, v in (plat.get("server_env") or {}).items()}}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, os.environ.get("PYTHONPATH", "")) if p)
    # the imports compile the arm's tree once, ahead of its servers (Launcher.process_env)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    request = json.dumps({"imports": list(plat["environment_imports"])})
    started = time.monotonic()
    try:
        proc = subprocess.run([python, str(ENV_PROBE), request], capture_output=True, text=True, env=env, timeout=600)
    except FileNotFoundError:
        raise PreflightError(f"platform.python={python}: no such interpreter on this host (point platform.python at "
                             f"the Python that holds sglang's dependencies)") from None
    except subprocess.TimeoutExpired:
        raise PreflightError(f"platform.python={python}: importing sglang's server took over 600 s") from None
    if proc.returncode != 0:
        raise PreflightError(f"platform.python={python}: the environment probe failed ({proc.returncode}): "
                             f"{proc.stderr.strip()[-1500:]}")
    found = json.loads(proc.stdout)
    found["seconds"] = round(time.monotonic() - started, 2)
    problems = environment_problems(plat["accelerator"], found)
    torch = found.get("torch") or {}
    print(f"environment: {found['python']} (Python {found['python_version']}): torch {torch.get('version')} "
          f"(CUDA {torch.get('cuda')}, HIP {torch.get('hip')}, GPUs seen {torch.get('gpu_count')}), triton "
          f"{(found.get('triton') or {}).get('version')}; {len(plat['environment_imports'])} sglang imports "
          f"{'ok' if not problems else 'FAILED'} in {found['seconds']} s", file=log, flush=True)
    if problems:
        raise PreflightError(f"platform {plat['name']}: the environment of platform.python={python} lacks what "
                             f"sglang's server needs on {plat['accelerator']}:\n" + "\n".join(f"  - {p}" for p in problems)
                             + "\nInstall them into that environment, or point platform.python at the interpreter "
                               "that holds sglang's dependencies. No server was started.")
    return found
