"""The runtime on its worker thread, driven through the real window on the real sample model."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from PySide6.QtCore import QThread

from editor.docks.conversation.dock import ConversationDock
from editor.model.commands import set_node_field
from editor.session.local import LiveConversation, held_edits
from editor.threads.thread_job import threads_left_running
from runtime.dialogue.history import ToolExchange
from runtime.events import Token
from tests.editor.live import TURN_TIMEOUT_MS, example, sample_model, talk

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def model() -> str:
    return sample_model()


def test_turns_run_on_the_worker_thread_and_stream(window, qtbot, model):
    window.set_asset(example("chat", model, reply={"max_tokens": 24}))
    conversation = window.conversation
    assert window.findChild(LiveConversation) is conversation, "one conversation per window, shared by the docks"
    threads: set[int] = set()
    tokens: list[str] = []
    loading: list[tuple[str, int, int, int]] = []

    def on_event(event) -> None:
        threads.add(threading.get_ident())
        if isinstance(event, Token):
            tokens.append(event.text)

    conversation.event.connect(on_event)
    conversation.loading.connect(lambda *args: loading.append(args))
    record = talk(qtbot, conversation, "Good evening! Is there a room free?")

    assert conversation.worker.thread() is conversation.thread
    assert conversation.thread is not QThread.currentThread()
    assert threads == {threading.get_ident()}, "events reach the UI through signals received on the UI thread"
    assert loading[0] == (Path(model).name, 0, 1, 1) and loading[-1][1] == 100, "model loading reports progress"
    assert "".join(tokens) == record.diagnostics.reply, "every token streamed, in order"
    assert record.diagnostics.nodes[0].tokens.generated > 0


def test_model_loading_shows_a_percentage_bar_then_hides_it(window, qtbot, model, tmp_path):
    window.set_asset(example("chat", model, reply={"max_tokens": 8}))
    conversation = window.conversation
    dock = window.dock(ConversationDock)
    dock.raise_()
    bar = dock.load_progress
    seen: list[tuple[int, str, int, int, int, bool, str]] = []
    shot = tmp_path / "loading.png"

    # Connected after the dock, so each call sees the bar as the dock has just set it.
    def on_loading(name: str, percent: int, number: int, count: int) -> None:
        seen.append((threading.get_ident(), name, percent, number, count, bar.isHidden(), bar.text()))
        if 0 < percent < 100 and not shot.exists():
            assert dock.grab().save(str(shot))

    conversation.loading.connect(on_loading)
    with qtbot.waitSignal(conversation.loading, timeout=TURN_TIMEOUT_MS,
                          check_params_cb=lambda _name, percent, _number, _count: percent == 100):
        dock.line.setText("Hello!")
        dock.send_button.click()
    qtbot.waitUntil(lambda: not conversation.busy, timeout=TURN_TIMEOUT_MS)

    name = Path(model).name
    assert {s[0] for s in seen} == {threading.get_ident()}, "progress reaches the dock on the UI thread"
    assert {s[1:2] + s[3:5] for s in seen} == {(name, 1, 1)}
    percents = [s[2] for s in seen]
    assert percents[0] == 0 and percents[-1] == 100
    assert percents == sorted(set(percents)), "each percent once, increasing"
    assert any(0 < p < 100 for p in percents), f"llama.cpp's own progress, not only start and end: {percents}"
    for _thread, _name, percent, _n, _c, hidden, text in seen[:-1]:
        assert not hidden and text == f"Loading {name}  {percent} %"
    assert seen[-1][5], "the bar hides once the model is loaded"
    assert shot.exists(), "the dock was drawn mid-load"
    assert bar.isHidden() and conversation.record(0) is not None

    # The weights stay loaded: the next turn shows no loading at all.
    count = len(seen)
    talk(qtbot, conversation, "Thank you.")
    assert len(seen) == count and bar.isHidden()


def test_stop_cancels_and_edits_apply_to_the_next_turn(window, qtbot, model):
    window.set_asset(example("chat", model, reply={"max_tokens": 400, "temperature": 1.2, "seed": 3}))
    conversation = window.conversation
    dock = window.dock(ConversationDock)
    talk(qtbot, conversation, "Hello!")  # warm: the model is loaded and turn 0 is in the history
    # Stop a long answer once it is streaming.
    streamed: list[str] = []
    cancelled: list[bool] = []
    conversation.event.connect(lambda e: streamed.append(e.text) if isinstance(e, Token) else None)
    conversation.turn_failed.connect(lambda failure: cancelled.append(failure.cancelled))
    dock.line.setText("Tell me the whole history of the village, every detail, from the very beginning.")
    dock.send_button.click()
    qtbot.waitUntil(lambda: len(streamed) >= 3, timeout=TURN_TIMEOUT_MS)
    assert dock.stop_button.isEnabled()
    dock.stop_button.click()
    qtbot.waitUntil(lambda: not conversation.busy, timeout=10_000)
    assert cancelled == [True]
    assert len(conversation.saved.history.turns) == 1, "a cancelled turn leaves the history as it was"
    assert "Stopped" in dock.status.text()

    # An edit between turns (max_tokens) applies to the next turn; the history is kept.
    window.document.push(set_node_field(window.document, "reply", "max_tokens", 12))
    record = talk(qtbot, conversation, "Thank you.")
    reply = record.diagnostics.nodes[0]
    assert reply.tokens.budget == 2048 - 12
    assert reply.tokens.generated <= 12
    assert record.turn == 1 and reply.trim.history_entries == 2


def test_context_size_edit_is_held_until_the_conversation_restarts(window, qtbot, model):
    window.set_asset(example("chat", model, reply={"max_tokens": 12}))
    conversation = window.conversation
    dock = window.dock(ConversationDock)
    talk(qtbot, conversation, "Hello there.")
    with qtbot.waitSignal(conversation.restart_offered, timeout=5_000) as offered:
        window.document.push(set_node_field(window.document, "reply", "context_size", 1024))
    assert offered.args[0] and "context size of node 'reply'" in offered.args[0][0]
    assert dock.banner.isVisibleTo(dock) and "restart" in dock.banner_label.text().lower()

    held = talk(qtbot, conversation, "Still there?")
    assert held.diagnostics.nodes[0].tokens.budget == 2048 - 12, "the running agent keeps its context size"
    assert held.turn == 1

    dock.restart_button.click()
    qtbot.waitUntil(lambda: not conversation.saved.history.turns, timeout=TURN_TIMEOUT_MS)
    assert not dock.banner.isVisibleTo(dock)
    fresh = talk(qtbot, conversation, "Hello again.")
    assert fresh.turn == 0
    assert fresh.diagnostics.nodes[0].tokens.budget == 1024 - 12


def test_held_edits_keep_model_and_context_size():
    chat = example("chat", "model-a.gguf")
    changed = chat.model_copy(update={
        "default_model": "model-b.gguf",
        "nodes": [chat.nodes[0].model_copy(update={"context_size": 512, "max_tokens": 10})],
    })
    asset, reasons = held_edits(changed, chat)
    assert asset.default_model == "model-a.gguf"
    assert asset.nodes[0].context_size == 2048 and asset.nodes[0].max_tokens == 10
    assert len(reasons) == 2


def test_a_tool_without_mock_result_asks_the_designer(window, qtbot, model):
    asset = example("tool_calling", model)
    lookup = asset.node("lookup")
    price_of = next(t for t in lookup.tools if t.name == "price_of")
    asset = example("tool_calling", model, lookup={"tools": [price_of]}, reply={"max_tokens": 16})
    window.set_asset(asset)
    conversation = window.conversation
    dock = window.dock(ConversationDock)
    asked: list[tuple] = []
    conversation.tool_needed.connect(lambda node, tool, args: asked.append((node, tool, args)))
    dock.line.setText("How much is a bow?")
    dock.send_button.click()
    qtbot.waitUntil(lambda: bool(asked), timeout=TURN_TIMEOUT_MS)
    assert asked[0][:2] == ("lookup", "price_of")
    assert dock.tool_panel.isVisible()
    dock.tool_result.setText("12 silver")
    dock.tool_send.click()
    qtbot.waitUntil(lambda: not conversation.busy, timeout=TURN_TIMEOUT_MS)
    (turn,) = conversation.saved.history.turns
    exchange = next(e for e in turn.entries if isinstance(e, ToolExchange))
    assert exchange.tool == "price_of" and exchange.result == "12 silver"
    assert "12 silver" in dock.chat.toPlainText()


def test_closing_the_window_during_generation_stops_the_worker(make_window, qtbot, model):
    window = make_window()
    window.set_asset(example("chat", model, reply={"max_tokens": 400}))
    conversation = window.conversation
    streamed: list[str] = []
    conversation.event.connect(lambda e: streamed.append(e.text) if isinstance(e, Token) else None)
    assert conversation.say("Tell me a very long story about the inn.")
    qtbot.waitUntil(lambda: len(streamed) >= 2, timeout=TURN_TIMEOUT_MS)
    window.document.undo_stack.setClean()
    started = time.perf_counter()
    window.close()
    assert not conversation.thread.isRunning(), "closing the window cancels the turn and stops the thread"
    assert time.perf_counter() - started < 5, "the cancel ends the turn at once"
    assert not threads_left_running(), "the thread ended within the wait: none was left behind"
    assert not conversation.busy
    assert not conversation.say("anyone?"), "a closed window's conversation takes no more turns"


@pytest.mark.parametrize("at", ["/props", "/tokenize", "generate"])
def test_stop_ends_a_turn_waiting_on_a_server_that_never_answers(window, qtbot, at):
    """Stop reaches every request of the turn (loading's /props and the prompt budget's token counts
    as well as the generation): the turn ends as stopped, the conversation as it was."""
    from runtime.backends.llama_server import LlamaServerBackend
    from runtime.resources import examples_dir
    from tests.hostile_server import hostile_server

    with hostile_server("timeout", at=at, max_seconds=60) as server:
        window.open_path(str(examples_dir() / "chat.json"))
        conversation = window.conversation
        conversation.use_backend(lambda: LlamaServerBackend(server.url, "silent"))
        failures = []
        conversation.turn_failed.connect(failures.append)
        assert conversation.say("Hello")
        qtbot.waitUntil(server.hit.is_set, timeout=30_000)
        conversation.stop()
        qtbot.waitUntil(lambda: not conversation.busy, timeout=10_000)
        assert [f.cancelled for f in failures] == [True], [f.message for f in failures]
        assert "Stopped" in failures[0].message
        assert server.disconnected.wait(5), "the request was closed, so the server sees the client leave"
        assert not conversation.saved.history.turns
