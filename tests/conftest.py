"""Fixtures shared by every test package."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.models.folder import sample_model_for_checks


def sample_model_path() -> Path:
    return sample_model_for_checks()


@pytest.fixture(scope="session")
def sample_model() -> Path:
    return sample_model_path()
