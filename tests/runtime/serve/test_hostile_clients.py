"""Hostile and broken clients: garbage frames, huge bodies, slow clients, a thousand idle connections,
unknown ids, malformed JSON and clients that vanish mid-turn. Each gets a typed answer (or its
connection closed), and the server keeps serving everyone else."""

from __future__ import annotations

import contextlib
import json
import random
import resource
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

import runtime.serve.npcs as npcs_module
from runtime.backends.scripted import ScriptedBackend, default_reply
from runtime.resources import examples_dir
from runtime.serve.client import ParleyClient, ParleyError, ServerEvent
from runtime.serve.npcs import Limits
from runtime.serve.server import running_server
from tests.samples import example_on_sample_model

DEADLINE = 60.0  # seconds: generous for a busy 2-core machine; only a hang reaches it
MODEL_WAIT = 300.0  # the same, for turns on the real sample model
JSON = {"content-type": "application/json"}
GONE = 20  # clients gone mid-turn at once: more than running_server's 8 turns computing at once
TOOL_LINE = "How many arrows are there?"  # tool_calling.json on the scripted backend asks check_stock once


@pytest.fixture
def url(backend: ScriptedBackend) -> Iterator[str]:
    """A server whose header and body deadlines outlast any test's hold (each bounded by DEADLINE):
    tests that hold a connection open on purpose must not race the deadlines, which have tests of their own."""
    with running_server(backend, [examples_dir()], header_seconds=DEADLINE * 10, body_seconds=DEADLINE * 10) as url:
        yield url


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def wait_for(condition: Callable[[], bool], what: str, seconds: float = DEADLINE) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"still waiting for {what} after {seconds:g} s")
        time.sleep(0.02)  # polling the condition, not standing in for it


def assert_serving(url: str) -> None:
    """The server still answers, and still runs a whole turn with a tool call for a well-behaved client."""
    with ParleyClient(url) as client:
        assert client.health().status == "ok"
        npc = client.create_session("tool_calling.json")
        assert client.turn(npc.id, TOOL_LINE, tools=lambda call: "240").reply.endswith("240")
        client.delete_session(npc.id)


def typed_error(response: httpx.Response, code: str, status: int) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json"), response.text
    assert "Traceback" not in response.text and 'File "' not in response.text
    error = response.json()["error"]
    assert error["code"] == code, error
    assert error["message"]
    return error


def read_until_closed(sock: socket.socket) -> bytes:
    chunks = []
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


# --- garbage on the wire ----------------------------------------------------------------------------------

GARBAGE = {
    "random bytes": bytes(random.Random(22).randrange(256) for _ in range(4096)),
    "NUL bytes": b"\x00" * 512 + b"\r\n\r\n",
    "TLS hello": bytes.fromhex("16030100a5010000a10303") + b"\x00" * 64,
    "no request line": b"\r\n\r\n\r\n\r\n",
    "bad method": b"G\x00T /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    "header without colon": b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nnot a header\r\n\r\n",
    "no host": b"GET /v1/health HTTP/1.1\r\n\r\n",
    "two lengths": b"POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\nhello",
    "length and chunked": (b"POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 4\r\n"
                           b"Transfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n0\r\n\r\n"),
    "negative length": b"POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -1\r\n\r\n",
    "bad chunk size": b"POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n",
    "endless request line": b"GET /" + b"a" * 300_000,
    "endless header": b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Long: " + b"b" * 300_000,
    "many headers": b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-A: 1\r\n" * 20_000 + b"\r\n",
}


@pytest.mark.parametrize("name", GARBAGE)
def test_garbage_gets_a_400_or_a_closed_connection_and_others_are_served(url: str, name: str) -> None:
    with socket.create_connection(("127.0.0.1", port_of(url)), timeout=DEADLINE) as sock:
        with contextlib.suppress(OSError):  # the server may hang up mid-send (a broken pipe, a reset, not connected)
            sock.sendall(GARBAGE[name])
            sock.shutdown(socket.SHUT_WR)  # done sending (garbage held open is a slow client: tested below)
        answer = read_until_closed(sock)  # the server closes it: a hang here is a failure at the deadline
    assert answer == b"" or answer.startswith((b"HTTP/1.1 400", b"HTTP/1.1 413", b"HTTP/1.1 431")), answer[:200]
    assert b"Traceback" not in answer
    if answer:  # issue 39: uvicorn's own refusals were plain text; every error is the typed JSON
        head, _, body = answer.partition(b"\r\n\r\n")
        assert b"content-type: application/json" in head.lower(), answer[:300]
        assert json.loads(body)["error"]["code"] == "bad_request"
    assert_serving(url)


def test_a_websocket_upgrade_is_refused_before_any_route(url: str) -> None:
    """Issue 39: uvicorn, with no WebSocket library, passed an upgrade request on to the route."""
    upgrade = {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
               "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
    error = typed_error(httpx.get(f"{url}/v1/sessions", headers=upgrade, timeout=DEADLINE), "bad_request", 400)
    assert "takes no WebSocket" in error["message"]


def test_headers_past_64_kib_sent_whole_are_refused_as_json(url: str) -> None:
    """Issue 39: 70 KB of headers in one piece was answered (h11 limits only a head that arrives in
    pieces), where the docs say 64 KiB."""
    answer = httpx.get(f"{url}/v1/health", headers={"X-Long": "b" * 70_000}, timeout=DEADLINE)
    error = typed_error(answer, "bad_request", 400)
    assert "at most 65536 are read" in error["message"]
    assert httpx.get(f"{url}/v1/health", headers={"X-Long": "b" * 60_000}, timeout=DEADLINE).status_code == 200
    assert_serving(url)


def test_a_flood_of_garbage_from_many_connections_leaves_the_server_serving(url: str) -> None:
    def hostile(seed: int) -> None:
        noise = random.Random(seed)
        for _ in range(5):
            with socket.create_connection(("127.0.0.1", port_of(url)), timeout=DEADLINE) as sock, \
                    contextlib.suppress(OSError):
                sock.sendall(bytes(noise.randrange(256) for _ in range(noise.randrange(1, 5000))))
                sock.shutdown(socket.SHUT_WR)
                read_until_closed(sock)

    threads = [threading.Thread(target=hostile, args=(seed,)) for seed in range(20)]
    for thread in threads:
        thread.start()
    assert_serving(url)  # while the flood goes on
    for thread in threads:
        thread.join(DEADLINE)
    assert not any(thread.is_alive() for thread in threads)
    assert_serving(url)


# --- huge bodies ------------------------------------------------------------------------------------------


def test_a_huge_body_is_cut_off_while_others_are_served(url: str) -> None:
    """50 MiB streamed at a 1 MiB limit: the server answers 413 (or hangs up) long before the end."""
    outcome: list[bytes] = []

    def flood() -> None:
        with socket.create_connection(("127.0.0.1", port_of(url)), timeout=DEADLINE) as sock:
            try:
                sock.sendall(b"POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                             b"Transfer-Encoding: chunked\r\n\r\n")
                chunk = b"%x\r\n%s\r\n" % (1 << 16, b" " * (1 << 16))
                for _ in range(800):
                    sock.sendall(chunk)
            except OSError:
                pass  # cut off: the answer is in the socket's buffer, or the connection is gone
            outcome.append(read_until_closed(sock))

    thread = threading.Thread(target=flood)
    thread.start()
    assert_serving(url)
    thread.join(DEADLINE)
    assert not thread.is_alive()
    assert outcome[0] == b"" or outcome[0].startswith(b"HTTP/1.1 413"), outcome[0][:200]
    if outcome[0]:
        assert json.loads(outcome[0].split(b"\r\n\r\n", 1)[1])["error"]["code"] == "too_large"
    assert httpx.get(f"{url}/v1/sessions", timeout=DEADLINE).json() == {"sessions": []}


def test_a_huge_tool_result_is_refused_and_the_turn_still_takes_a_proper_one(url: str) -> None:
    with ParleyClient(url) as client:
        npc = client.create_session("tool_calling.json")

        def tools(call) -> str:
            response = client.http.post(f"/v1/sessions/{npc.id}/tool_results",
                                        json={"call_id": call.call_id, "result": "x" * (2 << 20)})
            typed_error(response, "too_large", 413)
            return "240"

        assert client.turn(npc.id, TOOL_LINE, tools=tools).reply.endswith("240")


# --- slow clients -----------------------------------------------------------------------------------------


def trickle(sock: socket.socket, data: bytes) -> None:
    """One byte per send, Nagle off: the server gets the request in many pieces."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for i in range(len(data)):
        sock.send(data[i:i + 1])


def test_a_client_sending_its_request_byte_by_byte_does_not_hold_up_the_others(url: str) -> None:
    request = b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: a-very-slow-client\r\nAccept: */*\r\n\r\n"
    half_sent, others_done = threading.Event(), threading.Event()
    answer: list[bytes] = []

    def slow() -> None:
        with socket.create_connection(("127.0.0.1", port_of(url)), timeout=DEADLINE) as sock:
            trickle(sock, request[:40])
            half_sent.set()
            others_done.wait(DEADLINE)  # the request stays half sent while everyone else is served
            trickle(sock, request[40:])
            answer.append(read_response(sock))

    thread = threading.Thread(target=slow)
    thread.start()
    assert half_sent.wait(DEADLINE)
    assert_serving(url)
    others_done.set()
    thread.join(DEADLINE)
    assert answer and answer[0].startswith(b"HTTP/1.1 200"), answer
    assert json.loads(answer[0].split(b"\r\n\r\n", 1)[1])["status"] == "ok"


def test_clients_holding_half_sent_bodies_do_not_hold_up_the_others(url: str) -> None:
    body = json.dumps({"asset": "chat.json"}).encode()
    head = (b"POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body))
    socks = [socket.create_connection(("127.0.0.1", port_of(url)), timeout=DEADLINE) for _ in range(50)]
    try:
        for sock in socks:
            trickle(sock, head + body[:5])
        assert_serving(url)
        for sock in socks[:3]:  # a slow client that does finish is answered in full
            sock.sendall(body[5:])
            answer = read_response(sock)
            assert answer.startswith(b"HTTP/1.1 201"), answer
    finally:
        for sock in socks:
            sock.close()
    with ParleyClient(url) as client:
        assert len(client.sessions()) == 3


def read_response(sock: socket.socket) -> bytes:
    """One answer with a Content-Length."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"the server closed the connection mid-answer: {data!r}"
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection mid-answer"
        body += chunk
    return head + b"\r\n\r\n" + body


def test_a_client_that_does_not_read_its_long_stream_does_not_hold_up_the_others() -> None:
    """Its turn streams 13 MB the client leaves unread (more than the sockets buffer, so the server's writes
    back up); everyone else
    is served meanwhile, and when it does read, the whole stream is there, to turn_finished."""
    word = "w" * 100_000

    def reply(key: str, request) -> str:
        return " ".join([word] * 40) if key.startswith("slow-reader/") else default_reply(key, request)

    backend = ScriptedBackend(reply)
    try:
        with running_server(backend, [examples_dir()]) as url, ParleyClient(url) as client:
            client.create_session("chat.json", id="slow-reader")
            sock = post_turn(url, "slow-reader", "Tell me everything")
            wait_for(lambda: client.session("slow-reader").busy or client.turns("slow-reader") != [],
                     "the long turn to start")
            assert_serving(url)
            data = read_until(sock, b"event: turn_finished")
            sock.close()
            assert data.count(b"event: token") == 40 and data.count(word.encode()) >= 40
            wait_for(lambda: not client.session("slow-reader").busy, "the session to be idle")
            assert client.session("slow-reader").turns == 1
    finally:
        backend.close()


def test_pipelined_requests_are_answered_in_order(url: str) -> None:
    with socket.create_connection(("127.0.0.1", port_of(url)), timeout=DEADLINE) as sock:
        sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                     b"GET /v1/sessions/nobody HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                     b"GET /v1/assets HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        answers = [b"HTTP/1.1 " + a for a in read_until_closed(sock).split(b"HTTP/1.1 ")[1:]]
    assert [a.split(b" ", 2)[1] for a in answers] == [b"200", b"404", b"200"]
    assert b"unknown_session" in answers[1] and b"chat.json" in answers[2]


# --- a thousand idle connections --------------------------------------------------------------------------

IDLE = 1000
FLOOD = 5000  # past uvicorn's default connection limit (4096), which then answered everyone 503


@pytest.fixture
def enough_files() -> Iterator[None]:
    """Both ends of every connection live in this process: raise the soft open-files limit if it is too low."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 2 * FLOOD + 512
    if soft != resource.RLIM_INFINITY and soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            pytest.skip(f"the hard open-files limit is {hard}; {need} are needed")
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_thousand_idle_connections_while_a_whole_turn_completes(url: str, enough_files: None) -> None:
    idle: list[socket.socket] = []
    try:
        for _ in range(IDLE):
            idle.append(socket.create_connection(("127.0.0.1", port_of(url)), timeout=DEADLINE))
        assert_serving(url)
        with ParleyClient(url) as client:
            npc = client.create_session("tool_calling.json")
            first = client.turn(npc.id, TOOL_LINE, tools=lambda call: "240")
            second = client.turn(npc.id, TOOL_LINE, tools=lambda call: "12")
            assert (first.turn, second.turn) == (0, 1) and second.reply.endswith("12")
        for sock in idle[::25]:  # the idle ones were kept, not dropped: each still gets an answer
            sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert read_response(sock).startswith(b"HTTP/1.1 200")
    finally:
        for sock in idle:
            sock.close()
    assert_serving(url)


def test_more_idle_connections_than_uvicorns_own_limit_do_not_shut_others_out(url: str, enough_files: None) -> None:
    idle: list[socket.socket] = []
    try:
        for _ in range(FLOOD):
            idle.append(socket.create_connection(("127.0.0.1", port_of(url)), timeout=DEADLINE))
        assert idle[-1].getpeername()  # connected: the server has (or will have) accepted every one
        assert_serving(url)
    finally:
        for sock in idle:
            sock.close()


def health_eventually(url: str) -> httpx.Response:
    """GET /v1/health, again if the server hung up on the try (on a starved machine a prompt client
    could meet a short header deadline): the answer, never a timing threshold."""
    deadline = time.monotonic() + DEADLINE
    while True:
        try:
            return httpx.get(f"{url}/v1/health", timeout=DEADLINE)
        except httpx.RemoteProtocolError:
            if time.monotonic() > deadline:
                raise


def test_connections_that_do_not_finish_their_request_in_time_are_closed(backend: ScriptedBackend) -> None:
    with running_server(backend, [examples_dir()], header_seconds=2.0, body_seconds=2.0) as url:
        def connect(data: bytes) -> socket.socket:
            sock = socket.create_connection(("127.0.0.1", port_of(url)), timeout=DEADLINE)
            trickle(sock, data)
            return sock

        silent = connect(b"")
        trickling = connect(b"GET /v1/hea")
        half_body = connect(b"POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                            b"Content-Length: 40\r\n\r\n{\"asset\":")
        kept_alive = connect(b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert read_response(kept_alive).startswith(b"HTTP/1.1 200")
        trickle(kept_alive, b"GET /v1/sess")  # the next request's header, never finished
        for sock in (silent, trickling, kept_alive):
            assert read_until_closed(sock) == b""  # closed; a hang is a failure at the deadline
            sock.close()
        answer = read_until_closed(half_body)
        half_body.close()
        assert answer.startswith(b"HTTP/1.1 400"), answer
        error = json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]
        assert error["code"] == "bad_request" and "did not arrive within 2 s" in error["message"]
        assert health_eventually(url).json()["status"] == "ok"


def test_requests_past_max_requests_are_refused_as_limit_reached_json(backend: ScriptedBackend) -> None:
    with running_server(backend, [examples_dir()], max_requests=3) as url, ParleyClient(url) as client:
        npc = client.create_session("chat.json")
        watchers = []
        for _ in range(3):  # three open streams: three requests being answered
            sock = socket.create_connection(("127.0.0.1", port_of(url)), timeout=DEADLINE)
            sock.sendall(b"GET /v1/sessions/%s/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % npc.id.encode())
            read_until(sock, b"event: watching")
            watchers.append(sock)
        try:
            error = typed_error(httpx.get(f"{url}/v1/health", timeout=DEADLINE), "limit_reached", 429)
            assert "3 requests at once" in error["message"]
            watchers.pop().close()
            wait_for(lambda: httpx.get(f"{url}/v1/health", timeout=DEADLINE).status_code == 200,
                     "a request to be answered once a stream closed")
        finally:
            for sock in watchers:
                sock.close()


# --- unknown ids ------------------------------------------------------------------------------------------

SESSION_ROUTES = [
    ("GET", "", None), ("DELETE", "", None), ("GET", "/history", None), ("PUT", "/history", {"format": "x"}),
    ("PATCH", "/variables", {"variables": {}}), ("PATCH", "/params", {"nodes": {}}), ("POST", "/rewind", {"turns": 0}),
    ("POST", "/turns", {"line": "hi"}), ("POST", "/regenerate", {"turn": 0}), ("POST", "/cancel", None),
    ("POST", "/tool_results", {"call_id": "abc", "result": "x"}), ("GET", "/turns", None), ("GET", "/turns/0", None),
    ("GET", "/events", None),
]


@pytest.mark.parametrize("session", ["no-such-npc", "x" * 3000, "npc-1-000000", "%00", "..", "%2e%2e%2fhealth"])
def test_an_unknown_session_gets_unknown_session_on_every_route(url: str, session: str) -> None:
    # ".." and an encoded "../health" are folded into another path (by the client or by uvicorn's decoding):
    # that path is no route, a typed 404 (or 405) as well
    codes = {"unknown_session"} if session not in ("..", "%2e%2e%2fhealth") else {"unknown_session", "not_found", "method_not_allowed"}
    with httpx.Client(base_url=url, timeout=DEADLINE) as http:
        http.post("/v1/sessions", json={"asset": "chat.json", "id": "a-real-one"})
        for method, route, body in SESSION_ROUTES:
            response = http.request(method, f"/v1/sessions/{session}{route}", json=body)
            assert response.status_code in (404, 405), (method, route, response.text)
            no_traceback(response)
            error = response.json()["error"]
            assert error["code"] in codes, (method, route, error)
            assert len(error["message"]) < 200, "an unknown id is not echoed in full"
        assert [s["id"] for s in http.get("/v1/sessions").json()["sessions"]] == ["a-real-one"]


def test_unknown_turns_nodes_and_calls_get_their_own_404s(url: str) -> None:
    with ParleyClient(url) as client:
        npc = client.create_session("tool_calling.json")
        other = client.create_session("tool_calling.json")
        http = client.http
        typed_error(http.get(f"/v1/sessions/{npc.id}/turns/12345"), "unknown_turn", 404)
        typed_error(http.get(f"/v1/sessions/{npc.id}/turns/-1"), "unknown_turn", 404)
        typed_error(http.get(f"/v1/sessions/{npc.id}/turns/abc"), "bad_request", 400)
        typed_error(http.post(f"/v1/sessions/{npc.id}/regenerate", json={"turn": 0}), "unknown_turn", 404)
        typed_error(http.patch(f"/v1/sessions/{npc.id}/params", json={"nodes": {"no_node": {"temperature": 0.1}}}),
                    "unknown_node", 404)
        typed_error(http.post(f"/v1/sessions/{npc.id}/tool_results", json={"call_id": "abc", "result": "x"}),
                    "unknown_call", 404)  # no turn running

        def tools(call) -> str:
            for session, call_id in ((npc.id, "0" * 16), (npc.id, "../" + call.call_id), (npc.id, call.call_id * 9),
                                     (other.id, call.call_id)):  # a guess, a mangled id, another session's call
                response = http.post(f"/v1/sessions/{session}/tool_results", json={"call_id": call_id, "result": "x"})
                typed_error(response, "unknown_call", 404)
            calls.append(call.call_id)
            return "240"

        calls: list[str] = []
        assert client.turn(npc.id, TOOL_LINE, tools=tools).reply.endswith("240")  # the right id still counts
        typed_error(http.post(f"/v1/sessions/{npc.id}/tool_results", json={"call_id": calls[0], "result": "again"}),
                    "unknown_call", 404)  # answered already, and its turn is over
        assert client.turn_detail(npc.id, 0).reply.endswith("240")
        assert client.session(other.id).turns == 0


# --- malformed JSON and wrong types -----------------------------------------------------------------------

BODY_ROUTES: dict[str, tuple[str, str, list[object]]] = {
    # route -> (method, path under /v1 with {id}, bodies of the wrong shape or type)
    "create": ("POST", "/sessions", [{"asset": 5}, {"asset": ["chat.json"]}, {"variables": {}},
                                     {"asset": "chat.json", "variables": "x"},
                                     {"asset": "chat.json", "variables": {"player_name": [1]}},
                                     {"asset": "chat.json", "variables": {"player_name": {"a": 1}}},
                                     {"asset": "chat.json", "id": 7}, {"asset": "chat.json", "id": "a/b"},
                                     {"asset": "chat.json", "id": ""}, {"asset": "chat.json", "surprise": 1},
                                     {"asset": "chat.json", "variables": {"no_such_variable": 1}}]),
    "turn": ("POST", "/sessions/{id}/turns", [{}, {"line": None}, {"line": 5}, {"line": ["hi"]},
                                              {"line": "hi", "instructions": 3}, {"line": "hi", "mock_tools": "maybe"},
                                              {"line": "hi", "extra": True}]),
    "regenerate": ("POST", "/sessions/{id}/regenerate", [{}, {"turn": "first"}, {"turn": -1}, {"turn": 1.5},
                                                         {"turn": 0, "instructions": []}]),
    "variables": ("PATCH", "/sessions/{id}/variables", [{}, {"variables": []}, {"variables": {"player_name": None}},
                                                        {"variables": {"player_name": [1]}},
                                                        {"variables": {"no_such_variable": "x"}}]),
    "params": ("PATCH", "/sessions/{id}/params", [{}, {"nodes": []}, {"nodes": {"reply": "hot"}},
                                                  {"nodes": {"reply": {"temperature": "hot"}}},
                                                  {"nodes": {"reply": {"max_tokens": -5}}},
                                                  {"nodes": {"reply": {"seed": 1e300}}},
                                                  {"nodes": {"reply": {"system_prompt": 5}}},
                                                  {"nodes": {"reply": {"top_p": [0.5]}}}]),
    "rewind": ("POST", "/sessions/{id}/rewind", [{}, {"turns": "x"}, {"turns": -1}, {"turns": None}, {"turns": 99}]),
    "tool_results": ("POST", "/sessions/{id}/tool_results", [{}, {"call_id": 5, "result": "x"},
                                                             {"call_id": "abc", "result": {"a": 1}},
                                                             {"call_id": "abc"}]),
}
NOT_JSON = [b"{not json", b"", b"{", b'{"line": "hi"', b"\xff\xfe\x00", b"null", b"[1, 2]", b'"a string"', b"42",
            b'{"line": "hi"} trailing', b"{'single': 'quotes'}"]


def no_traceback(response: httpx.Response) -> None:
    assert "Traceback" not in response.text and 'File "' not in response.text, response.text


@pytest.mark.parametrize("route", BODY_ROUTES)
def test_malformed_json_and_wrong_types_are_bad_requests_without_tracebacks(url: str, route: str) -> None:
    method, path, wrong = BODY_ROUTES[route]
    with ParleyClient(url) as client:
        npc = client.create_session("chat.json")
        target = "/v1" + path.format(id=npc.id)
        for raw in NOT_JSON:
            response = client.http.request(method, target, content=raw, headers=JSON)
            typed_error(response, "bad_request", 400)
        for body in wrong:
            response = client.http.request(method, target, json=body)
            error = typed_error(response, "bad_request", 400)
            assert error["message"] != "There was an error parsing the body", body
        state = client.session(npc.id)
        assert (state.turns, state.busy, state.variables["player_name"]) == (0, False, "Traveller")
        assert len(client.sessions()) == 1


@pytest.mark.parametrize(("raw", "headers", "expected"), [
    (b"{not json", JSON, "Expecting property name"),
    (b'{"asset": "chat.json"}', {}, "application/json"),
], ids=["not JSON", "no content type"])
def test_a_body_that_is_not_json_is_told_so(url: str, raw: bytes, headers: dict[str, str], expected: str) -> None:
    response = httpx.post(f"{url}/v1/sessions", content=raw, headers=headers, timeout=DEADLINE)
    error = typed_error(response, "bad_request", 400)
    assert expected in error["message"] and "JSON" in error["message"], error["message"]


def test_a_history_that_is_not_a_history_is_bad_history_without_tracebacks(url: str) -> None:
    with ParleyClient(url) as client:
        npc = client.create_session("chat.json")
        client.turn(npc.id, "Hello")
        history = client.export_history(npc.id)
        target = f"/v1/sessions/{npc.id}/history"
        for raw in NOT_JSON:
            response = client.http.put(target, content=raw, headers=JSON)
            assert response.json()["error"]["code"] in ("bad_history", "bad_request"), raw
            no_traceback(response)
        for body in ([], {"turns": "x"}, {**history, "turns": 7}, {**history, "turns": [{"player": 5}]},
                     {**history, "version": "zz"}, {**history, "current": -3}, {**history, "variables": []}):
            response = client.http.put(target, json=body)
            typed_error(response, "bad_history", 422)
        assert client.export_history(npc.id) == history
        assert client.session(npc.id).turns == 1


def test_a_deeply_nested_history_is_bad_history(url: str) -> None:
    with ParleyClient(url) as client:
        npc = client.create_session("chat.json")
        response = client.http.put(f"/v1/sessions/{npc.id}/history", content=b"[" * 100_000, headers=JSON)
        no_traceback(response)
        assert response.json()["error"]["code"] == "bad_history"


def test_deeply_nested_bodies_elsewhere_are_bad_requests(url: str) -> None:
    with ParleyClient(url) as client:
        npc = client.create_session("chat.json")
        deep = b"[" * 100_000 + b"]" * 100_000
        for method, path in (("POST", "/v1/sessions"), ("PATCH", f"/v1/sessions/{npc.id}/params"),
                             ("POST", f"/v1/sessions/{npc.id}/turns")):
            response = client.http.request(method, path, content=b'{"nodes": {"reply": ' + deep + b"}}",
                                           headers=JSON)
            typed_error(response, "bad_request", 400)
        assert_serving(url)


@pytest.mark.parametrize("value", [b"NaN", b"Infinity", b"-Infinity", b"1e999"])
def test_a_variable_that_is_not_a_finite_number_is_a_bad_request(url: str, value: bytes) -> None:
    with ParleyClient(url) as client:
        npc = client.create_session("chat.json")
        response = client.http.patch(f"/v1/sessions/{npc.id}/variables",
                                     content=b'{"variables": {"player_name": %s}}' % value, headers=JSON)
        typed_error(response, "bad_request", 400)


# --- clients that go away mid-turn ------------------------------------------------------------------------


class Observer:
    """A watch on a session in a thread: every event it sees, and a condition to wait on."""

    def __init__(self, client: ParleyClient, session: str) -> None:
        self.events: list[ServerEvent] = []
        self.changed = threading.Condition()
        self.watch = client.watch(session)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        self.wait(lambda kinds: "watching" in kinds, "the watch to open")

    def _run(self) -> None:
        for event in self.watch:
            with self.changed:
                self.events.append(event)
                self.changed.notify_all()

    def wait(self, condition: Callable[[list[str]], bool], what: str) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: condition([e.kind for e in self.events]), DEADLINE), (
                f"still waiting for {what}; seen {[e.kind for e in self.events]}")

    def close(self) -> None:
        self.watch.close()
        self.thread.join(DEADLINE)


def post_turn(url: str, session: str, line: str) -> socket.socket:
    """A turn asked for on a raw socket, by a client that wants it cancelled when it goes (the tests
    here are of such clients; by default a turn runs on: tests/runtime/serve/test_resume.py)."""
    sock = socket.create_connection(("127.0.0.1", port_of(url)), timeout=DEADLINE)
    body = json.dumps({"line": line, "cancel_on_disconnect": True}).encode()
    sock.sendall(b"POST /v1/sessions/%s/turns HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (session.encode(), len(body), body))
    return sock


def read_until(sock: socket.socket, marker: bytes) -> bytes:
    data = bytearray()
    while True:
        chunk = sock.recv(1 << 20)
        assert chunk, f"the stream ended before {marker!r}: {bytes(data[-300:])!r}"
        data += chunk
        if marker in data[-(len(chunk) + len(marker)):]:  # the new bytes only: megabytes of stream stay linear
            return bytes(data)


def test_a_client_gone_while_its_turn_waits_for_a_tool_cancels_the_turn(url: str) -> None:
    with ParleyClient(url) as client:
        npc = client.create_session("tool_calling.json")
        client.turn(npc.id, TOOL_LINE, tools=lambda call: "240")
        history = client.export_history(npc.id)
        observer = Observer(client, npc.id)
        try:
            sock = post_turn(url, npc.id, TOOL_LINE)
            read_until(sock, b"event: tool_request")
            assert client.session(npc.id).busy
            sock.close()  # gone without answering
            observer.wait(lambda kinds: "turn_failed" in kinds, "the turn to fail")
        finally:
            observer.close()
        assert observer.events[-1].data["error"]["code"] == "cancelled"
        wait_for(lambda: not client.session(npc.id).busy, "the session to be idle")
        assert client.session(npc.id).turns == 1
        assert client.export_history(npc.id) == history
        assert client.turn(npc.id, TOOL_LINE, tools=lambda call: "7").turn == 1  # and it takes the next turn


@pytest.mark.parametrize("read_first", [b"event: node_started", b""])
def test_a_client_gone_while_its_turn_generates_cancels_the_turn(monkeypatch: pytest.MonkeyPatch,
                                                                 read_first: bytes) -> None:
    """The backend holds the reply until the server has seen the client go, so the turn is still mid-generation.
    The client reads the stream's start first, or nothing at all (gone as soon as it asked)."""
    started, release = threading.Event(), threading.Event()
    stopped = threading.Event()

    def held_reply(key: str, request) -> str:
        started.set()
        release.wait(DEADLINE)
        return default_reply(key, request)

    real_stop = npcs_module.NPCs.stop

    def stop(running) -> None:
        real_stop(running)
        stopped.set()

    monkeypatch.setattr(npcs_module.NPCs, "stop", staticmethod(stop))
    backend = ScriptedBackend(held_reply)
    try:
        with running_server(backend, [examples_dir()]) as url, ParleyClient(url) as client:
            npc = client.create_session("chat.json")
            observer = Observer(client, npc.id)
            try:
                sock = post_turn(url, npc.id, "Tell me about the inn")
                if read_first:
                    read_until(sock, read_first)
                    assert started.wait(DEADLINE)
                sock.close()
                assert stopped.wait(DEADLINE), "the server never noticed its client went away"
                release.set()
                observer.wait(lambda kinds: "turn_failed" in kinds or "turn_finished" in kinds, "the turn to end")
            finally:
                release.set()
                observer.close()
            assert observer.events[-1].kind == "turn_failed"
            assert observer.events[-1].data["error"]["code"] == "cancelled"
            wait_for(lambda: not client.session(npc.id).busy, "the session to be idle")
            assert client.session(npc.id).turns == 0
            assert client.turns(npc.id) == []
            assert client.turn(npc.id, "Hello").turn == 0
    finally:
        backend.close()


def test_many_clients_gone_mid_turn_leave_every_session_idle_and_unchanged(url: str) -> None:
    with ParleyClient(url) as client:
        npcs = [client.create_session("tool_calling.json").id for _ in range(GONE)]
        socks = [post_turn(url, npc, TOOL_LINE) for npc in npcs]
        for sock in socks:
            read_until(sock, b"event: tool_request")
        for sock in socks:
            sock.close()
        wait_for(lambda: not any(s.busy for s in client.sessions()), "every session to be idle")
        assert [s.turns for s in client.sessions()] == [0] * GONE
    assert_serving(url)


def test_clients_that_never_answer_their_tools_do_not_starve_other_sessions(backend: ScriptedBackend) -> None:
    limits = Limits(tool_timeout=DEADLINE * 4)  # the stalled turns outlast the wait below
    with running_server(backend, [examples_dir()], limits=limits, workers=2) as url, ParleyClient(url) as client:
        stalled = [client.create_session("tool_calling.json").id for _ in range(2)]
        socks = [post_turn(url, npc, TOOL_LINE) for npc in stalled]
        try:
            for sock in socks:
                read_until(sock, b"event: tool_request")  # both wait for answers that never come
            npc = client.create_session("chat.json")
            replies: list[str] = []
            thread = threading.Thread(target=lambda: replies.append(client.turn(npc.id, "Hello").reply), daemon=True)
            thread.start()
            thread.join(DEADLINE / 4)  # a scripted turn takes milliseconds: only a starved one reaches this
            starved = not replies
        finally:
            for sock in socks:
                sock.close()  # their turns are cancelled (were they holding the workers, that frees them)
        thread.join(DEADLINE)
        assert replies, "the turn never ran"
    assert not starved, "a well-behaved client's turn waited behind clients that never answer their tools"


def test_a_busy_session_whose_asset_rejects_double_texts_refuses_a_second_turn_as_busy_json(
        backend: ScriptedBackend, tmp_path: Path) -> None:
    asset = json.loads((examples_dir() / "tool_calling.json").read_text(encoding="utf-8"))
    (tmp_path / "tool_calling.json").write_text(json.dumps({**asset, "double_text": "reject"}), encoding="utf-8")
    with running_server(backend, [tmp_path]) as url, ParleyClient(url) as client:
        npc = client.create_session("tool_calling.json")
        sock = post_turn(url, npc.id, TOOL_LINE)
        try:
            read_until(sock, b"event: tool_request")
            response = client.http.post(f"/v1/sessions/{npc.id}/turns", json={"line": "me too"})
            typed_error(response, "busy", 409)
            with pytest.raises(ParleyError) as busy:
                client.set_variables(npc.id, {})
            assert busy.value.code == "busy"
        finally:
            sock.close()
        wait_for(lambda: not client.session(npc.id).busy, "the session to be idle")


# --- on the real sample model -----------------------------------------------------------------------------


@pytest.mark.model
def test_on_the_sample_model_a_client_gone_mid_generation_leaves_its_session_as_it_was(
        sample_model, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Gone after the first token: the turn stops, and the session then says what a fresh one says (its
    history, variables and caches are as they were). Behind a token, as a server reached by others is.
    The turn's thread waits after its first token until the server has seen the client go, so the
    generation cannot finish first however the machine is loaded."""
    from runtime.backends.llama import LlamaBackend

    stopped = threading.Event()
    real_stop, real_put = npcs_module.NPCs.stop, npcs_module.Stream.put

    def stop(running) -> None:
        real_stop(running)
        stopped.set()

    def put(stream, item, last: bool = False) -> None:
        real_put(stream, item, last)
        if item.kind == "token" and not stopped.is_set():
            stopped.wait(MODEL_WAIT)

    monkeypatch.setattr(npcs_module.NPCs, "stop", staticmethod(stop))
    monkeypatch.setattr(npcs_module.Stream, "put", put)

    example_on_sample_model("chat", sample_model, tmp_path, 48)
    token = "real-model-token-0123456789"
    backend = LlamaBackend(asset_dir=tmp_path)
    try:
        with running_server(backend, [tmp_path], token=token) as url, \
                ParleyClient(url, token=token, timeout=MODEL_WAIT) as client:
            typed_error(httpx.get(f"{url}/v1/sessions", timeout=MODEL_WAIT), "unauthorized", 401)
            gone, fresh = client.create_session("chat.json").id, client.create_session("chat.json").id
            sock = socket.create_connection(("127.0.0.1", port_of(url)), timeout=MODEL_WAIT)
            body = json.dumps({"line": "Tell me everything about the inn and the village.",
                               "cancel_on_disconnect": True}).encode()
            sock.sendall(b"POST /v1/sessions/%s/turns HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n"
                         b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                         % (gone.encode(), token.encode(), len(body), body))
            read_until(sock, b"event: token")
            sock.close()
            assert stopped.wait(MODEL_WAIT), "the server never noticed its client went away"
            wait_for(lambda: not client.session(gone).busy, "the session to be idle", MODEL_WAIT)
            assert client.session(gone).turns == 0 and client.turns(gone) == []
            line = "Good evening. Is there a room for the night?"
            assert client.turn(gone, line).reply == client.turn(fresh, line).reply
    finally:
        backend.close()


# --- half an emoji (issue 39, HIGH) -----------------------------------------------------------------

def _lone(body: dict) -> bytes:
    """``body`` as JSON with each "LONE" written as ``\\ud83d``: half an emoji, as a JavaScript game sends
    after cutting a string (json.dumps cannot write one)."""
    return json.dumps(body).replace("LONE", "\\ud83d").encode()


@pytest.mark.parametrize(("path", "method", "body", "field"), [
    ("/v1/sessions", "POST", {"asset": "tavern_keeper.json", "variables": {"npc_name": "Mi LONE ra"}}, "variables"),
    ("/v1/sessions", "POST", {"asset": "tavern_keeper.json", "variables": {"npLONE": "Mira"}}, "variables"),
    ("/v1/sessions/{id}/variables", "PATCH", {"variables": {"npc_name": "LONE"}}, "variables"),
    ("/v1/sessions/{id}/params", "PATCH", {"nodes": {"reply": {"system_prompt": "Be kind LONE"}}}, "nodes"),
    ("/v1/sessions/{id}/turns", "POST", {"line": "hi LONE"}, "line"),
    ("/v1/sessions/{id}/turns", "POST", {"line": "hi", "instructions": "LONE"}, "instructions"),
])
def test_half_an_emoji_is_refused_and_changes_nothing(url: str, path: str, method: str, body: dict,
                                                      field: str) -> None:
    """A lone surrogate in a variable, a system prompt, a line or instructions was accepted: the turn's
    stream broke off, and GET /v1/sessions answered 500 to every client until the session was deleted.
    Now it is a 400 naming the field, and the session (and the session list) is as it was."""
    with ParleyClient(url) as client:
        npc = client.create_session("tavern_keeper.json")
        before = httpx.get(f"{url}/v1/sessions/{npc.id}/history", timeout=DEADLINE).content
        sessions = httpx.get(f"{url}/v1/sessions", timeout=DEADLINE).json()
        answer = httpx.request(method, f"{url}{path.format(id=npc.id)}", content=_lone(body), headers=JSON,
                               timeout=DEADLINE)
        error = typed_error(answer, "bad_request", 400)
        assert error["message"].startswith(f"{field}:") and "lone surrogate (U+D83D)" in error["message"]
        assert httpx.get(f"{url}/v1/sessions", timeout=DEADLINE).json() == sessions
        assert httpx.get(f"{url}/v1/sessions/{npc.id}/history", timeout=DEADLINE).content == before
        client.delete_session(npc.id)


# --- what is exported must import (issue 39, MED-HIGH) ------------------------------------------------

def test_a_history_past_the_body_limit_exports_and_imports_again(backend: ScriptedBackend) -> None:
    """GET /history had no size limit and PUT /history took at most --max-body: a long conversation
    (about 400 turns on the sample model) exported and could never be imported again."""
    with running_server(backend, [examples_dir()], limits=Limits(max_body=64 * 1024)) as url, \
            ParleyClient(url) as client:
        npc = client.create_session("chat.json")
        for i in range(40):
            client.turn(npc.id, f"Line {i}: " + "tell me about the inn and its guests " * 50)
        history = client.export_history(npc.id)
        assert len(json.dumps(history)) > 64 * 1024, "past --max-body"
        again = client.create_session("chat.json")
        assert client.import_history(again.id, history).turns == 40
        assert client.export_history(again.id) == history
        # any other request is held to --max-body as before
        answer = httpx.post(f"{url}/v1/sessions/{npc.id}/turns", content=json.dumps({"line": "x" * 70_000}),
                            headers=JSON, timeout=DEADLINE)
        typed_error(answer, "too_large", 413)


def test_tool_arguments_nested_past_what_a_history_holds_are_refused_on_import(url: str) -> None:
    """Tool arguments nested 260 deep imported fine, and then every export answered 500."""
    with ParleyClient(url) as client:
        npc = client.create_session("tool_calling.json")
        client.turn(npc.id, TOOL_LINE, tools=lambda call: "240")
        history = client.export_history(npc.id)
        tool = next(e for t in history["turns"] for e in t["entries"] if e.get("kind") == "tool")
        deep: dict = {}
        inner = deep
        for _ in range(260):
            inner["x"] = inner = {}
        tool["arguments"] = {"item": deep}
        other = client.create_session("tool_calling.json")
        with pytest.raises(ParleyError) as refused:
            client.import_history(other.id, history)
        assert refused.value.code == "bad_history" and "nests deeper than 64 levels" in str(refused.value.problems)
        assert client.export_history(other.id)["turns"] == []


def test_a_delete_does_not_hold_the_server_while_the_model_is_busy() -> None:
    """Issue 39: DELETE of a session blocked the whole server, health checks too, for 12.5 s while
    another session generated: freeing its caches waited for the model. It is freed on a thread."""
    model_free = threading.Event()
    released: list[str] = []

    class BusyModel(ScriptedBackend):
        def sessions(self) -> dict:
            return dict(self._sessions)

        def release(self, key: str) -> None:  # as the embedded engine: waits for the model's lock
            assert model_free.wait(DEADLINE), "never let go"
            released.append(key)

    backend = BusyModel()
    with running_server(backend, [examples_dir()]) as url, ParleyClient(url) as client:
        npc = client.create_session("chat.json")
        client.turn(npc.id, "hello")
        client.delete_session(npc.id)  # answered while the release waits
        assert client.health().status == "ok" and client.sessions() == []
        assert released == []
        model_free.set()
        wait_for(lambda: released == [f"{npc.id}/reply"], "the cache freed once the model was free")


def test_sessions_made_and_deleted_leave_nothing_behind_on_the_scripted_backend() -> None:
    """Issue 39: parley serve --backend scripted grew by about 59 KB every create, turn and delete
    (+175 MB after 3,000): a deleted session's node sessions were never forgotten."""
    backend = ScriptedBackend()
    with running_server(backend, [examples_dir()]) as url, ParleyClient(url) as client:
        for i in range(30):
            npc = client.create_session("gate_guard.json")
            client.turn(npc.id, f"Hello {i}, I threaten you!")
            client.delete_session(npc.id)
        wait_for(lambda: backend.sessions() == {}, "every deleted session's node sessions forgotten")
        assert client.sessions() == []
