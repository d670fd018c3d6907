"""Issue 23, friction 9 in the VRAM Estimator: a node's row says when its context is the model's own
size because its Context Size is 0."""

from __future__ import annotations

from editor.docks.vram_estimator.dock import VramEstimatorDock
from runtime.asset.model import Asset, new_node
from runtime.models.folder import MODELS_DIR_ENV
from tests.runtime.tiny_gguf import write_tiny_gguf


def test_a_context_of_0_is_said_to_be_the_models_own(window, tmp_path, monkeypatch):
    monkeypatch.setenv(MODELS_DIR_ENV, str(tmp_path))
    write_tiny_gguf(tmp_path / "Tiny.gguf", context_length=4096)
    nodes = [new_node("Generate", "own", context_size=0, default_exit="set"), new_node("Generate", "set", context_size=512)]
    window.set_asset(Asset(default_model="Tiny.gguf", start_node="own", nodes=nodes))
    table = window.dock(VramEstimatorDock).table
    contexts = table.topLevelItem(1)
    rows = {contexts.child(i).text(0): contexts.child(i).text(3) for i in range(contexts.childCount())}
    assert rows == {"own": "4096 tokens of context (Context Size 0: the model's own)", "set": "512 tokens of context"}
