"""The editor attaches to a running `parley serve` (Backend > Attach to Server…): a designer follows a
session a game drives, read-only, with each turn in the Conversation dock (marked via server), the Turn
Inspector, Raw JSON and the canvas's path marks; takes it over into a local conversation; detaches
leaving the game's session as it was. The game here is the Python client, on the test's thread."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest
from PySide6.QtCore import Qt, QUrl
from PySide6.QtWidgets import QApplication

from editor import settings as app_settings
from editor.dialogs.attach import ADDRESS_KEY
from editor.docks.raw_json.dock import RawJsonDock
from editor.docks.turn_inspector.dock import TurnInspectorDock
from editor.session.follow import server_address
from editor.widgets.theme import apply_theme
from runtime.backends.scripted import ScriptedBackend
from runtime.diagnostics import TurnDiagnostics
from runtime.resources import examples_dir
from runtime.serve.client import ParleyClient, ParleyError
from runtime.serve.server import running_server

WAIT_MS = 30_000
TOKEN = "attach-test-secret"
LINES = ["How many arrows are there?", "How many shields are there?"]
ANSWERS = ["240", "17"]  # what the game's tool answers, turn by turn
SHOTS = Path("/tmp/parley-shots")


@pytest.fixture()
def served():
    """A server with the examples on the scripted backend, wanting a token, and the game's client."""
    with running_server(ScriptedBackend(), [examples_dir()], token=TOKEN) as url, ParleyClient(url, TOKEN) as game:
        yield url, game


def game_turn(game: ParleyClient, session_id: str, line: str, result: str):
    """The game says ``line``; its tool answers ``result``."""
    return game.turn(session_id, line, tools=lambda _call: result)


def attach_with_dialog(qtbot, window, url: str, session_id: str, token: str = TOKEN) -> None:
    """Backend > Attach to Server…: the address and token, List Sessions, pick, Attach; wait until the
    session's turns so far are shown."""
    dialog = window.open_attach_dialog()
    dialog.address.setText(url)
    dialog.token.setText(token)
    with qtbot.waitSignal(dialog.listed, timeout=WAIT_MS) as listed:
        assert dialog.list_sessions()
    assert listed.args == [True], dialog.status.text()
    assert dialog.pick(session_id), [s.id for s in dialog.sessions]
    with qtbot.waitSignal(window.attach.opened, timeout=WAIT_MS):
        dialog.accept()


def screenshot(window, docks, path: Path) -> None:
    """The window as the editor draws it (its dark theme; put back after), the docks raised and roomy."""
    app = QApplication.instance()
    palette, style = app.palette(), app.style().name()
    apply_theme(app)
    try:
        window.resize(1760, 1000)
        for dock in docks:
            dock.show()
            dock.raise_()
            share = 0.45 if window.dockWidgetArea(dock) == Qt.DockWidgetArea.BottomDockWidgetArea else 0.68
            window.resizeDocks([dock], [int(window.height() * share)], Qt.Orientation.Vertical)
        window.resizeDocks([window.palette], [170], Qt.Orientation.Horizontal)  # room for the graph
        QApplication.processEvents()
        window.canvas.frame_for_reading()
        QApplication.processEvents()
        path.parent.mkdir(exist_ok=True)
        assert window.grab().save(str(path))
    finally:
        app.setStyle(style)
        app.setPalette(palette)


def chat_text(window) -> str:
    return window.conversation_dock.chat.toPlainText()


def test_following_two_turns_of_a_game_then_detach_and_take_over(served, window, qtbot):
    url, game = served
    window.conversation.use_backend(ScriptedBackend)  # the local agent, once taken over
    window.open_path(str(examples_dir() / "tool_calling.json"), as_example=True)
    npc = game.create_session("tool_calling.json")
    attach = window.attach
    attach_with_dialog(qtbot, window, url, npc.id)
    dock, conversation = window.conversation_dock, window.conversation
    assert attach.attached and attach.following and not attach.mismatch
    assert dock.read_only and dock.follow_panel is window.attach_panel and window.attach_panel.isVisible()

    # the game talks; each turn appears in the editor as it finishes there
    outcomes = []
    for line, result in zip(LINES, ANSWERS, strict=True):
        with qtbot.waitSignal(attach.turn_shown, timeout=WAIT_MS):
            outcomes.append(game_turn(game, npc.id, line, result))
    last = outcomes[-1]
    assert last.reply.endswith("heard: 17") and last.path == ["lookup", "reply"]

    inspector = window.dock(TurnInspectorDock)
    inspector.show_node("reply")
    screenshot(window, [window.conversation_dock, inspector], SHOTS / "attach.png")

    # the Conversation dock: both turns, their tool calls, marked via server, read-only
    text = chat_text(window)
    assert all(line in text for line in LINES) and outcomes[0].reply in text and last.reply in text
    assert text.count(f"via server {url}") == 2, text
    assert "check_stock" in text and "240" in text
    assert "regenerate" not in text and "rewind here" not in text, "no actions on a followed session"
    assert not dock.send_button.isEnabled() and not dock.line.isEnabled() and not dock.import_button.isEnabled()
    saved = conversation.saved
    dock.line.setText("sneaking a line in")
    dock.send()
    dock._chat_link(QUrl("turn:regenerate:0"))
    assert conversation.saved is saved and not conversation.busy, "nothing ran locally"
    assert "Read-only" in dock.status.text()
    assert "Following live: 2 turns" in window.attach_panel.label.text()

    # the Turn Inspector: the last turn's path and the reply node's prompt, from the server's recording
    assert inspector.turn_picker.currentText().startswith("Turn 2: How many shields")
    assert f"on server {url}" in inspector.path_label.text()
    inspector.show_node("reply")
    record = inspector.record
    assert record is not None and record.turn_id == last.turn_id and record.parts["reply"]
    prompt = inspector.prompt_view.toPlainText()
    assert "You are Hilde, the quartermaster" in prompt and LINES[1] in prompt and "17" in prompt
    assert inspector.budget_bar.isVisible(), "the prompt's parts with their token costs came along"

    # Raw JSON: the turn's diagnostics as the server wrote them
    raw = window.dock(RawJsonDock)
    assert raw.data == TurnDiagnostics.model_validate(last.diagnostics).model_dump(mode="json")
    assert raw.data["player"] == LINES[1] and raw.data["path"] == last.path

    # the canvas marks the turn's path
    assert window.canvas.highlighted_path() == last.path

    # Detach: following stops, the game's session is as it was, the window's own conversation is back
    before = game.session(npc.id)
    window.attach_panel.detach_button.click()
    assert not attach.attached and attach.follow_job is None
    after = game.session(npc.id)
    assert after.turns == before.turns == 2 and not after.busy
    assert npc.id in [s.id for s in game.sessions()]
    assert [t.line for t in game.turns(npc.id)] == LINES
    assert not dock.read_only and dock.send_button.isEnabled() and dock.follow_panel is None
    assert "via server" not in chat_text(window) and conversation.records == {}

    # the address is remembered, the token never
    store = app_settings.app_settings()
    assert store.value(ADDRESS_KEY) == url
    assert all(TOKEN not in str(store.value(key)) for key in store.allKeys())
    assert TOKEN not in Path(store.fileName()).read_text(encoding="utf-8")

    # attach again: the turns so far come from the server's history and turn details
    attach_with_dialog(qtbot, window, url, npc.id)
    assert chat_text(window).count(f"via server {url}") == 2
    assert sorted(conversation.records) == sorted(o.turn_id for o in outcomes)
    assert window.canvas.highlighted_path() == last.path

    # Take over: the two turns are the local conversation's, to regenerate and rewind here
    with qtbot.waitSignal(attach.taken_over, timeout=WAIT_MS):
        window.attach_panel.take_over_button.click()
    qtbot.waitUntil(lambda: len(conversation.records) == 2 and len(conversation.saved.history.turns) == 2,
                    timeout=WAIT_MS)
    assert not attach.attached and not dock.read_only and dock.send_button.isEnabled()
    assert [t.player for t in conversation.saved.history.turns] == LINES
    assert chat_text(window).count(f"via server {url}") == 2, "where each turn ran stays with it"
    assert "regenerate" in chat_text(window)
    with qtbot.waitSignal(conversation.history_changed, timeout=WAIT_MS):
        assert conversation.regenerate(1)
    qtbot.waitUntil(lambda: not conversation.busy, timeout=WAIT_MS)
    tree = conversation.saved.tree
    assert len(tree) == 3 and len(tree.alternatives(tree.current)) == 2, "a local alternative of turn 2"
    with qtbot.waitSignal(conversation.history_changed, timeout=WAIT_MS):
        assert conversation.rewind(1)
    assert [t.player for t in conversation.saved.history.turns] == LINES[:1]
    # ... and the game's session never changed
    assert game.session(npc.id).turns == 2 and [t.line for t in game.turns(npc.id)] == LINES


def test_a_turn_shows_as_it_runs_a_failed_one_goes_and_a_deleted_session_stops(served, window, qtbot):
    url, game = served
    window.open_path(str(examples_dir() / "tool_calling.json"), as_example=True)
    npc = game.create_session("tool_calling.json")
    attach = window.attach
    attach_with_dialog(qtbot, window, url, npc.id)
    asked, release = threading.Event(), threading.Event()
    ended: dict[str, object] = {}

    def tool(_call) -> str:
        asked.set()
        release.wait(WAIT_MS / 1000)
        return "240"

    def play() -> None:  # the game, on a thread of its own so the turn is seen while it runs
        try:
            ended["outcome"] = game.turn(npc.id, LINES[0], tools=tool)
        except ParleyError as exc:
            ended["error"] = exc

    player = threading.Thread(target=play, name="the-game")
    player.start()
    try:
        # the editor hears of the tool request on its own stream, the game on the turn's: wait for both
        qtbot.waitUntil(lambda: asked.is_set() and "asks the game for check_stock" in attach.status, timeout=WAIT_MS)
        assert LINES[0] in chat_text(window), "the running turn's line is shown at once"
        assert game.cancel(npc.id)
        qtbot.waitUntil(lambda: "A turn failed on the server (cancelled" in attach.status, timeout=WAIT_MS)
    finally:
        release.set()
        player.join(WAIT_MS / 1000)
    assert not player.is_alive() and getattr(ended.get("error"), "code", "") == "cancelled"
    assert LINES[0] not in chat_text(window), "the failed turn is not part of the session: it goes"
    assert window.conversation.records == {} and game.session(npc.id).turns == 0

    with qtbot.waitSignal(attach.turn_shown, timeout=WAIT_MS):
        game_turn(game, npc.id, LINES[1], ANSWERS[1])
    assert LINES[1] in chat_text(window) and len(window.conversation.records) == 1

    # the game ends the session: following stops, the last view stays until Detach
    game.delete_session(npc.id)
    qtbot.waitUntil(lambda: not attach.following, timeout=WAIT_MS)
    assert attach.attached and "Not following any more" in attach.status and "session was deleted" in attach.status
    assert window.attach_panel.label.text().startswith("<b>Attached to") and LINES[1] in chat_text(window)
    assert attach.follow_job is None
    attach.detach()
    assert not window.conversation_dock.read_only and LINES[1] not in chat_text(window)


def test_a_session_of_another_asset_says_so_and_marks_no_path(served, window, qtbot):
    url, game = served
    window.open_path(str(examples_dir() / "chat.json"), as_example=True)
    npc = game.create_session("tool_calling.json")
    attach_with_dialog(qtbot, window, url, npc.id)
    attach = window.attach
    assert "tool_calling.json" in attach.mismatch, "told by the asset's name and file before any turn"
    with qtbot.waitSignal(attach.turn_shown, timeout=WAIT_MS):
        game_turn(game, npc.id, LINES[0], ANSWERS[0])
    panel = window.attach_panel
    assert panel.mismatch_label.isVisible()
    assert "no node lookup" in panel.mismatch_label.text() and "Path marks are off" in panel.mismatch_label.text()
    assert window.canvas.highlighted_path() == [], "chat.json has a node 'reply' too: not marked"
    window.dock(TurnInspectorDock).refresh()  # the turn shown again in the inspector: still no marks
    assert window.dock(TurnInspectorDock).record is not None and window.canvas.highlighted_path() == []
    assert LINES[0] in chat_text(window), "the turn is shown all the same"
    assert "Mira" not in chat_text(window), "its nodes by their ids, not by the open document's titles"
    assert not panel.take_over_button.isEnabled()
    assert "Cannot take over" in attach.take_over()
    # closing the window while following ends the stream and its thread; the session stays
    job = attach.follow_job
    assert job is not None and job.is_running()
    window.document.undo_stack.setClean()
    assert window.close()
    assert not job.is_running() and attach.follower is None
    assert game.session(npc.id).turns == 1 and npc.id in [s.id for s in game.sessions()]


def test_the_dialog_says_what_is_wrong_with_the_server(served, window, qtbot):
    url, game = served
    game.create_session("chat.json")
    dialog = window.open_attach_dialog()
    dialog.address.setText(url)
    with qtbot.waitSignal(dialog.listed, timeout=WAIT_MS) as listed:
        assert dialog.list_sessions()  # no token
    assert listed.args == [False] and "wants a token" in dialog.status.text()
    assert not dialog.attach_button.isEnabled()
    dialog.address.setText("")
    assert not dialog.list_sessions() and "Type the server's address" in dialog.status.text()
    dialog.address.setText(url.removeprefix("http://") + "/v1/")  # as a person might paste it
    dialog.token.setText(TOKEN)
    with qtbot.waitSignal(dialog.listed, timeout=WAIT_MS) as listed:
        assert dialog.list_sessions()
    assert listed.args == [True] and dialog.table.rowCount() == 1
    assert dialog.table.item(0, 1).text().startswith("chat.json") and dialog.table.item(0, 2).text() == "0"
    dialog.reject()


def test_an_address_without_a_server():
    assert server_address(" 127.0.0.1:8765/ ") == "http://127.0.0.1:8765"
    assert server_address("http://localhost:9000/v1") == "http://localhost:9000"
    with pytest.raises(ValueError, match="not a server address"):
        server_address("ftp://example.org")


@pytest.mark.model
def test_following_a_turn_on_the_sample_model(sample_model, window, qtbot, tmp_path):
    from runtime.backends.llama import LlamaBackend

    shutil.copy(examples_dir() / "chat.json", tmp_path / "chat.json")
    backend = LlamaBackend(None)
    try:
        with running_server(backend, [tmp_path]) as url, ParleyClient(url) as game:
            window.open_path(str(tmp_path / "chat.json"))
            npc = game.create_session("chat.json")
            game.change_params(npc.id, {"reply": {"max_tokens": 12}})  # a short reply: a quick test
            attach_with_dialog(qtbot, window, url, npc.id, token="")
            with qtbot.waitSignal(window.attach.turn_shown, timeout=180_000):
                outcome = game.turn(npc.id, "Good evening! Is there a room free tonight?")
            assert outcome.reply.strip()
            text = chat_text(window)
            assert "Good evening! Is there a room free tonight?" in text
            assert outcome.reply.strip().splitlines()[0] in text and f"via server {url}" in text
            assert window.canvas.highlighted_path() == ["reply"]
            assert window.dock(TurnInspectorDock).record.diagnostics.reply == outcome.reply
            window.attach.detach()
            assert game.session(npc.id).turns == 1
    finally:
        backend.close()
