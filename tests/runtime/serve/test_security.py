"""parley serve's security: the token on every request (and never in a log or an answer), binding
beyond this computer only with one, assets from the served folders only, and every limit refused
with a clear, typed error."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import runtime.serve.npcs as npcs_module
from runtime.backends.scripted import ScriptedBackend
from runtime.cli import main as parley_main
from runtime.resources import examples_dir
from runtime.serve.app import RequestGuard
from runtime.serve.client import ParleyClient, ParleyError, TurnFailed
from runtime.serve.npcs import Limits
from runtime.serve.server import ServeConfig, ServeConfigError, check_config, running_server

TOKEN = "tok-" + secrets.token_hex(16)
AUTH = {"Authorization": f"Bearer {TOKEN}"}
DEADLINE = 60.0  # seconds: generous for a busy 2-core machine; only a hang reaches it
JSON = {"content-type": "application/json"}


@pytest.fixture
def guarded(backend: ScriptedBackend) -> Iterator[str]:
    with running_server(backend, [examples_dir()], token=TOKEN) as url:
        yield url


def error_of(response: httpx.Response, code: str, status: int) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert error["code"] == code, error
    assert error["message"]
    assert "Traceback" not in response.text and 'File "' not in response.text
    return error


def concrete_routes(url: str) -> list[tuple[str, str]]:
    """Every (method, path) the server's OpenAPI schema lists, with ids filled in: a new route is covered too."""
    schema = httpx.get(f"{url}/v1/openapi.json", headers=AUTH, timeout=DEADLINE).json()
    routes = [(method.upper(), path.replace("{session_id}", "npc-x").replace("{turn_id}", "0"))
              for path, methods in schema["paths"].items() for method in methods]
    assert len(routes) >= 15, routes  # the schema really lists the routes
    routes += [("GET", "/v1/openapi.json"), ("GET", "/"), ("GET", "/v1/nowhere"), ("POST", "/v1/nowhere"),
               ("DELETE", "/v1"), ("OPTIONS", "/v1/sessions"), ("GET", "/docs"), ("PUT", "/v1/health")]
    return sorted(routes, key=lambda route: route == ("POST", "/v1/shutdown"))  # last: it stops the server


# --- the token --------------------------------------------------------------------------------------------


def test_every_route_known_or_not_refuses_a_request_without_the_token(guarded: str) -> None:
    with httpx.Client(base_url=guarded, timeout=DEADLINE) as http:
        for method, path in concrete_routes(guarded):
            response = http.request(method, path, content=b'{"line": "hi"}', headers=JSON)
            error = error_of(response, "unauthorized", 401)
            assert "Bearer" in error["message"], (method, path)


@pytest.mark.parametrize("authorization", [
    "Bearer wrong-token-wrong-token",
    f"Bearer {TOKEN}x",  # the token and more
    f"Bearer {TOKEN[:-1]}",  # all but its last character
    TOKEN,  # no scheme
    f"Basic {TOKEN}",
    f"Bearer  {TOKEN}",
    "Bearer",
])
def test_a_wrong_token_is_refused(guarded: str, authorization: str) -> None:
    with httpx.Client(base_url=guarded, timeout=DEADLINE) as http:
        for method, path in [("GET", "/v1/health"), ("GET", "/v1/sessions"), ("POST", "/v1/sessions")]:
            response = http.request(method, path, json={"asset": "chat.json"},
                                    headers={"Authorization": authorization})
            error_of(response, "unauthorized", 401)
        assert http.get("/v1/health", params={"token": TOKEN}).status_code == 401  # only the header counts
        assert http.get("/v1/sessions", headers=AUTH).json() == {"sessions": []}  # nothing was created


def test_the_right_token_opens_every_route(guarded: str) -> None:
    with ParleyClient(guarded, token=TOKEN) as client:
        assert client.health().status == "ok"
        npc = client.create_session("tool_calling.json")
        outcome = client.turn(npc.id, "How many arrows are there?", tools=lambda call: "240")
        assert outcome.reply.endswith("240")
        assert client.session(npc.id).turns == 1
    with httpx.Client(base_url=guarded, headers=AUTH, timeout=DEADLINE) as http:
        for method, path in concrete_routes(guarded):
            response = http.request(method, path, content=b"{}", headers=JSON)
            assert response.status_code != 401, (method, path, response.text)


class Recorder(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture
def server_logs() -> Iterator[Recorder]:
    """Everything the project's loggers and uvicorn's log, at every level. Call ``listen()`` once the
    server runs: uvicorn configures its loggers (and drops their handlers) when a server is made. A
    handler on uvicorn.access turns its access log on, so a deployer's access lines are checked too."""
    recorder = Recorder()
    recorder.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    loggers = [logging.getLogger(n) for n in ("parley", "runtime", "uvicorn", "uvicorn.error", "uvicorn.access",
                                              "fastapi", "starlette")]
    levels = [logger.level for logger in loggers]

    def listen() -> None:
        for logger in loggers:
            logger.addHandler(recorder)
            logger.setLevel(logging.DEBUG)

    recorder.listen = listen  # type: ignore[attr-defined]
    yield recorder
    for logger, level in zip(loggers, levels, strict=True):
        logger.removeHandler(recorder)
        logger.setLevel(level)


def test_the_token_appears_in_no_log_and_no_answer(backend: ScriptedBackend, server_logs: Recorder,
                                                   capfd: pytest.CaptureFixture[str]) -> None:
    answers: list[bytes] = []
    with running_server(backend, [examples_dir()], token=TOKEN) as url:
        server_logs.listen()  # type: ignore[attr-defined]
        port = int(url.rsplit(":", 1)[1])
        with httpx.Client(base_url=url, timeout=DEADLINE) as http:
            for headers in ({"Authorization": f"Bearer {TOKEN}x"}, {"Authorization": TOKEN}, {}, AUTH):
                for method, path in concrete_routes(url):
                    if headers is AUTH and path == "/v1/shutdown":
                        continue  # asked last, below
                    answers.append(http.request(method, path, content=b'{"line": "hi"}', headers={**JSON, **headers})
                                   .content)
            npc = http.post("/v1/sessions", json={"asset": "chat.json"}, headers=AUTH).json()["id"]
            answers.append(http.post(f"/v1/sessions/{npc}/turns", json={"line": "Hello"}, headers=AUTH).content)
            answers.append(http.put(f"/v1/sessions/{npc}/history", content=b"[" * 100_000, headers={**AUTH, **JSON})
                           .content)  # the server's most talkative path: an error it logs with a traceback
        for raw in (f"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\nBad Header\r\n\r\n",
                    f"GET /v1/health HTTP/9.9\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"):
            answers.append(exchange(port, raw.encode()))
        with httpx.Client(base_url=url, timeout=DEADLINE) as http:
            answers.append(http.post("/v1/shutdown", headers=AUTH).content)  # the server stops: its log too
    logged = "\n".join(server_logs.lines)
    out, err = capfd.readouterr()
    assert "parley.serve INFO session npc-" in logged  # the recorder did hear the server, and uvicorn
    assert any(line.startswith("uvicorn") for line in server_logs.lines)
    for where, text in (("the log", logged), ("stdout", out), ("stderr", err)):
        assert TOKEN not in text and TOKEN[4:] not in text, where
    assert len(answers) > 50 and not [a for a in answers if TOKEN.encode() in a]


def exchange(port: int, payload: bytes) -> bytes:
    """Send raw bytes, read until the server closes the connection (or the deadline)."""
    with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE) as sock:
        sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


@pytest.mark.parametrize(("header", "value"), [
    ("Host", "evil.example"), ("Host", "evil.example:{port}"), ("Host", "192.168.1.10:{port}"),
    ("Host", "0.0.0.0:{port}"), ("Host", "localhost.evil.example:{port}"), ("Host", "[::2]:{port}"),
    ("Origin", "http://evil.example"), ("Origin", "https://127.0.0.1.evil.example"), ("Origin", "null"),
    # issue 39: a cross-site <img> GET sends no Origin, but its browser says where it came from
    ("Sec-Fetch-Site", "cross-site"),
])
def test_a_loopback_server_without_a_token_answers_this_computer_only(backend: ScriptedBackend, header: str,
                                                                      value: str) -> None:
    """A web page the player opens must not drive the server: not by DNS rebinding (another name in Host),
    not by a cross-site request (another site's Origin)."""
    with running_server(backend, [examples_dir()]) as url, httpx.Client(base_url=url, timeout=DEADLINE) as http:
        port = url.rsplit(":", 1)[1]
        headers = {header: value.format(port=port)}
        error = error_of(http.get("/v1/health", headers=headers), "unauthorized", 401)
        assert header in error["message"]
        error_of(http.post("/v1/sessions/npc-1/cancel", headers=headers), "unauthorized", 401)
        error_of(http.post("/v1/sessions", json={"asset": "chat.json"}, headers=headers), "unauthorized", 401)
        assert http.get("/v1/sessions").json() == {"sessions": []}


def test_a_loopback_server_answers_its_own_names_and_local_pages(backend: ScriptedBackend) -> None:
    with running_server(backend, [examples_dir()]) as url, httpx.Client(base_url=url, timeout=DEADLINE) as http:
        port = url.rsplit(":", 1)[1]
        for headers in ({"Host": f"127.0.0.1:{port}"}, {"Host": f"localhost:{port}"}, {"Host": "LOCALHOST"},
                        {"Host": f"[::1]:{port}"}, {"Host": f"127.0.0.2:{port}"},
                        {"Origin": "http://localhost:5173"}, {"Origin": f"http://127.0.0.1:{port}"},
                        {"Sec-Fetch-Site": "same-site"}, {"Sec-Fetch-Site": "none"},
                        {"Sec-Fetch-Site": "cross-site", "Referer": "http://localhost:5173/game.html"}):
            assert http.get("/v1/health", headers=headers).status_code == 200, headers
    # with a token, the token is the guard: any name the server is reached by will do
    with running_server(backend, [examples_dir()], token=TOKEN) as url:
        response = httpx.get(f"{url}/v1/health", headers={**AUTH, "Host": "npc-server.lan:8765",
                                                           "Origin": "http://game.example"}, timeout=DEADLINE)
        assert response.status_code == 200


def test_a_websocket_is_closed_before_any_route_sees_it() -> None:
    """uvicorn here has no WebSocket library, so this is the guard alone: were one installed, an upgrade
    must not reach the app past the token check."""
    reached: list[dict] = []

    async def app(scope, receive, send) -> None:
        reached.append(scope)

    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    async def receive() -> dict:
        return {"type": "websocket.connect"}

    asyncio.run(RequestGuard(app, TOKEN, 1000)({"type": "websocket", "headers": [], "path": "/v1/health"}, receive, send))
    assert reached == [] and sent == [{"type": "websocket.close", "code": 1008}]


# --- binding beyond this computer -------------------------------------------------------------------------


def serve_args(*more: str) -> list[str]:
    return ["serve", "--port", "0", "--backend", "scripted", "--assets", str(examples_dir()), *more]


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.10"])
def test_binding_beyond_loopback_without_a_token_refuses_to_start(host: str, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("PARLEY_SERVE_TOKEN", raising=False)
    monkeypatch.delenv("MY_GAME_TOKEN", raising=False)
    assert parley_main(serve_args("--host", host)) == 2
    err = capsys.readouterr().err
    assert f"--host {host}" in err and "PARLEY_SERVE_TOKEN" in err and "token" in err
    monkeypatch.setenv("PARLEY_SERVE_TOKEN", TOKEN)  # another variable is named by --token-env: this one does not count
    assert parley_main(serve_args("--host", host, "--token-env", "MY_GAME_TOKEN")) == 2


def test_the_refusal_names_the_variable_given_to_token_env(monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("MY_GAME_TOKEN", raising=False)
    assert parley_main(serve_args("--host", "0.0.0.0", "--token-env", "MY_GAME_TOKEN")) == 2
    assert "MY_GAME_TOKEN" in capsys.readouterr().err


def test_a_short_token_or_an_empty_one_is_refused_before_binding(monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ServeConfigError, match="16 characters"):
        check_config(ServeConfig(host="0.0.0.0", asset_dirs=[examples_dir()], token="short"))
    # issue 39: a token of 16 spaces was accepted; so were 'aaaa…' and one a header would trim
    for weak, said in ((" " * 16, "holds spaces"), ("a" * 32, "1 different, at least 8"),
                       ("tok-0123456789abcdef\t", "control"), ("jeton-sécurisé-0123456789", "non-ASCII")):
        with pytest.raises(ServeConfigError, match=said):
            check_config(ServeConfig(host="127.0.0.1", asset_dirs=[examples_dir()], token=weak))
    monkeypatch.setenv("PARLEY_SERVE_TOKEN", "")
    assert parley_main(serve_args("--host", "0.0.0.0")) == 2
    assert "--host 0.0.0.0" in capsys.readouterr().err


def test_the_config_never_shows_its_token() -> None:
    config = ServeConfig(host="0.0.0.0", asset_dirs=[examples_dir()], token=TOKEN)
    assert TOKEN not in repr(config) and TOKEN not in str(config)


def test_binding_all_addresses_with_a_token_starts_and_asks_for_it() -> None:
    env = {**os.environ, "MY_GAME_TOKEN": TOKEN, "PYTHONUNBUFFERED": "1"}
    env.pop("PARLEY_SERVE_TOKEN", None)
    process = subprocess.Popen([sys.executable, "-m", "runtime", *serve_args("--host", "0.0.0.0", "--token-env",
                                                                                  "MY_GAME_TOKEN")],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                               cwd=Path(__file__).resolve().parents[3])
    err_lines: list[str] = []
    reader = threading.Thread(target=lambda: err_lines.extend(process.stderr), daemon=True)
    reader.start()
    try:
        line = read_line(process, DEADLINE)
        assert line.startswith("parley serve: listening on http://0.0.0.0:"), (line, err_lines)
        port = int(line.rsplit(":", 1)[1])
        url = f"http://127.0.0.1:{port}"
        error_of(httpx.get(f"{url}/v1/health", timeout=DEADLINE), "unauthorized", 401)
        error_of(httpx.get(f"{url}/v1/health", headers={"Authorization": "Bearer nope"}, timeout=DEADLINE),
                 "unauthorized", 401)
        assert httpx.get(f"{url}/v1/health", headers=AUTH, timeout=DEADLINE).json()["status"] == "ok"
        with ParleyClient(url, token=TOKEN) as client:
            npc = client.create_session("chat.json")
            assert client.turn(npc.id, "Hello").reply
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(DEADLINE)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        reader.join(DEADLINE)
    assert TOKEN not in "".join(err_lines), "the token was logged"
    assert TOKEN not in (process.stdout.read() if process.stdout else "")


def read_line(process: subprocess.Popen, seconds: float) -> str:
    """The process's first stdout line, read in a thread so a server that never prints cannot hang the test."""
    got: list[str] = []
    thread = threading.Thread(target=lambda: got.append(process.stdout.readline()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert got, "parley serve printed no address"
    return got[0].strip()


# --- assets from the served folders only ------------------------------------------------------------------


@pytest.fixture
def asset_folders(tmp_path: Path) -> tuple[Path, Path]:
    """A served folder with one asset, and a folder beside it whose (valid) asset must never load."""
    served, outside = tmp_path / "served", tmp_path / "outside"
    served.mkdir()
    outside.mkdir()
    shutil.copy(examples_dir() / "chat.json", served / "chat.json")
    shutil.copy(examples_dir() / "chat.json", outside / "secret.json")
    (served / "notes.txt").write_text(json.dumps(json.loads((served / "chat.json").read_text())))
    (served / "link.json").symlink_to(outside / "secret.json")
    (served / "sub").symlink_to(outside, target_is_directory=True)
    return served, outside


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every asset file the server loads."""
    loaded: list[Path] = []
    real = npcs_module.load_asset

    def recording(path, *args, **kwargs):
        loaded.append(Path(path).resolve())
        return real(path, *args, **kwargs)

    monkeypatch.setattr(npcs_module, "load_asset", recording)
    return loaded


def test_an_asset_outside_the_served_folders_is_never_loaded(backend: ScriptedBackend, asset_folders: tuple[Path, Path],
                                                             loads: list[Path]) -> None:
    served, outside = asset_folders
    names = ["../outside/secret.json", str(outside / "secret.json"), "link.json", "sub/secret.json",
             "./../outside/secret.json", "served/../../outside/secret.json", "..%2foutside%2fsecret.json",
             "..\\outside\\secret.json", "notes.txt", "chat", "chat.json\x00", "chat.json\x00.txt", "..", ".", "/",
             "", "x" * 600, "/etc/passwd", "../../../../../../etc/passwd", "~/secret.json",
             str(served / ".." / "outside" / "secret.json")]
    with running_server(backend, [served]) as url, httpx.Client(base_url=url, timeout=DEADLINE) as http:
        for name in names:
            response = http.post("/v1/sessions", json={"asset": name})
            assert response.status_code in (400, 404), (name, response.text)
            assert response.json()["error"]["code"] in ("unknown_asset", "bad_request"), name
            assert "Traceback" not in response.text
        assert http.get("/v1/sessions").json() == {"sessions": []}
        assert loads == []
        assert http.post("/v1/sessions", json={"asset": "chat.json"}).status_code == 201  # the control: it loads
        assert loads == [(served / "chat.json").resolve()]


def test_the_asset_list_holds_only_what_the_server_loads(backend: ScriptedBackend,
                                                         asset_folders: tuple[Path, Path]) -> None:
    served, _outside = asset_folders
    with running_server(backend, [served]) as url:
        listed = [a["path"] for a in httpx.get(f"{url}/v1/assets", timeout=DEADLINE).json()["assets"]]
    assert listed == ["chat.json"]


# --- limits -----------------------------------------------------------------------------------------------


def padded_session_body(size: int) -> bytes:
    """A valid create-session body of exactly ``size`` bytes (JSON whitespace pads it)."""
    head, tail = b'{"asset": "chat.json"', b"}"
    assert size >= len(head) + len(tail)
    return head + b" " * (size - len(head) - len(tail)) + tail


LIMITS = Limits(max_body=2000, max_line=50, max_sessions=3, max_stream_events=4)


@pytest.fixture
def limited(backend: ScriptedBackend) -> Iterator[str]:
    with running_server(backend, [examples_dir()], limits=LIMITS) as url:
        yield url


def test_a_body_over_max_body_is_refused_with_or_without_its_length(limited: str) -> None:
    port = int(limited.rsplit(":", 1)[1])
    with httpx.Client(base_url=limited, timeout=DEADLINE) as http:
        assert http.post("/v1/sessions", content=padded_session_body(2000), headers=JSON).status_code == 201
        error = error_of(http.post("/v1/sessions", content=padded_session_body(2001), headers=JSON), "too_large", 413)
        assert "2000 bytes" in error["message"] and "--max-body" in error["message"]

        def chunks(size: int) -> Iterator[bytes]:
            body = padded_session_body(size)
            for start in range(0, len(body), 300):
                yield body[start:start + 300]

        response = http.post("/v1/sessions", content=chunks(2001), headers=JSON)
        assert "transfer-encoding" in response.request.headers and "content-length" not in response.request.headers
        error_of(response, "too_large", 413)
        assert http.post("/v1/sessions", content=chunks(2000), headers=JSON).status_code == 201  # chunked, at the limit
        assert len(http.get("/v1/sessions").json()["sessions"]) == 2
    # a length past the limit is refused before any of the body is sent
    with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE) as sock:
        sock.sendall(b"POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000000000\r\n\r\n")
        answer = read_answer(sock)
    assert answer.startswith(b"HTTP/1.1 413"), answer
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]["code"] == "too_large"


def read_answer(sock: socket.socket) -> bytes:
    """One whole answer with a Content-Length (or what came before the server closed)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), None)
    while length is not None and len(body) < length and (chunk := sock.recv(65536)):
        body += chunk
    return head + b"\r\n\r\n" + body


def test_a_line_or_instructions_over_max_line_are_refused_and_the_session_is_untouched(limited: str) -> None:
    with ParleyClient(limited) as client:
        npc = client.create_session("chat.json")
        for line, instructions, field in (("y" * 51, "", "line"), ("hi", "z" * 51, "instructions")):
            with pytest.raises(ParleyError) as refused:
                client.turn(npc.id, line, instructions)
            assert (refused.value.code, refused.value.status) == ("too_large", 413)
            assert refused.value.message.startswith(f"{field}: 51 characters") and "--max-line" in refused.value.message
        state = client.session(npc.id)
        assert (state.turns, state.busy) == (0, False)
        with pytest.raises(TurnFailed) as failed:  # a line at the limit is taken (its stream then hits the event limit)
            client.turn(npc.id, "y" * 50)
        assert failed.value.code == "stream_limit"


def test_sessions_past_max_sessions_are_refused_until_one_is_deleted(limited: str) -> None:
    with ParleyClient(limited) as client:
        made = [client.create_session("chat.json").id for _ in range(3)]
        with pytest.raises(ParleyError) as refused:
            client.create_session("chat.json", id="one-too-many")
        assert (refused.value.code, refused.value.status) == ("limit_reached", 429)
        assert "--max-sessions" in refused.value.message
        assert client.health().sessions == 3
        client.delete_session(made[0])
        assert client.create_session("chat.json", id="one-too-many").id == "one-too-many"


def test_a_turn_past_max_stream_events_ends_with_stream_limit_and_the_session_as_it_was(limited: str) -> None:
    with ParleyClient(limited) as client:
        npc = client.create_session("chat.json")
        history = client.export_history(npc.id)
        events = list(client.stream_turn(npc.id, "Tell me a long story about the inn"))
        assert events[-1].kind == "turn_failed", [e.kind for e in events]
        error = events[-1].data["error"]
        assert error["code"] == "stream_limit" and "--max-stream-events" in error["message"]
        assert len(events) <= LIMITS.max_stream_events + 1  # the limit's events, then turn_failed
        state = client.session(npc.id)
        assert (state.turns, state.busy) == (0, False)
        assert client.export_history(npc.id) == history
        assert client.turns(npc.id) == []


@pytest.mark.parametrize("flag", ["--max-body", "--max-line", "--max-sessions", "--max-stream-events"])
def test_a_limit_below_one_is_refused_on_the_command_line(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert parley_main(serve_args(flag, "0")) == 2
    assert f"{flag} must be at least 1" in capsys.readouterr().err


def test_two_asset_folders_of_one_name_are_refused_before_binding(tmp_path) -> None:
    """Issue 39: with --assets a/npcs and b/npcs, both listed their assets as npcs/NAME.json, and the
    first folder hid the second's."""
    first, second = tmp_path / "a" / "npcs", tmp_path / "b" / "npcs"
    first.mkdir(parents=True)
    second.mkdir(parents=True)
    with pytest.raises(ServeConfigError, match="both folders are called 'npcs'"):
        check_config(ServeConfig(asset_dirs=[first, second]))
    check_config(ServeConfig(asset_dirs=[first, tmp_path / "b"]))  # told apart by name: served
