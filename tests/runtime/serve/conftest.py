"""Fixtures of parley serve's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.postgres import running_postgres


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """A real PostgreSQL, started once for the test session: its DSN, with a database of its own."""
    with running_postgres() as dsn:
        yield dsn
