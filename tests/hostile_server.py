"""A hostile inference server for tests: a real HTTP server on 127.0.0.1 in a thread.

It answers like a llama.cpp server and an OpenAI-compatible one (``/props``, ``/v1/models``,
``/tokenize``, ``/apply-template``, ``/completion``, ``/v1/chat/completions``) correctly, so a turn
gets through a backend's setup, until a request reaches the endpoint ``at`` (by default the
generation call); that one is answered in the server's ``mode``:

=================  =============================================================================
``ok``             correctly (the control)
``http500``        HTTP 500 with an error message; ``http401``: HTTP 401 "Invalid API Key"
``echo``           HTTP 401 whose message echoes the Authorization header, with ANSI codes and CR
``timeout``        nothing at all until the server closes (a stalled server)
``malformed``      JSON that does not parse / an event that does not
``truncated``      an event cut in the middle; ``closed``: a stream that ends with no final event
``error_event``    an event that reports an error
``endless``        ``: ping`` comments forever (a JSON endpoint: a chunked body of spaces forever)
``endless_tokens`` one token after another, forever
``dripping``       the right answer, one byte every ``drip_seconds`` (headers too)
``huge``           a body of ``huge_bytes`` with no length (a stream: one event of endless data: lines)
``huge_declared``  a body that says ``Content-Length`` is 1 GB
``nested``         JSON nested ``NESTED_DEPTH`` deep (an event's too)
``wrong_types``    fields of the wrong type or out of range: ``WRONG_TYPES[at][variant]``
``close_stream``   a stream with ``Connection: close`` that sends one token, then nothing
=================  =============================================================================

Everything endless is bounded: it stops when the client leaves (``disconnected`` is then set),
when the server is closed, or after ``max_seconds``. ``hits`` counts requests that reached the
mode; ``hit`` is set at the first.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

GENERATE = "generate"  # the generation endpoint of either kind: /completion, /v1/chat/completions
NESTED_DEPTH = 100_000

# Answers with fields of the wrong type or out of range, as raw JSON text (Infinity and 1e400 are
# not something json.dumps writes).
WRONG_TYPES: dict[str, list[str]] = {
    "/props": [
        '{"default_generation_settings": {"n_ctx": 4096}, "total_slots": 1099511627776, "model_path": "f.gguf"}',
        '{"default_generation_settings": {"n_ctx": Infinity}, "total_slots": 4}',
        '{"default_generation_settings": {"n_ctx": 1e400}, "total_slots": 4}',
        '{"default_generation_settings": {"n_ctx": 4096}, "total_slots": -3}',
        '{"default_generation_settings": {"n_ctx": "4096"}, "total_slots": 4}',
    ],
    "/tokenize": [
        '{"tokens": [-1, -2, -3]}',
        '{"tokens": "1 2 3"}',
        '{"tokens": [1e400]}',
    ],
    "/v1/models": [
        '{"object": "list", "data": [{"id": 5, "max_model_len": 4096}]}',
        '{"object": "list", "data": [{"id": "fake", "max_model_len": Infinity}]}',
        '{"object": "list", "data": [{"id": "fake", "max_model_len": -1}]}',
    ],
    "/apply-template": ['{"prompt": 12}'],
    "/completion": [
        '{"content": 5, "stop": false}',
        '{"content": "lo", "stop": true, "timings": {"cache_n": Infinity, "prompt_n": 3, "predicted_n": 2}}',
        '{"content": "lo", "stop": true, "timings": {"cache_n": 0, "prompt_n": -5, "predicted_n": 1e400}}',
    ],
    "/v1/chat/completions": [
        '{"choices": "not a list"}',
        '{"choices": [{"delta": {"content": 7}, "finish_reason": null}]}',
        ('{"choices": [{"delta": {"content": "lo"}, "finish_reason": "stop"}], '
         '"usage": {"prompt_tokens": Infinity, "completion_tokens": -4}}'),
    ],
}


class ClientLeft(Exception):
    """The client closed the connection: stop answering."""


class _Done(Exception):
    """The server is closing, or the answer ran for ``max_seconds``: stop answering."""


class HostileServer:
    """The server; change ``mode``, ``at`` and ``variant`` between requests."""

    def __init__(self, mode: str = "ok", at: str = GENERATE, *, variant: int = 0, slots: int = 4,
                 drip_seconds: float = 0.1, huge_bytes: int = 16 * 1024 * 1024, max_seconds: float = 20.0) -> None:
        self.mode, self.at, self.variant, self.slots = mode, at, variant, slots
        self.drip_seconds, self.huge_bytes, self.max_seconds = drip_seconds, huge_bytes, max_seconds
        self.closing = threading.Event()
        self.disconnected = threading.Event()
        self.hit = threading.Event()
        self.hits = 0
        self.headers_seen: list[dict[str, str]] = []
        handler = type("HostileHandler", (_Handler,), {"hostile": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._server.block_on_close = False
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="hostile-server", daemon=True)

    def start(self) -> HostileServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self.closing.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)

    def reset(self, mode: str = "ok", at: str = GENERATE, variant: int = 0) -> None:
        self.mode, self.at, self.variant = mode, at, variant
        self.hit.clear()
        self.disconnected.clear()
        self.hits = 0


@contextmanager
def hostile_server(mode: str = "ok", at: str = GENERATE, **options) -> Iterator[HostileServer]:
    server = HostileServer(mode, at, **options).start()
    try:
        yield server
    finally:
        server.close()


@contextmanager
def unaccepting_port() -> Iterator[int]:
    """A port whose listen queue is full, so a new connection waits (is never accepted nor refused)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    try:
        for _ in range(8):  # Linux queues backlog + 1; the rest wait in SYN retries
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))
            fillers.append(filler)
        yield port
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    hostile: HostileServer

    def log_message(self, *args) -> None:  # quiet
        pass

    # --- routing --------------------------------------------------------------------------------

    def do_GET(self) -> None:
        self._route(None)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else {}
        self._route(body)

    def _route(self, body) -> None:
        hostile = self.hostile
        hostile.headers_seen.append(dict(self.headers))
        path = self.path
        generate = path in ("/completion", "/v1/chat/completions")
        at = hostile.at == path or (hostile.at == GENERATE and generate)
        if path == "/tokenize" and body is not None and "content" not in body:  # llama.cpp's answer to vLLM's shape
            return self._json(400, {"error": {"message": "\"content\" must be provided"}})
        if at and hostile.mode != "ok":
            hostile.hits += 1
            hostile.hit.set()
            try:
                return self._hostile(path, hostile.mode, generate)
            except (ClientLeft, BrokenPipeError, ConnectionResetError):
                hostile.disconnected.set()
                self.close_connection = True
                return None
            except _Done:
                self.close_connection = True
                return None
        answer = self._correct(path, body)
        if answer is None:
            return self._json(404, {"error": {"message": "no such page"}})
        if generate:
            return self._stream(path == "/completion")
        return self._json(200, answer)

    def _correct(self, path: str, body):
        hostile = self.hostile
        if path == "/props":
            return {"default_generation_settings": {"n_ctx": 4096}, "total_slots": hostile.slots,
                    "model_path": "/models/fake.gguf"}
        if path == "/v1/models":
            return {"object": "list", "data": [{"id": "fake", "max_model_len": 4096}]}
        if path == "/health":
            return {"status": "ok"}
        if path == "/tokenize":
            return {"tokens": list(range(len(body["content"].split()))), "count": 1}
        if path == "/apply-template":
            return {"prompt": "".join(f"<{m['role']}>{m['content']}</>" for m in body["messages"]) + "<assistant>"}
        if path in ("/completion", "/v1/chat/completions"):
            return {}
        return None

    # --- writing, bounded -------------------------------------------------------------------------

    def _alive(self, started: float) -> None:
        hostile = self.hostile
        if hostile.closing.is_set() or time.monotonic() - started > hostile.max_seconds:
            raise _Done()

    def _write(self, data: bytes) -> None:
        self.wfile.write(data)
        self.wfile.flush()

    def _json(self, status: int, body, raw: str | None = None, close: bool = False) -> None:
        data = (raw if raw is not None else json.dumps(body)).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if close:
            self.send_header("Connection", "close")
        self.end_headers()
        self._write(data)

    def _stream_head(self, close: bool = False) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        if close:
            self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def _event(self, payload: str) -> None:
        self._write(f"data: {payload}\n\n".encode())

    def _stream(self, llama: bool) -> None:
        self._stream_head()
        self._event(_piece(llama, "Hel"))
        self._event(_final(llama))
        if not llama:
            self._event("[DONE]")

    # --- the modes --------------------------------------------------------------------------------

    def _hostile(self, path: str, mode: str, generate: bool) -> None:
        hostile = self.hostile
        llama = path == "/completion"
        started = time.monotonic()
        if mode == "timeout":
            return self._stall(started)
        if mode == "http500":
            return self._json(500, {"error": {"code": 500, "message": "the model crashed (out of memory)"}})
        if mode == "http401":
            return self._json(401, {"error": {"message": "Invalid API Key"}})
        if mode == "echo":
            auth = self.headers.get("Authorization", "")
            return self._json(401, {"error": {"message": f"\x1b[31mInvalid key\x1b[0m\r in header {auth!r} for "
                                                         f"{self.headers.get('Host')}\x07"}})
        if mode == "dripping":
            return self._drip(path, started)
        if mode == "huge_declared":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream" if generate else "application/json")
            self.send_header("Content-Length", str(1 << 30))
            self.end_headers()
            return self._spaces(started, hostile.huge_bytes)
        if mode == "close_stream":
            self._stream_head(close=True)
            self._event(_piece(llama, "Hel"))
            return self._stall(started)
        if generate:
            return self._hostile_stream(llama, mode, started)
        return self._hostile_json(path, mode, started)

    def _hostile_json(self, path: str, mode: str, started: float) -> None:
        hostile = self.hostile
        if mode == "malformed":
            return self._json(200, None, raw='{"tokens": [1, 2, "prompt": ')
        if mode == "nested":
            return self._json(200, None, raw="[" * NESTED_DEPTH + "]" * NESTED_DEPTH)
        if mode == "wrong_types":
            return self._json(200, None, raw=WRONG_TYPES[path][hostile.variant])
        if mode in ("huge", "endless"):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.close_connection = True
            chunk = b"[" + b"0," * 32767 if mode == "huge" else b" " * 64
            sent = 0
            while mode == "endless" or sent < hostile.huge_bytes:
                self._alive(started)
                self._write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sent += len(chunk)
                if mode == "endless" and hostile.closing.wait(0.01):
                    raise _Done()
                chunk = b"0," * 32768 if mode == "huge" else chunk
            self._write(b"0\r\n\r\n")
            return None
        raise AssertionError(f"mode {mode!r} has no answer for {path}")

    def _hostile_stream(self, llama: bool, mode: str, started: float) -> None:
        hostile = self.hostile
        self._stream_head()
        self._event(_piece(llama, "Hel"))
        if mode == "malformed":
            self._event('{"content": "lo", "stop": tru')
        elif mode == "truncated":
            self._write(b'data: {"content": "lo"')  # cut in the middle of an event
        elif mode == "error_event":
            self._event(json.dumps({"error": {"code": 500, "message": "slot crashed"}}))
        elif mode == "closed":
            pass  # the connection ends with no final event
        elif mode == "nested":
            self._event("[" * NESTED_DEPTH + "]" * NESTED_DEPTH)
        elif mode == "wrong_types":
            self._event(WRONG_TYPES["/completion" if llama else "/v1/chat/completions"][hostile.variant])
            if not llama:
                self._event("[DONE]")
        elif mode in ("endless", "endless_tokens"):
            while True:
                self._alive(started)
                self._write(b": ping\n\n" if mode == "endless" else f"data: {_piece(llama, 'a')}\n\n".encode())
                if hostile.closing.wait(0.01):
                    raise _Done()
        elif mode == "huge":
            line = b"data: " + b"x" * 65536 + b"\n"  # data: lines with no blank line between them: one event
            sent = 0
            while sent < hostile.huge_bytes:
                self._alive(started)
                self._write(line)
                sent += len(line)
        else:
            raise AssertionError(f"mode {mode!r} has no stream")

    def _drip(self, path: str, started: float) -> None:
        """The right answer (status line and headers too), a byte at a time."""
        hostile = self.hostile
        if path in ("/completion", "/v1/chat/completions"):
            llama = path == "/completion"
            body = f"data: {_piece(llama, 'Hel')}\n\ndata: {_final(llama)}\n\n".encode()
            kind = "text/event-stream"
        else:
            body = json.dumps(self._correct(path, {"content": "a b", "messages": []})).encode()
            kind = "application/json"
        answer = (f"HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
                  "Connection: close\r\n\r\n").encode() + body
        self.close_connection = True
        for i in range(len(answer)):
            self._alive(started)
            self._write(answer[i:i + 1])
            if hostile.closing.wait(hostile.drip_seconds):
                raise _Done()

    def _stall(self, started: float) -> None:
        """Send nothing more; notice when the client leaves (its end of the connection reads as closed)."""
        conn = self.connection
        while True:
            self._alive(started)
            readable, _, _ = select.select([conn], [], [], 0.05)
            if readable:
                try:
                    if not conn.recv(1, socket.MSG_PEEK):
                        raise ClientLeft()
                except OSError:
                    raise ClientLeft() from None
                if self.hostile.closing.wait(0.05):  # the client sent more: still there
                    raise _Done()

    def _spaces(self, started: float, total: int) -> None:
        sent = 0
        while sent < total:
            self._alive(started)
            self._write(b" " * 65536)
            sent += 65536


def _piece(llama: bool, text: str) -> str:
    if llama:
        return json.dumps({"content": text, "stop": False})
    return json.dumps({"choices": [{"delta": {"content": text}, "finish_reason": None}]})


def _final(llama: bool) -> str:
    if llama:
        return json.dumps({"content": "lo", "stop": True, "stop_type": "eos",
                           "timings": {"cache_n": 0, "prompt_n": 3, "predicted_n": 2}})
    return json.dumps({"choices": [{"delta": {"content": "lo"}, "finish_reason": "stop"}]})
