"""Headless Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe):
no port, no websocket library, only the stdlib. Enough to open a page, wait for a condition,
read the console and every network request, query the DOM and take a screenshot."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
# Without the background-networking flags the closed network refuses many connections and
# Chromium logs them; with them a page that fetches nothing makes no request at all.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
]


def find_chromium() -> str | None:
    if os.path.exists(CHROMIUM):
        return CHROMIUM
    return shutil.which("chromium") or shutil.which("chromium-browser")


@dataclass
class Page:
    console_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    screenshot: bytes = b""
    values: dict[str, Any] = field(default_factory=dict)


class Chromium:
    def __init__(self, executable: str, width: int = 1280, height: int = 1800) -> None:
        self.profile = tempfile.mkdtemp(prefix="ray-doctor-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def wire_fds() -> None:  # the protocol pipe is fds 3 (commands) and 4 (replies)
            os.dup2(to_browser_r, 3)
            os.dup2(from_browser_w, 4)
            os.set_inheritable(3, True)  # dup2 onto itself would keep close-on-exec
            os.set_inheritable(4, True)

        self.process = subprocess.Popen(
            [
                executable,
                *FLAGS,
                f"--user-data-dir={self.profile}",
                f"--window-size={width},{height}",
                "--remote-debugging-pipe",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=wire_fds,
            close_fds=False,
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []

    def close(self) -> None:
        with contextlib.suppress(Exception):  # it may be gone already
            self.send("Browser.close", timeout=5)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(
        self,
        method: str,
        params: dict | None = None,
        session: str | None = None,
        timeout: float = 30,
    ) -> dict:
        self._next_id += 1
        ident = self._next_id
        message: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == ident:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no answer from Chromium")
            ready, _, _ = select.select([self._from_browser], [], [], left)
            if ready:
                chunk = os.read(self._from_browser, 1 << 20)
                if not chunk:
                    raise RuntimeError("Chromium closed the protocol pipe")
                self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def open(self, path: Path, ready: str, probes: dict[str, str], timeout: float = 60) -> Page:
        """Load `path`, wait until the JS expression `ready` is true, then evaluate `probes`
        (name -> JS expression) and take a full-page screenshot."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable", session=session)
        self.send("Page.navigate", {"url": path.resolve().as_uri()}, session=session)
        deadline = time.monotonic() + timeout
        while not self._evaluate(session, f"Boolean({ready})"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"page never became ready: {ready}")
            time.sleep(0.2)
        time.sleep(0.5)  # let late console messages and requests arrive
        page = Page(values={name: self._evaluate(session, js) for name, js in probes.items()})
        metrics = self.send("Page.getLayoutMetrics", session=session)
        size = metrics.get("cssContentSize") or metrics["contentSize"]
        shot = self.send(
            "Page.captureScreenshot",
            {
                "format": "png",
                "captureBeyondViewport": True,
                "clip": {
                    "x": 0,
                    "y": 0,
                    "width": size["width"],
                    "height": min(size["height"], 6000),
                    "scale": 1,
                },
            },
            session=session,
        )
        page.screenshot = base64.b64decode(shot["data"])
        self.send("Runtime.evaluate", {"expression": "1"}, session=session)  # flush events
        for event in self.events:
            self._collect(event, page)
        return page

    def _evaluate(self, session: str, expression: str) -> Any:
        result = self.send(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=session
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    @staticmethod
    def _collect(event: dict[str, Any], page: Page) -> None:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.exceptionThrown":
            page.console_errors.append(json.dumps(params["exceptionDetails"])[:500])
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            page.console_errors.append(json.dumps(params.get("args"))[:500])
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            page.console_errors.append(params["entry"].get("text", "")[:500])
        elif method == "Network.requestWillBeSent":
            page.requests.append(params["request"]["url"])
