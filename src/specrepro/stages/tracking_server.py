"""A team's MLflow tracking server, checked before any GPU time is spent.

Credentials are MLflow's own: MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD or MLFLOW_TRACKING_TOKEN in the
environment, else MLflow's credentials file (~/.mlflow/credentials, section [mlflow]).  specrepro never takes them on
a command line or in the config, and a tracking URI that carries them (http://user:pw@host) is refused.

The check asks the server three things in order, each with one short request and no retry: does it answer
(`reach`), does it accept the credentials (`credentials`), may this user create runs in the campaign's experiment
(`permission`).  The last is asked without creating anything: a create request the server must authorize before it
reads the body, with a body it then rejects as malformed -- 400 says the user may, 401/403 says it may not.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Dict, List, Optional
from urllib.parse import urlsplit

from specrepro.util.errors import SpecreproError

REMOTE_SCHEMES = ("http://", "https://")
# One request of the check: seconds before it counts as unanswered.
CHECK_TIMEOUT_S = 5.0
CREDENTIAL_HELP = ("give them as MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN) in "
                   "the environment, or in ~/.mlflow/credentials")


class TrackingServerError(SpecreproError):
    """The tracking server failed one step of the check, or failed while a campaign was logged to it."""


def configured_uri(cfg: Dict[str, Any]) -> Optional[str]:
    """The campaign's tracking URI as configured (tracking.uri, else MLFLOW_TRACKING_URI); None: the local store."""
    return cfg["tracking"].get("uri") or os.environ.get("MLFLOW_TRACKING_URI") or None


def remote_uri(cfg: Dict[str, Any]) -> Optional[str]:
    """The tracking server's URI when the campaign logs to one (http/https); None for a local store."""
    uri = configured_uri(cfg)
    return uri if uri and uri.startswith(REMOTE_SCHEMES) else None


def refuse_credentials_in_uri(uri: str, where: str = "tracking.uri") -> None:
    """A password in the URI would land in argv, the resolved config and every log that prints the URI."""
    parts = urlsplit(uri)
    if parts.username or parts.password:
        raise TrackingServerError(f"{where}: the URI carries credentials (user:password@); {CREDENTIAL_HELP}")


def _request(uri: str, method: str, endpoint: str, timeout_s: float, **kwargs):
    """One request with MLflow's own credentials (basic, token or its auth plugins), no retry."""
    from mlflow.utils.credentials import get_default_host_creds
    from mlflow.utils.rest_utils import http_request

    return http_request(get_default_host_creds(uri), endpoint, method, max_retries=0, backoff_factor=0,
                        timeout=timeout_s, raise_on_status=False, **kwargs)


def _refused(response) -> Optional[str]:
    """The server's refusal of the credentials or the user (401, 403), in its own words; None otherwise."""
    if response.status_code in (401, 403):
        return f"HTTP {response.status_code}: {response.text.strip()[:300]}"
    return None


def check_server(uri: str, experiment_name: str, timeout_s: float = CHECK_TIMEOUT_S,
                 request: Callable = _request) -> Dict[str, Any]:
    """Reach, credentials, permission to create runs in `experiment_name`; raises TrackingServerError naming the URI
    and the step that failed.  Returns what was checked (no credentials in it)."""
    import requests

    from mlflow.utils.credentials import get_default_host_creds

    refuse_credentials_in_uri(uri)
    creds = get_default_host_creds(uri)
    who = creds.username or ("a token" if creds.token else "no credentials")
    steps: List[Dict[str, Any]] = []

    def fail(step: str, why: str) -> TrackingServerError:
        return TrackingServerError(f"MLflow tracking server {uri}: step `{step}` failed: {why}")

    def timed(step: str, endpoint: str, method: str = "GET", **kwargs):
        started = time.monotonic()
        try:
            response = request(uri, method, endpoint, timeout_s, **kwargs)
        except Exception as exc:  # connection refused, DNS, TLS, timeout: all mean "not reached"
            raise fail(step, f"no answer within {timeout_s:.0f} s ({type(exc).__name__}: {str(exc)[:300]})") from None
        steps.append({"step": step, "endpoint": endpoint, "status": response.status_code,
                      "seconds": round(time.monotonic() - started, 3)})
        return response

    health = timed("reach", "/health")
    if health.status_code != 200:
        raise fail("reach", f"/health answered HTTP {health.status_code}, not 200: is {uri} an MLflow server?")
    found = timed("credentials", "/api/2.0/mlflow/experiments/get-by-name", params={"experiment_name": experiment_name})
    if found.status_code == 401:
        raise fail("credentials", f"the server rejected the credentials of {who} ({_refused(found)}); {CREDENTIAL_HELP}")
    if found.status_code == 403:
        raise fail("permission", f"{who} may not read experiment {experiment_name!r} ({_refused(found)})")
    if found.status_code not in (200, 404):
        raise fail("credentials", f"HTTP {found.status_code} looking up experiment {experiment_name!r}: {found.text[:300]}")
    experiment_id = found.json()["experiment"]["experiment_id"] if found.status_code == 200 else None
    if experiment_id is None:
        # the first campaign of this experiment creates it: may this user create experiments?
        probe = timed("permission", "/api/2.0/mlflow/experiments/create", "POST",
                      json={"name": experiment_name, "tags": "specrepro: permission probe"})
        what = f"create experiment {experiment_name!r}"
    else:
        probe = timed("permission", "/api/2.0/mlflow/runs/create", "POST",
                      json={"experiment_id": experiment_id, "start_time": "specrepro: permission probe"})
        what = f"create runs in experiment {experiment_name!r} (id {experiment_id})"
    if _refused(probe):
        raise fail("permission", f"{who} may not {what} ({_refused(probe)})")
    if probe.status_code != 400:
        # 200 would mean the server created something from a malformed request: say so rather than pass quietly
        raise fail("permission", f"the probe to {what} answered HTTP {probe.status_code}, not 400: {probe.text[:300]}")
    return {"uri": uri, "user": creds.username or ("token" if creds.token else None), "experiment": experiment_name,
            "experiment_id": experiment_id, "steps": steps, "checked_at": time.time()}


def check_campaign_server(cfg: Dict[str, Any], out=None) -> Optional[Dict[str, Any]]:
    """`plan`'s and `run`'s check: the campaign's tracking server when it logs to one; None for a local store."""
    uri = configured_uri(cfg)
    if uri:
        refuse_credentials_in_uri(uri)
    uri = remote_uri(cfg)
    if uri is None:
        return None
    started = time.monotonic()
    checked = check_server(uri, cfg["tracking"]["experiment_name"])
    if out is not None:
        print(f"MLflow tracking server {uri}: reached, credentials of {checked['user'] or 'nobody'} accepted, may "
              f"create runs in {checked['experiment']!r} ({time.monotonic() - started:.1f} s)", file=out)
    return checked
