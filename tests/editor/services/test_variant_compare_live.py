"""The Tests dock's "Compare with variant\u2026" on the real sample model: the chat example against a copy
whose reply node's system prompt differs names the first divergence (turn 1, the reply node, in the
prompt) and opens both prompts side by side in the Turn Inspector."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from editor.docks.turn_inspector.dock import TurnInspectorDock
from editor.docks.turn_inspector.side_by_side import FIRST_MARK
from runtime.asset.file import save_asset
from runtime.resources import examples_dir
from tests.editor.docks.tests.listing import open_listed
from tests.editor.live import example, sample_model

pytestmark = pytest.mark.model

COMPARE_TIMEOUT_MS = 120_000
GRUMPY = "You are Mira, the innkeeper of the Wayside Inn. You are grumpy and hate late guests. Answer in one sentence."


@pytest.fixture
def chat(tmp_path) -> Path:
    """The chat example and its suite beside each other on the sample model (short replies), and B: the
    same with another system prompt on its reply node."""
    model = sample_model()
    path = tmp_path / "chat.json"
    save_asset(example("chat", model, reply={"max_tokens": 24}), path)
    save_asset(example("chat", model, reply={"max_tokens": 24, "system_prompt": GRUMPY}), tmp_path / "chat_grumpy.json")
    shutil.copy(examples_dir() / "chat.suite.yaml", tmp_path / "chat.suite.yaml")
    return path


def test_a_changed_system_prompt_diverges_at_the_reply_prompt_and_opens_both(window, qtbot, chat):
    window.workspace.switch("Test")
    dock = open_listed(qtbot, window, chat)
    with qtbot.waitSignal(dock.variants.finished, timeout=COMPARE_TIMEOUT_MS) as done:
        assert dock.compare_with_variant(variant=str(chat.parent / "chat_grumpy.json"))
    _request, report = done.args
    (case,) = report.cases
    assert report.conversations == 1 and case.differing_turns == 2, "both turns' prompts differ"
    first = case.first_divergence
    assert (first.run, first.turn, first.node, first.part) == (0, 1, "reply", "prompt")
    assert "You are Mira, the innkeeper of the Wayside Inn in the village" in first.prompt_a
    assert GRUMPY in first.prompt_b
    (row,) = dock.variant_panel.rows()
    assert row[0] == "answers in a few sentences" and row[3] == "2"
    assert row[4] == f"turn 1 \u00b7 reply \u00b7 prompt token {first.token_index}"
    assert "First divergence: \u201canswers in a few sentences\u201d run 1, turn 1" in dock.variant_panel.summary.text()

    inspector = window.dock(TurnInspectorDock)
    with qtbot.waitSignal(dock.turn_opened):
        dock.variant_panel.table.itemClicked.emit(dock.variant_panel.table.topLevelItem(0), 4)
    assert inspector.turn_picker.currentText() == "B (chat_grumpy.json): answers in a few sentences \u00b7 run 1 \u00b7 turn 1"
    assert inspector.compare_picker.currentText().startswith("A (chat.json): ")
    assert inspector.tabs.currentWidget() is inspector.diff_page
    diff = inspector.diff_view.toPlainText()
    assert FIRST_MARK in diff and "SYSTEM" in diff
    assert "in the village of Brackenford" in diff and "hate late guests" in diff, "both system prompts, side by side"
    assert "1 part the same (USER)" in diff, "the player's line: the same on both"
    assert first.text_b.strip()[:20] in diff, "B's reply as the model gave it"
    assert inspector.changes_list.topLevelItem(0).text(1) == "system_prompt"
