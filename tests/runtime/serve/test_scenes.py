"""Scenes in parley serve, through the Python client on a real server (the scripted backend, and the
sample model): a round's events carry their speaker in order, `to`, whispers, joining and leaving
change who speaks and who hears, the game answers an NPC's tool call, rewind and cancel leave the
scene as it was, and every refusal is typed and names its field."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import httpx
import pytest

from runtime.backends.scripted import ScriptedBackend
from runtime.resources import examples_dir
from runtime.scene.scene import Scene
from runtime.serve.client import ParleyClient, ParleyError, RoundFailed, ServerEvent
from runtime.serve.npcs import Limits
from runtime.serve.server import running_server

TAVERN = "scenes/tavern.scene.json"
ARROWS = "How many arrows are there?"
WAIT = 60.0  # seconds: generous on a busy 2-core machine; nothing here waits that long when it works
NODE_KINDS = {"node_started", "token", "speak", "tool_request", "tool_call", "summarized", "warning", "guarded",
              "game_event", "tag", "node_finished"}


@pytest.fixture()
def client():
    backend = ScriptedBackend()
    with running_server(backend, [examples_dir()], limits=Limits(tool_timeout=WAIT)) as url, \
            ParleyClient(url, timeout=WAIT) as client:
        yield client
    backend.close()


def _store(folder: Path, **npc: object) -> Path:
    """A scene of one NPC, Hilde the quartermaster (tool_calling.json: a Tool Call node then a reply),
    in ``folder``/scenes beside a copy of her asset; ``npc`` changes her entry. The served folder."""
    (folder / "scenes").mkdir(parents=True)
    shutil.copy(examples_dir() / "tool_calling.json", folder / "tool_calling.json")
    scene = {"format": "parley-scene", "version": 1, "name": "The stores", "player_name": "Captain",
             "npcs": [{"id": "hilde", "name": "Hilde", "asset": "../tool_calling.json", **npc}],
             "director": {"max_npc_lines": 1}}
    (folder / "scenes" / "store.scene.json").write_text(json.dumps(scene), encoding="utf-8")
    return folder


def _refused(call, code: str, status: int) -> ParleyError:
    with pytest.raises(ParleyError) as error:
        call()
    assert (error.value.code, error.value.status) == (code, status), error.value.message
    return error.value


def _until(check, what: str, seconds: float = WAIT) -> None:
    """Wait for ``check()`` up to ``seconds`` (polling: the server has no event to wait on for it)."""
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"not within {seconds:g} s: {what}"
        time.sleep(0.01)


def test_a_rounds_events_carry_their_speaker_and_come_in_order(client):
    scene = client.create_scene(TAVERN, id="tavern")
    assert [(n.id, n.present) for n in scene.npcs] == [("mira", True), ("tomas", True), ("brann", False)]
    assert (scene.rounds, scene.busy, scene.scene) == (0, False, TAVERN)
    done = client.scene_line("tavern", "Good evening, all!")
    events = done.events
    assert events[0].kind == "round_started" and events[0].data["round"] == 0
    assert events[-1].kind == "round_finished"
    assert done.speakers == ["mira", "tomas"] and done.round == 0
    # the player's line first; each NPC's node events, then its line; Mira's all before Tomas's
    said = [(e.data["speaker"], e.data["heard_by"]) for e in events if e.kind == "scene_line"]
    assert said == [("player", ["mira", "tomas"]), ("mira", ["tomas"]), ("tomas", ["mira"])]
    order = [e.data["speaker"] for e in events if e.kind in NODE_KINDS or e.kind == "scene_line"]
    assert order == sorted(order, key=["player", "mira", "tomas"].index)
    by_speaker = {s: [e for e in events if e.kind in NODE_KINDS and e.data["speaker"] == s] for s in ("mira", "tomas")}
    for speaker, own in by_speaker.items():
        assert own[0].kind == "node_started" and own[-1].kind == "node_finished", speaker
        line = next(e for e in events if e.kind == "scene_line" and e.data["speaker"] == speaker)
        assert "".join(e.data["text"] for e in own if e.kind == "token" and e.data["reply"]).strip() == line.data["text"]
    assert all(e.data["speaker"] in ("mira", "tomas") for e in events if e.kind in NODE_KINDS)
    assert {e.data["name"]: e.data["value"] for e in by_speaker["tomas"] if e.kind == "tag"} == done.turns[1].record.tags
    assert [line.speaker for line in done.lines] == ["player", "mira", "tomas"]
    assert done.turns[1].record.line == f"Traveller: Good evening, all!\nMira: {done.lines[1].text}"
    assert client.scene("tavern").rounds == 1
    assert client.transcript("tavern") == done.lines


def test_a_rounds_stream_has_sse_ids_of_its_run(client):
    client.create_scene(TAVERN, id="tavern")
    with httpx.Client(base_url=str(client.http.base_url), timeout=WAIT) as http, \
            http.stream("POST", "/v1/scenes/tavern/lines", json={"line": "Hello."}) as answer:
        assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/event-stream")
        ids = [line[4:] for line in answer.iter_lines() if line.startswith("id: ")]
    run = answer.headers["Parley-Run"]
    assert ids == [f"{run}.{n}" for n in range(1, len(ids) + 1)] and len(ids) > 5


def test_to_whisper_join_and_leave_change_who_speaks_and_who_hears(client):
    client.create_scene(TAVERN, id="tavern")
    spoken_to = client.scene_line("tavern", "A song, if you please.", to="tomas")
    assert spoken_to.speakers[0] == "tomas" and spoken_to.turns[0].rule == "addressed"

    whispered = client.scene_line("tavern", "Is the bard any good?", to="mira", whisper=True)
    assert whispered.lines[0].heard_by == ["mira"]  # Tomas did not hear it...
    assert whispered.speakers == ["mira", "tomas"]
    # ...so his turn read only Mira's lines (the scripted Mira repeats what she heard: he hears that from her)
    assert [said.partition(":")[0] for said in whispered.turns[1].record.line.splitlines()] in (["Mira"], ["Mira", "Mira"])
    assert whispered.turns[1].record.line.endswith(f"Mira: {whispered.lines[1].text}")

    _refused(lambda: client.scene_line("tavern", "Open the gate!", to="brann"), "bad_request", 400)  # not there yet
    joined = client.join("tavern", "brann")
    assert [n.id for n in joined.npcs if n.present] == ["mira", "tomas", "brann"]
    to_brann = client.scene_line("tavern", "Is the gate shut for the night?", to="brann")
    assert to_brann.speakers[0] == "brann"
    assert to_brann.lines[0].heard_by == ["mira", "tomas", "brann"]
    assert to_brann.lines[1].speaker == "brann" and to_brann.lines[1].heard_by == ["mira"]  # out of Tomas's earshot
    assert "before" not in to_brann.turns[0].record.line and to_brann.turns[0].record.line.startswith("Traveller: Is the gate")

    left = client.leave("tavern", "tomas")
    assert [n.id for n in left.npcs if n.present] == ["mira", "brann"]
    after = client.scene_line("tavern", "Good night, all.")
    assert "tomas" not in after.speakers and after.lines[0].heard_by == ["mira", "brann"]
    assert all("tomas" not in line.heard_by for line in after.lines)
    transcript = client.transcript("tavern")
    assert [line.text for line in transcript if line.speaker == "player"] == [
        "A song, if you please.", "Is the bard any good?", "Is the gate shut for the night?", "Good night, all."]


def test_an_npcs_tool_call_in_a_scene_is_answered_by_the_game(tmp_path: Path):
    folder = _store(tmp_path / "served")
    asked = []
    with running_server(ScriptedBackend(), [folder], limits=Limits(tool_timeout=WAIT)) as url, \
            ParleyClient(url, timeout=WAIT) as client:
        client.create_scene("scenes/store.scene.json", id="stores")
        done = client.scene_line("stores", ARROWS, tools=lambda call: asked.append(call) or "240 arrows")
        # check_stock has a mock_result, but the game answers every call unless it asks for mocks
        assert [(c.speaker, c.tool, c.node, c.session) for c in asked] == [("hilde", "check_stock", "lookup", "stores")]
        request = next(e for e in done.events if e.kind == "tool_request")
        assert request.data["speaker"] == "hilde" and request.data["call_id"] == asked[0].call_id
        called = next(e for e in done.events if e.kind == "tool_call")
        assert (called.data["speaker"], called.data["result"]) == ("hilde", "240 arrows")
        assert "240 arrows" in done.lines[1].text and done.turns[0].record.path == ["lookup", "reply"]
        mocked = client.scene_line("stores", ARROWS, mock_tools=True, tools=lambda call: asked.append(call) or "no")
        assert len(asked) == 1 and "240" in mocked.lines[1].text  # the mock answered
        _refused(lambda: client.scene_tool_result("stores", asked[0].call_id, "late"), "unknown_call", 404)


def test_a_cancelled_round_and_a_closed_stream_leave_the_scene_as_it_was_and_busy_refuses_changes(tmp_path: Path):
    folder = _store(tmp_path / "served")
    with running_server(ScriptedBackend(), [folder], limits=Limits(tool_timeout=WAIT)) as url, \
            ParleyClient(url, timeout=WAIT) as client:
        client.create_scene("scenes/store.scene.json", id="stores")
        client.scene_line("stores", "Good morning.", tools=lambda call: "0")
        before = client.transcript("stores")

        events = client.stream_scene_line("stores", ARROWS)  # nobody answers: the round waits at the tool call
        next(e for e in events if e.kind == "tool_request")
        assert client.scene("stores").busy and client.scenes()[0].busy
        assert client.transcript("stores") == before  # what the finished rounds said, not the player's new line
        for change in (lambda: client.scene_line("stores", "Hello?"), lambda: client.join("stores", "hilde"),
                       lambda: client.leave("stores", "hilde"), lambda: client.rewind_scene("stores", 0)):
            _refused(change, "busy", 409)
        assert client.cancel_scene("stores") is True
        failed = [e for e in events if e.kind == "round_failed"]
        assert failed[0].data["error"]["code"] == "cancelled"
        assert (failed[0].data["line"], failed[0].data["speaker"]) == (ARROWS, "hilde")
        assert client.transcript("stores") == before and client.scene("stores").rounds == 1
        assert client.cancel_scene("stores") is False

        # the client's scene_line raises RoundFailed, with the player's line handed back
        def cancel_instead(call):
            assert client.cancel_scene("stores") is True
            return "never used"

        with pytest.raises(RoundFailed) as cancelled:
            client.scene_line("stores", ARROWS, tools=cancel_instead)
        assert (cancelled.value.code, cancelled.value.line, cancelled.value.speaker) == ("cancelled", ARROWS, "hilde")

        # a round's stream cannot be resumed: closing it cancels the round
        stream = client.stream_scene_line("stores", ARROWS)
        next(e for e in stream if e.kind == "tool_request")
        stream.close()
        # well before the tool call's --tool-timeout (WAIT) would end it
        _until(lambda: not client.scene("stores").busy, "the round ends once its stream closed", WAIT / 3)
        assert client.transcript("stores") == before and client.scene("stores").rounds == 1
        assert client.scene_line("stores", ARROWS, tools=lambda call: "7").lines[0].text == ARROWS


def test_rewind_keeps_the_first_rounds_and_the_scene_goes_on_from_there(client):
    client.create_scene(TAVERN, id="tavern")
    first = client.scene_line("tavern", "Good evening, all!")
    client.join("tavern", "brann")
    second = client.scene_line("tavern", "Brann, is the gate shut?")
    assert second.speakers[0] == "brann" and client.scene("tavern").rounds == 2
    kept = client.rewind_scene("tavern", 1)
    assert kept.rounds == 1
    assert [n.present for n in kept.npcs] == [True, True, True]  # he joined before the second round: still there
    assert client.transcript("tavern") == first.lines
    again = client.scene_line("tavern", "Brann, is the gate shut?")
    assert again.lines == second.lines and again.speakers == second.speakers  # the scripted backend is exact
    error = _refused(lambda: client.rewind_scene("tavern", 5), "bad_request", 400)
    assert error.message.startswith("rounds:")
    assert client.rewind_scene("tavern", 0).rounds == 0 and client.transcript("tavern") == []
    assert [n.present for n in client.scene("tavern").npcs] == [True, True, False]  # as the scene began


def test_errors_are_typed_and_name_the_field(client, tmp_path: Path):
    for call in (lambda: client.scene("nowhere"), lambda: client.scene_line("nowhere", "Hi"),
                 lambda: client.join("nowhere", "mira"), lambda: client.rewind_scene("nowhere", 0),
                 lambda: client.cancel_scene("nowhere"), lambda: client.transcript("nowhere"),
                 lambda: client.delete_scene("nowhere"), lambda: client.scene_tool_result("nowhere", "x", "y")):
        _refused(call, "unknown_scene", 404)
    for outside in ("../chat.json", "/etc/hostname", "scenes/../../pyproject.toml", "missing.scene.json"):
        assert "scene" in _refused(lambda path=outside: client.create_scene(path), "unknown_asset", 404).message
    client.create_scene(TAVERN, id="tavern")
    _refused(lambda: client.create_scene(TAVERN, id="tavern"), "exists", 409)
    _refused(lambda: client.create_scene(TAVERN, id="no spaces"), "bad_request", 400)
    assert _refused(lambda: client.join("tavern", "innkeeper"), "unknown_npc", 404).message.startswith("npc:")
    assert _refused(lambda: client.scene_line("tavern", "Hi", to="innkeeper"), "unknown_npc", 404
                    ).message.startswith("to:")
    assert _refused(lambda: client.scene_line("tavern", "Hi", whisper=True), "bad_request", 400
                    ).message.startswith("whisper:")
    assert _refused(lambda: client.scene_line("tavern", "x" * 4001), "too_large", 413).message.startswith("line:")
    assert client.scene("tavern").rounds == 0 and client.transcript("tavern") == []

    http = client.http
    for body, field in [({"to": "mira"}, "line"), ({"line": 3}, "line"), ({"line": "Hi", "whisper": "yes"}, "whisper"),
                        ({"line": "Hi", "loud": True}, "loud")]:
        answer = http.post("/v1/scenes/tavern/lines", json=body)
        assert answer.status_code == 400 and answer.json()["error"]["message"].startswith(f"{field}:"), answer.text
    answer = http.post("/v1/scenes/tavern/rewind", json={"rounds": -1})
    assert answer.status_code == 400 and answer.json()["error"]["message"].startswith("rounds:")
    # a lone surrogate (JSON's \ud800 reads as one) is refused before anything runs, as a session's line is
    lone = b'{"line": "Hello \\ud800 there"}'
    for path in ("/v1/scenes/tavern/lines", "/v1/sessions/npc/turns"):
        if path.startswith("/v1/sessions"):
            client.create_session("chat.json", id="npc")
        answer = http.post(path, content=lone, headers={"content-type": "application/json"})
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["message"].startswith("line:") and "surrogate" in answer.text
    assert client.transcript("tavern") == [] and client.session("npc").turns == 0

    client.delete_scene("tavern")
    assert client.scenes() == []
    _refused(lambda: client.scene("tavern"), "unknown_scene", 404)


def test_a_bad_scene_file_is_refused_with_its_problems(tmp_path: Path):
    folder = _store(tmp_path / "served")
    scenes = folder / "scenes"
    raw = json.loads((scenes / "store.scene.json").read_text(encoding="utf-8"))
    raw["npcs"][0]["id"] = "player"
    (scenes / "player.scene.json").write_text(json.dumps(raw), encoding="utf-8")
    raw["npcs"][0].update(id="hilde", asset="../../outside.json")
    shutil.copy(examples_dir() / "chat.json", tmp_path / "outside.json")
    (scenes / "outside.scene.json").write_text(json.dumps(raw), encoding="utf-8")
    broken = json.loads((examples_dir() / "chat.json").read_text(encoding="utf-8"))
    broken["nodes"][0]["temperature"] = "warm"
    (folder / "broken.json").write_text(json.dumps(broken), encoding="utf-8")
    raw["npcs"][0]["asset"] = "../broken.json"
    (scenes / "broken.scene.json").write_text(json.dumps(raw), encoding="utf-8")
    (scenes / "garbage.scene.json").write_text("{not json", encoding="utf-8")
    with running_server(ScriptedBackend(), [folder]) as url, ParleyClient(url) as client:
        player = _refused(lambda: client.create_scene("scenes/player.scene.json"), "bad_scene", 422)
        assert any(p.field == "npcs.0.id" and "player" in p.message for p in player.problems)
        outside = _refused(lambda: client.create_scene("scenes/outside.scene.json"), "bad_scene", 422)
        assert outside.problems[0].field == "npcs.0.asset" and "--assets" in outside.message
        bad_npc = _refused(lambda: client.create_scene("scenes/broken.scene.json"), "bad_scene", 422)
        assert bad_npc.problems[0].field == "npcs.0.asset"
        assert any(p.node_id == "reply" and p.field.endswith("temperature") for p in bad_npc.problems)
        assert _refused(lambda: client.create_scene("scenes/garbage.scene.json"), "bad_scene", 422).problems
        assert client.scenes() == []


def test_a_scenes_npcs_count_against_the_session_limit(tmp_path: Path):
    with running_server(ScriptedBackend(), [examples_dir()], limits=Limits(max_sessions=4)) as url, \
            ParleyClient(url) as client:
        client.create_session("chat.json", id="one")
        client.create_scene(TAVERN, id="tavern")  # three NPCs: 4 held
        _refused(lambda: client.create_session("chat.json"), "limit_reached", 429)
        _refused(lambda: client.create_scene(TAVERN), "limit_reached", 429)
        client.delete_scene("tavern")
        client.create_session("chat.json", id="two")


def test_two_scenes_and_a_session_run_side_by_side_apart(client):
    """Rounds of two scenes and a session's turn at once: each says what it says alone."""
    client.create_scene(TAVERN, id="a")
    client.create_scene(TAVERN, id="b")
    client.create_session("chat.json", id="npc")
    said: dict[str, list[str]] = {}
    errors: list[BaseException] = []

    def play(scene_id: str) -> None:
        try:
            said[scene_id] = [line.text for line in client.scene_line(scene_id, "Good evening, all!").lines]
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=play, args=(s,)) for s in ("a", "b")]
    for t in threads:
        t.start()
    reply = client.turn("npc", "Good evening.").reply
    for t in threads:
        t.join(WAIT)
    assert not errors and not any(t.is_alive() for t in threads), errors
    # the scripted backend names each node's cache: scene a's NPCs never share one with b's or the session's
    assert said["a"] == [s.replace("scene:b/", "scene:a/") for s in said["b"]] and said["a"] != said["b"]
    assert "scene:" not in reply


@pytest.mark.model
def test_a_scene_on_the_sample_model_streams_each_npcs_words_under_its_name(sample_model: Path, tmp_path: Path):
    from runtime.backends.llama import LlamaBackend
    from tests.runtime.scene.test_scene_real_model import tavern_on

    path = tavern_on(sample_model, tmp_path)
    line = "Good evening! Is there a room, and a song?"
    backend = LlamaBackend(asset_dir=path.parent)
    try:
        with running_server(backend, [tmp_path / "examples"]) as url, ParleyClient(url, timeout=300.0) as client:
            client.create_scene("scenes/tavern.scene.json", id="tavern")
            shown: list[ServerEvent] = []
            done = client.scene_line("tavern", line, on_event=lambda e: e.is_reply and shown.append(e))
    finally:
        backend.close()
    assert done.speakers == ["mira", "tomas"] and all(text.text.strip() for text in done.lines)
    for speaker, said in zip(done.speakers, done.lines[1:], strict=True):
        assert said.speaker == speaker
        words = "".join(e.data["text"] for e in shown if e.kind == "token" and e.data["speaker"] == speaker)
        assert words.strip() == said.text.strip(), speaker
    # served, the scene says exactly what it says run by itself (the sample model is exact on one thread)
    alone_backend = LlamaBackend(asset_dir=path.parent)
    try:
        alone = Scene.open(path, alone_backend).say(line)
    finally:
        alone_backend.close()
    assert [t.result.reply for t in alone.turns] == [t.record.reply for t in done.turns]


@pytest.mark.model
def test_after_a_round_the_npcs_read_ahead_and_the_next_round_stops_it(sample_model: Path, tmp_path: Path, caplog):
    """Once a round has ended, the server reads ahead (the NPCs' caches up to their next prompts) while
    the game waits for the player; a line said at once stops it, and the round runs as usual."""
    from runtime.backends.llama import LlamaBackend
    from tests.runtime.scene.test_scene_real_model import tavern_on

    caplog.set_level("INFO", logger="parley.serve")
    path = tavern_on(sample_model, tmp_path)
    backend = LlamaBackend(asset_dir=path.parent)
    try:
        with running_server(backend, [tmp_path / "examples"]) as url, ParleyClient(url, timeout=300.0) as client:
            client.create_scene("scenes/tavern.scene.json", id="tavern")
            client.scene_line("tavern", "Good evening, all!")
            _until(lambda: any("read ahead" in r.getMessage() for r in caplog.records), "a read-ahead after round 0")
            read = next(r.getMessage() for r in caplog.records if "read ahead" in r.getMessage())
            assert int(read.split()[2]) > 0, read
            second = client.scene_line("tavern", "Tomas, a song please!")  # said at once: a read-ahead may run
            third = client.scene_line("tavern", "And you, Mira?")
            client.delete_scene("tavern")
    finally:
        backend.close()
    assert second.speakers and third.speakers


@pytest.mark.parametrize("bad", [".", ".."])
def test_ids_no_client_could_reach_are_refused(client, bad):
    """Issue 39: sessions '.' and '..' were created, but a URL resolves them away: no client could
    reach or delete them. A session's and a scene's id are refused alike, naming the rule."""
    for create in (lambda: client.create_session("chat.json", id=bad),
                   lambda: client.create_scene(TAVERN, id=bad)):
        error = _refused(create, "bad_request", 400)
        assert "other than '.' and '..'" in error.message
    assert client.create_session("chat.json", id="a.b").id == "a.b"  # a dot within an id is fine
