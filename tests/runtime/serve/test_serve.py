"""parley serve through its Python client, on the scripted backend: sessions, turns with tool calls,
cancelling, the idle-only changes, history, typed errors, and concurrent sessions kept apart."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from runtime.backends.scripted import ScriptedBackend
from runtime.resources import examples_dir
from runtime.serve.client import ParleyClient, ParleyError, ServerEvent, TurnFailed
from runtime.serve.npcs import Limits
from runtime.serve.server import running_server

ARROWS = "How many arrows are there?"
WAIT = 60.0  # seconds: generous on a busy 2-core machine; nothing here waits that long when it works


@pytest.fixture()
def server():
    backend = ScriptedBackend()
    with running_server(backend, [examples_dir()], limits=Limits(tool_timeout=WAIT)) as url, ParleyClient(url) as client:
        yield client


def test_a_turn_with_a_tool_call_streams_its_events_and_the_client_answers_the_tool(server):
    npc = server.create_session("tool_calling.json", id="quartermaster")
    asked = []
    outcome = server.turn(npc.id, ARROWS, tools=lambda call: asked.append(call) or "240 arrows")
    kinds = [e.kind for e in outcome.events]
    assert kinds[0] == "turn_started" and kinds[-1] == "turn_finished"
    assert kinds.index("tool_request") < kinds.index("tool_call") < kinds.index("node_finished")
    assert [e.data["node"] for e in outcome.events if e.kind == "node_started"] == ["lookup", "reply"]
    assert [(c.tool, c.node) for c in asked] == [("check_stock", "lookup")]
    assert "240 arrows" in outcome.reply
    assert outcome.path == ["lookup", "reply"]
    assert outcome.diagnostics is not None and outcome.diagnostics.reply == outcome.reply
    tool_call = next(e for e in outcome.events if e.kind == "tool_call")
    assert tool_call.data["result"] == "240 arrows"
    assert server.session(npc.id).turns == 1
    detail = server.turn_detail(npc.id, outcome.turn_id)
    assert detail.diagnostics == outcome.diagnostics
    assert detail.prompts["reply"].parts[0].kind == "system"
    assert detail == outcome.record and (detail.line, detail.index) == (ARROWS, 0)  # one record, sent twice


def test_cancelling_a_turn_leaves_the_session_exactly_as_it_was(server):
    npc = server.create_session("tool_calling.json")
    server.turn(npc.id, ARROWS, tools=lambda call: "240")
    before = server.export_history(npc.id)

    def cancel_instead(call):
        assert server.cancel(npc.id) is True
        return "never used"

    with pytest.raises(TurnFailed) as failed:
        server.turn(npc.id, "And the bows?", tools=cancel_instead)
    assert failed.value.code == "cancelled"
    assert server.export_history(npc.id) == before
    assert server.session(npc.id).busy is False
    assert server.cancel(npc.id) is False  # nothing runs now


def test_a_busy_session_refuses_every_change_with_a_typed_error_and_saves_its_last_finished_state(server):
    npc = server.create_session("tool_calling.json")
    server.turn(npc.id, "Good morning", tools=lambda call: "0")
    finished_state = server.export_history(npc.id)
    events = server.stream_turn(npc.id, ARROWS)  # no tools answered: the turn waits at the tool call
    request = next(e for e in events if e.kind == "tool_request")
    assert server.session(npc.id).busy
    assert server.export_history(npc.id) == finished_state  # a save during a reply gets the last finished turn
    refusals = [
        lambda: server.set_variables(npc.id, {}),
        lambda: server.change_params(npc.id, {"reply": {"temperature": 0.2}}),
        lambda: server.rewind(npc.id, 0),
        lambda: server.import_history(npc.id, finished_state),
    ]  # a second line waits in the queue (double_text: tests/runtime/serve/test_double_text.py)
    for refuse in refusals:
        with pytest.raises(ParleyError) as error:
            refuse()
        assert (error.value.code, error.value.status) == ("busy", 409)
    server.tool_result(npc.id, request.data["call_id"], "12")
    finished = [e for e in events if e.kind == "turn_finished"]
    assert len(finished) == 1 and "12" in finished[0].data["reply"]
    saved = server.export_history(npc.id)
    assert [t["player"] for t in saved["turns"]] == ["Good morning", ARROWS]
    with pytest.raises(ParleyError) as stale:
        server.tool_result(npc.id, request.data["call_id"], "again")
    assert stale.value.code == "unknown_call"


def test_parameters_change_while_idle_and_structure_is_refused_naming_the_field(server):
    npc = server.create_session("tool_calling.json")
    server.change_params(npc.id, {"reply": {"system_prompt": "You are a terse quartermaster.", "temperature": 0.1}})
    outcome = server.turn(npc.id, ARROWS, tools=lambda call: "9")
    reply_node = next(n for n in outcome.diagnostics.nodes if n.node == "reply")
    assert reply_node.input.prompt[0].content == "You are a terse quartermaster."

    with pytest.raises(ParleyError) as structural:
        server.change_params(npc.id, {"lookup": {"tools": []}})
    assert structural.value.code == "structural_change"
    assert (structural.value.problems[0].node_id, structural.value.problems[0].field) == ("lookup", "tools")
    for nodes, code in [({"nowhere": {"temperature": 1}}, "unknown_node"),
                        ({"reply": {"temperature": "hot"}}, "bad_request"),
                        ({"reply": {"context_size": 99}}, "structural_change"),
                        ({"reply": {"no_such": 1}}, "bad_request")]:
        with pytest.raises(ParleyError) as error:
            server.change_params(npc.id, nodes)
        assert error.value.code == code, nodes
    # a refused change in a batch changes nothing
    with pytest.raises(ParleyError):
        server.change_params(npc.id, {"reply": {"temperature": 0.9}, "lookup": {"exits": {}}})
    history = server.export_history(npc.id)
    again = server.turn(npc.id, ARROWS, tools=lambda call: "9")
    assert next(n for n in again.diagnostics.nodes if n.node == "reply").input.prompt[0].content == \
        "You are a terse quartermaster."
    assert history["version"] >= 4


def test_variables_rewind_and_regenerate(server):
    npc = server.create_session("chat.json", variables={"player_name": "Ada"})
    assert npc.variables["player_name"] == "Ada"
    with pytest.raises(ParleyError) as unknown:
        server.create_session("chat.json", variables={"nope": 1})
    assert unknown.value.code == "bad_request"
    first = server.turn(npc.id, "Hello there.")
    server.set_variables(npc.id, {"time_of_day": "morning"})
    assert server.session(npc.id).variables["time_of_day"] == "morning"
    server.turn(npc.id, "What is this place?")
    assert server.rewind(npc.id, 1).turns == 1
    assert [t.line for t in server.turns(npc.id)] == ["Hello there."]
    again = server.regenerate(npc.id, 0)
    assert again.turn == 0 and again.turn_id != first.turn_id
    assert server.session(npc.id).turns == 1
    with pytest.raises(ParleyError) as bad_turn:
        server.regenerate(npc.id, 5)
    assert bad_turn.value.code == "unknown_turn"


def test_history_moves_between_sessions_and_a_bad_one_is_refused_with_its_problems(server):
    npc = server.create_session("chat.json")
    server.turn(npc.id, "Hello there.")
    server.turn(npc.id, "Goodbye.")
    history = server.export_history(npc.id)
    other = server.create_session("chat.json", id="copy")
    assert server.import_history(other.id, history).turns == 2
    assert server.export_history(other.id) == history
    broken = json.loads(json.dumps(history))
    broken["version"] = "four"
    with pytest.raises(ParleyError) as error:
        server.import_history(other.id, broken)
    assert error.value.code == "bad_history" and error.value.problems
    wrong_graph = server.create_session("intent_router.json")  # no node "reply"
    with pytest.raises(ParleyError) as mismatch:
        server.import_history(wrong_graph.id, history)
    assert mismatch.value.code == "bad_history"
    assert server.export_history(other.id) == history  # a refused import lost nothing


def test_sessions_are_listed_and_deleted_and_unknown_ids_are_typed(server):
    a = server.create_session("chat.json", id="a")
    server.create_session("chat.json", id="b")
    assert {s.id for s in server.sessions()} == {"a", "b"}
    with pytest.raises(ParleyError) as exists:
        server.create_session("chat.json", id="a")
    assert exists.value.code == "exists"
    server.delete_session(a.id)
    assert [s.id for s in server.sessions()] == ["b"]
    for call, code in [(lambda: server.session("a"), "unknown_session"),
                       (lambda: server.turn("a", "hi"), "unknown_session"),
                       (lambda: server.turn_detail("b", 99), "unknown_turn"),
                       (lambda: server.create_session("missing.json"), "unknown_asset"),
                       (lambda: server.create_session("chat.json", id="bad id!"), "bad_request")]:
        with pytest.raises(ParleyError) as error:
            call()
        assert error.value.code == code


def test_a_bad_asset_is_refused_with_the_located_problems(tmp_path: Path):
    raw = json.loads((examples_dir() / "chat.json").read_text(encoding="utf-8"))
    raw["nodes"][0]["temperature"] = "warm"
    (tmp_path / "broken.json").write_text(json.dumps(raw), encoding="utf-8")
    raw2 = json.loads((examples_dir() / "chat.json").read_text(encoding="utf-8"))
    raw2["start_node"] = "nowhere"
    (tmp_path / "lost.json").write_text(json.dumps(raw2), encoding="utf-8")
    with running_server(ScriptedBackend(), [tmp_path]) as url, ParleyClient(url) as client:
        with pytest.raises(ParleyError) as error:
            client.create_session("broken.json")
        assert error.value.code == "bad_asset" and error.value.status == 422
        assert any(p.field.endswith("temperature") and p.node_id == "reply" for p in error.value.problems)
        with pytest.raises(ParleyError) as graph:
            client.create_session("lost.json")
        assert graph.value.code == "bad_asset" and graph.value.problems
        assert client.sessions() == []


def test_a_tool_the_client_never_answers_times_out_and_the_session_is_unchanged():
    with running_server(ScriptedBackend(), [examples_dir()], limits=Limits(tool_timeout=0.2)) as url, \
            ParleyClient(url) as client:
        npc = client.create_session("tool_calling.json")
        with pytest.raises(TurnFailed) as failed:
            client.turn(npc.id, ARROWS)  # no tools: nobody answers
        assert failed.value.code == "tool_timeout" and failed.value.node == "lookup"
        assert client.session(npc.id).turns == 0 and not client.session(npc.id).busy


def test_summarized_events_reach_the_client_when_notify_client_is_set(server):
    npc = server.create_session("long_conversation.json")
    seen: list[ServerEvent] = []
    for i in range(8):
        server.turn(npc.id, f"Tell me about the harbour, part {i}.", on_event=seen.append)
    summarized = [e for e in seen if e.kind == "summarized"]
    assert summarized and summarized[0].data["node"] == "summarize" and summarized[0].data["text"]


def test_concurrent_turns_from_several_clients_all_complete_and_keep_their_own_state(server):
    url = str(server.http.base_url)
    errors: list[BaseException] = []
    lines: dict[str, list[str]] = {}

    def player(n: int) -> None:
        try:
            with ParleyClient(url) as client:
                npc = client.create_session("tool_calling.json" if n % 2 else "chat.json", id=f"p{n}")
                said = [f"Player {n} line {t}." for t in range(3)]
                for line in said:
                    outcome = client.turn(npc.id, line, tools=lambda call, n=n: f"answer for {n}")
                    assert outcome.reply.startswith(f"p{n}/")  # the scripted backend names the cache it ran on
                lines[npc.id] = [t.line for t in client.turns(npc.id)]
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=player, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors
    assert lines == {f"p{n}": [f"Player {n} line {t}." for t in range(3)] for n in range(8)}
