"""Overlays: what the canvas shows on top of the drawn graph and takes off again.

The Problems dock's marks (a node's severity and its tooltip), the Turn Inspector's path (the nodes
a turn ran through, numbered) and the Tests dock's coverage (a visit badge on each node, counts on
the exits and never-taken exits in a warning colour). Marks asked for a node not drawn yet are kept
and painted when it is drawn (``paint_drawn``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from NodeGraphQt.constants import PipeEnum
from PySide6.QtCore import QObject
from PySide6.QtGui import QColor, QPen
from PySide6.QtWidgets import QGraphicsRectItem, QGraphicsSimpleTextItem
from shiboken6 import isValid

from editor.canvas.drawing import Drawing, key_of
from editor.canvas.node_appearance import NEVER_TAKEN_COLOUR, VisitBadge, coverage_label_html
from runtime.names import NAMESPACE_SEP, owner_of
from runtime.nodes import shown_exit_label
from runtime.problems import Problem

PATH_COLOUR = QColor(80, 200, 255)


class Overlays(QObject):
    """The problem marks, the turn path and the coverage counts on one drawing."""

    def __init__(self, drawing: Drawing, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.drawing = drawing
        self.document = drawing.document
        self._problems: dict[str, list[Problem]] = {}
        # A test run's counts (node id -> visits, (node id, port) -> times taken), while shown
        self._coverage: tuple[dict[str, int], dict[tuple[str, str], int]] | None = None
        self._path_marks: list[QGraphicsRectItem] = []
        drawing.node_drawn.connect(self.paint_drawn)
        drawing.cleared.connect(self.forget)

    def shown_on(self, node_id: str) -> str:
        """The canvas node a runtime id is shown on: itself, or for a behaviour's node
        (``guard/classify``) the Subgraph node that runs it (``guard``)."""
        if NAMESPACE_SEP in node_id and node_id not in self.drawing.nodes and node_id not in self.drawing.pending:
            return owner_of(node_id)
        return node_id

    # --- what the drawing tells -------------------------------------------------------------------

    def forget(self) -> None:
        """The drawing was thrown away (another asset): the marks and counts were of the old one."""
        self._problems.clear()
        self._coverage = None

    def paint_drawn(self, node_id: str) -> None:
        """A node was just drawn: paint what was asked for it before."""
        if node_id in self._problems:
            self._paint_problems(node_id, self._problems[node_id])
        if self._coverage is not None:
            self._paint_coverage(node_id)

    def forget_node(self, node_id: str) -> None:
        self._problems.pop(node_id, None)

    def rename_node(self, old: str, new: str) -> None:
        if old in self._problems:
            self._problems[new] = self._problems.pop(old)
        if self._coverage is not None:
            # The counts follow the node's id: left under the old one, the next repaint of the node
            # (any edit of it) showed "\u00d70", and undoing the rename and the edit kept it there.
            # A Subgraph node's behaviour's nodes (guard/classify) are counted under its id too.
            def renamed(node_id: str) -> str:
                inner = node_id.startswith(old + NAMESPACE_SEP)
                return new + node_id[len(old):] if node_id == old or inner else node_id

            visits, exits = self._coverage
            self._coverage = ({renamed(k): v for k, v in visits.items()},
                              {(renamed(k), port): v for (k, port), v in exits.items()})
            if new in self.drawing.nodes:
                self._paint_coverage(new)

    def node_changed(self, node_id: str) -> None:
        """A drawn node's exits or labels were redrawn: its counts go back on them."""
        if self._coverage is not None:
            self._paint_coverage(node_id)

    # --- problems ------------------------------------------------------------------------------

    def mark_problems(self, problems: list[Problem]) -> None:
        """Mark nodes that have errors or warnings; their tooltips list them."""
        drawn, pending = self.drawing.nodes, self.drawing.pending
        by_node: dict[str, list[Problem]] = defaultdict(list)
        for problem in problems:
            node_id = self.shown_on(problem.node_id)
            if node_id in drawn or node_id in pending:
                by_node[node_id].append(problem)
        for node_id in set(self._problems) | set(by_node):
            if node_id not in drawn:
                continue  # a node not drawn yet is marked when it is drawn
            found = by_node.get(node_id, [])
            if self._problems.get(node_id, []) == found:
                continue
            self._paint_problems(node_id, found)
        self._problems = dict(by_node)

    def _paint_problems(self, node_id: str, found: list[Problem]) -> None:
        view = self.drawing.nodes[node_id].view
        view.problem_severity = (
            "error" if any(p.severity == "error" for p in found) else "warning" if found else None
        )
        node = self.document.node(node_id)
        tip = f"<b>{node.display_title}</b> ({node.type}, id {node_id})"
        for p in found:
            inner = f"{p.node_id} " if p.node_id != node_id else ""  # a node of its behaviour
            tip += f"<br/>{p.severity}: {inner}{p.field + ': ' if p.field else ''}{p.message}"
        view.problem_tip = tip
        view.refresh_tooltip()
        view.update()

    def problem_severity(self, node_id: str) -> str | None:
        return self.drawing.canvas_node(node_id).view.problem_severity

    # --- a turn's path (the Turn Inspector) -------------------------------------------------------

    def highlight_path(self, node_ids: list[str]) -> None:
        """Outline the nodes a turn ran through, numbered in the order they ran; [] clears it."""
        for mark in self._path_marks:
            if isValid(mark) and mark.scene() is not None:
                mark.scene().removeItem(mark)
        self._path_marks = []
        # A behaviour's nodes (guard/classify) are marked on the Subgraph node that runs them, once
        # for each time the turn went through it.
        shown: list[str] = []
        for ran in node_ids:
            node_id = self.shown_on(ran)
            if not (shown and shown[-1] == node_id and node_id != ran):  # else a step inside the same node
                shown.append(node_id)
        steps: dict[str, list[str]] = defaultdict(list)
        for step, node_id in enumerate(shown, 1):
            steps[node_id].append(str(step))
        drawn = self.drawing.nodes
        for node_id, numbers in steps.items():
            self.drawing.ensure(node_id)
            if node_id not in drawn:
                continue
            view = drawn[node_id].view
            mark = QGraphicsRectItem(view.boundingRect().adjusted(-5, -5, 5, 5), view)
            mark.setPen(QPen(PATH_COLOUR, 3))
            label = QGraphicsSimpleTextItem("#" + ",".join(numbers), mark)
            label.setBrush(PATH_COLOUR)
            label.setPos(mark.rect().left(), mark.rect().top() - 18)
            self._path_marks.append(mark)

    def highlighted_path(self) -> list[str]:
        """Ids of the nodes outlined by ``highlight_path``."""
        marks = [m for m in self._path_marks if isValid(m)]
        return [key_of(n) for n in self.drawing.nodes.values() if any(m.parentItem() is n.view for m in marks)]

    # --- test coverage (the Tests dock) ------------------------------------------------------------

    def show_coverage(self, visits: Mapping[str, int], exits: Mapping[tuple[str, str], int]) -> None:
        """Show a test run's counts: a "\u00d7N" badge on each node, "\u00d7N" after each exit's label,
        and never-taken exits (their labels and pipes) in a warning colour, until ``clear_coverage``."""
        self._coverage = ({k: int(v) for k, v in visits.items()}, {k: int(v) for k, v in exits.items()})
        for node_id in self.drawing.nodes:
            self._paint_coverage(node_id)

    def clear_coverage(self) -> None:
        if self._coverage is None:
            return  # none shown: every node has its plain labels (repainting them all took 0.2 s an open at 500 nodes)
        self._coverage = None
        for node_id in self.drawing.nodes:
            self._paint_coverage(node_id)

    def _paint_coverage(self, node_id: str) -> None:
        canvas_node = self.drawing.nodes[node_id]
        view = canvas_node.view
        node = self.document.node(node_id)
        for out in canvas_node.output_ports():
            port = out.name()
            text = view.get_output_text_item(out.view)
            never = False
            if self._coverage is None:
                text.setPlainText(shown_exit_label(node, port))
            else:
                count = self._coverage[1].get((node_id, port), 0)
                text.setHtml(coverage_label_html(shown_exit_label(node, port), count))
                never = not count
            for pipe in out.view.connected_pipes:
                pipe.color = (*NEVER_TAKEN_COLOUR, 255) if never else PipeEnum.COLOR.value
                pipe.style = PipeEnum.DRAW_TYPE_DASHED.value if never else PipeEnum.DRAW_TYPE_DEFAULT.value
                pipe.reset()
        view.draw_node()  # the labels' widths changed
        badge = next((c for c in view.childItems() if isinstance(c, VisitBadge)), None)
        if self._coverage is None:
            if badge is not None and badge.scene() is not None:
                badge.scene().removeItem(badge)
            return
        if badge is None:
            badge = VisitBadge(view)
        badge.set_count(self._coverage[0].get(node_id, 0))
        box = badge.boundingRect()
        badge.setPos(view.boundingRect().right() - box.width() + 4, -box.height() / 2 - 2)

    def visit_badge(self, node_id: str) -> str:
        """The coverage badge on a node ("\u00d73"), or "" when none is shown."""
        view = self.drawing.canvas_node(node_id).view
        badge = next((c for c in view.childItems() if isinstance(c, VisitBadge)), None)
        return badge.text if badge is not None else ""

    def exit_label(self, node_id: str, port: str) -> tuple[str, bool]:
        """An exit's label as the canvas shows it, and whether it is marked as never taken."""
        out = self.drawing.canvas_node(node_id).outputs()[port]
        text = self.drawing.nodes[node_id].view.get_output_text_item(out.view).toPlainText()
        return text, self._coverage is not None and not self._coverage[1].get((node_id, port), 0)
