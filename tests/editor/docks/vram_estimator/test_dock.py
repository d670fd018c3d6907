"""The VRAM Estimator dock follows every edit and every setting, with the runtime's estimator."""

from __future__ import annotations

import pytest

from editor.commands import set_node_field
from editor.docks.vram_estimator.dock import VramEstimatorDock
from runtime.asset.estimate import estimate_asset
from runtime.models.folder import resolve_model
from runtime.models.memory import GIB, Settings
from tests.editor.live import example, sample_model

pytestmark = pytest.mark.model  # reads the sample model's GGUF header


@pytest.fixture(scope="module")
def model() -> str:
    return sample_model()


def test_the_estimate_follows_edits_and_settings(window, qtbot, model):
    window.set_asset(example("long_conversation", model))
    dock = window.dock(VramEstimatorDock)
    doc = window.document
    assert dock.estimate is not None and not dock.estimate.problems
    assert [n.node_id for n in dock.estimate.nodes] == ["reply", "summarize"]
    assert dock.estimate == estimate_asset(doc.asset, lambda n: resolve_model(n), Settings(gpu_memory=8 * GIB)), \
        "the dock shows the runtime estimator's numbers"
    before = dock.estimate.node("reply")
    updates = dock.updates

    # An edit: a bigger context for the reply node means a bigger KV cache, at once.
    doc.push(set_node_field(doc, "reply", "context_size", 4096))
    assert dock.updates == updates + 1
    after = dock.estimate.node("reply")
    assert after.context.n_ctx == 4096 and after.kv_bytes == 8 * before.kv_bytes
    assert "4096 tokens of context" in _table_text(dock)
    doc.undo_stack.undo()
    assert dock.estimate.node("reply").kv_bytes == before.kv_bytes

    # KV type and GPU layers apply at once.
    vram = dock.estimate.vram_bytes
    dock.kv_type.setCurrentText("q8_0")
    assert dock.estimate.settings.kv_type == "q8_0"
    assert dock.estimate.node("reply").kv_bytes < before.kv_bytes
    dock.gpu_layers.setValue(0)
    assert dock.estimate.weights_vram == 0 and dock.estimate.vram_bytes < vram
    assert dock.estimate.ram_bytes > dock.estimate.models[0].weights.ram - 1

    # GPU presets, custom size and the verdict.
    dock.gpu_layers.setValue(-1)
    dock.gpu.setCurrentText("6 GB")
    assert dock.estimate.settings.gpu_memory == 6 * GIB and dock.estimate.verdict == "fits"
    assert "FITS" in dock.verdict.text()
    dock.gpu.setCurrentText("Custom\u2026")
    assert dock.custom_gb.isEnabled()
    dock.custom_gb.setValue(0.5)
    assert dock.estimate.settings.gpu_memory == GIB // 2
    dock.kv_type.setCurrentText("f16")
    doc.push(set_node_field(doc, "summarize", "context_size", 8192))
    doc.push(set_node_field(doc, "reply", "context_size", 8192))
    assert GIB // 2 * 0.95 < dock.estimate.vram_bytes < GIB // 2, "inside the 5 % the driver keeps"
    assert dock.estimate.verdict == "tight" and "TIGHT" in dock.verdict.text()
    doc.push(set_node_field(doc, "reply", "max_tokens", 64))  # any edit re-estimates: still tight
    dock.gpu_layers.setValue(31)
    assert dock.estimate.verdict == "tight"
    doc.push(set_node_field(doc, "reply", "context_size", 16384))
    assert dock.estimate.verdict == "does not fit" and "DOES NOT FIT" in dock.verdict.text()
    assert not dock.chart.grab().isNull()


def test_a_missing_model_is_named(window, model):
    window.set_asset(example("chat", "no-such-model.gguf"))
    dock = window.dock(VramEstimatorDock)
    assert dock.estimate is not None and dock.estimate.problems
    assert "reply" in dock.problems.text() and "no-such-model.gguf" in dock.problems.text()


def _table_text(dock) -> str:
    from PySide6.QtWidgets import QTreeWidgetItemIterator

    texts = []
    iterator = QTreeWidgetItemIterator(dock.table)
    while iterator.value() is not None:
        item = iterator.value()
        texts.append(" ".join(item.text(c) for c in range(4)))
        iterator += 1
    return "\n".join(texts)
