"""The HTML report in a real browser: Debian's Chromium, headless, driven over the DevTools protocol
on a pipe (``--remote-debugging-pipe``: no port, no websocket). The page loads from a file:// URL with
no console error, no exception and no request but its own; every chart is drawn (in the DOM and on the
screenshot's pixels); and the screenshot is saved to look at.

The fixture installs Chromium when it is missing (``apt-get install chromium``, as root or through
``sudo -n``): that is how CI gets it."""

from __future__ import annotations

import base64
import fcntl
import io
import json
import os
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from runtime.suites.file import load_suite
from runtime.suites.html_report import MISSED, FailurePrompts, node_color, report_html
from runtime.suites.run import run_suites
from tests.runtime.suites.test_html_report import FAILING, flaky_backend, placed_router, sample_variant

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--no-first-run", "--disable-dev-shm-usage", "--hide-scrollbars",
                  "--mute-audio", "--disable-extensions", "--disable-sync", "--metrics-recording-only"]
# The child: the pipe's ends on fds 3 and 4, then Chromium in its place (no preexec_fn in a threaded test run).
_ON_FDS_3_AND_4 = ("import os, sys; r, w = int(sys.argv[1]), int(sys.argv[2]); os.dup2(r, 3); os.dup2(w, 4); "
                   "os.close(r); os.close(w); os.execv(sys.argv[3], sys.argv[3:])")
WAIT = 60.0  # seconds for one DevTools answer (the first page load of a cold Chromium is the slowest)


def _install_chromium() -> str:
    found = shutil.which("chromium") or (shutil.which("chromium-browser"))
    if found:
        return found
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    if sudo and not shutil.which("sudo"):
        pytest.fail("Chromium is missing and this user cannot install it (not root, no sudo): "
                    "apt-get install -y chromium")
    for step in (["apt-get", "update"], ["apt-get", "install", "-y", "chromium"]):
        done = subprocess.run([*sudo, *step], capture_output=True, text=True, timeout=900,
                              env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"}, check=False)
        if done.returncode:
            pytest.fail(f"{' '.join(step)} failed ({done.returncode}): {done.stderr[-2000:]}")
    found = shutil.which("chromium")
    if not found:
        pytest.fail("apt-get installed chromium, but no chromium command is on the PATH")
    return found


@pytest.fixture(scope="session")
def chromium() -> str:
    return _install_chromium()


class DevTools:
    """A headless Chromium and its DevTools protocol over a pipe: commands are JSON, each ended by
    NUL, written to the browser's fd 3; answers and events come back on its fd 4."""

    def __init__(self, executable: str, profile: Path) -> None:
        to_browser_r, to_browser_w = os.pipe()
        from_browser_r, from_browser_w = os.pipe()
        # Out of the way of 3 and 4, where the child puts them before it becomes Chromium.
        high_r, high_w = (fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_browser_r, from_browser_w))
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._stderr = open(profile.parent / "chromium-stderr.txt", "wb")  # noqa: SIM115 - closed in close()
        args = [executable, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--remote-debugging-pipe"]
        self.process = subprocess.Popen(
            [sys.executable, "-c", _ON_FDS_3_AND_4, str(high_r), str(high_w), *args],
            pass_fds=(high_r, high_w), stdin=subprocess.DEVNULL, stdout=self._stderr, stderr=self._stderr)
        os.close(high_r)
        os.close(high_w)
        self._out = os.fdopen(to_browser_w, "wb", buffering=0)
        self._in = os.fdopen(from_browser_r, "rb", buffering=0)
        self._next = 0
        self._answers: dict[int, dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        self._changed = threading.Condition()
        self._closed = False
        self._reader = threading.Thread(target=self._read, name="devtools-pipe", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        pending = b""
        while True:
            chunk = self._in.read(65536)
            if not chunk:
                break
            pending += chunk
            *messages, pending = pending.split(b"\0")
            with self._changed:
                for raw in messages:
                    message = json.loads(raw)
                    if "id" in message:
                        self._answers[message["id"]] = message
                    else:
                        self.events.append(message)
                self._changed.notify_all()
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        """Send a command and wait for its answer; raise on a protocol error or a closed browser."""
        with self._changed:
            self._next += 1
            number = self._next
        message: dict[str, Any] = {"id": number, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        try:
            self._out.write(json.dumps(message).encode() + b"\0")
        except BrokenPipeError:
            raise RuntimeError(f"Chromium is not running (it exited {self.process.poll()}): {self.stderr()}") from None
        with self._changed:
            if not self._changed.wait_for(lambda: number in self._answers or self._closed, timeout=WAIT):
                raise TimeoutError(f"no answer to {method} in {WAIT:.0f} s")
            if number not in self._answers:
                raise RuntimeError(f"Chromium closed the pipe before answering {method}: {self.stderr()}")
            answer = self._answers.pop(number)
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        return answer.get("result", {})

    def wait_for_event(self, method: str, session: str) -> dict[str, Any]:
        def found() -> dict[str, Any] | None:
            return next((e for e in self.events if e["method"] == method and e.get("sessionId") == session), None)

        with self._changed:
            if not self._changed.wait_for(lambda: found() is not None or self._closed, timeout=WAIT):
                raise TimeoutError(f"no {method} in {WAIT:.0f} s")
            event = found()
        if event is None:
            raise RuntimeError(f"Chromium closed the pipe before {method}: {self.stderr()}")
        return event

    def stderr(self) -> str:
        self._stderr.flush()
        return (Path(self._stderr.name).read_text(encoding="utf-8", errors="replace"))[-3000:]

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (RuntimeError, TimeoutError, OSError):
            self.process.kill()
        self.process.wait(timeout=WAIT)
        self._out.close()
        self._reader.join(timeout=WAIT)
        self._in.close()
        self._stderr.close()


@dataclass
class PageVisit:
    errors: list[str]  # console errors, uncaught exceptions, log entries of level error
    requests: list[str]  # every URL the page asked for, its own first
    charts: list[dict[str, Any]]  # each svg.chart: its box on the page and what it holds
    screenshot: bytes  # PNG of the whole page


# Each chart's box on the page and how many shapes and words it draws.
CHARTS_JS = """JSON.stringify([...document.querySelectorAll('svg.chart')].map(svg => {
  const box = svg.getBoundingClientRect();
  return {label: svg.getAttribute('aria-label'), x: box.left + scrollX, y: box.top + scrollY,
          width: box.width, height: box.height, shapes: svg.querySelectorAll('path, use').length,
          words: [...svg.querySelectorAll('text')].map(t => t.textContent).join(' ')};
}))"""


def visit(executable: str, page: Path, profile: Path) -> PageVisit:
    """Open ``page`` (a file) in a fresh headless Chromium, wait for its load, and see what it did."""
    browser = DevTools(executable, profile)
    try:
        target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            browser.send(f"{domain}.enable", session=session)
        browser.send("Emulation.setDeviceMetricsOverride",
                     {"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": False}, session=session)
        browser.send("Page.navigate", {"url": page.resolve().as_uri()}, session=session)
        browser.wait_for_event("Page.loadEventFired", session)
        charts = json.loads(browser.send("Runtime.evaluate", {"expression": CHARTS_JS, "returnByValue": True},
                                         session=session)["result"]["value"])
        size = browser.send("Page.getLayoutMetrics", session=session)["cssContentSize"]
        shot = browser.send("Page.captureScreenshot", {
            "format": "png", "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}}, session=session)
        events = [e for e in browser.events if e.get("sessionId") == session]
    finally:
        browser.close()
    errors = []
    for e in events:
        params = e["params"]
        if e["method"] == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
            errors.append("console: " + " ".join(str(a.get("value", a.get("description", ""))) for a in params["args"]))
        elif e["method"] == "Runtime.exceptionThrown":
            errors.append("exception: " + json.dumps(params["exceptionDetails"])[:500])
        elif e["method"] == "Log.entryAdded" and params["entry"]["level"] == "error":
            errors.append(f"log ({params['entry']['source']}): {params['entry']['text']}")
    requests = [e["params"]["request"]["url"] for e in events if e["method"] == "Network.requestWillBeSent"]
    return PageVisit(errors, requests, charts, base64.b64decode(shot["data"]))


def _colours_near(png: bytes, box: dict[str, Any], colour: str, tolerance: int = 6) -> int:
    """Pixels of the screenshot inside ``box`` within ``tolerance`` of ``colour`` (#rrggbb) on each channel."""
    from PIL import Image

    want = tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))
    image = Image.open(io.BytesIO(png)).convert("RGB")
    crop = image.crop((int(box["x"]), int(box["y"]), int(box["x"] + box["width"]), int(box["y"] + box["height"])))
    return sum(n for n, rgb in crop.getcolors(crop.width * crop.height)
               if all(abs(a - b) <= tolerance for a, b in zip(rgb, want)))


def test_the_report_renders_in_chromium_with_no_console_error(chromium, tmp_path) -> None:
    loaded = [load_suite(placed_router(tmp_path, FAILING))]
    prompts = FailurePrompts(loaded)
    report = run_suites(loaded, flaky_backend, repeat=4, on_turn=prompts.on_turn, keep_turn_results=False)
    page = tmp_path / "report.html"
    page.write_text(report_html(report, prompts=prompts, variant=sample_variant()), encoding="utf-8")
    (tmp_path / "profile").mkdir()

    seen = visit(chromium, page, tmp_path / "profile")

    shot = tmp_path / "report.png"
    shot.write_bytes(seen.screenshot)
    if os.environ.get("PARLEY_REPORT_SCREENSHOT"):  # to look at it: the docs' screenshot is made this way
        shutil.copyfile(shot, os.environ["PARLEY_REPORT_SCREENSHOT"])
    assert seen.errors == []
    assert [u for u in seen.requests if not u.startswith("data:")] == [page.resolve().as_uri()]  # its own, only
    charts = {c["label"]: c for c in seen.charts}
    assert sorted(charts) == ["graph0", "rates", "variant"]
    for chart in charts.values():
        assert chart["width"] > 300 and chart["height"] > 100 and chart["shapes"] > 10, chart
    assert "router.suite.yaml::greets" in charts["rates"]["words"]
    assert "times the node ran" in charts["graph0"]["words"] and "fallback: never" in charts["graph0"]["words"]
    # drawn, not only in the DOM: the screenshot holds each node's colour where the graph is
    coverage = next(iter(report.coverage.values()))
    for node in ("classify", "tools", "orphan"):
        assert _colours_near(seen.screenshot, charts["graph0"], node_color(coverage, node)) > 500, node
    assert _colours_near(seen.screenshot, charts["graph0"], MISSED, tolerance=30) > 50  # the exit never taken
    from PIL import Image

    width, height = Image.open(io.BytesIO(seen.screenshot)).size
    assert width == 1280 and height > charts["variant"]["y"] + charts["variant"]["height"]


def test_the_browser_check_sees_errors_and_fetches(chromium, tmp_path) -> None:
    """The check above can fail: a script error, a console error and a fetch are all seen; and the
    report's own policy blocks a reference to anything outside the page, as an error (the request is
    still seen: the check above counts it too)."""
    bad = tmp_path / "bad.html"
    bad.write_text('<!DOCTYPE html><html><body><img src="http://127.0.0.1:9/x.png">'
                   '<script>console.error("said"); throw new Error("boom")</script></body></html>', encoding="utf-8")
    (tmp_path / "p1").mkdir()
    seen = visit(chromium, bad, tmp_path / "p1")
    assert any("said" in e for e in seen.errors) and any("boom" in e for e in seen.errors)
    assert "http://127.0.0.1:9/x.png" in seen.requests

    loaded = [load_suite(placed_router(tmp_path))]
    page = report_html(run_suites(loaded, flaky_backend))
    smuggled = tmp_path / "smuggled.html"
    smuggled.write_text(page.replace("</main>", '<img src="http://127.0.0.1:9/y.png"></main>'), encoding="utf-8")
    (tmp_path / "p2").mkdir()
    seen = visit(chromium, smuggled, tmp_path / "p2")
    assert any("y.png" in e and "violates the following Content Security Policy" in e for e in seen.errors), seen.errors
