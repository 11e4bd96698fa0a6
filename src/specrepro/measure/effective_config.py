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


NOT_REPORTED = "<not reported>"


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
