"""Did the arm run what it says?  The server's own account, checked per launch and per run.

Two sources, both from sglang 0.5.20 itself:

- ``GET /server_info`` (entrypoints/http_server.py) answers
  ``{**server_args.resolved_dict(), "launch_command": ..., "version": ...}``: every
  ServerArgs field as resolution decided it ("what the launcher was given with
  every decision resolution made applied").  Each requested server argument,
  by its ServerArgs field name (the flag table's ``dest``), must come back with
  the value asked for, and ``version`` must be the pinned release.
- the decode-log lines (scheduler_components/metrics_reporter.py) end with
  ``cuda graph: True|False`` for the batch that was logged.  An arm that disables
  CUDA graphs must log no ``True``; an arm that keeps them must log at least one
  ``True`` in every window that has decode lines, or it never ran the graph path
  whose behaviour the campaign measures.

An arm with any problem is *invalid*: its numbers are kept and shown, and every
claim that names it is INCONCLUSIVE, with the problem as the reason.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional

import requests

from specrepro.sglang_flags import FlagTable

NOT_REPORTED = "<not reported>"


def requested_fields(server_args: Dict[str, Any], table: FlagTable, serve: Dict[str, Any]) -> Dict[str, Any]:
    """What the launch asked for, keyed by ServerArgs field (the flag table's dest)."""
    fields: Dict[str, Any] = {}
    for key, value in server_args.items():
        flag = table.resolve_key(key)
        if flag is not None and value is not None:
            fields[flag.dest] = value
    # specrepro adds these to a launch when configured (Campaign.server_flags).
    if serve.get("decode_log_interval") is not None:
        fields["decode_log_interval"] = serve["decode_log_interval"]
    if serve["enable_metrics"]:
        fields["enable_metrics"] = True
    return fields


def _normal(value: Any) -> Any:
    """One spelling per value: YAML's 4 and sglang's 4.0, "true" and True, [1, 2] and (1, 2) compare equal."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        low = value.strip().lower()
        if low in ("true", "false"):
            return low == "true"
        try:
            return float(low)
        except ValueError:
            return value
    if isinstance(value, (list, tuple)):
        return tuple(_normal(v) for v in value)
    return value


def differing_fields(requested: Dict[str, Any], resolved: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    """Requested fields whose resolved value differs (or that the server did not report)."""
    out = {}
    for name, want in requested.items():
        got = resolved.get(name, NOT_REPORTED)
        if got is NOT_REPORTED or _normal(got) != _normal(want):
            out[name] = {"requested": want, "resolved": got}
    return out


def check_server_info(info: Dict[str, Any], requested: Dict[str, Any], version: str) -> Dict[str, Any]:
    """One launch's effective configuration against what it asked for."""
    differs = differing_fields(requested, info)
    reported = info.get("version")
    problems = [f"{name}: requested {d['requested']!r}, the server resolved {d['resolved']!r}"
                for name, d in differs.items()]
    if str(reported) != str(version):
        problems.append(f"version: the pin is sglang {version}, the server reports {reported!r}")
    return {"valid": not problems, "problems": problems, "differs": differs,
            "version": {"pinned": version, "reported": reported},
            "launch_command": info.get("launch_command"), "requested": requested,
            # what the accept-length consistency checks need, as the server resolved it
            "speculative": {k: info.get(f"speculative_{k}") for k in ("algorithm", "num_draft_tokens", "num_steps")}}


def drafts_per_verify(check: Dict[str, Any]) -> Optional[int]:
    """d of the decode log's accept rate: num_draft_tokens - 1, else num_steps (metrics_reporter.py)."""
    spec = check.get("speculative") or {}
    if spec.get("num_draft_tokens"):
        return int(spec["num_draft_tokens"]) - 1
    return int(spec["num_steps"]) if spec.get("num_steps") else None


def probe(base_url: str, requested: Dict[str, Any], version: str, timeout_s: float = 30) -> Dict[str, Any]:
    """`/server_info` of a ready server, checked; an unreadable answer is itself a problem."""
    try:
        r = requests.get(f"{base_url}/server_info", timeout=timeout_s)
        r.raise_for_status()
        info = r.json()
        if not isinstance(info, dict):
            raise ValueError(f"expected a JSON object, got {type(info).__name__}")
    except (requests.RequestException, ValueError) as exc:
        return {"valid": False, "problems": [f"/server_info could not be read ({exc})"], "differs": {},
                "version": {"pinned": version, "reported": None}, "launch_command": None, "requested": requested,
                "speculative": {}}
    return check_server_info(info, requested, version)


def read_check(path: Path, launch_id: str) -> Dict[str, Any]:
    """A launch's stored check; a launch without one (measured before this check existed) is a problem."""
    if path.is_file():
        return json.loads(path.read_text())
    return {"launch_id": launch_id, "problems": ["no effective-configuration record for this launch"]}


def cuda_graph_problems(lines: Dict[str, int], cuda_graph_disabled: bool, where: str) -> List[str]:
    """The decode log's `cuda graph:` counts of one window against the arm's disable_cuda_graph."""
    on, off = lines.get("True", 0), lines.get("False", 0)
    if cuda_graph_disabled and on:
        return [f"{where}: disable_cuda_graph is set, yet {on} of {on + off} decode-log lines say `cuda graph: True`"]
    if not cuda_graph_disabled and off and not on:
        return [f"{where}: CUDA graphs are on, yet all {off} decode-log lines say `cuda graph: False` "
                f"(no decode step ran a graph)"]
    return []


def arm_validity(launch_checks: Iterable[Dict[str, Any]], run_records: Dict[str, Dict[str, Any]],
                 cuda_graph_disabled: bool) -> Dict[str, Any]:
    """The arm's verdict on itself: valid only when every launch and every run window is."""
    problems: List[str] = []
    for check in launch_checks:
        problems += [f"launch {check.get('launch_id', '?')}: {p}" for p in check.get("problems", [])]
    for stem, record in run_records.items():
        lines = (((record.get("accept_length_sources") or {}).get("decode_log") or {}).get("cuda_graph_lines")) or {}
        problems += cuda_graph_problems(lines, cuda_graph_disabled, stem)
    return {"valid": not problems, "problems": problems}


def invalid_arms(validity: Optional[Dict[str, Dict[str, Any]]]) -> Dict[str, List[str]]:
    """arm -> its problems, for the arms that are not valid."""
    return {arm: v.get("problems", []) for arm, v in (validity or {}).items() if not v.get("valid", True)}


# --- before any launch: sglang's own resolution of what each arm asks for --------------------------------

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


def resolution_request(campaign, arms: List[str], off_node: bool) -> Dict[str, Any]:
    """The probe's input: each arm's server flags as launched, and the facts sglang resolves them under."""
    plat = campaign.cfg["platform"]
    facts = dict(plat.get("sglang_platform_facts") or {})
    request: Dict[str, Any] = {"arms": {}, "platform": facts}
    if off_node:
        facts.update(OFF_NODE_FACTS.get(plat["accelerator"], {}))
    for arm in arms:
        flags = campaign.server_flags(arm, campaign.cfg["serve"]["host"], 30000)
        if off_node and plat["accelerator"] in OFF_NODE_DEVICE and "device" not in campaign.server_args(arm):
            flags += ["--device", OFF_NODE_DEVICE[plat["accelerator"]]]
        request["arms"][arm] = flags
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


def resolve_arms(campaign, arms: List[str], python: str, pythonpath: str, off_node: bool,
                 argv_prefix: Optional[List[str]] = None, env: Optional[Dict[str, str]] = None,
                 probe: Optional[str] = None, timeout_s: float = 300) -> Dict[str, Any]:
    """Run the probe (where the server would run, or here) and judge each arm; arm -> judgement."""
    import os
    import subprocess

    request = resolution_request(campaign, arms, off_node)
    argv = [*(argv_prefix or []), python, probe or str(RESOLVE_PROBE), json.dumps(request)]
    run_env = dict(os.environ if env is None else env)
    if pythonpath:
        # first, as the server gets it (serve.Server.env): what the environment already has stays reachable
        run_env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, run_env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(argv, capture_output=True, text=True, env=run_env, timeout=timeout_s)
    if proc.returncode != 0:
        raise RuntimeError(f"sglang's server-argument resolution could not run ({proc.returncode}): "
                           f"{proc.stderr.strip()[-1500:]}")
    answers = json.loads(proc.stdout)
    return {arm: {**judge_resolution(campaign.requested_fields(arm), answers[arm]), "facts": request["platform"],
                  "off_node": off_node} for arm in arms}


def plan_resolution(campaign) -> Dict[str, Any]:
    """For `plan`: sglang's resolution of every arm, with this host's sglang env and the pinned release.

    Off the node for an accelerator platform (the node's facts are stated to
    sglang), as the launch would for a bare CPU platform.  Cached under
    cache_dir/resolution by everything it reads (request, tree, the models'
    config.json), so a second plan costs nothing.  {"arms": {...}} or {"skipped": why}.
    """
    import hashlib
    import os

    from specrepro.sglang_env import COMPLETE, env_dir

    cfg = campaign.cfg
    plat = cfg["platform"]
    if not cfg["preflight"]["resolve_server_args"]:
        return {"skipped": "preflight.resolve_server_args=false"}
    env = env_dir(campaign.cache_dir, campaign.project_root / "requirements" / (plat.get("python_env") or "sglang-cpu.txt"))
    version = cfg["sglang"]["version"]
    release = campaign.cache_dir / "sglang" / version
    tree = release / "tree"
    if (env / COMPLETE).is_file() and not (tree / ".complete").is_file() and list(release.glob("dist/sglang-*.whl")):
        import io

        from specrepro.sources import cached_release_tree

        cached_release_tree(version, campaign.cache_dir, io.StringIO())  # unpacks the archive already here
    if not (env / COMPLETE).is_file() or not (tree / ".complete").is_file():
        return {"skipped": f"no sglang {cfg['sglang']['version']} env and release tree on this host yet "
                           f"(`make campaign` or `specrepro run --cpu-only` makes them under {campaign.cache_dir})"}
    off_node = plat["accelerator"] != "none"
    pythonpath = os.pathsep.join([str(tree), *([] if off_node else plat.get("pythonpath") or [])])
    run_env = {**os.environ, **({} if off_node else {k: str(v) for k, v in (plat.get("server_env") or {}).items()})}
    request = resolution_request(campaign, campaign.arms, off_node)
    digest = hashlib.sha256(json.dumps([request, pythonpath, str(env)], sort_keys=True).encode())
    for arm in campaign.arms:
        path = campaign.server_args(arm).get("model_path")
        config = Path(str(path)) / "config.json"
        digest.update(config.read_bytes() if config.is_file() else b"-")
    cached = campaign.cache_dir / "resolution" / f"{digest.hexdigest()[:20]}.json"
    if cached.is_file():
        return json.loads(cached.read_text())
    try:
        arms = resolve_arms(campaign, campaign.arms, str(env / "bin" / "python"), pythonpath, off_node, env=run_env)
    except (RuntimeError, ValueError) as exc:
        return {"skipped": f"sglang's resolution could not run here: {exc}"}
    result = {"arms": arms, "tree": str(tree), "off_node": off_node, "facts": request["platform"]}
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text(json.dumps(result))
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
