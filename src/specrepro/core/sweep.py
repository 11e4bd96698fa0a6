"""Factor sweeps: a grid of conditions turned into cells the pipeline already measures, keys and judges.

    experiment.sweep.factors:
      concurrency: {levels: [1, 2, 4, 8], client: {gsm8k: parallel, bench_serving: max_concurrency}}
      cuda_graph_max_bs: {levels: [4, 8], server: cuda_graph_max_bs}
    experiment.sweep.treatments: null            # the full grid; or [{concurrency: 1, cuda_graph_max_bs: 4}, ...]

A client factor sets a benchmark setting: each level is a benchmark of its own, `gsm8k.concurrency-3`, served by
the arm's one warm server (no new launch).  A server factor sets a server flag: each level is an arm of its own,
`patched.cuda_graph_max_bs-4`, with its own launch.  A cell is then an ordinary benchmark or arm: its runs are
keyed like any run (a rerun measures only missing or changed cells), and its `cell` entry (base name, levels)
lets tables, plots and claims regroup them by factor.

A claim on a swept benchmark or arm is asked at every level of the factors that sweep it (`claims_per_level`):
its instances are ordinary claims in the family (and its multiplicity correction), and the report summarises
them per claim (`analysis.sweep`).
"""

from __future__ import annotations

import copy
import itertools
import re
from typing import Any, Dict, List, Optional, Tuple

from specrepro.benchmarks import kinds

LEVEL_TEXT = re.compile(r"^[A-Za-z0-9_.+-]+$")


def level_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return f"{value:g}" if isinstance(value, float) else str(value)


def cell_name(base: str, levels: Dict[str, Any]) -> str:
    """`gsm8k.concurrency-3`: only letters, digits and `_ . -` (container names, MLflow keys, paths)."""
    return base + "".join(f".{f}-{level_text(v)}" for f, v in levels.items())


def factors_of(cfg: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    return dict(((cfg["experiment"].get("sweep") or {}).get("factors") or {}))


def sweep_problems(cfg: Dict[str, Any]) -> List[str]:
    """Everything wrong with experiment.sweep, each naming its key."""
    factors = factors_of(cfg)
    problems = []
    for name, f in factors.items():
        key = f"experiment.sweep.factors.{name}"
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", name):
            problems.append(f"{key}: factor names are letters, digits and _")
        if not f.get("levels"):
            problems.append(f"{key}.levels: a factor needs at least one level")
        for v in f.get("levels") or []:
            if isinstance(v, (dict, list)) or v is None or not LEVEL_TEXT.match(level_text(v)):
                problems.append(f"{key}.levels: {v!r} is not a plain value (a number, true/false, or a name)")
        if len(set(map(level_text, f.get("levels") or []))) != len(f.get("levels") or []):
            problems.append(f"{key}.levels: a level is listed twice")
        if bool(f.get("client")) == bool(f.get("server")):
            problems.append(f"{key}: give exactly one of `client` (benchmark settings per kind) or `server` (a "
                            f"server flag)")
        for kind, setting in (f.get("client") or {}).items():
            if kind not in kinds():
                problems.append(f"{key}.client.{kind}: not a benchmark kind ({', '.join(kinds())})")
            elif setting not in kinds()[kind].client_settings:
                problems.append(f"{key}.client.{kind}: {setting!r} is not a {kind} setting "
                                f"({', '.join(sorted(kinds()[kind].client_settings))})")
    listed = (cfg["experiment"].get("sweep") or {}).get("treatments")
    for i, t in enumerate(listed or []):
        key = f"experiment.sweep.treatments[{i}]"
        if not isinstance(t, dict) or set(t) != set(factors):
            problems.append(f"{key}: name every factor ({', '.join(factors)}) once, got {t!r}")
            continue
        for fname, v in t.items():
            if level_text(v) not in map(level_text, factors[fname]["levels"]):
                problems.append(f"{key}.{fname}: {v!r} is not one of its levels {factors[fname]['levels']}")
    if listed is not None and not listed and factors:
        problems.append("experiment.sweep.treatments: an empty list runs nothing; leave it null for the full grid")
    return problems


def treatments(cfg: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The treatments to run, in the factors' order: the full grid, or the listed subset."""
    factors = factors_of(cfg)
    listed = (cfg["experiment"].get("sweep") or {}).get("treatments")
    if listed is not None:
        return [{f: t[f] for f in factors} for t in listed]
    return [dict(zip(factors, combo)) for combo in itertools.product(*(f["levels"] for f in factors.values()))]


def _unique(parts: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    out = []
    for p in parts:
        if p not in out:
            out.append(p)
    return out


def is_expanded(cfg: Dict[str, Any]) -> bool:
    return any(v.get("cell") for v in (cfg["experiment"].get("arms") or {}).values()) or \
        any(v.get("cell") for v in (cfg.get("benchmarks") or {}).values())


def expand(cfg: Dict[str, Any]) -> Dict[str, Any]:
    """The config with its grid turned into cells (benchmarks and arms); unchanged without factors or when
    already expanded (a resolved config read back).  Call after `sweep_problems` found nothing."""
    factors = factors_of(cfg)
    if not factors or is_expanded(cfg):
        return cfg
    cfg = copy.deepcopy(cfg)
    exp, benches = cfg["experiment"], cfg["benchmarks"]
    server = [f for f, v in factors.items() if v.get("server")]
    client = [f for f, v in factors.items() if v.get("client")]
    grid = treatments(cfg)
    arms: Dict[str, Any] = {}
    theory: Dict[str, Any] = {}
    used: Dict[str, Any] = {}
    for aname, arm in exp["arms"].items():
        for sp in _unique([{f: t[f] for f in server} for t in grid]):
            derived = copy.deepcopy(arm)
            name = cell_name(aname, sp)
            if sp:
                derived["extra_server_args"] = {**(arm.get("extra_server_args") or {}),
                                                **{factors[f]["server"]: v for f, v in sp.items()}}
                derived["cell"] = {"base": aname, "levels": sp}
            client_parts = _unique([{f: t[f] for f in client} for t in grid if {f: t[f] for f in server} == sp])
            derived["benchmarks"] = []
            arm_theory = dict((exp.get("theory") or {}).get(aname) or {})
            new_theory = {}
            for b in arm.get("benchmarks") or []:
                kind = (benches.get(b) or {}).get("kind")
                swept_by = [f for f in client if kind in (factors[f].get("client") or {})]
                if not swept_by:
                    derived["benchmarks"].append(b)
                    used[b] = benches.get(b)
                    if b in arm_theory:
                        new_theory[b] = arm_theory[b]
                    continue
                for cp in client_parts:
                    levels = {f: cp[f] for f in swept_by}
                    bname = cell_name(b, levels)
                    if bname in derived["benchmarks"]:
                        continue
                    if bname not in used:
                        cell = copy.deepcopy(benches[b])
                        section = kinds()[kind].block
                        for f, v in levels.items():
                            cell[section][factors[f]["client"][kind]] = v
                        cell["cell"] = {"base": b, "levels": levels}
                        used[bname] = cell
                    derived["benchmarks"].append(bname)
                    if b in arm_theory:
                        new_theory[bname] = arm_theory[b]
            arms[name] = derived
            if new_theory:
                theory[name] = new_theory
    exp["arms"] = arms
    if exp.get("theory"):
        exp["theory"] = theory
    # benchmarks no arm runs any more (a swept base) leave the campaign; those no arm ran stay (as configured)
    ran = {b for arm in exp["arms"].values() for b in arm["benchmarks"]}
    cfg["benchmarks"] = {**{b: v for b, v in benches.items() if b in ran or not _swept(b, benches, client, factors)},
                         **{b: v for b, v in used.items() if v is not None}}
    return cfg


def _swept(b: str, benches: Dict[str, Any], client: List[str], factors: Dict[str, Any]) -> bool:
    kind = benches[b].get("kind")
    return any(kind in (factors[f].get("client") or {}) for f in client)


def base_of(entry: Dict[str, Any], name: str) -> str:
    return (entry.get("cell") or {}).get("base") or name


def levels_of(entry: Dict[str, Any]) -> Dict[str, Any]:
    return dict((entry.get("cell") or {}).get("levels") or {})


def cells_by_base(entries: Dict[str, Dict[str, Any]]) -> Dict[str, List[Tuple[str, Dict[str, Any]]]]:
    """base name -> [(cell name, its levels)], in config order; an entry that is no cell is its own base."""
    out: Dict[str, List[Tuple[str, Dict[str, Any]]]] = {}
    for name, entry in entries.items():
        out.setdefault(base_of(entry, name), []).append((name, levels_of(entry)))
    return out


def resolve_arm(cfg: Dict[str, Any], base: str, levels: Dict[str, Any]) -> Optional[str]:
    """The arm cell of `base` at `levels` (the server factors' part of them; a factor not given matches any level,
    so no levels give the first cell), None where the grid has none."""
    for name, cell_levels in cells_by_base(cfg["experiment"]["arms"]).get(base, []):
        if all(levels.get(f, v) == v for f, v in cell_levels.items()):
            return name
    return None


def claims_per_level(claims: List[Dict[str, Any]], cfg: Dict[str, Any]) -> List[Dict[str, Any]]:
    """Each claim on a swept benchmark or arm, once per level of the factors that sweep them.

    An instance's id is `<id>.<factor>-<level>...`; `base_id` and `levels` say what it is an instance of, so the
    report can summarise a claim across its levels.  Claims on nothing swept come back unchanged; a claim whose
    benchmark or arms are unknown also comes back unchanged, so that validation names it.
    """
    if not is_expanded(cfg):
        return claims
    bench_cells = cells_by_base(cfg.get("benchmarks") or {})
    arm_cells = cells_by_base(cfg["experiment"]["arms"])
    out = []
    for claim in claims:
        if not isinstance(claim, dict):
            out.append(claim)
            continue
        names = [claim.get(k) for k in ("arm", "against", "from") if claim.get(k)] + list(claim.get("arms") or [])
        bench = claim.get("benchmark")
        if bench not in bench_cells or any(a not in arm_cells for a in names):
            out.append(claim)
            continue
        # every combination of levels the grid runs the claim's benchmark and (first) arm in
        arms_cfg = cfg["experiment"]["arms"]
        combos = _unique([{**b_levels, **a_levels}
                          for a_name, a_levels in (arm_cells[names[0]] if names else [("", {})])
                          for b_name, b_levels in bench_cells[bench]
                          if not a_name or b_name in arms_cfg[a_name]["benchmarks"]])
        if combos == [{}]:
            out.append(claim)
            continue
        for levels in combos:
            b_name = next((n for n, lv in bench_cells[bench] if all(levels.get(f) == v for f, v in lv.items())), None)
            inst = {**claim, "id": cell_name(claim["id"], levels), "base_id": claim["id"], "levels": levels,
                    "benchmark": b_name}
            for k in ("arm", "against", "from"):
                if claim.get(k):
                    inst[k] = resolve_arm(cfg, claim[k], levels)
            if claim.get("arms"):
                inst["arms"] = [resolve_arm(cfg, a, levels) for a in claim["arms"]]
            named = [inst[k] for k in ("arm", "against", "from") if claim.get(k)] + list(inst.get("arms") or [])
            # a listed treatment subset may run a level for one arm and not another: no instance there
            if b_name is None or any(a is None or b_name not in arms_cfg[a]["benchmarks"] for a in named):
                continue
            out.append(inst)
    return out


def treatment_table(cfg: Dict[str, Any]) -> List[Dict[str, Any]]:
    """One row per (arm cell, benchmark cell): the levels it runs at (for `plan`)."""
    rows = []
    for aname, arm in cfg["experiment"]["arms"].items():
        for b in arm["benchmarks"]:
            bench = cfg["benchmarks"][b]
            rows.append({"arm": aname, "benchmark": b, "levels": {**levels_of(arm), **levels_of(bench)}})
    return rows


def cell_columns(cfg: Dict[str, Any], arm: str, benchmark: str) -> Dict[str, Any]:
    """A run's sweep columns for the tidy tables: its base arm and benchmark and each factor's level there
    (empty without factors)."""
    factors = factors_of(cfg)
    if not factors:
        return {}
    a, b = cfg["experiment"]["arms"][arm], cfg["benchmarks"][benchmark]
    levels = {**levels_of(a), **levels_of(b)}
    return {"base_arm": base_of(a, arm), "base_benchmark": base_of(b, benchmark),
            **{f"factor:{f}": levels.get(f) for f in factors}}
