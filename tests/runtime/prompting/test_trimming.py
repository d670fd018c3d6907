"""Trimming on conversations long enough to trim several times (deterministic backend, exact numbers)."""

from __future__ import annotations

import pytest

from runtime.agent import Agent
from runtime.dialogue.history import Reply, ToolExchange
from runtime.prompting.budget import PromptBudget
from runtime.prompting.prompt import replayed_groups
from tests.runtime.conversations import asset, backend, node_diag, player_lines, prompt_of, words

SYSTEM = words(30, "sys")


def run_conversation(agent: Agent, lines: list[str]):
    return [agent.run_turn(line).diagnostics for line in lines]


def expected_history(agent: Agent, start: int, end: int) -> list[tuple[str, str, str]]:
    """Turns start..end-1 replayed whole, as the spec orders them."""
    return [(m.role, m.content, m.name) for t in agent.history.turns[start:end] for g in replayed_groups(t) for m in g]


def test_worked_example_trims_above_3584_and_stops_at_2688():
    """Context 4096, max tokens 512: trimming starts above 3,584 tokens and stops at or below 2,688."""
    graph = asset(("Generate", "npc", {"context_size": 4096, "max_tokens": 512, "system_prompt": SYSTEM}))
    agent = Agent(graph, backend({"npc": 45}))
    lines = player_lines(140, seed=3)
    budget = PromptBudget(4096, 512)
    count = 0
    trims = 0
    previous_after = 0
    for t, line in enumerate(lines):
        diagnostics = agent.run_turn(line).diagnostics
        d = node_diag(diagnostics, "npc")
        count += 1
        assert d.tokens.budget == 3584
        # The scripted backend renders exactly the budget's arithmetic: tokens + 8 per message.
        assert d.tokens.prompt == d.tokens.counted
        assert d.tokens.counted <= 3584
        trim = d.trim
        # Window starts never move back, and carry over from turn to turn.
        assert trim.window_start_before == previous_after
        assert trim.window_start_after >= trim.window_start_before
        previous_after = trim.window_start_after
        # What the prompt would have cost without this turn's trim.
        fixed = (len(SYSTEM.split()) + 8) + (len(line.split()) + 8)
        kept_before = sum(
            len(m[1].split()) + 8 for m in expected_history(agent, trim.window_start_before, t)
        )
        untrimmed = fixed + kept_before
        assert trim.triggered == (untrimmed > 3584)
        if trim.triggered:
            trims += 1
            assert d.tokens.counted <= budget.trim_target == 2688
            # Stops as soon as it is at or below 2688: one turn fewer dropped would be above it.
            last_dropped = sum(
                len(m[1].split()) + 8
                for m in expected_history(agent, trim.window_start_after - 1, trim.window_start_after)
            )
            assert d.tokens.counted + last_dropped > 2688
            assert trim.dropped_turns == trim.window_start_after - trim.window_start_before
            # Trimming changes the start of the prompt: only the system message (and the
            # next message's role header) is reused from the KV cache.
            assert d.tokens.reused == len(SYSTEM.split()) + 8 + 4
        else:
            assert trim.dropped_turns == 0
            if t:
                # An ordinary turn reads only what is new: the last reply and the current line.
                assert d.tokens.evaluated == (45 + 8) + (len(line.split()) + 8)
                assert d.tokens.reused == d.tokens.prompt - d.tokens.evaluated
        # Turns are dropped whole: the prompt is the system message, whole turns from the
        # window start on, and the current turn.
        prompt = prompt_of(diagnostics, "npc")
        assert prompt[0] == ("system", SYSTEM, "")
        assert prompt[-1] == ("user", line, "")
        assert prompt[1:-1] == expected_history(agent, trim.window_start_after, t)
    assert trims >= 4, "the conversation must be long enough to trim several times"
    assert len(agent.history.turns) == count  # trimming never removes anything from the history


def test_system_message_and_current_turn_present_even_when_they_alone_do_not_fit():
    graph = asset(("Generate", "npc", {"context_size": 200, "max_tokens": 50, "system_prompt": words(100, "s")}))
    agent = Agent(graph, backend({"npc": 5}, context_size=200))
    agent.run_turn("hello")
    diagnostics = agent.run_turn(words(60, "long"))
    d = node_diag(diagnostics.diagnostics, "npc")
    assert [m.role for m in d.input.prompt] == ["system", "user"]
    assert d.input.prompt[1].content == words(60, "long")
    assert d.trim.window_start_after == 1  # the earlier turn is gone for good
    assert any("alone need" in w and "sees no history" in w for w in d.warnings)
    assert any("alone need" in w for w in diagnostics.diagnostics.warnings)
    # Next turn fits again, and the dropped turn does not come back.
    d = node_diag(agent.run_turn("short").diagnostics, "npc")
    assert d.trim.window_start_after >= 1
    assert all("hello" != m.content for m in d.input.prompt)


def test_history_role_none_output_is_never_replayed():
    graph = asset(
        ("Generate", "think", {"context_size": 1024, "max_tokens": 100, "history_role": "none",
                               "system_prompt": "plan", "default_exit": "speak"}),
        ("GenerateAndSpeak", "speak", {"context_size": 1024, "max_tokens": 100, "system_prompt": "talk",
                                       "template": "Plan: {{slots.think}}", "placement": "before"}),
    )
    agent = Agent(graph, backend({"think": 30, "speak": 20}))
    thoughts: list[str] = []
    for line in player_lines(40, seed=5):
        result = agent.run_turn(line)
        think = node_diag(result.diagnostics, "think").output
        thoughts.append(think)
        # The hidden step is not the reply; the reply node reads it through its slot only.
        assert result.reply == node_diag(result.diagnostics, "speak").output
        for node_id in ("think", "speak"):
            prompt = prompt_of(result.diagnostics, node_id)
            for _, content, _ in prompt[:-1]:
                assert not any(t and t in content for t in thoughts), f"{node_id} replayed a hidden thought"
            assert not any(role == "assistant" and content == think for role, content, _ in prompt)
    # Trimming did happen, so the property held across trims.
    assert agent.windows["speak"] > 0 and agent.windows["think"] > 0
    # The thoughts are in the history (unbounded), marked as not replayed.
    assert all(not e.replay for t in agent.history.turns for e in t.entries if e.node == "think")


def tool_graph(disposition: str, mode: str = "full", window: int = 8):
    return asset(
        ("ToolCall", "lookup", {
            "context_size": 900, "max_tokens": 100, "system_prompt": "ledger", "disposition": disposition,
            "history_mode": mode, "history_window": window, "default_exit": "answer",
            "tools": [{"name": "check_stock", "parameters": {"type": "object", "properties": {"item": {"type": "string"}}},
                       "mock_result": "count 240 " + words(20, "res")}],
        }),
        ("Generate", "answer", {"context_size": 900, "max_tokens": 100, "system_prompt": "quartermaster",
                                "history_mode": mode, "history_window": window}),
    )


def assert_pairs_whole(prompt: list[tuple[str, str, str]]) -> int:
    pairs = 0
    for i, (role, content, name) in enumerate(prompt):
        if role == "assistant" and name:
            assert i + 1 < len(prompt) and prompt[i + 1][0] == "tool" and prompt[i + 1][2] == name
            pairs += 1
        if role == "tool":
            assert i > 0 and prompt[i - 1][0] == "assistant" and prompt[i - 1][2] == name
    return pairs


@pytest.mark.parametrize("mode, window", [("full", 8), ("last_n", 3), ("last_n", 4), ("summarized", 5)])
def test_tool_pairs_are_whole_or_absent(mode, window):
    agent = Agent(tool_graph("replay", mode, window), backend({"answer": 25}))
    seen_pairs = 0
    for line in player_lines(60, seed=7, low=5, high=30):
        result = agent.run_turn(line)
        for node_id in ("lookup", "answer"):
            seen_pairs += assert_pairs_whole(prompt_of(result.diagnostics, node_id))
        # The answering node sees this turn's call and result.
        answer = prompt_of(result.diagnostics, "answer")
        assert answer[-1][0] == "tool" and answer[-1][1].startswith("count 240")
    assert seen_pairs > 0
    assert agent.windows.get("answer", 0) > 0 or mode != "full"


def test_omitted_tool_pairs_are_seen_this_turn_only():
    agent = Agent(tool_graph("omit"), backend({"answer": 10}))
    for line in player_lines(12, seed=9, low=3, high=8):
        result = agent.run_turn(line)
        answer = prompt_of(result.diagnostics, "answer")
        tools = [i for i, m in enumerate(answer) if m[0] == "tool"]
        assert tools == [len(answer) - 1]  # only the current turn's result
        lookup = prompt_of(result.diagnostics, "lookup")
        assert all(m[0] != "tool" for m in lookup)
    stored = [e for t in agent.history.turns for e in t.entries if isinstance(e, ToolExchange)]
    assert len(stored) == 12 and not any(e.replay for e in stored)  # kept in the history all the same


def test_each_node_trims_on_its_own():
    graph = asset(
        ("Generate", "small", {"context_size": 400, "max_tokens": 50, "history_role": "none", "default_exit": "big"}),
        ("Generate", "big", {"context_size": 2000, "max_tokens": 50}),
    )
    agent = Agent(graph, backend({"small": 5, "big": 15}))
    for line in player_lines(50, seed=11, low=5, high=15):
        agent.run_turn(line)
    assert agent.windows["small"] > agent.windows.get("big", 0)
    assert isinstance(agent.history.turns[0].entries[-1], Reply)
