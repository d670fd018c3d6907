"""The VRAM Estimator dock follows every edit and every setting, with the runtime's estimator."""

from __future__ import annotations

import pytest

from editor.docks.vram_estimator.dock import VramEstimatorDock
from editor.model.commands import set_node_field
from runtime.asset.estimate import estimate_asset
from runtime.models.context_settings import FLASH_ATTN
from runtime.models.folder import resolve_model
from runtime.models.memory import GIB, MIB, Settings
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
    dock.custom_gb.setValue(0.8)
    gpu = int(0.8 * GIB)
    assert dock.estimate.settings.gpu_memory == gpu
    dock.kv_type.setCurrentText("f16")
    doc.push(set_node_field(doc, "summarize", "context_size", 8192))
    doc.push(set_node_field(doc, "reply", "context_size", 8192))
    # flash attention off (the default): 2 x (180 MiB KV + 166 MiB compute) + 92 MiB weights = 785 MiB
    assert gpu * 0.95 < dock.estimate.vram_bytes < gpu, "inside the 5 % the driver keeps"
    assert dock.estimate.verdict == "tight" and "TIGHT" in dock.verdict.text()
    doc.push(set_node_field(doc, "reply", "max_tokens", 64))  # any edit re-estimates: still tight
    dock.gpu_layers.setValue(31)
    assert dock.estimate.verdict == "tight"
    doc.push(set_node_field(doc, "reply", "context_size", 16384))
    assert dock.estimate.verdict == "does not fit" and "DOES NOT FIT" in dock.verdict.text()
    assert not dock.chart.grab().isNull()


def test_the_dock_says_which_flash_attention_it_assumed(window, model):
    window.set_asset(example("intent_router", model))
    dock = window.dock(VramEstimatorDock)
    # The runtime's default: off, and the dock says so, with what it means for replays
    assert FLASH_ATTN == "off" and dock.flash_attn.currentText() == "off" and dock.flash_attn.isEnabled()
    assert dock.estimate.settings.flash_attn == "off" and not dock.estimate.node("classify").context.flash_attn
    assert "Assumes flash attention off (the runtime's default: replays are exact at any thread count)" \
        in dock.assumed.text()
    assert "flash attention off" in _table_text(dock)
    off = dock.estimate.node("classify").compute_bytes

    # A quantized KV cache exists only with flash attention on: the dock estimates that, and says why
    dock.kv_type.setCurrentText("q8_0")
    assert dock.flash_attn.currentText() == "on" and not dock.flash_attn.isEnabled()
    assert "q8_0 KV cache needs flash attention on" in dock.flash_attn.toolTip()
    assert dock.estimate.settings.flash_attn == "on" and dock.estimate.node("classify").context.flash_attn
    assert "Assumes flash attention on (a q8_0 KV cache needs it" in dock.assumed.text()
    assert not dock.problems.text()
    assert dock.estimate == estimate_asset(window.document.asset, lambda n: resolve_model(n),
                                           Settings(gpu_memory=8 * GIB, kv_type="q8_0", flash_attn="on"))

    # Back on f16, the designer's own choice returns; a choice of "on" survives a quantized detour
    dock.kv_type.setCurrentText("f16")
    assert dock.flash_attn.currentText() == "off" and dock.flash_attn.isEnabled()
    assert dock.estimate.node("classify").compute_bytes == off
    dock.flash_attn.setCurrentText("on")
    assert dock.estimate.settings.flash_attn == "on" and dock.estimate.node("classify").compute_bytes < off
    assert "Assumes flash attention on (the runtime's default is off;" in dock.assumed.text()
    dock.kv_type.setCurrentText("q4_0")
    dock.kv_type.setCurrentText("f16")
    assert dock.flash_attn.currentText() == "on" and dock.estimate.settings.flash_attn == "on"


def test_the_cache_snapshots_budget_is_a_ram_line_of_its_own(window, model):
    window.set_asset(example("intent_router", model))
    dock = window.dock(VramEstimatorDock)
    e = dock.estimate
    assert e.snapshot_ram == 256 * MIB
    assert "Cache snapshots: up to 256.0 MiB of RAM on top of the total" in dock.assumed.text()
    assert "Cache snapshots 256.0 MiB - at most, on top of the total" in _table_text(dock)
    assert e.ram_bytes == sum(m.ram_bytes for m in e.models) + sum(n.ram_bytes for n in e.nodes), "not in the total"
    dock.set_snapshot_budget(64)
    assert dock.estimate.snapshot_ram == 64 * MIB and "up to 64.0 MiB" in dock.assumed.text()
    dock.set_snapshot_budget(0)
    assert "Cache snapshots: off" in dock.assumed.text()


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
