"""Issue 20's hostile server against whole turns: every mode ends in a failed turn, a BackendError
that names the server and says what was wrong, within its limit, and the conversation is exactly
as it was before the turn (the exported dialog compared before and after). Then the same agent
runs a good turn.

The transport's limits are kept small here through ServerConnection's own arguments (set on the
backend's connections), not by patching sleeps."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.agent import Agent, TurnError
from runtime.asset.file import load_asset
from runtime.backends.http import ServerConnection
from runtime.backends.llama_server import LlamaServerBackend
from runtime.backends.openai_server import OpenAIBackend
from runtime.dialogue.dialog_file import save_history
from runtime.problems import BackendError
from tests.hostile_server import GENERATE, WRONG_TYPES, HostileServer, hostile_server

ROOT = Path(__file__).resolve().parents[3]
CHAT = ROOT / "resources" / "examples" / "chat.json"

MB = 1024 * 1024
DEADLINE = 2.0  # s: each request's whole limit here (a good one takes milliseconds)
READ_TIMEOUT = 5.0  # s: longer than the drip, so only the deadline can end a dripping answer
SLACK = 10.0  # s beyond a limit that a loaded machine may take (never reached when it works)
LLAMA, OPENAI = "llama-server", "openai"
STOP_DEADLINE = 5.0  # s: the deadline where a test stops a request (a dripping answer takes ~8 s)
SETUP = {"/props", "/v1/models"}  # read once per backend: the first turn is the one that meets them


@pytest.fixture(scope="module")
def server() -> Iterator[HostileServer]:
    with hostile_server(drip_seconds=0.05, huge_bytes=16 * MB, max_seconds=30) as running:
        yield running


def _backend(kind: str, url: str):
    backend = LlamaServerBackend(url, "gpu-box", timeout=READ_TIMEOUT) if kind == LLAMA else \
        OpenAIBackend(url, "vllm-box", timeout=READ_TIMEOUT, structured_output="none")
    for conn in vars(backend).values():
        if isinstance(conn, ServerConnection):
            conn.deadline, conn.max_body_bytes, conn.max_event_bytes = DEADLINE, MB, 256 * 1024
    return backend


def _snapshot(agent: Agent, tmp_path: Path) -> str:
    path = tmp_path / f"h{len(list(tmp_path.iterdir()))}.json"
    save_history(agent.export_dialog(), path)
    return path.read_text()


def _fails_cleanly(server: HostileServer, kind: str, mode: str, at: str, tmp_path: Path, *, variant: int = 0,
                   words: tuple[str, ...] = (), limit: float = 0.0) -> BackendError | TurnError | None:
    """Run a turn that meets ``mode`` at ``at``; the error it ended in (None: the turn ran, which a
    wrong value that is clamped allows)."""
    server.reset()
    agent = Agent(load_asset(CHAT), _backend(kind, server.url), str(CHAT.parent))
    if at not in SETUP:
        agent.run_turn("Hello there")  # one good turn first: there is a conversation to lose
    before = _snapshot(agent, tmp_path)
    server.reset(mode, at, variant)
    started = time.monotonic()
    error: BackendError | TurnError | None = None
    try:
        agent.run_turn("And now?")
    except (BackendError, TurnError) as exc:
        error = exc
    took = time.monotonic() - started
    assert server.hit.is_set(), f"the turn never reached {at}"
    assert took < limit + SLACK, f"the turn took {took:.1f} s"
    if error is not None:
        message = str(error)
        assert ("gpu-box" if kind == LLAMA else "vllm-box") in message and server.url in message, message
        for word in words:
            assert word in message, message
        assert _snapshot(agent, tmp_path) == before
    server.reset()
    assert agent.run_turn("Once more").reply == "Hello"  # the agent goes on from where it was
    return error


STREAM_MODES = [  # (mode, what the error says, its limit)
    ("endless", ("no complete answer within 2 s",), DEADLINE),
    ("endless_tokens", (), DEADLINE),  # the deadline, or a reply cut at max_tokens (the backend counts them)
    ("dripping", ("no complete answer within 2 s",), DEADLINE),
    ("huge", ("event larger than 256 KB",), 0.0),
    ("huge_declared", (), DEADLINE),
    ("nested", ("nested too deeply to read",), 0.0),
    ("malformed", ("malformed event",), 0.0),
    ("close_stream", ("no complete answer within 2 s",), DEADLINE),
    ("truncated", ("ended before",), 0.0),
    ("error_event", ("slot crashed",), 0.0),
]


@pytest.mark.parametrize("kind", [LLAMA, OPENAI])
@pytest.mark.parametrize(("mode", "words", "limit"), STREAM_MODES, ids=[m[0] for m in STREAM_MODES])
def test_a_hostile_generation_call_fails_the_turn_and_keeps_the_conversation(server, kind, mode, words, limit,
                                                                             tmp_path) -> None:
    error = _fails_cleanly(server, kind, mode, GENERATE, tmp_path, words=words, limit=limit)
    assert error is not None or mode == "endless_tokens"


SETUP_MODES = [  # (kind, endpoint, mode, what the error says, its limit)
    (LLAMA, "/props", "huge", ("more than 1 MB",), 0.0),
    (LLAMA, "/props", "huge_declared", ("more than 1 MB", "it says 1024 MB"), 0.0),
    (LLAMA, "/props", "nested", ("nested too deeply",), 0.0),
    (LLAMA, "/props", "dripping", ("no complete answer within 2 s",), DEADLINE),
    (LLAMA, "/props", "malformed", ("not JSON",), 0.0),
    (LLAMA, "/tokenize", "huge", ("more than 1 MB",), 0.0),
    (LLAMA, "/tokenize", "endless", ("no complete answer within 2 s",), DEADLINE),
    (LLAMA, "/tokenize", "dripping", ("no complete answer within 2 s",), DEADLINE),
    (LLAMA, "/tokenize", "nested", ("nested too deeply",), 0.0),
    (LLAMA, "/apply-template", "nested", ("nested too deeply",), 0.0),
    (LLAMA, "/apply-template", "malformed", ("not JSON",), 0.0),
    (LLAMA, "/apply-template", "timeout", ("no complete answer within 2 s",), DEADLINE),
    (OPENAI, "/v1/models", "huge", ("more than 1 MB",), 0.0),
    (OPENAI, "/v1/models", "huge_declared", ("more than 1 MB",), 0.0),
    (OPENAI, "/v1/models", "nested", ("nested too deeply",), 0.0),
    (OPENAI, "/v1/models", "dripping", ("no complete answer within 2 s",), DEADLINE),
    (OPENAI, "/v1/models", "endless", ("no complete answer within 2 s",), DEADLINE),
]


@pytest.mark.parametrize(("kind", "at", "mode", "words", "limit"), SETUP_MODES,
                         ids=[f"{k}-{a}-{m}" for k, a, m, _, _ in SETUP_MODES])
def test_a_hostile_answer_before_generating_fails_the_turn_and_keeps_the_conversation(
        server, kind, at, mode, words, limit, tmp_path) -> None:
    assert _fails_cleanly(server, kind, mode, at, tmp_path, words=words, limit=limit) is not None


WRONG = [(LLAMA, at, i) for at in ("/props", "/tokenize", "/apply-template", "/completion")
         for i in range(len(WRONG_TYPES[at]))] + \
        [(OPENAI, at, i) for at in ("/v1/models", "/v1/chat/completions") for i in range(len(WRONG_TYPES[at]))]


@pytest.mark.parametrize(("kind", "at", "variant"), WRONG, ids=[f"{k}-{a}-{i}" for k, a, i in WRONG])
def test_wrong_types_fail_the_turn_clearly_or_are_bounded(server, kind, at, variant, tmp_path) -> None:
    """Fields of the wrong type, Infinity, 1e400, negative counts, 2**40 slots: a clear error, or
    (a count that only reaches the diagnostics, a slot count past the cap) a turn that runs."""
    at_endpoint = GENERATE if at in ("/completion", "/v1/chat/completions") else at
    _fails_cleanly(server, kind, "wrong_types", at_endpoint, tmp_path, variant=variant)


def test_stop_during_a_connection_close_stream_ends_the_turn_at_once(server) -> None:
    """Stop on a Connection: close stream stalled after its first token (issue 20.6)."""
    server.reset()
    backend = LlamaServerBackend(server.url, "gpu-box", timeout=60)
    agent = Agent(load_asset(CHAT), backend, str(CHAT.parent))
    agent.run_turn("Hello there")
    server.reset("close_stream")
    cancel = threading.Event()
    stopped: list[float] = []

    def on_event(event) -> None:
        if event.kind == "token" and not stopped:
            stopped.append(0.0)
            threading.Timer(0.05, lambda: (stopped.append(time.monotonic()), cancel.set())).start()

    started = time.monotonic()
    try:
        agent.run_turn("And now?", on_event=on_event, cancel=cancel)
    except TurnError as exc:
        assert "cancel" in str(exc)
    else:
        raise AssertionError("a cancelled turn should say it was cancelled")
    assert len(stopped) == 2 and time.monotonic() - stopped[1] < SLACK
    assert time.monotonic() - started < SLACK  # not the server's 30 s
    assert server.disconnected.wait(SLACK)


@pytest.mark.parametrize(("kind", "at"), [(LLAMA, "/tokenize"),
                                          (LLAMA, "/apply-template"),
                                          (OPENAI, "/tokenize")])
def test_stop_during_a_request_before_generating_ends_the_turn(server, kind, at, tmp_path) -> None:
    """Stop while a dripping server answers the tokenizer or the template (issue 20.6: these plain
    requests had no cancel path): the turn ends cancelled, the conversation as it was."""
    server.reset()
    backend = _backend(kind, server.url)
    for conn in vars(backend).values():
        if isinstance(conn, ServerConnection):
            conn.deadline = STOP_DEADLINE  # a dripping answer takes longer: only Stop ends it sooner
    agent = Agent(load_asset(CHAT), backend, str(CHAT.parent))
    agent.run_turn("Hello there")
    before = _snapshot(agent, tmp_path)
    server.reset("dripping", at)
    cancel = threading.Event()

    def press() -> None:
        if server.hit.wait(SLACK):
            cancel.set()

    threading.Thread(target=press, daemon=True).start()
    started = time.monotonic()
    with pytest.raises(TurnError, match="cancel"):
        agent.run_turn("A new line to tokenize", cancel=cancel)
    assert server.hit.is_set() and time.monotonic() - started < STOP_DEADLINE  # Stop, not the deadline
    assert server.disconnected.wait(SLACK)
    assert _snapshot(agent, tmp_path) == before
