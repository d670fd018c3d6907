"""The real main window, driven the way a designer drives it (offscreen)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QMessageBox

from editor.canvas import node_type_mime
from editor.canvas.node_types import categories
from editor.services.recovery import SUFFIX
from editor.window.main_window import DOCKS
from runtime.asset.file import dumps_asset, load_asset
from runtime.resources import examples_dir

ROOT = Path(__file__).resolve().parents[3]


def drop_from_palette(window, type_name: str, scene_pos: tuple[float, float]) -> str:
    """What a drop from the palette does: the viewer reports the drop and its scene position."""
    before = set(window.document.asset.node_ids())
    window.canvas.viewer.data_dropped.emit(node_type_mime(type_name), QPoint(*map(int, scene_pos)))
    (new_id,) = set(window.document.asset.node_ids()) - before
    return new_id


def drag_between(window, qtbot, start_port, end_port) -> None:
    """A real mouse drag on the canvas from one port to another."""
    viewer = window.canvas.viewer
    viewport = viewer.viewport()

    def point(port) -> QPoint:
        return viewer.mapFromScene(port.view.sceneBoundingRect().center())

    a, b = point(start_port), point(end_port)
    QTest.mousePress(viewport, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, a)
    for i in range(1, 6):
        QTest.mouseMove(viewport, a + (b - a) * (i / 5))
    QTest.mouseRelease(viewport, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, b)
    qtbot.wait(10)


def out_port(window, node_id: str, port: str):
    return window.canvas.canvas_node(node_id).outputs()[port]


def in_port(window, node_id: str):
    return window.canvas.canvas_node(node_id).input_ports()[0]


def test_build_edit_undo_save_reopen(window, qtbot, tmp_path, monkeypatch):
    doc = window.document
    classify = drop_from_palette(window, "ClassifyIntent", (0, 0))
    reply = drop_from_palette(window, "GenerateAndSpeak", (400, -100))
    smalltalk = drop_from_palette(window, "Generate", (400, 150))
    assert doc.asset.start_node == classify, "the first node added becomes the start node"
    assert window.isWindowModified()

    # Properties: select the classifier, add an intent in its list editor, name it.
    window.canvas.select([classify])
    form = window.properties.form
    intents = form.editors["intents"]
    intents.add_button.click()
    intents.form.editors["name"].line.setText("greet")
    intents.form.editors["name"].line.editingFinished.emit()
    assert [i.name for i in doc.node(classify).intents] == ["greet"]
    assert "intent:greet" in window.canvas.canvas_node(classify).outputs()

    # Connect exits by dragging on the canvas, as a person does.
    drag_between(window, qtbot, out_port(window, classify, "intent:greet"), in_port(window, reply))
    assert doc.node(classify).intents[0].exit == reply
    drag_between(window, qtbot, out_port(window, classify, "fallback_exit"), in_port(window, smalltalk))
    assert doc.node(classify).fallback_exit == smalltalk

    # Edit a spin box and a prompt of the reply node.
    window.canvas.select([reply])
    form = window.properties.form
    form.editors["context_size"].spin.setValue(1024)
    form.editors["max_tokens"].spin.setValue(96)
    assert form.editors["max_tokens"].spin.maximum() == 1023, "max tokens stays below context size"
    form.editors["system_prompt"].text.setPlainText("You are Mira. It is {{vars.time}}.")
    node = doc.node(reply)
    assert (node.context_size, node.max_tokens) == (1024, 96)
    assert node.system_prompt.startswith("You are Mira")
    assert "as Mira:" in " ".join(window.canvas.canvas_node(reply).view.summary), "the summary follows the edit"

    # Undo and redo walk the same edits back and forth.
    saved_text = dumps_asset(doc.asset)
    steps = doc.undo_stack.index()
    for _ in range(steps):
        window.undo_action.trigger()
    assert doc.asset.nodes == [] and doc.asset.start_node == ""
    assert window.canvas.graph.all_nodes().__len__() == 2, "only START and END are left"
    for _ in range(steps):
        window.redo_action.trigger()
    assert dumps_asset(doc.asset) == saved_text
    assert doc.node(classify).intents[0].exit == reply

    # Save, reopen in a new window, compare the files.
    path = tmp_path / "guard.json"
    assert window.save_to(str(path))
    assert not window.isWindowModified()
    assert path.read_text() == saved_text
    second = window.__class__()
    qtbot.addWidget(second)
    assert second.open_path(str(path))
    again = tmp_path / "again.json"
    assert second.save_to(str(again))
    assert again.read_bytes() == path.read_bytes()
    second.close()


def test_invalid_edits_show_problems_and_click_selects(window, qtbot):
    doc = window.document
    tool = window.canvas.add_node("ToolCall", (0, 0))
    problems = window.problems_dock.problems
    assert any(p.node_id == tool and p.field == "tools" and p.severity == "error" for p in problems)
    assert window.canvas.problem_severity(tool) == "error"

    # A value the model refuses stays in its editor with the reason, and the asset is unchanged.
    window.canvas.select([tool])
    editor = window.properties.form.editors["input"]
    editor.line.setText("not a slot!")
    editor.line.editingFinished.emit()
    assert doc.node(tool).input == ""
    assert editor.line.text() == "not a slot!"
    assert "Not applied" in editor.error
    assert any(p.field == "input" and "not applied" in p.message for p in window.problems_dock.problems)

    # Clicking a problem selects the node and focuses the field.
    window.canvas.select([])
    row = next(i for i, p in enumerate(window.problems_dock.problems) if p.field == "tools")
    window.problems_dock.activate_row(row)
    assert window.canvas.selected_ids() == [tool]
    assert window.properties.node_id == tool

    # Fixing it clears the mark.
    window.properties.form.editors["tools"].add_button.click()
    assert doc.node(tool).tools[0].name == "tool_1"
    assert not any(p.field == "tools" for p in window.problems_dock.problems)
    assert window.canvas.problem_severity(tool) == "error", "the refused input is still waiting"
    editor = window.properties.form.editors["input"]
    editor.line.setText("topic")
    editor.line.editingFinished.emit()
    assert doc.node(tool).input == "topic" and editor.error == ""
    assert window.canvas.problem_severity(tool) != "error"


def test_closing_with_unsaved_changes_asks(window, monkeypatch):
    asked = []

    def answer(choice):
        def question(*args, **kwargs):
            asked.append(args[2])
            return choice
        return question

    window.canvas.add_node("Generate")
    monkeypatch.setattr(QMessageBox, "question", answer(QMessageBox.StandardButton.Cancel))
    assert not window.close()
    assert window.isVisible() and len(asked) == 1 and "Save the changes" in asked[0]
    monkeypatch.setattr(QMessageBox, "question", answer(QMessageBox.StandardButton.Discard))
    assert window.close()
    assert len(asked) == 2


def test_delete_copy_paste_duplicate(window, qtbot):
    doc = window.document
    a = window.canvas.add_node("GenerateAndSpeak", (0, 0))
    b = window.canvas.add_node("Summarize", (300, 0))
    doc.push(__import__("editor.model.commands", fromlist=["x"]).SetExitCommand(doc, a, "default_exit", "", b))
    window.canvas.select([a, b])
    window.copy()
    text = QApplication.clipboard().text()
    assert json.loads(text)["nodes"][0]["id"] == a
    new = window.paste_text(text, None)
    assert len(new) == 2 and doc.node(new[0]).default_exit == new[1], "exits between pasted nodes follow them"
    dup = window.duplicate()
    assert len(dup) == 2
    window.canvas.select([b])
    window.delete_selected()
    assert not doc.has_node(b) and doc.node(a).default_exit == ""
    window.undo_action.trigger()
    assert doc.node(a).default_exit == b

    # Pasting a whole saved asset's JSON pastes its nodes.
    example = (examples_dir() / "intent_router.json").read_text()
    pasted = window.paste_text(example, (1000, 1000))
    assert len(pasted) == 4
    # Bad clipboard text changes nothing and says where.
    count = len(doc.asset.nodes)
    assert window.paste_text('{"nodes": [{"id": "x", "type": "Generate", "max_token": 3}]}', None) == []
    assert len(doc.asset.nodes) == count
    assert "x.max_token" in window.statusBar().currentMessage()


def test_keyboard_shortcuts_on_canvas(window, qtbot):
    doc = window.document
    a = window.canvas.add_node("Generate", (0, 0))
    window.canvas.viewer.setFocus()
    window.canvas.select([a])
    QTest.keyClick(window.canvas.viewer, Qt.Key.Key_D, Qt.KeyboardModifier.ControlModifier)
    assert len(doc.asset.nodes) == 2
    QTest.keyClick(window.canvas.viewer, Qt.Key.Key_A, Qt.KeyboardModifier.ControlModifier)
    assert len(window.canvas.selected_ids()) == 2
    QTest.keyClick(window.canvas.viewer, Qt.Key.Key_Delete)
    assert doc.asset.nodes == []
    QTest.keyClick(window, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)
    assert len(doc.asset.nodes) == 2


def test_tab_search_lists_our_node_types_by_label(window, qtbot):
    window.canvas.viewer.setFocus()
    QTest.keyClick(window.canvas.viewer, Qt.Key.Key_Tab)
    search = window.canvas.search
    assert search.isVisible()
    assert search.entries() == {category: [v.label for v in views] for category, views in categories().items()}
    shown = " ".join(search.tree.topLevelItem(i).text(0) for i in range(search.tree.topLevelItemCount()))
    assert "nodeGraphQt" not in shown and "parley" not in shown and "Backdrop" not in shown

    qtbot.keyClicks(search.line, "speak")
    assert search.entries() == {"Reply": ["Generate and Speak"]}
    search.line.clear()
    qtbot.keyClicks(search.line, "memory")
    assert search.entries() == {"Memory": ["Retrieve", "Summarize"]}, "a category's name finds its types"
    QTest.keyClick(search.line, Qt.Key.Key_Down)
    QTest.keyClick(search.line, Qt.Key.Key_Return)
    assert not search.isVisible()
    (node,) = window.document.asset.nodes
    assert node.type == "Summarize"


def test_tab_search_and_context_menu_add_nodes(window, qtbot):
    doc = window.document
    window.canvas.viewer.search_triggered.emit("parley.RetrieveCanvasNode", (50.0, 60.0))
    (node,) = doc.asset.nodes
    assert node.type == "Retrieve" and node.position == (50.0, 60.0)
    labels = [a.text() for a in window.canvas.graph.get_context_menu("graph").qmenu.actions()]
    assert "Add Node" in labels and "Auto-&Layout" in labels
    assert window.search_action.shortcut().toString() == "Tab"


def test_auto_layout_is_one_undo_step(window):
    window.open_path(str(examples_dir() / "intent_router.json"), as_example=True)
    doc = window.document
    for node in doc.asset.nodes:
        doc.set_position(node.id, (0.0, 0.0))
    window.layout_action.trigger()
    xs = {n.id: n.position[0] for n in doc.asset.nodes}
    assert xs["classify"] < xs["directions"] == xs["warn"] == xs["smalltalk"]
    window.undo_action.trigger()
    assert all(n.position == (0.0, 0.0) for n in doc.asset.nodes)


def test_examples_menu_recent_files_and_layout_are_remembered(make_window, tmp_path):
    window = make_window()
    names = [a.text() for a in window.examples_menu.actions() if not a.isSeparator()]  # a section heads the scenes
    scenes = list((examples_dir() / "scenes").glob("*.scene.json"))
    assert len(names) == len(list(examples_dir().glob("*.json"))) + len(scenes)
    assert names[-len(scenes):] == ["Tavern (scene)"]
    window.examples_menu.actions()[0].trigger()
    assert window.document.path == "", "an example opens as a new asset, never overwriting the shipped file"
    path = tmp_path / "mine.json"
    window.save_to(str(path))
    assert next(a.text() for a in window.recent_menu.actions()) == str(path.resolve())
    window.docks["UndoHistoryDock"].hide()
    window.resize(1211, 977)
    window.close()
    from editor.settings import app_settings

    saved = app_settings().value("window/geometry")
    assert saved == window.saveGeometry(), "geometry is stored on close"
    again = make_window()
    assert again.docks["UndoHistoryDock"].isHidden()
    assert again.docks["PaletteDock"].isVisible()
    assert Path(os.environ["PARLEY_STUDIO_SETTINGS"]).exists()


def test_load_errors_go_to_problems_and_keep_the_open_asset(window, tmp_path):
    """A file that is not an asset this version can read is refused; one with values the model
    refuses opens (``test_a_file_the_model_refuses_opens_to_be_fixed``)."""
    window.canvas.add_node("Generate")
    bad = tmp_path / "bad.json"
    bad.write_text('{"version": 99, "nodes": [{"id": "a", "type": "Generate"}]}')
    window.document.undo_stack.setClean()
    assert not window.open_path(str(bad))
    assert len(window.document.asset.nodes) == 1
    (problem,) = [p for p in window.problems_dock.problems if p.file == str(bad)]
    assert problem.field == "version"

    typo = tmp_path / "typo.json"
    typo.write_text('{"version": 1, "nodes": [{"id": "a", "type": "Generate", "max_token": 5}]}')
    assert window.open_path(str(typo))
    assert window.document.asset.node_ids() == ["a"]
    (problem,) = window.load_problems
    assert problem.node_id == "a" and problem.field == "max_token" and problem in window.problems_dock.problems


def test_autosave_and_recovery_after_a_crash(make_window, monkeypatch, private_settings):
    window = make_window(autosave_ms=60_000)
    window.canvas.add_node("GenerateAndSpeak", (0, 0))
    assert window.autosave.save_now()
    recovery = window.autosave.file
    assert recovery.exists()
    # A crash: the process that wrote it is gone. Pretend it was another, dead process.
    crashed = recovery.with_name(f"999999999-dead{SUFFIX}")
    recovery.rename(crashed)
    window.document.undo_stack.setClean()
    window.close()

    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Open)
    again = make_window()
    assert again.offer_recovery()
    assert [n.type for n in again.document.asset.nodes] == ["GenerateAndSpeak"]
    assert again.isWindowModified(), "recovered changes are unsaved changes"
    assert not crashed.exists()


def test_saving_clears_the_recovery_file(window, tmp_path):
    window.canvas.add_node("Generate")
    window.autosave.save_now()
    assert window.autosave.file.exists()
    window.save_to(str(tmp_path / "a.json"))
    assert not window.autosave.file.exists()


def test_docks_come_from_one_list(window):
    assert [d.name for d in DOCKS] == list(window.docks)
    assert {"PaletteDock", "PropertiesDock", "ProblemsDock", "UndoHistoryDock"} <= set(window.docks)


@pytest.mark.parametrize("example", ["chat.json", "intent_router.json"])
def test_screenshot_command(tmp_path, example):
    out = tmp_path / "shot.png"
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    result = subprocess.run(
        [sys.executable, "-m", "editor.app", "--screenshot", str(out), str(examples_dir() / example)],
        check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    from PySide6.QtGui import QImage

    image = QImage(str(out))
    assert image.width() >= 1000 and image.height() >= 600
    assert load_asset(examples_dir() / example)  # the example itself is untouched


def test_move_on_canvas_is_an_undoable_command(window, qtbot):
    doc = window.document
    a = window.canvas.add_node("Generate", (0, 0))
    view = window.canvas.canvas_node(a).view
    viewer = window.canvas.viewer
    window.canvas.select([])
    start = viewer.mapFromScene(view.sceneBoundingRect().center() + QPointF(0, -5))
    end = start + QPoint(120, 40)
    QTest.mousePress(viewer.viewport(), Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, start)
    for i in range(1, 6):
        QTest.mouseMove(viewer.viewport(), start + (end - start) * (i / 5))
    QTest.mouseRelease(viewer.viewport(), Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, end)
    x, _y = doc.node(a).position
    assert x > 50, "the model follows the drag"
    window.undo_action.trigger()
    assert doc.node(a).position == (0.0, 0.0)
    assert tuple(window.canvas.canvas_node(a).pos()) == (0.0, 0.0)


def test_refused_values_are_forgotten_with_their_asset(window):
    """A refused value belongs to the asset it was typed in: File > Open and File > New drop it."""
    window.open_path(str(examples_dir() / "chat.json"), as_example=True)
    window.canvas.select(["reply"])
    editor = window.properties.form.editors["input"]
    editor.line.setText("not a slot!")
    editor.line.editingFinished.emit()
    assert any("not applied" in p.message for p in window.problems_dock.problems)
    window.document.undo_stack.setClean()

    # Another asset with a node of the same id: neither the Problems dock nor the node keeps the mark.
    window.open_path(str(examples_dir() / "long_conversation.json"), as_example=True)
    assert not any("not applied" in p.message for p in window.problems_dock.problems)
    assert window.properties.rejected == []
    assert window.canvas.problem_severity("reply") != "error"
    window.canvas.select(["reply"])
    assert window.properties.form.editors["input"].error == ""

    window.canvas.select(["reply"])
    editor = window.properties.form.editors["input"]
    editor.line.setText("also not a slot!")
    editor.line.editingFinished.emit()
    assert window.properties.rejected
    window.document.undo_stack.setClean()
    window.new_asset()
    assert window.properties.rejected == []
    assert not any("not applied" in p.message for p in window.problems_dock.problems)


def test_a_file_the_model_refuses_opens_to_be_fixed(window, tmp_path):
    raw = json.loads((examples_dir() / "chat.json").read_text())
    raw["nodes"][0].update(max_tokens=600, context_size=256)
    path = tmp_path / "broken.json"
    text = json.dumps(raw, indent=2)
    path.write_text(text)

    assert window.open_path(str(path))
    node = window.document.node("reply")
    assert (node.max_tokens, node.context_size) == (255, 256), "the refused value opens as the nearest allowed"
    (problem,) = [p for p in window.problems_dock.problems if p.node_id == "reply" and p.field == "max_tokens"]
    assert problem.severity == "error" and "600" in problem.message
    assert window.canvas.problem_severity("reply") == "error"
    assert window.document.modified and window.isWindowModified(), "the change is not saved behind the designer's back"
    assert window.document.path == str(path.resolve())
    assert path.read_text() == text, "the file is untouched until saved"

    assert window.save_to(str(path))
    assert json.loads(path.read_text())["nodes"][0]["max_tokens"] == 255
    assert not any(p.field == "max_tokens" for p in window.problems_dock.problems)


def click_pipe(window, qtbot, source: str, port: str) -> None:
    """A real click on the middle of the pipe leaving exit ``port`` of ``source`` (a node id, or START)."""
    canvas = window.canvas
    node = canvas.drawing.start if source == "START" else canvas.canvas_node(source)
    (pipe,) = node.outputs()[port].view.connected_pipes
    viewer = window.canvas.viewer
    middle = viewer.mapFromScene(pipe.mapToScene(pipe.path().pointAtPercent(0.5)))
    QTest.mouseClick(viewer.viewport(), Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, middle)
    qtbot.wait(10)
    # NodeGraphQt redraws a clicked pipe as a new item.
    (pipe,) = node.outputs()[port].view.connected_pipes
    assert pipe.isSelected(), "a click selects the pipe"


def test_delete_removes_a_selected_connection(window, qtbot):
    window.open_path(str(examples_dir() / "intent_router.json"), as_example=True)
    doc = window.document
    window.canvas.frame_selection()
    qtbot.wait(10)
    before = [i.exit for i in doc.node("classify").intents]
    intent = doc.node("classify").intents[0].name
    click_pipe(window, qtbot, "classify", f"intent:{intent}")
    assert window.canvas.selected_ids() == []
    window.canvas.viewer.setFocus()
    QTest.keyClick(window.canvas.viewer, Qt.Key.Key_Delete)
    assert doc.node("classify").intents[0].exit == "", "the exit ends the turn"
    assert doc.has_node(before[0]), "the node it led to stays"
    assert doc.undo_stack.undoText().startswith("Disconnect classify")
    window.undo_action.trigger()
    assert [i.exit for i in doc.node("classify").intents] == before

    # Edit > Delete on START's pipe: the agent has no start node, undoably.
    x, y = doc.node("classify").position
    doc.set_terminal_position("start", (x - 400, y))  # room to click the pipe between the ports
    click_pipe(window, qtbot, "START", "start")
    window.delete_action.trigger()
    assert doc.asset.start_node == ""
    window.undo_action.trigger()
    assert doc.asset.start_node == "classify"

    # A marquee over nodes also catches pipes crossing it: then Delete removes the nodes only.
    (pipe,) = window.canvas.canvas_node("classify").outputs()["fallback_exit"].view.connected_pipes
    window.canvas.select(["directions"])
    pipe.setSelected(True)
    window.delete_action.trigger()
    assert not doc.has_node("directions") and doc.node("classify").fallback_exit == "smalltalk"


# --- closing during a turn (issue 20, defect 6) -----------------------------------------------------

# Each runs in a Python of its own: before the fix, closing waited 30 s and then Qt aborted the
# process ("QThread: Destroyed while thread ... is still running"), which would kill pytest.
CLOSE_ON_SILENT_SERVER = r"""
import json, sys, time
from PySide6.QtWidgets import QApplication
app = QApplication([])
from editor.window.main_window import MainWindow
from runtime.backends.llama_server import LlamaServerBackend
from tests.hostile_server import hostile_server

results = {}
for at in sys.argv[2:]:
    # "timeout": the server reads the request and never answers (until the client leaves)
    with hostile_server("timeout", at=at, max_seconds=60) as server:
        window = MainWindow()
        window.show()
        window.open_path(sys.argv[1])
        window.conversation.use_backend(lambda: LlamaServerBackend(server.url, "silent"))
        assert window.conversation.say("Hello")
        assert server.hit.wait(30), f"the turn never reached {at}"
        thread = window.conversation.thread
        started = time.monotonic()
        window.close()
        results[at] = {"seconds": time.monotonic() - started, "closed": not window.isVisible(),
                       "running": thread.isRunning(), "server_saw_the_client_leave": server.disconnected.wait(5)}
        window.deleteLater()
        app.processEvents()
print(json.dumps(results))
"""


def _python(script: str, *args: str, env: dict[str, str] | None = None, timeout: float = 120):
    return subprocess.run([sys.executable, "-c", script, *args], check=False, cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "QT_QPA_PLATFORM": "offscreen", **(env or {})})


def test_closing_during_a_turn_on_a_server_that_never_answers_ends_the_turn_at_once():
    """Wherever the turn waits on the server (the generation, loading's /props, the prompt budget's
    token counts), closing cancels the request: the window closes in well under the 5 s it may
    wait, the runtime thread has ended, and the process exits normally."""
    at = ["generate", "/props", "/tokenize"]
    done = _python(CLOSE_ON_SILENT_SERVER, str(examples_dir() / "chat.json"), *at)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Destroyed while thread" not in done.stderr
    results = json.loads(done.stdout.strip().splitlines()[-1])
    for where in at:
        result = results[where]
        assert result["closed"] and not result["running"], (where, result)
        assert result["seconds"] < 3, (where, result)
        assert result["server_saw_the_client_leave"], (where, result)


# A backend whose generation ignores Stop (as a call deep in a library might): it asks the window
# to close as soon as it is running, and blocks until the process ends.
CLOSE_ON_STUBBORN_BACKEND = r"""
import sys, threading
from PySide6.QtCore import QMetaObject, Qt
from PySide6.QtWidgets import QApplication
app = QApplication([])
import editor.threads.thread_service
from editor.app import leave
from editor.window.main_window import MainWindow
from runtime.backends.scripted import ScriptedBackend, ScriptedSession

editor.threads.thread_service.SHUTDOWN_WAIT_MS = 200  # the test need not wait the whole 5 s
window = MainWindow()
never = threading.Event()

class StubbornSession(ScriptedSession):
    def generate(self, request, on_token=None, cancel=None):
        QMetaObject.invokeMethod(window, "close", Qt.ConnectionType.QueuedConnection)
        never.wait()

class StubbornBackend(ScriptedBackend):
    def session(self, key, model, context_size):
        return StubbornSession(self, key, model, context_size or 4096)

window.show()
window.open_path(sys.argv[1])
window.conversation.use_backend(StubbornBackend)
assert window.conversation.say("Hello")
code = app.exec()  # until the last window closed
print("closed", flush=True)
leave(code)
print("leave returned with a thread running", flush=True)
"""


def test_a_turn_that_ignores_the_cancel_does_not_keep_the_app_from_exiting(tmp_path):
    """A thread that has not ended within the wait is left running, never destroyed (Qt would
    abort): the app saves its layout as it closes, then leaves with the exit code at once."""
    settings = tmp_path / "stubborn" / "parley-studio.ini"
    done = _python(CLOSE_ON_STUBBORN_BACKEND, str(examples_dir() / "chat.json"), timeout=60,
                   env={"PARLEY_STUDIO_SETTINGS": str(settings)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Destroyed while thread" not in done.stderr
    assert done.stdout.split() == ["closed"], "leave() ended the process"
    assert "parley-runtime still running after its window closed" in done.stderr
    assert "geometry" in settings.read_text(), "the layout was saved before leaving"
