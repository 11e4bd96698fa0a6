"""The gpu_check stage: the GPU checks a patch series declares, on one GPU inside an arm's own image.

Each check's probe runs with the image's python, torch and sglang on one granted GPU (the same launcher, mounts
and GPU grant as the server), the series folder mounted read-only at /opt/specrepro/gpucheck-<series>; its judge
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

from specrepro.util.errors import SpecreproError
from specrepro.core.arm_plan import ArmPlan
from specrepro.util.fileio import write_json, write_text_atomic
from specrepro.serving.launch import LaunchContext, Launcher, Mount, granted_gpus, job_context
from specrepro.util.procs import run_logged
from specrepro.util.redaction import redact
from specrepro.core.series import checks_of, run_judge
from specrepro.serving.probes import probe_argv
from specrepro.stages.image import ensure_image
from specrepro.util.document import Section, Table, Text, to_markdown, yes_no



class GpuCheckError(SpecreproError, RuntimeError):
    pass


def probe_command(launcher: Launcher, ctx: LaunchContext, image: Dict[str, Any], spec: Dict[str, Any], series: str,
                  chk: Dict[str, Any], out: Path, tree: str) -> List[str]:
    """A GPU check's probe: inside the arm's image on one GPU, as its server would run, the series folder mounted."""

    folder = Path(spec["folder"])
    python = image.get("python") or launcher.plat["python"]
    return probe_argv(launcher, ctx, python, folder / chk["probe"], ["--out", str(out), *chk["args"]],
                      f"gpucheck-{series}", folder=folder, extra_mounts=[Mount(str(out.parent), str(out.parent), False)],
                      extra_env={"SPECREPRO_TREE": tree})


def verdict_section(arm: str, verdict: Dict[str, Any]):
    """The arm's GPU checks as a report section (specrepro.util.document), one subsection per check."""

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
    return to_markdown([verdict_section(arm, verdict)])


def gpu_check_stage(plan: ArmPlan, checked: List[Dict[str, Any]], image_record: Path, verdict_json: Path,
                    verdict_md: Path, log: IO) -> Dict[str, Any]:
    """The GPU checks of `checked` (Campaign.gpu_checked_series: series, role, spec) on the arm's image."""
    import os

    image = ensure_image(plan, json.loads(Path(image_record).read_text()), log)
    gpus, source = granted_gpus(plan, needed=1) if plan.platform["accelerator"] != "none" else ([], "no accelerator")
    launcher = Launcher(plan)
    ctx = job_context(plan, image, gpus, source)
    work = verdict_json.parent / "probes"
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    if image.get("pythonpath"):
        env["PYTHONPATH"] = image["pythonpath"]
    if launcher.runtime.is_bare and gpus:
        env["CUDA_VISIBLE_DEVICES"] = env["HIP_VISIBLE_DEVICES"] = ",".join(map(str, gpus))
    started = time.monotonic()
    results, argvs = [], []
    for entry in checked:
        series, spec, role = entry["series"], entry["spec"], entry["role"]
        tree = "patched" if role == "patched" else "unpatched"
        for chk in checks_of(spec, "gpu"):
            out = work / f"{series}.{chk['name']}.json"
            out.unlink(missing_ok=True)
            argv = probe_command(launcher, ctx, image, spec, series, chk, out, tree)
            argvs.append([redact(a) for a in argv])
            env["SPECREPRO_TREE"] = tree
            try:
                code = run_logged(argv, log, env=launcher.process_env(ctx, env),
                                  timeout=min(chk["timeout_s"], plan.gpu_check["timeout_s"]), start_new_session=True)
            except subprocess.TimeoutExpired as exc:
                raise GpuCheckError(f"arm {plan.name}: series {series}: GPU check {chk['name']} ran past its timeout "
                                    f"(gpu_check.timeout_s, or the check's timeout_s)") from exc
            if code != 0 or not out.is_file():
                raise GpuCheckError(f"arm {plan.name}: series {series}: the probe of GPU check {chk['name']} failed "
                                    f"(exit {code}); see the log")
            verdict = run_judge(spec, chk, {tree: out}, {}, work / f"{series}.{chk['name']}.verdict.json", log,
                                role=role)
            results.append({**verdict, "series": series, "name": chk["name"], "role": role, "record": str(out)})
    verdict = {"arm": plan.name, "passed": all(r["passed"] for r in results), "results": results, "argv": argvs,
               "gpus": gpus, "gpu_source": source, "image_id": image.get("image_id"),
               "seconds": round(time.monotonic() - started, 1)}
    text = render_markdown(plan.name, verdict)
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
