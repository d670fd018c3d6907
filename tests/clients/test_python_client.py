"""The Python client (runtime.serve.client) tells a server that died from one that never started, against
real ``parley serve`` processes: one killed (SIGKILL) in the middle of a turn ends the turn in
``server_gone`` with the player's line handed back, once every try to resume it found no server; a
port nobody listens on is ``unavailable``, and so is the next request after the kill (it never reached
a server). One turn on the real sample model (``--backend embedded``) checks the same kill mid-reply."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.resources import examples_dir
from runtime.serve.client import ParleyClient, ParleyError, ServerEvent, TurnFailed
from tests.clients.kill_switch import closed_url
from tests.samples import example_on_sample_model
from tests.servers import parley_serve_process

DEADLINE = 60.0  # seconds: a killed process is gone long before; only a hang reaches it
MODEL_WAIT = 300.0
LINE = "How many arrows are there?"
TRIES = (0.01, 0.02, 0.05)  # the client's own resume waits, short: the server is gone for good


def killed_on(kind: str, served) -> tuple[list[str], object]:
    """An on_event that kills ``served`` (and waits until it is gone) on the turn's first ``kind`` event."""
    seen: list[str] = []

    def on_event(event: ServerEvent) -> None:
        seen.append(event.kind)
        if event.kind == kind and served.process.poll() is None:
            served.process.kill()
            served.process.wait(DEADLINE)

    return seen, on_event


def test_a_server_killed_mid_turn_is_server_gone_with_the_line_and_the_next_request_unavailable() -> None:
    with parley_serve_process("--backend", "scripted", "--assets", str(examples_dir()), "--store", "none") as served, \
            ParleyClient(served.url, resume_waits=TRIES) as client:
        npc = client.create_session("tool_calling.json")
        # the turn waits for the game's tool result: killed there, the server dies with its stream open
        seen, on_event = killed_on("tool_request", served)
        with pytest.raises(TurnFailed) as gone:
            client.turn(npc.id, LINE, on_event=on_event)
        assert (gone.value.code, gone.value.line) == ("server_gone", LINE), gone.value
        assert "say the line again" in gone.value.message
        assert seen[0] == "turn_started" and seen[-1] == "tool_request"
        assert served.process.returncode is not None
        assert client.resumes == len(TRIES), "every try to resume it was made, and none reached a server"
        # a request after the death never reaches a server: that is unavailable, not server_gone
        with pytest.raises(ParleyError) as after:
            client.health()
        assert after.value.code == "unavailable", after.value


def test_a_server_that_never_started_is_unavailable_at_once() -> None:
    with ParleyClient(closed_url()) as client:
        with pytest.raises(ParleyError) as health:
            client.health()
        assert health.value.code == "unavailable", health.value
        with pytest.raises(ParleyError) as turn:
            client.turn("innkeeper", LINE)
        assert turn.value.code == "unavailable" and not isinstance(turn.value, TurnFailed), turn.value
        assert client.resumes == 0, "a turn that never began is not resumed"


@pytest.mark.model
def test_on_the_sample_model_a_server_killed_mid_reply_is_server_gone_with_the_line(sample_model,
                                                                                      tmp_path: Path) -> None:
    example_on_sample_model("chat", sample_model, tmp_path, 24)
    with parley_serve_process("--backend", "embedded", "--assets", str(tmp_path), "--store", "none") as served, \
            ParleyClient(served.url, timeout=MODEL_WAIT, resume_waits=TRIES) as client:
        npc = client.create_session("chat.json")
        seen, on_event = killed_on("token", served)  # the model's first token: it dies mid-reply
        with pytest.raises(TurnFailed) as gone:
            client.turn(npc.id, "Tell me about the inn", on_event=on_event)
        assert (gone.value.code, gone.value.line) == ("server_gone", "Tell me about the inn"), gone.value
        assert seen[-1] == "token" and client.resumes == len(TRIES)


def test_only_the_reply_the_player_sees_is_marked_as_reply() -> None:
    """A Tool Call node streams its JSON as tokens too: a game that shows every token showed
    '{"name": "check_stock", ...' before the reply. ``is_reply`` marks the reply node's only, and they
    add up to the turn's reply."""
    with parley_serve_process("--backend", "scripted", "--assets", str(examples_dir())) as served, \
            ParleyClient(served.url) as client:
        npc = client.create_session("tool_calling.json")
        seen: list[ServerEvent] = []
        outcome = client.turn(npc.id, "How many arrows are there?", tools=lambda call: '{"count": 240}',
                              on_event=seen.append)
    tokens = [e for e in seen if e.kind == "token"]
    assert {e.data["node"] for e in tokens if not e.is_reply} == {"lookup"}  # the tool call's JSON
    assert {e.data["node"] for e in tokens if e.is_reply} == {"reply"}
    assert "".join(e.data["text"] for e in tokens if e.is_reply) == outcome.reply
    assert "check_stock" in "".join(e.data["text"] for e in tokens if not e.is_reply)
