"""Servers that misbehave: refused connections, timeouts, HTTP errors, malformed and truncated
streams. Each gives a clear error naming the backend, and the conversation stays exactly as it
was before the turn.

The server is tests/hostile_server.py's, a real HTTP server on 127.0.0.1 that answers the calls
a backend makes before generating (the template, the tokenizer, the model list) correctly, then
misbehaves on one endpoint in one chosen way. The acceptance tests on real inference servers are
in test_servers.py; every hostile mode ending a turn is in test_hostile_server.py."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.agent import Agent
from runtime.asset.file import load_asset
from runtime.backends.base import ChatMessage, GenerationRequest
from runtime.backends.http import (
    Cancelled,
    ServerConnection,
    ServerRefused,
    ServerUnavailable,
    cancel_scope,
    display_url,
    printable,
)
from runtime.backends.llama_server import LlamaServerBackend
from runtime.backends.openai_server import OpenAIBackend
from runtime.dialogue.dialog_file import save_history
from runtime.problems import BackendError
from tests.hostile_server import HostileServer, hostile_server, unaccepting_port

ROOT = Path(__file__).resolve().parents[3]
CHAT = ROOT / "resources" / "examples" / "chat.json"


@pytest.fixture
def fake_server() -> Iterator[HostileServer]:
    with hostile_server() as server:
        yield server


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once closed


def _backends(url: str, timeout: float = 5.0):
    return [LlamaServerBackend(url, "gpu-box", timeout=timeout),
            OpenAIBackend(url, "vllm-box", timeout=timeout, structured_output="none")]


def _agent(backend) -> Agent:
    asset = load_asset(CHAT)
    return Agent(asset, backend, str(CHAT.parent))


def _snapshot(agent: Agent, tmp_path: Path) -> str:
    path = tmp_path / f"h{len(list(tmp_path.iterdir()))}.json"
    save_history(agent.export_dialog(), path)
    return path.read_text()


@pytest.mark.parametrize("kind", [0, 1], ids=["llama-server", "openai"])
def test_a_well_behaved_fake_runs_a_turn(fake_server, kind, tmp_path) -> None:
    """The control: the same server in mode 'ok' runs turns, so each failure below is the mode's."""
    agent = _agent(_backends(fake_server.url)[kind])
    result = agent.run_turn("Hello there")
    assert result.reply == "Hello"
    assert ("gpu-box" if kind == 0 else "vllm-box") in result.backend


@pytest.mark.parametrize("kind", [0, 1], ids=["llama-server", "openai"])
@pytest.mark.parametrize(("mode", "error", "words"), [
    ("http500", ServerRefused, ["HTTP 500", "the model crashed (out of memory)"]),
    ("http401", ServerRefused, ["HTTP 401", "API key"]),
    ("malformed", BackendError, ["malformed event"]),
    ("truncated", ServerUnavailable, ["ended before it was complete"]),
    ("closed", BackendError, ["ended before the reply was complete"]),
    ("error_event", BackendError, ["reported an error", "slot crashed"]),
    ("timeout", ServerUnavailable, ["no answer within 0.5 s"]),
])
def test_a_failing_server_names_itself_and_leaves_the_conversation_as_it_was(
        fake_server, kind, mode, error, words, tmp_path) -> None:
    backend = _backends(fake_server.url, timeout=0.5 if mode == "timeout" else 5.0)[kind]
    agent = _agent(backend)
    agent.run_turn("Hello there")  # one good turn first: there is a conversation to lose
    before = _snapshot(agent, tmp_path)
    fake_server.mode = mode
    with pytest.raises(error) as caught:
        agent.run_turn("And now?")
    message = str(caught.value)
    assert ("gpu-box" if kind == 0 else "vllm-box") in message and fake_server.url in message
    for word in words:
        assert word in message
    assert _snapshot(agent, tmp_path) == before
    fake_server.mode = "ok"
    assert agent.run_turn("And now?").reply == "Hello"  # the conversation goes on from where it was


@pytest.mark.parametrize("kind", [0, 1], ids=["llama-server", "openai"])
def test_a_refused_connection_says_the_server_is_not_running(kind, tmp_path) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    agent = _agent(_backends(url)[kind])
    before = _snapshot(agent, tmp_path)
    with pytest.raises(ServerUnavailable, match=r"connection was refused \(is the server running\?\)") as caught:
        agent.run_turn("Hello there")
    assert url in str(caught.value)
    assert _snapshot(agent, tmp_path) == before


def test_an_unknown_host_is_named() -> None:
    with pytest.raises(ServerUnavailable, match="no-such-host.invalid"):
        ServerConnection("http://no-such-host.invalid:8080", "far").get_json("/props")


def test_a_server_that_is_not_a_llama_cpp_server_is_said_so(fake_server) -> None:
    backend = LlamaServerBackend(fake_server.url + "/v1", "wrong")  # /v1/props is a 404 here
    with pytest.raises(ServerRefused, match="HTTP 404.*right kind of server"):
        backend.model_context_size("")


def test_bad_addresses_are_refused_before_any_call() -> None:
    for url in ("localhost:8080", "ftp://x", "http://", "http://host:99999"):
        with pytest.raises(BackendError, match="server address|port"):
            ServerConnection(url)


def test_an_openai_server_without_structured_output_fails_the_node_that_needs_it(fake_server) -> None:
    backend = OpenAIBackend(fake_server.url, "plain", structured_output="none")
    session = backend.session("classify", "", 0)
    request = GenerationRequest([ChatMessage("user", "hi")], 8, choices=["greet", "other"])
    with pytest.raises(BackendError, match="node 'classify' needs its output constrained to one of its labels"):
        session.generate(request)
    # a plain reply still works on that server
    assert session.generate(GenerationRequest([ChatMessage("user", "hi")], 8)).text == "Hello"


def test_cancel_closes_a_stalled_request_at_once(fake_server) -> None:
    """Stop while the server has not sent a byte: the socket is shut, the call returns cancelled."""
    fake_server.mode = "timeout"
    backend = LlamaServerBackend(fake_server.url, "slow", timeout=30)
    session = backend.session("reply", "", 0)
    cancel = threading.Event()
    threading.Timer(0.2, cancel.set).start()
    started = time.monotonic()
    result = session.generate(GenerationRequest([ChatMessage("user", "hi")], 8), cancel=cancel)
    assert result.cancelled and result.finish_reason == "cancelled"
    assert time.monotonic() - started < 5  # not the 30 s timeout (bench_remote measures how soon)


def test_a_node_hears_when_the_server_serves_another_model_or_has_too_few_slots(fake_server) -> None:
    fake_server.slots = 1
    backend = LlamaServerBackend(fake_server.url, "small-box")
    agent = Agent(load_asset(ROOT / "resources" / "examples" / "intent_router.json"), backend,
                  str(ROOT / "resources" / "examples"))
    fake_server.mode = "ok"
    result = agent.run_turn("Hello there")
    first, second = result.diagnostics.nodes[:2]
    assert any("names the model SmolLM2-135M-Instruct.Q4_1.gguf, but small-box" in w and "serves fake.gguf" in w
               for w in first.warnings)
    assert not any("no free slot" in w for w in first.warnings)
    assert any("no free slot on small-box" in w and "(1 slots)" in w for w in second.warnings)
    assert second.tokens.cold


# --- issue 20: the transport's bounds, against the hostile server ---------------------------------------

MB = 1024 * 1024
SLACK = 10.0  # seconds a bounded call may take beyond its limit on a loaded machine (never reached when it works)


def _stop_when_hit(server: HostileServer) -> threading.Event:
    """A cancel event set (from another thread, as Stop is) once the request reached the hostile mode."""
    cancel = threading.Event()

    def press() -> None:
        if server.hit.wait(SLACK):
            cancel.set()

    threading.Thread(target=press, daemon=True).start()
    return cancel


def _cancelled_in_time(call, cancel: threading.Event, server: HostileServer) -> float:
    """Run ``call``, which must raise Cancelled; the seconds from Stop to its return. The server saw
    the client leave."""
    with pytest.raises(Cancelled):
        call()
    stopped = time.monotonic()
    assert cancel.is_set()
    assert server.disconnected.wait(SLACK), "the server never saw the client leave"
    return stopped


@pytest.mark.parametrize("mode", ["huge", "huge_declared"])
def test_a_huge_body_is_refused_at_the_cap_not_read_whole(mode) -> None:
    """Issue 20.4: a 1 GB /v1/models body peaked at 2.1 GB; now reading stops at max_body_bytes."""
    import tracemalloc

    with hostile_server(mode, at="/v1/models", huge_bytes=16 * MB) as server:
        conn = ServerConnection(server.url + "/v1", "big-box", max_body_bytes=MB)
        tracemalloc.start()
        try:
            with pytest.raises(BackendError, match=r"big-box.*/models answered with more than 1 MB") as caught:
                conn.get_json("/models")
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert not isinstance(caught.value, ServerUnavailable)  # a bad answer, not a server to move away from
    assert peak < 4 * MB


def test_an_event_of_endless_data_lines_is_refused_at_the_cap() -> None:
    """Issue 20.4: data: lines with no blank line between them grew one event to 4.5 GB."""
    import tracemalloc

    with hostile_server("huge", huge_bytes=16 * MB) as server:
        conn = ServerConnection(server.url, "box", max_event_bytes=256 * 1024)
        tracemalloc.start()
        try:
            with pytest.raises(BackendError, match="sent an event larger than 256 KB"):
                list(conn.stream("/completion", {"prompt": [1]}))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert peak < 4 * MB


@pytest.mark.parametrize("path", ["/tokenize", "/apply-template"])
def test_stop_ends_a_plain_request_to_a_dripping_server(path) -> None:
    """Issue 20.6: plain requests had no cancel path, and one byte a second never trips the
    per-byte timeout. Now Stop shuts the socket whether the call is given ``cancel`` or runs in a
    ``cancel_scope`` (as a backend's generate does)."""
    with hostile_server("dripping", at=path, drip_seconds=0.05) as server:
        conn = ServerConnection(server.url, "drip-box", timeout=30)
        cancel = _stop_when_hit(server)
        _cancelled_in_time(lambda: conn.post_json(path, {"content": "a b", "messages": []}, cancel=cancel),
                           cancel, server)
        server.reset("dripping", at=path)
        cancel = _stop_when_hit(server)

        def in_scope() -> None:
            with cancel_scope(cancel):
                conn.post_json(path, {"content": "a b", "messages": []})

        _cancelled_in_time(in_scope, cancel, server)


def test_stop_ends_a_connection_close_stream_stalled_after_its_first_token() -> None:
    """Issue 20.6: http.client drops conn.sock for a Connection: close answer, so Stop did nothing
    (still running 20 s later). The socket is ours now."""
    with hostile_server("close_stream", max_seconds=30) as server:
        conn = ServerConnection(server.url, "close-box", timeout=60)
        cancel = threading.Event()
        events = []

        def read() -> None:
            for event in conn.stream("/completion", {"prompt": [1]}, cancel):
                events.append(event)
                threading.Timer(0.05, cancel.set).start()  # Stop pressed while the next read is blocked

        started = time.monotonic()
        _cancelled_in_time(read, cancel, server)
    assert events == [{"content": "Hel", "stop": False}]
    assert time.monotonic() - started < SLACK  # not the server's 30 s


def test_stop_ends_a_connection_that_is_never_accepted() -> None:
    """Stop while connecting: a server whose listen queue is full neither accepts nor refuses."""
    with unaccepting_port() as port:
        conn = ServerConnection(f"http://127.0.0.1:{port}", "full-box")
        cancel = threading.Event()
        threading.Timer(0.1, cancel.set).start()
        started = time.monotonic()
        with pytest.raises(Cancelled):
            conn.get_json("/props", cancel=cancel)
        assert time.monotonic() - started < SLACK  # well before the connect timeout... or its end
        started = time.monotonic()
        with pytest.raises(ServerUnavailable, match=r"full-box.*no complete answer within 0.3 s"):
            ServerConnection(f"http://127.0.0.1:{port}", "full-box", deadline=0.3).get_json("/props")
        assert time.monotonic() - started < SLACK


@pytest.mark.parametrize(("mode", "at"), [("endless", "generate"), ("endless_tokens", "generate"),
                                          ("dripping", "generate"), ("dripping", "/props"),
                                          ("endless", "/props"), ("timeout", "/props")])
def test_a_request_ends_at_its_deadline_whatever_the_server_sends(mode, at) -> None:
    """Issue 20.7: pings, tokens or a byte at a time each reset the per-byte timeout; the deadline
    bounds the request as a whole."""
    with hostile_server(mode, at=at, drip_seconds=0.05) as server:
        conn = ServerConnection(server.url, "slow-box", timeout=5, deadline=0.5)
        started = time.monotonic()
        with pytest.raises(ServerUnavailable, match=r"slow-box.*no complete answer within 0.5 s"):
            if at == "generate":
                list(conn.stream("/completion", {"prompt": [1]}))
            else:
                conn.get_json(at)
        assert 0.4 < time.monotonic() - started < 0.5 + SLACK
        assert server.disconnected.wait(SLACK)


@pytest.mark.parametrize("at", ["/props", "generate"])
def test_json_nested_deeply_is_a_clear_error_not_a_recursion_error(at) -> None:
    """Issue 20.8: JSON nested 100,000 deep raised RecursionError from json.loads."""
    with hostile_server("nested", at=at) as server:
        conn = ServerConnection(server.url, "deep-box")
        with pytest.raises(BackendError, match=r"deep-box.*nested too deeply to read"):
            if at == "generate":
                list(conn.stream("/completion", {"prompt": [1]}))
            else:
                conn.get_json(at)


def test_an_address_with_a_password_never_shows_it() -> None:
    with hostile_server("http500", at="/props") as server:
        port = server.url.rsplit(":", 1)[1]
        secret_url = f"http://ada:s3cr%40t@127.0.0.1:{port}"
        conn = ServerConnection(secret_url)
        assert conn.label == server.url and display_url(secret_url) == server.url
        with pytest.raises(ServerRefused) as caught:
            conn.get_json("/props")
        assert server.url in str(caught.value) and "ada" not in str(caught.value)
        assert server.headers_seen[-1]["Authorization"].startswith("Basic ")  # the credentials are used
        named = ServerConnection(secret_url, secret_url)  # a backend names a profile-less server by its address
        assert "s3cr" not in named.label and "ada" not in named.label
    with pytest.raises(ServerUnavailable) as caught:
        ServerConnection(f"http://ada:s3cr3t@127.0.0.1:{_closed_port()}").get_json("/props")
    assert "s3cr3t" not in str(caught.value) and "ada" not in str(caught.value)
    assert display_url("gpu-box") == "gpu-box"  # a profile's name is not an address


@pytest.mark.parametrize("auth", ["key", "password"])
def test_a_server_echoing_the_key_and_terminal_codes_is_quoted_safely(auth) -> None:
    with hostile_server("echo", at="/props") as server:
        if auth == "key":
            conn = ServerConnection(server.url, "echo-box", api_key="sk-live-0123456789")
            secrets = ["sk-live-0123456789"]
        else:
            conn = ServerConnection(server.url.replace("//", "//ada:hunter2@"), "echo-box")
            secrets = ["hunter2", "YWRhOmh1bnRlcjI="]  # and its Basic header
        with pytest.raises(ServerRefused, match="HTTP 401") as caught:
            conn.get_json("/props")
    message = str(caught.value)
    assert "[redacted]" in message
    for secret in secrets:
        assert secret not in message and secret not in caught.value.detail
    assert not any(c in message for c in "\x1b\r\x07")
    assert "\\x1b[31mInvalid key" in message


def test_printable_escapes_control_characters_only() -> None:
    assert printable("naïve — ok") == "naïve — ok"
    assert printable("\x1b[2J\rline\n\u202eevil\x85") == "\\x1b[2J\\rline\\n\\u202eevil\\x85"
