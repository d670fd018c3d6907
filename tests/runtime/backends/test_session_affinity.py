"""Session affinity and concurrency on the remote backends, against a small recording server.

A call for a conversation with an id names it on every request (``X-Session-ID``) and in the
generation request's ``user`` field, so a router with session affinity can keep the conversation
on one server; a call without one sends neither. Calls of two conversations go out at once: the
server holds the first until the second arrives (with a deadline, so a client that serialized
them fails the test instead of hanging). The same on llama.cpp's real server is in
test_session_affinity_server.py."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from runtime.backends import llama_server as llama_server_module
from runtime.backends.base import Backend, ChatMessage, GenerationRequest, GenerationResult
from runtime.backends.http import MAX_SESSION_KEY_CHARS, SESSION_HEADER, session_key
from runtime.backends.llama_server import LlamaServerBackend
from runtime.backends.openai_server import OpenAIBackend
from runtime.problems import BackendError

HOLD_SECONDS = 20.0  # how long the server holds the first call for the second (only a failing test waits it out)
JOIN_SECONDS = 60.0  # how long the test waits for its calls to end
GENERATE = ("/completion", "/v1/chat/completions")
MESSAGES = [ChatMessage("system", "You are a guard."), ChatMessage("user", "Hello there")]
LLAMA, OPENAI = "llama-server", "openai"


@dataclass
class Seen:
    path: str
    headers: list[tuple[str, str]]
    body: Any

    def header(self, name: str) -> str | None:
        values = [v for k, v in self.headers if k.lower() == name.lower()]
        assert len(values) <= 1, f"{name} sent {len(values)} times"
        return values[0] if values else None


@dataclass
class RecordingServer:
    """What every request carried; ``hold``: the first generation waits for a second one."""

    slots: int = 4
    hold: bool = False
    seen: list[Seen] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    generations: int = 0
    second_arrived: threading.Event = field(default_factory=threading.Event)
    overlapped: list[bool] = field(default_factory=list)  # for the held call: did the second come meanwhile
    url: str = ""

    def generation_requests(self) -> list[Seen]:
        with self.lock:
            return [s for s in self.seen if s.path in GENERATE]

    def clear(self) -> None:
        with self.lock:
            self.seen.clear()


def _reply_for(body: Any) -> str:
    """Each conversation gets a reply of its own, so crossed streams would show."""
    user = body.get("user") if isinstance(body, dict) else None
    return f"Hello {user}" if user else "Hello"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # the client keeps plain requests' connections alive
    server_state: RecordingServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()

    def _answer(self) -> None:
        state = self.server_state
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        with state.lock:
            state.seen.append(Seen(self.path, list(self.headers.items()), body))
        if self.path in GENERATE:
            self._generate(body)
        elif self.path == "/props":
            self._json({"default_generation_settings": {"n_ctx": 4096}, "total_slots": state.slots,
                        "model_path": "/models/fake.gguf"})
        elif self.path == "/v1/models":
            self._json({"object": "list", "data": [{"id": "fake", "max_model_len": 4096}]})
        elif self.path == "/tokenize":
            words = (body.get("content") or body.get("prompt") or "").split()
            self._json({"tokens": list(range(len(words))), "count": len(words)})
        elif self.path == "/apply-template":
            self._json({"prompt": "".join(f"<{m['role']}>{m['content']}</>" for m in body["messages"])
                        + "<assistant>"})
        else:
            self._json({"error": {"message": "no such page"}}, 404)

    def _generate(self, body: Any) -> None:
        state = self.server_state
        if state.hold:
            with state.lock:
                first = state.generations == 0
                state.generations += 1
            if first:
                state.overlapped.append(state.second_arrived.wait(HOLD_SECONDS))
            else:
                state.second_arrived.set()
        reply = _reply_for(body)
        head, tail = reply[:3], reply[3:]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        if self.path == "/completion":
            picked = body["id_slot"] if body["id_slot"] >= 0 else state.slots - 1  # the server's own pick
            events = [{"content": head, "stop": False},
                      {"content": tail, "stop": True, "stop_type": "eos", "id_slot": picked,
                       "timings": {"cache_n": 0, "prompt_n": 3, "predicted_n": 2}}]
        else:
            events = [{"choices": [{"delta": {"content": head}, "finish_reason": None}]},
                      {"choices": [{"delta": {"content": tail}, "finish_reason": "stop"}],
                       "usage": {"prompt_tokens": 5, "completion_tokens": 2}}]
        data = b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events)
        if self.path != "/completion":
            data += b"data: [DONE]\n\n"
        self.wfile.write(data)
        self.wfile.flush()

    def _json(self, answer: Any, status: int = 200) -> None:
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def recording() -> Iterator[RecordingServer]:
    state = RecordingServer()
    handler = type("Handler", (_Handler,), {"server_state": state})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), name="recording-server", daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield state
    finally:
        state.second_arrived.set()  # a held request lets go
        llama_server_module._POOLS.pop(state.url, None)  # a later test's server on this port starts with free slots
        server.shutdown()
        server.server_close()
        thread.join(10)


def _backend(kind: str, url: str) -> Backend:
    if kind == LLAMA:
        return LlamaServerBackend(url, "box", timeout=30)
    return OpenAIBackend(url, "box", timeout=30, structured_output="none")


def _call(backend: Backend, key: str, session_id: str) -> GenerationResult:
    return backend.session(key, "", 0).generate(GenerationRequest(list(MESSAGES), 8, session_id=session_id))


# --- the session's key ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [LLAMA, OPENAI])
def test_every_request_of_a_call_names_its_session_in_x_session_id_and_the_reply_request_in_user(
        recording, kind) -> None:
    backend = _backend(kind, recording.url)
    session = backend.session("npc-7/reply", "", 0)
    recording.clear()  # (what session() asked the server is not part of the call)
    result = session.generate(GenerationRequest(list(MESSAGES), 8, session_id="npc-7"))
    assert result.text == "Hello npc-7"
    with recording.lock:
        seen = list(recording.seen)
    assert seen and [s.header(SESSION_HEADER) for s in seen] == ["npc-7"] * len(seen)
    generation = recording.generation_requests()
    assert len(generation) == 1 and generation[0].body["user"] == "npc-7"
    if kind == LLAMA:  # the template and the tokenizer were asked in the call, and named it too
        assert {s.path for s in seen} >= {"/apply-template", "/tokenize", "/completion"}


@pytest.mark.parametrize("kind", [LLAMA, OPENAI])
def test_a_call_without_a_session_sends_neither_the_header_nor_user(recording, kind) -> None:
    result = _call(_backend(kind, recording.url), "reply", "")
    assert result.text == "Hello"
    with recording.lock:
        seen = list(recording.seen)
    assert seen and all(s.header(SESSION_HEADER) is None for s in seen)
    assert all("user" not in s.body for s in recording.generation_requests())


def test_a_session_id_with_a_line_break_is_sent_percent_encoded_and_never_starts_a_header(recording) -> None:
    sneaky = "a\r\nX-Injected: 1"
    _call(_backend(LLAMA, recording.url), "reply", sneaky)
    generation = recording.generation_requests()[0]
    assert generation.header(SESSION_HEADER) == "a%0D%0AX-Injected%3A%201" == generation.body["user"]
    assert generation.header("X-Injected") is None


def test_session_keys_are_the_id_itself_for_parley_serve_ids_and_stable_for_others() -> None:
    assert session_key("npc_7.guard-2") == "npc_7.guard-2"
    assert session_key("Ürsel 1") == session_key("Ürsel 1") == "%C3%9Crsel%201"


def test_a_session_id_too_long_to_send_is_a_clear_error_before_anything_is_sent(recording) -> None:
    backend = _backend(LLAMA, recording.url)
    session = backend.session("reply", "", 0)
    recording.clear()
    with pytest.raises(BackendError, match=rf"session id .* too long to send .*at most {MAX_SESSION_KEY_CHARS}"):
        session.generate(GenerationRequest(list(MESSAGES), 8, session_id="x" * (MAX_SESSION_KEY_CHARS + 1)))
    assert recording.seen == []


# --- concurrency ---------------------------------------------------------------------------------


def _at_once(backend: Backend, calls: list[tuple[str, str]]) -> list[GenerationResult | BaseException]:
    results: list[GenerationResult | BaseException | None] = [None] * len(calls)

    def run(i: int, key: str, session_id: str) -> None:
        try:
            results[i] = _call(backend, key, session_id)
        except Exception as exc:  # noqa: BLE001 - the thread hands it to the test, which reports it
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i, *call)) for i, call in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN_SECONDS)
    assert not any(t.is_alive() for t in threads), "a call did not end"
    return results  # type: ignore[return-value]


@pytest.mark.parametrize("kind", [LLAMA, OPENAI])
def test_two_conversations_calls_on_one_backend_reach_the_server_at_once(recording, kind) -> None:
    recording.hold = True
    backend = _backend(kind, recording.url)
    results = _at_once(backend, [("npc-1/reply", "npc-1"), ("npc-2/reply", "npc-2")])
    assert recording.overlapped == [True]  # the second call arrived while the first was still open
    assert [r.text if isinstance(r, GenerationResult) else r for r in results] == ["Hello npc-1", "Hello npc-2"]
    if kind == LLAMA:  # each in a slot of its own, so the server batches them
        assert sorted(s.body["id_slot"] for s in recording.generation_requests()) == [0, 1]


def test_once_every_slot_is_leased_a_call_lets_the_server_pick_an_idle_slot(recording) -> None:
    """Naming a held slot would queue the call behind that slot's call while others sit idle."""
    recording.slots = 1
    recording.hold = True
    backend = _backend(LLAMA, recording.url)
    results = _at_once(backend, [("npc-1/reply", "npc-1"), ("npc-2/reply", "npc-2")])
    assert recording.overlapped == [True]
    assert all(isinstance(r, GenerationResult) for r in results), results
    slots = {s.body["user"]: s.body["id_slot"] for s in recording.generation_requests()}
    assert sorted(slots.values()) == [-1, 0]
    shared = next(r for r in results if isinstance(r, GenerationResult) and r.cold and r.warnings)
    assert any("no free slot on box" in w and "the server picked slot 0" in w for w in shared.warnings)


def test_a_released_conversations_slot_goes_to_the_next_conversation(recording) -> None:
    """parley serve releases a deleted conversation's nodes ("SESSION/NODE"): its slot is free again."""
    recording.slots = 1
    backend = _backend(LLAMA, recording.url)
    _call(backend, "npc-1/reply", "npc-1")
    assert isinstance(backend, LlamaServerBackend) and list(backend.sessions()) == ["npc-1/reply"]
    backend.release("npc-1/reply")
    assert backend.sessions() == {}
    result = _call(backend, "npc-2/reply", "npc-2")
    assert not any("no free slot" in w for w in result.warnings)
    assert [s.body["id_slot"] for s in recording.generation_requests()] == [0, 0]
