"""Edit where you talk and test (issue 38, major 5 and two minors): the Talk and Test workspaces show
the selected node's prompt and sampling, so a prompt fix and a retry need no workspace switch; Talk
gives the keyboard to the player's line; a click in a field still holding a new node's starting
value selects it; and the Turn Inspector says which warnings a turn had."""

# ruff: noqa: F401, F811  (the tests take the imported sized_window fixture by name)
from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QTextCursor
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication

from editor.window.start_page import empty_agent
from editor.window.workspace import EDIT_WHILE_RUNNING
from runtime.backends.scripted import ScriptedBackend, default_reply
from runtime.diagnostics import TurnDiagnostics
from runtime.resources import examples_dir
from tests.editor.live import talk
from tests.editor.window.test_workspace_layout import canvas_share, settle, sized_window

TAVERN = str(examples_dir() / "tavern_keeper.json")
WAIT_MS = 60_000  # generous for a busy machine; scripted turns take milliseconds
FIX_AND_RETRY_MOST = 6


def system_prompt_of(request) -> str:
    return next((m.content for m in request.messages if m.role == "system"), "")


def prompt_echo() -> ScriptedBackend:
    """Replies that start with the first words of the node's system prompt: a prompt fix shows in them."""
    def reply(key, request) -> str:
        if request.choices or request.json_schema is not None:  # the guard's classifier
            return default_reply(key, request)
        return " ".join(system_prompt_of(request).split()[:3]) + " ..."

    return ScriptedBackend(reply)


def last_reply(conversation) -> str:
    return " ".join(e.text for e in conversation.saved.history.turns[-1].entries if e.node == "reply")


def click_node(window, node_id: str) -> None:
    """A real click on the node's title bar on the canvas."""
    viewer = window.canvas.viewer
    rect = window.canvas.drawing.nodes[node_id].view.sceneBoundingRect()
    at = viewer.mapFromScene(rect.center().x(), rect.top() + 8)
    QTest.mouseClick(viewer.viewport(), Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, at)


def click_chat_link(chat, href: str) -> None:
    """A real click on the chat's link to ``href`` (a turn's "regenerate")."""
    document = chat.document()
    block = document.begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fragment = it.fragment()
            if fragment.charFormat().anchorHref() == href:
                cursor = QTextCursor(document)
                cursor.setPosition(fragment.position() + fragment.length() // 2)
                rect = chat.cursorRect(cursor)
                assert chat.viewport().rect().contains(rect.center()), "the link is on screen"
                QTest.mouseClick(chat.viewport(), Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier,
                                 rect.center())
                return
            it += 1
        block = block.next()
    raise AssertionError(f"no link to {href} in the chat")


@pytest.mark.parametrize("preset", ["Talk", "Test"])
@pytest.mark.parametrize(("width", "height"), [(1366, 768), (1920, 1080)], ids=["1366x768", "1920x1080"])
def test_talk_and_test_show_the_selected_nodes_prompt_and_sampling(sized_window, qtbot, preset, width, height):
    window = sized_window(width, height, TAVERN)
    window.workspace.switch(preset)
    window.canvas.select(["reply"])
    settle(qtbot, window)
    assert window.size().toTuple() == (width, height), "no dock pushed the window past its size"
    properties = window.properties
    assert properties.isVisible() and properties.node_id == "reply"
    assert not window.tabifiedDockWidgets(properties), "beside the others, not behind them"
    shown = {name for name, box in properties.form.sections.items() if box.isVisibleTo(properties.form)}
    assert shown == set(EDIT_WHILE_RUNNING), shown
    assert properties.form.editors["system_prompt"].isVisible()
    assert properties.form.editors["temperature"].isVisible()
    if (width, height) == (1920, 1080):
        assert canvas_share(window) >= 0.50, f"{preset}: the canvas is {canvas_share(window):.1%} of the window"
    # "all settings" shows the rest until the next switch; Author shows every section
    properties.sections_label.linkActivated.emit("all")
    assert all(box.isVisibleTo(properties.form) for box in properties.form.sections.values())
    window.workspace.switch("Author")
    settle(qtbot, window)
    assert all(box.isVisibleTo(properties.form) for box in properties.form.sections.values())
    assert not properties.sections_label.isVisible()


def test_fix_and_retry_in_talk_takes_at_most_six_actions(sized_window, qtbot):
    """Select a node, change its system prompt, say the line again: each click, key chord and typed
    text counted as one action, in the real window (it took 10, with two workspace switches)."""
    window = sized_window(1920, 1080, TAVERN)
    window.workspace.switch("Talk")
    settle(qtbot, window)
    window.activateWindow()
    conversation, dock = window.conversation, window.conversation_dock
    conversation.use_backend(prompt_echo)
    talk(qtbot, conversation, "Is there a room free?", timeout=WAIT_MS)
    before = last_reply(conversation)
    actions = 0

    click_node(window, "reply")  # 1: select the node that answered
    actions += 1
    settle(qtbot, window)
    assert window.canvas.selected_ids() == ["reply"] and window.properties.node_id == "reply"
    text = window.properties.form.editors["system_prompt"].text
    assert text.isVisible(), "its prompt is on screen in Talk"
    QTest.mouseClick(text.viewport(), Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier,
                     QPoint(20, 10))  # 2: into the prompt
    actions += 1
    QTest.keyClick(text, Qt.Key.Key_A, Qt.KeyboardModifier.ControlModifier)  # 3: select it all
    actions += 1
    QTest.keyClicks(text, "Grumpy keeper Mira answers in one short sentence.")  # 4: the fix, typed
    actions += 1
    assert window.document.node("reply").system_prompt.startswith("Grumpy keeper Mira")
    assert window.document.undo_stack.canUndo(), "the fix is an undo step of the document"
    turn = len(conversation.saved.history.turns) - 1
    click_chat_link(dock.chat, f"turn:regenerate:{turn}")  # 5: say the line again
    actions += 1
    qtbot.waitUntil(lambda: not conversation.busy and last_reply(conversation) != before,
                    timeout=WAIT_MS)
    assert last_reply(conversation).startswith("Grumpy keeper Mira"), last_reply(conversation)
    assert window.workspace.current == "Talk", "no workspace switch"
    assert actions <= FIX_AND_RETRY_MOST


def test_talk_gives_the_keyboard_to_the_players_line(sized_window, qtbot):
    window = sized_window(1366, 768, TAVERN)
    settle(qtbot, window)
    window.activateWindow()
    window.canvas.viewer.setFocus()
    QTest.keyClick(window.canvas.viewer, Qt.Key.Key_2, Qt.KeyboardModifier.ControlModifier)
    settle(qtbot, window)
    assert window.workspace.current == "Talk"
    assert QApplication.focusWidget() is window.conversation_dock.line, QApplication.focusWidget()


def test_a_click_in_a_starting_title_selects_it(sized_window, qtbot):
    """"Reply" + typing gave "ReplyGreet": a click in a field holding a new node's starting value
    selects it, so typing replaces it; a title the designer wrote is clicked into as usual."""
    window = sized_window(1366, 768)
    window.set_asset(empty_agent())  # File > New's agent: one node, "Reply"
    window.workspace.switch("Author")
    node_id = window.document.asset.nodes[0].id
    window.canvas.select([node_id])
    settle(qtbot, window)
    window.activateWindow()
    line = window.properties.form.editors["title"].line
    start = line.text()
    assert start, "the new agent's node has a starting title"
    QTest.mouseClick(line, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, QPoint(4, line.height() // 2))
    qtbot.waitUntil(lambda: line.selectedText() == start, timeout=2000)
    QTest.keyClicks(line, "Greet")
    QTest.keyClick(line, Qt.Key.Key_Return)
    assert window.document.node(node_id).title == "Greet"

    window.canvas.viewer.setFocus()
    QTest.mouseClick(line, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, QPoint(4, line.height() // 2))
    qtbot.wait(20)
    assert line.selectedText() == "", "a title the designer wrote keeps the click's cursor"


def test_a_new_notes_text_is_selected_when_its_editor_opens(sized_window, qtbot):
    window = sized_window(1366, 768)
    actions = window.comment_actions
    note_id = actions.add_note()
    dialog = actions.edit_comment(note_id)
    try:
        assert dialog.text_edit.textCursor().selectedText() == "Note", "typing replaces the new note's text"
    finally:
        dialog.reject()


def test_the_inspector_says_which_warnings_a_turn_had():
    from editor.docks.turn_inspector.dock import warnings_html

    diag = TurnDiagnostics(turn=0, player="hi", path=["reply"],
                           warnings=["reply: the prompt was trimmed to fit the context"])
    text = warnings_html(diag.warnings, diag.path)
    assert "1 warning:" in text and "the prompt was trimmed to fit the context" in text
    assert "href='reply'" in text, "the node is a link to it"
    two = warnings_html(["reply: one", "a note of the turn"], ["reply"])
    assert "2 warnings:" in two and "one" in two and "a note of the turn" in two
