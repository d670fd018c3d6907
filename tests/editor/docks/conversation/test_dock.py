"""The Conversation dock on the real sample model: talk, read the chat, and work with the history."""

from __future__ import annotations

import json

import pytest

from editor.docks.conversation.dock import ConversationDock
from editor.docks.conversation.history_dialogs import REPLY, HistoryEditor, VariablesDialog
from runtime.dialogue.dialog_file import load_history
from tests.editor.live import TURN_TIMEOUT_MS, example, sample_model, talk

pytestmark = pytest.mark.model

LINES = [
    "Good evening! I just arrived from the coast road.",
    "Do you have a room for the night?",
    "What is there to eat?",
]


@pytest.fixture(scope="module")
def model() -> str:
    return sample_model()


@pytest.fixture
def chat(window, model):
    window.set_asset(example("chat", model, reply={"max_tokens": 24}))
    return window


def test_three_turns_in_the_chat_view(chat, qtbot):
    conversation = chat.conversation
    dock = chat.dock(ConversationDock)
    records = []
    for line in LINES:
        dock.line.setText(line)
        dock.send_button.click()
        qtbot.waitUntil(lambda: not conversation.busy, timeout=TURN_TIMEOUT_MS)
        records.append(conversation.record(len(records)))
        assert records[-1] is not None, dock.status.text()
    text = dock.chat.toPlainText()
    for line, record in zip(LINES, records):
        assert line in text
        assert record.diagnostics.reply.strip() in text
    assert text.count("Mira replies (reply):") == 3, "each reply names the node that wrote it"
    assert [f"Turn {i}" in text for i in (1, 2, 3)] == [True] * 3 and "Turn 0" not in text, "people count from 1"
    # GenerateAndSpeak replies go to the voice sentence by sentence (shown, and spoken where the platform can).
    assert " ".join(dock.spoken).split() == " ".join(r.diagnostics.reply for r in records).split()
    if dock.voice is None:
        assert not dock.mute_button.isEnabled() and "text-to-speech" in dock.mute_button.toolTip()
    assert dock.send_button.isEnabled() and not dock.stop_button.isEnabled()


def test_export_new_import_and_a_bad_file(chat, qtbot, tmp_path):
    conversation = chat.conversation
    dock = chat.dock(ConversationDock)
    talk(qtbot, conversation, LINES[0])
    talk(qtbot, conversation, LINES[1])
    exported = tmp_path / "dialog.json"
    assert dock.export_to(str(exported))
    saved = load_history(exported)
    assert [t.player for t in saved.history.turns] == LINES[:2]

    dock.new_button.click()
    qtbot.waitUntil(lambda: not conversation.saved.history.turns, timeout=TURN_TIMEOUT_MS)
    assert "Player:" not in dock.chat.toPlainText()

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "parley-dialog", "turns": [{"player": 3}]}), encoding="utf-8")
    talk(qtbot, conversation, LINES[2])
    assert not dock.import_from(str(bad))
    assert "bad.json" in dock.status.text() and "turns.0.player" in dock.status.text()
    assert [t.player for t in conversation.saved.history.turns] == [LINES[2]], "a bad file loses nothing"

    assert dock.import_from(str(exported))
    qtbot.waitUntil(lambda: len(conversation.saved.history.turns) == 2, timeout=TURN_TIMEOUT_MS)
    assert LINES[1] in dock.chat.toPlainText()
    record = talk(qtbot, conversation, "Thank you!")
    replayed = [p.text for p in record.parts["reply"] if p.kind == "history"]
    assert LINES[0] in replayed and LINES[1] in replayed, "the imported history is what the next prompt replays"


def test_seed_and_edit_history(chat, qtbot):
    conversation = chat.conversation
    dock = chat.dock(ConversationDock)
    talk(qtbot, conversation, LINES[0])

    # Edit the reply of turn 0 in place.
    editor = HistoryEditor(conversation.saved, dock.default_node(), dock)
    editor.table.item(0, REPLY).setText("Welcome, stranger. The stew is on.")
    assert conversation.change_history(editor.operation())
    qtbot.waitUntil(lambda: conversation.saved.history.turns[0].entries[0].text.startswith("Welcome, stranger"),
                    timeout=TURN_TIMEOUT_MS)

    # Add a turn: the history is seeded from the rows.
    editor = HistoryEditor(conversation.saved, dock.default_node(), dock)
    editor.add_button.click()
    editor.table.item(1, 0).setText("I will take a room.")
    editor.table.item(1, REPLY).setText("Room three, up the stairs.")
    assert conversation.change_history(editor.operation())
    qtbot.waitUntil(lambda: len(conversation.saved.history.turns) == 2, timeout=TURN_TIMEOUT_MS)
    assert "Room three, up the stairs." in dock.chat.toPlainText()

    record = talk(qtbot, conversation, "Which room was it again?")
    history = [p.text for p in record.parts["reply"] if p.kind == "history"]
    assert history == [LINES[0], "Welcome, stranger. The stew is on.", "I will take a room.",
                       "Room three, up the stairs."]


def test_changed_variables_reach_the_next_prompt(chat, qtbot):
    conversation = chat.conversation
    dialog = VariablesDialog({"player_name": "Traveller", "time_of_day": "evening"})
    dialog.editors["time_of_day"].setText("early morning")
    dialog.editors["player_name"].setText("Aldric")
    assert conversation.set_variables(dialog.values())
    record = talk(qtbot, conversation, "Good day!")
    template = next(p.text for p in record.parts["reply"] if p.kind == "template")
    assert template == "It is early morning. The player's name is Aldric."
