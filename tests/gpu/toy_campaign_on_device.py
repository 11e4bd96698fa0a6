"""The toy campaign on the lent H200, through the pipeline's own code for the bare platform.

The machine reaches no package registry and runs one host, so Snakemake is
not carried there; this script does what the DAG's jobs do, in the DAG's
order, with the same functions: the toy model (toy_model_stage), each arm's
image record (image_stage, no container), one sglang server per arm
(serve_arm: preflight with sglang's own argument resolution on the GPU,
launch, /server_info check, warm-up, the GSM8K repeats, teardown, GPU facts),
collect_campaign and campaign_report.  Tests only (tests/gpu/run_toy_campaign_on_device.sh).

    python toy_campaign_on_device.py --unpatched DIR --patched DIR --gsm8k FILE --results DIR
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def tree_manifest(folder: Path, tree: Path, patches=()) -> Path:
    """The layout the source and patch stages leave: <folder>/tree/sglang and manifest.json."""
    folder.mkdir(parents=True, exist_ok=True)
    link = folder / "tree"
    if not link.exists():
        link.symlink_to(tree)
    manifest = folder / "manifest.json"
    manifest.write_text(json.dumps({"package_dir": "sglang", "layout": "installed", "patches": list(patches)}))
    return manifest


def main() -> int:
    from specrepro.analysis.report import campaign_report
    from specrepro.campaign import Campaign
    from specrepro.collect import collect_campaign
    from specrepro.config import compose, dump_resolved
    from specrepro.image import image_stage
    from specrepro.serve import serve_arm
    from specrepro.toy_model import toy_model_stage

    p = argparse.ArgumentParser()
    p.add_argument("--unpatched", required=True)
    p.add_argument("--patched", required=True)
    p.add_argument("--gsm8k", required=True)
    p.add_argument("--results", required=True)
    p.add_argument("overrides", nargs="*")
    a = p.parse_args()
    results = Path(a.results)
    cfg = compose([f"hydra.searchpath=[file://{ROOT / 'tests' / 'gpu' / 'conf'}]", "experiment=eagle_topk_h200_toy",
                   f"results_dir={results}", f"cache_dir={results.parent / 'cache'}",
                   f"data.gsm8k.path={a.gsm8k}",
                   *a.overrides])
    campaign = Campaign(cfg)
    (results / "resolved_config.yaml").parent.mkdir(parents=True, exist_ok=True)
    (results / "resolved_config.yaml").write_text(dump_resolved(cfg))
    log = sys.stdout
    started = time.monotonic()
    toy_model_stage(cfg["model"]["toy"], cfg["model"]["server_args"]["speculative_num_steps"],
                    cfg["data"][cfg["model"]["toy"]["corpus"]], log)
    source = tree_manifest(results / "source" / "v0.5.20", Path(a.unpatched))
    patched = tree_manifest(results / "patch" / "v0.5.20" / "eagle_topk", Path(a.patched))
    arm_records, failed = [], {}
    for arm, _ in campaign.launch_order():
        image = results / "image" / f"{arm}.json"
        plan = campaign.plan(arm)
        image_stage(plan, campaign.series_spec(plan.series) if plan.series else None,
                    patched if plan.series else source, [], image, log)
        out = plan.arm_dir / "arm.json"
        t0 = time.monotonic()
        try:
            serve_arm(plan, image, out, log)
            arm_records.append(out)
            print(f"== arm {arm}: done in {time.monotonic() - t0:.0f} s", flush=True)
        except Exception as exc:  # one arm's failure is a result; the others still run
            failed[arm] = f"{type(exc).__name__}: {exc}"[:3000]
            traceback.print_exc()
            print(f"== arm {arm}: FAILED after {time.monotonic() - t0:.0f} s", flush=True)
    tables = results / "tables"
    if arm_records:
        cfg_run = dict(cfg, experiment=dict(cfg["experiment"], arms={k: v for k, v in cfg["experiment"]["arms"].items()
                                                                     if k not in failed}))
        collect_campaign(cfg_run, arm_records, tables / "runs.csv", tables / "requests.parquet", log,
                         acceptance_csv=tables / "acceptance.csv")
        report = results / "report"
        report.mkdir(parents=True, exist_ok=True)
        campaign_report(cfg_run, tables / "runs.csv", tables / "requests.parquet", [], campaign.claims_path,
                        report / "report.md", report / "report.html", report / "analysis.json", log,
                        arm_records=arm_records, acceptance_csv=tables / "acceptance.csv")
    (results / "device_summary.json").write_text(json.dumps(
        {"failed": failed, "measured": [p.parent.name for p in arm_records],
         "seconds": round(time.monotonic() - started, 1)}, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
