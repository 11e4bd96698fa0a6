"""The gpu_check stage: the GPU checks a patch series declares, on one GPU inside an arm's own image.

Each check's probe runs with the image's python, torch and sglang on one granted GPU (the same launcher, mounts
and GPU grant as the server), the series folder mounted read-only at /opt/specrepro/series/<series>; its judge
reads the record here (the check protocol: patches/README.md).  An arm of the series runs them as `patched`; an
unpatched arm runs every series' GPU checks as the `control` (the judge decides what a control must show).  A
patched arm whose check fails is not measured.  Without a GPU (CI, `gpu_check.enabled=always`) the probes run on
the CPU and say what they could not execute.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import IO, Any, Dict, List

from specrepro.errors import SpecreproError
from specrepro.fileio import write_json, write_text_atomic
from specrepro.procs import run_logged
from specrepro.redaction import redact
from specrepro.series import checks_of, run_judge

# Where a series folder is inside a container (read-only).
SERIES_INSIDE = "/opt/specrepro/series"


class GpuCheckError(SpecreproError, RuntimeError):
    pass


def series_checked_on(campaign, arm: str) -> List[Dict[str, Any]]:
    """(series, role, spec) the arm's GPU check runs: its own series as `patched`, or, for an unpatched arm, every
    series of the campaign as its `control`; only series that declare GPU checks."""
    own = campaign.series_of(arm)
    names = [own] if own else campaign.patch_series_used
    out = []
    for name in names:
        spec = campaign.series_spec(name)
        if checks_of(spec, "gpu"):
            out.append({"series": name, "role": "patched" if own else "control", "spec": spec})
    return out


def probe_argv(cfg: Dict[str, Any], arm: str, image: Dict[str, Any], spec: Dict[str, Any], series: str,
               chk: Dict[str, Any], out: Path, gpus: List[int], gpu_source: str) -> List[str]:
    """A GPU check's probe: inside the arm's image on one GPU, as its server would run."""
    from specrepro.campaign import Campaign
    from specrepro.launch import Launcher, Mount, job_context

    launcher = Launcher(Campaign(cfg), arm)
    python = image.get("python") or cfg["platform"]["python"]
    args = ["--out", str(out), *chk["args"]]
    folder = Path(spec["folder"])
    if launcher.runtime == "none":
        return [python, str(folder / chk["probe"]), *args]
    ctx = job_context(cfg, image, gpus, gpu_source)
    inside = f"{SERIES_INSIDE}/{series}"
    inner = [python, f"{inside}/{chk['probe']}", *args]
    mounts = [Mount(str(folder), inside, True), Mount(str(out.parent), str(out.parent), False)]
    launcher.prepare(ctx)
    tree = "patched" if series == cfg["experiment"]["arms"][arm].get("patch_series") else "unpatched"
    return launcher.wrap(ctx, inner, server=True, extra_mounts=mounts, name_suffix="-gpucheck",
                         extra_env={"SPECREPRO_TREE": tree})


def verdict_section(arm: str, verdict: Dict[str, Any]):
    """The arm's GPU checks as a report section (specrepro.analysis.document), one subsection per check."""
    from specrepro.analysis.document import Section, Table, Text, yes_no

    overall = "PASS" if verdict["passed"] else "FAIL"
    subsections = []
    for r in verdict["results"]:
        role = ("patched: every executed check must pass" if r["role"] == "patched"
                else "control (unpatched): it must show what the change fixes")
        blocks = [Text([f"**{'PASS' if r['passed'] else 'FAIL'}**: {r.get('summary') or '-'}"]),
                  Table(["check", "result", "executed", "detail"],
                        [[c["check"], yes_no(c["passed"], "pass", "FAIL", bad_is_strong=False),
                          "yes" if c["executed"] else "no", c["detail"]] for c in r["checks"]])]
        if r.get("notes"):
            blocks.append(Text(list(r["notes"])))
        subsections.append(Section(f"series `{r['series']}`, check `{r['name']}` ({role})", blocks))
    checks = [c for r in verdict["results"] for c in r["checks"]]
    return Section(f"gpu_check: arm {arm}", [Text([f"Overall: **{overall}**"])], level=2, subsections=subsections,
                   note=f"**{overall}**: {sum(c['passed'] for c in checks)} of {len(checks)} checks pass, "
                        f"{sum(bool(c['executed']) for c in checks)} executed")


def render_markdown(arm: str, verdict: Dict[str, Any]) -> str:
    from specrepro.analysis.document import to_markdown

    return to_markdown([verdict_section(arm, verdict)])


def gpu_check_stage(cfg: Dict[str, Any], arm: str, image_record: Path, verdict_json: Path, verdict_md: Path,
                    log: IO) -> Dict[str, Any]:
    import os

    from specrepro.campaign import Campaign
    from specrepro.image import ensure_image
    from specrepro.launch import granted_gpus

    campaign = Campaign(cfg)
    image = json.loads(Path(image_record).read_text())
    image = ensure_image(cfg, image, log)
    gpus, source = granted_gpus(cfg, needed=1) if cfg["platform"]["accelerator"] != "none" else ([], "no accelerator")
    work = verdict_json.parent / "probes"
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    if image.get("pythonpath"):
        env["PYTHONPATH"] = image["pythonpath"]
    if cfg["platform"]["container_runtime"] == "none" and gpus:
        env["CUDA_VISIBLE_DEVICES"] = env["HIP_VISIBLE_DEVICES"] = ",".join(map(str, gpus))
    started = time.monotonic()
    results, argvs = [], []
    for entry in series_checked_on(campaign, arm):
        series, spec, role = entry["series"], entry["spec"], entry["role"]
        for chk in checks_of(spec, "gpu"):
            out = work / f"{series}.{chk['name']}.json"
            out.unlink(missing_ok=True)
            argv = probe_argv(cfg, arm, image, spec, series, chk, out, gpus, source)
            argvs.append([redact(a) for a in argv])
            env["SPECREPRO_TREE"] = "patched" if role == "patched" else "unpatched"
            try:
                code = run_logged(argv, log, env=env, timeout=min(chk["timeout_s"], cfg["gpu_check"]["timeout_s"]),
                                  start_new_session=True)
            except subprocess.TimeoutExpired as exc:
                raise GpuCheckError(f"arm {arm}: series {series}: GPU check {chk['name']} ran past its timeout "
                                    f"(gpu_check.timeout_s, or the check's timeout_s)") from exc
            if code != 0 or not out.is_file():
                raise GpuCheckError(f"arm {arm}: series {series}: the probe of GPU check {chk['name']} failed "
                                    f"(exit {code}); see the log")
            tree = "patched" if role == "patched" else "unpatched"
            verdict = run_judge(spec, chk, {tree: out}, {}, work / f"{series}.{chk['name']}.verdict.json", log,
                                role=role)
            results.append({**verdict, "series": series, "name": chk["name"], "role": role, "record": str(out)})
    verdict = {"arm": arm, "passed": all(r["passed"] for r in results), "results": results, "argv": argvs,
               "gpus": gpus, "gpu_source": source, "image_id": image.get("image_id"),
               "seconds": round(time.monotonic() - started, 1)}
    text = render_markdown(arm, verdict)
    print(text, file=log)
    write_json(verdict_json, verdict)
    write_text_atomic(verdict_md, text)
    return verdict


def refuse_failed(verdicts: List[Path]) -> None:
    """A patched arm whose GPU check failed is not measured."""
    for path in verdicts:
        v = json.loads(Path(path).read_text())
        failed = [f"{r['series']}/{r['name']}: " + ", ".join(c["check"] for c in r["checks"]
                                                            if c["executed"] and not c["passed"])
                  for r in v["results"] if r["role"] == "patched" and not r["passed"]]
        if failed:
            raise GpuCheckError(f"arm {v['arm']}: gpu_check failed ({'; '.join(failed)}; {path}); no GPU time is "
                                f"spent measuring a patch that fails on the GPU")
