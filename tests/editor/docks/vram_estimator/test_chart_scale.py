"""Issue 23, friction 7: the memory chart is true to scale against the GPU's memory (it zoomed to
about 80 % whenever the GPU was over 4x the total, so 535 MiB, 817 MiB and 1.35 GiB looked alike on
8 GB), with a labelled magnified inset when the totals would be slivers."""

from __future__ import annotations

import pytest

from editor.docks.vram_estimator.dock import MemoryChart
from runtime.asset.estimate import estimate_asset
from runtime.asset.file import load_asset
from runtime.models.folder import resolve_model
from runtime.models.memory import GIB, MIB, Settings
from runtime.resources import examples_dir

pytestmark = pytest.mark.model  # reads the sample model's GGUF header


def _chart(qtbot, context: int, gpu_gb: float, nodes: int = 1) -> MemoryChart:
    asset = load_asset(examples_dir() / "chat.json")
    reply = asset.nodes[0].model_copy(update={"context_size": context})
    copies = [reply.model_copy(update={"id": f"reply{i}"}) for i in range(nodes)]
    asset = asset.model_copy(update={"nodes": copies, "start_node": "reply0"})
    estimate = estimate_asset(asset, lambda name: resolve_model(name, examples_dir()),
                              Settings(gpu_memory=int(gpu_gb * GIB)))
    chart = MemoryChart()
    qtbot.addWidget(chart)
    chart.resize(340, 200)
    chart.set_estimate(estimate)
    chart.show()
    return chart


def _bar(chart, device="vram", magnified=1):
    return next(r for r in chart.rows() if r.device == device and r.magnified == magnified)


def test_the_vram_bar_fills_what_the_graph_uses_of_the_gpu(qtbot):
    small, large = _chart(qtbot, 2048, 8), _chart(qtbot, 8192, 8, nodes=3)
    for chart in (small, large):
        e = chart.estimate
        assert _bar(chart).scale == 8 * GIB
        assert chart.filled_width(_bar(chart)) == pytest.approx(e.vram_bytes / (8 * GIB) * chart._bar_width())
    # 183 MiB against 1.2 GiB: the bars differ as much as the totals do (they used to both fill ~80 %)
    ratio = large.estimate.vram_bytes / small.estimate.vram_bytes
    assert ratio > 5
    assert chart_ratio(large, small) == pytest.approx(ratio)
    large.grab().save("/tmp/r_chart_large.png")


def chart_ratio(a, b) -> float:
    return a.filled_width(_bar(a)) / b.filled_width(_bar(b))


def test_a_sliver_gets_an_inset_magnified_by_a_power_of_ten_and_labelled(qtbot):
    chart = _chart(qtbot, 8192, 8)  # 438 MiB: 5 % of 8 GiB
    assert chart.magnification() == 10
    inset = _bar(chart, magnified=10)
    assert inset.scale == 8 * GIB // 10
    assert inset.label == f"\u00d710: 0 to {8 * 1024 / 10:,.1f} MiB magnified"
    assert chart.filled_width(inset) == pytest.approx(10 * chart.filled_width(_bar(chart)))
    assert [r.device for r in chart.rows()] == ["vram", "vram", "ram", "ram"]  # each bar with its inset under it
    assert chart.minimumHeight() == 92, "the insets fit in the chart's height: the dock has no room to spare"
    assert chart.rows()[-1].top + chart.rows()[-1].height + 16 <= 92
    chart.grab().save("/tmp/r_chart_inset.png")


def test_a_graph_that_fills_the_gpu_well_has_no_inset(qtbot):
    chart = _chart(qtbot, 8192, 2)  # 438 MiB of 2 GiB: 21 %
    assert chart.magnification() == 1 and [r.magnified for r in chart.rows()] == [1, 1]


def test_a_graph_bigger_than_the_gpu_is_scaled_to_itself_with_the_gpu_line_inside(qtbot):
    chart = _chart(qtbot, 8192, 0.25)
    e = chart.estimate
    assert e.vram_bytes > 256 * MIB
    assert _bar(chart).scale == max(e.vram_bytes, e.ram_bytes)
    assert chart.filled_width(_bar(chart)) == pytest.approx(chart._bar_width())
