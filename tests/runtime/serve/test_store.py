"""``parley serve`` keeps its sessions in a store: a finished turn is saved before the game hears of
it, and a restarted server (after a clean stop or ``kill -9``) serves every session again, continuing
byte for byte where it stopped."""

from __future__ import annotations

import hashlib
import json
import shutil
import signal
import sqlite3
import sys

import pytest

from runtime.backends.base import GenerationRequest
from runtime.backends.scripted import ScriptedBackend, default_reply
from runtime.resources import examples_dir
from runtime.serve.client import ParleyClient, TurnFailed
from runtime.serve.server import running_server
from runtime.serve.store import STORE_FILE, NoStore, SQLiteStore, StoredSession, StoreError, open_store
from tests.servers import parley_serve_process

LINES = ["Good evening. Is there a room?", "What is the soup today?", "And the price?", "Goodnight then."]


def whole_prompt(key: str, request: GenerationRequest) -> str:
    """A reply that depends on every message of the prompt: a session that came back with less than
    its whole history would answer differently."""
    if request.choices or request.json_schema is not None:
        return default_reply(key, request)
    text = "\n".join(f"{m.role}:{m.content}" for m in request.messages)
    return f"{key} {hashlib.sha256(text.encode()).hexdigest()[:12]}"


def replies(url: str, session_id: str, lines: list[str]) -> list[str]:
    with ParleyClient(url) as client:
        return [client.turn(session_id, line).reply for line in lines]


def test_the_sqlite_store_keeps_saves_and_deletes_sessions(tmp_path):
    store = SQLiteStore(tmp_path / "a" / STORE_FILE)
    store.save(StoredSession("npc-1", "chat.json", {"turns": []}))
    store.save(StoredSession("npc-2", "chat.json", {"turns": [1]}))
    store.save(StoredSession("npc-1", "chat.json", {"turns": [2]}))  # a later save replaces the row
    store.delete("npc-2")
    store.close()
    again = SQLiteStore(tmp_path / "a" / STORE_FILE)
    assert [(s.id, s.asset, s.history) for s in again.load()] == [("npc-1", "chat.json", {"turns": [2]})]
    again.close()


def test_store_specs_are_checked_with_errors_that_say_what_to_write(tmp_path):
    assert isinstance(open_store("none", tmp_path), NoStore)
    default = open_store("", tmp_path)
    assert default.label == f"sqlite:{tmp_path / STORE_FILE}"
    default.close()
    for spec, says in [("sqlite:", "give the file's path"), ("redis://x", "use none, sqlite:PATH"),
                       ("postgresql://user:secret@db/parley", "not supported yet")]:
        with pytest.raises(StoreError, match=says) as raised:
            open_store(spec, tmp_path)
        assert "secret" not in str(raised.value), "a password in the URL is never repeated"
    (tmp_path / "file").write_text("x")
    with pytest.raises(StoreError, match="cannot open it"):
        open_store(f"sqlite:{tmp_path / 'file' / 'below'}", tmp_path)


def test_a_restarted_server_continues_every_session_byte_for_byte(tmp_path):
    backend = ScriptedBackend(whole_prompt)
    with running_server(backend, [examples_dir()]) as url, ParleyClient(url) as client:
        client.create_session("chat.json", id="alone", variables={"player_name": "Ada"})
        uninterrupted = replies(url, "alone", LINES)

    path = tmp_path / STORE_FILE
    with running_server(ScriptedBackend(whole_prompt), [examples_dir()], store=SQLiteStore(path)) as url:
        with ParleyClient(url) as client:
            client.create_session("chat.json", id="alone", variables={"player_name": "Ada"})
            client.create_session("intent_router.json", id="router")
        first = replies(url, "alone", LINES[:2])
        replies(url, "router", ["Where is the market?"])
    with running_server(ScriptedBackend(whole_prompt), [examples_dir()], store=SQLiteStore(path)) as url:
        with ParleyClient(url) as client:
            health = client.health()
            back = {s.id: s for s in client.sessions()}
        assert health.store == f"sqlite:{path}" and health.not_restored == {}
        assert back["alone"].turns == 2 and back["alone"].variables["player_name"] == "Ada"
        assert back["router"].turns == 1
        rest = replies(url, "alone", LINES[2:])
    assert first + rest == uninterrupted


def test_a_deleted_session_is_gone_from_the_store_and_a_rewind_is_kept(tmp_path):
    path = tmp_path / STORE_FILE
    with running_server(ScriptedBackend(), [examples_dir()], store=SQLiteStore(path)) as url, \
            ParleyClient(url) as client:
        client.create_session("chat.json", id="kept")
        client.create_session("chat.json", id="gone")
        replies(url, "kept", LINES[:3])
        client.rewind("kept", 1)
        client.delete_session("gone")
    with running_server(ScriptedBackend(), [examples_dir()], store=SQLiteStore(path)) as url, \
            ParleyClient(url) as client:
        assert [(s.id, s.turns) for s in client.sessions()] == [("kept", 1)]


def test_a_session_whose_asset_is_gone_is_told_and_stays_in_the_store(tmp_path):
    assets = tmp_path / "assets"
    shutil.copytree(examples_dir(), assets)
    path = tmp_path / STORE_FILE
    with running_server(ScriptedBackend(), [assets], store=SQLiteStore(path)) as url, ParleyClient(url) as client:
        client.create_session("chat.json", id="innkeeper")
        client.turn("innkeeper", LINES[0])
    (assets / "chat.json").unlink()
    with running_server(ScriptedBackend(), [assets], store=SQLiteStore(path)) as url, ParleyClient(url) as client:
        health = client.health()
        assert client.sessions() == []
    assert list(health.not_restored) == ["innkeeper"]
    assert "chat.json" in health.not_restored["innkeeper"]
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT id FROM sessions").fetchall() == [("innkeeper",)], "nothing is lost"


class RefusingStore(SQLiteStore):
    """Saves until told to refuse (a full disk, a lost database)."""

    refuse = False

    def save(self, session: StoredSession) -> None:
        if self.refuse:
            raise StoreError(f"{self.label}: disk I/O error")
        super().save(session)


def test_a_turn_the_store_refuses_is_taken_back_and_never_reported_finished(tmp_path):
    store = RefusingStore(tmp_path / STORE_FILE)
    with running_server(ScriptedBackend(), [examples_dir()], store=store) as url, ParleyClient(url) as client:
        client.create_session("chat.json", id="innkeeper")
        client.turn("innkeeper", LINES[0])
        store.refuse = True
        with pytest.raises(TurnFailed) as failed:
            client.turn("innkeeper", LINES[1])
        assert failed.value.code == "store_error" and "disk I/O error" in failed.value.message
        assert client.session("innkeeper").turns == 1, "the turn the store refused is taken back"
        store.refuse = False
        assert client.turn("innkeeper", LINES[1]).turn == 1


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_kill_9_loses_no_finished_turn(tmp_path):
    store = f"sqlite:{tmp_path / STORE_FILE}"
    args = ("--backend", "scripted", "--assets", str(examples_dir()), "--store", store)
    with parley_serve_process(*args) as first, ParleyClient(first.url) as client:
        assert f"sessions are kept in {store}" in first.log()
        client.create_session("chat.json", id="innkeeper")
        said = [client.turn("innkeeper", line).reply for line in LINES[:3]]
        first.process.send_signal(signal.SIGKILL)
        assert first.process.wait(60) == -signal.SIGKILL
    with parley_serve_process(*args) as second, ParleyClient(second.url) as client:
        history = client.export_history("innkeeper")
        assert client.session("innkeeper").turns == 3
        assert "1 session(s) back from" in second.log()
    assert [t["player"] for t in history["turns"]] == LINES[:3]
    assert said[2] in json.dumps(history)


def test_a_changed_system_prompt_comes_back_after_a_restart(tmp_path):
    path = tmp_path / STORE_FILE
    with running_server(ScriptedBackend(), [examples_dir()], store=SQLiteStore(path)) as url, \
            ParleyClient(url) as client:
        client.create_session("chat.json", id="innkeeper")
        client.change_params("innkeeper", {"reply": {"system_prompt": "You are tired and curt."}})
    with running_server(ScriptedBackend(), [examples_dir()], store=SQLiteStore(path)) as url, \
            ParleyClient(url) as client:
        (node,) = client.turn("innkeeper", LINES[0]).diagnostics.nodes
    assert node.input.prompt[0].content == "You are tired and curt."
