"""Friction 19 in the real Conversation dock on the scripted backend: after a regeneration the dock
offers to replay the later turns on the new branch, a turn that comes out as before is the same
alternative (no "3/3" beside an identical "2/3"), and "rewind here" hands back that turn's line."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QUrl

from runtime.asset.file import load_asset
from runtime.backends.scripted import ScriptedBackend, default_reply
from runtime.resources import examples_dir
from tests.editor.live import talk

LINES = ["Good evening!", "Is there a room free?", "What is there to eat?", "And to drink?"]
WAIT_MS = 60_000  # generous for a busy machine; scripted turns take milliseconds
SHOTS = Path("/tmp/parley-shots")


@pytest.fixture()
def talked(window, qtbot):
    """Four turns on the chat example; ``version["tag"]`` starts each reply (changing it is a changed graph)."""
    version = {"tag": ""}
    window.set_asset(load_asset(examples_dir() / "chat.json"))
    window.conversation.use_backend(lambda: ScriptedBackend(lambda key, request: version["tag"]
                                                            + default_reply(key, request)))
    for line in LINES:
        talk(qtbot, window.conversation, line, timeout=WAIT_MS)
    return window, version


def idle(conversation) -> bool:
    replay = conversation.replaying
    return not conversation.busy and (replay is None or not replay.pending)


def alternatives_on_path(conversation) -> list[int]:
    tree = conversation.saved.tree
    return [len(tree.alternatives(turn_id)) for turn_id in tree.path()]


def test_regenerate_offers_to_replay_the_later_turns_on_the_new_branch(talked, qtbot):
    window, version = talked
    dock, conversation = window.conversation_dock, window.conversation
    version["tag"] = "Anew: "
    dock._chat_link(QUrl("turn:regenerate:1"))
    qtbot.waitUntil(lambda: idle(conversation) and not dock.later_bar.isHidden(), timeout=WAIT_MS)
    assert len(conversation.saved.history.turns) == 2, "the later turns stay on the old branch until replayed"
    text = dock.later_label.text()
    assert "Turn 2 has a new reply" in text and "2/2" in text and "turns 3\u20134" in text, text
    window.resize(1366, 768)
    SHOTS.mkdir(exist_ok=True)
    dock.grab().save(str(SHOTS / "regenerate-later-offer.png"))

    dock.later_replay_button.click()
    qtbot.waitUntil(lambda: idle(conversation) and len(conversation.saved.history.turns) == 4, timeout=WAIT_MS)
    assert dock.later_bar.isHidden()
    assert [t.player for t in conversation.saved.history.turns] == LINES
    assert all(e.text.startswith("Anew: ") for t in conversation.saved.history.turns[1:] for e in t.entries
               if e.node == "reply")
    assert alternatives_on_path(conversation) == [1, 2, 1, 1]
    size = len(conversation.saved.tree)

    # replaying those turns again changes nothing they said: the same turns, no alternative like them
    dock._chat_link(QUrl("turn:replay:2"))
    qtbot.waitUntil(lambda: idle(conversation) and conversation.replaying is not None
                    and not conversation.replaying.pending, timeout=WAIT_MS)
    assert len(conversation.saved.tree) == size and alternatives_on_path(conversation) == [1, 2, 1, 1]
    chat = dock.chat.toPlainText()
    assert chat.count("same reply") == 2 and "2/2" in chat and "1/2" not in chat and "/3" not in chat


def test_a_regeneration_that_comes_out_as_before_adds_no_alternative(talked, qtbot):
    window, _version = talked
    dock, conversation = window.conversation_dock, window.conversation
    size = len(conversation.saved.tree)
    dock._chat_link(QUrl("turn:regenerate:3"))  # the last turn: nothing after it to offer
    qtbot.waitUntil(lambda: idle(conversation) and "came out as before" in dock.status.text(), timeout=WAIT_MS)
    assert len(conversation.saved.tree) == size and alternatives_on_path(conversation) == [1, 1, 1, 1]
    assert "Re-roll seeds" in dock.status.text() and dock.later_bar.isHidden()
    assert "1/2" not in dock.chat.toPlainText() and "2/2" not in dock.chat.toPlainText()


def test_rewind_here_puts_that_turns_line_in_the_box_selected(talked, qtbot):
    window, _version = talked
    dock, conversation = window.conversation_dock, window.conversation
    dock.line.setText("half a thought")
    with qtbot.waitSignal(conversation.history_changed, timeout=WAIT_MS):
        dock._chat_link(QUrl("turn:rewind:2"))
    assert len(conversation.saved.history.turns) == 2
    assert dock.line.text() == LINES[2] and dock.line.selectedText() == LINES[2]
    assert "its line is in the box" in dock.status.text()
    SHOTS.mkdir(exist_ok=True)
    dock.grab().save(str(SHOTS / "rewind-line.png"))
    # sent as it is, it is turn 3 again: the same turn, not an alternative that reads the same
    dock.send_button.click()
    qtbot.waitUntil(lambda: idle(conversation) and len(conversation.saved.history.turns) == 3, timeout=WAIT_MS)
    assert alternatives_on_path(conversation) == [1, 1, 1] and dock.line.text() == ""


def test_compare_names_each_turn_of_another_branch_apart(talked, qtbot):
    """Two regenerations of turn 2, each with the later turns replayed: the Turn Inspector's Compare list
    offers turns 3 and 4 of both other branches, each named by the alternative its branch takes."""
    from editor.docks.turn_inspector.dock import TurnInspectorDock

    window, version = talked
    dock, conversation = window.conversation_dock, window.conversation
    for tag in ("Second: ", "Third: "):
        version["tag"] = tag
        dock._chat_link(QUrl("turn:regenerate:1"))
        qtbot.waitUntil(lambda: idle(conversation) and not dock.later_bar.isHidden(), timeout=WAIT_MS)
        dock.later_replay_button.click()
        qtbot.waitUntil(lambda: idle(conversation) and len(conversation.saved.history.turns) == 4, timeout=WAIT_MS)
    assert alternatives_on_path(conversation) == [1, 3, 1, 1]
    inspector = window.dock(TurnInspectorDock)
    inspector.refresh()
    picker = inspector.compare_picker
    labels = [picker.itemText(i) for i in range(picker.count())]
    elsewhere = [label for label in labels if "branch (" in label]
    assert len(elsewhere) == 4, labels  # turns 3 and 4 of the first two alternatives of turn 2
    assert len(set(elsewhere)) == 4, labels
    assert any(label.startswith("Turn 4 \u00b7 branch (turn 2: 1/3)") for label in elsewhere), labels
    assert any(label.startswith("Turn 4 \u00b7 branch (turn 2: 2/3): \u201cSecond: ") for label in elsewhere), labels
    window.resize(1366, 768)
    picker.showPopup()
    SHOTS.mkdir(exist_ok=True)
    picker.view().window().grab().save(str(SHOTS / "compare-branches.png"))
    picker.hidePopup()
