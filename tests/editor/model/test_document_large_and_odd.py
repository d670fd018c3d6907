"""The document on large graphs and odd positions (issue 14, defects 12 and 14): nodes are found by
id without a scan (opening a 5,000-node graph looked each node up by scanning them all), and a
position the canvas cannot draw is refused."""

from __future__ import annotations

import math
import time

import pytest

from editor.model.document import Document, FieldRejected
from runtime.asset.model import Asset, new_node


def chain(count: int) -> Document:
    nodes = [new_node("Generate", f"n{i}", default_exit=f"n{i + 1}" if i + 1 < count else "") for i in range(count)]
    return Document(Asset(start_node="n0", nodes=nodes))


def test_looking_nodes_up_does_not_scan_the_graph():
    doc = chain(20_000)
    started = time.perf_counter()
    for i in range(20_000):
        assert doc.node(f"n{i}").id == f"n{i}"
    assert time.perf_counter() - started < 1.0  # a scan per lookup took about 10 s


def test_lookups_follow_every_change():
    doc = chain(5)
    doc.remove_node("n1")
    assert doc.index_of("n2") == 1 and not doc.has_node("n1")
    doc.add_node(new_node("Generate", "x"), index=0)
    assert doc.index_of("x") == 0 and doc.index_of("n4") == 4
    doc.rename_node("n2", "renamed")
    assert doc.node("renamed").id == "renamed" and not doc.has_node("n2")
    assert doc.node("n0").default_exit == "n1"
    assert doc.node("x").default_exit == ""
    doc.set_node_field("n3", "title", "changed")
    assert doc.node("n3").title == "changed"
    doc.set_asset(Asset(nodes=[new_node("Generate", "only")]))
    assert doc.index_of("only") == 0 and not doc.has_node("n0")
    with pytest.raises(KeyError):
        doc.node("n0")


def test_lookups_survive_a_list_changed_behind_the_documents_back():
    doc = chain(3)
    doc.node("n2")
    doc.asset.nodes.reverse()
    assert doc.node("n2").id == "n2" and doc.index_of("n2") == 0


@pytest.mark.parametrize("position", [(math.nan, 0.0), (0.0, math.inf), (-math.inf, 1.0)])
def test_a_position_the_canvas_cannot_draw_is_refused(position):
    doc = chain(2)
    with pytest.raises(FieldRejected) as info:
        doc.set_position("n1", position)
    assert info.value.node_id == "n1" and info.value.field == "position"
    assert doc.node("n1").position == (0.0, 0.0)
