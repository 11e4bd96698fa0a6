"""MLflow: one experiment per campaign, a parent run, child runs per stage/arm/run.

Every run carries a stable key tag (`specrepro.key`); logging the same thing
again finds its run by that key and updates it, so reruns and the later
`specrepro log` never duplicate.  The default store is an SQLite file under
the campaign's results folder.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
from pathlib import Path
from typing import Any, Dict, Optional

from specrepro.redaction import redact, secret_values

KEY_TAG = "specrepro.key"


def tracking_uri(cfg: Dict[str, Any]) -> str:
    uri = cfg["tracking"].get("uri") or os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return uri
    return f"sqlite:///{Path(cfg['results_dir']).resolve()}/mlflow.db"


def _client(uri: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def experiment_id(client, name: str, artifact_root: Optional[Path]) -> str:
    """The campaign's experiment; a local store keeps its artifacts next to the results."""
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        return exp.experiment_id
    location = artifact_root.resolve().as_uri() if artifact_root is not None else None
    return client.create_experiment(name, artifact_location=location)


def find_or_create_run(client, exp_id: str, key: str, name: str, parent_id: Optional[str] = None) -> str:
    found = client.search_runs([exp_id], filter_string=f"tags.`{KEY_TAG}` = '{key}'", max_results=2)
    if found:
        return found[0].info.run_id
    tags = {KEY_TAG: key}
    if parent_id:
        tags["mlflow.parentRunId"] = parent_id
    return client.create_run(exp_id, tags=tags, run_name=name).info.run_id


def _flatten(prefix: str, value: Any, out: Dict[str, str]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif isinstance(value, list):
        out[prefix] = json.dumps(value)[:6000]
    else:
        out[prefix] = str(value)[:6000]


def _log(client, run_id: str, params: Dict[str, Any], metrics: Dict[str, float], tags: Dict[str, str]) -> None:
    """Params, metrics and tags in batches; params that already hold the same value are skipped."""
    from mlflow.entities import Metric, Param, RunTag

    secrets = secret_values()
    existing = client.get_run(run_id).data.params
    flat: Dict[str, str] = {}
    _flatten("", params, flat)
    new_params = [Param(k[:250], redact(v, secrets)) for k, v in flat.items() if existing.get(k[:250]) != redact(v, secrets)]
    import time as _time

    now = int(_time.time() * 1000)
    metric_objs = [Metric(k, float(v), now, 0) for k, v in metrics.items() if v is not None]
    tag_objs = [RunTag(k, redact(str(v), secrets)) for k, v in tags.items() if v is not None]
    for i in range(0, max(len(new_params), len(metric_objs), len(tag_objs)), 100):
        client.log_batch(run_id, metrics=metric_objs[i : i + 100], params=new_params[i : i + 100], tags=tag_objs[i : i + 100])


def host_tags() -> Dict[str, str]:
    tags = {"host": socket.gethostname(), "python": platform.python_version(), "os": platform.platform()}
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10,
                                cwd=Path(__file__).parent).stdout.strip()
        if commit:
            tags["project_git_commit"] = commit
    except (OSError, subprocess.TimeoutExpired):
        pass
    return tags


class CampaignTracker:
    """Logs a campaign's results from disk; safe to call any number of times."""

    def __init__(self, cfg: Dict[str, Any]):
        from specrepro.config import config_hash

        self.cfg = cfg
        self.uri = tracking_uri(cfg)
        self.client = _client(self.uri)
        results = Path(cfg["results_dir"])
        # A tracking server keeps artifacts where it is configured to; the
        # default SQLite store keeps them under the results folder.
        local = self.uri.startswith(("sqlite:", "file:")) or "://" not in self.uri
        self.exp_id = experiment_id(self.client, cfg["tracking"]["experiment_name"],
                                    results / "mlartifacts" if local else None)
        self.config_hash = config_hash(cfg)
        self.campaign_key = f"campaign:{cfg['experiment']['name']}:{self.config_hash}"
        self.parent = find_or_create_run(self.client, self.exp_id, self.campaign_key, cfg["experiment"]["name"])
        _log(
            self.client,
            self.parent,
            {"sglang": cfg["sglang"], "model": cfg["model"]["name"], "platform": cfg["platform"]["name"],
             "repeats": cfg["experiment"]["repeats"]},
            {},
            {"config_hash": self.config_hash, "campaign": cfg["experiment"]["name"], **host_tags()},
        )
        resolved = results / "resolved_config.yaml"
        if resolved.is_file():
            self.artifact(self.parent, resolved, "config")

    def child(self, key: str, name: str) -> str:
        return find_or_create_run(self.client, self.exp_id, f"{self.campaign_key}:{key}", name, self.parent)

    def log(self, run_id: str, params=None, metrics=None, tags=None) -> None:
        _log(self.client, run_id, params or {}, metrics or {}, {"config_hash": self.config_hash, **(tags or {})})

    def artifact(self, run_id: str, path: Path, artifact_path: Optional[str] = None) -> None:
        self.client.log_artifact(run_id, str(path), artifact_path)

    def finish(self, run_id: str, status: str = "FINISHED") -> None:
        self.client.set_terminated(run_id, status)

    def log_patch_check(self, verdict_path: Path) -> str:
        verdict = json.loads(Path(verdict_path).read_text())
        series = Path(verdict_path).parent.name
        run = self.child(f"patch_check:{series}", f"patch_check/{series}")
        metrics = {f"check.{c['check']}": float(c["passed"]) for c in verdict["patched"]}
        metrics.update({f"unpatched.{c['check']}": float(c["passed"]) for c in verdict["unpatched"]})
        metrics["passed"] = float(verdict["passed"])
        metrics["bug_visible_on_unpatched"] = float(verdict["bug_visible_on_unpatched"])
        for c in verdict["patched"] + verdict["unpatched"]:
            if "non_argmax" in c:
                metrics[f"{'patched' if c in verdict['patched'] else 'unpatched'}.greedy_non_argmax_rows"] = c["non_argmax"]
        self.log(
            run,
            params={"sglang_version": verdict["sglang_version"], "reference_version": verdict["reference_version"],
                    "patches": {p["patch"]: p["sha256"] for p in verdict["patches"]}},
            metrics=metrics,
            tags={"stage": "patch_check", "executed_on": "cpu", "gpu_note": verdict["gpu_note"]},
        )
        return self._close_check(run, verdict_path, verdict, "patch_check")

    def _close_check(self, run: str, verdict_path: Path, verdict: Dict[str, Any], stage: str) -> str:
        """A check's verdict and its markdown as artifacts; the run ends FAILED when the check failed."""
        self.artifact(run, verdict_path, stage)
        md = Path(verdict_path).with_suffix(".md")
        if md.is_file():
            self.artifact(run, md, stage)
        self.finish(run, "FINISHED" if verdict["passed"] else "FAILED")
        return run

    def log_gpu_check(self, verdict_path: Path) -> str:
        verdict = json.loads(Path(verdict_path).read_text())
        arm = verdict["arm"]
        run = self.child(f"gpu_check:{arm}", f"gpu_check/{arm}")
        metrics = {f"check.{c['check']}": float(c["passed"]) for c in verdict["checks"] if c["executed"]}
        metrics.update(passed=float(verdict["passed"]), bug_visible=float(verdict["bug_visible"]))
        eager = verdict["record"]["eager"]["greedy"]
        metrics["greedy_non_argmax_share"] = eager["non_argmax"] / eager["rows"]
        if verdict["record"].get("graph"):
            g = verdict["record"]["graph"]
            metrics["graph_refilled_non_argmax"] = g["refilled"]["non_argmax"]
            metrics["graph_producer_missing_non_argmax_share"] = g["producer_missing"]["non_argmax"] / g["producer_missing"]["rows"]
        self.log(run, params={"arm": arm, "role": verdict["role"]}, metrics=metrics,
                 tags={"stage": "gpu_check", "executed_on": verdict["device"], "gpu_name": verdict.get("gpu_name") or "none",
                       "graph_executed": str(verdict["graph_executed"])})
        return self._close_check(run, verdict_path, verdict, "gpu_check")

    def log_results(self, results_dir: Path) -> Dict[str, str]:
        """Arms and (arm, benchmark, repeat) runs from the results folder."""
        from specrepro.campaign import Campaign

        campaign = Campaign(self.cfg)
        created: Dict[str, str] = {}
        plat = self.cfg["platform"]
        for arm in campaign.arms:
            arm_dir = campaign.arm_dir(arm)
            arm_record_path = arm_dir / "arm.json"
            if not arm_record_path.is_file():
                continue
            arm_record = json.loads(arm_record_path.read_text())
            arm_run = self.child(f"arm:{arm}", arm)
            image = arm_record.get("image") or {}
            # Measured, not configured: what the arm's image saw on the GPUs it was granted.
            facts = (arm_record.get("gpu_facts") or {}).get("before") or {}
            fp = arm_record.get("fingerprint") or {}
            granted = sorted({g for e in arm_record.get("launches", []) for g in e.get("gpus") or []})
            platform_tags = {"platform": plat["name"], "accelerator": plat["accelerator"],
                             "gpu_model": fp.get("gpu_model") or "none", "gpus_granted": ",".join(map(str, granted)) or "none",
                             "gpu_count": str(len(granted)), "gpu_facts_source": facts.get("source", "none"),
                             **{f"fingerprint.{k}": str(v) for k, v in fp.items() if v is not None}}
            self.log(arm_run,
                     params={"sglang_ref": campaign.ref_of(arm), "patch_series": campaign.series_of(arm) or "none",
                             "patch_sha256": ",".join(image.get("patch_sha256") or []) or "none",
                             "server_args": campaign.server_args(arm)},
                     tags={**platform_tags, "arm": arm, "image": image.get("image") or image.get("pythonpath", ""),
                           "image_digest": image.get("image_id", "")})
            if (arm_dir / "server.log").is_file():
                self.artifact(arm_run, arm_dir / "server.log", "server")
            created[f"arm:{arm}"] = arm_run
            for run in campaign.bench_runs(arm):
                path = arm_dir / run.stem / "run.json"
                if not path.is_file():
                    continue
                record = json.loads(path.read_text())
                run_id = self.child(f"run:{arm}:{run.benchmark}:{run.repeat}", f"{arm}/{run.benchmark}/r{run.repeat}")
                bench = campaign.benchmark(run.benchmark)
                agreement = record["accept_length_sources"]["agreement"]
                self.log(run_id,
                         params={"benchmark": bench, "repeat": run.repeat, "arm": arm},
                         metrics={k: v for k, v in record["metrics"].items() if isinstance(v, (int, float))},
                         tags={**platform_tags, "arm": arm, "benchmark": run.benchmark, "server_launch": record["server_launch"],
                               "mlflow.parentRunId": arm_run,
                               "accept_length_sources_agree": str(agreement["agree"])})
                for name in ("questions.jsonl", "bench_serving.jsonl", "run.json"):
                    if (arm_dir / run.stem / name).is_file():
                        self.artifact(run_id, arm_dir / run.stem / name, "outputs")
                self.finish(run_id)
                created[f"run:{arm}:{run.benchmark}:{run.repeat}"] = run_id
            self.finish(arm_run)
        report_dir = results_dir / "report"
        for name in ("report.md", "report.html", "analysis.json"):
            if (report_dir / name).is_file():
                self.artifact(self.parent, report_dir / name, "report")
        for name in ("runs.csv", "requests.parquet"):
            if (results_dir / "tables" / name).is_file():
                self.artifact(self.parent, results_dir / "tables" / name, "tables")
        self.finish(self.parent)
        return created


def log_campaign(cfg: Dict[str, Any], verdicts, with_results: bool, record: Optional[Path] = None,
                 log=None, gpu_checks=()) -> Dict[str, Any]:
    """Everything a campaign holds on disk into MLflow: patch-check verdicts, and arms and runs when measured.

    The one logging path of the Snakemake rules and `specrepro log`; idempotent.
    """
    from specrepro.fileio import write_json

    tracker = CampaignTracker(cfg)
    logged: Dict[str, Any] = {"tracking_uri": tracker.uri, "parent_run": tracker.parent, "children": {}}
    for verdict in verdicts:
        logged["children"][str(verdict)] = tracker.log_patch_check(Path(verdict))
    for verdict in gpu_checks:
        logged["children"][str(verdict)] = tracker.log_gpu_check(Path(verdict))
    if with_results:
        logged["children"].update(tracker.log_results(Path(cfg["results_dir"])))
    if log is not None:
        print(json.dumps(logged, indent=1), file=log)
    if record is not None:
        write_json(record, logged)
    return logged
