"""A headless Chromium driven over the DevTools protocol on a pipe (no extra packages).

``chromium --remote-debugging-pipe`` reads protocol commands on fd 3 and writes replies and
events on fd 4, each a JSON object ended by a NUL byte. :func:`load` opens one page and
returns what a person's browser would have shown: console errors, uncaught exceptions,
failed or non-local requests, every image's natural size, and optionally a full-page
screenshot (PNG). :func:`chromium` finds the browser, installing the system package with
``apt-get install -y chromium`` when it is missing.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["PageReport", "chromium", "load"]

_NAMES = ("chromium", "chromium-browser", "google-chrome")


def chromium() -> tuple[str | None, str]:
    """The browser's path (installing Debian's ``chromium`` if absent), or None and why."""
    for name in _NAMES:
        if path := shutil.which(name):
            return path, ""
    if shutil.which("apt-get") is None:
        return None, "no chromium on PATH and no apt-get to install it"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "--no-install-recommends", "chromium"]
    proc = subprocess.run(install, capture_output=True, text=True, timeout=900, env=env)
    if proc.returncode != 0:  # a fresh machine has no package lists yet
        subprocess.run(["apt-get", "update"], capture_output=True, timeout=900, env=env)
        proc = subprocess.run(install, capture_output=True, text=True, timeout=900, env=env)
    path = shutil.which("chromium")
    if path is None:
        last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return None, f"`apt-get install -y chromium` failed (exit {proc.returncode}): {last[0]}"
    return path, ""


@dataclass
class PageReport:
    console_errors: list[str] = field(default_factory=list)
    exceptions: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)  # every URL the page asked for
    failed_requests: list[str] = field(default_factory=list)
    images: list[dict] = field(default_factory=list)  # naturalWidth/Height, complete, alt
    title: str = ""


class _Pipe:
    def __init__(self, browser: str, profile: str) -> None:
        # Keep the four ends away from 3 and 4, which the child's dup2 overwrites.
        low = [os.open(os.devnull, os.O_RDONLY) for _ in range(2)]
        cmd_r, self._cmd_w = os.pipe()
        self._out_r, out_w = os.pipe()
        for fd in low:
            os.close(fd)

        def child_fds() -> None:  # the protocol's fds: commands on 3, replies on 4
            os.dup2(cmd_r, 3)
            os.dup2(out_w, 4)

        self.proc = subprocess.Popen(
            [
                browser,
                "--headless=new",
                "--remote-debugging-pipe",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--no-default-browser-check",
                f"--user-data-dir={profile}",
                "about:blank",
            ],
            pass_fds=(3, 4),  # kept open by the child after ``child_fds`` ran
            preexec_fn=child_fds,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(cmd_r)
        os.close(out_w)
        self._buf = b""
        self._next = 0
        self.events: list[dict] = []

    def _read(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            if time.monotonic() > deadline:
                raise TimeoutError("no reply from chromium")
            chunk = os.read(self._out_r, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed the protocol pipe")
            self._buf += chunk
        msg, _, self._buf = self._buf.partition(b"\0")
        return json.loads(msg)

    def call(self, method: str, session: str | None = None, **params) -> dict:
        self._next += 1
        msg = {"id": self._next, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self._cmd_w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + 60
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_event(self, method: str, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        for ev in self.events:
            if ev.get("method") == method:
                return ev
        while True:
            ev = self._read(deadline)
            self.events.append(ev)
            if ev.get("method") == method:
                return ev

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._cmd_w)
        os.close(self._out_r)


_IMAGES = (
    "JSON.stringify(Array.from(document.images).map(i => ({width: i.naturalWidth, "
    "height: i.naturalHeight, complete: i.complete, alt: i.alt})))"
)


def load(
    browser: str, page: Path, *, screenshot: Path | None = None, width: int = 1100
) -> PageReport:
    """Open ``page`` (a local file) in headless Chromium and report what happened."""
    with tempfile.TemporaryDirectory(prefix="edgedp-chromium-") as profile:
        pipe = _Pipe(browser, profile)
        try:
            target = pipe.call("Target.createTarget", url="about:blank")["targetId"]
            s = pipe.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
            for domain in ("Page", "Runtime", "Log", "Network"):
                pipe.call(f"{domain}.enable", s)
            pipe.call(
                "Emulation.setDeviceMetricsOverride",
                s,
                width=width,
                height=900,
                deviceScaleFactor=1,
                mobile=False,
            )
            pipe.call("Page.navigate", s, url=Path(page).resolve().as_uri())
            pipe.wait_event("Page.loadEventFired")
            images = pipe.call("Runtime.evaluate", s, expression=_IMAGES, returnByValue=True)
            title = pipe.call("Runtime.evaluate", s, expression="document.title")
            if screenshot is not None:
                metrics = pipe.call("Page.getLayoutMetrics", s)
                height = int(metrics["cssContentSize"]["height"]) + 1
                pipe.call(
                    "Emulation.setDeviceMetricsOverride",
                    s,
                    width=width,
                    height=height,
                    deviceScaleFactor=1,
                    mobile=False,
                )
                shot = pipe.call("Page.captureScreenshot", s, format="png")
                Path(screenshot).write_bytes(base64.b64decode(shot["data"]))
        finally:
            pipe.close()
    rep = PageReport(
        images=json.loads(images["result"]["value"]), title=title["result"].get("value", "")
    )
    for ev in pipe.events:
        method, p = ev.get("method"), ev.get("params", {})
        if method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            rep.console_errors.append(" ".join(str(a.get("value")) for a in p.get("args", [])))
        elif method == "Log.entryAdded" and p["entry"].get("level") == "error":
            rep.console_errors.append(p["entry"].get("text", ""))
        elif method == "Runtime.exceptionThrown":
            rep.exceptions.append(p["exceptionDetails"].get("text", ""))
        elif method == "Network.requestWillBeSent":
            rep.requests.append(p["request"]["url"])
        elif method == "Network.loadingFailed":
            rep.failed_requests.append(p.get("errorText", ""))
    return rep
