"""Fixtures of parley serve's tests."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from runtime.backends.scripted import ScriptedBackend
from tests.postgres import running_postgres


@pytest.fixture
def backend() -> Iterator[ScriptedBackend]:
    """The scripted backend a test's server runs on (a module may define its own, as the sample model's)."""
    backend = ScriptedBackend()
    yield backend
    backend.close()


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """A real PostgreSQL, started once for the test session: its DSN, with a database of its own."""
    with running_postgres() as dsn:
        yield dsn


@pytest.fixture
def postgres_db(postgres_dsn) -> str:
    """A database of this test's own in the session's PostgreSQL (empty: no table yet): its DSN."""
    import psycopg

    name = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as db:
        db.execute(f"CREATE DATABASE {name}")
    return postgres_dsn.rpartition("/")[0] + f"/{name}"
