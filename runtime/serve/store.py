"""Where ``parley serve`` keeps its sessions so that a restart, a crash or ``kill -9`` loses none.

A session is stored as its asset (the name the game created it with) and its dialog in the history
file's form (``runtime.dialogue.dialog_file``: history, branches, variables, window starts; it
imports bit for bit). The server writes it after every change: when the session is made, after each
finished turn *before* ``turn_finished`` is sent, and after variables, an import or a rewind. So a
turn the game heard of is a turn the store has.

Each row carries a revision that every write moves on by one, and a write names the revision it
started from: a write from a server that missed someone else's (compare-and-set) is refused with
``StoreConflict`` instead of overwriting it. That is what lets several servers share one store.

``--store`` picks the store:

- ``sqlite:PATH``: SQLite (Python's own ``sqlite3``) in write-ahead mode, one row per session;
- the default: ``sessions.sqlite3`` in the server's state folder (``--state-dir``);
- ``postgresql://USER:PASSWORD@HOST:PORT/DB``: PostgreSQL (psycopg 3), shared by several replicas;
- ``none``: nothing is kept (a restart starts empty, as before stores).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import psycopg

STORE_FILE = "sessions.sqlite3"
SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    asset TEXT NOT NULL,
    history TEXT NOT NULL,
    saved REAL NOT NULL,
    revision INTEGER NOT NULL DEFAULT 0,
    last_run TEXT
)
"""
# Columns a file made before them lacks: added as it is opened (its rows get the default)
ADDED_COLUMNS = {"revision": "INTEGER NOT NULL DEFAULT 0", "last_run": "TEXT"}
PG_TABLE = "parley_sessions"  # a name of its own: the database may hold other programs' tables
PG_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {PG_TABLE} (
    id TEXT PRIMARY KEY,
    asset TEXT NOT NULL,
    history JSON NOT NULL,
    saved DOUBLE PRECISION NOT NULL,
    revision BIGINT NOT NULL DEFAULT 0,
    last_run JSON
)
"""
PG_CONNECT_SECONDS = 10


class StoreError(Exception):
    """A store that cannot be opened or written; the message says which and why."""


class StoreConflict(StoreError):
    """A write refused because another server changed the session since this one last read it."""


@dataclass(frozen=True)
class StoredSession:
    """One session as the store keeps it: its id, its asset's name, its dialog (the history file's form)."""

    id: str
    asset: str
    history: dict[str, Any]
    saved: float = 0.0  # time.time() of the last write
    # Loaded: the stored one. Saved: the one the writer last saw (0 for a new session); save returns the next.
    revision: int = 0
    # The final event of the session's latest turn stream ({"run", "id", "kind", "data"}), kept as given,
    # so a client resuming that stream on another server still gets it. None when saving: keep the stored one.
    last_run: dict[str, Any] | None = None


class SessionStore(Protocol):
    label: str  # what the log and /v1/health say of it ("none", "sqlite:/path"); never a password
    shared: bool  # several servers may write it at once: sessions are read from it as they are asked for

    def load(self) -> list[StoredSession]: ...
    def load_one(self, session_id: str) -> StoredSession | None: ...
    def revision_of(self, session_id: str) -> int | None: ...
    def save(self, session: StoredSession) -> int: ...
    def delete(self, session_id: str) -> None: ...
    def close(self) -> None: ...


class NoStore:
    """Keeps nothing: the sessions live and die with the process."""

    label = "none"
    shared = False

    def load(self) -> list[StoredSession]:
        return []

    def load_one(self, session_id: str) -> StoredSession | None:
        return None

    def revision_of(self, session_id: str) -> int | None:
        return None

    def save(self, session: StoredSession) -> int:
        return session.revision + 1

    def delete(self, session_id: str) -> None:
        pass

    def close(self) -> None:
        pass


def _stored(row: tuple[Any, ...]) -> StoredSession:
    """A row (id, asset, history, saved, revision, last_run), its JSON as text, as a StoredSession."""
    session_id, asset, history, saved, revision, last_run = row
    try:
        data = json.loads(history)
    except ValueError:
        data = None  # kept as it is: the server says so and leaves the row
    try:
        run = json.loads(last_run) if last_run is not None else None
    except ValueError:
        run = None
    return StoredSession(session_id, asset, data, saved, revision, run)


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _conflict(label: str, session_id: str, seen: int, now: int | None) -> StoreConflict:
    where = "deleted it" if now is None else f"is at revision {now}"
    return StoreConflict(f"{label}: session {session_id!r} was changed by another server since this one read it "
                         f"(this server had revision {seen}; the store {where}); read it again and retry")


class SQLiteStore:
    """The sessions in one SQLite file. Safe from any thread (one connection behind a lock); each
    write is its own transaction, durable once ``save`` returns (WAL, synchronous=FULL)."""

    shared = False  # one server's file: it loads every session as it starts

    def __init__(self, path: Path) -> None:
        self.path = path
        self.label = f"sqlite:{path}"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30.0)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute(SCHEMA)
            have = {row[1] for row in self._db.execute("PRAGMA table_info(sessions)")}
            for name, kind in ADDED_COLUMNS.items():
                if name not in have:
                    self._db.execute(f"ALTER TABLE sessions ADD COLUMN {name} {kind}")
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"--store {self.label}: cannot open it: {exc}") from None
        self._lock = threading.Lock()

    def load(self) -> list[StoredSession]:
        with self._lock:
            rows = self._db.execute("SELECT id, asset, history, saved, revision, last_run FROM sessions "
                                    "ORDER BY saved, id").fetchall()
        return [_stored(row) for row in rows]

    def load_one(self, session_id: str) -> StoredSession | None:
        try:
            with self._lock:
                row = self._db.execute("SELECT id, asset, history, saved, revision, last_run FROM sessions "
                                       "WHERE id = ?", (session_id,)).fetchone()
        except sqlite3.Error as exc:
            raise StoreError(f"{self.label}: cannot read session {session_id!r}: {exc}") from None
        return None if row is None else _stored(row)

    def revision_of(self, session_id: str) -> int | None:
        try:
            with self._lock:
                row = self._db.execute("SELECT revision FROM sessions WHERE id = ?", (session_id,)).fetchone()
        except sqlite3.Error as exc:
            raise StoreError(f"{self.label}: cannot read session {session_id!r}: {exc}") from None
        return None if row is None else row[0]

    def save(self, session: StoredSession) -> int:
        """Write ``session`` if the stored revision is still ``session.revision`` (0: none stored yet);
        returns the new revision. Raises StoreConflict when another writer moved it on."""
        values = (session.asset, _json(session.history), time.time(), _json(session.last_run))
        try:
            with self._lock:
                if session.revision == 0:  # new, or a row from before revisions (0 too)
                    changed = self._db.execute(
                        "INSERT INTO sessions (asset, history, saved, last_run, id, revision) "
                        "VALUES (?, ?, ?, ?, ?, 1) ON CONFLICT(id) DO UPDATE SET asset=excluded.asset, "
                        "history=excluded.history, saved=excluded.saved, "
                        "last_run=coalesce(excluded.last_run, sessions.last_run), revision=sessions.revision + 1 "
                        "WHERE sessions.revision = 0", (*values, session.id)).rowcount
                else:
                    changed = self._db.execute(
                        "UPDATE sessions SET asset=?, history=?, saved=?, last_run=coalesce(?, last_run), "
                        "revision=revision + 1 WHERE id = ? AND revision = ?",
                        (*values, session.id, session.revision)).rowcount
                if changed != 1:
                    row = self._db.execute("SELECT revision FROM sessions WHERE id = ?", (session.id,)).fetchone()
                    raise _conflict(self.label, session.id, session.revision, None if row is None else row[0])
        except sqlite3.Error as exc:
            raise StoreError(f"{self.label}: cannot save session {session.id!r}: {exc}") from None
        return session.revision + 1

    def delete(self, session_id: str) -> None:
        try:
            with self._lock:
                self._db.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
        except sqlite3.Error as exc:
            raise StoreError(f"{self.label}: cannot delete session {session_id!r}: {exc}") from None

    def close(self) -> None:
        with self._lock:
            self._db.close()


def postgres_label(dsn: str) -> str:
    """``dsn`` as ``postgresql://USER@HOST:PORT/DB``: where it points, never its password."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        parts = conninfo_to_dict(dsn)
    except Exception:  # noqa: BLE001 - a DSN libpq cannot read (connecting says why): what follows the "@"
        return "postgresql://" + dsn.partition("://")[2].rpartition("@")[2].partition("?")[0]
    user = f"{parts['user']}@" if parts.get("user") else ""
    port = f":{parts['port']}" if parts.get("port") else ""
    return f"postgresql://{user}{parts.get('host', '')}{port}/{parts.get('dbname', '')}"


class PostgresStore:
    """The sessions in one PostgreSQL table (``parley_sessions``, made if missing), which several
    servers may share. Safe from any thread (one connection behind a lock, made again if it breaks);
    each write is one statement in its own committed transaction, and refused (StoreConflict) if the
    stored revision is not the one the writer saw."""

    shared = True

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self.label = postgres_label(dsn)
        self._password = _password_of(dsn)
        self._lock = threading.Lock()
        self._db: psycopg.Connection[Any] | None = None
        try:
            self._run("create its table", PG_SCHEMA)
        except StoreError as exc:
            raise StoreError(f"--store {exc}") from None

    def _connection(self) -> psycopg.Connection[Any]:
        """The open connection (under ``_lock``); a new one if there is none or it broke."""
        import psycopg

        if self._db is None or self._db.closed or self._db.broken:
            kwargs: dict[str, Any] = {} if "connect_timeout" in self._dsn else {"connect_timeout": PG_CONNECT_SECONDS}
            try:
                self._db = psycopg.connect(self._dsn, autocommit=True, **kwargs)
            except psycopg.Error as exc:
                raise StoreError(f"{self.label}: cannot connect: {self._clean(exc)}") from None
        return self._db

    def _clean(self, exc: BaseException) -> str:
        text = " ".join(str(exc).split())
        return text.replace(self._password, "***") if self._password else text

    def _run(self, doing: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        import psycopg

        try:
            with self._lock:
                cursor = self._connection().execute(sql, params)
                return cursor.fetchall() if cursor.description is not None else []
        except psycopg.Error as exc:
            raise StoreError(f"{self.label}: cannot {doing}: {self._clean(exc)}") from None

    _COLUMNS = "id, asset, history::text, saved, revision, last_run::text"

    def load(self) -> list[StoredSession]:
        rows = self._run("read the sessions", f"SELECT {self._COLUMNS} FROM {PG_TABLE} ORDER BY saved, id")
        return [_stored(row) for row in rows]

    def load_one(self, session_id: str) -> StoredSession | None:
        rows = self._run(f"read session {session_id!r}", f"SELECT {self._COLUMNS} FROM {PG_TABLE} WHERE id = %s",
                         (session_id,))
        return _stored(rows[0]) if rows else None

    def revision_of(self, session_id: str) -> int | None:
        rows = self._run(f"read session {session_id!r}", f"SELECT revision FROM {PG_TABLE} WHERE id = %s",
                         (session_id,))
        return rows[0][0] if rows else None

    def save(self, session: StoredSession) -> int:
        """As SQLiteStore.save: written only over ``session.revision``; returns the new revision."""
        values = (session.asset, _json(session.history), time.time(), _json(session.last_run))
        doing = f"save session {session.id!r}"
        if session.revision == 0:
            rows = self._run(doing, f"INSERT INTO {PG_TABLE} AS s (asset, history, saved, last_run, id, revision) "
                             "VALUES (%s, %s::json, %s, %s::json, %s, 1) ON CONFLICT (id) DO UPDATE SET "
                             "asset=excluded.asset, history=excluded.history, saved=excluded.saved, "
                             "last_run=coalesce(excluded.last_run, s.last_run), revision=s.revision + 1 "
                             "WHERE s.revision = 0 RETURNING revision", (*values, session.id))
        else:
            rows = self._run(doing, f"UPDATE {PG_TABLE} SET asset=%s, history=%s::json, saved=%s, "
                             "last_run=coalesce(%s::json, last_run), revision=revision + 1 "
                             "WHERE id = %s AND revision = %s RETURNING revision",
                             (*values, session.id, session.revision))
        if not rows:
            raise _conflict(self.label, session.id, session.revision, self.revision_of(session.id))
        return int(rows[0][0])

    def delete(self, session_id: str) -> None:
        self._run(f"delete session {session_id!r}", f"DELETE FROM {PG_TABLE} WHERE id = %s", (session_id,))

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()


def _password_of(dsn: str) -> str:
    from psycopg.conninfo import conninfo_to_dict

    try:
        return str(conninfo_to_dict(dsn).get("password") or "")
    except Exception:  # noqa: BLE001 - unreadable: fall back to the URL's user:password@
        userinfo = dsn.partition("://")[2].rpartition("@")[0]
        return userinfo.partition(":")[2]


def open_store(spec: str, state_folder: Path) -> SessionStore:
    """The store ``--store`` names: ``none``, ``sqlite:PATH``, ``postgresql://...`` (or ``postgres://``),
    or "" (SQLite in ``state_folder``). Raises StoreError naming what is wrong, never a password."""
    spec = spec.strip()
    if spec == "none":
        return NoStore()
    if spec == "":
        return SQLiteStore(state_folder / STORE_FILE)
    if spec.startswith("sqlite:"):
        path = spec[len("sqlite:"):]
        if not path:
            raise StoreError("--store sqlite:PATH: give the file's path, as in sqlite:/var/lib/parley/sessions.sqlite3")
        return SQLiteStore(Path(path).expanduser())
    if spec.startswith(("postgresql://", "postgres://")):
        return PostgresStore(spec)
    raise StoreError(f"--store {spec.split('@')[-1]!r}: use none, sqlite:PATH, postgresql://USER@HOST/DB, or leave "
                     "it out for SQLite in the state folder")
