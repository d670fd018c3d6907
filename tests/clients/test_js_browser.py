"""The JS client (clients/js/parley-client.mjs) in a real browser: Debian's Chromium, headless, loads
a page from one origin that talks to ``parley serve`` on another (``--cors-origin`` names the page's
origin, the token goes in the Authorization header as docs/serving.md says): a session, a streamed
turn, a tool call the page answers. Against a server that does not allow the page's origin the same
page fails, as a browser must make it (so this test can fail).

Chromium is installed by the fixture when it is missing (``apt-get install chromium``), as for the
HTML report's browser test."""

from __future__ import annotations

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
from tests.runtime.suites.test_html_report_browser import DevTools, chromium  # noqa: F401 - the fixture

JS = Path(__file__).resolve().parents[2] / "clients" / "js"
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


class _QuietFiles(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def page_origin(tmp_path: Path) -> Iterator[str]:
    """A static site of its own (the page and the client module) on another port: its origin."""
    (tmp_path / "index.html").write_text(PAGE, encoding="utf-8")
    shutil.copyfile(JS / "parley-client.mjs", tmp_path / "parley-client.mjs")
    handler = functools.partial(_QuietFiles, directory=str(tmp_path))
    site = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=site.serve_forever, name="page-site", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{site.server_address[1]}"
    finally:
        site.shutdown()
        site.server_close()
        thread.join()


def run_page(executable: str, profile: Path, url: str) -> dict:
    """Open ``url`` in a fresh headless Chromium and wait for the page's ``window.result``."""
    browser = DevTools(executable, profile)
    try:
        target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime"):
            browser.send(f"{domain}.enable", session=session)
        browser.send("Page.navigate", {"url": url}, session=session)
        browser.wait_for_event("Page.loadEventFired", session)
        answer = browser.send("Runtime.evaluate", {
            "expression": "(async () => { while (!window.result) await new Promise(r => setTimeout(r, 20)); "
                          "return JSON.stringify(await window.result); })()",
            "awaitPromise": True, "returnByValue": True}, session=session)
        shown = browser.send("Runtime.evaluate", {"expression": "document.getElementById('subtitle').textContent",
                                                  "returnByValue": True}, session=session)
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
