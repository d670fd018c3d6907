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
            for route, taken in times.items():
                method, path, body = {
                    "GET /v1/health": ("GET", "/v1/health", None),
                    "GET /v1/sessions/innkeeper": ("GET", "/v1/sessions/innkeeper", None),
                    "PATCH variables": ("PATCH", "/v1/sessions/innkeeper/variables", '{"variables": {}}'),
                }[route]
                start = time.perf_counter()
                connection.request(method, path, body=body, headers={"Content-Type": "application/json"})
                answer = connection.getresponse()
                answer.read()
                taken.append((time.perf_counter() - start) * 1000)
                assert answer.status == 200, (route, answer.status)
        assert connection.sock is kept, "the connection was kept alive throughout"
        connection.close()
    # the median: a busy machine may slow a request or two, never most of them by 40 ms
    medians = {route: round(statistics.median(ms), 2) for route, ms in times.items()}
    assert all(ms < DELAYED_ACK_MS for ms in medians.values()), medians


def test_an_asset_is_read_and_checked_once_until_its_file_changes(tmp_path):
    import json
    import shutil

    from runtime.serve.client import ParleyClient, ParleyError

    shutil.copy(examples_dir() / "chat.json", tmp_path / "chat.json")
    with running_server(ScriptedBackend(), [tmp_path]) as url, ParleyClient(url) as client:
        first = client.create_session("chat.json")
        second = client.create_session("chat.json")
        assert first.asset_name == second.asset_name
        raw = json.loads((tmp_path / "chat.json").read_text(encoding="utf-8"))
        raw["name"] = "The innkeeper, edited"
        (tmp_path / "chat.json").write_text(json.dumps(raw), encoding="utf-8")  # another size: read again
        assert client.create_session("chat.json").asset_name == "The innkeeper, edited"
        assert client.turn(first.id, "Hello").reply  # the earlier sessions keep the asset they began with
        (tmp_path / "chat.json").write_text("{", encoding="utf-8")
        try:
            client.create_session("chat.json")
        except ParleyError as error:
            assert error.code == "bad_asset"
        else:
            raise AssertionError("a broken asset file was not read again")


def test_the_asset_list_follows_files_added_and_removed(tmp_path):
    import shutil

    from runtime.serve.client import ParleyClient

    shutil.copy(examples_dir() / "chat.json", tmp_path / "chat.json")
    with running_server(ScriptedBackend(), [tmp_path]) as url, ParleyClient(url) as client:
        assert [a.path for a in client.assets()] == ["chat.json"]
        assert [a.path for a in client.assets()] == ["chat.json"]  # the kept list
        shutil.copy(examples_dir() / "chat.json", tmp_path / "bard.json")
        assert [a.path for a in client.assets()] == ["bard.json", "chat.json"]
        (tmp_path / "chat.json").unlink()
        assert [a.path for a in client.assets()] == ["bard.json"]
