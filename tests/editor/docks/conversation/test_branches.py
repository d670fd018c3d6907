"""The designer's loop in the editor, on the sample model: regenerate a reply and browse the
alternatives, compare them in the Turn Inspector, rewind, edit a line, replay the conversation
with the graph as it is now, and the branches panel."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
from PySide6.QtCore import QUrl

from editor.docks.turn_inspector.dock import TurnInspectorDock
from editor.model.commands import SetNodeFieldCommand
from tests.editor.live import TURN_TIMEOUT_MS, example, sample_model

pytestmark = pytest.mark.model

LINES = ["Good evening! Is there a room free tonight?", "What is there to eat?", "And to drink?"]
SHOTS = Path("/tmp/parley-shots")


def wait_idle(qtbot, conversation, timeout: int = TURN_TIMEOUT_MS) -> None:
    qtbot.waitUntil(lambda: not conversation.busy and (conversation.replaying is None or not conversation.replaying.pending
                                                        or conversation.replaying.step), timeout=timeout)


def click(qtbot, dock, link: str) -> None:
    with qtbot.waitSignal(dock.view.history_changed, timeout=TURN_TIMEOUT_MS):
        dock._chat_link(QUrl(link))
    wait_idle(qtbot, dock.actions)


def chat_text(dock) -> str:
    return dock.chat.toPlainText()


@pytest.fixture()
def talked(window, qtbot):
    window.set_asset(example("chat", sample_model(), reply={"max_tokens": 16}))
    conversation = window.conversation
    for line in LINES:
        with qtbot.waitSignal(conversation.history_changed, timeout=TURN_TIMEOUT_MS):
            assert conversation.say(line)
        wait_idle(qtbot, conversation)
    return window


def test_regenerate_browse_and_compare_alternatives(talked, qtbot):
    window, dock = talked, talked.conversation_dock
    conversation = window.conversation
    first_reply = conversation.record(1).diagnostics.reply
    conversation.reroll_seeds()  # another sample: the same seed and prompt would give the same reply
    click(qtbot, dock, "turn:regenerate:1")
    saved = conversation.saved
    assert [t.player for t in saved.history.turns] == LINES[:2], "turn 3 stays on the old branch"
    assert "1/2" not in chat_text(dock) and "2/2" in chat_text(dock)
    regenerated = conversation.record(1)
    assert regenerated.turn_id != 1

    # the Turn Inspector compares the two alternatives, prompts and outputs, word by word
    inspector = window.dock(TurnInspectorDock)
    inspector.pick_turn(regenerated.turn_id)
    inspector.show_node("reply")
    index = next(i for i in range(inspector.compare_picker.count())
                 if "alternative 1/2" in inspector.compare_picker.itemText(i))
    inspector.compare_picker.setCurrentIndex(index)
    diff = inspector.diff_html()
    assert "OUTPUT" in diff and "PROMPT" in diff and "@@" not in diff
    if regenerated.diagnostics.reply != first_reply:
        assert "class='add" in diff and "class='del" in diff
    assert "The prompts are the same." in diff, "same line, same history: only the seed differed"

    # back to the first alternative: the old branch with all three turns
    first_id = saved.tree.alternatives(regenerated.turn_id)[0]
    click(qtbot, dock, f"branch:{first_id}")
    assert [t.player for t in conversation.saved.history.turns] == LINES
    assert "1/2" in chat_text(dock)
    window.resize(1366, 768)
    SHOTS.mkdir(exist_ok=True)
    window.grab().save(str(SHOTS / "regenerate-1366x768.png"))


def test_rewind_edit_and_replay_with_the_changed_graph(talked, qtbot):
    window, dock = talked, talked.conversation_dock
    conversation = window.conversation
    # a replay on the same build, same graph and same seeds gives the same replies
    conversation.replay(0)
    wait_idle(qtbot, conversation)
    replay = conversation.replaying
    assert replay is not None and not replay.pending and replay.total == 3
    assert replay.changed == 0, [conversation.record(i).diagnostics.reply for i in range(3)]
    assert "3 of 3 turns sent" in dock.replay_label.text() and "0 replies changed" in dock.replay_label.text()
    assert chat_text(dock).count("same reply") == 3

    # change the graph, then replay step by step from turn 2: turn 1 generates nothing
    doc = window.document
    node = doc.node("reply")
    doc.push(SetNodeFieldCommand(doc, "reply", "system_prompt", node.system_prompt,
                                 "You are Mira. Answer every question with a riddle about cheese."))
    ran_before = len(conversation.records)
    dock.step_by_step.setChecked(True)
    with qtbot.waitSignal(conversation.history_changed, timeout=TURN_TIMEOUT_MS):
        dock._chat_link(QUrl("turn:replay:1"))
    assert conversation.replaying.step and conversation.replaying.total == 2
    for _ in range(2):
        with qtbot.waitSignal(conversation.turn_finished, timeout=TURN_TIMEOUT_MS):
            dock.replay_step_button.click()
        wait_idle(qtbot, conversation)
    assert len(conversation.records) == ran_before + 2, "only the two replayed turns ran"
    assert conversation.replaying.changed >= 1 and "reply changed" in chat_text(dock)

    # rewind to before turn 3, then edit turn 1's line: a marked, edited alternative
    click(qtbot, dock, "turn:rewind:2")
    assert len(conversation.saved.history.turns) == 2
    with qtbot.waitSignal(conversation.turn_finished, timeout=TURN_TIMEOUT_MS):
        assert conversation.edit_line(0, "Good morning! Any breakfast?")
    wait_idle(qtbot, conversation)
    assert [t.player for t in conversation.saved.history.turns] == ["Good morning! Any breakfast?"]
    assert "\u270e edited" in chat_text(dock)

    # the branches panel lists every turn ever written, the current branch in bold (the dock in view: a
    # workspace may keep it behind another tab)
    dock.show()
    dock.raise_()
    qtbot.waitUntil(dock.isVisible, timeout=5000)
    dock.branches_button.setChecked(True)
    dock.toggle_branches()
    items = []

    def walk(item):
        for i in range(item.childCount()):
            items.append(item.child(i))
            walk(item.child(i))

    walk(dock.branches.invisibleRootItem())
    # 3 turns, 2 replayed with the changed graph, 1 edited: the first replay's turns came out the same, so they
    # are the turns already there, not 3 more alternatives like them
    assert len(items) == len(conversation.saved.tree) >= 6
    assert sum(item.font(0).bold() for item in items) == 1
    for size in ((1366, 768), (1920, 1080)):
        window.resize(*size)
        qtbot.wait(50)
        SHOTS.mkdir(exist_ok=True)
        window.grab().save(str(SHOTS / f"branches-{size[0]}x{size[1]}.png"))


def test_turn_numbers_start_at_one_and_the_inspector_opens_on_the_reply(window, qtbot):
    window.set_asset(example("intent_router", sample_model(), greet={"max_tokens": 8}))
    conversation = window.conversation
    with qtbot.waitSignal(conversation.history_changed, timeout=TURN_TIMEOUT_MS):
        conversation.say("Hello there!")
    wait_idle(qtbot, conversation)
    inspector = window.dock(TurnInspectorDock)
    assert inspector.turn_picker.currentText().startswith("Turn 1:")
    record = inspector.record
    replying = [n.node for n in record.diagnostics.nodes if record.asset.node(n.node).PLAYER_FACING]
    assert inspector.current_node_id() == replying[-1], "the inspector opens on the node that replied"
    # a classifier's budget bar shows its prompt, not "no model call"
    inspector.show_node(record.diagnostics.nodes[0].node)
    assert inspector.budget_bar.shares is not None and sum(inspector.budget_bar.shares.segments.values()) > 0
    text = re.sub(r"<[^>]+>", "", html.unescape(window.conversation_dock.chat.toHtml()))
    assert "Turn 1" in text and "Turn 0" not in text


def test_editing_a_reply_keeps_it_as_written_and_replays_the_later_turns(talked, qtbot, monkeypatch):
    window, dock = talked, talked.conversation_dock
    conversation = window.conversation
    old_players = [t.player for t in conversation.saved.history.turns]

    class Dialog:  # the designer rewrites turn 1's reply and asks for the later turns to be replayed
        def __init__(self, number, player, reply, later, parent=None):
            assert number == 1 and later == 2 and reply
            self.player = player

        def exec(self):
            return True

        def values(self):
            return self.player, "Welcome! We have one room left, by the fire.", True

    monkeypatch.setattr("editor.docks.conversation.turn_links.EditTurnDialog", Dialog)
    dock.edit_turn(0)
    qtbot.waitUntil(lambda: conversation.replaying is not None and not conversation.replaying.pending
                    and not conversation.busy, timeout=TURN_TIMEOUT_MS)
    saved = conversation.saved
    assert [t.player for t in saved.history.turns] == old_players, "turns 2 and 3 were replayed after the edit"
    first = saved.tree.nodes[saved.tree.path()[0]]
    assert first.edited and any(getattr(e, "text", "") == "Welcome! We have one room left, by the fire."
                                for e in first.turn.entries)
    assert conversation.replaying.total == 2
    assert "\u270e edited" in chat_text(dock)
    prompt = conversation.record(1).diagnostics.nodes[0].input.prompt
    assert any("one room left, by the fire" in m.content for m in prompt), "the next turn saw the edited reply"
