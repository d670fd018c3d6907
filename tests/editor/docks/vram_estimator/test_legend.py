"""The VRAM Estimator's legend names every colour of its chart, however narrow the dock."""

from __future__ import annotations

from PySide6.QtCore import Qt

from editor.docks.vram_estimator.dock import VramEstimatorDock
from runtime.asset.model import Asset, new_node
from runtime.models.folder import MODELS_DIR_ENV
from tests.runtime.tiny_gguf import write_tiny_gguf


def test_the_legend_names_every_colour_of_the_chart(window, tmp_path, monkeypatch, qtbot):
    monkeypatch.setenv(MODELS_DIR_ENV, str(tmp_path))
    write_tiny_gguf(tmp_path / "Tiny.gguf", context_length=2048)
    nodes = [new_node("Generate", f"step_{i}", context_size=512, default_exit=f"step_{i + 1}" if i < 3 else "")
             for i in range(4)]
    window.set_asset(Asset(default_model="Tiny.gguf", start_node="step_0", nodes=nodes))
    dock = window.dock(VramEstimatorDock)
    dock.show()
    dock.raise_()
    qtbot.wait(10)
    segments = dock.chart.segments("vram") + dock.chart.segments("ram")
    colours = {colour.name() for _name, _size, colour in segments}
    assert len(colours) == 9, "weights, and a KV cache and a compute buffer for each of 4 nodes"

    text = dock.legend.text()
    for name, _size, colour in segments:
        entry = f"<span style='color:{colour.name()}'>\u25a0</span>&nbsp;{name.replace(' ', '&nbsp;')}"
        assert entry in text, f"{name} ({colour.name()}) is not in the legend"
    assert "step_3&nbsp;compute&nbsp;buffer" in text and "Tiny.gguf&nbsp;weights" in text

    # All of it is on screen: the label wraps in the dock's width instead of dropping entries.
    legend = dock.legend
    assert legend.isVisible() and legend.wordWrap()
    assert legend.height() >= legend.heightForWidth(legend.width())
    assert legend.width() <= dock.widget().width()
    window.resizeDocks([dock], [300], Qt.Orientation.Horizontal)
    qtbot.wait(10)
    assert legend.height() >= legend.heightForWidth(legend.width())
