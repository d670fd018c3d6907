"""A player who speaks while the NPC answers: the asset's ``double_text`` decides (queue, the default;
reject; latest_wins; interrupt). The NPC's reply is held after its first token until the second line
has reached the server, so the second line always arrives mid-reply, however loaded the machine is."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import runtime.serve.npcs as npcs_module
from runtime.backends.scripted import ScriptedBackend
from runtime.resources import examples_dir
from runtime.serve.client import ParleyClient, ParleyError, ServerEvent, TurnFailed
from runtime.serve.server import running_server
from tests.samples import example_on_sample_model

DEADLINE = 60.0  # seconds: generous for a busy 2-core machine; only a hang reaches it
FIRST, SECOND = "Tell me about the inn", "Never mind, is there a room?"


def served(tmp_path: Path, policy: str | None) -> Path:
    asset = json.loads((examples_dir() / "chat.json").read_text(encoding="utf-8"))
    if policy is not None:
        asset["double_text"] = policy
    (tmp_path / "chat.json").write_text(json.dumps(asset), encoding="utf-8")
    return tmp_path


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """Set it to let the first turn's reply go on past its first token."""
    release, real_put = threading.Event(), npcs_module.Stream.put

    def put(stream, item, last: bool = False) -> None:
        real_put(stream, item, last)
        if item.kind == "token" and stream.line == FIRST:
            release.wait(DEADLINE)

    monkeypatch.setattr(npcs_module.Stream, "put", put)
    yield release
    release.set()


def reference(tmp_path: Path, lines: list[str]) -> list[str]:
    """The replies a session gives ``lines`` one after another, nobody talking over it."""
    backend = ScriptedBackend()
    try:
        with running_server(backend, [served(tmp_path / "reference", None)]) as url, ParleyClient(url) as client:
            npc = client.create_session("chat.json", id="innkeeper")
            return [client.turn(npc.id, line).reply for line in lines]
    finally:
        backend.close()


def talk_over(tmp_path: Path, policy: str | None, held: threading.Event):
    """FIRST, then SECOND while FIRST's reply is held: both streams' events, and the session after."""
    (tmp_path / "reference").mkdir()
    backend = ScriptedBackend()
    try:
        with running_server(backend, [served(tmp_path, policy)]) as url, ParleyClient(url) as client:
            npc = client.create_session("chat.json", id="innkeeper")
            first = client.stream_turn(npc.id, FIRST)
            first_events = [next(first), next(first)]  # turn_started, node_started: the reply is under way
            while first_events[-1].kind != "token":
                first_events.append(next(first))
            second = client.stream_turn(npc.id, SECOND)
            try:
                second_events = [next(second)]  # the server has taken the line (and, by policy, stopped the first)
            finally:
                held.set()
            first_events += list(first)
            second_events += list(second)
            return first_events, second_events, client.turns(npc.id), client.export_history(npc.id)
    finally:
        backend.close()


def kinds(events: list[ServerEvent]) -> list[str]:
    return [e.kind for e in events]


def test_by_default_a_second_line_waits_and_both_are_answered_in_order(tmp_path, held) -> None:
    first, second, turns, _ = talk_over(tmp_path, None, held)
    assert kinds(first)[-1] == "turn_finished" and kinds(second)[0] == "turn_queued"
    assert second[0].data["line"] == SECOND and second[0].data["position"] == 1
    assert kinds(second)[1] == "turn_started" and kinds(second)[-1] == "turn_finished"
    assert [t.line for t in turns] == [FIRST, SECOND]
    assert [t.reply for t in turns] == reference(tmp_path, [FIRST, SECOND])


def test_reject_refuses_the_second_line_as_busy_and_the_first_finishes(tmp_path, held) -> None:
    with pytest.raises(ParleyError) as busy:
        talk_over(tmp_path, "reject", held)
    assert (busy.value.code, busy.value.status) == ("busy", 409)
    assert "double_text is reject" in busy.value.message


def test_latest_wins_drops_the_first_turn_and_its_line_and_answers_the_second(tmp_path, held) -> None:
    first, second, turns, _ = talk_over(tmp_path, "latest_wins", held)
    failed = first[-1]
    assert failed.kind == "turn_failed" and failed.data["error"]["code"] == "superseded"
    assert failed.data["line"] == FIRST  # handed back
    assert kinds(second)[-1] == "turn_finished"
    assert [t.line for t in turns] == [SECOND]
    assert [t.reply for t in turns] == reference(tmp_path, [SECOND])


def test_interrupt_keeps_the_first_line_with_its_reply_cut_off_then_answers_the_second(tmp_path, held) -> None:
    first, second, turns, history = talk_over(tmp_path, "interrupt", held)
    failed = first[-1]
    assert failed.kind == "turn_failed" and failed.data["error"]["code"] == "interrupted"
    heard = "".join(e.data["text"] for e in first if e.kind == "token")
    assert heard, "the first reply was cut before its first token"
    assert [t.line for t in turns] == [FIRST, SECOND]
    assert turns[0].reply == heard.strip() + npcs_module.CUT
    assert kinds(second)[-1] == "turn_finished"
    assert len(history["turns"]) == 2  # the cut turn is part of the history a save keeps


def test_a_cancel_ends_the_running_turn_and_every_line_waiting_behind_it(tmp_path, held) -> None:
    backend = ScriptedBackend()
    try:
        with running_server(backend, [served(tmp_path, "queue")]) as url, ParleyClient(url) as client:
            npc = client.create_session("chat.json", id="innkeeper")
            first = client.stream_turn(npc.id, FIRST)
            while next(first).kind != "token":
                pass
            waiting = client.stream_turn(npc.id, SECOND)
            assert next(waiting).kind == "turn_queued"
            assert "parley_lines_queued 1.0" in client.http.get("/metrics").text
            assert client.cancel(npc.id) is True
            held.set()
            with pytest.raises(TurnFailed) as queued:
                for event in waiting:
                    if event.kind == "turn_failed":
                        raise TurnFailed(event.data["error"]["code"], "", line=event.data["line"])
            assert (queued.value.code, queued.value.line) == ("cancelled", SECOND)
            assert [e.kind for e in first][-1] == "turn_failed"  # the rest of the first stream
            assert client.turns(npc.id) == []
    finally:
        backend.close()


def test_the_editor_offers_the_policy_as_a_choice_with_queue_stated_as_the_default() -> None:
    from runtime.asset.model import Asset

    field = Asset.model_fields["double_text"]
    assert field.default == "queue"
    assert set(field.annotation.__args__) == {"queue", "reject", "latest_wins", "interrupt"}
    assert "queue" in field.description and "Serving" == field.json_schema_extra["group"]


@pytest.mark.model
def test_on_the_sample_model_a_line_said_over_the_reply_is_queued_and_both_replies_are_as_said_apart(
        sample_model, tmp_path: Path, held) -> None:
    from runtime.backends.llama import LlamaBackend

    example_on_sample_model("chat", sample_model, tmp_path, 24)
    backend = LlamaBackend(asset_dir=tmp_path)
    try:
        with running_server(backend, [tmp_path]) as url, ParleyClient(url, timeout=300) as client:
            talked_over, apart = client.create_session("chat.json").id, client.create_session("chat.json").id
            first = client.stream_turn(talked_over, FIRST)
            while next(first).kind != "token":
                pass
            second = client.stream_turn(talked_over, SECOND)
            try:
                assert next(second).kind == "turn_queued"
            finally:
                held.set()
            assert [e.kind for e in first][-1] == "turn_finished"
            assert [e.kind for e in second][-1] == "turn_finished"
            expected = [client.turn(apart, line).reply for line in (FIRST, SECOND)]
            assert [t.reply for t in client.turns(talked_over)] == expected
    finally:
        backend.close()


def test_the_policy_is_saved_only_when_it_is_not_the_default(tmp_path: Path) -> None:
    from runtime.asset.file import load_asset, save_asset

    asset = load_asset(examples_dir() / "chat.json")
    save_asset(asset, tmp_path / "queue.json")
    assert "double_text" not in (tmp_path / "queue.json").read_text(encoding="utf-8")
    save_asset(asset.model_copy(update={"double_text": "interrupt"}), tmp_path / "interrupt.json")
    assert load_asset(tmp_path / "interrupt.json").double_text == "interrupt"
