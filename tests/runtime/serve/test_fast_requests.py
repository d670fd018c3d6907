"""Plain requests on a kept-alive connection answer at once: no answer's body waits for the client's
delayed ACK of its header (TCP_NODELAY on every accepted connection)."""

from __future__ import annotations

import http.client
import socket
import statistics
import time
from urllib.parse import urlsplit

from runtime.backends.scripted import ScriptedBackend
from runtime.resources import examples_dir
from runtime.serve.server import bind, running_server

DELAYED_ACK_MS = 40  # Linux's delayed ACK is 40 ms at least: a request that waits for one takes that long


def test_the_listening_socket_is_tcp_so_accepted_connections_send_at_once():
    sock = bind("127.0.0.1", 0)
    try:
        assert sock.proto == socket.IPPROTO_TCP
        client = socket.create_connection(sock.getsockname())
        sock.setblocking(True)
        accepted, _ = sock.accept()
        with client, accepted:
            assert accepted.proto == socket.IPPROTO_TCP  # asyncio sets TCP_NODELAY on such sockets
    finally:
        sock.close()


def test_kept_alive_plain_requests_take_no_delayed_ack():
    with running_server(ScriptedBackend(), [examples_dir()]) as url:
        parts = urlsplit(url)
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
        connection.request("POST", "/v1/sessions", body='{"asset": "chat.json", "id": "innkeeper"}',
                           headers={"Content-Type": "application/json"})
        assert connection.getresponse().read() and connection.sock is not None
        kept = connection.sock
        times = {"GET /v1/health": [], "GET /v1/sessions/innkeeper": [], "PATCH variables": []}
        for _ in range(15):
            for route in times:
                method, path, body = {
                    "GET /v1/health": ("GET", "/v1/health", None),
                    "GET /v1/sessions/innkeeper": ("GET", "/v1/sessions/innkeeper", None),
                    "PATCH variables": ("PATCH", "/v1/sessions/innkeeper/variables", '{"variables": {}}'),
                }[route]
                start = time.perf_counter()
                connection.request(method, path, body=body, headers={"Content-Type": "application/json"})
                answer = connection.getresponse()
                answer.read()
                times[route].append((time.perf_counter() - start) * 1000)
                assert answer.status == 200, (route, answer.status)
        assert connection.sock is kept, "the connection was kept alive throughout"
        connection.close()
    # the median: a busy machine may slow a request or two, never most of them by 40 ms
    medians = {route: round(statistics.median(ms), 2) for route, ms in times.items()}
    assert all(ms < DELAYED_ACK_MS for ms in medians.values()), medians
