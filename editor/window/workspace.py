"""Workspace presets: which docks stand around the canvas for a task, and where.

Three presets, Author, Talk and Test, switch with one click (the buttons at the menu bar's right)
or one key (Ctrl+1/2/3). Each remembers the arrangement the designer left it in (QMainWindow's
saveState, one per preset, in the settings) and comes back that way. No preset tabs docks together:
what a task needs is in view side by side.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QByteArray, QEvent, QObject, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QActionGroup, QKeySequence
from PySide6.QtWidgets import QDockWidget, QHBoxLayout, QMainWindow, QScrollArea, QToolButton, QWidget

from editor import settings as app_settings

Area = Qt.DockWidgetArea
LEFT, RIGHT, BOTTOM = Area.LeftDockWidgetArea, Area.RightDockWidgetArea, Area.BottomDockWidgetArea

# Where a dock goes when a preset does not show it: opened from the View menu, it appears there,
# beside the others and never as a tab behind one.
HOME: dict[str, Qt.DockWidgetArea] = {
    "PaletteDock": LEFT, "UndoHistoryDock": LEFT,
    "PropertiesDock": RIGHT, "VramEstimatorDock": RIGHT, "ProblemsDock": RIGHT, "ConversationDock": RIGHT,
    "TurnInspectorDock": BOTTOM, "TestsDock": BOTTOM, "RawJsonDock": BOTTOM,
}
# No column wider than this at first: the canvas leads (every dock's minimum width is at most 360 px).
COLUMN_MAX = 380
# A dock opened in a column takes at most half of it, and leaves each dock beside it this many
# pixels (or the height it needs, when less): Properties beside the VRAM Estimator was a 68 px slit
# at 1366x768.
OPENED_SHARE, KEPT_HEIGHT = 0.5, 240


@dataclass(frozen=True)
class DockPlace:
    """One dock of a preset: its area, and its share of the window across that area
    (the width of a side column, the height of the bottom row)."""

    dock: str
    area: Qt.DockWidgetArea
    share: float
    along: float = 0.0  # docks side by side in the bottom row: each one's share of the row's width
    # The dock's sections on show in this preset (all when empty), for a dock that has them
    # (``show_sections``): beside a conversation Properties keeps to the prompt and sampling.
    sections: tuple[str, ...] = ()


@dataclass(frozen=True)
class Preset:
    name: str
    key: str
    tip: str
    places: tuple[DockPlace, ...]  # in order: docks of one area stack (side columns) or stand side by side (bottom)
    # The dock whose typing box takes the keyboard focus on a switch (its focus proxy): in Talk, the
    # player's line, not the canvas
    focus: str = ""


# What Properties keeps to in Talk and Test: a prompt fix and a retry without a switch (issue 38, major 5)
EDIT_WHILE_RUNNING = ("Prompt", "Sampling")


PRESETS: tuple[Preset, ...] = (
    Preset("Author", "Ctrl+1", "Build the graph: canvas, Properties and Problems (with the Palette)", (
        DockPlace("PaletteDock", LEFT, 0.12),
        DockPlace("PropertiesDock", RIGHT, 0.27),
        DockPlace("ProblemsDock", RIGHT, 0.27),
    )),
    Preset("Talk", "Ctrl+2", "Talk to the character: canvas, Conversation, Turn Inspector and the selected "
           "node's prompt and sampling", (
        DockPlace("ConversationDock", RIGHT, 0.30),
        DockPlace("TurnInspectorDock", BOTTOM, 0.31, along=0.62),
        DockPlace("PropertiesDock", BOTTOM, 0.31, along=0.38, sections=EDIT_WHILE_RUNNING),
    ), focus="ConversationDock"),
    Preset("Test", "Ctrl+3", "Run the tests: canvas, Tests, Turn Inspector and the selected node's prompt and "
           "sampling side by side", (
        DockPlace("TestsDock", BOTTOM, 0.42, along=0.3),
        DockPlace("TurnInspectorDock", BOTTOM, 0.42, along=0.44),  # the prompts and their diff need the width
        DockPlace("PropertiesDock", BOTTOM, 0.42, along=0.26, sections=EDIT_WHILE_RUNNING),
    )),
)
DEFAULT = PRESETS[0].name


def preset_named(name: str) -> Preset:
    for preset in PRESETS:
        if preset.name == name:
            return preset
    raise LookupError(f"no workspace preset named {name!r} (presets: {', '.join(p.name for p in PRESETS)})")


def _state_key(name: str) -> str:
    return f"workspace/{name}/state"


class Workspace(QObject):
    """The window's presets: ``switch`` to one, ``remember`` the current arrangement."""

    switched = Signal(str)  # the preset now in use

    def __init__(self, window: QMainWindow, docks: dict[str, QDockWidget]) -> None:
        super().__init__(window)
        self.window = window
        self.docks = docks
        self.current = ""
        self._unsized: Preset | None = None  # arranged before the window had its size: sized at the first show
        self.settled = False  # the docks have their shares of the shown window
        self._moving = False  # docks shown or hidden by a switch, not by the designer
        # The window's size as the designer (or the screen) set it, not as docks' minimum sizes pushed it
        self.chosen_size: QSize | None = None
        window.installEventFilter(self)
        for dock in docks.values():
            dock.visibilityChanged.connect(lambda visible, d=dock: self._opened(d) if visible else None)
        self.group = QActionGroup(self)
        self.group.setExclusive(True)
        self.actions: dict[str, QAction] = {}
        for preset in PRESETS:
            action = QAction(f"&{preset.name} Workspace", window)
            action.setIconText(preset.name)  # what its button in the menu bar says
            action.setCheckable(True)
            action.setShortcut(QKeySequence(preset.key))
            action.setToolTip(f"{preset.tip} ({preset.key})")
            action.setStatusTip(preset.tip)
            action.setData(preset.name)
            action.triggered.connect(lambda _c=False, n=preset.name: self.switch(n))
            self.group.addAction(action)
            window.addAction(action)
            self.actions[preset.name] = action
        self.reset_action = QAction("&Reset Workspace", window)
        self.reset_action.setStatusTip("Put the docks of this workspace back where they start")
        self.reset_action.triggered.connect(lambda _c=False: self.reset())
        window.addAction(self.reset_action)

    # --- switching ----------------------------------------------------------------------------

    def switch(self, name: str) -> None:
        """Keep the current preset's arrangement, then show ``name`` as it was left (or as it starts)."""
        preset_named(name)  # a wrong name says so before anything moves
        if self.current and self.current != name:
            self.remember()
        self.current = name
        self.actions[name].setChecked(True)
        state = app_settings.app_settings().value(_state_key(name))
        self._moving = True
        try:
            if not (isinstance(state, QByteArray) and self.window.restoreState(state)):
                self.arrange(preset_named(name))
        finally:
            self._moving = False
        self._give_back_the_size()
        self._show_sections(preset_named(name))
        self._focus(preset_named(name))
        app_settings.app_settings().setValue("workspace/current", name)
        self.switched.emit(name)

    def _show_sections(self, preset: Preset) -> None:
        """Each dock with sections shows the preset's choice of them; opened from the View menu, all."""
        sections = {place.dock: place.sections for place in preset.places}
        for name, dock in self.docks.items():
            show = getattr(dock, "show_sections", None)
            if show is not None:
                show(sections.get(name, ()))

    def _focus(self, preset: Preset) -> None:
        """The keyboard to the preset's typing box, now and once its dock is laid out and shown."""
        dock = self.docks.get(preset.focus) if preset.focus else None
        if dock is None:
            return

        def give() -> None:
            if self.current == preset.name and dock.isVisible() and self.window.isVisible():
                dock.setFocus(Qt.FocusReason.OtherFocusReason)  # its focus proxy: the line box

        give()
        QTimer.singleShot(0, self, give)

    def reset(self) -> None:
        """The current preset as it starts, in the window's size from before any dock grew it; the
        arrangement it had is forgotten."""
        store = app_settings.app_settings()
        store.remove(_state_key(self.current))
        self._moving = True
        try:
            self.arrange(preset_named(self.current))
        finally:
            self._moving = False
        if self._give_back_the_size() and self.window.isVisible():
            self._size(preset_named(self.current))  # the shares of the window's own size

    # --- the window's size ----------------------------------------------------------------------

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.window and event.type() == QEvent.Type.Resize and not self._pushed(event.size()):
            self.chosen_size = QSize(event.size())
        return False

    def _pushed(self, size: QSize) -> bool:
        """Whether the window is this size because the docks' minimum sizes grew it (Qt grows a
        window to its layout's minimum at once, to exactly that size)."""
        chosen, least = self.chosen_size, self.window.minimumSize()
        if chosen is None:
            return False
        return ((size.height() > chosen.height() and size.height() == least.height())
                or (size.width() > chosen.width() and size.width() == least.width()))

    def _give_back_the_size(self) -> bool:
        """Back to the size the designer chose, when docks grew the window past it and the docks
        on show now fit in it; True when the window was resized."""
        window, chosen = self.window, self.chosen_size
        if chosen is None or window.isMaximized() or window.isFullScreen() or window.size() == chosen:
            return False
        window.layout().activate()  # the minimum of the docks on show now, not of those before
        wanted = chosen.expandedTo(window.layout().minimumSize())
        if wanted == window.size() or not (wanted.width() < window.width() or wanted.height() < window.height()):
            return False
        window.resize(wanted.boundedTo(window.size()))
        window.layout().activate()
        return True

    def _opened(self, dock: QDockWidget) -> None:
        """A dock the designer opened beside the preset's (View menu) gets the room it asks for
        along its column or row, not the least it can live with, and leaves the docks beside it a
        usable size."""
        if self._moving or dock.isFloating() or not self.window.isVisible():
            return
        QTimer.singleShot(0, self, lambda: self._give_room(dock))

    def _give_room(self, dock: QDockWidget) -> None:
        in_preset = self.current and dock.objectName() in {p.dock for p in preset_named(self.current).places}
        if in_preset or not dock.isVisible() or dock.isFloating():
            return  # the preset's own docks have their shares already
        self.window.layout().activate()  # measure the docks as laid out now, not as they were before
        area = self.window.dockWidgetArea(dock)
        if area == BOTTOM:
            wanted, orientation = dock.sizeHint().width(), Qt.Orientation.Horizontal
        else:
            wanted, orientation = max(dock.sizeHint().height(), _height_for_width(dock)), Qt.Orientation.Vertical
        others = [d for d in self.docks.values() if d is not dock and d.isVisible() and not d.isFloating()
                  and self.window.dockWidgetArea(d) == area]
        if others and self._pushed(self.window.size()) and orientation == Qt.Orientation.Vertical:
            # its column's minimum heights grew the window (past the screen, at 1366x768): it goes
            # behind the tallest dock of the column as a tab, the one place left, and the window
            # gets its size back
            tallest = max(others, key=lambda d: d.height())
            self.window.tabifyDockWidget(tallest, dock)
            dock.raise_()
            self._give_back_the_size()
            return
        if others:
            sizes = _shares(dock, others, wanted, orientation)
            self.window.resizeDocks([dock, *others], sizes, orientation)
        elif _along(dock, orientation) < wanted:
            self.window.resizeDocks([dock], [wanted], orientation)
        self.window.layout().activate()  # at once: what the designer looks at next is laid out

    def remember(self) -> None:
        """Save the arrangement on screen as the current preset's."""
        if self.current:
            store = app_settings.app_settings()
            store.setValue(_state_key(self.current), self.window.saveState())
            store.setValue("workspace/current", self.current)
            store.sync()

    def start(self) -> None:
        """The preset used last (Author the first time), as it was left."""
        saved = app_settings.app_settings().value("workspace/current")
        names = [p.name for p in PRESETS]
        self.switch(saved if saved in names else DEFAULT)

    # --- a preset's first arrangement ---------------------------------------------------------

    def arrange(self, preset: Preset) -> None:
        """Place the preset's docks, hide the rest in their home areas, and size them from the
        window's size (now, and once more when the window has its final size)."""
        window = self.window
        for dock in self.docks.values():
            dock.setFloating(False)
            window.removeDockWidget(dock)
        shown = {place.dock for place in preset.places}
        for place in preset.places:
            window.addDockWidget(place.area, self.docks[place.dock], _flow(place.area))
        for name, dock in self.docks.items():
            if name not in shown:
                window.addDockWidget(HOME.get(name, RIGHT), dock, _flow(HOME.get(name, RIGHT)))
        for name, dock in self.docks.items():
            dock.setVisible(name in shown)
        if self.window.isVisible():
            self._size(preset)
        else:
            self._unsized = preset

    def window_shown(self) -> None:
        """The window is shown at its size: give a preset arranged before that its shares (after
        this turn of the event loop, when the window is laid out)."""
        QTimer.singleShot(0, self, self._settle)

    def _settle(self) -> None:
        if self._unsized is not None:
            self._size(self._unsized)
            self._unsized = None
        self.settled = True

    def _size(self, preset: Preset) -> None:
        window = self.window
        width, height = window.width(), window.height()
        across = [p for p in preset.places if p.area in (LEFT, RIGHT)]
        row = width  # the bottom row's width: the right column runs the full height beside it
        if across:
            # one width per column: the first dock of each side sets it
            columns = {p.area: p for p in reversed(across)}
            widths = [min(COLUMN_MAX, int(width * p.share)) for p in columns.values()]
            window.resizeDocks([self.docks[p.dock] for p in columns.values()], widths, Qt.Orientation.Horizontal)
            row -= sum(w for p, w in zip(columns.values(), widths, strict=True) if p.area == RIGHT)
        bottom = [p for p in preset.places if p.area == BOTTOM]
        if bottom:
            window.resizeDocks([self.docks[bottom[0].dock]], [int(height * bottom[0].share)], Qt.Orientation.Vertical)
            if len(bottom) > 1:  # side by side
                window.resizeDocks([self.docks[p.dock] for p in bottom],
                                   [int(row * (p.along or 1 / len(bottom))) for p in bottom], Qt.Orientation.Horizontal)


def _height_for_width(dock: QDockWidget) -> int:
    """The dock's height for its contents at its width (wrapped labels; a scroll area's contents),
    0 when they do not say."""
    body = dock.widget()
    if body is None:
        return 0
    inner = body.widget() if isinstance(body, QScrollArea) and body.widgetResizable() else body
    if inner is None or not inner.hasHeightForWidth():
        return 0
    return inner.heightForWidth(body.width()) + dock.height() - body.height()


def _along(dock: QDockWidget, orientation: Qt.Orientation) -> int:
    return dock.width() if orientation == Qt.Orientation.Horizontal else dock.height()


def _least(dock: QDockWidget, orientation: Qt.Orientation) -> int:
    """The dock's minimum width or height."""
    if orientation == Qt.Orientation.Horizontal:
        return max(dock.minimumSizeHint().width(), dock.minimumWidth())
    return max(dock.minimumSizeHint().height(), dock.minimumHeight())


def _shares(dock: QDockWidget, others: list[QDockWidget], wanted: int, orientation: Qt.Orientation) -> list[int]:
    """Sizes along a column (or the bottom row) for ``dock``, just opened, and the ``others`` in it:
    ``dock`` gets what it asks for, up to ``OPENED_SHARE`` of a column, as far as each of the others
    in a column keeps ``KEPT_HEIGHT`` (or the height it needs, when less), and never less than its
    minimum. When not every dock can keep that much, each keeps its minimum and a share of the rest."""
    total = sum(_along(d, orientation) for d in [dock, *others])
    least = {d: _least(d, orientation) for d in others}
    if orientation == Qt.Orientation.Horizontal:
        kept = dict(least)  # the bottom row: the others give up room in proportion to what they have
    else:
        kept = {d: max(least[d], min(KEPT_HEIGHT, d.maximumHeight())) for d in others}
        wanted = min(wanted, int(OPENED_SHARE * total))
    target = max(_least(dock, orientation), min(wanted, total - sum(kept.values())))
    space = total - target
    if space >= sum(kept.values()):
        floor, weight = kept, {d: max(0, _along(d, orientation) - kept[d]) for d in others}
        if not any(weight.values()):  # none had more than it keeps: the rest to those that can grow
            weight = {d: int(d.maximumHeight() > kept[d] or orientation == Qt.Orientation.Horizontal)
                      for d in others}
    else:
        floor, weight = least, {d: kept[d] - least[d] for d in others}
    rest, weights = space - sum(floor.values()), sum(weight.values())
    return [target, *(floor[d] + (rest * weight[d] // weights if weights else 0) for d in others)]


def _flow(area: Qt.DockWidgetArea) -> Qt.Orientation:
    """Docks of a side column stack; docks of the bottom row stand side by side."""
    return Qt.Orientation.Horizontal if area == BOTTOM else Qt.Orientation.Vertical


def preset_buttons(workspace: Workspace, parent: QWidget) -> QWidget:
    """A small segmented control of the presets, for the menu bar's corner (it costs no height)."""
    box = QWidget(parent)
    box.setObjectName("workspace_buttons")
    layout = QHBoxLayout(box)
    layout.setContentsMargins(0, 0, 4, 0)
    layout.setSpacing(0)
    for preset in PRESETS:
        button = QToolButton(box)
        button.setDefaultAction(workspace.actions[preset.name])
        button.setAutoRaise(True)
        button.setObjectName(f"workspace_{preset.name.lower()}")
        layout.addWidget(button)
    return box
