"""What a game reacts to, on the wire: a Guard that finds a policy broken sends ``guarded`` (its
policy, exit, check, why and what it checked), a marked game event sends ``game_event``, and the
turn's end (``turn_finished``, ``GET turns/{id}``, a resumed stream, the store's kept end) carries
``guard`` and ``game_events``, with the asset's diagnostics on or off."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.agent import TurnGuard
from runtime.asset.file import save_asset
from runtime.backends.scripted import ScriptedBackend
from runtime.serve.client import ParleyClient
from runtime.serve.server import running_server
from runtime.serve.store import SQLiteStore
from tests.runtime.conversations import asset
from tests.runtime.serve.test_resume import frames

NARRATION = "(Suddenly her two brothers appear and hand over the amulet)"
PLAIN = "Good morning, which way to the market?"
CANNED = "Nice story. Guards! To me!"
WATCH = TurnGuard("narration", "policy:narration", "gate")


def write_gate_guard(folder: Path, diagnostics: bool = True) -> str:
    """A gate guard whose Guard refuses narration with a canned line; the game calls the watch on
    that exit (game event ``call_the_watch``). Returns the asset's name in ``folder``."""
    graph = asset(
        ("Guard", "gate", {"policies": [{"name": "narration", "packs": ["narration"], "reply": CANNED, "exit": ""}],
                           "default_exit": "answer"}),
        ("GenerateAndSpeak", "answer", {"system_prompt": "You guard the gate.", "context_size": 512,
                                        "max_tokens": 16}),
        game_events=[{"name": "call_the_watch", "node": "gate", "exit": "policy:narration"}],
        enable_diagnostics=diagnostics,
    )
    name = "gate_guard.json" if diagnostics else "gate_guard_quiet.json"
    save_asset(graph, folder / name)
    return name


@pytest.fixture
def served(tmp_path: Path) -> Iterator[ParleyClient]:
    write_gate_guard(tmp_path)
    write_gate_guard(tmp_path, diagnostics=False)
    backend = ScriptedBackend()
    try:
        with running_server(backend, [tmp_path]) as url, ParleyClient(url) as client:
            yield client
    finally:
        backend.close()


def test_a_guarded_line_sends_its_policy_and_exit_and_the_game_event_and_the_turn_carries_them(served) -> None:
    npc = served.create_session("gate_guard.json")
    outcome = served.turn(npc.id, NARRATION)
    kinds = [e.kind for e in outcome.events]
    guarded = [e.data for e in outcome.events if e.kind == "guarded"]
    assert len(guarded) == 1
    assert {k: guarded[0][k] for k in ("node", "policy", "exit", "check", "checked")} == {
        "node": "gate", "policy": "narration", "exit": "policy:narration", "check": "patterns", "checked": "line"}
    assert "appear" in guarded[0]["why"]
    assert [e.data for e in outcome.events if e.kind == "game_event"] == [
        {"node": "gate", "name": "call_the_watch", "exit": "policy:narration"}]
    # told as the guard decides, before its node finishes and the turn ends
    assert kinds.index("guarded") < kinds.index("game_event") < kinds.index("node_finished") < kinds.index("turn_finished")
    assert outcome.reply == CANNED
    assert (outcome.guard, outcome.game_events) == (WATCH, ["call_the_watch"])
    finished = outcome.events[-1].data
    assert finished["guard"] == {"policy": "narration", "exit": "policy:narration", "node": "gate"}
    assert finished["game_events"] == ["call_the_watch"]
    detail = served.turn_detail(npc.id, outcome.turn_id)
    assert (detail.guard, detail.game_events) == (WATCH, ["call_the_watch"])


def test_a_line_that_passes_sends_neither_and_the_turns_guard_is_empty(served) -> None:
    npc = served.create_session("gate_guard.json")
    outcome = served.turn(npc.id, PLAIN)
    assert not [e for e in outcome.events if e.kind in ("guarded", "game_event")]
    assert outcome.path == ["gate", "answer"]
    assert (outcome.guard, outcome.game_events) == (TurnGuard(), [])
    assert outcome.events[-1].data["guard"] == {"policy": "", "exit": "", "node": ""}
    assert outcome.events[-1].data["game_events"] == []


def test_with_diagnostics_off_the_turn_still_carries_the_guard_and_game_events(served) -> None:
    npc = served.create_session("gate_guard_quiet.json")
    outcome = served.turn(npc.id, NARRATION)
    assert outcome.diagnostics is None
    assert (outcome.guard, outcome.game_events) == (WATCH, ["call_the_watch"])
    assert [e.kind for e in outcome.events if e.kind in ("guarded", "game_event")] == ["guarded", "game_event"]


def test_a_watcher_sees_the_guarded_and_game_event_events(served) -> None:
    npc = served.create_session("gate_guard.json")
    seen = []
    with served.watch(npc.id) as watch:
        stream = iter(watch)
        assert next(stream).kind == "watching"
        served.turn(npc.id, NARRATION)
        for event in stream:
            seen.append(event.kind)
            if event.kind == "turn_finished":
                break
    assert "guarded" in seen and "game_event" in seen


def test_a_resumed_stream_replays_them_after_last_event_id(served) -> None:
    npc = served.create_session("gate_guard.json")
    with served.http.stream("POST", f"/v1/sessions/{npc.id}/turns", json={"line": NARRATION}) as response:
        whole = frames(response.read())
    first = whole[0]
    assert first["event"] == "turn_started"
    run = first["id"].rpartition(".")[0]
    rest = served.http.get(f"/v1/sessions/{npc.id}/runs/{run}/events", headers={"Last-Event-ID": first["id"]})
    replayed = frames(rest.content)
    assert [f["event"] for f in replayed] == [f["event"] for f in whole[1:]]
    assert "guarded" in [f["event"] for f in replayed] and "game_event" in [f["event"] for f in replayed]
    assert replayed == whole[1:]


def test_the_end_a_store_keeps_for_another_server_carries_them(tmp_path: Path) -> None:
    """A run that finished on a server that stopped since is resumed from the store's kept end."""
    assets = tmp_path / "assets"
    assets.mkdir()
    write_gate_guard(assets)
    backend = ScriptedBackend()
    try:
        store = SQLiteStore(tmp_path / "sessions.db")
        with running_server(backend, [assets], store=store) as url, ParleyClient(url) as client:
            npc = client.create_session("gate_guard.json", id="brann")
            run = client.turn(npc.id, NARRATION).events[0].data["run"]
        store = SQLiteStore(tmp_path / "sessions.db")
        with running_server(backend, [assets], store=store) as url, ParleyClient(url) as client:
            kept = frames(client.http.get(f"/v1/sessions/brann/runs/{run}/events").content)
    finally:
        backend.close()
    assert [f["event"] for f in kept] == ["turn_finished"]
    data = json.loads(kept[0]["data"])
    assert data["guard"] == {"policy": "narration", "exit": "policy:narration", "node": "gate"}
    assert data["game_events"] == ["call_the_watch"]
