"""The JavaScript client (clients/js) under node's own test runner, against a real ``parley serve``
process: a scripted conversation with tool calls, a cancel, errors and a watch on the scripted backend,
turns whose streams a proxy breaks mid-turn (resumed, or lost), a server killed mid-turn (server_gone)
and one never started (unavailable), and one turn on the real sample model.
Needs node 18+ and nothing from npm."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from runtime.resources import examples_dir
from tests.clients.cutting_proxy import CuttingProxy
from tests.clients.kill_switch import KillSwitch, closed_url
from tests.samples import example_on_sample_model
from tests.servers import parley_serve, parley_serve_process

ROOT = Path(__file__).resolve().parents[2]
JS = ROOT / "clients" / "js"
NODE = shutil.which("node")
TOKEN = "js-client-test-token"
NODE_SECONDS = 600.0  # a deadline for node's run; node's own per-test timeouts fail sooner

pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed")


def run_node(*files: Path, **env: str) -> str:
    """``node --test FILES`` with ``env`` added; its output, after checking every test passed."""
    assert NODE is not None
    base = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_") or k == "PARLEY_SAMPLE_MODEL"}
    done = subprocess.run([NODE, "--test", *map(str, files)], cwd=JS, env={**base, **env}, capture_output=True,
                          text=True, encoding="utf-8", errors="replace", timeout=NODE_SECONDS, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"node --test exited {done.returncode}:\n{output[-12000:]}"
    assert "\nnot ok " not in output and "# fail 0" in output, output[-12000:]
    return output


def summary(output: str) -> dict[str, int]:
    """node's closing counts: tests, pass, fail, skipped, ..."""
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^# (\w+) (\d+)$", output, re.MULTILINE)}


def test_js_client_runs_a_scripted_conversation_with_tool_calls_and_a_cancel() -> None:
    apart = {JS / "test" / f"{name}.test.mjs" for name in ("resume", "server_gone", "shutdown")}  # own servers
    tests = sorted(set((JS / "test").glob("*.test.mjs")) - apart)
    assert JS / "test" / "conversation.test.mjs" in tests
    with parley_serve("--backend", "scripted", "--assets", str(examples_dir()), token=TOKEN) as url:
        output = run_node(*tests, PARLEY_URL=url, PARLEY_TOKEN=TOKEN)
    for name in ("a turn whose tool call the client answers", "a turn cancelled while it waits for the tool result",
                 "unknown sessions are ParleyErrors with the server's code",
                 "a watch stream sees the events of a turn another request runs",
                 "a deleted session is gone, and its watchers' streams end",
                 "a request without the token is refused as unauthorized",
                 "a narrated line is guarded: the event and the turn name the policy and its exit",
                 "the game's answer completes the quest: a game_event, and the turn lists it",
                 "a plain line sends neither, and the turn's guard is empty"):
        assert re.search(rf"^\s*ok \d+ - {re.escape(name)}$", output, re.MULTILINE), f"{name!r} did not pass:\n{output}"
    counts = summary(output)
    assert counts["skipped"] == 1, output  # only the sample model's test, which needs PARLEY_MODEL_URL


def test_js_client_resumes_a_turn_whose_stream_breaks_and_hands_a_lost_turn_line_back() -> None:
    """The proxy cuts turn streams (after a whole event, and in the middle of one); the client resumes
    and gets every event once. A resume that reaches the other server, which never ran the turn, ends
    in turn_lost with the line handed back; cancelOnDisconnect does not resume."""
    args = ("--backend", "scripted", "--assets", str(examples_dir()))
    # the other server keeps its sessions apart (--store none), as a replica that never ran the turn
    with parley_serve(*args, token=TOKEN) as url, parley_serve(*args, "--store", "none", token=TOKEN) as other, \
            CuttingProxy(url, other) as proxy:
        output = run_node(JS / "test" / "resume.test.mjs", PARLEY_URL=url, PARLEY_PROXY_URL=proxy.url,
                          PARLEY_OTHER_URL=other, PARLEY_TOKEN=TOKEN)
    assert summary(output)["pass"] == 4, output
    assert proxy.cuts == {"cut.tool_request.js": 1, "half.tool_request.js": 1, "lost.turn_started.js": 1,
                          "cut.tool_request.cancel.js": 1}, proxy.cuts
    assert proxy.resumes == {"cut.tool_request.js": 1, "half.tool_request.js": 1, "lost.turn_started.js": 1}


def test_js_client_tells_a_server_killed_mid_turn_from_one_that_never_started() -> None:
    """The server is killed (SIGKILL) while its turn waits for a tool result: the turn rejects with
    server_gone and the line once every resume try found no server; a closed port is unavailable."""
    with parley_serve_process("--backend", "scripted", "--assets", str(examples_dir()), "--store", "none") as doomed, \
            KillSwitch(doomed.process) as switch:
        output = run_node(JS / "test" / "server_gone.test.mjs", PARLEY_DOOMED_URL=doomed.url, PARLEY_KILL_URL=switch.url,
                          PARLEY_CLOSED_URL=closed_url())
    assert summary(output)["pass"] == 2, output
    assert switch.kills == 1 and doomed.process.returncode is not None


@pytest.mark.model
def test_js_client_runs_a_chat_turn_on_the_sample_model(sample_model: Path, tmp_path: Path) -> None:
    example_on_sample_model("chat", sample_model, tmp_path, 24)
    with parley_serve("--backend", "embedded", "--assets", str(tmp_path)) as url:
        output = run_node(JS / "test" / "sample_model.test.mjs", PARLEY_MODEL_URL=url)
    counts = summary(output)
    assert (counts["pass"], counts["skipped"]) == (1, 0), output


def test_js_client_stops_a_server_by_request_with_its_token() -> None:
    """shutdown() (a game that cannot send SIGTERM): refused without the token; with it the running
    turn ends cancelled and the process exits."""
    with parley_serve_process("--backend", "scripted", "--assets", str(examples_dir()), "--store", "none",
                              token=TOKEN) as server:
        output = run_node(JS / "test" / "shutdown.test.mjs", PARLEY_SERVE_URL=server.url, PARLEY_TOKEN=TOKEN)
        server.process.wait(timeout=NODE_SECONDS)
    assert summary(output)["pass"] == 1, output
    assert server.process.returncode == 0
