"""``parley serve`` as a game's child process: it ends when the game does (``--exit-with-parent``),
stops on ``POST /v1/shutdown`` (token-protected), and SIGTERM or a shutdown ends it within a limit,
whatever it is doing: a turn waiting for a tool result, an observer's open stream, a turn generating."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from runtime.resources import examples_dir
from runtime.serve.client import ParleyClient, ParleyError, ServerEvent
from runtime.serve.lifecycle import SHUTDOWN_SECONDS
from runtime.serve.server import serve_threads
from tests.samples import example_on_sample_model
from tests.servers import LISTENING, ROOT, parley_serve_process

TOKEN = "lifecycle-token-0123456789abcdef"
# The limit is SHUTDOWN_SECONDS; a busy machine may add to the process's own start and end, so the
# test allows more, still far from what it replaces (a tool timeout of 60 s, or never).
EXIT_SECONDS = SHUTDOWN_SECONDS + 8
WAIT = 120.0


def events_until(events: Iterator[ServerEvent], kinds: set[str], into: list[ServerEvent]) -> ServerEvent:
    for event in events:
        into.append(event)
        if event.kind in kinds:
            return event
    raise AssertionError(f"the stream ended before any of {kinds}: {[e.kind for e in into]}")


def follow(events: Iterator[ServerEvent], into: list[ServerEvent]) -> threading.Thread:
    """Read ``events`` to their end on a thread (an open stream while the server stops)."""
    def read() -> None:
        try:
            into.extend(events)
        except ParleyError as exc:
            into.append(ServerEvent("client_error", {"code": exc.code}))

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def logged(server, text: str) -> None:
    """Wait until the server's log has a line with ``text`` (it writes its log as things happen)."""
    deadline = time.monotonic() + WAIT
    while text not in server.log():
        assert server.process.poll() is None and time.monotonic() < deadline, server.log()
        time.sleep(0.05)  # polling a file another process appends to: nothing to wait on


def stopped_within(process: subprocess.Popen, stop) -> float:
    start = time.monotonic()
    stop()
    process.wait(timeout=EXIT_SECONDS)
    return time.monotonic() - start


@pytest.mark.parametrize("how", ["SIGTERM", "POST /v1/shutdown"])
def test_a_stop_ends_tool_waits_and_observer_streams_within_the_limit_and_keeps_every_session(tmp_path, how):
    store = tmp_path / "sessions.sqlite3"
    args = ("--backend", "scripted", "--assets", str(examples_dir()), "--store", f"sqlite:{store}",
            "--tool-timeout", "60")
    with parley_serve_process(*args, token=TOKEN) as server:
        client = ParleyClient(server.url, token=TOKEN, timeout=WAIT, resume_waits=())
        client.create_session("tool_calling.json", id="quartermaster")
        client.turn("quartermaster", "How many arrows?", tools=lambda call: "240")
        client.create_session("chat.json", id="innkeeper")
        watched: list[ServerEvent] = []
        watcher = follow(iter(client.watch("innkeeper")), watched)
        seen: list[ServerEvent] = []
        turn = client.stream_turn("quartermaster", "And bolts?")  # nobody answers its tool call
        events_until(turn, {"tool_request"}, seen)
        rest = follow(turn, seen)

        if how == "SIGTERM":
            seconds = stopped_within(server.process, lambda: server.process.send_signal(signal.SIGTERM))
        else:
            answer: list[httpx.Response] = []
            seconds = stopped_within(server.process, lambda: answer.append(
                httpx.post(f"{server.url}/v1/shutdown", headers={"Authorization": f"Bearer {TOKEN}"})))
            assert answer[0].status_code == 202 and answer[0].json() == {"status": "shutting_down",
                                                                         "seconds": SHUTDOWN_SECONDS}
        rest.join(WAIT)
        watcher.join(WAIT)
        log = server.log()
        client.close()
    assert seconds < EXIT_SECONDS, log
    assert server.process.returncode == (128 + signal.SIGTERM if how == "SIGTERM" else 0), log
    failed = [e for e in seen if e.kind == "turn_failed"]
    assert failed and failed[0].data["error"]["code"] == "cancelled", [e.kind for e in seen]
    assert "shutting down" in failed[0].data["error"]["message"] and failed[0].data["line"] == "And bolts?"
    assert not watcher.is_alive() and not rest.is_alive()
    assert "stopping within" in log and "its turn is cancelled: the server is shutting down" in log

    with parley_serve_process(*args, token=TOKEN) as again, ParleyClient(again.url, token=TOKEN) as client:
        kept = client.export_history("quartermaster")
        assert [t["player"] for t in kept["turns"]] == ["How many arrows?"]  # as it was before the cancelled turn
        assert client.turn("quartermaster", "And bolts?", tools=lambda call: "12").reply.endswith("12")


def test_shutdown_needs_the_token_and_a_server_without_one_refuses_it():
    args = ("--backend", "scripted", "--assets", str(examples_dir()), "--store", "none")
    with parley_serve_process(*args) as server:
        refused = httpx.post(f"{server.url}/v1/shutdown")
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
        assert "token" in refused.json()["error"]["message"]
        assert httpx.get(f"{server.url}/v1/health").status_code == 200  # still serving
    with parley_serve_process(*args, token=TOKEN) as server:
        wrong = httpx.post(f"{server.url}/v1/shutdown", headers={"Authorization": f"Bearer {TOKEN}x"})
        assert wrong.status_code == 401
        assert httpx.get(f"{server.url}/v1/health", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
        with ParleyClient(server.url, token=TOKEN) as client:
            assert client.shutdown() == SHUTDOWN_SECONDS
        server.process.wait(timeout=EXIT_SECONDS)
        assert server.process.returncode == 0


def test_exit_with_parent_ends_when_standard_input_closes():
    args = ("--backend", "scripted", "--assets", str(examples_dir()), "--store", "none", "--exit-with-parent")
    with parley_serve_process(*args, stdin=subprocess.PIPE) as server:
        assert httpx.get(f"{server.url}/v1/health").status_code == 200
        assert server.process.stdin is not None
        seconds = stopped_within(server.process, server.process.stdin.close)
        log = server.log()
    assert seconds < EXIT_SECONDS and server.process.returncode == 0, log
    assert "standard input reached its end" in log


def test_exit_with_parent_ends_when_the_parent_is_killed(tmp_path):
    """The game crashes (SIGKILL: it closes nothing itself). Standard input is /dev/null here, so only
    the parent is watched: the server must see its parent go."""
    serve = [sys.executable, "-m", "runtime", "serve", "--port", "0", "--backend", "scripted", "--assets",
             str(examples_dir()), "--store", "none", "--exit-with-parent"]
    game = ("import subprocess, sys\n"
            f"child = subprocess.Popen({serve!r}, stdin=subprocess.DEVNULL)\n"
            "print('server', child.pid, flush=True)\n"
            "child.wait()\n")
    parent = subprocess.Popen([sys.executable, "-c", game], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:  # the server's stdout is this pipe too: its end is the server's end
        assert parent.stdout is not None
        for line in parent.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    try:
        url = None
        while url is None:
            line = lines.get(timeout=WAIT)
            assert line is not None, "the server ended before it listened"
            match = LISTENING.search(line)
            url = match.group(1) if match else None
        assert httpx.get(f"{url}/v1/health").status_code == 200
        start = time.monotonic()
        parent.kill()
        parent.wait()
        while (line := lines.get(timeout=EXIT_SECONDS)) is not None:
            pass  # until the pipe's last writer, the server, has ended
        assert time.monotonic() - start < EXIT_SECONDS
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{url}/v1/health")
    finally:
        parent.kill()


def test_threads_leave_the_game_a_core():
    assert serve_threads(None, None, cpus=1) == (1, 1)
    assert serve_threads(None, None, cpus=2) == (1, 1)
    assert serve_threads(None, None, cpus=4) == (2, 3)
    assert serve_threads(None, None, cpus=16) == (8, 15)
    assert serve_threads(3, 5, cpus=2) == (3, 5)  # what is given is taken


def test_threads_are_refused_for_a_server_backend_and_below_one():
    for extra, said in ((["--backend", "scripted", "--threads", "2"], "--threads: settings of the embedded backend"),
                        (["--threads-batch", "0"], "--threads_batch must be at least 1")):
        done = subprocess.run([sys.executable, "-m", "runtime", "serve", "--assets", str(examples_dir()), *extra],
                              cwd=ROOT, capture_output=True, text=True, timeout=WAIT, check=False)
        assert done.returncode == 2 and said.replace("_", "-") in done.stderr.replace("_", "-"), done.stderr


@pytest.mark.model
def test_sigterm_cancels_a_generating_turn_on_the_sample_model_within_the_limit(sample_model, tmp_path):
    """A turn generating on the real model is cut short; the session stays as it was before it, and
    the threads asked for are the ones llama.cpp got."""
    assets = tmp_path / "assets"
    assets.mkdir()
    example_on_sample_model("chat", sample_model, assets, 2000)
    store = tmp_path / "sessions.sqlite3"
    args = ("--assets", str(assets), "--store", f"sqlite:{store}", "--threads", "1", "--threads-batch", "1")
    with parley_serve_process(*args) as server:
        client = ParleyClient(server.url, timeout=WAIT, resume_waits=())
        client.create_session("chat.json", id="innkeeper")
        seen: list[ServerEvent] = []
        turn = client.stream_turn("innkeeper", "Tell me the longest story you know, about the old king.")
        events_until(turn, {"token"}, seen)  # generating
        rest = follow(turn, seen)
        seconds = stopped_within(server.process, lambda: server.process.send_signal(signal.SIGTERM))
        rest.join(WAIT)
        log = server.log()
        client.close()
    assert seconds < EXIT_SECONDS, log
    assert "llama.cpp threads: 1 to generate, 1 to read prompts" in log
    failed = [e for e in seen if e.kind == "turn_failed"]
    assert failed and failed[0].data["error"]["code"] == "cancelled", [e.kind for e in seen][-5:]
    assert not [e for e in seen if e.kind == "turn_finished"]
    with parley_serve_process(*args) as again, ParleyClient(again.url, timeout=WAIT) as client:
        assert client.export_history("innkeeper")["turns"] == []


def test_cancels_disconnects_tool_timeouts_and_failures_are_logged_with_session_and_turn():
    args = ("--backend", "scripted", "--assets", str(examples_dir()), "--store", "none", "--log-format", "json",
            "--tool-timeout", "5")
    with parley_serve_process(*args) as server:
        client = ParleyClient(server.url, timeout=WAIT, resume_waits=())
        client.create_session("tool_calling.json", id="quartermaster")
        client.turn("quartermaster", "How many arrows?", tools=lambda call: "240")  # turn 0
        seen: list[ServerEvent] = []
        turn = client.stream_turn("quartermaster", "And bolts?")
        events_until(turn, {"tool_request"}, seen)
        assert client.cancel("quartermaster")  # turn 1: cancelled by the client
        events_until(turn, {"turn_failed"}, seen)
        turn = client.stream_turn("quartermaster", "And spears?")
        events_until(turn, {"tool_request"}, seen)
        turn.close()  # turn 1 again: the client goes away; nobody answers the tool: it times out
        logged(server, "the client disconnected mid-turn")  # before the tool's time is up
        logged(server, "turn failed (tool_timeout)")
        client.close()
        lines = [json.loads(line) for line in server.log().splitlines() if line.startswith("{")]

    def about(text: str) -> tuple[str | None, int | None, str]:
        found = [line for line in lines if text in line["message"]]
        assert found, (text, [line["message"] for line in lines])
        return found[0]["session"], found[0]["turn"], found[0]["level"]

    assert about("the client cancelled the running turn") == ("quartermaster", 1, "INFO")
    assert about("turn failed (cancelled)") == ("quartermaster", 1, "INFO")
    assert about("the client disconnected mid-turn") == ("quartermaster", 1, "INFO")
    assert about("did not answer tool call") == ("quartermaster", 1, "WARNING")
    assert about("turn failed (tool_timeout)") == ("quartermaster", 1, "WARNING")


def test_the_text_log_names_the_session_and_turn(tmp_path):
    args = ("--backend", "scripted", "--assets", str(examples_dir()), "--store", "none")
    with parley_serve_process(*args) as server, ParleyClient(server.url) as client:
        client.create_session("chat.json", id="innkeeper")
        client.turn("innkeeper", "Hello there")
        log = server.log()
    assert any("[innkeeper turn 0] turn finished" in line for line in log.splitlines()), log
