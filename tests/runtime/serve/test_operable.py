"""``parley serve`` can be watched: ``GET /metrics`` in Prometheus' format, JSON log lines that name
the session and turn, and liveness apart from readiness."""

from __future__ import annotations

import json

import httpx
from prometheus_client.parser import text_string_to_metric_families

from runtime.backends.base import GenerationRequest
from runtime.backends.scripted import ScriptedBackend, default_reply
from runtime.problems import BackendError
from runtime.resources import examples_dir
from runtime.serve.client import ParleyClient, TurnFailed
from runtime.serve.server import running_server
from runtime.serve.store import SQLiteStore
from tests.servers import parley_serve_process


def down_on_request(key: str, request: GenerationRequest) -> str:
    if "storm" in request.messages[-1].content:
        raise BackendError("the model server went away")
    return default_reply(key, request)


def samples(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(f"{url}/metrics").text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_metrics_count_turns_failures_first_tokens_and_store_writes(tmp_path):
    backend = ScriptedBackend(down_on_request)
    with running_server(backend, [examples_dir()], store=SQLiteStore(tmp_path / "s.sqlite3")) as url, \
            ParleyClient(url) as client:
        client.create_session("chat.json", id="innkeeper")
        for line in ["Hello there", "Is there a room?", "What news?"]:
            client.turn("innkeeper", line)
        try:
            client.turn("innkeeper", "A storm is coming")
        except TurnFailed as failed:
            assert failed.code == "backend_error"
        seen = samples(url)
    assert seen[("parley_turns_total", ())] == 3
    assert seen[("parley_turn_failures_total", (("code", "backend_error"),))] == 1
    assert seen[("parley_turn_seconds_count", ())] == 3
    assert seen[("parley_time_to_first_token_seconds_count", ())] == 3
    assert seen[("parley_store_write_seconds_count", ())] == 4, "the session's creation and its 3 turns"
    assert seen[("parley_sessions", ())] == 1
    assert seen[("parley_turns_running", ())] == 0 and seen[("parley_turns_waiting", ())] == 0


def test_live_and_ready_are_told_apart(tmp_path):
    with running_server(ScriptedBackend(), [examples_dir()], store=SQLiteStore(tmp_path / "s.sqlite3")) as url:
        assert httpx.get(f"{url}/v1/health/live").json() == {"status": "ok"}
        ready = httpx.get(f"{url}/v1/health/ready")
        assert ready.status_code == 200
        assert ready.json() == {"status": "ready", "sessions": 0, "store": f"sqlite:{tmp_path / 's.sqlite3'}"}


def test_json_log_lines_name_the_session_and_turn(tmp_path):
    args = ("--backend", "scripted", "--assets", str(examples_dir()), "--log-format", "json")
    with parley_serve_process(*args) as server, ParleyClient(server.url) as client:
        client.create_session("chat.json", id="innkeeper")
        client.turn("innkeeper", "Hello there")
        client.turn("innkeeper", "Is there a room?")
        log = server.log()
    lines = [json.loads(line) for line in log.splitlines() if line.strip()]  # every line is one JSON object
    assert all({"time", "level", "logger", "message", "session", "turn"} <= set(line) for line in lines)
    finished = [(line["session"], line["turn"]) for line in lines if line["message"].startswith("turn finished")]
    assert finished == [("innkeeper", 0), ("innkeeper", 1)]
    assert any(line["session"] == "innkeeper" and line["message"].startswith("session innkeeper") for line in lines)
