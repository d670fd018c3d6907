"""The start page (editor/window/start_page.py): the examples, the recent files and New from template, in the
canvas's place; a click or Enter opens a row, Esc goes to the canvas; File > New is one reply node."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QListWidget

from editor import settings as app_settings
from editor.window.start_page import (
    EMPTY_TEMPLATE,
    REPLY_ID,
    REPLY_TYPE,
    StartPage,
    describe_example,
    empty_agent,
)
from runtime.asset.file import save_asset
from runtime.asset.model import Asset, node_model, palette_node
from runtime.models.folder import MODELS_DIR_ENV, SAMPLE_MODEL
from runtime.resources import examples_dir
from tests.runtime.tiny_gguf import write_tiny_gguf

SHOTS = Path("/tmp/parley-start-page-shots")


@pytest.fixture
def models(tmp_path, monkeypatch):
    """A models folder with the sample model's file in it (a tiny one): a new agent names it."""
    folder = tmp_path / "models"
    folder.mkdir()
    write_tiny_gguf(folder / SAMPLE_MODEL.file_name)
    monkeypatch.setenv(MODELS_DIR_ENV, str(folder))
    return folder


def asset_file(folder: Path, name: str) -> Path:
    path = folder / f"{name}.json"
    save_asset(Asset(name=name, start_node="a", nodes=[palette_node("Generate", "a", system_prompt=f"I am {name}.")]),
               path)
    return path


def click_row(listing: QListWidget, row: int, qtbot) -> None:
    rect = listing.visualItemRect(listing.item(row))
    qtbot.mouseClick(listing.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())


def rows(listing: QListWidget) -> list[tuple[str, str, bool]]:
    return [(e.title, e.detail, e.available) for e in listing.entries()]


def test_the_page_lists_the_examples_with_a_line_each(window):
    page = window.start_page.show()
    assert isinstance(page, StartPage) and window.start_page.shown
    assert window.centralWidget().currentWidget() is page, "the page stands in the canvas's place"
    shipped = sorted(examples_dir().glob("*.json"))
    scenes = sorted((examples_dir() / "scenes").glob("*.scene.json"))  # after the agents; never a template
    assert [e.path for e in page.examples.entries()] == [str(p) for p in [*shipped, *scenes]]
    tavern = next(e for e in page.examples.entries() if e.path.endswith("tavern.scene.json"))
    assert tavern.detail == "A scene: Mira, Tomas, Brann in one conversation with the player"
    for entry, path in zip(page.examples.entries(), [*shipped, *scenes]):
        raw = json.loads(path.read_text(encoding="utf-8"))
        assert entry.title == raw["name"] and entry.available
        assert entry.detail and "\n" not in entry.detail
    chat = next(e for e in page.examples.entries() if e.path.endswith("chat.json"))
    assert chat.detail.startswith("You are Mira"), "the first sentence of the start node's system prompt"
    # New from template: the empty agent, then each example
    templates = page.templates.entries()
    assert templates[0].path == EMPTY_TEMPLATE and templates[0].title == "Empty agent (one reply)"
    assert [t.path for t in templates[1:]] == [str(p) for p in shipped]


def test_an_example_is_described_by_its_metadata_else_its_prompt():
    assert describe_example({"metadata": {"description": "A guard. Grumpy."}, "nodes": []}) == "A guard."
    raw = {"start_node": "b", "nodes": [{"id": "a", "system_prompt": "First node."},
                                        {"id": "b", "system_prompt": "The start node!  Then more."}]}
    assert describe_example(raw) == "The start node!"
    assert describe_example({"nodes": [{"id": "a"}, {"id": "b"}]}) == "2 nodes"
    assert describe_example([1, 2]).startswith("not an asset")
    assert len(describe_example({"nodes": [{"id": "a", "system_prompt": "word " * 200}]})) <= 140


def test_clicking_an_example_opens_it_as_a_new_unsaved_copy(window, qtbot):
    page = window.start_page.show()
    row = next(i for i, e in enumerate(page.examples.entries()) if e.path.endswith("intent_router.json"))
    click_row(page.examples, row, qtbot)
    assert not window.start_page.shown and window.centralWidget().currentWidget() is window.canvas.widget
    assert window.document.asset.start_node == "classify" and len(window.document.asset.nodes) == 4
    assert window.document.path == "", "saving never overwrites the shipped example"
    assert app_settings.recent_files() == [], "an example is not a recent file"


def test_a_template_from_an_example_is_a_copy_too(window, qtbot):
    page = window.start_page.show()
    row = next(i for i, e in enumerate(page.templates.entries()) if e.path.endswith("chat.json"))
    click_row(page.templates, row, qtbot)
    assert not window.start_page.shown
    assert window.document.asset.start_node == "reply" and window.document.path == ""


def test_new_from_template_is_one_reply_node_and_no_problems(window, models, qtbot):
    window.canvas.add_node("Generate")
    window.document.undo_stack.setClean()
    page = window.start_page.show()
    assert page.templates.entries()[0].path == EMPTY_TEMPLATE
    click_row(page.templates, 0, qtbot)
    assert not window.start_page.shown
    asset = window.document.asset
    (node,) = asset.nodes
    assert (node.id, node.type, asset.start_node) == (REPLY_ID, REPLY_TYPE, REPLY_ID)
    for field, value in node_model(REPLY_TYPE).NEW_NODE_FIELDS.items():
        assert getattr(node, field) == value, f"{field}: the palette's starting value"
    assert asset.default_model == SAMPLE_MODEL.file_name
    assert window.problems_dock.problems == [], [p.message for p in window.problems_dock.problems]
    assert "0 errors" in window.status.text() and "0 warnings" in window.status.text()
    assert window.document.path == "" and not window.document.modified
    # File > New gives the same
    window.canvas.add_node("Generate")
    window.document.undo_stack.setClean()
    window.new_action.trigger()
    assert window.document.asset.model_dump() == empty_agent().model_dump()
    assert window.problems_dock.problems == []
    assert not window.canvas.empty_hint.isVisible()


def test_enter_opens_a_recent_file_and_it_moves_to_the_top(window, tmp_path, qtbot):
    older, newer = asset_file(tmp_path, "older"), asset_file(tmp_path, "newer")
    app_settings.add_recent_file(str(older))
    app_settings.add_recent_file(str(newer))
    page = window.start_page.show()
    assert [e.path for e in page.recent.entries()] == [str(newer), str(older)], "most recent first"
    assert rows(page.recent)[0] == ("newer.json", str(tmp_path), True)
    assert not page.no_recent.isVisible() or not page.isVisible()
    page.recent.setFocus()
    qtbot.keyClick(page.recent, Qt.Key.Key_Down)
    assert page.recent.currentRow() == 1
    qtbot.keyClick(page.recent, Qt.Key.Key_Return)
    assert not window.start_page.shown
    assert window.document.path == str(older.resolve()) and window.document.asset.name == "older"
    assert app_settings.recent_files()[:2] == [str(older.resolve()), str(newer.resolve())]
    assert window.start_page.show().recent.entries()[0].path == str(older.resolve())


def test_a_missing_recent_file_is_greyed_with_a_note_and_can_be_forgotten(window, tmp_path, qtbot):
    there, gone = asset_file(tmp_path, "there"), asset_file(tmp_path, "gone")
    app_settings.add_recent_file(str(there))
    app_settings.add_recent_file(str(gone))
    gone.unlink()
    page = window.start_page.show()
    assert rows(page.recent)[0] == ("gone.json", f"Not found (moved or deleted): {gone}", False)
    assert not page.recent.item(0).flags() & Qt.ItemFlag.ItemIsEnabled
    SHOTS.mkdir(exist_ok=True)
    window.grab().save(str(SHOTS / "missing_recent.png"))
    click_row(page.recent, 0, qtbot)
    assert window.start_page.shown and window.document.path == "", "a greyed row opens nothing"
    window.recent_menu.aboutToShow.emit()  # File > Open Recent fills as it opens
    menu = {a.text(): a.isEnabled() for a in window.recent_menu.actions() if not a.isSeparator()}
    assert menu[f"{gone} (not found)"] is False and menu[str(there)] is True
    assert page.forget_button.isVisible()
    page.forget_button.click()
    assert app_settings.recent_files() == [str(there)]
    assert [e.path for e in page.recent.entries()] == [str(there)] and not page.forget_button.isVisible()


def test_opening_adds_to_the_recent_files_up_to_the_cap(window, tmp_path):
    paths = [asset_file(tmp_path, f"npc{i}") for i in range(app_settings.MAX_RECENT + 2)]
    for path in paths:
        assert window.open_path(str(path))
    expected = [str(p.resolve()) for p in reversed(paths)][: app_settings.MAX_RECENT]
    assert app_settings.recent_files() == expected
    window.files.fill_recent_menu()
    listed = [a.text() for a in window.recent_menu.actions() if not a.isSeparator()]
    assert listed == [*expected, "Clear"]
    assert [e.path for e in window.start_page.show().recent.entries()] == expected
    assert window.open_path(str(paths[3])), "opening one again moves it to the top, once"
    assert app_settings.recent_files()[0] == str(paths[3].resolve())
    assert len(app_settings.recent_files()) == app_settings.MAX_RECENT
    assert app_settings.recent_files().count(str(paths[3].resolve())) == 1


def test_esc_goes_to_the_canvas_and_alt_home_comes_back(window, qtbot):
    window.canvas.add_node("Generate")
    window.start_page_action.trigger()
    page = window.start_page.page
    assert window.start_page.shown and page.templates.hasFocus() or not window.isActiveWindow()
    qtbot.keyClick(page.templates, Qt.Key.Key_Escape)
    assert not window.start_page.shown and len(window.document.asset.nodes) == 1, "nothing changed"
    assert window.start_page_action.shortcut().toString() == "Alt+Home"
    assert window.start_page_action in window.help_menu.actions()
    file_menu = window.menuBar().actions()[0].menu()
    assert window.start_page_action in file_menu.actions()
    window.start_page_action.trigger()
    page.close_button.click()
    assert not window.start_page.shown


def test_opening_a_file_any_way_hides_the_page(window, tmp_path):
    path = asset_file(tmp_path, "npc")
    window.start_page.show()
    assert window.open_path(str(path))
    assert not window.start_page.shown
    window.start_page.show()
    bad = tmp_path / "bad.json"
    bad.write_text("{ not json", encoding="utf-8")
    assert not window.open_path(str(bad))
    assert window.start_page.shown, "a file that cannot open leaves the page (its errors are in Problems)"
    assert window.problems_dock.problems


def test_tab_walks_the_page_in_reading_order(window, tmp_path, qtbot):
    app_settings.add_recent_file(str(tmp_path / "gone.json"))  # a missing file: Forget Missing Files shows
    app_settings.add_recent_file(str(asset_file(tmp_path, "npc")))
    page = window.start_page.show()

    def next_stop(widget):  # where Tab goes from ``widget``: the next visible widget that takes Tab
        widget = widget.nextInFocusChain()
        while not (widget.focusPolicy() & Qt.FocusPolicy.TabFocus and widget.isVisible() and widget.isEnabled()):
            widget = widget.nextInFocusChain()
        return widget

    chain = [page.templates]
    for _ in range(6):
        chain.append(next_stop(chain[-1]))
    assert chain == [page.templates, page.recent, page.forget_button, page.examples,
                     page.new_button, page.open_button, page.close_button]
    page.templates.setFocus()
    qtbot.keyClick(page.templates, Qt.Key.Key_Tab)  # the key itself: no canvas shortcut takes it here
    assert window.focusWidget() is page.recent


@pytest.mark.parametrize("size", [(1366, 768), (1920, 1080)])
def test_the_page_is_readable_at_common_sizes(window, tmp_path, qtbot, size):
    for i in range(3):
        app_settings.add_recent_file(str(asset_file(tmp_path, f"character_{i}")))
    window.resize(*size)
    page = window.start_page.show()
    qtbot.waitUntil(lambda: page.width() > 0 and page.isVisible(), timeout=3000)
    SHOTS.mkdir(exist_ok=True)
    window.grab().save(str(SHOTS / f"start_page_{size[0]}x{size[1]}.png"))
    assert page.widget().minimumSizeHint().width() <= page.viewport().width(), "no sideways scrolling"
    for listing in (page.templates, page.recent, page.examples):
        assert listing.width() >= 300, f"{listing.objectName()} is {listing.width()} px wide"
        last = listing.visualItemRect(listing.item(listing.count() - 1))
        assert listing.viewport().rect().contains(last), "every row shows: the page scrolls, not the list"
    first = page.templates.visualItemRect(page.templates.item(0))
    assert page.templates.indexAt(QPoint(first.center())).row() == 0


def test_the_launch_without_an_asset_shows_the_page(tmp_path):
    """``parley-studio --exit-when-ready`` with no asset: the page is what paints first (and the flow ends)."""
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", PARLEY_STUDIO_SETTINGS=str(tmp_path / "s.ini"),
               PARLEY_STUDIO_RECOVERY=str(tmp_path / "recovery"))
    env.pop("PARLEY_LAUNCH_TIME", None)
    run = subprocess.run([sys.executable, "-m", "editor.app", "--exit-when-ready"], check=False, env=env,
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert "asset_open" not in report["phases_s"] and report["ready_s"] > 0


def test_the_launch_with_no_asset_starts_on_the_page_in_process(monkeypatch, tmp_path):
    """editor.app.main shows the page before the window (no canvas flashes first)."""
    from editor import app as app_module
    from editor.window.main_window import MainWindow

    seen = {}
    original = MainWindow.show

    def show(self):
        seen["shown_with_page"] = self.start_page.shown
        original(self)

    monkeypatch.setattr(MainWindow, "show", show)
    monkeypatch.setattr(app_module, "_exit_when_ready", lambda app, window, phases: (window.close(), 0)[1])
    assert app_module.main(["--exit-when-ready"]) == 0
    assert seen == {"shown_with_page": True}


@pytest.mark.model
def test_the_empty_agent_talks_on_the_sample_model(window, qtbot, monkeypatch):
    """New from template is ready to talk: its one reply node answers a real turn on the sample model,
    with nothing in the Problems dock first."""
    from tests.editor.live import sample_model, talk

    model = Path(sample_model())
    monkeypatch.setenv(MODELS_DIR_ENV, str(model.parent))
    page = window.start_page.show()
    click_row(page.templates, 0, qtbot)
    assert window.document.asset.default_model == model.name
    assert window.problems_dock.problems == [], [p.message for p in window.problems_dock.problems]
    window.workspace.switch("Talk")
    record = talk(qtbot, window.conversation, "Hello there! Who are you?")
    assert record.diagnostics.path == [REPLY_ID]
    assert record.diagnostics.reply.strip()
    assert record.diagnostics.nodes[0].tokens.generated > 0


def test_a_new_window_starts_on_the_page(window):
    from editor.window import main_window

    other = window.new_window()
    try:
        assert other.start_page.shown and other.document.asset.nodes == []
        assert not window.start_page.shown, "the window it came from keeps its canvas"
    finally:
        other.close()
        main_window._open_windows.remove(other)
        other.deleteLater()
