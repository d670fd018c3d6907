"""The Conversation dock on a llama.cpp build whose self-check crashed: the designer reads why and
what to do, and the editor and the conversation stay (runtime.backends.llama_build)."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from editor.docks.conversation.dock import ConversationDock
from runtime.backends import llama_build
from tests.editor.live import TURN_TIMEOUT_MS, example, sample_model
from tests.runtime.backends.stand_in_probes import FAILED_CHECK, keep_failed_check

pytestmark = pytest.mark.model


def test_a_build_that_crashes_its_self_check_is_said_in_the_conversation_dock(window, qtbot, tmp_path,
                                                                              monkeypatch):
    model = sample_model()
    checks = tmp_path / "checks.json"
    monkeypatch.setenv(llama_build.CHECKS_ENV, str(checks))
    llama_build.forget_decisions()
    keep_failed_check(checks, "SmolLM2-135M-Instruct.Q4_1.gguf")
    try:
        window.set_asset(example("chat", model, reply={"max_tokens": 16}))
        dock = window.dock(ConversationDock)
        dock.show()
        conversation = window.conversation
        qtbot.waitUntil(lambda: not conversation.busy, timeout=TURN_TIMEOUT_MS)
        dock.line.clear()
        qtbot.keyClicks(dock.line, "Hello there")
        qtbot.mouseClick(dock.send_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: not conversation.busy and FAILED_CHECK in dock.status.text() + dock.chat.toPlainText(),
                        timeout=TURN_TIMEOUT_MS)
        assert conversation.saved.history.turns == []
        assert dock.line.text() == "Hello there", "the line is kept to send again after the fix"
        assert dock.grab().save(str(tmp_path / "check-failed.png"))
    finally:
        llama_build.forget_decisions()
