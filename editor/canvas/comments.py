"""Comments on the canvas: backdrops (a titled, coloured rectangle that carries the nodes inside it)
and notes (free text). They are layout only: saved in the asset's ``comments``, never run, never sent
to a model.

Each comment is drawn as a NodeGraphQt ``BackdropNode`` (``CommentCanvasNode``), keyed ``#<id>`` on
the canvas like the terminals are ``@start``/``@end``. The document stays the record: a drag, a
resize and the edit dialog become ``editor.model.commands`` on it, and ``CommentLayer`` redraws from its
``comment_*`` signals, whichever way the change came (undo, a paste, the dialog).

Clicking a backdrop selects the backdrop alone; dragging it moves the nodes wholly inside it with it
(one ``MoveCommand``). Delete removes the backdrop and leaves its nodes; Copy takes the nodes inside
a selected backdrop along with it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from NodeGraphQt import BackdropNode
from NodeGraphQt.constants import NodeEnum
from NodeGraphQt.qgraphics.node_backdrop import BackdropNodeItem
from NodeGraphQt.qgraphics.pipe import PipeItem
from NodeGraphQt.qgraphics.port import PortItem
from PySide6.QtCore import QObject, QRectF, Qt, Signal
from PySide6.QtGui import QAction, QColor, QFont, QPainter, QPen
from PySide6.QtWidgets import (
    QColorDialog,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QGraphicsItem,
    QLineEdit,
    QMainWindow,
    QMenu,
    QPlainTextEdit,
    QPushButton,
    QWidget,
)

from editor.canvas.drawing import IDENTIFIER, NEW_NODE_SIZE, Drawing, key_of
from editor.model.commands import AddCommentCommand, MacroCommand, set_comment
from editor.model.document import COMMENT_KEY_PREFIX, Document, FieldRejected, comment_key
from runtime.asset.model import Comment

# Around the nodes a new backdrop groups: room on each side, and above for its title bar.
GROUP_PADDING = 40.0
TITLE_BAR = 34.0
NOTE_SIZE = (260.0, 140.0)
NOTE_COLOR = (112, 96, 40)
BACKDROP_COLOR = (60, 70, 90)
# What a new note and a new backdrop say until the designer writes theirs (selected in the editor, to type over)
NEW_NOTE_TEXT, NEW_BACKDROP_TITLE = "Note", "Group"
MIN_SIZE = (120.0, 60.0)

_TITLE_FONT = QFont()
_TITLE_FONT.setPointSizeF(14.0)
_TITLE_FONT.setBold(True)
_TEXT_FONT = QFont()
_TEXT_FONT.setPointSizeF(11.5)


def ink_for(color: tuple[int, int, int]) -> QColor:
    """Dark text on a light colour, light text on a dark one."""
    r, g, b = color[:3]
    return QColor(30, 30, 30) if 0.299 * r + 0.587 * g + 0.114 * b > 150 else QColor(238, 238, 238)


class CommentItem(BackdropNodeItem):
    """How a comment is painted. A backdrop: a tinted body under a title bar of its colour, with its
    text under the bar; it carries the nodes inside it when dragged. A note: a filled card of its
    colour with its text, carrying nothing."""

    def __init__(self, name: str = "comment", text: str = "", parent=None) -> None:
        super().__init__(name, text, parent)
        self.asset_id = ""
        self.comment: Comment | None = None
        self._min_size = MIN_SIZE
        self._carried: list = []
        self.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)

    @property
    def carries_nodes(self) -> bool:
        return self.comment is not None and self.comment.kind == "backdrop"

    def show_comment(self, comment: Comment) -> None:
        """Bring the item up to date with the document's comment."""
        self.comment = comment
        self.name = comment.title
        self.color = (*comment.color, 255)
        self.border_color = (*[min(255, c + 50) for c in comment.color], 255)
        w, h = max(MIN_SIZE[0], comment.size[0]), max(MIN_SIZE[1], comment.size[1])
        if (self.width, self.height) != (w, h):
            self.prepareGeometryChange()
            self.width, self.height = w, h
        if tuple(self.xy_pos) != tuple(comment.position):
            self.xy_pos = list(comment.position)
        self.setToolTip(comment.text or comment.title or f"a {comment.kind}: double-click to edit it")
        self.update()

    # --- a drag carries the nodes inside a backdrop; a click selects the comment alone -------------

    def mousePressEvent(self, event) -> None:
        if event.button() != Qt.MouseButton.LeftButton:
            return
        pos = event.scenePos()
        under = self.scene().items(QRectF(pos.x() - 5, pos.y() - 5, 10, 10))
        if under and isinstance(under[0], (PortItem, PipeItem)):
            self.setFlag(QGraphicsItem.GraphicsItemFlag.ItemIsMovable, False)
            return
        viewer = self.viewer()
        for item in viewer.selected_nodes():
            if item is not self:
                item.setSelected(False)
        # Selected, they move with it (Qt moves every selected item); the viewer has recorded where
        # they were, so the move is one undo step with the backdrop's.
        self._carried = self.get_nodes(False) if self.carries_nodes else []
        for item in [self, *self._carried]:
            item.setSelected(True)

    def mouseReleaseEvent(self, event) -> None:
        QGraphicsItem.mouseReleaseEvent(self, event)
        self.setFlag(QGraphicsItem.GraphicsItemFlag.ItemIsMovable, True)
        carried, self._carried = self._carried, []
        for item in carried:
            item.setSelected(False)
        self.setSelected(True)
        viewer = self.viewer()
        if viewer is not None and carried:
            viewer.node_selection_changed.emit([self.id], [item.id for item in carried])

    # --- painting -------------------------------------------------------------------------------

    def paint(self, painter: QPainter, option, widget) -> None:
        comment = self.comment
        if comment is None or self.scene() is None:
            return
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing, True)
        rect = self.boundingRect().adjusted(1, 1, -1, -1)
        colour = QColor(*comment.color)
        radius = 6.0
        if comment.kind == "backdrop":
            body = QColor(colour)
            body.setAlpha(70)
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(body)
            painter.drawRoundedRect(rect, radius, radius)
            bar = QRectF(rect.left(), rect.top(), rect.width(), min(TITLE_BAR, rect.height()))
            painter.setBrush(colour)
            painter.drawRoundedRect(bar, radius, radius)
            painter.drawRect(QRectF(bar.left(), bar.bottom() - radius, bar.width(), radius))
            painter.setFont(_TITLE_FONT)
            painter.setPen(ink_for(comment.color))
            inner = bar.adjusted(10, 0, -10, 0)
            title = painter.fontMetrics().elidedText(comment.title, Qt.TextElideMode.ElideRight, int(inner.width()))
            painter.drawText(inner, Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, title)
            text_area = QRectF(rect.left() + 10, bar.bottom() + 6, rect.width() - 20, rect.height() - bar.height() - 12)
            text_ink = QColor(225, 225, 225)
        else:
            card = QColor(colour)
            card.setAlpha(235)
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(card)
            painter.drawRoundedRect(rect, radius, radius)
            text_ink = ink_for(comment.color)
            top = rect.top() + 8
            if comment.title:
                painter.setFont(_TITLE_FONT)
                painter.setPen(text_ink)
                height = painter.fontMetrics().height() + 2
                title = painter.fontMetrics().elidedText(comment.title, Qt.TextElideMode.ElideRight,
                                                         int(rect.width() - 20))
                painter.drawText(QRectF(rect.left() + 10, top, rect.width() - 20, height),
                                 Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, title)
                top += height + 2
            text_area = QRectF(rect.left() + 10, top, rect.width() - 20, rect.bottom() - top - 8)
        if comment.text and text_area.height() > 0:
            painter.setFont(_TEXT_FONT)
            painter.setPen(text_ink)
            painter.setClipRect(text_area)
            painter.drawText(text_area, Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop
                             | Qt.TextFlag.TextWordWrap, comment.text)
            painter.setClipping(False)
        border = QColor(*NodeEnum.SELECTED_BORDER_COLOR.value) if self.selected else QColor(*self.border_color)
        painter.setBrush(Qt.BrushStyle.NoBrush)
        painter.setPen(QPen(border, 2.0 if self.selected else 1.0))
        painter.drawRoundedRect(rect, radius, radius)
        painter.restore()


class CommentCanvasNode(BackdropNode):
    """A comment on the canvas (NodeGraphQt's backdrop, painted by ``CommentItem``)."""

    __identifier__ = IDENTIFIER
    NODE_NAME = "Comment"

    def __init__(self) -> None:
        super().__init__(CommentItem)
        self.asset_id = ""


class CommentLayer(QObject):
    """Draws a document's comments on a drawing and turns their gestures into commands."""

    edit_requested = Signal(str)  # comment id: a comment was double-clicked

    def __init__(self, drawing: Drawing, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.drawing = drawing
        self.document: Document = drawing.document
        self.graph = drawing.graph
        self.viewer = drawing.viewer
        self.views: dict[str, CommentCanvasNode] = {}
        d = self.document
        d.comment_added.connect(self._draw)
        d.comment_removed.connect(self._undraw)
        d.comment_changed.connect(self._redraw)
        drawing.cleared.connect(self._draw_all)  # a rebuild removed every canvas node: draw them again
        # A resize is a command on the document, not NodeGraph's own (its undo stack stays unused).
        v = self.viewer
        v.node_backdrop_updated.disconnect(self.graph._on_node_backdrop_updated)
        v.node_backdrop_updated.connect(self._on_resized)
        v.node_double_clicked.connect(self._on_double_clicked)

    # --- following the document -----------------------------------------------------------------

    def _draw_all(self) -> None:
        self.views.clear()  # the graph has removed them
        for comment in self.document.asset.comments:
            self._draw(comment.id)

    def _draw(self, comment_id: str) -> None:
        comment = self.document.comment(comment_id)
        node = CommentCanvasNode()
        node.asset_id = node.view.asset_id = comment_key(comment_id)
        node.NODE_NAME = comment.title or comment.kind
        node.model.color = (*comment.color, 255)
        node.model.width, node.model.height = comment.size
        self.graph.add_node(node, pos=list(comment.position), selected=False, push_undo=False)
        node.view.show_comment(comment)
        self.views[comment_id] = node

    def _undraw(self, comment_id: str) -> None:
        node = self.views.pop(comment_id, None)
        if node is not None:
            self.graph.remove_node(node, push_undo=False)

    def _redraw(self, comment_id: str, _field: str) -> None:
        node = self.views.get(comment_id)
        if node is not None:
            node.view.show_comment(self.document.comment(comment_id))
            node.model.pos = list(node.view.xy_pos)
            node.model.width, node.model.height = node.view.width, node.view.height

    # --- gestures -------------------------------------------------------------------------------

    def comment_id_of(self, view_id: str) -> str:
        node = self.graph.get_node_by_id(view_id)
        key = key_of(node)
        return key[len(COMMENT_KEY_PREFIX):] if isinstance(node, CommentCanvasNode) else ""

    def _on_resized(self, view_id: str, _what: str, value: dict) -> None:
        comment_id = self.comment_id_of(view_id)
        if not comment_id or not self.document.has_comment(comment_id):
            return
        x, y = value["pos"]
        changes = {"position": (float(x), float(y)),
                   "size": (max(MIN_SIZE[0], float(value["width"])), max(MIN_SIZE[1], float(value["height"])))}
        try:
            command = set_comment(self.document, comment_id, changes, "Resize " + _label(self.document.comment(comment_id)))
        except FieldRejected:
            command = None
        if command is not None:
            self.document.push(command)
        else:  # nothing changed, or refused: show what the document has
            self._redraw(comment_id, "size")

    def _on_double_clicked(self, view_id: str) -> None:
        comment_id = self.comment_id_of(view_id)
        if comment_id:
            self.edit_requested.emit(comment_id)

    # --- lookups --------------------------------------------------------------------------------

    def view(self, comment_id: str) -> CommentItem:
        return self.views[comment_id].view

    def selected_ids(self) -> list[str]:
        """Ids of the selected comments, in document order."""
        chosen = {key_of(n) for n in self.graph.selected_nodes() if isinstance(n, CommentCanvasNode)}
        return [c.id for c in self.document.asset.comments if comment_key(c.id) in chosen]

    def select(self, comment_ids: Iterable[str], add: bool = False) -> None:
        if not add:
            self.graph.clear_selection()
        for comment_id in comment_ids:
            if comment_id in self.views:
                self.views[comment_id].view.setSelected(True)

    def members(self, comment_id: str) -> list[str]:
        """The nodes a backdrop groups: those wholly inside its rectangle (by the document's positions
        and the drawn sizes), in document order; none for a note."""
        comment = self.document.comment(comment_id)
        if comment.kind != "backdrop":
            return []
        area = QRectF(comment.position[0], comment.position[1], *comment.size)
        inside = []
        for node in self.document.asset.nodes:
            drawn = self.drawing.nodes.get(node.id)
            w, h = (drawn.view.width, drawn.view.height) if drawn is not None else NEW_NODE_SIZE
            if area.contains(QRectF(node.position[0], node.position[1], w, h)):
                inside.append(node.id)
        return inside

    def group_rect(self, node_ids: list[str]) -> QRectF:
        """A backdrop's rectangle around the drawn nodes ``node_ids``, with room for its title."""
        rect = QRectF()
        for node_id in node_ids:
            box = self.drawing.canvas_node(node_id).view.sceneBoundingRect()
            rect = box if rect.isNull() else rect.united(box)
        # above the nodes: the title bar and a line or two of text
        return rect.adjusted(-GROUP_PADDING, -GROUP_PADDING - TITLE_BAR - 24.0, GROUP_PADDING, GROUP_PADDING)


def _label(comment: Comment) -> str:
    return f'{comment.kind} "{comment.title}"' if comment.title else comment.kind


# --- pasting (the clipboard's text is runtime.asset.clipboard's) ----------------------------------


def add_comments(document: Document, comments: list[Comment], offset: tuple[float, float],
                 parent: MacroCommand) -> list[str]:
    """Copies of ``comments`` moved by ``offset`` and given free ids, added as parts of ``parent``;
    returns their ids."""
    taken: set[str] = set()
    ids = []
    for comment in comments:
        new_id = document.unique_comment_id(comment.id, taken)
        taken.add(new_id)
        x, y = comment.position
        copy = comment.model_copy(update={"id": new_id, "position": (x + offset[0], y + offset[1])})
        AddCommentCommand(document, copy, None, parent)
        ids.append(new_id)
    return ids


# --- the window's actions ---------------------------------------------------------------------------


class CommentDialog(QDialog):
    """Edit a comment's title, text and colour; OK makes them one undo step."""

    def __init__(self, comment: Comment, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("commentDialog")
        self.setWindowTitle("Edit Backdrop" if comment.kind == "backdrop" else "Edit Note")
        self.comment_id = comment.id
        self.color = tuple(comment.color)
        form = QFormLayout(self)
        self.title_edit = QLineEdit(comment.title, self)
        self.title_edit.setPlaceholderText("A title shown at the top")
        form.addRow("&Title", self.title_edit)
        self.text_edit = QPlainTextEdit(comment.text, self)
        self.text_edit.setPlaceholderText("Free text: never sent to a model")
        self.text_edit.setMinimumSize(360, 140)
        form.addRow("T&ext", self.text_edit)
        self.color_button = QPushButton("Choose\u2026", self)
        self.color_button.setToolTip("The comment's colour")
        self.color_button.clicked.connect(lambda _c=False: self.choose_color())
        form.addRow("&Colour", self.color_button)
        self._show_color()
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel, self)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)
        if comment.kind == "note":
            self.text_edit.setFocus()
            if comment.text == NEW_NOTE_TEXT:  # a new note's text is there to be replaced, not added to
                self.text_edit.selectAll()
        elif comment.title == NEW_BACKDROP_TITLE:
            self.title_edit.setFocus()
            self.title_edit.selectAll()

    def _show_color(self) -> None:
        r, g, b = self.color
        ink = ink_for(self.color).name()
        self.color_button.setStyleSheet(f"QPushButton {{ background: rgb({r},{g},{b}); color: {ink}; }}")

    def choose_color(self) -> bool:
        chosen = QColorDialog.getColor(QColor(*self.color), self, "Comment colour")
        if not chosen.isValid():
            return False
        self.color = (chosen.red(), chosen.green(), chosen.blue())
        self._show_color()
        return True

    def values(self) -> dict[str, Any]:
        return {"title": self.title_edit.text(), "text": self.text_edit.toPlainText(), "color": self.color}


class CommentActions(QObject):
    """Edit > Group in Backdrop (Ctrl+G), Add Note and Edit Comment, on a window's canvas. ``window`` is
    the editor's MainWindow, typed as a QMainWindow: the canvas never imports the window (nor its docks)."""

    def __init__(self, window: QMainWindow) -> None:
        super().__init__(window)
        self.window = window
        self.layer: CommentLayer = window.canvas.comments
        w = window
        self.group_action = w._action("&Group in Backdrop", self.group_selection, "Ctrl+G", canvas=True,
                                      tip="Put a backdrop with a title and a colour around the selected nodes; "
                                          "dragging it moves them (Ctrl+G)")
        self.note_action = w._action("Add &Note", self.add_note, "Ctrl+Alt+N", canvas=True,
                                     tip="Put a free-text note at the view's centre; never sent to a model (Ctrl+Alt+N)")
        self.edit_action = w._action("&Edit Comment\u2026", self.edit_selected, "Ctrl+E", canvas=True,
                                     tip="Edit the selected backdrop's or note's title, text and colour "
                                         "(or double-click it) (Ctrl+E)")
        self.layer.edit_requested.connect(self.edit_comment)
        self.dialog: CommentDialog | None = None

    @property
    def actions(self) -> list[QAction]:
        return [self.group_action, self.note_action, self.edit_action]

    def add_to_menus(self, edit_menu: QMenu | None, canvas_menu: QMenu) -> None:
        for menu in (edit_menu, canvas_menu):
            if menu is not None:
                menu.addSeparator()
                menu.addActions(self.actions)

    def _status(self, message: str) -> None:
        self.window.statusBar().showMessage(message, 5000)

    def group_selection(self) -> str:
        """A backdrop around the selected nodes (or, with none selected, at the view's centre); one
        undo step. Returns its id."""
        canvas, doc = self.window.canvas, self.window.document
        ids = canvas.selected_ids()
        if ids:
            rect = self.layer.group_rect(ids)
            position, size = (rect.left(), rect.top()), (rect.width(), rect.height())
        else:
            cx, cy = canvas.view_center()
            position, size = (cx - 200.0, cy - 120.0), (400.0, 240.0)
        comment = Comment(id=doc.unique_comment_id("group"), kind="backdrop", title=NEW_BACKDROP_TITLE,
                          color=BACKDROP_COLOR, position=position, size=size)
        command = MacroCommand(f"Group {len(ids)} node{'s' if len(ids) != 1 else ''} in a backdrop")
        AddCommentCommand(doc, comment, None, command)
        doc.push(command)
        self.layer.select([comment.id])
        self._status("Double-click the backdrop (or Ctrl+E) to give it a title, text and colour")
        return comment.id

    def add_note(self) -> str:
        """A note at the view's centre, or the free place nearest it (a note under a node cannot be
        read); one undo step. Returns its id."""
        canvas, doc = self.window.canvas, self.window.document
        canvas.select([])  # else the free place is looked for beside the selection
        x, y = canvas.free_spot(NOTE_SIZE)
        comment = Comment(id=doc.unique_comment_id("note"), kind="note", text=NEW_NOTE_TEXT,
                          color=NOTE_COLOR, position=(x, y), size=NOTE_SIZE)
        command = MacroCommand("Add note")
        AddCommentCommand(doc, comment, None, command)
        doc.push(command)
        self.layer.select([comment.id])
        self._status("Double-click the note (or Ctrl+E) to write in it")
        return comment.id

    def edit_selected(self) -> CommentDialog | None:
        chosen = self.layer.selected_ids()
        if not chosen:
            self._status("Select a backdrop or a note to edit")
            return None
        return self.edit_comment(chosen[0])

    def edit_comment(self, comment_id: str) -> CommentDialog:
        """The edit dialog for a comment (opened, not run: the window stays live); OK pushes one step."""
        if self.dialog is not None:
            self.dialog.close()
        dialog = self.dialog = CommentDialog(self.window.document.comment(comment_id), self.window)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.accepted.connect(lambda: self._apply(dialog))
        dialog.destroyed.connect(lambda *_: self._forget(dialog))
        dialog.open()
        return dialog

    def _forget(self, dialog: CommentDialog) -> None:
        if self.dialog is dialog:
            self.dialog = None

    def _apply(self, dialog: CommentDialog) -> None:
        doc = self.window.document
        if not doc.has_comment(dialog.comment_id):
            return  # undone while the dialog was open
        try:
            command = set_comment(doc, dialog.comment_id, dialog.values())
        except FieldRejected as exc:
            self._status(exc.message)
            return
        if command is not None:
            doc.push(command)

    # --- what the window's Copy, Paste and Delete do with comments --------------------------------

    def selection(self) -> tuple[list[str], list[Comment]]:
        """What Copy and Cut take: the selected nodes with the nodes inside each selected backdrop,
        in document order, and the selected comments."""
        doc = self.window.document
        comment_ids = self.layer.selected_ids()
        node_ids = set(self.window.canvas.selected_ids())
        for comment_id in comment_ids:
            node_ids.update(self.layer.members(comment_id))
        return [n.id for n in doc.asset.nodes if n.id in node_ids], [doc.comment(i) for i in comment_ids]


def install_comments(window: QMainWindow, edit_menu: QMenu | None, canvas_menu: QMenu) -> CommentActions:
    """The window's comment actions, in its Edit menu and the canvas's right-click menu."""
    actions = CommentActions(window)
    actions.add_to_menus(edit_menu, canvas_menu)
    return actions
