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
from runtime.backends.http import ServerConnection, ServerRefused, ServerUnavailable
from runtime.backends.llama_server import LlamaServerBackend
from runtime.backends.openai_server import OpenAIBackend
from runtime.dialogue.dialog_file import save_history
from runtime.problems import BackendError
from tests.hostile_server import HostileServer, hostile_server

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
