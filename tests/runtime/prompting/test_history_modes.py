"""Each history mode's exact behaviour (context-modes.md, without its Last N limitation)."""

from __future__ import annotations

import pytest

from runtime.agent import Agent
from runtime.dialogue.history import Reply, Summary, ToolExchange, Turn
from runtime.prompting.prompt import SUMMARY_HEADING
from tests.runtime.conversations import asset, backend, node_diag, prompt_of

CALL = '{"name": "look", "arguments": {"q": "x"}}'
SEEDED = [
    Turn("a0", [Reply("npc", "r0")]),
    Turn("a1", [ToolExchange("lookup", "look", {"q": "x"}, "found1"), Reply("npc", "r1")]),
    Turn("a2", [Reply("think", "hidden2", replay=False), Reply("npc", "r2")]),
    Turn("a3", [Reply("npc", "r3")]),
]
# The entries later prompts may see, oldest first: a player line, a reply, a tool pair count one each.
ENTRIES = [
    [("user", "a0", "")], [("assistant", "r0", "")],
    [("user", "a1", "")], [("assistant", CALL, "look"), ("tool", "found1", "look")], [("assistant", "r1", "")],
    [("user", "a2", "")], [("assistant", "r2", "")],
    [("user", "a3", "")], [("assistant", "r3", "")],
]


def agent_for(mode: str, window: int = 8, context: int = 2048) -> Agent:
    graph = asset(("Generate", "npc", {"context_size": context, "max_tokens": 50, "system_prompt": "be Mira",
                                       "history_mode": mode, "history_window": window}))
    agent = Agent(graph, backend({"npc": 3}))
    agent.seed_history([Turn(t.player, list(t.entries)) for t in SEEDED])
    return agent


def history_part(agent: Agent) -> tuple[list, list]:
    result = agent.run_turn("now")
    prompt = prompt_of(result.diagnostics, "npc")
    assert prompt[0][0] == "system" and prompt[-1] == ("user", "now", "")
    return prompt[0], prompt[1:-1]


def flat(entries) -> list:
    return [m for entry in entries for m in entry]


def test_full_sends_every_entry():
    system, history = history_part(agent_for("full"))
    assert history == flat(ENTRIES)
    assert system == ("system", "be Mira", "")


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 9, 50])
def test_last_n_sends_exactly_the_last_n_entries_that_exist(n):
    agent = agent_for("last_n", n)
    _, history = history_part(agent)
    assert history == flat(ENTRIES[-n:])  # exactly N (all 9 when fewer exist), tool pairs whole
    assert not node_diag(agent.run_turn("again").diagnostics, "npc").warnings


def test_last_n_ignores_the_summary_and_none_sends_nothing():
    agent = agent_for("last_n", 2)
    agent.history.summaries.append(Summary("they met", covered_through=1, folded_turns=2))
    system, history = history_part(agent)
    assert system == ("system", "be Mira", "") and history == flat(ENTRIES[-2:])
    agent = agent_for("none")
    agent.history.summaries.append(Summary("they met", covered_through=1, folded_turns=2))
    system, history = history_part(agent)
    assert system == ("system", "be Mira", "") and history == []


def test_summarized_before_the_first_summary_sends_the_recent_window():
    _, history = history_part(agent_for("summarized", 3))
    assert history == flat(ENTRIES[-3:])


def test_summarized_sends_the_summary_and_the_window_after_the_covered_turns():
    agent = agent_for("summarized", 3)
    agent.history.summaries.append(Summary("Mira met the player.", covered_through=1, folded_turns=2))
    system, history = history_part(agent)
    assert system == ("system", f"be Mira\n\n{SUMMARY_HEADING}\nMira met the player.", "")
    assert history == flat(ENTRIES[-3:])
    agent = agent_for("summarized", 50)
    agent.history.summaries.append(Summary("Mira met the player.", covered_through=1, folded_turns=2))
    _, history = history_part(agent)
    assert history == flat(ENTRIES[5:])  # never the covered turns, however large the window


def test_full_with_a_summary_starts_after_the_covered_turns():
    agent = agent_for("full")
    agent.history.summaries.append(Summary("S", covered_through=2, folded_turns=3))
    system, history = history_part(agent)
    assert system[1].endswith(f"{SUMMARY_HEADING}\nS")
    assert history == flat(ENTRIES[7:])


def test_last_n_that_does_not_fit_is_trimmed_by_whole_turns_and_says_so():
    # budget 150 - 50 = 100; each entry costs 9-16 tokens, so 9 entries do not fit.
    graph = asset(("Generate", "npc", {"context_size": 150, "max_tokens": 50, "system_prompt": "be Mira",
                                       "history_mode": "last_n", "history_window": 9}))
    agent = Agent(graph, backend({"npc": 3}, context_size=150))
    agent.seed_history([Turn(f"line {i} " + "w " * 4, [Reply("npc", "reply " + "v " * 4)]) for i in range(6)])
    result = agent.run_turn("now")
    d = node_diag(result.diagnostics, "npc")
    assert d.trim.triggered and d.tokens.counted <= 75
    sent = d.trim.history_entries
    assert sent < 9
    assert any(f"sent {sent} of the last 9" in w for w in d.warnings)
    # whole turns: the history starts with a player line
    assert d.input.prompt[1].role == "user"
