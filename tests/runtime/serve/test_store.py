"""``parley serve`` keeps its sessions in a store: a finished turn is saved before the game hears of
it, and a restarted server (after a clean stop or ``kill -9``) serves every session again, continuing
byte for byte where it stopped. Each test that can runs on SQLite and on a real PostgreSQL (the
shared store several replicas write, each reading a session as it is asked for)."""

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
from runtime.serve.npcs import Limits, NPCs
from runtime.serve.protocol import ServeError
from runtime.serve.server import running_server
from runtime.serve.store import (
    STORE_FILE,
    NoStore,
    PostgresStore,
    SQLiteStore,
    StoreConflict,
    StoredSession,
    StoreError,
    open_store,
)
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


@pytest.fixture(params=["sqlite", "postgresql"])
def store_spec(request, tmp_path) -> str:
    """``--store`` for a new, empty store: a SQLite file, or a PostgreSQL database of the test's own."""
    if request.param == "sqlite":
        return f"sqlite:{tmp_path / 'a' / STORE_FILE}"
    return request.getfixturevalue("postgres_db")


def test_a_store_keeps_saves_and_deletes_sessions(store_spec, tmp_path):
    store = open_store(store_spec, tmp_path)
    assert store.save(StoredSession("npc-1", "chat.json", {"turns": []})) == 1
    assert store.save(StoredSession("npc-2", "chat.json", {"turns": [1]})) == 1
    assert store.save(StoredSession("npc-1", "chat.json", {"turns": [2]}, revision=1)) == 2  # replaces the row
    store.delete("npc-2")
    store.close()
    again = open_store(store_spec, tmp_path)
    assert [(s.id, s.asset, s.history, s.revision) for s in again.load()] == [("npc-1", "chat.json", {"turns": [2]}, 2)]
    assert again.revision_of("npc-1") == 2 and again.revision_of("npc-2") is None
    assert again.load_one("npc-1").history == {"turns": [2]} and again.load_one("npc-2") is None
    assert again.shared == store_spec.startswith("postgresql://")
    again.close()


def test_a_write_over_a_revision_another_server_moved_on_is_refused(store_spec, tmp_path):
    first, second = open_store(store_spec, tmp_path), open_store(store_spec, tmp_path)
    assert first.save(StoredSession("npc", "chat.json", {"turns": [0]})) == 1
    assert second.load_one("npc").revision == 1
    assert second.save(StoredSession("npc", "chat.json", {"turns": [1]}, revision=1)) == 2
    with pytest.raises(StoreConflict, match="changed by another server.*had revision 1.*at revision 2"):
        first.save(StoredSession("npc", "chat.json", {"turns": ["lost"]}, revision=1))
    with pytest.raises(StoreConflict, match="changed by another server"):  # a new session over an existing one
        first.save(StoredSession("npc", "chat.json", {"turns": ["new"]}))
    second.delete("npc")
    with pytest.raises(StoreConflict, match="the store deleted it"):
        first.save(StoredSession("npc", "chat.json", {"turns": ["lost"]}, revision=2))
    assert first.load() == [], "a refused write leaves nothing behind"
    first.close()
    second.close()


def test_the_last_run_is_kept_as_given_until_another_replaces_it(store_spec, tmp_path):
    store = open_store(store_spec, tmp_path)
    last = {"run": "r-1", "id": "7", "kind": "turn_finished", "data": {"turn": 0, "reply": "Ünïcode \u2028 ok",
                                                                      "nested": [1, {"b": None, "a": 2.5}]}}
    assert store.load_one("npc") is None
    store.save(StoredSession("npc", "chat.json", {"turns": []}))
    assert store.load_one("npc").last_run is None
    store.save(StoredSession("npc", "chat.json", {"turns": [1]}, revision=1, last_run=last))
    store.save(StoredSession("npc", "chat.json", {"turns": [1]}, revision=2))  # variables changed: kept
    (stored,) = store.load()
    assert stored.last_run == last and list(stored.last_run["data"]["nested"][1]) == ["b", "a"]
    store.close()


def test_a_sqlite_file_from_before_revisions_is_migrated_as_it_opens(tmp_path):
    path = tmp_path / STORE_FILE
    with sqlite3.connect(path) as db:  # the first schema: no revision, no last_run
        db.execute("CREATE TABLE sessions (id TEXT PRIMARY KEY, asset TEXT NOT NULL, history TEXT NOT NULL, "
                   "saved REAL NOT NULL)")
        db.execute("INSERT INTO sessions VALUES ('old', 'chat.json', '{\"turns\": [1]}', 1.0)")
    db.close()
    store = SQLiteStore(path)
    (old,) = store.load()
    assert (old.id, old.history, old.revision, old.last_run) == ("old", {"turns": [1]}, 0, None)
    assert store.save(StoredSession("old", "chat.json", {"turns": [1, 2]}, revision=0)) == 1
    store.close()
    with sqlite3.connect(path) as db:
        assert [row[1] for row in db.execute("PRAGMA table_info(sessions)")][-2:] == ["revision", "last_run"]
    db.close()


def test_store_specs_are_checked_with_errors_that_say_what_to_write(tmp_path):
    assert isinstance(open_store("none", tmp_path), NoStore)
    default = open_store("", tmp_path)
    assert default.label == f"sqlite:{tmp_path / STORE_FILE}"
    default.close()
    for spec, says in [("sqlite:", "give the file's path"), ("redis://x", "use none, sqlite:PATH, postgresql://"),
                       ("redis://user:secret@cache", "use none"),
                       ("postgresql://user:secret@127.0.0.1:1/parley?connect_timeout=5",
                        "--store postgresql://user@127.0.0.1:1/parley: cannot connect: .*refused"),
                       ("postgres://user:secret@no-such-host.invalid/parley", "no-such-host.invalid.*cannot connect"),
                       ("postgresql://user@127.0.0.1/parley?password=secret&nonsense=1", "cannot connect")]:
        with pytest.raises(StoreError, match=says) as raised:
            open_store(spec, tmp_path)
        assert "secret" not in str(raised.value), "a password in the URL is never repeated"
    (tmp_path / "file").write_text("x")
    with pytest.raises(StoreError, match="cannot open it"):
        open_store(f"sqlite:{tmp_path / 'file' / 'below'}", tmp_path)


def test_a_postgresql_label_never_shows_the_password(postgres_dsn, tmp_path):
    with_password = postgres_dsn.replace("postgres@", "postgres:secret@")  # trust: any password is accepted
    store = open_store(with_password, tmp_path)
    assert isinstance(store, PostgresStore) and store.shared
    assert store.label == postgres_dsn and "secret" not in store.label
    store.close()
    store = open_store(postgres_dsn.replace("postgresql://", "postgres://") + "?password=secret", tmp_path)
    assert store.label == postgres_dsn
    store.close()


def test_a_restarted_server_continues_every_session_byte_for_byte(store_spec, tmp_path):
    backend = ScriptedBackend(whole_prompt)
    with running_server(backend, [examples_dir()]) as url, ParleyClient(url) as client:
        client.create_session("chat.json", id="alone", variables={"player_name": "Ada"})
        uninterrupted = replies(url, "alone", LINES)

    with running_server(ScriptedBackend(whole_prompt), [examples_dir()], store=open_store(store_spec, tmp_path)) as url:
        with ParleyClient(url) as client:
            client.create_session("chat.json", id="alone", variables={"player_name": "Ada"})
            client.create_session("intent_router.json", id="router")
        first = replies(url, "alone", LINES[:2])
        replies(url, "router", ["Where is the market?"])
    store = open_store(store_spec, tmp_path)
    with running_server(ScriptedBackend(whole_prompt), [examples_dir()], store=store) as url:
        with ParleyClient(url) as client:
            health = client.health()
            back = {s: client.session(s) for s in ("alone", "router")}  # a shared store reads them now
        assert health.store == store.label and health.not_restored == {}
        assert back["alone"].turns == 2 and back["alone"].variables["player_name"] == "Ada"
        assert back["router"].turns == 1
        rest = replies(url, "alone", LINES[2:])
    assert first + rest == uninterrupted


def test_a_deleted_session_is_gone_from_the_store_and_a_rewind_is_kept(store_spec, tmp_path):
    with running_server(ScriptedBackend(), [examples_dir()], store=open_store(store_spec, tmp_path)) as url, \
            ParleyClient(url) as client:
        client.create_session("chat.json", id="kept")
        client.create_session("chat.json", id="gone")
        replies(url, "kept", LINES[:3])
        client.rewind("kept", 1)
        client.delete_session("gone")
    with running_server(ScriptedBackend(), [examples_dir()], store=open_store(store_spec, tmp_path)) as url, \
            ParleyClient(url) as client:
        assert client.session("kept").turns == 1
        with pytest.raises(Exception, match="unknown_session"):
            client.session("gone")
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

    def save(self, session: StoredSession) -> int:
        if self.refuse:
            raise StoreError(f"{self.label}: disk I/O error")
        return super().save(session)


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
def test_kill_9_loses_no_finished_turn(store_spec, tmp_path):
    store = store_spec
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
        shared = store.startswith("postgresql://")
        assert ("read from" if shared else "1 session(s) back from") in second.log()
    assert [t["player"] for t in history["turns"]] == LINES[:3]
    assert said[2] in json.dumps(history)


def test_a_changed_system_prompt_comes_back_after_a_restart(store_spec, tmp_path):
    with running_server(ScriptedBackend(), [examples_dir()], store=open_store(store_spec, tmp_path)) as url, \
            ParleyClient(url) as client:
        client.create_session("chat.json", id="innkeeper")
        client.change_params("innkeeper", {"reply": {"system_prompt": "You are tired and curt."}})
    with running_server(ScriptedBackend(), [examples_dir()], store=open_store(store_spec, tmp_path)) as url, \
            ParleyClient(url) as client:
        (node,) = client.turn("innkeeper", LINES[0]).diagnostics.nodes
    assert node.input.prompt[0].content == "You are tired and curt."


def test_a_shared_store_serves_a_session_another_replica_made_and_follows_its_revisions(postgres_db):
    stores = [PostgresStore(postgres_db), PostgresStore(postgres_db)]
    a, b = (NPCs(ScriptedBackend(), [examples_dir()], Limits(), store=store) for store in stores)
    a.create("chat.json", {"player_name": "Ada"}, "innkeeper")
    assert b.restore() == 0 and b.sessions == {}, "nothing is loaded eagerly from a shared store"
    on_b = b.get("innkeeper")  # read as it is asked for
    assert (on_b.revision, on_b.agent.variables["player_name"]) == (1, "Ada")
    b.set_variables("innkeeper", {"player_name": "Brom"})
    assert on_b.revision == 2 and b.get("innkeeper") is on_b, "unchanged: the same session, not read again"
    on_a = a.get("innkeeper")  # moved on by b: a reads it again
    assert on_a.revision == 2 and on_a.agent.variables["player_name"] == "Brom"
    a.rewind("innkeeper", 0)
    stale = b.sessions["innkeeper"]
    with pytest.raises(ServeError) as refused:  # b writes over a's revision without asking first
        b.persist(stale)
    assert refused.value.code == "store_conflict" and refused.value.status == 409
    assert "another server" in refused.value.message
    b.delete("innkeeper")
    with pytest.raises(ServeError, match="unknown_session"):
        a.get("innkeeper")
    assert "innkeeper" not in a.sessions, "deleted by another replica: gone here too"
    for store in stores:
        store.close()


def test_a_replica_on_a_shared_store_keeps_at_most_max_sessions_in_memory_and_reads_the_rest_again(postgres_db):
    store = PostgresStore(postgres_db)
    npcs = NPCs(ScriptedBackend(), [examples_dir()], Limits(max_sessions=2), store=store)
    for name in ("ada", "brom", "cora"):  # past the limit: the least recently used idle one leaves memory
        npcs.create("chat.json", {"player_name": name}, name)
    assert sorted(npcs.sessions) == ["brom", "cora"]
    npcs.get("brom")  # used: cora is now the oldest
    assert npcs.get("ada").agent.variables["player_name"] == "ada", "read again from the store"
    assert sorted(npcs.sessions) == ["ada", "brom"]
    store.close()


def test_two_replicas_on_one_postgresql_continue_each_other_byte_for_byte(postgres_db):
    with running_server(ScriptedBackend(whole_prompt), [examples_dir()]) as url, ParleyClient(url) as client:
        client.create_session("chat.json", id="innkeeper", variables={"player_name": "Ada"})
        alone = replies(url, "innkeeper", LINES[:3])
    patch = ("from runtime.backends import scripted\nfrom tests.runtime.serve.test_store import whole_prompt\n"
             "scripted.default_reply = whole_prompt\n")
    args = ("--backend", "scripted", "--assets", str(examples_dir()), "--store", postgres_db)
    with parley_serve_process(*args, patch=patch) as a, parley_serve_process(*args, patch=patch) as b:
        with ParleyClient(a.url) as client:
            client.create_session("chat.json", id="innkeeper", variables={"player_name": "Ada"})
        said = replies(a.url, "innkeeper", LINES[:1])
        said += replies(b.url, "innkeeper", LINES[1:2])  # a balancer moved the player to b
        said += replies(a.url, "innkeeper", LINES[2:3])  # and back: a reads the turn b ran
        with ParleyClient(b.url) as client:
            assert client.session("innkeeper").turns == 3, "b reads the turn a ran as it is asked"
            assert [t["player"] for t in client.export_history("innkeeper")["turns"]] == LINES[:3]
        assert "read from" in a.log() and "read from" in b.log()
    assert said == alone
