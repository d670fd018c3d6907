"""What the repro bundle tests share: model hashes remembered in a temporary folder, never the user's cache."""

from __future__ import annotations

import pytest

from runtime.bundle import file as bundle_file


@pytest.fixture(autouse=True)
def private_hash_cache(tmp_path, monkeypatch):
    path = tmp_path / "cache" / "model-sha256.json"
    monkeypatch.setattr(bundle_file, "hash_cache_file", lambda: path)
    monkeypatch.setattr(bundle_file, "_hashes", {})
    return path
