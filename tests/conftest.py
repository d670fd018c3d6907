"""Fixtures shared by every test package."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from runtime.models.folder import sample_model_for_checks


def sample_model_path() -> Path:
    return sample_model_for_checks()


@pytest.fixture(scope="session")
def sample_model() -> Path:
    return sample_model_path()


@pytest.fixture(autouse=True)
def private_serve_state(tmp_path_factory, monkeypatch) -> Path:
    """Each test's ``parley serve`` keeps its crash reports in a folder of the test's own (made when a
    server starts), never in the user's data folder, where the next server would tell them."""
    from runtime.serve.crash_reports import STATE_ENV

    folder = tmp_path_factory.getbasetemp() / "serve-state" / uuid.uuid4().hex[:12]
    monkeypatch.setenv(STATE_ENV, str(folder))
    return folder
