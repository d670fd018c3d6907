"""``--cors-origin``: a web page of an allowed origin calls ``parley serve`` from a browser. Its
preflights are answered before the token is asked for (a browser sends none with them), every answer
to it allows its origin (errors too, so the page can read them, and a turn's stream), and every other
origin is treated exactly as before. The browser itself is in ``tests/clients/test_js_browser.py``."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import httpx
import pytest

from runtime.backends.scripted import ScriptedBackend
from runtime.cli import main as parley_main
from runtime.resources import examples_dir
from runtime.serve.app import cors_origin
from runtime.serve.server import ServeConfig, ServeConfigError, check_config, running_server

TOKEN = "tok-" + secrets.token_hex(16)
AUTH = {"Authorization": f"Bearer {TOKEN}"}
GAME = "https://game.example"
DEADLINE = 60.0
PREFLIGHT = {"Origin": GAME, "Access-Control-Request-Method": "POST",
             "Access-Control-Request-Headers": "authorization, content-type"}


@pytest.fixture
def http(backend: ScriptedBackend) -> Iterator[httpx.Client]:
    with running_server(backend, [examples_dir()], token=TOKEN, cors_origins=[GAME, "http://localhost:8080"]) as url, \
            httpx.Client(base_url=url, timeout=DEADLINE) as client:
        yield client


def test_a_preflight_from_an_allowed_origin_is_answered_without_the_token(http: httpx.Client) -> None:
    for path in ("/v1/sessions", "/v1/sessions/npc-1/turns", "/v1/sessions/npc-1/variables"):
        answer = http.options(path, headers=PREFLIGHT)
        assert answer.status_code == 204, (path, answer.text)
        assert answer.headers["access-control-allow-origin"] == GAME
        assert {"authorization", "content-type", "last-event-id"} <= {
            h.strip() for h in answer.headers["access-control-allow-headers"].split(",")}
        assert "POST" in answer.headers["access-control-allow-methods"]
        assert "Origin" in answer.headers["vary"]


def test_an_allowed_origins_requests_carry_its_origin_errors_and_streams_included(http: httpx.Client) -> None:
    origin = {"Origin": GAME}
    created = http.post("/v1/sessions", json={"asset": "chat.json"}, headers={**AUTH, **origin})
    assert created.status_code in (200, 201) and created.headers["access-control-allow-origin"] == GAME
    session = created.json()["id"]
    with http.stream("POST", f"/v1/sessions/{session}/turns", json={"line": "Hello"},
                     headers={**AUTH, **origin, "accept": "text/event-stream"}) as stream:
        assert stream.headers["access-control-allow-origin"] == GAME
        assert "turn_finished" in "".join(stream.iter_text())
    # the token is asked for as ever; the refusal is readable by the page
    refused = http.post("/v1/sessions", json={"asset": "chat.json"}, headers=origin)
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthorized"
    assert refused.headers["access-control-allow-origin"] == GAME
    # a scheme's own port is left out of Origin by browsers, and the flag's value is read the same way
    local = http.get("/v1/health", headers={**AUTH, "Origin": "http://localhost:8080"})
    assert local.headers["access-control-allow-origin"] == "http://localhost:8080"


@pytest.mark.parametrize("origin", ["https://evil.example", "https://game.example:8443", "http://game.example",
                                    "null"])
def test_any_other_origin_gets_no_cors_answer(http: httpx.Client, origin: str) -> None:
    preflight = http.options("/v1/sessions", headers={**PREFLIGHT, "Origin": origin})
    assert preflight.status_code in (401, 405) and "access-control-allow-origin" not in preflight.headers
    plain = http.get("/v1/health", headers={**AUTH, "Origin": origin})
    assert plain.status_code == 200 and "access-control-allow-origin" not in plain.headers


def test_without_a_token_on_loopback_only_the_allowed_origin_joins_this_computers_pages(backend) -> None:
    with running_server(backend, [examples_dir()], cors_origins=[GAME]) as url, \
            httpx.Client(base_url=url, timeout=DEADLINE) as http:
        allowed = http.get("/v1/health", headers={"Origin": GAME})
        assert allowed.status_code == 200 and allowed.headers["access-control-allow-origin"] == GAME
        other = http.get("/v1/health", headers={"Origin": "https://evil.example"})
        assert other.status_code == 401 and "Origin" in other.json()["error"]["message"]
        assert http.options("/v1/sessions", headers=PREFLIGHT).status_code == 204


@pytest.mark.parametrize("value", ["game.example", "https://game.example/page", "*", "ftp://game.example",
                                   "https://game.example:http", "https://"])
def test_a_value_that_is_no_origin_is_refused_before_binding_naming_the_flag(value: str, capsys) -> None:
    with pytest.raises(ServeConfigError, match="--cors-origin"):
        check_config(ServeConfig(asset_dirs=[examples_dir()], cors_origins=[value]))
    code = parley_main(["serve", "--backend", "scripted", "--assets", str(examples_dir()), "--port", "0",
                        "--cors-origin", value])
    assert code == 2 and "--cors-origin" in capsys.readouterr().err


def test_origins_are_read_as_browsers_send_them() -> None:
    assert cors_origin("HTTPS://Game.Example/") == "https://game.example"
    assert cors_origin("http://localhost:80") == "http://localhost"
    assert cors_origin("https://game.example:443") == "https://game.example"
    assert cors_origin("http://[::1]:5173") == "http://[::1]:5173"
