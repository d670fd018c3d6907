"""Where ``parley serve`` keeps its sessions so that a restart, a crash or ``kill -9`` loses none.

A session is stored as its asset (the name the game created it with) and its dialog in the history
file's form (``runtime.dialogue.dialog_file``: history, branches, variables, window starts; it
imports bit for bit). The server writes it after every change: when the session is made, after each
finished turn *before* ``turn_finished`` is sent, and after variables, an import or a rewind. So a
turn the game heard of is a turn the store has.

``--store`` picks the store:

- ``sqlite:PATH``: SQLite (Python's own ``sqlite3``) in write-ahead mode, one row per session;
- the default: ``sessions.sqlite3`` in the server's state folder (``--state-dir``);
- ``none``: nothing is kept (a restart starts empty, as before stores).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

STORE_FILE = "sessions.sqlite3"
SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    asset TEXT NOT NULL,
    history TEXT NOT NULL,
    saved REAL NOT NULL
)
"""


class StoreError(Exception):
    """A store that cannot be opened or written; the message says which and why."""


@dataclass(frozen=True)
class StoredSession:
    """One session as the store keeps it: its id, its asset's name, its dialog (the history file's form)."""

    id: str
    asset: str
    history: dict[str, Any]
    saved: float = 0.0  # time.time() of the last write


class SessionStore(Protocol):
    label: str  # what the log and /v1/health say of it ("none", "sqlite:/path")

    def load(self) -> list[StoredSession]: ...
    def save(self, session: StoredSession) -> None: ...
    def delete(self, session_id: str) -> None: ...
    def close(self) -> None: ...


class NoStore:
    """Keeps nothing: the sessions live and die with the process."""

    label = "none"

    def load(self) -> list[StoredSession]:
        return []

    def save(self, session: StoredSession) -> None:
        pass

    def delete(self, session_id: str) -> None:
        pass

    def close(self) -> None:
        pass


class SQLiteStore:
    """The sessions in one SQLite file. Safe from any thread (one connection behind a lock); each
    write is its own transaction, durable once ``save`` returns (WAL, synchronous=FULL)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.label = f"sqlite:{path}"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30.0)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute(SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"--store {self.label}: cannot open it: {exc}") from None
        self._lock = threading.Lock()

    def load(self) -> list[StoredSession]:
        with self._lock:
            rows = self._db.execute("SELECT id, asset, history, saved FROM sessions ORDER BY saved, id").fetchall()
        out = []
        for session_id, asset, history, saved in rows:
            try:
                data = json.loads(history)
            except ValueError:
                data = None  # kept as it is: the server says so and leaves the row
            out.append(StoredSession(session_id, asset, data, saved))
        return out

    def save(self, session: StoredSession) -> None:
        text = json.dumps(session.history, ensure_ascii=False, separators=(",", ":"))
        try:
            with self._lock:
                self._db.execute(
                    "INSERT INTO sessions (id, asset, history, saved) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT(id) DO UPDATE SET asset=excluded.asset, history=excluded.history, "
                    "saved=excluded.saved", (session.id, session.asset, text, time.time()))
        except sqlite3.Error as exc:
            raise StoreError(f"{self.label}: cannot save session {session.id!r}: {exc}") from None

    def delete(self, session_id: str) -> None:
        try:
            with self._lock:
                self._db.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
        except sqlite3.Error as exc:
            raise StoreError(f"{self.label}: cannot delete session {session_id!r}: {exc}") from None

    def close(self) -> None:
        with self._lock:
            self._db.close()


def open_store(spec: str, state_folder: Path) -> SessionStore:
    """The store ``--store`` names: ``none``, ``sqlite:PATH``, or "" (SQLite in ``state_folder``).
    Raises StoreError naming what is wrong."""
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
        raise StoreError(f"--store {spec.split('@')[-1]!r}: PostgreSQL is not supported yet; use sqlite:PATH or none")
    raise StoreError(f"--store {spec!r}: use none, sqlite:PATH, or leave it out for SQLite in the state folder")
