"""Fixtures shared by every test package."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def sample_model_path() -> Path:
    """The sample model every real-model test uses: PARLEY_SAMPLE_MODEL if set, else the
    models-folder copy that `parley models fetch-sample` puts there (fetched if missing)."""
    override = os.environ.get("PARLEY_SAMPLE_MODEL")
    if override:
        return Path(override).resolve()
    from runtime.models import ensure_sample_model

    return ensure_sample_model()


@pytest.fixture(scope="session")
def sample_model() -> Path:
    return sample_model_path()
