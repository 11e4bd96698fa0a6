"""Headless Chromium driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`: Chromium reads
commands on fd 3 and writes replies and events on fd 4, each a NUL-terminated JSON message): no port, no websocket
library.  A page is opened in a fresh profile; every network request it makes is recorded (Network domain);
scripts run in it with Runtime.evaluate (DevTools evaluation is not subject to the page's CSP); screenshots are
PNG bytes.  .ci/run installs Debian's chromium.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# No name resolves: a page that asks for anything off this machine gets nothing (and the request is recorded).
OFFLINE = "MAP * ~NOTFOUND"
# Names fail, the loopback address answers (a local MLflow UI).
LOOPBACK_ONLY = "MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"


class Page:
    """One tab of a fresh headless Chromium; `requests` are the URLs it asked for, in order."""

    def __init__(self, profile: Path, width: int = 1400, height: int = 900, resolver_rules: str = OFFLINE,
                 credentials: Optional[Tuple[str, str]] = None):
        # (user, password) typed into Chromium's own sign-in prompt whenever a server asks (HTTP basic auth); the
        # password goes over the DevTools pipe only, never into argv
        self.credentials = credentials
        if CHROMIUM is None:
            raise RuntimeError("chromium is not installed: .ci/run installs Debian's chromium (apt-get)")
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        def fds():  # Chromium's fd 3 reads our commands, fd 4 writes its answers (dup'd away first: the pipes
            # may sit on 3 and 4 themselves, and dup2 onto the same number would keep close-on-exec)
            read, write = os.dup(to_chrome_r), os.dup(from_chrome_w)
            os.dup2(read, 3)
            os.dup2(write, 4)

        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-quic",
             "--disable-default-apps", "--disable-extensions", f"--host-resolver-rules={resolver_rules}",
             f"--user-data-dir={profile}", f"--window-size={width},{height}", "about:blank"],
            preexec_fn=fds, close_fds=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf = b""
        self._id = 0
        self.events: List[Dict[str, Any]] = []
        self.session: Optional[str] = None
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Network", "Runtime"):
            self.send(f"{domain}.enable")
        if credentials:
            self.send("Fetch.enable", {"handleAuthRequests": True, "patterns": [{"urlPattern": "*"}]})
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})

    # --- the protocol ---------------------------------------------------------------------------------------
    def _read(self, timeout: float) -> Dict[str, Any]:
        deadline = time.monotonic() + timeout
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_chrome], [], [], left)[0]:
                raise TimeoutError("no message from Chromium")
            chunk = os.read(self._from_chrome, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed its DevTools pipe")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        message = json.loads(raw)
        # with Fetch enabled every request waits for an answer: let it go on, and answer a sign-in prompt
        if message.get("method") == "Fetch.requestPaused":
            self._post("Fetch.continueRequest", {"requestId": message["params"]["requestId"]})
        elif message.get("method") == "Fetch.authRequired":
            user, password = self.credentials
            self._post("Fetch.continueWithAuth", {"requestId": message["params"]["requestId"], "authChallengeResponse": {
                "response": "ProvideCredentials", "username": user, "password": password}})
        return message

    def _post(self, method: str, params: Dict[str, Any]) -> int:
        self._id += 1
        message = {"id": self._id, "method": method, "params": params}
        if self.session and not method.startswith("Target."):
            message["sessionId"] = self.session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        return self._id

    def send(self, method: str, params: Optional[Dict[str, Any]] = None, timeout: float = 60) -> Dict[str, Any]:
        sent = self._post(method, params or {})
        while True:
            reply = self._read(timeout)
            if reply.get("id") == sent:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str, timeout: float = 60) -> Dict[str, Any]:
        seen = next((e for e in self.events if e.get("method") == method), None)
        deadline = time.monotonic() + timeout
        while seen is None:
            event = self._read(max(0.1, deadline - time.monotonic()))
            self.events.append(event)
            if event.get("method") == method:
                seen = event
        return seen

    # --- what a test asks -----------------------------------------------------------------------------------
    def open(self, url: str, timeout: float = 60) -> None:
        self.events.clear()
        self.send("Page.navigate", {"url": url})
        self.wait_for("Page.loadEventFired", timeout)

    @property
    def requests(self) -> List[str]:
        return [e["params"]["request"]["url"] for e in self.events if e.get("method") == "Network.requestWillBeSent"]

    @property
    def blocked(self) -> Dict[str, str]:
        """URL -> why Chromium refused to send it (`csp`, ...), for requests it blocked before they left."""
        urls = {e["params"]["requestId"]: e["params"]["request"]["url"] for e in self.events
                if e.get("method") == "Network.requestWillBeSent"}
        return {urls.get(e["params"]["requestId"], "?"): e["params"]["blockedReason"] for e in self.events
                if e.get("method") == "Network.loadingFailed" and e["params"].get("blockedReason")}

    def eval(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"in the page: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_until(self, expression: str, timeout: float = 90) -> Any:
        """Poll `expression` in the page until it is truthy (a single-page app rendering its data)."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.eval(expression)
            if value or time.monotonic() > deadline:
                return value
            time.sleep(0.5)

    def screenshot(self, path: Path, clip: Optional[Dict[str, float]] = None) -> Path:
        params: Dict[str, Any] = {"format": "png", "captureBeyondViewport": clip is not None}
        if clip:
            params["clip"] = {**clip, "scale": 1}
        Path(path).write_bytes(base64.b64decode(self.send("Page.captureScreenshot", params)["data"]))
        return Path(path)

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=10)
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_chrome)
        os.close(self._from_chrome)

    def __enter__(self) -> "Page":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
