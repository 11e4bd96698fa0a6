"""The gpu_check stage: the patch executed on one GPU inside the arm's own image, before its server.

`probe_gpu.py` runs with the image's python, torch and sglang on one granted
GPU (the same launcher, mounts and GPU grant as the server); the record it
writes is judged here.  A patched arm must pass every executed check, or it is
not measured; an unpatched arm is the control and must show the bug (greedy
rows that miss the argmax).  Without a GPU (CI) the eager checks run on the
CPU and the graph checks are reported as not executed.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import IO, Any, Dict, List

from specrepro.fileio import write_json, write_text_atomic
from specrepro.procs import run_logged
from specrepro.redaction import redact

PROBE = Path(__file__).parent / "probe_gpu.py"
# The probe's folder inside a container (read-only).
PROBE_DIR_INSIDE = "/opt/specrepro-gpu-check"
CHI2_MIN_P = 1e-3


class GpuCheckError(RuntimeError):
    pass


def check(name: str, passed: bool, detail: str, executed: bool = True) -> Dict[str, Any]:
    return {"check": name, "passed": bool(passed), "executed": executed, "detail": detail}


def judge(record: Dict[str, Any], patched_arm: bool) -> Dict[str, Any]:
    """Checks over one probe record; `patched_arm` says which outcome is expected."""
    from specrepro.patch_check.judge import chi_square_p

    eager, graph, src = record["eager"], record.get("graph"), record["runner_source"]
    on = f"on {record['device']}" + (f" ({record['gpu_name']})" if record.get("gpu_name") else "")
    g = eager["greedy"]
    checks = [check("greedy_rows_propose_argmax", g["non_argmax"] == 0,
                    f"{g['non_argmax']} of {g['rows']} greedy rows (top_k=1) proposed a non-argmax token, eager {on}")]
    s = eager["sampled"]
    p = chi_square_p(s["counts"], s["q"])
    checks.append(check("sampled_rows_draw_from_q", p >= CHI2_MIN_P and s["same_as_old_call"],
                        f"TOP_K_ALL rows: chi-square p={p:.3g} over {s['draws']} draws; identical to the old call "
                        f"on the same seed: {s['same_as_old_call']}"))
    if "host_top_ks" in eager:
        raised = eager["host_top_ks"].get("raised")
        checks.append(check("host_top_ks_asserts", raised == "AssertionError",
                            f"top_ks on the host beside device probabilities: raised {raised}"))
    if graph:
        r, m = graph["refilled"], graph["producer_missing"]
        checks.append(check("graph_replay_with_real_top_ks_proposes_argmax", r["non_argmax"] == 0,
                            f"captured once, {r['replays']} replays at batch size {r['batch_size']}, top_ks buffer "
                            f"{r['top_ks_buffer']}: {r['non_argmax']} of {r['rows']} greedy rows missed the argmax"))
        share = m["non_argmax"] / m["rows"] if m["rows"] else 0.0
        checks.append(check("graph_without_the_producer_half_samples", m["non_argmax"] > 0,
                            f"the same graph with the buffer {m['top_ks_buffer']}: {m['non_argmax']} of {m['rows']} "
                            f"greedy rows missed ({share:.3f}): the loss the buffer's producer half prevents"))
    else:
        checks.append(check("graph_capture_and_replay", False, "not executed: needs a GPU", executed=False))
    checks += runner_checks(record.get("graph_runner"), record["device"], record["top_k_all"])
    runner_ok = src["buffer_top_k_all"] and src["capture_uses_buffer"] and not src["placeholder_left"] and src["replay_copies"]
    checks.append(check("graph_runner_carries_top_ks", runner_ok,
                        f"in the image's {Path(src['file']).name}: TOP_K_ALL buffer {src['buffer_top_k_all']}, "
                        f"captured view {src['capture_uses_buffer']}, -1 placeholder left {src['placeholder_left']}, "
                        f"replay copy {src['replay_copies']} (source read inside the image)"))
    executed = [c for c in checks if c["executed"]]
    runner = record.get("graph_runner") or {}
    bug_visible = (g["non_argmax"] > 0 or (bool(graph) and graph["refilled"]["non_argmax"] > 0)
                   or any(r["greedy_missed"] > 0 for r in runner.get("replays", [])))
    if patched_arm:
        passed = all(c["passed"] for c in executed)
    else:
        passed = bug_visible  # the control must show what the patch fixes
    return {"role": "patched" if patched_arm else "control", "passed": passed, "bug_visible": bug_visible,
            "device": record["device"], "gpu_name": record.get("gpu_name"), "torch": record["torch"],
            "graph_executed": bool(graph), "checks": checks, "record": record}


def runner_checks(runner: Dict[str, Any] | None, device: str, top_k_all: int) -> List[Dict[str, Any]]:
    """Checks over sglang's own draft graph runner, driven with fakes (probe_graph_runner.py)."""
    if runner is None:
        return [check("graph_runner_driven", False, "not in this probe's record", executed=False)]
    if "error" in runner:
        return [check("graph_runner_driven", False, f"init, capture or replay raised: {runner['error']}")]
    where = (f"{runner['graph_backend']}, capture sizes {runner['capture_bs']}" if device != "cpu" else
             "eager on the CPU (the graph backend replaced: no CUDA graph captured here)")
    buf = runner["buffer"]
    buffer_ok = (buf is not None and buf["device"].split(":")[0] == device and buf["dtype"] == "int32"
                 and buf["all_top_k_all"])
    buffer_text = ("no top_ks buffer" if buf is None else
                   f"top_ks buffer of {buf['size']} on {buf['device']}, {buf['dtype']}, all TOP_K_ALL "
                   f"({top_k_all}): {buf['all_top_k_all']}")
    captured = runner["captured"]
    views = [bs for bs, seen in captured.items() if seen["is_buffer_view"]]
    others = sorted({f"{seen['device']} {seen['values']}" for seen in captured.values() if not seen["is_buffer_view"]})
    capture_ok = bool(captured) and len(views) == len(captured) and runner["captured_sizes"] == runner["capture_bs"]
    replays = runner["replays"]
    greedy = sum(r["greedy_rows"] for r in replays)
    greedy_missed = sum(r["greedy_missed"] for r in replays)
    sampled = sum(r["sampled_rows"] for r in replays)
    sampled_missed = sum(r["sampled_missed"] for r in replays)
    padded_ok = all(r["padded_to"] == r["expected_padded_to"] for r in replays)
    shapes = ", ".join(f"{r['rows']}->{r['padded_to']}: {r['greedy_missed']}/{r['greedy_rows']}" for r in replays)
    return [
        check("graph_runner_top_ks_buffer", buffer_ok, f"sglang's EAGLEDraftCudaGraphRunner after init, {where}: "
              f"{buffer_text}"),
        check("graph_runner_captures_the_buffer", capture_ok,
              f"captured sizes {runner['captured_sizes']}: the sampling info of {len(views)} of {len(captured)} holds "
              f"a view of the buffer" + (f"; the others hold {', '.join(others)}" if others else "")),
        check("graph_runner_replay_greedy_rows_propose_argmax", greedy_missed == 0 and sampled_missed > 0 and padded_ok,
              f"{greedy_missed} of {greedy} greedy proposals (top_k 1) missed the argmax of their own q over "
              f"{replays[0]['replays']} replays per batch (rows->captured size: missed/greedy {shapes}); sampled rows "
              f"(TOP_K_ALL) still sample: {sampled_missed} of {sampled} not the argmax"),
    ]


def render_markdown(arm: str, verdict: Dict[str, Any]) -> str:
    role = ("patched: every executed check must pass" if verdict["role"] == "patched"
            else "control (unpatched): the checks must show the bug")
    lines = [f"## gpu_check: arm {arm} ({role})", "",
             f"Overall: **{'PASS' if verdict['passed'] else 'FAIL'}** on {verdict['device']}"
             f"{' (' + verdict['gpu_name'] + ')' if verdict.get('gpu_name') else ''}, torch {verdict['torch']}; "
             f"bug visible: {verdict['bug_visible']}", "",
             "| check | result | executed | detail |", "| --- | --- | --- | --- |"]
    for c in verdict["checks"]:
        lines.append(f"| {c['check']} | {'pass' if c['passed'] else 'FAIL'} | "
                     f"{'yes' if c['executed'] else 'no (needs a GPU)'} | {c['detail']} |")
    if not verdict["graph_executed"]:
        lines += ["", "The graph half was not executed here: it needs a GPU. sglang's draft graph runner ran "
                      "through an eager stand-in for its graph backend (its buffers, capture and replay copies ran; "
                      "no CUDA graph was captured)."]
    return "\n".join(lines) + "\n"


def probe_argv(cfg: Dict[str, Any], arm: str, image: Dict[str, Any], out: Path,
               gpus: List[int], gpu_source: str) -> List[str]:
    """The probe's command: inside the arm's image on one GPU, as its server would run."""
    from specrepro.campaign import Campaign
    from specrepro.launch import Launcher, Mount, job_context

    campaign = Campaign(cfg)
    launcher = Launcher(campaign, arm)
    g = cfg["gpu_check"]
    python = image.get("python") or cfg["platform"]["python"]
    args = ["--out", str(out), "--greedy-rows", str(g["greedy_rows"]), "--replays", str(g["replays"]),
            "--runner-replays", str(g["runner_replays"])]
    if launcher.runtime == "none":
        return [python, str(PROBE), *args]
    ctx = job_context(cfg, image, gpus, gpu_source)
    inner = [python, f"{PROBE_DIR_INSIDE}/{PROBE.name}", *args]
    mounts = [Mount(str(PROBE.parent), PROBE_DIR_INSIDE, True), Mount(str(out.parent), str(out.parent), False)]
    launcher.prepare(ctx)
    return launcher.wrap(ctx, inner, server=True, extra_mounts=mounts, name_suffix="-gpucheck")


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
    out = verdict_json.parent / "probe.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    argv = probe_argv(cfg, arm, image, out, gpus, source)
    env = dict(os.environ)
    if image.get("pythonpath"):
        env["PYTHONPATH"] = image["pythonpath"]
    if cfg["platform"]["container_runtime"] == "none" and gpus:
        env["CUDA_VISIBLE_DEVICES"] = env["HIP_VISIBLE_DEVICES"] = ",".join(map(str, gpus))
    started = time.monotonic()
    try:
        code = run_logged(argv, log, env=env, timeout=cfg["gpu_check"]["timeout_s"], start_new_session=True)
    except subprocess.TimeoutExpired as exc:
        raise GpuCheckError(f"arm {arm}: the GPU check ran past gpu_check.timeout_s") from exc
    if code != 0 or not out.is_file():
        raise GpuCheckError(f"arm {arm}: the GPU check probe failed (exit {code}); see the log")
    verdict = judge(json.loads(out.read_text()), patched_arm=bool(campaign.series_of(arm)))
    verdict.update(arm=arm, argv=[redact(a) for a in argv], gpus=gpus, gpu_source=source,
                   image_id=image.get("image_id"), seconds=round(time.monotonic() - started, 1))
    text = render_markdown(arm, verdict)
    print(text, file=log)
    write_json(verdict_json, verdict)
    write_text_atomic(verdict_md, text)
    return verdict


def refuse_failed(verdicts: List[Path]) -> None:
    """A patched arm whose GPU check failed is not measured."""
    for path in verdicts:
        v = json.loads(Path(path).read_text())
        if v["role"] == "patched" and not v["passed"]:
            failed = [c["check"] for c in v["checks"] if c["executed"] and not c["passed"]]
            raise GpuCheckError(f"arm {v['arm']}: gpu_check failed ({', '.join(failed)}; {path}); "
                                f"no GPU time is spent measuring a patch that fails on the GPU")
