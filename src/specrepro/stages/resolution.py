"""Before any launch: sglang's own resolution of what each arm asks for.

The pinned sglang's argument parser and `ServerArgs.resolve_once()` run on each arm's server flags (with the model's
config.json where it is readable), where the server will run (preflight, inside the arm's image) or here, told the
node's facts (`plan`).  A field sglang would rewrite refuses the arm before any GPU time.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional

from specrepro.core.arm_plan import ArmPlan
from specrepro.measure.effective_config import differing_fields
from specrepro.stages.sources import cached_release_tree
from specrepro.upstream.sglang_env import COMPLETE, env_dir
from specrepro.util.fileio import write_json, write_text_atomic

RESOLVE_PROBE = Path(__file__).parent / "preflight" / "resolve_server_args.py"
# Asked off the node (plan on a CPU host), sglang must be told what the node is: these platform facts
# (sglang.srt.runtime_context's names) and the torch device of ROCm and CUDA alike.
OFF_NODE_FACTS = {"rocm": {"is_hip": True}, "cuda": {"is_cuda": True}}
OFF_NODE_DEVICE = {"rocm": "cuda", "cuda": "cuda"}
# Shown per arm in `plan`: what decides how speculative decoding runs.
SHOWN_FIELDS = ("attention_backend", "sampling_backend", "device", "dtype", "kv_cache_dtype", "max_running_requests",
                "disable_cuda_graph", "cuda_graph_max_bs_decode", "page_size", "speculative_algorithm",
                "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens",
                "speculative_use_rejection_sampling")


# What hides the accelerator from the resolution probe while a server loads on it (sglang is told the platform's
# facts instead): a CUDA context of the probe's would otherwise sit in the GPU memory the loading server sizes its
# KV cache by.
HIDDEN_ACCELERATOR = {"CUDA_VISIBLE_DEVICES": "-1", "HIP_VISIBLE_DEVICES": "-1", "ROCR_VISIBLE_DEVICES": "-1"}


def resolution_key(plan: ArmPlan, patches: List[str]) -> str:
    """What sglang's resolution of an arm depends on, hashed: its flags and the facts it is told, the tree (the
    pinned release, or the arm's ref and patches) and the model's config.json.  `plan` and every launch of the arm
    that ask the same question share the answer."""
    import hashlib

    request = resolution_request([plan], off_node=plan.platform["accelerator"] != "none")
    release = plan.ref == plan.pinned_ref and not patches
    tree = {"sglang": plan.sglang_version, "ref": "release" if release else plan.ref, "patches": list(patches)}
    config = Path(str(plan.server_args.get("model_path"))) / "config.json"
    digest = hashlib.sha256(json.dumps([request["arms"][plan.name], request["platform"], tree], sort_keys=True).encode())
    digest.update(config.read_bytes() if config.is_file() else b"-")
    return digest.hexdigest()[:20]


def _arm_cache(plan: ArmPlan, key: str) -> Path:
    return Path(plan.cache_dir) / "resolution" / f"arm-{key}.json"


def cached_resolution(plan: ArmPlan, key: str) -> Optional[Dict[str, Any]]:
    """{"arm": judgement, "by": who resolved it} for a question already answered, else None."""
    path = _arm_cache(plan, key)
    try:
        return json.loads(path.read_text()) if path.is_file() else None
    except (OSError, ValueError):
        return None


def store_resolution(plan: ArmPlan, key: str, judgement: Dict[str, Any], by: str) -> None:
    """Keep an answer for the next launch (or job) that asks the same question; an unanswered one is not kept."""

    if judgement.get("error"):
        return
    write_json(_arm_cache(plan, key), {"arm": judgement, "by": by})


def resolution_request(plans: List[ArmPlan], off_node: bool) -> Dict[str, Any]:
    """The probe's input: each arm's server flags as launched, and the facts sglang resolves them under."""
    plat = plans[0].platform
    facts = dict(plat.get("sglang_platform_facts") or {})
    request: Dict[str, Any] = {"arms": {}, "platform": facts}
    if off_node:
        facts.update(OFF_NODE_FACTS.get(plat["accelerator"], {}))
    for plan in plans:
        flags = plan.server_flags(30000)
        if off_node and plat["accelerator"] in OFF_NODE_DEVICE and "device" not in plan.server_args:
            flags += ["--device", OFF_NODE_DEVICE[plat["accelerator"]]]
        request["arms"][plan.name] = flags
    return request


def judge_resolution(requested: Dict[str, Any], answer: Dict[str, Any]) -> Dict[str, Any]:
    """One arm's resolution against what it asked for: a rewritten field refuses the arm, as its launch check would."""
    if "error" in answer:
        return {"ok": False, "error": answer["error"], "rewritten": {},
                "problems": [f"sglang refused the arguments: {answer['error']}"]}
    resolved = answer["resolved"]
    rewritten = differing_fields(requested, resolved)
    return {"ok": not rewritten, "rewritten": rewritten, "shown": {k: resolved.get(k) for k in SHOWN_FIELDS},
            "problems": [f"{name}: asked {d['requested']!r}, sglang resolves {d['resolved']!r}"
                         for name, d in rewritten.items()]}


def resolve_arms(plans: List[ArmPlan], python: str, pythonpath: str, off_node: bool,
                 argv: Optional[List[str]] = None, env: Optional[Dict[str, str]] = None,
                 timeout_s: float = 300) -> Dict[str, Any]:
    """Run the probe (`argv` + the request: where the server runs, from specrepro.serving.probes; else here with `python`)
    and judge each arm; arm -> judgement."""
    import os
    import subprocess

    request = resolution_request(plans, off_node)
    argv = [*(argv or [python, str(RESOLVE_PROBE)]), json.dumps(request)]
    run_env = dict(os.environ if env is None else env)
    if pythonpath:
        # first, as the server gets it (serve.Server.env): what the environment already has stays reachable
        run_env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, run_env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(argv, capture_output=True, text=True, env=run_env, timeout=timeout_s)
    if proc.returncode != 0:
        raise RuntimeError(f"sglang's server-argument resolution could not run ({proc.returncode}): "
                           f"{proc.stderr.strip()[-1500:]}")
    answers = json.loads(proc.stdout)
    return {p.name: {**judge_resolution(dict(p.requested_fields), answers[p.name]), "facts": request["platform"],
                     "off_node": off_node} for p in plans}


def plan_resolution(plans: List[ArmPlan]) -> Dict[str, Any]:
    """For `plan`: sglang's resolution of every arm, with this host's sglang env and the pinned release.

    Off the node for an accelerator platform (the node's facts are stated to
    sglang), as the launch would for a bare CPU platform.  Cached under
    cache_dir/resolution by everything it reads (request, tree, the models'
    config.json), so a second plan costs nothing.  {"arms": {...}} or {"skipped": why}.
    """
    import hashlib
    import os

    first = plans[0]
    plat, cache_dir = first.platform, Path(first.cache_dir)
    if not first.preflight["resolve_server_args"]:
        return {"skipped": "preflight.resolve_server_args=false"}
    env = env_dir(cache_dir, Path(first.project_root) / "requirements" / (plat.get("python_env") or "sglang-cpu.txt"))
    version = first.sglang_version
    release = cache_dir / "sglang" / version
    tree = release / "tree"
    if (env / COMPLETE).is_file() and not (tree / ".complete").is_file() and list(release.glob("dist/sglang-*.whl")):
        import io

        cached_release_tree(version, cache_dir, io.StringIO())  # unpacks the archive already here
    if not (env / COMPLETE).is_file() or not (tree / ".complete").is_file():
        return {"skipped": f"no sglang {version} env and release tree on this host yet "
                           f"(`make campaign` or `specrepro run --cpu-only` makes them under {cache_dir})"}
    off_node = plat["accelerator"] != "none"
    pythonpath = os.pathsep.join([str(tree), *([] if off_node else plat.get("pythonpath") or [])])
    run_env = {**os.environ, **({} if off_node else {k: str(v) for k, v in (plat.get("server_env") or {}).items()})}
    request = resolution_request(plans, off_node)
    digest = hashlib.sha256(json.dumps([request, pythonpath, str(env)], sort_keys=True).encode())
    for plan in plans:
        config = Path(str(plan.server_args.get("model_path"))) / "config.json"
        digest.update(config.read_bytes() if config.is_file() else b"-")
    cached = cache_dir / "resolution" / f"{digest.hexdigest()[:20]}.json"
    if cached.is_file():
        result = json.loads(cached.read_text())
    else:
        try:
            arms = resolve_arms(plans, str(env / "bin" / "python"), pythonpath, off_node, env=run_env)
        except (RuntimeError, ValueError) as exc:
            return {"skipped": f"sglang's resolution could not run here: {exc}"}
        result = {"arms": arms, "tree": str(tree), "off_node": off_node, "facts": request["platform"]}

        # another campaign on this machine may read it the moment it appears
        write_text_atomic(cached, json.dumps(result))
    # the release tree answers for the arms that serve it: their launches reuse it (preflight.resolution_check)
    for plan in plans:
        if plan.ref == plan.pinned_ref and not plan.series and plan.name in result["arms"]:
            store_resolution(plan, resolution_key(plan, []), result["arms"][plan.name], "plan")
    return result


def describe_resolution(result: Dict[str, Any]) -> List[str]:
    """`plan`'s lines: per arm, what sglang resolves and any field it would rewrite (which refuses the arm)."""
    if "skipped" in result:
        return [f"# sglang's own resolution of the arms' arguments: not run ({result['skipped']})"]
    # in plan an exception is no verdict (an environment this host lacks); preflight, on the node, refuses it
    where = (f"off the node, told {result['facts']}" if result["off_node"] else f"as the launch will ({result['facts']})")
    lines = [f"# sglang's own resolution of each arm's arguments (the pinned release in {result['tree']}, {where}; "
             f"fields read from the GPU's memory can differ on the node)"]
    for arm, r in result["arms"].items():
        shown = ", ".join(f"{k}={v}" for k, v in (r.get("shown") or {}).items() if v is not None)
        if r["ok"]:
            lines.append(f"resolved {arm}: every asked field kept; {shown}")
        elif r.get("error"):
            lines.append(f"unresolved {arm}: could not resolve here ({r['error'][:300]}); preflight resolves it "
                         f"where the server runs")
        else:
            lines.append(f"REFUSED {arm}: " + "; ".join(r["problems"]))
    return lines


def refused_arms(result: Dict[str, Any]) -> List[str]:
    return [a for a, r in (result.get("arms") or {}).items() if not r["ok"] and not r.get("error")]
