"""A turn's answer names its run in the ``Parley-Run`` header, so a stream that breaks before any event
reaches the client is still resumed, not dropped as ``stream_ended``. A browser needs it most: when a
connection is reset, the last bytes it had received may never reach the page. The proxy passes on
the answer's head and none of its body (``cut.head.*``); the Python client, the JS client in Node and
in headless Chromium on another origin (where the header must be exposed to the page) each resume
the turn from its first event and get every event once."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest

from runtime.resources import examples_dir
from runtime.serve.client import ParleyClient
from tests.clients.cutting_proxy import CuttingProxy
from tests.clients.test_js_browser import js_site, run_page, static_site  # noqa: F401 - js_site: a fixture
from tests.runtime.suites.test_html_report_browser import chromium  # noqa: F401 - the fixture
from tests.servers import parley_serve

TOKEN = "run-header-test-token"
LINE = "How many arrows are there?"
ANSWER = "240 arrows, counted twice"
JS = Path(__file__).resolve().parents[2] / "clients" / "js"

# A turn in Node: prints its reply and the kinds of its events as JSON.
NODE_TURN = """
import { ParleyClient } from "./parley-client.mjs";
const client = new ParleyClient(process.env.PARLEY_URL, { token: process.env.PARLEY_TOKEN });
const kinds = [];
const done = await client.turn(process.env.PARLEY_SESSION, process.env.PARLEY_LINE, {
  tools: () => process.env.PARLEY_ANSWER, onEvent: (event) => kinds.push(event.kind) });
console.log(JSON.stringify({ reply: done.reply, kinds }));
"""


def _served(*more: str):
    return parley_serve("--backend", "scripted", "--assets", str(examples_dir()), *more, token=TOKEN)


def _kinds_once(kinds: list[str]) -> None:
    assert kinds[0] == "turn_started" and kinds[-1] == "turn_finished", kinds
    assert kinds.count("turn_started") == 1 and kinds.count("tool_request") == 1, kinds


def test_the_turns_answer_names_its_run_and_a_page_on_an_allowed_origin_may_read_it() -> None:
    with _served("--cors-origin", "http://game.example") as url, \
            httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        http.post("/v1/sessions", json={"asset": "chat.json", "id": "npc"}).raise_for_status()
        with http.stream("POST", "/v1/sessions/npc/turns", json={"line": "Hello"},
                         headers={"Origin": "http://game.example"}) as answer:
            run = answer.headers["parley-run"]
            first = next(answer.iter_lines())
        assert first == f"id: {run}.1", first
        assert answer.headers["access-control-expose-headers"].lower() == "parley-run"


def test_the_python_client_resumes_a_stream_that_broke_before_its_first_event() -> None:
    with _served() as url, CuttingProxy(url) as proxy, ParleyClient(proxy.url, token=TOKEN) as client:
        client.create_session("tool_calling.json", id="cut.head.py")
        outcome = client.turn("cut.head.py", LINE, tools=lambda call: ANSWER)
    assert proxy.cuts == {"cut.head.py": 1} and proxy.resumes == {"cut.head.py": 1}
    _kinds_once([e.kind for e in outcome.events])
    assert outcome.reply.endswith(ANSWER)


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_the_js_client_in_node_resumes_a_stream_that_broke_before_its_first_event(tmp_path: Path) -> None:
    script = JS / f".run-header-{os.getpid()}.mjs"  # beside the module it imports
    script.write_text(NODE_TURN, encoding="utf-8")
    try:
        with _served() as url, CuttingProxy(url) as proxy:
            ParleyClient(proxy.url, token=TOKEN).create_session("tool_calling.json", id="cut.head.js")
            env = {**os.environ, "PARLEY_URL": proxy.url, "PARLEY_TOKEN": TOKEN, "PARLEY_SESSION": "cut.head.js",
                   "PARLEY_LINE": LINE, "PARLEY_ANSWER": ANSWER}
            done = subprocess.run([str(shutil.which("node")), str(script)], env=env, capture_output=True, text=True,
                                  timeout=120, check=False)
    finally:
        script.unlink()
    assert done.returncode == 0, done.stdout + done.stderr
    seen = json.loads(done.stdout)
    assert proxy.cuts == {"cut.head.js": 1} and proxy.resumes == {"cut.head.js": 1}
    _kinds_once(seen["kinds"])
    assert seen["reply"].endswith(ANSWER)


def test_the_js_client_in_a_browser_resumes_a_stream_that_broke_before_its_first_event(
        chromium, js_site: str, tmp_path: Path) -> None:  # noqa: F811
    """The web sample's page, through the proxy: its session is named for the cut."""
    with _served("--cors-origin", js_site) as url, CuttingProxy(url) as proxy:
        ParleyClient(proxy.url, token=TOKEN).create_session("tool_calling.json", id="cut.head.web")
        (tmp_path / "profile").mkdir()
        seen = run_page(chromium, tmp_path / "profile",
                        f"{js_site}/sample/index.html?server={proxy.url}&token={TOKEN}&asset=tool_calling.json"
                        f"&session=cut.head.web&say={LINE}", result="sample")
    assert "error" not in seen and "error" not in seen["said"][0], seen
    assert proxy.cuts == {"cut.head.web": 1} and proxy.resumes == {"cut.head.web": 1}
    assert seen["subtitle"].endswith("240 arrows in stock"), seen
