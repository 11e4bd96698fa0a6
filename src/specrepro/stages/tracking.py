"""MLflow: one experiment per campaign, a parent run, child runs per stage/arm/run.

Every run carries a stable key tag (`specrepro.key`); logging the same thing
again finds its run by that key and updates it, so reruns and the later
`specrepro log` never duplicate.  The default store is an SQLite file under
the campaign's results folder; a team's server (tracking.uri=http://...) is
checked before any GPU time (specrepro.stages.tracking_server).

A campaign is one results folder: its id (tracking/campaign_id, written the
first time it is logged) is part of every key, so two campaigns of one
configuration on one server keep distinct run sets, and a copied folder
(CI artifacts) logs into its own runs again.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Optional

from specrepro.core.arm_plan import thawed
from specrepro.util.metric_names import tracking_name
from specrepro.util.redaction import redact, secret_values
from specrepro.core.rounds import round_of
from specrepro.stages.tracking_server import TrackingServerError, configured_uri, refuse_credentials_in_uri
from specrepro.core.campaign import Campaign
from specrepro.core.config import config_hash, load_resolved
from specrepro.stages.patch_check import verdict_rows
from specrepro.util.fileio import write_json
from specrepro.util.procs import free_port

KEY_TAG = "specrepro.key"
# The claims an arm takes part in, counted by verdict, next to its headline metrics.
CLAIM_COUNT_METRICS = {"REPRODUCED": "claims.reproduced", "NOT REPRODUCED": "claims.not_reproduced",
                       "INCONCLUSIVE": "claims.inconclusive"}
# MLflow's UI (3.x) loads a runs-page view (filter, grouping, columns) from an experiment tag
# with this prefix when the URL names it as `viewStateShareKey`, the same tag its "Share" button writes.
SHARED_VIEW_TAG = "mlflow.sharedViewState."
# MLflow 3.17 picks the UI's mode (GenAI or model training) from the browser (URL parameter, else
# localStorage, default GenAI), not from the experiment's `mlflow.experimentKind` tag: links carry it.
ML_MODE = "workflowType=machine_learning"
# Where `mlflow ui` serves a local store by default.
DEFAULT_UI = "http://127.0.0.1:5000"
# The parent run's description holds the report up to this many characters.
NOTE_LIMIT = 7000


def headline_metrics(bench: Dict[str, Any]) -> tuple:
    return tuple((bench.get("headline") or {}).get("metrics") or ())


def tracking_uri(cfg: Dict[str, Any]) -> str:
    uri = configured_uri(cfg)
    if uri:
        refuse_credentials_in_uri(uri)
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
    # MLflow 3 opens an experiment by its kind: runs (model development), not GenAI traces.
    return client.create_experiment(name, artifact_location=location,
                                    tags={"mlflow.experimentKind": "custom_model_development"})


def find_or_create_run(client, exp_id: str, key: str, name: str, parent_id: Optional[str] = None,
                       start_time_ms: Optional[int] = None, created: Optional[list] = None) -> str:
    """The run of `key`; created (timed by its measurement window where known) when missing, and its key appended to
    `created`."""
    found = client.search_runs([exp_id], filter_string=f"tags.`{KEY_TAG}` = '{key}'", max_results=2)
    if found:
        return found[0].info.run_id
    tags = {KEY_TAG: key, "mlflow.user": logging_user()}
    if parent_id:
        tags["mlflow.parentRunId"] = parent_id
    run_id = client.create_run(exp_id, tags=tags, run_name=name, start_time=start_time_ms).info.run_id
    if created is not None:
        created.append(key)
    return run_id


def logging_user() -> str:
    """Who logs: the tracking server's account (MLflow's own credentials) where there is one, else the login name."""
    import getpass

    from mlflow.utils.credentials import read_mlflow_creds

    return read_mlflow_creds().username or getpass.getuser()


def campaign_id(results: Path) -> str:
    """The results folder's campaign id, written the first time it is logged; "" for a folder logged before ids
    existed (its runs keep the keys they were logged under)."""
    import uuid

    path = results / "tracking" / "campaign_id"
    if path.is_file():
        return path.read_text().strip()
    if any((results / "tracking" / f"{job}.json").is_file() for job in ("campaign", "cpu_stages")):
        return ""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        # the first of two tracking jobs starting together writes it; the other reads it
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return path.read_text().strip()
    with os.fdopen(fd, "w") as f:
        f.write(uuid.uuid4().hex[:16] + "\n")
    return path.read_text().strip()


def tracking_secrets() -> list:
    """Secret-looking environment values and the password MLflow reads from its credentials file."""
    from mlflow.utils.credentials import read_mlflow_creds

    password = read_mlflow_creds().password
    return secret_values() + ([password] if password and len(password) >= 4 else [])


def _flatten(prefix: str, value: Any, out: Dict[str, str]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif isinstance(value, list):
        out[prefix] = json.dumps(value)[:6000]
    else:
        out[prefix] = str(value)[:6000]


def _log(client, run_id: str, params: Dict[str, Any], metrics: Dict[str, float], tags: Dict[str, str],
         timestamp_ms: Optional[int] = None) -> None:
    """Params, metrics and tags in batches; params that already hold the same value are skipped."""
    from mlflow.entities import Metric, Param, RunTag

    secrets = tracking_secrets()
    existing_run = client.get_run(run_id).data
    existing = existing_run.params
    flat: Dict[str, str] = {}
    _flatten("", params, flat)
    new_params = [Param(k[:250], redact(v, secrets)) for k, v in flat.items() if existing.get(k[:250]) != redact(v, secrets)]
    # Metrics carry the measurement's time (its window's end), so logging the same record again
    # writes the same (key, value, timestamp, step): the history does not grow.
    existing_metrics = existing_run.metrics
    stamp = timestamp_ms if timestamp_ms is not None else 0
    # MLflow refuses brackets in a name: a metric per category (accept_length[mixed]) is logged as accept_length/mixed
    metrics = {tracking_name(k): v for k, v in metrics.items()}
    metric_objs = [Metric(k, float(v), stamp, 0) for k, v in metrics.items()
                   if v is not None and existing_metrics.get(k) != float(v)]
    tag_objs = [RunTag(k, redact(str(v), secrets)) for k, v in tags.items() if v is not None]
    for i in range(0, max(len(new_params), len(metric_objs), len(tag_objs)), 100):
        client.log_batch(run_id, metrics=metric_objs[i : i + 100], params=new_params[i : i + 100], tags=tag_objs[i : i + 100])


def specrepro_commit() -> Optional[str]:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10,
                              cwd=Path(__file__).parent).stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        return None


def host_tags() -> Dict[str, str]:
    tags = {"host": socket.gethostname(), "python": platform.python_version(), "os": platform.platform()}
    commit = specrepro_commit()
    if commit:
        tags["mlflow.source.git.commit"] = commit
        tags["mlflow.source.name"] = "specrepro"
    return tags


def sglang_source_sha(layout, ref: str) -> str:
    """What identifies the sglang tree an arm ran: its release archive's sha256, else its git commit."""
    path = Path(layout.source_manifest(ref))
    if not path.is_file():
        return "none"
    manifest = json.loads(path.read_text())
    return manifest.get("archive_sha256") or manifest.get("commit") or "none"


def claim_counts(analysis: Dict[str, Any]) -> Dict[str, Dict[str, float]]:
    """Per arm, the claims it takes part in (as `arm`, `against` or one of `arms`) counted by verdict."""
    counts: Dict[str, Dict[str, float]] = {}
    for claim in analysis.get("claims") or []:
        metric = CLAIM_COUNT_METRICS.get(claim.get("verdict"))
        if metric is None:
            continue
        for arm in {a for a in (claim.get("arm"), claim.get("against"), *(claim.get("arms") or [])) if a}:
            per_arm = counts.setdefault(arm, {m: 0.0 for m in CLAIM_COUNT_METRICS.values()})
            per_arm[metric] += 1
    return counts


class CampaignTracker:
    """Logs a campaign's results from disk; safe to call any number of times."""

    def __init__(self, cfg: Dict[str, Any]):
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
        self.campaign_id = campaign_id(results)
        self.campaign_key = f"campaign:{cfg['experiment']['name']}:{self.config_hash}" + (
            f":{self.campaign_id}" if self.campaign_id else "")
        # What a team filters by, on every run of the campaign (the arms add series, patch and sglang tree hashes).
        self.team_tags = {"config_hash": self.config_hash, "experiment": cfg["experiment"]["name"],
                          "model": cfg["model"]["name"], "platform": cfg["platform"]["name"],
                          "sglang_version": cfg["sglang"]["version"], "campaign_id": self.campaign_id or "none",
                          "specrepro_commit": specrepro_commit() or "unknown"}
        self.created: list = []
        # Two configurations of one campaign are told apart at a glance in the runs list.
        self.parent = find_or_create_run(self.client, self.exp_id, self.campaign_key,
                                         f"{cfg['experiment']['name']} | {cfg['model']['name']} | "
                                         f"{cfg['platform']['name']} | {self.config_hash[:8]}", created=self.created)
        self.log(
            self.parent,
            {"sglang": cfg["sglang"], "model": cfg["model"]["name"], "platform": cfg["platform"]["name"],
             "repeats": cfg["experiment"]["repeats"]},
            tags={"campaign": cfg["experiment"]["name"], **host_tags()},
        )
        resolved = results / "resolved_config.yaml"
        if resolved.is_file():
            self.artifact(self.parent, resolved, "config")

    def child(self, key: str, name: str, start_time_ms: Optional[int] = None) -> str:
        return find_or_create_run(self.client, self.exp_id, f"{self.campaign_key}:{key}", name, self.parent,
                                  start_time_ms, self.created)

    def log(self, run_id: str, params=None, metrics=None, tags=None, timestamp_ms: Optional[int] = None) -> None:
        _log(self.client, run_id, params or {}, metrics or {}, {**self.team_tags, **(tags or {})}, timestamp_ms)

    def artifact(self, run_id: str, path: Path, artifact_path: Optional[str] = None) -> None:
        self.client.log_artifact(run_id, str(path), artifact_path)

    def finish(self, run_id: str, status: str = "FINISHED", end_time_ms: Optional[int] = None) -> None:
        self.client.set_terminated(run_id, status, end_time=end_time_ms)

    def dashboard_view(self, arms, columns) -> str:
        """The runs page as this configuration's question needs it: one row per arm, its headline columns.

        Stored as a shared view of the experiment (a tag), opened by the returned link.
        """
        key = f"specrepro-{self.config_hash[:12]}"
        view = {
            "searchFilter": f"tags.config_hash = '{self.config_hash}'",
            "orderByKey": "attributes.start_time", "orderByAsc": True,
            "selectedColumns": [f"metrics.`{c}`" for c in columns],
            # Rows grouped by arm and folded: each arm's row shows its headline numbers.
            "groupBy": {"aggregateFunction": "average", "groupByKeys": [{"mode": "tag", "groupByData": "arm"}]},
            "groupsExpanded": {f"tag.arm.{arm}": False for arm in arms},
        }
        self.client.set_experiment_tag(self.exp_id, SHARED_VIEW_TAG + key, json.dumps(view))
        base = self.uri.rstrip("/") if self.uri.startswith(("http://", "https://")) else DEFAULT_UI
        url = f"{base}/#/experiments/{self.exp_id}/runs?{ML_MODE}&viewStateShareKey={key}"
        self.client.set_tag(self.parent, "specrepro.dashboard", url)
        return url

    def log_patch_check(self, verdict_path: Path) -> str:
        """A series' patch_check: each check's outcome as a metric (`<tree>.<check>`), the series in its own words."""

        verdict = json.loads(Path(verdict_path).read_text())
        series = verdict.get("series") or Path(verdict_path).parent.name
        run = self.child(f"patch_check:{series}", f"patch_check/{series}")
        metrics = {f"{c.get('tree', 'patched')}.{c['check']}": float(c["passed"]) for c in verdict_rows(verdict)
                   if c["executed"]}
        metrics["passed"] = float(verdict["passed"])
        self.log(
            run,
            params={"sglang_version": verdict["sglang_version"], "reference_version": verdict.get("reference_version"),
                    "series": series, "patches": {p["patch"]: p["sha256"] for p in verdict["patches"]}},
            metrics=metrics,
            tags={"stage": "patch_check", "executed_on": "cpu", "series_title": verdict.get("title", ""),
                  "behavioural_checks": ",".join(verdict.get("behavioural_checks") or []) or "none",
                  "series": series, "patch_sha256": ",".join(p["sha256"] for p in verdict["patches"]) or "none",
                  "summary": "; ".join(r.get("summary") or "" for r in verdict.get("results") or [])[:5000]},
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
        """An arm's GPU checks: each check's outcome as a metric (`<series>.<check>.<row>`), its role as a tag."""
        verdict = json.loads(Path(verdict_path).read_text())
        arm = verdict["arm"]
        run = self.child(f"gpu_check:{arm}", f"gpu_check/{arm}")
        metrics = {f"{r['series']}.{r['name']}.{c['check']}": float(c["passed"]) for r in verdict["results"]
                   for c in r["checks"] if c["executed"]}
        metrics.update({f"{r['series']}.{r['name']}.passed": float(r["passed"]) for r in verdict["results"]})
        metrics["passed"] = float(verdict["passed"])
        devices = sorted({str(r.get("device")) for r in verdict["results"] if r.get("device")})
        self.log(run, params={"arm": arm, "roles": {r["series"]: r["role"] for r in verdict["results"]}},
                 metrics=metrics,
                 tags={"stage": "gpu_check", "executed_on": ",".join(devices) or "see the verdict",
                       "gpu_name": ",".join(sorted({r["gpu_name"] for r in verdict["results"] if r.get("gpu_name")}))
                       or "none",
                       "summary": "; ".join(f"{r['series']}/{r['name']}: {r.get('summary') or ''}"
                                            for r in verdict["results"])[:5000]})
        return self._close_check(run, verdict_path, verdict, "gpu_check")

    def log_arm(self, plan, arm_record: Dict[str, Any]) -> tuple:
        """The arm's run: what it ran (its plan) and where (measured, not configured: what its image saw on the GPUs
        it was granted); returns the run and the platform tags its runs share."""
        plat = self.cfg["platform"]
        arm = plan.name
        arm_run = self.child(f"arm:{arm}", arm)
        image = arm_record.get("image") or {}
        facts = (arm_record.get("gpu_facts") or {}).get("before") or {}
        fp = arm_record.get("fingerprint") or {}
        granted = sorted({g for e in arm_record.get("launches", []) for g in e.get("gpus") or []})
        tags = {"platform": plat["name"], "accelerator": plat["accelerator"], "series": plan.series or "none",
                "patch_sha256": ",".join(image.get("patch_sha256") or []) or "none",
                "sglang_ref": plan.ref, "sglang_sha256": sglang_source_sha(plan.layout, plan.ref),
                "gpu_model": fp.get("gpu_model") or "none", "gpus_granted": ",".join(map(str, granted)) or "none",
                "gpu_count": str(len(granted)), "gpu_facts_source": facts.get("source", "none"),
                **{f"fingerprint.{k}": str(v) for k, v in fp.items() if v is not None}}
        self.log(arm_run,
                 params={"sglang_ref": plan.ref, "patch_series": plan.series or "none",
                         "patch_sha256": ",".join(image.get("patch_sha256") or []) or "none",
                         "server_args": dict(plan.server_args)},
                 tags={**tags, "arm": arm, "image": image.get("image") or image.get("pythonpath", ""),
                       "image_digest": image.get("image_id", ""), "placement": arm_record.get("placement", ""),
                       "launch_ids": ",".join(sorted({e["launch_id"] for e in arm_record.get("launches", [])}))})
        for name in ("server.log", "launches.jsonl"):
            if (plan.arm_dir / name).is_file():
                self.artifact(arm_run, plan.arm_dir / name, "server")
        return arm_run, tags

    def log_run(self, plan, run, record: Dict[str, Any], arm_run: str, tags: Dict[str, str]) -> tuple:
        """One (arm, benchmark, repeat) run, timed by its measurement window; (label, run id, end, its numbers)."""
        window = record.get("window") or {}
        start_ms = int(window["start"] * 1000) if window.get("start") else None
        end_ms = int(window["end"] * 1000) if window.get("end") else None
        label = f"run:{plan.name}:{run.benchmark}:{run.repeat}" + (f":l{run.launch}" if run.launch else "")
        run_id = self.child(label, f"{plan.name}/{run.stem}", start_ms)
        agreement = record["accept_length_sources"]["agreement"]
        numbers = {k: v for k, v in record["metrics"].items() if isinstance(v, (int, float))}
        self.log(run_id,
                 params={"benchmark": thawed(plan.benchmarks[run.benchmark]), "repeat": run.repeat, "arm": plan.name,
                         "launch": run.launch or 1},
                 metrics=numbers,
                 tags={**tags, "arm": plan.name, "benchmark": run.benchmark, "server_launch": record["server_launch"],
                       "mlflow.parentRunId": arm_run, "run_key": record.get("key", ""),
                       "accept_length_sources_agree": str(agreement["agree"])},
                 timestamp_ms=end_ms)
        for name in (*plan.kind(run.benchmark).output_files, "run.json"):
            if (plan.arm_dir / run.stem / name).is_file():
                self.artifact(run_id, plan.arm_dir / run.stem / name, "outputs")
        self.finish(run_id, end_time_ms=end_ms)
        return label, run_id, end_ms, numbers

    def log_results(self, results_dir: Path) -> Dict[str, str]:
        """Arms and (arm, benchmark, repeat) runs from the results folder."""

        campaign = Campaign(self.cfg)
        created: Dict[str, str] = {}
        analysis_path = results_dir / "report" / "analysis.json"
        counts = claim_counts(json.loads(analysis_path.read_text())) if analysis_path.is_file() else {}
        columns: list = []
        for plan in campaign.plans.values():
            arm_record_path = plan.arm_dir / "arm.json"
            if not arm_record_path.is_file():
                continue
            arm_record = json.loads(arm_record_path.read_text())
            arm_run, tags = self.log_arm(plan, arm_record)
            created[f"arm:{plan.name}"] = arm_run
            headline: Dict[str, list] = {}
            last_end = 0
            for run in plan.runs:
                path = plan.arm_dir / run.stem / "run.json"
                # the runs the arm record lists (a sequential design's arm ran the launches its rounds asked for)
                if run.stem not in arm_record.get("runs", {}) or not path.is_file():
                    continue
                run_tags = {**tags, "round": str(round_of(campaign.policy, run.launch))} if campaign.policy else tags
                label, run_id, end_ms, numbers = self.log_run(plan, run, json.loads(path.read_text()), arm_run,
                                                              run_tags)
                created[label] = run_id
                last_end = max(last_end, end_ms or 0)
                for k, v in numbers.items():
                    headline.setdefault(f"{run.benchmark}.{k}", []).append(v)
            # The arm's headline numbers (each benchmark's headline.metrics, means over its repeats) on the arm's own
            # run: they are the dashboard's columns, comparable in the runs table without a click.  A sweep cell's
            # benchmark has dots of its own (gsm8k.concurrency-1): the metric is after the last one.
            arm_metrics = {k: sum(v) / len(v) for k, v in headline.items()
                           if k.rsplit(".", 1)[1] in headline_metrics(plan.benchmarks[k.rsplit(".", 1)[0]])}
            arm_metrics.update(counts.get(plan.name, {}))
            self.log(arm_run, metrics=arm_metrics, timestamp_ms=last_end)
            columns += [tracking_name(k) for k in arm_metrics if tracking_name(k) not in columns]  # as _log names them
            self.finish(arm_run)
        if columns:
            created["dashboard"] = self.dashboard_view(campaign.arms, columns)
        report_dir = results_dir / "report"
        for name in ("report.md", "report.html", "pr_comment.md", "analysis.json"):
            if (report_dir / name).is_file():
                self.artifact(self.parent, report_dir / name, "report")
        for plot in sorted((report_dir / "plots").glob("*.png")):
            self.artifact(self.parent, plot, "report/plots")
        if (report_dir / "report.md").is_file():
            # The parent's description (its page's first panel): the report's verdicts without a download.
            text = (report_dir / "report.md").read_text()
            if len(text) > NOTE_LIMIT:
                text = text[:NOTE_LIMIT] + "\n\n(cut here: the whole report is the artifact report/report.html)\n"
            self.client.set_tag(self.parent, "mlflow.note.content", text)
        for name in ("runs.csv", "requests.parquet"):
            if (results_dir / "tables" / name).is_file():
                self.artifact(self.parent, results_dir / "tables" / name, "tables")
        self.finish(self.parent)
        return created


@contextmanager
def http_limits(tracking: Dict[str, Any]):
    """tracking.http_max_retries and http_timeout_s as MLflow's client reads them (its environment variables, read
    at each request), unless the environment already sets them; put back afterwards."""
    wanted = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": tracking.get("http_max_retries"),
              "MLFLOW_HTTP_REQUEST_TIMEOUT": tracking.get("http_timeout_s")}
    added = {k: str(v) for k, v in wanted.items() if v is not None and k not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for k in added:
            os.environ.pop(k, None)


def log_campaign(cfg: Dict[str, Any], verdicts, with_results: bool, record: Optional[Path] = None,
                 log=None, gpu_checks=()) -> Dict[str, Any]:
    """Everything a campaign holds on disk into MLflow: patch-check verdicts, and arms and runs when measured.

    The one logging path of the Snakemake rules and `specrepro log`; idempotent.
    """
    uri = tracking_uri(cfg)
    try:
        with http_limits(cfg["tracking"]):
            return _log_campaign(cfg, verdicts, with_results, record, log, gpu_checks)
    except TrackingServerError:
        raise
    except Exception as exc:
        from mlflow.exceptions import MlflowException
        from requests import RequestException

        if not isinstance(exc, (MlflowException, RequestException, OSError)):
            raise
        results = Path(cfg["results_dir"])
        raise TrackingServerError(
            f"MLflow at {uri} failed while this campaign was logged ({type(exc).__name__}: "
            f"{redact(' '.join(str(exc).split()), tracking_secrets())[:600]}); nothing measured is lost: every result "
            f"is in {results}; once the server answers, `specrepro log {results}` (or the same run again) logs what "
            "is missing, without duplicates") from exc


def _log_campaign(cfg: Dict[str, Any], verdicts, with_results: bool, record: Optional[Path], log,
                  gpu_checks) -> Dict[str, Any]:

    tracker = CampaignTracker(cfg)
    logged: Dict[str, Any] = {"tracking_uri": tracker.uri, "parent_run": tracker.parent, "children": {}}
    for verdict in verdicts:
        logged["children"][str(verdict)] = tracker.log_patch_check(Path(verdict))
    for verdict in gpu_checks:
        logged["children"][str(verdict)] = tracker.log_gpu_check(Path(verdict))
    if with_results:
        children = tracker.log_results(Path(cfg["results_dir"]))
        dashboard = children.pop("dashboard", None)
        logged["children"].update(children)
        if dashboard:
            logged["dashboard"] = dashboard
            serve = "" if tracker.uri.startswith(("http://", "https://")) else \
                f" (after `mlflow ui --backend-store-uri {tracker.uri}`)"
            print(f"MLflow dashboard, one row per arm: {dashboard}{serve}", file=log or sys.stderr)
    tracker.finish(tracker.parent)  # no run is left RUNNING, the CPU-stages-only logging included
    logged["created"] = len(tracker.created)
    if log is not None:
        print(json.dumps(logged, indent=1), file=log)
    if record is not None:
        write_json(record, logged)
    return logged


def recorded_dashboard(results_dir: Path) -> Optional[str]:
    """The dashboard link the tracking stage recorded for this results folder (tracking/campaign.json), if any."""
    record = Path(results_dir) / "tracking" / "campaign.json"
    if not record.is_file():
        return None
    return json.loads(record.read_text()).get("dashboard")


def on_ui(link: str, base: str) -> str:
    """A dashboard link recorded for `mlflow ui` on its default address, for a UI at `base` instead."""
    return base.rstrip("/") + link[len(DEFAULT_UI):] if link.startswith(DEFAULT_UI) else link


def closing_lines(results_dir: Path) -> list:
    """What the end of a campaign prints: where the report is, the dashboard link and how to open MLflow for it."""
    results = Path(results_dir)
    report = results / "report"
    lines = [f"Report: {report / 'report.html'} (open it in a browser: the verdicts first, plots beside their tables)",
             f"        {report / 'report.md'}; {report / 'pr_comment.md'} is the summary to paste into the PR"]
    link = recorded_dashboard(results)
    store = results / "mlflow.db"
    if link and not link.startswith(DEFAULT_UI):
        lines.append(f"MLflow dashboard, one row per arm: {link}")
    elif link:
        lines += [f"MLflow dashboard, one row per arm: {link}",
                  f"  open it: specrepro open {results}   (starts mlflow ui on this campaign's store on a free "
                  "loopback port and prints the link for it; Ctrl-C stops it)",
                  f"  or: mlflow ui --backend-store-uri sqlite:///{store.resolve()}   then the link above"]
    elif store.is_file():
        lines.append(f"MLflow: specrepro open {results}   (the runs of this campaign; no dashboard was recorded)")
    return lines


def _experiment_link(store_uri: str, cfg: Dict[str, Any], base: str) -> Optional[str]:
    client = _client(store_uri)
    exp = client.get_experiment_by_name(cfg["tracking"]["experiment_name"])
    return f"{base}/#/experiments/{exp.experiment_id}/runs?{ML_MODE}" if exp is not None else None


def ui_answers(url: str, proc: Optional[subprocess.Popen] = None, timeout_s: float = 120) -> bool:
    """Whether an MLflow server or UI at `url` answers its /health within `timeout_s` (False at once if `proc`,
    the process serving it, has exited)."""
    import time

    import requests

    deadline = time.monotonic() + timeout_s
    while proc is None or proc.poll() is None:
        try:
            if requests.get(f"{url}/health", timeout=2).status_code == 200:
                return True
        except requests.RequestException:
            pass
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return False


def open_dashboard(results_dir: Path, port: Optional[int] = None, out=None, ready_timeout_s: float = 180) -> int:
    """`specrepro open`: `mlflow ui` on the campaign's own store, on a free loopback port, until Ctrl-C (or SIGTERM);
    prints the dashboard link for it.  A campaign logged to a tracking server needs no UI here: its link is printed."""
    import signal

    out = out or sys.stdout
    results = Path(results_dir)
    cfg_path = results / "resolved_config.yaml"
    if not cfg_path.is_file():
        print(f"specrepro open: {cfg_path} not found: is {results} a campaign's results folder?", file=sys.stderr)
        return 2
    cfg = load_resolved(cfg_path)
    link = recorded_dashboard(results)
    remote = cfg["tracking"].get("uri")
    if remote and remote.startswith(("http://", "https://")):
        print(f"MLflow dashboard, one row per arm: {link or remote} (on the campaign's tracking server)", file=out)
        return 0
    store = results / "mlflow.db"
    if not store.is_file():
        print(f"specrepro open: {store} not found: nothing was logged for {results} (`specrepro log {results}` logs it)",
              file=sys.stderr)
        return 2
    port = port or free_port("127.0.0.1")
    base = f"http://127.0.0.1:{port}"
    store_uri = f"sqlite:///{store.resolve()}"
    import tempfile

    # its own log, not a pipe: a UI left open for hours would fill a pipe nobody reads and hang
    ui_log = tempfile.TemporaryFile()
    # MLflow's GenAI job runner (seven more processes) serves nothing a campaign's dashboard shows
    env = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", **os.environ}
    proc = subprocess.Popen([str(Path(sys.executable).parent / "mlflow"), "ui", "--host", "127.0.0.1", "--port",
                             str(port), "--backend-store-uri", store_uri, "--workers", "1"],
                            stdout=ui_log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    # Ctrl-C (SIGINT) stops it however it was started: a shell without job control starts a background command with
    # SIGINT ignored, and Python then keeps it ignored instead of raising KeyboardInterrupt.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        if not ui_answers(base, proc, ready_timeout_s):
            ui_log.seek(0)
            print(f"specrepro open: mlflow ui did not answer on {base} within {ready_timeout_s:.0f} s (exit "
                  f"{proc.poll()}): {ui_log.read().decode(errors='replace')[-2000:]}", file=sys.stderr)
            return 2
        shown = on_ui(link, base) if link else _experiment_link(store_uri, cfg, base)
        print(f"MLflow dashboard, one row per arm: {shown or base}", file=out)
        print(f"(mlflow ui on {store_uri}; Ctrl-C stops it)", file=out, flush=True)
        proc.wait()
        return 0
    except KeyboardInterrupt:
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)
        # a second Ctrl-C while the UI shuts down must not leave it running
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        stopped = _stop_group(proc, grace_s=10)
        ui_log.close()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        print("mlflow ui stopped" if stopped else f"mlflow ui (process group {proc.pid}) did not end after SIGKILL",
              file=out, flush=True)


def _stop_group(proc: subprocess.Popen, grace_s: float) -> bool:
    """SIGTERM to the process group `proc` leads, SIGKILL `grace_s` later; whether it ended.  Bounded: a UI that
    will not go (uvicorn waiting on a connection, a process stuck in the kernel) must not hold Ctrl-C forever."""
    import signal

    for sig in (signal.SIGTERM, signal.SIGKILL):
        if proc.poll() is not None:
            return True
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=grace_s)
            return True
        except subprocess.TimeoutExpired:
            continue
    return proc.poll() is not None
