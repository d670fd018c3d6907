"""Turn streams that survive a dropped connection: the turn runs on, every event has an id, and the
rest comes from ``GET /v1/sessions/{id}/runs/{run}/events`` after ``Last-Event-ID``. The Python client
resumes by itself; when no server has the turn any more it fails with ``turn_lost`` and the line."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import runtime.serve.npcs as npcs_module
from runtime.backends.scripted import ScriptedBackend
from runtime.resources import examples_dir
from runtime.serve.client import ParleyClient, ServerEvent, TurnFailed
from runtime.serve.server import running_server
from tests.samples import example_on_sample_model

DEADLINE = 60.0  # seconds: generous for a busy 2-core machine; only a hang reaches it
MODEL_WAIT = 300.0
LINE = "Tell me about the inn"
SESSION = "innkeeper"


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """Set it to let a turn go on past its first token (so a connection drops mid-reply)."""
    release, real_put = threading.Event(), npcs_module.Stream.put

    def put(stream, item, last: bool = False) -> None:
        real_put(stream, item, last)
        if item.kind == "token":
            release.wait(DEADLINE)

    monkeypatch.setattr(npcs_module.Stream, "put", put)
    yield release
    release.set()


def frames(raw: bytes) -> list[dict[str, str]]:
    """The SSE events in ``raw``, each as its fields (id, event, data); comments left out."""
    out = []
    for block in raw.decode().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if line and not line.startswith(":"))
        if fields:
            out.append(fields)
    return out


def unbroken(lines: list[str]) -> list[ServerEvent]:
    """Every event of ``lines``' turns on a fresh session nobody disturbs (ids and runs aside)."""
    backend = ScriptedBackend()
    try:
        with running_server(backend, [examples_dir()]) as url, ParleyClient(url) as client:
            client.create_session("chat.json", id=SESSION)
            return [e for line in lines for e in client.turn(SESSION, line).events]
    finally:
        backend.close()


def same(events: list[ServerEvent]) -> list[tuple[str, dict]]:
    return [(e.kind, {k: v for k, v in e.data.items() if k not in ("run", "diagnostics", "prompts")})
            for e in events]


def test_a_dropped_connection_leaves_the_turn_running_and_the_rest_comes_after_last_event_id(held) -> None:
    backend = ScriptedBackend()
    try:
        with running_server(backend, [examples_dir()]) as url, ParleyClient(url) as client:
            client.create_session("chat.json", id=SESSION)
            with client.http.stream("POST", f"/v1/sessions/{SESSION}/turns", json={"line": LINE}) as response:
                lines = []
                for text in response.iter_lines():
                    lines.append(text)
                    if lines[-2:-1] == ["event: token"]:
                        break
            # gone mid-reply, without asking for a cancel: closed unread, the connection is dropped
            before = frames(("\n".join(lines) + "\n\n").encode())
            held.set()
            run = json.loads(before[0]["data"])["run"]
            assert [f["id"] for f in before] == [f"{run}.{n}" for n in range(1, len(before) + 1)]
            assert before[-1]["event"] == "token"
            with client.http.stream("GET", f"/v1/sessions/{SESSION}/runs/{run}/events",
                                    headers={"Last-Event-ID": before[-1]["id"]}) as rest:
                assert rest.status_code == 200
                after = frames(rest.read())
            assert after[0]["id"] == f"{run}.{len(before) + 1}"  # nothing twice, nothing missed
            assert after[-1]["event"] == "turn_finished"
            seen = [ServerEvent(f["event"], json.loads(f["data"])) for f in before + after]
            assert same(seen) == same(unbroken([LINE]))
            assert [t.line for t in client.turns(SESSION)] == [LINE]  # kept: the turn ran to its end
            # the run stays readable from any point until the next one begins
            with client.http.stream("GET", f"/v1/sessions/{SESSION}/runs/{run}/events?after=0") as again:
                assert len(frames(again.read())) == len(before) + len(after)
    finally:
        backend.close()


def test_a_resume_names_what_is_wrong_with_its_run_or_last_event_id() -> None:
    backend = ScriptedBackend()
    try:
        with running_server(backend, [examples_dir()]) as url, ParleyClient(url) as client:
            client.create_session("chat.json", id=SESSION)
            run = client.turn(SESSION, LINE).events[0].data["run"]
            unknown = client.http.get(f"/v1/sessions/{SESSION}/runs/0123abcd/events")
            assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "unknown_run")
            assert "say its line again" in unknown.json()["error"]["message"]
            wrong = client.http.get(f"/v1/sessions/{SESSION}/runs/{run}/events", headers={"Last-Event-ID": "other.3"})
            assert (wrong.status_code, wrong.json()["error"]["code"]) == (400, "bad_request")
            assert "Last-Event-ID" in wrong.json()["error"]["message"]
            client.turn(SESSION, "And a room?")  # the next run begins: the first is gone
            gone = client.http.get(f"/v1/sessions/{SESSION}/runs/{run}/events")
            assert gone.json()["error"]["code"] == "unknown_run"
    finally:
        backend.close()


class Cut(httpx.SyncByteStream):
    """A turn's stream that breaks just after its first token event, as a dropped connection does."""

    def __init__(self, inner: httpx.SyncByteStream) -> None:
        self.inner = inner

    def __iter__(self) -> Iterator[bytes]:
        seen = b""
        for chunk in self.inner:
            seen += chunk
            at = seen.find(b"event: token")
            end = seen.find(b"\n\n", at) if at >= 0 else -1
            if end >= 0:
                yield seen[:end + 2]
                raise httpx.ReadError("the connection dropped (cut by the test)")
        yield seen

    def close(self) -> None:
        self.inner.close()


class Breaking(httpx.BaseTransport):
    """Breaks the first turn's stream; sends resumes to ``resume_to`` when given (another server)."""

    def __init__(self, resume_to: str | None = None) -> None:
        self.inner = httpx.HTTPTransport()
        self.resume_to = resume_to
        self.cut = 0
        self.resumes: list[str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if "/runs/" in request.url.path:
            self.resumes.append(request.headers.get("last-event-id", ""))
            if self.resume_to is not None:
                request.url = request.url.copy_with(port=int(self.resume_to.rsplit(":", 1)[1]))
                request.headers["host"] = request.url.netloc.decode()
        response = self.inner.handle_request(request)
        if request.method == "POST" and request.url.path.endswith("/turns") and not self.cut:
            self.cut += 1
            response.stream = Cut(response.stream)
        return response

    def close(self) -> None:
        self.inner.close()


def test_the_python_client_resumes_a_broken_stream_by_itself_and_gives_no_event_twice() -> None:
    backend = ScriptedBackend()
    transport = Breaking()
    try:
        with running_server(backend, [examples_dir()]) as url, ParleyClient(url, transport=transport) as client:
            client.create_session("chat.json", id=SESSION)
            outcome = client.turn(SESSION, LINE)
            assert transport.cut == 1 and len(transport.resumes) == 1
            assert transport.resumes[0].endswith(".3")  # turn_started, node_started, token: then the break
            assert same(outcome.events) == same(unbroken([LINE]))
            assert outcome.reply == unbroken([LINE])[-1].data["reply"]
    finally:
        backend.close()


def test_when_no_server_has_the_turn_the_client_fails_it_as_turn_lost_with_the_line(held) -> None:
    backend, other_backend = ScriptedBackend(), ScriptedBackend()
    try:
        with running_server(other_backend, [examples_dir()]) as other, \
                running_server(backend, [examples_dir()]) as url:
            with ParleyClient(other) as elsewhere:
                elsewhere.create_session("chat.json", id=SESSION)  # the same session, on a server that never ran the turn
            transport = Breaking(resume_to=other)
            with ParleyClient(url, transport=transport, resume_waits=(0.01,)) as client:
                client.create_session("chat.json", id=SESSION)
                with pytest.raises(TurnFailed) as lost:
                    client.turn(SESSION, LINE)
                held.set()
            assert (lost.value.code, lost.value.line) == ("turn_lost", LINE)
            assert "say the line again" in lost.value.message
    finally:
        backend.close()
        other_backend.close()


@pytest.mark.model
def test_on_the_sample_model_a_dropped_stream_is_resumed_and_the_reply_is_whole(sample_model, tmp_path: Path) -> None:
    from runtime.backends.llama import LlamaBackend

    example_on_sample_model("chat", sample_model, tmp_path, 24)
    backend = LlamaBackend(asset_dir=tmp_path)
    transport = Breaking()
    try:
        with running_server(backend, [tmp_path]) as url, \
                ParleyClient(url, transport=transport, timeout=MODEL_WAIT) as client:
            broken, fresh = client.create_session("chat.json").id, client.create_session("chat.json").id
            resumed = client.turn(broken, LINE)
            assert transport.cut == 1 and len(transport.resumes) == 1
            whole = client.turn(fresh, LINE)
            assert resumed.reply == whole.reply
            tokens = [e.data["text"] for e in resumed.events if e.kind == "token"]
            assert tokens == [e.data["text"] for e in whole.events if e.kind == "token"]  # none twice, none missed
    finally:
        backend.close()
