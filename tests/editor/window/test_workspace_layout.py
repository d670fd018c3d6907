"""The window's layout in real window sizes (issue 23, friction 1 and 2): the canvas leads, no dock
holds a column open, every separator drags, and the Author, Talk and Test presets switch with one
action and come back as the designer left them."""

from __future__ import annotations

import itertools
import json

import pytest
from PySide6.QtCore import QRect, Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QDockWidget, QToolButton

from editor.canvas import LEGIBLE_SCALE
from editor.window.workspace import PRESETS, preset_named
from runtime.problems import Problem
from runtime.resources import examples_dir

SIZES = [(1366, 768, 0.50), (1920, 1080, 0.60)]
MAX_DOCK_MIN_WIDTH = 360


@pytest.fixture
def sized_window(qtbot):
    """A main window built, resized to a screen's size and then shown, as on a first launch there."""
    from editor.window.main_window import MainWindow

    made: list[MainWindow] = []

    def make(width: int, height: int, asset: str = "") -> MainWindow:
        window = MainWindow()
        window.resize(width, height)
        if asset:
            window.open_path(asset, as_example=True)
        window.show()
        made.append(window)
        qtbot.waitUntil(lambda: window.workspace.settled, timeout=5000)
        qtbot.waitUntil(lambda: window.canvas.widget.width() > 0, timeout=5000)
        return window

    yield make
    for window in made:
        window.document.undo_stack.setClean()
        window.close()
        window.deleteLater()


def settle(qtbot, window) -> None:
    """Let the dock layout apply what was asked of it (QMainWindow lays out on a posted event)."""
    qtbot.waitUntil(lambda: window.workspace.settled, timeout=5000)
    for _ in range(3):  # the posted layout requests, and those they post in turn
        QApplication.sendPostedEvents()
        QApplication.processEvents()


def canvas_share(window) -> float:
    canvas = window.canvas.widget
    return canvas.width() * canvas.height() / (window.width() * window.height())


def visible_docks(window) -> set[str]:
    return {name for name, dock in window.docks.items() if dock.isVisible()}


@pytest.mark.parametrize(("width", "height", "share"), SIZES, ids=["1366x768", "1920x1080"])
def test_the_canvas_leads_on_first_launch(sized_window, qtbot, width, height, share):
    window = sized_window(width, height, str(examples_dir() / "chat.json"))
    settle(qtbot, window)
    assert window.size().toTuple() == (width, height), "no dock widened the window past the screen"
    assert window.workspace.current == "Author", "the first launch is the Author preset"
    assert canvas_share(window) >= share, (
        f"the canvas is {window.canvas.widget.size().toTuple()} px, {canvas_share(window):.1%} of the "
        f"{width}x{height} window (wanted {share:.0%})")
    # the docks on show sit beside the canvas, inside the window, not under it
    canvas = QRect(window.canvas.widget.mapTo(window, window.canvas.widget.rect().topLeft()),
                   window.canvas.widget.size())
    for name in visible_docks(window):
        dock = window.docks[name]
        assert window.rect().contains(dock.geometry()), name
        assert not dock.geometry().intersects(canvas), name


def test_no_dock_forces_a_minimum_width_over_360_px(sized_window, qtbot):
    window = sized_window(1366, 768, str(examples_dir() / "chat.json"))
    for dock in window.docks.values():
        dock.show()  # each dock's contents as they are when in use
    settle(qtbot, window)
    widths = {name: max(dock.minimumSizeHint().width(), dock.minimumWidth()) for name, dock in window.docks.items()}
    assert all(w <= MAX_DOCK_MIN_WIDTH for w in widths.values()), widths


def test_the_conversation_actions_wrap_in_a_narrow_dock(sized_window, qtbot):
    window = sized_window(1366, 768)
    window.workspace.switch("Talk")
    dock = window.conversation_dock
    window.resizeDocks([dock], [300], Qt.Orientation.Horizontal)
    settle(qtbot, window)
    assert dock.width() <= 320
    buttons = [b for b in dock.tools_row.findChildren(QToolButton) if b.parent() is dock.tools_row]
    assert len(buttons) == 9
    rows = {b.y() for b in buttons}
    assert len(rows) >= 2, "the actions wrapped onto a second row"
    row = dock.tools_row.rect()
    for button in buttons:
        assert row.contains(button.geometry()), f"{button.text()} is cut off at {button.geometry()}"
    # the chat stays below the wrapped rows, not under them
    assert dock.chat.mapTo(dock, dock.chat.rect().topLeft()).y() >= dock.tools_row.mapTo(
        dock, dock.tools_row.rect().bottomLeft()).y()


def test_the_vram_estimator_does_not_hold_the_column_open(sized_window, qtbot):
    """With the Conversation closed, the VRAM Estimator held the right column at 534 px."""
    window = sized_window(1366, 768, str(examples_dir() / "chat.json"))
    vram = window.docks["VramEstimatorDock"]
    vram.show()
    window.resizeDocks([window.properties], [MAX_DOCK_MIN_WIDTH], Qt.Orientation.Horizontal)
    settle(qtbot, window)
    assert vram.width() <= MAX_DOCK_MIN_WIDTH + 2 and window.properties.width() <= MAX_DOCK_MIN_WIDTH + 2, (
        vram.width(), window.properties.width())
    assert window.dockWidgetArea(vram) == window.dockWidgetArea(window.properties)
    # opened beside the preset's docks, it gets the height it asks for (up to half the column: it
    # scrolls, and Properties keeps room to edit in), not the least it can live with
    column = vram.height() + window.properties.height() + window.problems_dock.height()
    assert vram.height() >= min(vram.sizeHint().height(), int(0.45 * column)), (vram.height(), column)
    assert vram not in window.tabifiedDockWidgets(window.properties), "an edit beside its estimate, not behind it"


def test_an_empty_problems_dock_is_one_line(sized_window, qtbot):
    window = sized_window(1366, 768, str(examples_dir() / "chat.json"))
    problems = window.problems_dock
    settle(qtbot, window)
    assert problems.none_label.isVisible() and problems.none_label.text() == "No problems"
    assert problems.height() <= 60, f"the empty Problems dock takes {problems.height()} px"
    window.load_problems = [Problem(severity="error", message="a problem to read", node_id="", field="")]
    window._show_problems()
    settle(qtbot, window)
    assert problems.tree.isVisible() and not problems.none_label.isVisible()
    assert problems.height() >= 120, "with rows to read the dock opens up"
    window.load_problems = []
    window._show_problems()
    settle(qtbot, window)
    assert problems.height() <= 60


def separators(preset: str) -> list[tuple[list[str], Qt.Orientation]]:
    """The separators of a preset, each as the docks either side of it (one when the other side is
    the canvas) and the direction it moves in."""
    places = preset_named(preset).places
    bottom = Qt.DockWidgetArea.BottomDockWidgetArea
    out: list[tuple[list[str], Qt.Orientation]] = []
    for area in dict.fromkeys(p.area for p in places):
        docks = [p.dock for p in places if p.area == area]
        against_canvas = Qt.Orientation.Vertical if area == bottom else Qt.Orientation.Horizontal
        between = Qt.Orientation.Horizontal if area == bottom else Qt.Orientation.Vertical
        out.append(([docks[0]], against_canvas))
        out += [([a, b], between) for a, b in itertools.pairwise(docks)]
    return out


@pytest.mark.parametrize("preset", [p.name for p in PRESETS])
def test_every_separator_drags(sized_window, qtbot, preset):
    """Each separator of each preset moves where it is dragged (QMainWindow.resizeDocks, as a drag
    does): the one between the canvas and the right column did not move at all."""
    window = sized_window(1366, 768, str(examples_dir() / "chat.json"))
    window.workspace.switch(preset)
    # Problems, empty, is one line by design: give it rows so its separator has something to move
    window.load_problems = [Problem(severity="warning", message="to read", node_id="", field="")]
    window._show_problems()
    settle(qtbot, window)
    for names, orientation in separators(preset):
        docks = [window.docks[n] for n in names]

        def size(dock, orientation=orientation):
            return dock.width() if orientation == Qt.Orientation.Horizontal else dock.height()

        before = [size(d) for d in docks]
        # a dock (or a row of them) at its minimum is dragged larger
        row = docks if len(docks) > 1 else [window.docks[p.dock] for p in preset_named(preset).places
                                              if p.area == window.dockWidgetArea(docks[0])]
        least = max(size(d.minimumSizeHint()) for d in row)
        step = -60 if before[0] - 60 >= max(150, least) else 60
        target = [before[0] + step] + [b - step for b in before[1:]]
        window.resizeDocks(docks, target, orientation)
        settle(qtbot, window)
        after = [size(d) for d in docks]
        assert all(abs(a - t) <= 8 for a, t in zip(after, target, strict=True)), (
            f"{preset}: the {orientation.name.lower()} separator of {names} went {before} -> {after}, dragged to {target}")


@pytest.mark.parametrize("preset", [p.name for p in PRESETS])
def test_a_preset_shows_its_docks_side_by_side(sized_window, qtbot, preset):
    window = sized_window(1920, 1080)
    window.workspace.switch(preset)
    settle(qtbot, window)
    wanted = {place.dock for place in preset_named(preset).places}
    assert wanted <= visible_docks(window)
    for name in wanted:
        dock = window.docks[name]
        assert not window.tabifiedDockWidgets(dock), f"{preset}: {name} is a tab of another dock"
        assert not dock.isFloating()
        tall = 20 if name == "ProblemsDock" and not window.problems_dock.problems else 100  # "No problems"
        assert dock.width() > 150 and dock.height() > tall, f"{preset}: {name} is {dock.size().toTuple()}"
    # and none overlaps another: every one can be seen at once
    rects = [(n, window.docks[n].geometry()) for n in wanted]
    for i, (a, ra) in enumerate(rects):
        for b, rb in rects[i + 1:]:
            assert not ra.intersects(rb), f"{preset}: {a} and {b} overlap"
    if preset == "Test":
        tests, inspector = window.docks["TestsDock"].geometry(), window.docks["TurnInspectorDock"].geometry()
        assert tests.right() < inspector.left() and abs(tests.top() - inspector.top()) <= 2, "side by side"


def test_presets_switch_with_one_key_or_click_and_come_back_as_left(sized_window, qtbot):
    window = sized_window(1366, 768)
    actions = window.workspace.actions
    assert [actions[p.name].shortcut().toString() for p in PRESETS] == ["Ctrl+1", "Ctrl+2", "Ctrl+3"]
    view_menu = next(a.menu() for a in window.menuBar().actions() if a.text() == "&View")
    assert set(actions.values()) <= set(view_menu.actions())
    corner = window.menuBar().cornerWidget(Qt.Corner.TopRightCorner)
    buttons = {b.text(): b for b in corner.findChildren(QToolButton)}
    assert list(buttons) == ["Author", "Talk", "Test"]

    buttons["Talk"].click()  # one click
    settle(qtbot, window)
    assert window.workspace.current == "Talk" and actions["Talk"].isChecked()
    assert {"ConversationDock", "TurnInspectorDock"} <= visible_docks(window)
    assert not window.palette.isVisible() and not window.problems_dock.isVisible()  # Author's, not Talk's
    # the designer adjusts Talk: a narrower conversation, and the Raw JSON dock opened beside it
    window.resizeDocks([window.conversation_dock], [300], Qt.Orientation.Horizontal)
    window.docks["RawJsonDock"].show()
    settle(qtbot, window)
    adjusted = window.conversation_dock.width()

    window.activateWindow()
    window.canvas.viewer.setFocus()
    QTest.keyClick(window.canvas.viewer, Qt.Key.Key_3, Qt.KeyboardModifier.ControlModifier)  # one key
    settle(qtbot, window)
    assert {"TestsDock", "TurnInspectorDock"} <= visible_docks(window)
    assert not window.conversation_dock.isVisible() and not window.docks["RawJsonDock"].isVisible()

    actions["Talk"].trigger()
    settle(qtbot, window)
    assert window.conversation_dock.isVisible() and window.docks["RawJsonDock"].isVisible()
    assert abs(window.conversation_dock.width() - adjusted) <= 4, "Talk came back as it was left"

    window.workspace.reset()
    settle(qtbot, window)
    assert not window.docks["RawJsonDock"].isVisible(), "Reset Workspace puts the preset back as it starts"


def test_the_preset_and_its_arrangement_outlive_the_window(sized_window, qtbot):
    window = sized_window(1366, 768)
    window.workspace.switch("Talk")
    window.resizeDocks([window.conversation_dock], [310], Qt.Orientation.Horizontal)
    settle(qtbot, window)
    adjusted = window.conversation_dock.width()
    window.close()
    again = sized_window(1366, 768)
    settle(qtbot, again)
    assert again.workspace.current == "Talk"
    assert abs(again.conversation_dock.width() - adjusted) <= 4


def five_node_npc(tmp_path) -> str:
    """The intent router with a greeting before its classifier: a finished five-node NPC."""
    asset = json.loads((examples_dir() / "intent_router.json").read_text())
    greet = dict(next(n for n in asset["nodes"] if n["id"] == "warn"))
    greet.update(id="greet", title="Greet the player", default_exit="classify", position=[-320.0, 0.0])
    asset["nodes"].insert(0, greet)
    asset["start_node"] = "greet"
    path = tmp_path / "npc.json"
    path.write_text(json.dumps(asset))
    return str(path)


def press_f(window, qtbot) -> float:
    window.canvas.select([])
    window.frame_action.trigger()
    return window.canvas.viewer.transform().m11()


@pytest.mark.parametrize(("width", "height"), [(1366, 768), (1920, 1080)], ids=["1366x768", "1920x1080"])
def test_f_never_frames_a_graph_too_small_to_read(sized_window, qtbot, tmp_path, width, height):
    """F fitted the chat example at 0.50x (text about 6 px high) and the five-node NPC at 0.38x.
    Now F fits the graph when that is legible (LEGIBLE_SCALE) and otherwise shows it at that scale
    from START on; a selection too large is shown at that scale around its centre."""
    window = sized_window(width, height, str(examples_dir() / "chat.json"))
    settle(qtbot, window)
    assert press_f(window, qtbot) >= LEGIBLE_SCALE - 0.01  # the fit rounds
    viewer = window.canvas.viewer
    visible = viewer.mapToScene(viewer.viewport().rect()).boundingRect()
    for node in window.canvas.graph.all_nodes():
        assert visible.contains(node.view.sceneBoundingRect()), f"the chat example fits whole: {node.name()}"

    window.open_path(five_node_npc(tmp_path), as_example=True)
    settle(qtbot, window)
    assert press_f(window, qtbot) >= LEGIBLE_SCALE - 0.01  # the fit rounds
    visible = viewer.mapToScene(viewer.viewport().rect()).boundingRect()
    start = window.canvas.drawing.start.view.sceneBoundingRect()
    assert visible.contains(start), "the graph is read from START on"

    window.canvas.select(window.document.asset.node_ids())
    window.frame_action.trigger()
    assert viewer.transform().m11() >= LEGIBLE_SCALE - 0.01


def test_docks_are_never_built_as_tabs(sized_window, qtbot):
    """Friction 2: Tests, Turn Inspector, Problems and Raw JSON shared one set of tabs, Properties
    and the VRAM Estimator another. Opened from the View menu, each stands beside the others."""
    window = sized_window(1920, 1080)
    for dock in window.docks.values():
        dock.show()
    settle(qtbot, window)
    tabbed = {name: [d.objectName() for d in window.tabifiedDockWidgets(dock)]
              for name, dock in window.docks.items() if isinstance(dock, QDockWidget)}
    assert not any(tabbed.values()), tabbed


def test_the_command_line_starts_in_a_preset():
    """``parley-studio --workspace Talk`` (the README's screenshots of a conversation use it)."""
    from editor.app import build_parser

    assert build_parser().parse_args(["--workspace", "Talk"]).workspace == "Talk"
    assert build_parser().parse_args([]).workspace is None
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--workspace", "Chat"])
