"""The JS client (clients/js/parley-client.mjs) in a real browser: Debian's Chromium, headless, loads
a page from one origin that talks to ``parley serve`` on another (``--cors-origin`` names the page's
origin, the token goes in the Authorization header as docs/serving.md says): a session, a streamed
turn, a tool call the page answers. Against a server that does not allow the page's origin the same
page fails, as a browser must make it (so this test can fail).

Chromium is installed by the fixture when it is missing (``apt-get install chromium``), as for the
HTML report's browser test."""

from __future__ import annotations

import base64
import contextlib
import functools
import http.server
import json
import secrets
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.backends.scripted import ScriptedBackend
from runtime.resources import examples_dir
from runtime.serve.server import running_server
from tests.clients.protocol import SCRIPT, check_protocol, protocol_server
from tests.clients.protocol import TOKEN as PROTOCOL_TOKEN
from tests.runtime.suites.test_html_report_browser import DevTools, chromium  # noqa: F401 - the fixture

ROOT = Path(__file__).resolve().parents[2]
JS = ROOT / "clients" / "js"
SCREENSHOT = ROOT / "docs" / "screenshot-web-sample.png"  # the README's picture of the web sample
TOKEN = "tok-" + secrets.token_hex(16)

PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>Parley NPC</title></head>
<body><p id="subtitle"></p>
<script type="module">
import { ParleyClient } from "./parley-client.mjs";
const params = new URLSearchParams(location.search);
const client = new ParleyClient(params.get("server"), { token: params.get("token") });
const subtitle = document.getElementById("subtitle");
window.result = (async () => {
  const npc = await client.createSession("tool_calling.json");
  const tools = [];
  let shown = "";
  const done = await client.turn(npc.id, "How many arrows are there?", {
    tools: (request) => { tools.push(request.tool); return JSON.stringify({ item: "arrows", count: 40 }); },
    // the reply the player sees only (data.reply): the Tool Call node streams its JSON as tokens too
    onEvent: (event) => {
      if (event.kind === "token" && event.data.reply) { shown += event.data.text; subtitle.textContent = shown; }
    },
  });
  return { session: npc.id, reply: done.reply, tools, shown, path: done.path };
})().catch((error) => ({ error: String(error), code: error.code || "" }));
</script></body></html>
"""


# The protocol test set's driver (clients/js/protocol/driver.mjs) in a page: its lines go to window.lines.
PROTOCOL_PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>Parley protocol</title></head><body><pre id="subtitle"></pre>
<script type="module">
import { ParleyClient } from "../parley-client.mjs";
import { runProtocol } from "./driver.mjs";
const params = new URLSearchParams(location.search);
const client = new ParleyClient(params.get("server"), { token: params.get("token") });
window.lines = [];
window.result = (async () => {
  const script = await (await fetch("../conversation.json")).json();
  await runProtocol(client, script, "browser", (line) => {
    window.lines.push(line);
    document.getElementById("subtitle").textContent = window.lines.join("\\n");
  });
  return { output: window.lines.join("\\n") };
})().catch((error) => ({ error: String(error), output: window.lines.join("\\n") }));
</script></body></html>
"""


class _QuietFiles(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *_args: object) -> None:
        pass


@contextlib.contextmanager
def static_site(folder: Path) -> Iterator[str]:
    """``folder`` on a static HTTP server of its own, on another port; yields its origin."""
    site = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietFiles, directory=str(folder)))
    thread = threading.Thread(target=site.serve_forever, name="static-site", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{site.server_address[1]}"
    finally:
        site.shutdown()
        site.server_close()
        thread.join()


@pytest.fixture
def page_origin(tmp_path: Path) -> Iterator[str]:
    """A static site of its own (the page and the client module) on another port: its origin."""
    (tmp_path / "index.html").write_text(PAGE, encoding="utf-8")
    shutil.copyfile(JS / "parley-client.mjs", tmp_path / "parley-client.mjs")
    (tmp_path / "protocol").mkdir()
    (tmp_path / "protocol" / "index.html").write_text(PROTOCOL_PAGE, encoding="utf-8")
    shutil.copyfile(JS / "protocol" / "driver.mjs", tmp_path / "protocol" / "driver.mjs")
    shutil.copyfile(SCRIPT, tmp_path / "conversation.json")
    with static_site(tmp_path) as origin:
        yield origin


@pytest.fixture
def js_site() -> Iterator[str]:
    """clients/js as it is, on a static server of its own: the sample page's origin."""
    with static_site(JS) as origin:
        yield origin


def run_page(executable: str, profile: Path, url: str, result: str = "result", screenshot: Path | None = None) -> dict:
    """Open ``url`` in a fresh headless Chromium and wait for the page's ``window.RESULT``; with
    ``screenshot``, save the page as a PNG there (800x420) once it has it."""
    browser = DevTools(executable, profile)
    try:
        target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime"):
            browser.send(f"{domain}.enable", session=session)
        browser.send("Emulation.setDeviceMetricsOverride", {"width": 800, "height": 420, "deviceScaleFactor": 1,
                                                            "mobile": False}, session=session)
        browser.send("Page.navigate", {"url": url}, session=session)
        browser.wait_for_event("Page.loadEventFired", session)
        answer = browser.send("Runtime.evaluate", {
            "expression": f"(async () => {{ while (!window.{result}) await new Promise(r => setTimeout(r, 20)); "
                          f"return JSON.stringify(await window.{result}); }})()",
            "awaitPromise": True, "returnByValue": True}, session=session)
        shown = browser.send("Runtime.evaluate", {"expression": "document.getElementById('subtitle').textContent",
                                                  "returnByValue": True}, session=session)
        if screenshot is not None:
            png = browser.send("Page.captureScreenshot", {"format": "png"}, session=session)["data"]
            screenshot.write_bytes(base64.b64decode(png))
    finally:
        browser.close()
    result = json.loads(answer["result"]["value"])
    result["subtitle"] = shown["result"]["value"]
    return result


def test_a_page_on_another_origin_talks_to_the_npc(chromium, page_origin: str, tmp_path: Path) -> None:  # noqa: F811
    backend = ScriptedBackend()
    try:
        with running_server(backend, [examples_dir()], token=TOKEN, cors_origins=[page_origin]) as server:
            (tmp_path / "profile").mkdir()
            seen = run_page(chromium, tmp_path / "profile", f"{page_origin}/index.html?server={server}&token={TOKEN}")
    finally:
        backend.close()
    assert "error" not in seen, seen
    assert seen["tools"] == ["check_stock"]
    assert seen["path"][0] == "lookup" and seen["reply"]
    assert seen["subtitle"] == seen["shown"] == seen["reply"]


def test_the_same_page_is_refused_by_a_server_that_does_not_allow_its_origin(chromium, page_origin: str,  # noqa: F811
                                                                              tmp_path: Path) -> None:
    backend = ScriptedBackend()
    try:
        with running_server(backend, [examples_dir()], token=TOKEN) as server:
            (tmp_path / "profile").mkdir()
            seen = run_page(chromium, tmp_path / "profile", f"{page_origin}/index.html?server={server}&token={TOKEN}")
    finally:
        backend.close()
    assert "error" in seen and "fetch" in seen["error"].lower(), seen


def test_a_page_on_another_origin_runs_the_protocol_set(chromium, page_origin: str, tmp_path: Path) -> None:  # noqa: F811
    """The same driver as Node's, in the browser: streams through fetch's ReadableStream, resumes
    through the proxy, and the CORS preflight for every route the set uses (PATCH and DELETE too)."""
    with protocol_server("browser", "--cors-origin", page_origin) as server:
        (tmp_path / "profile").mkdir()
        seen = run_page(chromium, tmp_path / "profile",
                        f"{page_origin}/protocol/index.html?server={server}&token={PROTOCOL_TOKEN}")
    assert "error" not in seen, seen
    check_protocol(seen["output"], "browser")


def test_the_web_sample_streams_the_reply_answers_the_tool_and_shows_the_tags(chromium, js_site: str,  # noqa: F811
                                                                              tmp_path: Path) -> None:
    """clients/js/sample as a developer opens it: the subtitle is the reply alone (never the Tool Call's
    JSON), the page's game answers check_stock, and the bard's mood and gesture show as tags."""
    backend = ScriptedBackend()
    try:
        with running_server(backend, [examples_dir()], token=TOKEN, cors_origins=[js_site]) as server:
            seen = {}
            for asset, line in (("tool_calling.json", "How many arrows are there?"), ("bard.json", "Play us a song!")):
                (tmp_path / asset).mkdir()
                seen[asset] = run_page(chromium, tmp_path / asset,
                                       f"{js_site}/sample/index.html?server={server}&token={TOKEN}&asset={asset}"
                                       f"&say={line}", result="sample", screenshot=tmp_path / f"{asset}.png")
    finally:
        backend.close()
    tools, bard = seen["tool_calling.json"], seen["bard.json"]
    assert "error" not in tools and "error" not in bard, seen
    assert tools["said"][0]["reply"].endswith("240 arrows in stock") and tools["subtitle"] == tools["said"][0]["reply"], tools
    assert "check_stock" not in tools["subtitle"]
    assert bard["said"][0]["tags"] == {"mood": "cheerful", "gesture": "bow"}, bard
    assert (tmp_path / "bard.json.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.model
def test_the_web_sample_on_the_sample_model_makes_the_readmes_screenshot(chromium, js_site: str, tmp_path: Path,  # noqa: F811
                                                                         sample_model: Path) -> None:
    """The README's picture of the web sample, from the real model: the bard answers two lines, each
    with the mood and gesture his Classify Attributes node chose (allowed values only)."""
    from runtime.backends.llama import LlamaBackend
    from tests.samples import example_on_sample_model

    example_on_sample_model("bard", sample_model, tmp_path, 48)
    backend = LlamaBackend(asset_dir=tmp_path)
    try:
        with running_server(backend, [tmp_path], token=TOKEN, cors_origins=[js_site]) as server:
            (tmp_path / "profile").mkdir()
            seen = run_page(chromium, tmp_path / "profile",
                            f"{js_site}/sample/index.html?server={server}&token={TOKEN}&asset=bard.json"
                            "&say=Good evening, bard!|Play us a song about the sea.", result="sample",
                            screenshot=SCREENSHOT)
    finally:
        backend.close()
    assert "error" not in seen and all("error" not in said for said in seen["said"]), seen
    assert seen["subtitle"] == seen["said"][-1]["reply"] and seen["subtitle"].strip(), seen
    for said in seen["said"]:
        assert said["tags"]["mood"] in ("cheerful", "wistful", "annoyed"), said
        assert said["tags"]["gesture"] in ("bow", "strum", "shrug"), said
