"""Fixtures of the packaging tests: the sample model as a frozen app finds it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def models_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A models folder holding the sample model under its own name (linked, not copied, where possible)."""
    from runtime.models.folder import SAMPLE_MODEL, ensure_sample_model

    override = os.environ.get("PARLEY_SAMPLE_MODEL")
    model = Path(override).resolve() if override else ensure_sample_model()
    folder = tmp_path_factory.mktemp("models")
    target = folder / SAMPLE_MODEL.file_name
    try:
        target.symlink_to(model)
    except OSError:  # Windows without the symlink privilege
        shutil.copy2(model, target)
    return folder
