"""`make test`: each test layer of tests/budget.toml under pytest-xdist, then what it cost.

Runs the layers one after another (each `pytest -m MARKERS -n WORKERS`, its groups and their order set by
tests/conftest.py), then prints, from the junit XML each layer wrote:
  - the time per layer (wall) against its target, with a warning line for a layer over it;
  - the time per group (the sum of its tests' times: setup, call and teardown), for budget.toml's group_cost_s;
  - the 15 slowest tests;
  - the server launches the layer's campaigns made (every launches.jsonl under its pytest basetemp): real sglang
    servers apart from the stand-in's;
  - with SPECREPRO_CI_START (.ci/run's start, epoch seconds), the whole CI run against [ci];
  - last, one line with every layer's counts: `total: N passed, N failed, N skipped`.
Exit status: 0 when every layer passed, else the first failing layer's pytest status.

    python tests/run_layers.py [--layer NAME ...] [PYTEST ARGS ...]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import tomllib
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUDGET = ROOT / "tests" / "budget.toml"
SLOWEST = 15


def load_budget(path: Path = BUDGET) -> dict:
    budget = tomllib.loads(path.read_text())
    for i, layer in enumerate(budget.get("layer", [])):
        for key in ("name", "markers", "workers", "target_s"):
            if key not in layer:
                raise SystemExit(f"{path}: [[layer]] number {i + 1} has no {key!r}")
    return budget


def read_junit(path: Path) -> list:
    """One dict per test case: name, time (s), outcome, group."""
    if not path.is_file():
        return []
    cases = []
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
            elif child.tag == "skipped":
                outcome = "skipped"
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        cases.append({"name": name, "time": float(case.get("time") or 0.0), "outcome": outcome,
                      "group": props.get("group", "?")})
    return cases


def counts(cases: list) -> dict:
    out = {"passed": 0, "failed": 0, "skipped": 0}
    for c in cases:
        out[c["outcome"]] += 1
    return out


def count_launches(basetemp: Path, since: float = 0.0) -> dict:
    """Server launches recorded under a pytest basetemp since the epoch time `since`: {"sglang": n, "stand-in": n}
    (a launch's start event in an arm's launches.jsonl, told apart by the server its argv ran)."""
    seen = {}
    # copies (a campaign copied by a test, MLflow's artifact of the file) repeat a launch: counted once by its id;
    # records a test copies from elsewhere (tests/data/gpu: the H100's launches) started before this run
    for path in Path(basetemp).rglob("launches.jsonl"):
        for line in path.read_text(errors="replace").splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict) and event.get("event") == "start" and event.get("started", since) >= since:
                seen[event.get("launch_id") or f"{path}:{line}"] = \
                    "stand-in" if "sglang_standin" in str(event.get("argv", "")) else "sglang"
    return {kind: sum(1 for k in seen.values() if k == kind) for kind in ("sglang", "stand-in")}


def summary(layers: list, ci: dict | None, ci_elapsed: float | None, launches: dict | None = None) -> list:
    """The lines printed after the layers ran: `layers` holds (budget entry, wall seconds, cases, exit status)."""
    lines = ["", "=== test layers (tests/budget.toml) ===",
             f"{'layer':<8} {'wall s':>8} {'target s':>9} {'tests':>6} {'passed':>7} {'failed':>7} {'skipped':>8}"]
    warnings = []
    for entry, wall, cases, _ in layers:
        c = counts(cases)
        lines.append(f"{entry['name']:<8} {wall:>8.0f} {entry['target_s']:>9} {len(cases):>6} {c['passed']:>7} "
                     f"{c['failed']:>7} {c['skipped']:>8}")
        if wall > entry["target_s"]:
            warnings.append(f"WARNING: layer {entry['name']} took {wall:.0f} s, over its target of "
                            f"{entry['target_s']} s (tests/budget.toml)")
    everything = [c for _, _, cases, _ in layers for c in cases]
    groups = defaultdict(float)
    for c in everything:
        groups[c["group"]] += c["time"]
    lines += ["", "time per group (s; the sum of its tests' setup, call and teardown; for [group_cost_s]):"]
    lines += [f'"{g}" = {t:.0f}' for g, t in sorted(groups.items(), key=lambda kv: -kv[1])]
    lines += ["", f"the {SLOWEST} slowest tests (s, setup and teardown included):"]
    lines += [f"{c['time']:8.1f}  {c['name']}" for c in sorted(everything, key=lambda c: -c["time"])[:SLOWEST]]
    if launches:
        lines += ["", f"server launches: {launches['sglang']} real sglang servers, {launches['stand-in']} of the "
                      f"stand-in"]
    if ci_elapsed is not None and ci:
        lines.append("")
        lines.append(f"ci: .ci/run so far {ci_elapsed:.0f} s (target {ci['target_s']} s, limit {ci['limit_s']} s)")
        if ci_elapsed > ci["target_s"]:
            warnings.append(f"WARNING: .ci/run took {ci_elapsed:.0f} s, over its target of {ci['target_s']} s")
    lines += [""] + warnings
    total = counts(everything)
    lines.append(f"total: {total['passed']} passed, {total['failed']} failed, {total['skipped']} skipped")
    return lines


PREWARM = """
import os, sys
from pathlib import Path
from specrepro.upstream.sglang_env import ensure_env
cache = Path(os.environ.get("SPECREPRO_CACHE_DIR") or ".cache")
env = ensure_env(cache, Path("requirements/sglang-cpu.txt"), sys.stdout)
print(f"sglang CPU env: {'reused' if env['reused'] else 'built'} in {env['seconds']:.0f} s ({env['path']})")
"""


def main(argv: list) -> int:
    budget = load_budget()
    chosen, extra = [], []
    args = iter(argv)
    for a in args:
        if a == "--layer":
            chosen.append(next(args, ""))
        else:
            extra.append(a)
    layers = [e for e in budget["layer"] if not chosen or e["name"] in chosen]
    unknown = set(chosen) - {e["name"] for e in budget["layer"]}
    if unknown:
        raise SystemExit(f"--layer {', '.join(sorted(unknown))}: not a layer of {BUDGET}")
    out_dir = ROOT / ".pytest-layers"
    out_dir.mkdir(exist_ok=True)
    ran, launches = [], {"sglang": 0, "stand-in": 0}
    # The sglang CPU environment every e2e group needs (6 GB of wheels) is built while the fast layer runs, so the
    # e2e layer's first groups find it made; at the lowest priority, since the fast layer is what a developer waits
    # for and the build has until the e2e layer starts.
    prewarm = None
    if any(e["name"] != "fast" for e in layers):
        prewarm_log = out_dir / "sglang-env.log"
        with open(prewarm_log, "w") as fh:
            prewarm = subprocess.Popen([sys.executable, "-c", PREWARM], cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT,
                                       preexec_fn=lambda: os.nice(19))
    for entry in layers:
        if entry["name"] != "fast" and prewarm is not None:
            prewarm.wait()
            print(f"\n{(prewarm_log.read_text().strip().splitlines() or ['sglang CPU env: no output'])[-1]}"
                  f" (log: {prewarm_log})", flush=True)
            prewarm = None
        junit = out_dir / f"{entry['name']}.xml"
        junit.unlink(missing_ok=True)
        # pytest empties it when the layer starts and keeps it after: launches are counted from it
        basetemp = out_dir / f"tmp-{entry['name']}"
        cmd = [sys.executable, "-m", "pytest", "-m", entry["markers"], "-n", str(entry["workers"]),
               "--dist", "loadscope", "--no-loadscope-reorder", f"--junitxml={junit}", f"--basetemp={basetemp}",
               "-q", "-rfE", *extra]
        print(f"\n=== layer {entry['name']}: {' '.join(cmd[1:])}", flush=True)
        start, started_at = time.monotonic(), time.time()
        status = subprocess.call(cmd, cwd=ROOT)
        ran.append((entry, time.monotonic() - start, read_junit(junit), status))
        for kind, n in count_launches(basetemp, since=started_at).items():
            launches[kind] += n
    ci_start = os.environ.get("SPECREPRO_CI_START")
    ci_elapsed = time.time() - float(ci_start) if ci_start else None
    print("\n".join(summary(ran, budget.get("ci"), ci_elapsed, launches)), flush=True)
    # pytest's 5 is "no test collected": a layer that a -k or -m of the caller's empties is not a failure
    failing = [status for _, _, _, status in ran if status not in (0, 5)]
    if failing:
        return failing[0]
    return 0 if any(cases for _, _, cases, _ in ran) else 5


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
