"""The right column at 1366x768 (issue 38, major 4): with the VRAM Estimator open Properties was a
68 px slit, attaching to a server grew the window to 909 px, past the screen, and Reset Workspace
did not give the height back."""

# ruff: noqa: F401, F811  (the tests take the imported sized_window fixture by name)
from __future__ import annotations

from PySide6.QtCore import QRect

from runtime.resources import examples_dir
from tests.editor.window.test_workspace_layout import settle, sized_window

TAVERN = str(examples_dir() / "tavern_keeper.json")


def open_from_the_view_menu(window, qtbot, name: str) -> None:
    window.docks[name].toggleViewAction().trigger()
    settle(qtbot, window)


def attach_as_the_window_does(window, qtbot) -> None:
    """What Backend > Attach to Server… does to the layout: the Conversation dock, read-only with
    the attach panel above its chat, opened in the current workspace."""
    dock = window.conversation_dock
    dock.set_read_only("this conversation is followed on a server (Take over to talk here)", window.attach_panel, None)
    window.attach_panel.show()
    dock.show()
    dock.raise_()
    settle(qtbot, window)


def test_an_opened_dock_leaves_properties_a_usable_height(sized_window, qtbot):
    window = sized_window(1366, 768, TAVERN)
    settle(qtbot, window)
    open_from_the_view_menu(window, qtbot, "VramEstimatorDock")
    vram, properties = window.docks["VramEstimatorDock"], window.properties
    column = properties.height() + vram.height() + window.problems_dock.height()
    assert properties.height() >= 0.4 * column, f"Properties is {properties.height()} px of a {column} px column"
    assert vram.height() >= 0.4 * column, f"the estimator is {vram.height()} px of a {column} px column"


def test_attaching_in_a_short_window_keeps_its_size_and_every_dock_usable(sized_window, qtbot):
    window = sized_window(1366, 768, TAVERN)
    settle(qtbot, window)
    open_from_the_view_menu(window, qtbot, "VramEstimatorDock")
    attach_as_the_window_does(window, qtbot)
    assert window.size().toTuple() == (1366, 768), "no dock's minimum grew the window past the screen"
    assert window.properties.height() >= 180, f"Properties is {window.properties.height()} px"
    for name in ("PropertiesDock", "ConversationDock", "VramEstimatorDock", "ProblemsDock"):
        dock = window.docks[name]
        assert dock.isVisible() and window.rect().contains(dock.geometry()), name
        assert dock.height() >= max(dock.minimumSizeHint().height(), 30), name


def test_a_dock_too_tall_for_its_column_does_not_grow_the_window(sized_window, qtbot):
    """However tall a dock's minimum, opening it never pushes the window past the size it has."""
    window = sized_window(1366, 768, TAVERN)
    settle(qtbot, window)
    window.conversation_dock.setMinimumHeight(640)
    window.conversation_dock.show()
    settle(qtbot, window)
    settle(qtbot, window)
    assert window.size().toTuple() == (1366, 768)
    assert window.conversation_dock.isVisible()


def test_reset_workspace_gives_the_window_its_height_back(sized_window, qtbot):
    window = sized_window(1366, 768, TAVERN)
    settle(qtbot, window)
    window.properties.setMinimumHeight(900)  # a dock that grows the window, as the attached column did
    settle(qtbot, window)
    assert window.height() > 768
    window.properties.setMinimumHeight(0)
    settle(qtbot, window)
    window.workspace.reset()
    settle(qtbot, window)
    assert window.size().toTuple() == (1366, 768), "Reset Workspace gives the height back"
    canvas = QRect(window.canvas.widget.mapTo(window, window.canvas.widget.rect().topLeft()),
                   window.canvas.widget.size())
    assert window.rect().contains(canvas) and window.rect().contains(window.properties.geometry())
    assert window.properties.height() >= 600, "the preset's docks have their shares of the window's own size"
