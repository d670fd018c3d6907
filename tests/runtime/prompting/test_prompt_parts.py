"""The runtime records where each part of a prompt came from while it builds the prompt, so the
Turn Inspector never reads the flattened prompt back."""

from __future__ import annotations

from runtime.asset.model import new_node
from runtime.dialogue.history import DialogHistory, Reply, Summary, ToolExchange, Turn
from runtime.prompting.budget import PromptBudget
from runtime.prompting.prompt import SUMMARY_HEADING, budget_segments, build_prompt, current_turn_messages


def words(text: str) -> int:
    return len(text.split())


def test_parts_tell_system_summary_history_template_and_current_turn_apart() -> None:
    node = new_node("Generate", "reply", system_prompt="Be brief.", template="Knowledge: none",
                    placement="before")
    history = DialogHistory(
        [Turn("old", [Reply("reply", "gone")]), Turn("older", [Reply("reply", "folded")]),
         Turn("hi", [ToolExchange("look", "look", {}, "nothing", True), Reply("reply", "Hello.")])],
        [Summary("They met.", covered_through=1, folded_turns=2)],
    )
    current = current_turn_messages(node, "how are you", "", {}, {}, [])
    prompt = build_prompt(node, system_prompt=node.system_prompt, history=history, window_start=0,
                          current=current, budget=PromptBudget(4096, 256), count=words)
    parts = prompt.parts
    assert [(p.kind, p.role, p.turn, p.message) for p in parts] == [
        ("system", "system", None, 0), ("summary", "system", None, 0),
        ("history", "user", 2, 1), ("history", "assistant", 2, 2), ("history", "tool", 2, 3),
        ("history", "assistant", 2, 4),
        ("template", "user", None, 5), ("current", "user", None, 5),
    ]
    assert parts[0].text == "Be brief." and parts[1].text == f"{SUMMARY_HEADING}\nThey met."
    assert parts[-2].text == "Knowledge: none" and parts[-1].text == "how are you"
    # the parts add up to what the budget counted, and each message is told apart exactly once
    assert sum(p.tokens for p in parts) == prompt.counted_tokens
    assert budget_segments(parts)["history"] == sum(p.tokens for p in parts if p.kind == "history")
    assert len({p.message for p in parts}) == len(prompt.messages)


def test_a_template_after_the_line_and_this_turns_earlier_entries() -> None:
    node = new_node("Generate", "reply", template="(whisper)", placement="after")
    earlier = [ToolExchange("tools", "look", {}, "a key", False)]
    current = current_turn_messages(node, "look around", "", {}, {}, earlier)
    prompt = build_prompt(node, system_prompt="", history=DialogHistory(), window_start=0, current=current,
                          budget=PromptBudget(512, 64), count=words)
    assert [(p.kind, p.text) for p in prompt.parts] == [
        ("current", "look around"), ("template", "(whisper)"),
        ("this_turn", '{"name": "look", "arguments": {}}'), ("this_turn", "a key"),
    ]
    assert sum(p.tokens for p in prompt.parts) == prompt.counted_tokens
