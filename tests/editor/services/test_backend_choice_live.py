"""The editor on a real OpenAI-compatible server (llama-cpp-python's, serving the sample model):
the picker, Check connection, which backend each reply came from, and back to this computer."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from editor.dialogs.backends import BackendsDialog
from editor.docks.turn_inspector.dock import TurnInspectorDock
from editor.docks.vram_estimator.dock import VramEstimatorDock
from editor.services.backend_choice import EMBEDDED_LABEL
from tests.editor.live import TURN_TIMEOUT_MS, example, sample_model, talk
from tests.servers import openai_server

pytestmark = pytest.mark.model

SHOTS = Path("/tmp/parley-backends-shots")


def shot(widget, name: str) -> None:
    from PySide6.QtWidgets import QApplication

    for _ in range(3):
        QApplication.processEvents()
    SHOTS.mkdir(parents=True, exist_ok=True)
    assert widget.grab().save(str(SHOTS / name))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with openai_server(Path(sample_model()), tmp_path_factory.mktemp("server-logs")) as running:
        yield running


def test_a_turn_on_a_real_server_then_back_on_this_computer(server, window, qtbot):
    path = Path(os.environ["PARLEY_BACKENDS"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"version": 1, "backends": [
        {"name": "local-openai", "kind": "openai", "url": server.url + "/v1", "timeout": 60,
         "context_size": 2048}]}), encoding="utf-8")
    window.backends.reload()

    # Check connection reaches it, off the UI thread, and says what answered.
    dialog = BackendsDialog(window.backends, window)
    qtbot.addWidget(dialog)
    dialog.show()
    try:
        with qtbot.waitSignal(dialog.check.finished, timeout=60_000) as checked:
            assert dialog.check_connection()
        ok, label = checked.args
        assert ok, label
        assert label.startswith(f"local-openai ({server.url}) \u00b7 OpenAI-compatible \u00b7 ")
        assert "SmolLM2" in label
        assert dialog.check_result.text() == f"\u2714 Connected: {label}"
        shot(dialog, "dialog-connected.png")
    finally:
        dialog.reject()

    window.set_asset(example("chat", sample_model(), reply={"max_tokens": 16}))
    dock = window.conversation_dock
    dock.raise_()
    combo = dock.backend_combo
    index = combo.findData("local-openai")
    combo.setCurrentIndex(index)
    combo.activated.emit(index)
    assert window.backends.spec == "local-openai"

    first = talk(qtbot, window.conversation, "Good evening! Is there a room free?")
    served = first.diagnostics.backend
    assert served.startswith(f"local-openai ({server.url}) \u00b7 OpenAI-compatible \u00b7 ") and "SmolLM2" in served
    assert window.conversation.backend_of(first.turn_id) == served
    assert dock.backend_label.text() == served, "the top says the backend with its model once a turn ran"
    assert f"via {served}" in dock.chat.toPlainText()
    assert "on local-openai" in dock.status.text()
    vram = window.dock(VramEstimatorDock)
    note = vram.backend_note.text()
    assert not vram.backend_note.isHidden()
    assert "on this computer" in note and "local-openai" in note and "memory is on the server" in note
    assert "Turn 1 ran on local-openai" in note
    assert vram.estimate is not None, "the estimate for this computer is still there"
    shot(dock, "conversation-on-openai-server.png")
    vram.raise_()
    shot(vram, "vram-on-openai-server.png")
    dock.raise_()

    # Back to this computer: the conversation stays, the next turn runs here.
    combo.setCurrentIndex(0)
    combo.activated.emit(0)
    second = talk(qtbot, window.conversation, "What is the best dish on the menu?")
    assert second.diagnostics.backend == EMBEDDED_LABEL
    assert len(window.conversation.saved.history.turns) == 2
    text = dock.chat.toPlainText()
    assert text.index(f"via {served}") < text.index("What is the best dish") < text.index(f"via {EMBEDDED_LABEL}")
    assert dock.backend_label.text() == EMBEDDED_LABEL
    assert "memory is on the server" not in vram.backend_note.text()
    assert "Turn 1 ran on local-openai" in vram.backend_note.text()
    assert "Turn 2 ran on this computer" in vram.backend_note.text()
    shot(dock, "conversation-back-on-embedded.png")
    # the Turn Inspector says where each turn ran when it was not this computer
    inspector = window.dock(TurnInspectorDock)
    qtbot.waitUntil(lambda: inspector.turn_picker.count() == 2, timeout=TURN_TIMEOUT_MS)
    inspector.turn_picker.setCurrentIndex(0)
    assert f"on {served}" in inspector.path_label.text().replace("&amp;", "&")
    inspector.raise_()
    shot(inspector, "inspector-on-server.png")
    inspector.turn_picker.setCurrentIndex(1)
    assert " on " not in inspector.path_label.text()
    qtbot.waitUntil(lambda: not window.conversation.busy, timeout=TURN_TIMEOUT_MS)
