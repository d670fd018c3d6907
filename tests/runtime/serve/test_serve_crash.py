"""A ``parley serve`` that crashes natively leaves a report saying what crashed and what ran; the next
server on the same state folder logs it, tells it in ``/v1/health``, and then forgets it."""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path

import pytest

from runtime.crashes import CRASH_SUFFIX, left_behind
from runtime.resources import examples_dir
from runtime.serve.client import ParleyClient, ParleyError
from runtime.serve.crash_reports import WATCH_NAME
from runtime.serve.store import STORE_FILE
from tests.servers import parley_serve_process

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

# The scripted backend's generation dies as llama.cpp's would on a bad GGUF or an AMX bug: a real
# SIGSEGV in native code, which no Python handler survives.
CRASHING = """
import ctypes
from runtime.backends import scripted

def crash(self, *args, **kwargs):
    ctypes.string_at(0)

scripted.ScriptedSession.generate = crash
"""
WHAT_RAN = "node `reply` ran turn 1 of session innkeeper (chat.json) on SmolLM2-135M-Instruct.Q4_1.gguf"
DEADLINE = 60


def serve(state: Path, patch: str = ""):
    return parley_serve_process("--backend", "scripted", "--assets", str(examples_dir()), "--state-dir", str(state),
                                patch=patch)


def test_a_native_crash_is_reported_by_the_next_server_once(tmp_path):
    state = tmp_path / "state"
    with serve(state, CRASHING) as crashing, ParleyClient(crashing.url) as client:
        assert f"crash reports go to {state / WATCH_NAME}-{crashing.process.pid}{CRASH_SUFFIX}" in crashing.log()
        client.create_session("chat.json", id="innkeeper")
        with pytest.raises(ParleyError) as died:  # the server dies in the middle of the turn's stream
            client.turn("innkeeper", "Hello there")
        assert died.value.code == "server_gone"  # reached, then gone: no try to resume the turn found it
        assert crashing.process.wait(DEADLINE) == -signal.SIGSEGV

    (crash,) = left_behind(state, WATCH_NAME)
    assert crash.pid == crashing.process.pid
    assert crash.signal == "Segmentation fault" and "Fatal Python error: Segmentation fault" in crash.text
    assert crash.where.startswith("in ctypes/__init__.py, line ") and crash.where.endswith(", in string_at")
    assert crash.note == WHAT_RAN
    assert "runtime/serve/npcs.py" in crash.text, "every frame of the crashing thread is in the report"

    with serve(state) as second, ParleyClient(second.url) as client:
        told = client.health().previous_crash
        log = second.log()
    assert told is not None and told.pid == crashing.process.pid and told.signal == "Segmentation fault"
    assert told.summary.startswith("crashed (Segmentation fault) in ctypes/__init__.py, line ")
    assert told.running == [crash.note] and WHAT_RAN in told.summary
    assert f"ERROR the parley serve before this one (pid {crashing.process.pid}" in log
    assert "Segmentation fault" in log and WHAT_RAN in log
    assert "Current thread" in log and "runtime/serve/npcs.py" in log, "the log holds the whole report"
    assert left_behind(state, WATCH_NAME) == [], "told once, then forgotten"

    with serve(state) as third, ParleyClient(third.url) as client:
        assert client.health().previous_crash is None
        assert "before this one" not in third.log()


def test_a_clean_shutdown_leaves_no_report(tmp_path):
    state = tmp_path / "state"
    with serve(state) as server, ParleyClient(server.url) as client:
        assert client.health().previous_crash is None
        client.create_session("chat.json", id="innkeeper")
        client.turn("innkeeper", "Hello there")
        assert list(state.glob(f"*{CRASH_SUFFIX}")), "the watch is on while the server runs"
    assert server.process.returncode == 128 + signal.SIGTERM  # SIGTERM ends it through its finally
    # no report; the sessions' store stays (closed cleanly: its write-ahead log folded in)
    assert sorted(p.name for p in state.iterdir()) == [STORE_FILE]


def test_every_turn_in_flight_is_named(tmp_path):
    """Two sessions' turns run at once when the server dies: the report names both."""
    state = tmp_path / "state"
    both_generating = """
import ctypes, threading
from runtime.backends import scripted

both = threading.Barrier(2)

def crash(self, *args, **kwargs):
    both.wait()  # each turn is noted, at its node, before it generates
    ctypes.string_at(0)

scripted.ScriptedSession.generate = crash
"""
    with serve(state, both_generating) as server, ParleyClient(server.url) as client:
        for name in ("smith", "baker"):
            client.create_session("chat.json", id=name)
        turns = [threading.Thread(target=_turn_until_the_server_dies, args=(server.url, name)) for name in
                 ("smith", "baker")]
        for turn in turns:
            turn.start()
        assert server.process.wait(DEADLINE) == -signal.SIGSEGV
        for turn in turns:
            turn.join(DEADLINE)
    (crash,) = left_behind(state, WATCH_NAME)
    assert sorted(crash.note.splitlines()) == [
        f"node `reply` ran turn 1 of session {name} (chat.json) on SmolLM2-135M-Instruct.Q4_1.gguf"
        for name in ("baker", "smith")]


def _turn_until_the_server_dies(url: str, session: str) -> None:
    try:
        with ParleyClient(url) as client:
            client.turn(session, "What do you sell?")
    except ParleyError:
        pass
