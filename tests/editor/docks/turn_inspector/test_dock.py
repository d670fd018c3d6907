"""The Turn Inspector on real turns: each node's prompt as the model received it, the budget,
trims, the path on the canvas, and the diff between two turns."""

from __future__ import annotations

import html
import re

import pytest

from editor.docks.conversation.dock import ConversationDock
from editor.docks.raw_json.dock import RawJsonDock
from editor.docks.turn_inspector.dock import TurnInspectorDock
from runtime.prompting.prompt import SUMMARY_HEADING
from tests.editor.live import example, sample_model, talk

pytestmark = pytest.mark.model

LINES = [
    "Good evening! I just arrived from the coast road.",
    "Do you have a room for the night?",
    "What is there to eat?",
]
SYSTEM = "You are Mira, the innkeeper of the Wayside Inn"


@pytest.fixture(scope="module")
def model() -> str:
    return sample_model()


def test_each_turns_prompt_path_and_budget(window, qtbot, model):
    window.set_asset(example("chat", model, reply={"max_tokens": 20}))
    conversation = window.conversation
    inspector = window.dock(TurnInspectorDock)
    records = [talk(qtbot, conversation, line) for line in LINES]
    assert inspector.turn_picker.count() == 3
    assert window.canvas.highlighted_path() == ["reply"], "the turn's path is outlined on the canvas"

    for turn, record in enumerate(records):
        inspector.turn_picker.setCurrentIndex(turn)
        assert inspector.current_node_id() == "reply"
        text = inspector.prompt_view.toPlainText()
        diag = record.diagnostics.nodes[0]
        # Every message exactly as the model received it, in order.
        for message in diag.input.prompt:
            for line in message.content.splitlines():
                assert line in text
        assert SYSTEM in text and "SYSTEM \u00b7 System prompt" in text
        assert "USER \u00b7 Rendered template" in text and "It is evening." in text
        assert "USER \u00b7 Current turn" in text and LINES[turn] in text
        assert text.count("Replayed history") == 2 * turn, "each earlier turn: the player's line and the reply"
        assert diag.output.strip()[:30] in text
        # The budget bar: the parts add up to the prompt's cost, against the node's budget.
        shares = inspector.budget_bar.shares
        assert shares.budget == 2048 - 20 and shares.context == 2048
        assert abs(sum(shares.segments.values()) - diag.tokens.counted) <= 2
        stats = inspector.stats.text()
        assert f"reused {diag.tokens.reused}" in stats and f"evaluated {diag.tokens.evaluated}" in stats
        assert f"generated {diag.tokens.generated}" in stats and "No trim on this turn" in stats
        # From turn 1 on the previous turn is replayed without its template: the inspector says why it was re-read.
        assert ("Why the previous turn was read again" in stats) == (turn > 0)
        assert conversation.selected_turn == turn
        assert window.dock(RawJsonDock).data["turn"] == turn, "the raw JSON follows the inspector"

    # Compare turn 1 with turn 2: the prompt gained turn 1's exchange and the new line.
    inspector.turn_picker.setCurrentIndex(2)
    inspector.compare_picker.setCurrentIndex(inspector.compare_picker.findData(1))
    diff = inspector.diff_html()
    added = " ".join(html.unescape(t) for t in re.findall(r"<span class='add[^']*'>(.*?)</span>", diff, re.DOTALL))
    removed = " ".join(html.unescape(t) for t in re.findall(r"<span class='del[^']*'[^>]*>(.*?)</span>", diff, re.DOTALL))
    assert LINES[2] in added, "the new line, word by word"
    assert records[1].diagnostics.reply.split()[0] in added, "turn 2's reply is history now"
    assert LINES[1] in removed, "turn 2's line left the rendered template (the left column)"
    assert "USER \u00b7 Replayed history \u00b7 turn 2" in html.unescape(diff), "it came back as history, without the template"
    assert "@@" not in diff and "OUTPUT" in inspector.diff_view.toPlainText()


def test_a_trim_in_a_long_conversation(window, qtbot, model):
    """long_conversation.json with a small window: the reply node trims, and the inspector says which
    turns were trimmed on that turn and which were already out of the window."""
    asset = example("long_conversation", model,
                    reply={"context_size": 256, "max_tokens": 24},
                    summarize={"max_summary_tokens": 32, "trigger_tokens": 150})
    window.set_asset(asset)
    conversation = window.conversation
    inspector = window.dock(TurnInspectorDock)
    lines = [
        "Tell me about the old mill by the river, please.",
        "And who built the stone bridge to the north?",
        "Were there ever wolves in the forest near the village?",
        "What happened to the blacksmith's missing apprentice?",
        "Is it true the well in the square is haunted?",
        "Who is the oldest person living in Brackenford?",
        "What songs do people sing at the harvest festival?",
        "Where do the travelling merchants come from?",
        "What is the best ale at the inn?",
        "Tell me one last story before I go to bed.",
    ]
    trimmed_at = None
    for line in lines:
        record = talk(qtbot, conversation, line)
        trim = next(n for n in record.diagnostics.nodes if n.node == "reply").trim
        if trimmed_at is None and trim.window_start_after > trim.window_start_before:
            trimmed_at = record.turn
        elif trimmed_at is not None and trim.window_start_before > 0:
            break
    assert trimmed_at is not None, "the reply node's 232-token budget must overflow within ten turns"

    inspector.turn_picker.setCurrentIndex(inspector.turn_picker.findData(trimmed_at))
    inspector.show_node("reply")
    stats = inspector.stats.text()
    diag = inspector.node_diagnostics(inspector.record, "reply")
    assert diag.trim.triggered and diag.trim.dropped_turns >= 1
    first = max(diag.trim.window_start_before, inspector.summary_through(diag) + 1)
    last = diag.trim.window_start_after - 1
    expected = f"turn {first + 1}" if first == last else f"turns {first + 1}\u2013{last + 1}"  # people count from 1
    assert f"Trimmed on this turn: {expected}</b>" in stats
    assert diag.tokens.counted <= diag.tokens.budget * 3 // 4 + 1, "trimmed down to 75 % of the budget"

    later = conversation.record(trimmed_at + 1)
    if later is not None:
        inspector.turn_picker.setCurrentIndex(inspector.turn_picker.findData(later.turn))
        inspector.show_node("reply")
        assert "Already out of the window: turn" in inspector.stats.text()

    # A summary, once written, is shown in the chat where it folded and told apart in the prompt.
    summaries = conversation.saved.history.summaries
    if summaries:
        assert "Summary by" in window.dock(ConversationDock).chat.toPlainText()
        last = conversation.record(max(conversation.records))
        parts = last.parts["reply"]
        if any(p.kind == "summary" for p in parts):
            assert next(p for p in parts if p.kind == "summary").text.startswith(SUMMARY_HEADING)
