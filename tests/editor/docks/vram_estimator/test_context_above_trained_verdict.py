"""Issue 38: the estimator never says a green FITS while Problems holds an error because a node's
context is above its model's trained size: it says the graph fits in memory but will not run."""

from __future__ import annotations

from editor.docks.vram_estimator.dock import VERDICT_COLOURS, VramEstimatorDock
from editor.model.commands import set_node_field
from runtime.asset.model import Asset, new_node
from runtime.models.folder import MODELS_DIR_ENV
from tests.runtime.tiny_gguf import write_tiny_gguf


def test_fits_in_memory_but_a_context_above_the_trained_size_is_not_green(window, tmp_path, monkeypatch):
    monkeypatch.setenv(MODELS_DIR_ENV, str(tmp_path))
    write_tiny_gguf(tmp_path / "Tiny.gguf", context_length=2048)
    window.set_asset(Asset(default_model="Tiny.gguf", start_node="reply",
                           nodes=[new_node("Generate", "reply", context_size=1024)]))
    dock = window.dock(VramEstimatorDock)
    doc = window.document
    assert dock.estimate.verdict == "fits" and VERDICT_COLOURS["fits"] in dock.verdict.text()

    doc.push(set_node_field(doc, "reply", "context_size", 8192))
    assert any(p.severity == "error" and p.field == "context_size" for p in window.problems_dock.problems)
    assert dock.estimate.verdict == "fits", "the memory still fits: the bytes are not the problem"
    text = dock.verdict.text()
    assert VERDICT_COLOURS["fits"] not in text, "no green FITS while the graph cannot run"
    assert "FITS</b></span> in memory, but it cannot run" in text
    assert "reply's context 8,192 is above Tiny.gguf's trained 2,048" in text
    dock.resize(360, 500)
    dock.grab().save("/tmp/w38/vram_above_trained.png")

    doc.undo_stack.undo()
    assert VERDICT_COLOURS["fits"] in dock.verdict.text() and "but" not in dock.verdict.text()
