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
