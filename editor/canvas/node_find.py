"""Find a node (Ctrl+F): a popup listing the asset's nodes whose title, id, prompt, template, intent
or any other text field contains what is typed, each with where it matched; Enter or a click shows
the node on the canvas (``chosen``). Only the asset model is read; the window does the showing."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QEvent, QObject, QPoint, Qt, Signal
from PySide6.QtWidgets import QFrame, QLabel, QLineEdit, QListWidget, QListWidgetItem, QVBoxLayout, QWidget

from runtime.asset.model import Asset

ID_ROLE = Qt.ItemDataRole.UserRole
SNIPPET = 60  # characters of a long field shown around the match
SHOWN = 200  # matches listed at most: a word found in every node of a large graph


@dataclass(frozen=True)
class NodeMatch:
    node_id: str
    title: str
    field: str  # where it matched: "id", "title", "system_prompt", "intents.0.description", ...
    snippet: str  # the matched text, with some context around it


def _texts(value: Any, where: str) -> Iterator[tuple[str, str]]:
    """Every text inside a node's dumped fields, with its dotted place (``intents.1.description``)."""
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, dict):
        for key, child in value.items():
            yield from _texts(child, f"{where}.{key}" if where else str(key))
    elif isinstance(value, (list, tuple)):
        for index, child in enumerate(value):
            yield from _texts(child, f"{where}.{index}")


def match_snippet(text: str, at: int, length: int) -> str:
    flat = " ".join(text.split()) if len(text) <= SNIPPET else text
    if len(flat) <= SNIPPET:
        return flat
    start = max(0, at - SNIPPET // 3)
    piece = " ".join(text[start:start + SNIPPET + length].split())
    return ("\u2026" if start else "") + piece + ("\u2026" if start + SNIPPET + length < len(text) else "")


def find_nodes(asset: Asset, text: str) -> list[NodeMatch]:
    """The nodes whose text contains ``text`` (case ignored), one match each: those whose id or title
    holds it first, then by the asset's order. Empty text lists every node."""
    needle = text.strip().lower()
    first: list[NodeMatch] = []
    then: list[NodeMatch] = []
    for node in asset.nodes:
        title = node.display_title
        if not needle:
            first.append(NodeMatch(node.id, title, "", ""))
            continue
        if needle in node.id.lower():
            first.append(NodeMatch(node.id, title, "id", node.id))
            continue
        if needle in title.lower():
            first.append(NodeMatch(node.id, title, "title", title))
            continue
        dumped = node.model_dump(mode="json", exclude={"id", "title", "type", "position", "metadata"})
        for where, value in _texts(dumped, ""):
            at = value.lower().find(needle)
            if at >= 0:
                then.append(NodeMatch(node.id, title, where, match_snippet(value, at, len(needle))))
                break
    return first + then


class NodeFind(QFrame):
    """The popup; ``chosen`` carries the id of the node picked."""

    chosen = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent, Qt.WindowType.Popup)
        self.setObjectName("nodeFind")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.asset: Asset | None = None
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.setSpacing(4)
        self.line = QLineEdit(self)
        self.line.setPlaceholderText("Find a node: its title, id, prompt, template or intents")
        self.line.setClearButtonEnabled(True)
        self.line.installEventFilter(self)
        layout.addWidget(self.line)
        self.list = QListWidget(self)
        self.list.setFocusPolicy(Qt.FocusPolicy.NoFocus)  # typing stays in the line
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)  # the tooltip has the whole snippet
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        layout.addWidget(self.list)
        self.nothing = QLabel("No node says that.", self)
        self.nothing.setStyleSheet("color: gray; padding: 2px;")
        self.nothing.hide()
        layout.addWidget(self.nothing)
        self.list.itemClicked.connect(self._pick)
        self.line.textChanged.connect(self._narrow)
        self.line.returnPressed.connect(lambda: self._pick(self.list.currentItem()))

    def popup_at(self, asset: Asset, global_pos: QPoint, width: int = 420) -> None:
        """Show every node of ``asset`` with the popup's top centre at ``global_pos``, on the screen."""
        self.asset = asset
        self.line.clear()
        self._narrow("")
        self.resize(width, self.sizeHint().height())
        top_left = global_pos - QPoint(self.width() // 2, 0)
        screen = self.screen().availableGeometry() if self.screen() else None
        if screen is not None and not screen.isEmpty():
            top_left.setX(max(screen.left(), min(top_left.x(), screen.right() - self.width())))
            top_left.setY(max(screen.top(), min(top_left.y(), screen.bottom() - self.height())))
        self.move(top_left)
        self.show()
        self.line.setFocus(Qt.FocusReason.PopupFocusReason)

    def matches(self) -> list[str]:
        """The listed nodes' ids, in order."""
        return [self.list.item(i).data(ID_ROLE) for i in range(self.list.count())]

    def _narrow(self, text: str) -> None:
        self.list.clear()
        found = find_nodes(self.asset, text) if self.asset is not None else []
        for match in found[:SHOWN]:
            name = match.title if match.title == match.node_id else f"{match.title} ({match.node_id})"
            where = f"\n    {match.field}: {match.snippet}" if match.field not in ("", "id", "title") else ""
            item = QListWidgetItem(name + where)
            item.setData(ID_ROLE, match.node_id)
            item.setToolTip(f"{match.field}: {match.snippet}" if match.field else match.node_id)
            self.list.addItem(item)
        if self.list.count():
            self.list.setCurrentRow(0)
        self.nothing.setVisible(not found)
        self._fit_list()

    def _fit_list(self) -> None:
        """The list as tall as its first 8 rows, and the popup as tall as it then needs."""
        rows = sum(self.list.sizeHintForRow(i) for i in range(min(self.list.count(), 8)))
        self.list.setFixedHeight(max(rows, self.list.sizeHintForRow(0) if self.list.count() else 0, 24)
                                 + 2 * self.list.frameWidth() + 2)
        if self.isVisible():
            self.resize(self.width(), self.sizeHint().height())

    def _pick(self, item: QListWidgetItem | None) -> None:
        if item is not None:
            self.hide()
            self.chosen.emit(item.data(ID_ROLE))

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.line and event.type() == QEvent.Type.KeyPress:
            key = event.key()  # type: ignore[attr-defined]
            if key in (Qt.Key.Key_Down, Qt.Key.Key_Up) and self.list.count():
                row = self.list.currentRow() + (1 if key == Qt.Key.Key_Down else -1)
                self.list.setCurrentRow(row % self.list.count())
                return True
            if key == Qt.Key.Key_Escape:
                self.hide()
                return True
        return super().eventFilter(watched, event)
