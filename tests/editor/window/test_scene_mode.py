"""A scene in the window, on the deterministic backend: opening the tavern example, a round's lines with
their speakers in the Conversation dock, each NPC's turn in the Turn Inspector as that NPC saw it, the
canvas one NPC's graph at a time, to, whisper, join and leave, carry on, rewind, regenerate and replay."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import pytest

from editor.docks.turn_inspector.dock import TurnInspectorDock
from editor.model.commands import SetNodeFieldCommand
from editor.session.scene_view import PLAYER_TURN
from runtime.backends.scripted import ScriptedBackend, default_reply
from runtime.problems import BackendError
from runtime.resources import examples_dir

TAVERN = examples_dir() / "scenes" / "tavern.scene.json"
WAIT_MS = 10_000


@pytest.fixture
def scene_window(make_window, tmp_path: Path, qtbot):
    """A window with a copy of the tavern scene open (its NPCs' assets beside it), on the scripted backend."""
    folder = tmp_path / "examples"
    shutil.copytree(examples_dir(), folder)
    window = make_window()
    window.scene.backend_maker = lambda: ScriptedBackend
    with qtbot.waitSignal(window.scene.view.opened, timeout=WAIT_MS):
        assert window.open_path(str(folder / "scenes" / "tavern.scene.json"))
    return window


def _say(window, qtbot, line: str | None, **how) -> None:
    view = window.scene.view
    with qtbot.waitSignal(view.round_finished, timeout=WAIT_MS):
        assert view.actions.say(line, **how)


def _chat(window) -> str:
    return window.conversation_dock.scene_panel.chat.toPlainText()


def test_opening_a_scene_shows_its_first_npc_on_the_canvas_and_the_scene_in_the_conversation(scene_window) -> None:
    window = scene_window
    dock = window.conversation_dock
    assert dock.pages.currentWidget() is dock.scene_panel
    assert window.scene_mode.npc == "mira"
    assert Path(window.document.path).name == "tavern_keeper.json"
    assert "tavern.scene.json: Mira" in window.windowTitle()
    panel = dock.scene_panel
    assert [panel.npc_picker.itemText(i) for i in range(panel.npc_picker.count())] == ["Mira", "Tomas", "Brann"]
    assert [b.text() for b in panel.here_buttons.values()] == ["\u2713 Mira", "\u2713 Tomas", "Brann (away)"]
    # the NPC picker opens another NPC's asset on the canvas; the scene stays open
    panel.npc_picker.setCurrentIndex(1)
    panel.npc_picker.activated.emit(1)
    assert window.scene_mode.npc == "tomas" and Path(window.document.path).name == "bard.json"
    assert window.scene.view.is_open


def test_a_round_shows_each_line_with_its_speaker_and_each_npc_turn_as_it_saw_it(scene_window, qtbot) -> None:
    window = scene_window
    _say(window, qtbot, "Good evening, all!")
    shown = window.scene.view.shown
    assert [(line.speaker, line.name) for line in shown.lines] == [
        ("player", "Traveller"), ("mira", "Mira"), ("tomas", "Tomas")]
    chat = _chat(window)
    assert "Round 1" in chat and "Traveller: Good evening, all!" in chat
    mira_said = shown.lines[1].text
    assert f"Mira: {mira_said}" in chat and f"Tomas: {shown.lines[2].text}" in chat
    assert "Round 1: Mira (round robin), Tomas (round robin)." in window.conversation_dock.scene_panel.status.text()

    # the last line (the bard's) is selected: the inspector shows his turn, his prompt as he saw it
    inspector = window.dock(TurnInspectorDock)
    assert inspector.turn_picker.currentText().startswith("Round 1 \u00b7 Tomas:")
    assert inspector.shown_scene_npc() == "tomas"
    assert "Tomas&#x27;s turn (bard.json), picked by round robin" in inspector.note_label.text()
    assert inspector.record is shown.lines[2].record or inspector.record.diagnostics.reply == shown.lines[2].text
    inspector.show_node("sing")
    prompt = inspector.prompt_view.toPlainText()
    assert f"Mira: {mira_said}" in prompt  # Mira's line is a named user line in the bard's prompt
    assert "Traveller: Good evening, all!" in prompt
    # the canvas shows Mira's graph: the bard's path is not marked on it
    assert window.canvas.highlighted_path() == []

    # a click on Mira's line shows her turn
    window.conversation_dock.scene_panel._link(_Url("line:0:0"))
    assert inspector.turn_picker.currentText().startswith("Round 1 \u00b7 Mira:")
    assert inspector.shown_scene_npc() == "mira"
    assert window.canvas.highlighted_path() == ["guard", "reply"]  # hers is, on her graph
    assert "Traveller: Good evening, all!" in inspector.note_label.text()


class _Url:
    def __init__(self, text: str) -> None:
        self.text = text

    def toString(self) -> str:  # QUrl.toString
        return self.text


def test_to_whisper_join_leave_and_carry_on(scene_window, qtbot) -> None:
    window = scene_window
    view = window.scene.view
    panel = window.conversation_dock.scene_panel
    panel.to_picker.setCurrentIndex(panel.to_picker.findData("tomas"))
    panel.whisper_box.setChecked(True)
    panel.line.setText("A quiet word, bard.")
    with qtbot.waitSignal(view.round_finished, timeout=WAIT_MS):
        assert panel.send()
    first = view.shown.rounds[0]
    assert first.to == "tomas" and first.whisper
    assert first.lines[0].heard_by == ("tomas",) and first.lines[1].speaker == "tomas"
    assert "whispered to Tomas" in _chat(window)

    # Brann joins: a button; he is there for the next round, and the chat says so
    with qtbot.waitSignal(view.changed, timeout=WAIT_MS):
        panel.here_buttons["brann"].click()
    assert view.shown.npc("brann").present and "Brann joins the scene." in _chat(window)
    assert panel.to_picker.findData("brann") >= 0
    _say(window, qtbot, "Brann, any news from the gate?")
    assert view.shown.rounds[1].lines[1].speaker == "brann"
    assert view.shown.rounds[1].notes == ("Brann joins the scene.",)
    # Tomas is out of Brann's earshot: the chat says who did not hear him
    assert "not heard by Tomas" in _chat(window)

    with qtbot.waitSignal(view.changed, timeout=WAIT_MS):
        panel.here_buttons["brann"].click()
    assert not view.shown.npc("brann").present and "Brann leaves the scene." in _chat(window)

    # carry on: the player says nothing, the NPCs talk among themselves
    with qtbot.waitSignal(view.round_finished, timeout=WAIT_MS):
        assert panel.carry_on()
    last = view.shown.rounds[-1]
    assert last.carried_on and all(line.turn != PLAYER_TURN for line in last.lines) and last.lines
    assert "carry on" in _chat(window)


def test_rewind_regenerate_and_replay_say_whether_each_reply_came_out_the_same(scene_window, qtbot) -> None:
    window = scene_window
    view = window.scene.view
    panel = window.conversation_dock.scene_panel
    _say(window, qtbot, "Good evening, all!")
    _say(window, qtbot, "Tomas, a song please!")
    assert len(view.shown.rounds) == 2

    with qtbot.waitSignal(view.changed, timeout=WAIT_MS):
        assert panel.rewind()
    assert len(view.shown.rounds) == 1
    assert panel.line.text() == "Tomas, a song please!"  # its line is back in the box
    assert "Round 2" not in _chat(window)

    _say(window, qtbot, "Tomas, a song please!")
    before = [line.text for line in view.shown.lines]
    with qtbot.waitSignal(view.replayed, timeout=WAIT_MS) as regenerated:
        assert panel.regenerate()
    report = regenerated.args[0]
    assert (report.start, report.rounds, report.changed) == (1, 1, 0) and report.same == 2
    assert [line.text for line in view.shown.lines] == before
    assert [line.same for line in view.shown.rounds[1].lines if line.turn != PLAYER_TURN] == [True, True]
    assert "same reply" in _chat(window)
    assert "Round 2 said again: 2 NPC lines the same." in panel.status.text()

    with qtbot.waitSignal(view.replayed, timeout=WAIT_MS) as replayed:
        assert panel.replay()
    assert (replayed.args[0].rounds, replayed.args[0].changed) == (2, 0)
    assert [line.text for line in view.shown.lines] == before


def test_edits_to_the_npc_on_the_canvas_apply_to_its_next_turn_and_opening_an_asset_leaves_the_scene(
        scene_window, qtbot) -> None:
    window = scene_window
    view = window.scene.view
    _say(window, qtbot, "Mira, a room for the night?", to="mira")
    # a new system prompt for Mira's reply on the canvas: her next turn runs the edited graph
    old = window.document.node("reply").system_prompt
    window.document.push(SetNodeFieldCommand(window.document, "reply", "system_prompt", old, "You are Mira. Be brief."))
    _say(window, qtbot, "Mira, and supper?", to="mira")
    turn = view.shown.rounds[1].lines[1]
    assert turn.speaker == "mira"
    reply = next(n for n in turn.record.diagnostics.nodes if n.node == "reply")
    assert reply.input.prompt[0].content.startswith("You are Mira. Be brief.")

    # opening a plain asset leaves the scene: the dock shows the single-agent conversation again
    window.document.undo_stack.setClean()  # (else the window asks about the unsaved edit)
    assert window.open_path(str(examples_dir() / "bard.json"))
    assert not view.is_open and not window.scene_mode.active
    assert window.conversation_dock.pages.currentIndex() == 0
    assert "scene" not in window.windowTitle()


def test_a_failed_round_is_taken_back_whole_with_its_line_back_in_the_box(make_window, tmp_path: Path, qtbot) -> None:
    def reply(key: str, request) -> str:
        if key.startswith("scene/tomas/"):
            raise BackendError("the bard's server is down")
        return default_reply(key, request)

    shutil.copytree(examples_dir(), tmp_path / "examples")
    window = make_window()
    window.scene.backend_maker = lambda: (lambda: ScriptedBackend(reply))
    view = window.scene.view
    with qtbot.waitSignal(view.opened, timeout=WAIT_MS):
        assert window.open_path(str(tmp_path / "examples" / "scenes" / "tavern.scene.json"))
    panel = window.conversation_dock.scene_panel
    panel.line.setText("Good evening, all!")
    with qtbot.waitSignal(view.failed, timeout=WAIT_MS):
        assert panel.send()
    assert view.shown.rounds == () and panel.line.text() == "Good evening, all!"
    assert "the bard's server is down" in panel.status.text()
    assert "Good evening" not in _chat(window)  # Mira's line went with the round


def test_file_examples_opens_the_tavern_scene_as_an_unsaved_copy(make_window, qtbot) -> None:
    window = make_window()
    window.scene.backend_maker = lambda: ScriptedBackend
    action = next(a for a in window.examples_menu.actions() if str(a.data()).endswith("tavern.scene.json"))
    assert action.text() == "Tavern (scene)"
    with qtbot.waitSignal(window.scene.view.opened, timeout=WAIT_MS):
        action.trigger()
    assert window.scene_mode.npc == "mira" and window.document.path == "", "an example's NPCs open as copies"
    assert window.document.asset.name.startswith("Mira")


def test_stop_takes_the_running_round_back_whole(make_window, tmp_path: Path, qtbot) -> None:
    started = threading.Event()

    def reply(key: str, request) -> str:
        if key.startswith("scene/tomas/"):
            started.set()
            time.sleep(0.3)  # Stop is pressed meanwhile: the tokens after it are never streamed
        return default_reply(key, request)

    shutil.copytree(examples_dir(), tmp_path / "examples")
    window = make_window()
    window.scene.backend_maker = lambda: (lambda: ScriptedBackend(reply))
    view = window.scene.view
    with qtbot.waitSignal(view.opened, timeout=WAIT_MS):
        assert window.open_path(str(tmp_path / "examples" / "scenes" / "tavern.scene.json"))
    panel = window.conversation_dock.scene_panel
    panel.line.setText("Good evening, all!")
    with qtbot.waitSignal(view.failed, timeout=WAIT_MS) as failed:
        assert panel.send()
        qtbot.waitUntil(started.is_set, timeout=WAIT_MS)
        assert panel.stop_button.isEnabled()
        panel.stop_button.click()
    assert failed.args[0].cancelled
    assert view.shown.rounds == () and panel.line.text() == "Good evening, all!"
    assert panel.status.text() == "Stopped: the round was taken back whole."
    assert panel.send_button.isEnabled() and not panel.stop_button.isEnabled()
