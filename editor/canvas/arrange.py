"""Align and distribute the selected nodes (Edit \u25b8 Arrange, and the canvas's menu).

The arithmetic is on plain boxes ``(x, y, width, height)`` (a node's position in the asset and its
drawn size), one function each, so tests check it without a canvas. Each arrangement is one undo
step: a ``MoveCommand`` with every node it moves, on the document (the asset is the source of
truth; the canvas follows it). Aligning needs two nodes, distributing three; with fewer the action
is disabled.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMainWindow, QMenu

from editor.canvas import add_action, context_menu
from editor.model.commands import MoveCommand

if TYPE_CHECKING:
    from editor.canvas import Canvas

Box = tuple[float, float, float, float]  # x, y, width, height
Position = tuple[float, float]


def _bounds(boxes: Mapping[str, Box]) -> tuple[float, float, float, float]:
    left = min(x for x, _, _, _ in boxes.values())
    top = min(y for _, y, _, _ in boxes.values())
    right = max(x + w for x, _, w, _ in boxes.values())
    bottom = max(y + h for _, y, _, h in boxes.values())
    return left, top, right, bottom


def align_left(boxes: Mapping[str, Box]) -> dict[str, Position]:
    left = _bounds(boxes)[0]
    return {key: (left, y) for key, (_, y, _, _) in boxes.items()}


def align_right(boxes: Mapping[str, Box]) -> dict[str, Position]:
    right = _bounds(boxes)[2]
    return {key: (right - w, y) for key, (_, y, w, _) in boxes.items()}


def align_top(boxes: Mapping[str, Box]) -> dict[str, Position]:
    top = _bounds(boxes)[1]
    return {key: (x, top) for key, (x, _, _, _) in boxes.items()}


def align_bottom(boxes: Mapping[str, Box]) -> dict[str, Position]:
    bottom = _bounds(boxes)[3]
    return {key: (x, bottom - h) for key, (x, _, _, h) in boxes.items()}


def align_centres_in_column(boxes: Mapping[str, Box]) -> dict[str, Position]:
    """Every centre on one vertical line: the middle of the nodes' bounding box."""
    left, _, right, _ = _bounds(boxes)
    middle = (left + right) / 2
    return {key: (middle - w / 2, y) for key, (_, y, w, _) in boxes.items()}


def align_centres_in_row(boxes: Mapping[str, Box]) -> dict[str, Position]:
    """Every centre on one horizontal line: the middle of the nodes' bounding box."""
    _, top, _, bottom = _bounds(boxes)
    middle = (top + bottom) / 2
    return {key: (x, middle - h / 2) for key, (x, _, _, h) in boxes.items()}


def _distribute(boxes: Mapping[str, Box], axis: int) -> dict[str, Position]:
    """Even gaps along ``axis`` (0: x, 1: y) between the nodes in the order of their leading edges
    (ties by trailing edge); the first and the last in that order stay where they are. Nodes longer
    together than the span between those two overlap by even amounts instead."""
    order = sorted(boxes, key=lambda key: (boxes[key][axis], boxes[key][axis] + boxes[key][axis + 2]))
    first, last = boxes[order[0]], boxes[order[-1]]
    total = sum(boxes[key][axis + 2] for key in order)
    gap = (last[axis] + last[axis + 2] - first[axis] - total) / (len(order) - 1) if len(order) > 1 else 0.0
    placed: dict[str, Position] = {}
    at = first[axis]
    for key in order:
        x, y, w, h = boxes[key]
        placed[key] = (at, y) if axis == 0 else (x, at)
        at += (w if axis == 0 else h) + gap
    placed[order[-1]] = (last[0], last[1])  # exactly where it was (no rounding of the sums)
    return placed


def distribute_horizontally(boxes: Mapping[str, Box]) -> dict[str, Position]:
    return _distribute(boxes, 0)


def distribute_vertically(boxes: Mapping[str, Box]) -> dict[str, Position]:
    return _distribute(boxes, 1)


@dataclass(frozen=True)
class Arrangement:
    """One entry of Edit \u25b8 Arrange."""

    text: str  # the menu's text
    verb: str  # the undo step's text: "{verb} {n} nodes {how}"
    how: str
    shortcut: str
    tip: str
    least: int  # how many selected nodes it needs
    place: Callable[[Mapping[str, Box]], dict[str, Position]]


ARRANGEMENTS: list[Arrangement] = [
    Arrangement("Align &Left", "Align", "left", "Shift+A", "Line the selected nodes' left edges up", 2, align_left),
    Arrangement("Align &Right", "Align", "right", "Shift+D", "Line the selected nodes' right edges up", 2, align_right),
    Arrangement("Align &Top", "Align", "top", "Shift+W", "Line the selected nodes' top edges up", 2, align_top),
    Arrangement("Align &Bottom", "Align", "bottom", "Shift+S", "Line the selected nodes' bottom edges up", 2,
                align_bottom),
    Arrangement("Align Centres in a &Column", "Align", "centres in a column", "Shift+C",
                "Put the selected nodes' centres on one vertical line", 2, align_centres_in_column),
    Arrangement("Align Centres in a Ro&w", "Align", "centres in a row", "Shift+R",
                "Put the selected nodes' centres on one horizontal line", 2, align_centres_in_row),
    Arrangement("Distribute &Horizontally", "Distribute", "horizontally", "Shift+H",
                "Even the gaps between the selected nodes from left to right; the outer two stay", 3,
                distribute_horizontally),
    Arrangement("Distribute &Vertically", "Distribute", "vertically", "Shift+V",
                "Even the gaps between the selected nodes from top to bottom; the outer two stay", 3,
                distribute_vertically),
]


def boxes_of(canvas: Canvas, node_ids: list[str]) -> dict[str, Box]:
    """Each node's box: its position in the asset, its size as drawn."""
    boxes: dict[str, Box] = {}
    for node_id in node_ids:
        x, y = canvas.document.node(node_id).position
        w, h = canvas.node_size(node_id)
        boxes[node_id] = (float(x), float(y), float(w), float(h))
    return boxes


def arrange_command(canvas: Canvas, node_ids: list[str], arrangement: Arrangement) -> MoveCommand | None:
    """The one undo step that arranges ``node_ids``; None when there are too few or none would move."""
    node_ids = [i for i in node_ids if canvas.document.has_node(i)]
    if len(node_ids) < arrangement.least:
        return None
    boxes = boxes_of(canvas, node_ids)
    placed = arrangement.place(boxes)
    moves = {key: ((boxes[key][0], boxes[key][1]), (float(new[0]), float(new[1])))
             for key, new in placed.items() if (boxes[key][0], boxes[key][1]) != tuple(new)}
    if not moves:
        return None
    text = f"{arrangement.verb} {len(node_ids)} nodes {arrangement.how}"
    return MoveCommand(canvas.document, moves, text)


class ArrangeActions:
    """Edit \u25b8 Arrange's actions on one window, enabled as the selection allows."""

    def __init__(self, window: QMainWindow, canvas: Canvas) -> None:
        self.canvas = canvas
        self.actions: dict[str, QAction] = {}
        self.menu = QMenu("Arran&ge", window)
        self.menu.setStatusTip("Align and distribute the selected nodes")
        for arrangement in ARRANGEMENTS:
            action = QAction(arrangement.text, window)
            action.setShortcut(QKeySequence(arrangement.shortcut))
            tip = f"{arrangement.tip} ({arrangement.shortcut}; needs {arrangement.least} or more selected)"
            action.setStatusTip(tip)
            action.setToolTip(tip)
            action.setEnabled(False)
            action.triggered.connect(lambda _checked=False, a=arrangement: self.arrange(a))
            add_action(canvas, action)  # a letter key: only while the canvas has the focus
            self.actions[arrangement.text.replace("&", "")] = action
            if arrangement is ARRANGEMENTS[6]:
                self.menu.addSeparator()
            self.menu.addAction(action)
        canvas.selection_changed.connect(self.update_enabled)
        canvas.document.reset.connect(self.update_enabled)
        canvas.document.node_removed.connect(self.update_enabled)

    def update_enabled(self, *_changed: object) -> None:
        count = len(self.canvas.selected_ids())
        for arrangement, action in zip(ARRANGEMENTS, self.actions.values(), strict=True):
            action.setEnabled(count >= arrangement.least)

    def arrange(self, arrangement: Arrangement) -> bool:
        """Arrange the selected nodes; False when nothing moved."""
        command = arrange_command(self.canvas, self.canvas.selected_ids(), arrangement)
        if command is None:
            return False
        self.canvas.document.push(command)
        return True


def _menu_titled(window: QMainWindow, title: str) -> QMenu | None:
    for action in window.menuBar().actions():
        menu = action.menu()
        if menu is not None and menu.title().replace("&", "") == title:
            return menu
    return None


def install_arrange(window: QMainWindow) -> ArrangeActions:
    """Edit \u25b8 Arrange (after Select All and Set as Start Node) and the same submenu in the
    canvas's right-click menu."""
    canvas: Canvas = window.canvas  # type: ignore[attr-defined]
    arrange = ArrangeActions(window, canvas)
    edit = _menu_titled(window, "Edit")
    if edit is not None:
        start = getattr(window, "start_action", None)
        actions = edit.actions()
        after = actions.index(start) + 1 if start in actions else len(actions)
        before = actions[after] if after < len(actions) else None
        if before is not None:
            edit.insertMenu(before, arrange.menu)
        else:
            edit.addMenu(arrange.menu)
    menu = context_menu(canvas)
    menu.addSeparator()
    menu.addMenu(arrange.menu)
    return arrange
