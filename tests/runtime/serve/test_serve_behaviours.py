"""parley serve with agents that run a shared behaviour (the gate guard and the tavern keeper), on
the scripted backend: the turn's path and events name the behaviour's nodes by namespaced id, each
session's node contexts are "SESSION/guard/classify", the history moves between sessions, and an
agent whose behaviour is gone is refused with the located problem."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from runtime.backends.scripted import ScriptedBackend
from runtime.resources import examples_dir
from runtime.serve.client import ParleyClient, ParleyError
from runtime.serve.server import running_server


def test_two_npcs_run_one_behaviour_under_their_sessions() -> None:
    backend = ScriptedBackend()
    with running_server(backend, [examples_dir()]) as url, ParleyClient(url) as client:
        brann = client.create_session("gate_guard.json", id="brann")
        mira = client.create_session("tavern_keeper.json", id="mira")
        outcome = client.turn(brann.id, "I threaten you: step aside!")
        assert outcome.path == ["guard", "guard/classify", "guard/warn", "guard/warned"]
        started = [e.data["node"] for e in outcome.events if e.kind == "node_started"]
        assert started == outcome.path
        assert client.turn(mira.id, "I threaten you: step aside!").path[-1] == "calm_down"
        keys = set(backend._sessions)
        assert {"brann/guard/classify", "brann/guard/warn", "mira/guard/classify", "mira/guard/warn",
                "mira/calm_down"} <= keys
        history = client.export_history(brann.id)
        assert "guard/warn" in json.dumps(history)
        again = client.create_session("gate_guard.json", id="brann2")
        client.import_history(again.id, history)
        assert client.session(again.id).turns == 1


def test_an_npc_whose_behaviour_is_gone_is_refused_with_the_located_problem(tmp_path: Path) -> None:
    shutil.copy(examples_dir() / "gate_guard.json", tmp_path)
    with running_server(ScriptedBackend(), [tmp_path]) as url, ParleyClient(url) as client:
        with pytest.raises(ParleyError) as error:
            client.create_session("gate_guard.json")
        assert error.value.code == "bad_asset"
        assert [(p.node_id, p.field) for p in error.value.problems] == [("guard", "behaviour")]
    assert str(tmp_path) not in error.value.message and all(str(tmp_path) not in p.message
                                                            for p in error.value.problems)


@pytest.mark.parametrize("reach", ["up", "link"])
def test_a_behaviour_outside_the_served_folders_is_refused_unread(tmp_path: Path, reach: str) -> None:
    """Issue 39: behaviour files loaded from outside --assets, through '..' or a link, against the docs,
    and the errors showed the outside file's keys and the server's absolute paths."""
    served, secret = tmp_path / "served", tmp_path / "secret"
    served.mkdir()
    (secret / "behaviours").mkdir(parents=True)
    shutil.copy(examples_dir() / "behaviours" / "guard_threats.json", secret / "behaviours" / "guard_threats.json")
    (secret / "keys.json").write_text('{"api_key": "sk-do-not-show"}', encoding="utf-8")
    raw = json.loads((examples_dir() / "gate_guard.json").read_text(encoding="utf-8"))
    guard = next(n for n in raw["nodes"] if n["id"] == "guard")
    if reach == "up":
        guard["behaviour"] = "../secret/behaviours/guard_threats.json"
    else:
        (served / "behaviours").symlink_to(secret / "behaviours", target_is_directory=True)
    (served / "gate_guard.json").write_text(json.dumps(raw), encoding="utf-8")
    (served / "leak.json").write_text(json.dumps({**raw, "nodes": [
        {**guard, "behaviour": "../secret/keys.json"} if n["id"] == "guard" else n for n in raw["nodes"]]}),
        encoding="utf-8")
    with running_server(ScriptedBackend(), [served]) as url, ParleyClient(url) as client:
        for asset in ("gate_guard.json", "leak.json"):
            with pytest.raises(ParleyError) as error:
                client.create_session(asset)
            said = error.value.message + " ".join(p.message for p in error.value.problems)
            assert error.value.code == "bad_asset" and "outside the folders this server serves" in said
            assert "api_key" not in said and str(tmp_path) not in said, said
            assert [(p.node_id, p.field) for p in error.value.problems] == [("guard", "behaviour")]
