"""Tab search: a popup listing the node types by their labels, grouped as in the palette.

Typing narrows the list and ranks it (``match_rank``): a label typed exactly first, then a label
that starts with the text, then one that contains every word, then a near miss ("clasify",
"summary"); the best match is highlighted. Up and Down move the highlight, Enter or a click adds
the highlighted type, Escape closes.
Only ``editor.canvas.node_types`` is read, never NodeGraphQt's registry of its own classes.
"""

from __future__ import annotations

from difflib import SequenceMatcher

from PySide6.QtCore import QEvent, QObject, QPoint, Qt, Signal
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import QFrame, QLabel, QLineEdit, QTreeWidget, QTreeWidgetItem, QVBoxLayout, QWidget

from editor.canvas.node_types import categories, category_colour

TYPE_ROLE = Qt.ItemDataRole.UserRole
WORDS_ROLE = Qt.ItemDataRole.UserRole + 1  # the label, type name and category it is found by
ORDER_ROLE = Qt.ItemDataRole.UserRole + 2  # its place in the palette's order, for ties
NEAR_MISS = 0.7  # SequenceMatcher ratio from which a typed word counts as a misspelt name word


def match_rank(text: str, label: str, words: str) -> int | None:
    """How well ``text`` names a node type: 0 its label exactly, 1 a label starting with it, 2 every
    word found in ``words`` (label, type name, category), 3 every word a near miss of one of them
    (a typo, or another ending of the same stem); None: no match. Case is ignored."""
    text, label = " ".join(text.lower().split()), label.lower()
    if not text:
        return 2
    if text == label:
        return 0
    if label.startswith(text):
        return 1
    typed = text.split()
    if all(w in words for w in typed):
        return 2
    names = words.split()

    def near(w: str) -> bool:
        # the whole name word, or its start as long as the typed word ("summary" ~ "summari(ze)")
        return any(max(SequenceMatcher(None, w, n).ratio(), SequenceMatcher(None, w, n[:len(w)]).ratio())
                   >= NEAR_MISS for n in names)

    if all(len(w) >= 3 and near(w) for w in typed):
        return 3
    return None



class NodeSearch(QFrame):
    """The popup; ``chosen`` carries the node type picked."""

    chosen = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent, Qt.WindowType.Popup)
        self.setObjectName("nodeSearch")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.setSpacing(4)
        self.line = QLineEdit(self)
        self.line.setPlaceholderText("Add a node: type part of its name")
        self.line.setClearButtonEnabled(True)
        self.line.installEventFilter(self)
        layout.addWidget(self.line)
        self.tree = QTreeWidget(self)
        self.tree.setHeaderHidden(True)
        self.tree.setRootIsDecorated(False)
        self.tree.setItemsExpandable(False)
        self.tree.setIndentation(12)
        self.tree.setFocusPolicy(Qt.FocusPolicy.NoFocus)  # typing stays in the line
        layout.addWidget(self.tree)
        self.nothing = QLabel("No node type matches.", self)
        self.nothing.setStyleSheet("color: gray; padding: 2px;")
        self.nothing.hide()
        layout.addWidget(self.nothing)
        order = 0
        for category, views in categories().items():
            top = QTreeWidgetItem([category])
            top.setFlags(Qt.ItemFlag.ItemIsEnabled)
            top.setForeground(0, QBrush(QColor(*[min(255, c + 80) for c in category_colour(category)])))
            self.tree.addTopLevelItem(top)
            for view in views:
                item = QTreeWidgetItem([view.label])
                item.setData(0, TYPE_ROLE, view.type)
                item.setToolTip(0, view.help)
                item.setData(0, WORDS_ROLE, f"{view.label} {view.type} {category}".lower())
                item.setData(0, ORDER_ROLE, order)
                order += 1
                top.addChild(item)
            top.setData(0, ORDER_ROLE, order)
        self.tree.expandAll()
        self.tree.itemClicked.connect(self._pick)
        self.line.textChanged.connect(self._narrow)
        self.line.returnPressed.connect(lambda: self._pick(self.tree.currentItem()))

    def popup_at(self, global_pos: QPoint) -> None:
        """Show the whole list with its top near ``global_pos``, kept on the screen."""
        self.line.clear()
        self._narrow("")
        rows = sum(1 + top.childCount() for top in self._categories())
        self.tree.setFixedHeight(min(rows, 24) * self.tree.sizeHintForRow(0) + 2 * self.tree.frameWidth() + 2)
        self.resize(max(260, self.sizeHint().width()), self.sizeHint().height())
        top_left = global_pos - QPoint(self.width() // 2, 12)
        screen = self.screen().availableGeometry() if self.screen() else None
        if screen is not None and not screen.isEmpty():
            top_left.setX(max(screen.left(), min(top_left.x(), screen.right() - self.width())))
            top_left.setY(max(screen.top(), min(top_left.y(), screen.bottom() - self.height())))
        self.move(top_left)
        self.show()
        self.line.setFocus(Qt.FocusReason.PopupFocusReason)

    def entries(self) -> dict[str, list[str]]:
        """What the list shows: category -> labels, in order."""
        out: dict[str, list[str]] = {}
        for top in self._categories():
            labels = [top.child(i).text(0) for i in range(top.childCount()) if not top.child(i).isHidden()]
            if labels and not top.isHidden():
                out[top.text(0)] = labels
        return out

    def _categories(self) -> list[QTreeWidgetItem]:
        return [self.tree.topLevelItem(i) for i in range(self.tree.topLevelItemCount())]

    def _types(self) -> list[QTreeWidgetItem]:
        return [top.child(i) for top in self._categories() for i in range(top.childCount())]

    def _narrow(self, text: str) -> None:
        """Show the types ``text`` matches, best first (within each category, and the category with
        the best match first), and highlight the best."""
        best: tuple[int, int] | None = None
        first = None
        tops = []
        for top in self._categories():
            ranked = []
            for item in top.takeChildren():
                rank = match_rank(text, item.text(0), item.data(0, WORDS_ROLE))
                key = (9 if rank is None else rank, item.data(0, ORDER_ROLE))
                ranked.append((key, rank is not None, item))
                if rank is not None and (best is None or key < best):
                    best, first = key, item
            ranked.sort(key=lambda entry: entry[0])
            top.addChildren([item for _, _, item in ranked])
            for _, match, item in ranked:
                item.setHidden(not match)  # an item knows it is hidden only while in the tree
            shown = [key for key, match, _ in ranked if match]
            tops.append((min(shown, default=(9, top.data(0, ORDER_ROLE))), not shown, top))
        tops.sort(key=lambda entry: entry[0])
        for _, _, top in tops:
            self.tree.takeTopLevelItem(self.tree.indexOfTopLevelItem(top))
        self.tree.addTopLevelItems([top for _, _, top in tops])
        for _, empty, top in tops:
            top.setHidden(empty)
        self.tree.expandAll()
        self.tree.setCurrentItem(first)
        self.nothing.setVisible(first is None)

    def _step(self, step: int) -> None:
        visible = [item for item in self._types() if not item.isHidden()]
        if not visible:
            return
        current = self.tree.currentItem()
        index = visible.index(current) if current in visible else -step
        self.tree.setCurrentItem(visible[(index + step) % len(visible)])

    def _pick(self, item: QTreeWidgetItem | None) -> None:
        type_name = item.data(0, TYPE_ROLE) if item is not None else None
        if type_name:
            self.hide()
            self.chosen.emit(type_name)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.line and event.type() == QEvent.Type.KeyPress:
            key = event.key()  # type: ignore[attr-defined]
            if key in (Qt.Key.Key_Down, Qt.Key.Key_Up):
                self._step(1 if key == Qt.Key.Key_Down else -1)
                return True
            if key == Qt.Key.Key_Escape:
                self.hide()
                return True
        return super().eventFilter(watched, event)
