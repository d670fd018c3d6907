"""The start page: what the editor shows in the canvas's place when it starts with no asset (and
File > Start Page, Alt+Home): new agents from templates, the recent files and the examples.

It stands in the window's central area, in front of the canvas (a ``QStackedWidget`` holds both),
so the docks stay where the designer put them and the page goes the moment an asset opens. Every
list opens its row on a click or on Enter; Esc goes to the canvas as it is.

Nothing here is read until the page is first shown: the examples' names and descriptions come from
their files (plain JSON, not validated), once per run; the recent files are read each time it shows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QModelIndex, QObject, QRect, QSize, Qt, Signal
from PySide6.QtGui import QFocusEvent, QFont, QFontMetrics, QKeyEvent, QPainter, QPalette
from PySide6.QtWidgets import (
    QBoxLayout,
    QFrame,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QScrollArea,
    QStackedWidget,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QVBoxLayout,
    QWidget,
)

from editor import settings as app_settings
from runtime.asset.model import Asset, palette_node
from runtime.models.folder import default_model_name
from runtime.resources import examples_dir

if TYPE_CHECKING:
    from editor.window.main_window import MainWindow

REPLY_TYPE = "GenerateAndSpeak"  # the reply a new agent starts with: it talks, and speaks where voice is installed
REPLY_ID = "reply"
# A prompt that works as it is (so a new agent can talk at once, and the Problems dock is empty), for the
# designer to replace with their character.
REPLY_PROMPT = ("You are a character in a game, talking with the player. Answer in one to three short "
                "sentences, in character.")
EMPTY_TEMPLATE = "empty"
DESCRIPTION_LIMIT = 140  # characters of an example's description on its row
TWO_COLUMNS_FROM = 700  # the page's width from which its lists stand in two columns, not one


def empty_agent() -> Asset:
    """File > New and the start page's "Empty agent (one reply)": one Generate and Speak node, ``reply``,
    with the palette's starting values, where each turn starts; the default model as a new window has it
    (the models folder's sample model, or its only model), and a starting system prompt to rewrite."""
    node = palette_node(REPLY_TYPE, REPLY_ID, title="Reply", system_prompt=REPLY_PROMPT, position=(0.0, 0.0))
    return Asset(name="New agent", default_model=default_model_name(), start_node=REPLY_ID, nodes=[node])


@dataclass(frozen=True)
class StartEntry:
    """One row of the page: what it opens (``kind``: "template", "example" or "recent"; ``path``: the
    file, or ``EMPTY_TEMPLATE``), its title and one line under it; unavailable rows are greyed."""

    kind: str
    path: str
    title: str
    detail: str
    available: bool = True


def _one_line(text: str, limit: int = DESCRIPTION_LIMIT) -> str:
    """The first sentence of ``text`` on one line, cut to ``limit`` characters."""
    flat = " ".join(str(text).split())
    for stop in (". ", "! ", "? "):
        if stop in flat:
            flat = flat[: flat.index(stop) + 1]
            break
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "\u2026"


def describe_example(raw: object) -> str:
    """An example's one line: its ``metadata.description``, else the first sentence of the start node's
    system prompt (of the first node with one), else how many nodes it has."""
    if not isinstance(raw, dict):
        return "not an asset (the file holds no JSON object)"
    if raw.get("format") == "parley-scene":
        npcs = [n.get("name") for n in raw.get("npcs") or [] if isinstance(n, dict) and isinstance(n.get("name"), str)]
        return _one_line(f"A scene: {', '.join(npcs)} in one conversation with the player")
    metadata = raw.get("metadata")
    if isinstance(metadata, dict) and isinstance(metadata.get("description"), str) and metadata["description"].strip():
        return _one_line(metadata["description"])
    nodes = [n for n in raw.get("nodes") or [] if isinstance(n, dict)]
    start = [n for n in nodes if n.get("id") == raw.get("start_node")]
    for node in start + nodes:
        prompt = node.get("system_prompt")
        if isinstance(prompt, str) and prompt.strip():
            return _one_line(prompt)
    return f"{len(nodes)} node{'' if len(nodes) == 1 else 's'}"


_examples: list[StartEntry] | None = None


def example_entries() -> list[StartEntry]:
    """The shipped examples (``resources/examples/*.json``, then the scenes in ``scenes/*.scene.json``, as
    File > Examples lists them), read once a run."""
    global _examples
    if _examples is None:
        found: list[StartEntry] = []
        for path in [*sorted(examples_dir().glob("*.json")), *sorted((examples_dir() / "scenes").glob("*.scene.json"))]:
            try:
                raw = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                found.append(StartEntry("example", str(path), path.stem, f"{path.name} could not be read: {exc}", False))
                continue
            name = raw.get("name") if isinstance(raw, dict) else None
            title = name if isinstance(name, str) and name.strip() else path.stem.replace("_", " ").capitalize()
            found.append(StartEntry("example", str(path), title, describe_example(raw)))
        _examples = found
    return list(_examples)


def template_entries() -> list[StartEntry]:
    """"New from template": the empty agent first, then each example, each to a new unsaved document."""
    out = [StartEntry("template", EMPTY_TEMPLATE, "Empty agent (one reply)",
                      "One Generate and Speak node, reply, with a starting prompt to rewrite: ready to talk")]
    out += [StartEntry("template", e.path, f"From {e.title}", f"A new, unsaved copy of {Path(e.path).name}")
            for e in example_entries() if e.available and not e.path.endswith(".scene.json")]
    return out


def recent_entries() -> list[StartEntry]:
    """The recent files, most recent first (``editor.settings.recent_files``); a file no longer there is
    kept, greyed, with a note, until the designer forgets it."""
    out = []
    for path in app_settings.recent_files():
        there = Path(path).is_file()
        folder = str(Path(path).parent)
        out.append(StartEntry("recent", path, Path(path).name,
                              folder if there else f"Not found (moved or deleted): {path}", there))
    return out


# --- the widget --------------------------------------------------------------------------------

ENTRY_ROLE = Qt.ItemDataRole.UserRole + 1


def detail_lines(entry: StartEntry) -> int:
    """How many lines a row gives its detail: an example's description and the empty agent's two, a
    template from an example none (it is the example's row again; its tooltip says what it does), a
    recent file's folder one."""
    if entry.kind == "example" or entry.path == EMPTY_TEMPLATE:
        return 2
    return 0 if entry.kind == "template" and entry.path != EMPTY_TEMPLATE else 1


def wrapped(metrics: QFontMetrics, text: str, width: int, lines: int, elide: Qt.TextElideMode) -> list[str]:
    """``text`` broken between words into at most ``lines`` lines of ``width`` pixels, the last elided."""
    out: list[str] = []
    words = text.split() if lines > 0 else []
    while words and len(out) < lines - 1:
        line = words.pop(0)
        while words and metrics.horizontalAdvance(f"{line} {words[0]}") <= width:
            line = f"{line} {words.pop(0)}"
        if metrics.horizontalAdvance(line) > width:  # one word wider than the row: the rest goes on
            words.insert(0, line)
            break
        out.append(line)
    if words:
        out.append(metrics.elidedText(" ".join(words), elide, width))
    return out


class StartRowDelegate(QStyledItemDelegate):
    """A row in two or three lines: the title in bold, the detail under it in a quieter colour, elided."""

    PAD = 7

    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex) -> QSize:
        line = option.fontMetrics.height()
        entry: StartEntry = index.data(ENTRY_ROLE)
        return QSize(200, (1 + detail_lines(entry)) * line + 2 * self.PAD + 2)

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: QModelIndex) -> None:
        entry: StartEntry = index.data(ENTRY_ROLE)
        opt = QStyleOptionViewItem(option)
        self.initStyleOption(opt, index)
        opt.text = ""
        style = opt.widget.style() if opt.widget else None
        if style is not None:
            style.drawPrimitive(QStyle.PrimitiveElement.PE_PanelItemViewItem, opt, painter, opt.widget)
        painter.save()
        rect = option.rect.adjusted(self.PAD + 4, self.PAD, -self.PAD, -self.PAD)
        selected = bool(option.state & QStyle.StateFlag.State_Selected)
        palette = option.palette
        enabled = entry.available
        group = QPalette.ColorGroup.Normal if enabled else QPalette.ColorGroup.Disabled
        strong = palette.color(group, QPalette.ColorRole.HighlightedText if selected else QPalette.ColorRole.Text)
        quiet = strong if selected else palette.color(group, QPalette.ColorRole.PlaceholderText)
        if not enabled:
            quiet = palette.color(QPalette.ColorGroup.Disabled, QPalette.ColorRole.Text)
        line = option.fontMetrics.height()
        if not detail_lines(entry):  # the title alone, in the middle of its row
            rect = QRect(rect.left(), rect.center().y() - line // 2, rect.width(), line)
        bold = QFont(option.font)
        bold.setBold(True)
        painter.setFont(bold)
        painter.setPen(strong)
        title = painter.fontMetrics().elidedText(entry.title, Qt.TextElideMode.ElideRight, rect.width())
        painter.drawText(QRect(rect.left(), rect.top(), rect.width(), line), Qt.AlignmentFlag.AlignVCenter, title)
        painter.setFont(option.font)
        painter.setPen(quiet)
        elide = Qt.TextElideMode.ElideMiddle if entry.kind == "recent" else Qt.TextElideMode.ElideRight
        for n, text in enumerate(wrapped(option.fontMetrics, entry.detail, rect.width(), detail_lines(entry), elide)):
            painter.drawText(QRect(rect.left(), rect.top() + (n + 1) * line + 2, rect.width(), line),
                             Qt.AlignmentFlag.AlignVCenter, text)
        painter.restore()


class StartList(QListWidget):
    """One section's rows: a click or Enter opens the row (``chosen``); as tall as its rows, so the
    page scrolls as one."""

    chosen = Signal(object)  # the StartEntry

    def __init__(self, name: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName(name)
        self.setItemDelegate(StartRowDelegate(self))
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setMouseTracking(True)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.itemClicked.connect(self._clicked)

    def set_entries(self, entries: list[StartEntry]) -> None:
        self.clear()
        for entry in entries:
            item = QListWidgetItem(entry.title)
            item.setData(ENTRY_ROLE, entry)
            item.setToolTip(entry.detail if entry.kind == "template" else entry.path)
            if not entry.available:
                item.setFlags(Qt.ItemFlag.NoItemFlags)
            self.addItem(item)
        first = next((i for i in range(self.count()) if self.item(i).flags() & Qt.ItemFlag.ItemIsEnabled), None)
        if first is not None:
            self.setCurrentRow(first)
        if not self.hasFocus():
            self.clearSelection()  # only the list with the keyboard's focus shows a chosen row
        rows = sum(self.sizeHintForRow(i) for i in range(self.count()))
        self.setFixedHeight(rows + 2 * self.frameWidth() + 2)
        self.setVisible(bool(entries))

    def entries(self) -> list[StartEntry]:
        return [self.item(i).data(ENTRY_ROLE) for i in range(self.count())]

    def focusInEvent(self, event: QFocusEvent) -> None:
        super().focusInEvent(event)
        item = self.currentItem()
        if item is not None and item.flags() & Qt.ItemFlag.ItemIsEnabled:
            item.setSelected(True)

    def focusOutEvent(self, event: QFocusEvent) -> None:
        super().focusOutEvent(event)
        self.clearSelection()

    def _clicked(self, item: QListWidgetItem) -> None:
        entry = item.data(ENTRY_ROLE)
        if entry.available:
            self.chosen.emit(entry)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter, Qt.Key.Key_Space):
            item = self.currentItem()
            if item is not None:
                self._clicked(item)
                return
        super().keyPressEvent(event)


class StartPage(QScrollArea):
    """The page itself: a heading with New / Open, then New from template, Recent files and Examples.

    ``chosen`` carries the StartEntry clicked; ``dismissed`` asks for the canvas (Esc, the button)."""

    chosen = Signal(object)
    dismissed = Signal()
    new_requested = Signal()
    open_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("startPage")
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        body = QWidget(self)
        body.setObjectName("startPageBody")
        font = body.font()
        font.setPointSizeF(font.pointSizeF() + 1)  # a page to read, a little larger than the docks' text
        body.setFont(font)
        self.setWidget(body)
        outer = QHBoxLayout(body)
        outer.setContentsMargins(16, 16, 16, 16)
        column = QWidget(body)
        column.setMaximumWidth(1040)
        outer.addStretch(1)
        outer.addWidget(column, 20)
        outer.addStretch(1)
        page = QVBoxLayout(column)
        page.setSpacing(10)

        self.top = top = QBoxLayout(QBoxLayout.Direction.LeftToRight)  # the buttons go under the heading when narrow
        heading = QLabel("<span style='font-size:24px; font-weight:600'>Parley Studio</span><br/>"
                         "<span style='color:#a0a0a0'>Start from a template, or open a file.</span>", column)
        heading.setTextFormat(Qt.TextFormat.RichText)
        top.addWidget(heading, 1)
        self.new_button = self._button("New Agent", "One reply node, ready to write (Ctrl+N)", self.new_requested)
        self.open_button = self._button("Open\u2026", "Open an asset file (Ctrl+O)", self.open_requested)
        self.close_button = self._button("Go to Canvas", "Close the start page and show the canvas (Esc)",
                                         self.dismissed)
        buttons = QHBoxLayout()
        for button in (self.new_button, self.open_button, self.close_button):
            buttons.addWidget(button, 0, Qt.AlignmentFlag.AlignTop)
        buttons.addStretch(0)
        top.addLayout(buttons, 0)
        page.addLayout(top)

        self.columns = QBoxLayout(QBoxLayout.Direction.LeftToRight)
        self.columns.setSpacing(20)
        left, right = QVBoxLayout(), QVBoxLayout()
        self.templates = self._section(left, "templates", "New from template")
        self.recent = self._section(right, "recent", "Recent files")
        # No word wrap on the page: its height is then its rows', and the scroll area sizes it right
        self.no_recent = QLabel("No recent files yet.", column)
        self.no_recent.setToolTip("The files you open and save are listed here, the most recent first")
        self.no_recent.setObjectName("noRecentFiles")
        self.no_recent.setStyleSheet("color: #9a9a9a;")
        right.addWidget(self.no_recent)
        self.forget_button = QPushButton("Forget Missing Files", column)
        self.forget_button.setToolTip("Take the files that are no longer there off the recent list")
        self.forget_button.clicked.connect(lambda _c=False: self.forget_missing())
        right.addWidget(self.forget_button, 0, Qt.AlignmentFlag.AlignLeft)
        self.examples = self._section(right, "examples", "Examples")
        left.addStretch(1)
        right.addStretch(1)
        self.columns.addLayout(left, 1)
        self.columns.addLayout(right, 1)
        page.addLayout(self.columns)
        page.addStretch(1)
        for first, then in zip(order := [self.templates, self.recent, self.forget_button, self.examples,
                                         self.new_button, self.open_button, self.close_button], order[1:]):
            QWidget.setTabOrder(first, then)
        for section in (self.templates, self.recent, self.examples):
            section.chosen.connect(self.chosen)
        self.refresh()

    def _button(self, text: str, tip: str, signal) -> QPushButton:
        button = QPushButton(text, self.widget())
        button.setToolTip(tip)
        button.clicked.connect(lambda _c=False: signal.emit())
        return button

    def _section(self, layout: QVBoxLayout, name: str, title: str) -> StartList:
        label = QLabel(f"<span style='font-size:15px; font-weight:600'>{title}</span>", self.widget())
        label.setObjectName(f"{name}Heading")
        listing = StartList(name, self.widget())
        label.setBuddy(listing)
        layout.addWidget(label)
        layout.addWidget(listing)
        layout.addSpacing(8)
        return listing

    def refresh(self) -> None:
        """Read the recent files again (the examples are read once a run)."""
        recent = recent_entries()
        self.recent.set_entries(recent)
        self.no_recent.setVisible(not recent)
        self.forget_button.setVisible(any(not e.available for e in recent))
        self.templates.set_entries(template_entries())
        self.examples.set_entries(example_entries())

    def forget_missing(self) -> None:
        app_settings.forget_recent_files([e.path for e in self.recent.entries() if not e.available])
        self.refresh()

    def focus_first(self) -> None:
        self.templates.setFocus(Qt.FocusReason.OtherFocusReason)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        wide = self.viewport().width() >= TWO_COLUMNS_FROM
        direction = QBoxLayout.Direction.LeftToRight if wide else QBoxLayout.Direction.TopToBottom
        if self.columns.direction() != direction:
            self.columns.setDirection(direction)
            self.top.setDirection(direction)
            # The body's new height at once (what widgetResizable does on a later event): no rows overlap meanwhile
            body = self.widget()
            body.layout().activate()
            least = body.minimumSizeHint()
            body.resize(max(self.viewport().width(), least.width()), max(self.viewport().height(), least.height()))

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() == Qt.Key.Key_Escape:
            self.dismissed.emit()
            return
        super().keyPressEvent(event)


class StartPageHost(QObject):
    """The window's central area: the canvas, or the start page in front of it (made when first shown).

    The page goes when an asset is set (``Document.reset``: opened, new, recovered) and on Esc."""

    shown_changed = Signal(bool)

    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self.window = window
        self.stack = QStackedWidget(window)
        self.stack.setObjectName("centralArea")
        self.stack.addWidget(window.canvas.widget)
        window.setCentralWidget(self.stack)
        self.page: StartPage | None = None
        window.document.reset.connect(self.hide)

    @property
    def shown(self) -> bool:
        return self.page is not None and self.stack.currentWidget() is self.page

    def show(self) -> StartPage:
        if self.page is None:
            self.page = StartPage(self.stack)
            self.page.chosen.connect(self.open_entry)
            self.page.dismissed.connect(self.hide)
            self.page.new_requested.connect(self.window.new_asset)
            self.page.open_requested.connect(self.window.open_dialog)
            self.stack.addWidget(self.page)
        else:
            self.page.refresh()
        was = self.shown
        self.stack.setCurrentWidget(self.page)
        self.page.focus_first()
        if not was:
            self.shown_changed.emit(True)
        return self.page

    def hide(self) -> None:
        if self.shown:
            self.stack.setCurrentWidget(self.window.canvas.widget)
            self.window.canvas.viewer.setFocus(Qt.FocusReason.OtherFocusReason)
            self.shown_changed.emit(False)

    def open_entry(self, entry: StartEntry) -> bool:
        """Open what a row names: a recent file as itself, an example or template as a new unsaved copy."""
        window = self.window
        if entry.kind == "template" and entry.path == EMPTY_TEMPLATE:
            return window.new_asset()
        if entry.kind == "recent":
            return window.open_path(entry.path)
        return window.open_path(entry.path, as_example=True)
