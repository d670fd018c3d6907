"""Edit > Arrange: align and distribute the selected nodes. The arithmetic on boxes, then in the
window: one undo step that moves the asset's positions (the canvas follows), and the actions are
enabled only with enough nodes selected."""

from __future__ import annotations

import itertools

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from editor.canvas.arrange import (
    ARRANGEMENTS,
    align_bottom,
    align_centres_in_column,
    align_centres_in_row,
    align_left,
    align_right,
    align_top,
    distribute_horizontally,
    distribute_vertically,
)
from editor.model.commands import remove_nodes
from editor.window.help_menu import shortcut_rows
from runtime.asset.model import Asset, new_node

BOXES = {  # x, y, width, height
    "a": (0.0, 0.0, 100.0, 50.0),
    "b": (300.0, 80.0, 200.0, 100.0),
    "c": (120.0, 400.0, 40.0, 20.0),
}


def test_align_edges():
    assert align_left(BOXES) == {"a": (0.0, 0.0), "b": (0.0, 80.0), "c": (0.0, 400.0)}
    assert align_right(BOXES) == {"a": (400.0, 0.0), "b": (300.0, 80.0), "c": (460.0, 400.0)}
    assert align_top(BOXES) == {"a": (0.0, 0.0), "b": (300.0, 0.0), "c": (120.0, 0.0)}
    assert align_bottom(BOXES) == {"a": (0.0, 370.0), "b": (300.0, 320.0), "c": (120.0, 400.0)}


def test_align_centres_on_the_middle_of_the_bounding_box():
    # bounding box: x 0..500, y 0..420; middles 250 and 210
    assert align_centres_in_column(BOXES) == {"a": (200.0, 0.0), "b": (150.0, 80.0), "c": (230.0, 400.0)}
    assert align_centres_in_row(BOXES) == {"a": (0.0, 185.0), "b": (300.0, 160.0), "c": (120.0, 200.0)}


def test_distribute_makes_even_gaps_and_keeps_the_outer_two():
    boxes = {"a": (0.0, 0.0, 100.0, 10.0), "b": (130.0, 50.0, 50.0, 10.0), "c": (600.0, 5.0, 100.0, 10.0),
             "d": (150.0, 9.0, 150.0, 10.0)}
    placed = distribute_horizontally(boxes)
    assert placed["a"] == (0.0, 0.0) and placed["c"] == (600.0, 5.0), "the first and the last stay"
    # order by left edge: a, b, d, c; widths 100 + 50 + 150 + 100 = 400 in a span of 700: gaps of 100
    assert placed["b"] == (200.0, 50.0) and placed["d"] == (350.0, 9.0)
    ordered = sorted(placed, key=lambda k: placed[k][0])
    gaps = [placed[n][0] - (placed[p][0] + boxes[p][2]) for p, n in itertools.pairwise(ordered)]
    assert gaps == [100.0, 100.0, 100.0]
    tall = {k: (y, x, h, w) for k, (x, y, w, h) in boxes.items()}  # the same along y
    assert {k: (y, x) for k, (x, y) in distribute_vertically(tall).items()} == placed


def test_distribute_overlaps_evenly_when_the_nodes_do_not_fit():
    boxes = {"a": (0.0, 0.0, 100.0, 10.0), "b": (10.0, 0.0, 100.0, 10.0), "c": (150.0, 0.0, 100.0, 10.0)}
    placed = distribute_horizontally(boxes)
    assert placed == {"a": (0.0, 0.0), "b": (75.0, 0.0), "c": (150.0, 0.0)}  # gaps of -25


def scattered() -> Asset:
    nodes = [
        new_node("Generate", "a", position=(0.0, 0.0)),
        new_node("Generate", "b", position=(350.0, 90.0)),
        new_node("GenerateAndSpeak", "c", position=(900.0, -60.0)),
        new_node("Generate", "d", position=(400.0, 600.0)),
    ]
    return Asset(nodes=nodes, start_node="a")


@pytest.fixture
def arranged(window):
    window.set_asset(scattered())
    window.canvas.finish_building()
    return window


def action(window, text: str):
    return window.arrange.actions[text]


def test_the_actions_need_two_or_three_selected_nodes(arranged):
    canvas = arranged.canvas
    texts = [a.text.replace("&", "") for a in ARRANGEMENTS]
    assert all(not action(arranged, t).isEnabled() for t in texts), "nothing selected"
    canvas.select(["a"])
    assert all(not action(arranged, t).isEnabled() for t in texts)
    canvas.select(["a", "b"])
    assert action(arranged, "Align Left").isEnabled() and action(arranged, "Align Centres in a Row").isEnabled()
    assert not action(arranged, "Distribute Horizontally").isEnabled()
    canvas.select(["a", "b", "c"])
    assert all(action(arranged, t).isEnabled() for t in texts)
    arranged.document.push(remove_nodes(arranged.document, ["c"]))
    assert not action(arranged, "Distribute Vertically").isEnabled(), "a selected node deleted"
    rows = shortcut_rows(arranged)
    assert ("Edit \u25b8 Arrange", "Align Left", "Shift+A") in rows
    assert ("Edit \u25b8 Arrange", "Distribute Vertically", "Shift+V") in rows


def test_align_top_is_one_undo_step_on_the_model(arranged):
    doc, canvas = arranged.document, arranged.canvas
    canvas.select(["a", "b", "c"])
    before = {i: doc.node(i).position for i in "abcd"}
    steps = doc.undo_stack.count()
    canvas.viewer.setFocus()
    QTest.keyClick(canvas.viewer, Qt.Key.Key_W, Qt.KeyboardModifier.ShiftModifier)  # Align Top
    assert doc.undo_stack.count() == steps + 1
    assert doc.undo_stack.undoText() == "Align 3 nodes top"
    assert {i: doc.node(i).position for i in "abc"} == {"a": (0.0, -60.0), "b": (350.0, -60.0), "c": (900.0, -60.0)}
    assert doc.node("d").position == before["d"], "an unselected node stays"
    assert tuple(canvas.canvas_node("b").view.xy_pos) == (350.0, -60.0), "the canvas follows the model"
    doc.undo_stack.undo()
    assert {i: doc.node(i).position for i in "abcd"} == before
    doc.undo_stack.redo()
    assert doc.node("a").position == (0.0, -60.0)


def test_align_right_and_centres_use_the_drawn_sizes(arranged):
    doc, canvas = arranged.document, arranged.canvas
    canvas.select(["a", "c"])
    width_a, width_c = canvas.node_size("a")[0], canvas.node_size("c")[0]
    action(arranged, "Align Right").trigger()
    right = 900.0 + width_c
    assert doc.node("a").position == (right - width_a, 0.0) and doc.node("c").position == (900.0, -60.0)
    action(arranged, "Align Centres in a Column").trigger()
    middle = (min(right - width_a, 900.0) + right) / 2  # of the bounding box after Align Right
    assert doc.node("a").position[0] + width_a / 2 == pytest.approx(middle)
    assert doc.node("c").position[0] + width_c / 2 == pytest.approx(middle)


def test_distribute_vertically_evens_the_gaps(arranged):
    doc, canvas = arranged.document, arranged.canvas
    canvas.select(["a", "b", "c", "d"])
    action(arranged, "Distribute Vertically").trigger()
    assert doc.undo_stack.undoText() == "Distribute 4 nodes vertically"
    heights = {i: canvas.node_size(i)[1] for i in "abcd"}
    ys = {i: doc.node(i).position[1] for i in "abcd"}
    assert ys["c"] == -60.0 and ys["d"] == 600.0, "the top and the bottom node stay"
    order = sorted("abcd", key=lambda i: ys[i])
    assert order == ["c", "a", "b", "d"]
    gaps = [ys[n] - (ys[p] + heights[p]) for p, n in itertools.pairwise(order)]
    assert gaps == pytest.approx([gaps[0]] * 3)
    assert [doc.node(i).position[0] for i in "abcd"] == [0.0, 350.0, 900.0, 400.0], "x is left alone"
    doc.undo_stack.undo()
    assert [doc.node(i).position for i in "abcd"] == [n.position for n in scattered().nodes]


def test_nothing_to_move_pushes_nothing(arranged):
    doc, canvas = arranged.document, arranged.canvas
    canvas.select(["a", "b"])
    action(arranged, "Align Top").trigger()
    steps = doc.undo_stack.count()
    action(arranged, "Align Top").trigger()
    assert doc.undo_stack.count() == steps, "already aligned: no empty undo step"
