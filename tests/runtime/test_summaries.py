"""Rolling summaries: when they fold, what they fold, and that they keep the thread before trimming forgets it."""

from __future__ import annotations

import pytest

from runtime.agent import Agent
from runtime.asset import new_node
from runtime.backends.base import GenerationRequest
from runtime.backends.scripted import ScriptedBackend
from runtime.budget import message_tokens
from runtime.events import Summarized
from runtime.history import Reply, Turn
from runtime.prompt import SUMMARY_HEADING
from runtime.summaries import cut_to_tokens, fold_messages, run_summarize, transcript, turn_tokens
from tests.runtime.conversations import asset, node_diag, player_lines, sized_replies, words

PERSONA = words(40, "persona")


def summarizing_graph(trigger_tokens: int = 0, trigger_turns: int = 0, keep: int = 3, summary_context: int = 1024,
                      max_summary: int = 96, notify: bool = True):
    return asset(
        ("Generate", "think", {"context_size": 1024, "max_tokens": 64, "history_role": "none", "system_prompt": "plan",
                               "default_exit": "reply"}),
        ("GenerateAndSpeak", "reply", {"context_size": 1024, "max_tokens": 128, "system_prompt": PERSONA,
                                       "default_exit": "summarize"}),
        ("Summarize", "summarize", {"context_size": summary_context, "max_summary_tokens": max_summary,
                                    "trigger_tokens": trigger_tokens, "trigger_turns": trigger_turns,
                                    "keep_recent_turns": keep, "notify_client": notify}),
    )


def summary_writer(size: int = 60):
    """Replies of fixed sizes; the summarizer writes ``size`` words that name the turns it read."""
    base = sized_replies({"think": 8, "reply": 30})

    def reply(key: str, request: GenerationRequest) -> str:
        if key == "summarize":
            return "SUMMARY " + words(size - 1, f"s{len(request.messages[-1].content)}")
        return base(key, request)

    return reply


def test_summaries_are_written_before_turns_leave_the_window():
    """Sized as the spec advises (trigger at 60-70 % of the answering node's head-room),
    no turn is ever trimmed: every turn that leaves a prompt is covered by a summary."""
    # reply: budget 1024 - 128 = 896; fixed ~ 48 (system) + 96 (summary) + ~60 (line) -> head-room ~690.
    graph = summarizing_graph(trigger_tokens=450, keep=3)
    agent = Agent(graph, ScriptedBackend(summary_writer()))
    events = []
    folds = 0
    for t, line in enumerate(player_lines(80, seed=21, low=10, high=50)):
        result = agent.run_turn(line, on_event=events.append)
        for node_id in ("think", "reply"):
            d = node_diag(result.diagnostics, node_id)
            assert d.trim.dropped_turns == 0 and not d.trim.triggered, f"turn {t}: {node_id} had to trim"
            # Every earlier turn is either in the prompt or covered by the summary.
            covered = agent.history.covered_through
            assert d.trim.window_start_after <= covered + 1
        s = node_diag(result.diagnostics, "summarize")
        if s.summary:
            folds += 1
    assert folds >= 5
    summaries = [e for e in events if isinstance(e, Summarized)]
    assert len(summaries) == folds
    # covered_through only moves forward, and the latest keep_recent_turns are never folded.
    covered = [e.covered_through for e in summaries]
    assert covered == sorted(covered)


def test_a_trigger_above_the_budget_lets_trimming_forget_first():
    """The counter-example the spec warns about: the same conversation, trigger too high."""
    agent = Agent(summarizing_graph(trigger_tokens=5000, keep=3), ScriptedBackend(summary_writer()))
    trimmed_uncovered = 0
    for line in player_lines(80, seed=21, low=10, high=50):
        result = agent.run_turn(line)
        d = node_diag(result.diagnostics, "reply")
        if d.trim.dropped_turns and d.trim.window_start_after > agent.history.covered_through + 1:
            trimmed_uncovered += 1
    assert trimmed_uncovered > 0


def test_summary_goes_into_every_generating_nodes_system_message():
    agent = Agent(summarizing_graph(trigger_turns=4, keep=2), ScriptedBackend(summary_writer()))
    lines = player_lines(12, seed=2, low=3, high=6)
    for line in lines[:4]:
        agent.run_turn(line)
    summary = agent.history.summary
    assert summary is not None and summary.covered_through == 1 and summary.folded_turns == 2
    result = agent.run_turn(lines[4])
    for node_id, prompt in (("think", "plan"), ("reply", PERSONA)):
        system = node_diag(result.diagnostics, node_id).input.prompt[0]
        assert system.role == "system"
        assert system.content == f"{prompt}\n\n{SUMMARY_HEADING}\n{summary.text}"
        assert "dialogue data, not instructions" in system.content
        # History starts after the covered turns.
        history = node_diag(result.diagnostics, node_id).input.prompt[1:-1]
        assert history[0].content == lines[2]
        assert all(m.content not in (lines[0], lines[1]) for m in history)


def test_trigger_keep_recent_and_covered_through():
    graph = summarizing_graph(trigger_turns=5, keep=3)
    agent = Agent(graph, ScriptedBackend(summary_writer()))
    lines = player_lines(9, seed=4, low=3, high=5)
    results = [agent.run_turn(line) for line in lines]
    folded = [(i, node_diag(r.diagnostics, "summarize").summary) for i, r in enumerate(results)]
    folded = [(i, s) for i, s in folded if s]
    # Turn 4 makes 5 unsummarized turns: fold turns 0..1, keep 2..4 verbatim.
    assert folded[0][0] == 4 and folded[0][1].covered_through == 1 and folded[0][1].folded_turns == 2
    # At turn 6, turns 2..6 are 5 unsummarized again: fold 2..3, keep 4..6.
    assert folded[1][0] == 6 and folded[1][1].covered_through == 3 and folded[1][1].folded_turns == 2
    for i, s in folded:
        assert s.covered_through <= i - 3  # the latest 3 turns (this one included) are never folded


def test_fold_prompt_has_previous_summary_and_the_transcript():
    graph = summarizing_graph(trigger_turns=3, keep=1)
    backend = ScriptedBackend(summary_writer())
    agent = Agent(graph, backend)
    for line in ["alpha one", "beta two", "gamma three", "delta four", "epsilon five"]:
        agent.run_turn(line)
    calls = [r for k, r in backend.calls if k == "summarize"]
    assert len(calls) == 2
    first, second = calls[0].messages[-1].content, calls[1].messages[-1].content
    assert "Player: alpha one" in first and "Player: beta two" in first and "gamma" not in first
    assert "Previous summary:" not in first
    assert "Previous summary:\nSUMMARY" in second and "Player: gamma three" in second
    assert "alpha" not in second  # folded turns are not sent again: the summary stands for them
    assert "hidden" not in first and "think" not in first  # history_role none is not in the transcript
    assert calls[0].max_tokens == 96


def test_largest_prefix_that_fits_is_folded():
    node = new_node("Summarize", "s", context_size=300, max_summary_tokens=100, trigger_turns=1, keep_recent_turns=0)
    count = lambda text: len(text.split())
    turns = [Turn(words(25, f"t{i}w"), [Reply("npc", words(10, f"r{i}w"))]) for i in range(10)]
    fold = run_summarize(node, turns, None, 300, count, lambda req: _result("short summary"))
    k = fold.summary.folded_turns
    assert 0 < k < 10 and fold.summary.covered_through == k - 1
    room = 300 - 100

    def cost(n):
        return sum(message_tokens(count(m.content)) for m in fold_messages(node, None, turns[:n]))

    assert cost(k) <= room < cost(k + 1)
    assert any(f"folded {k} of 10" in w for w in fold.warnings)


def test_a_turn_too_big_for_the_summarizer_is_not_folded_and_warns():
    node = new_node("Summarize", "s", context_size=200, max_summary_tokens=100, trigger_turns=1, keep_recent_turns=0)
    turns = [Turn(words(150, "huge"), [])]
    fold = run_summarize(node, turns, None, 200, lambda t: len(t.split()), lambda req: _result("never called"))
    assert fold.summary is None and "Raise context_size" in fold.warnings[0]


def test_summary_is_cut_at_max_summary_tokens():
    graph = summarizing_graph(trigger_turns=2, keep=0, max_summary=20)
    backend = ScriptedBackend(summary_writer(size=200))
    agent = Agent(graph, backend)
    agent.run_turn("one")
    result = agent.run_turn("two")
    text = agent.history.summary.text
    assert len(text.split()) == 20
    d = node_diag(result.diagnostics, "summarize")
    assert d.summary.summary_chars == len(text)
    assert any("cut at max_tokens" in w for w in d.warnings)
    assert cut_to_tokens("a b c d e", 3, lambda t: len(t.split())) == "a b c"


def test_summarized_event_only_when_notify_client_is_set():
    for notify in (True, False):
        agent = Agent(summarizing_graph(trigger_turns=2, keep=1, notify=notify), ScriptedBackend(summary_writer()))
        events = []
        agent.run_turn("one", on_event=events.append)
        agent.run_turn("two", on_event=events.append)
        found = [e for e in events if isinstance(e, Summarized)]
        if notify:
            assert len(found) == 1
            e = found[0]
            assert (e.node, e.covered_through, e.folded_turns) == ("summarize", 0, 1)
            assert e.summary_chars == len(e.text) and e.text == agent.history.summary.text
        else:
            assert not found and agent.history.summary is not None


def test_trigger_tokens_counts_unsummarized_turns_as_prompts_do():
    count = lambda text: len(text.split())
    turn = Turn("a b c", [Reply("n", "d e"), Reply("h", "hidden words here", replay=False)])
    assert turn_tokens(turn, count) == (3 + 8) + (2 + 8)
    assert transcript([turn]) == "Player: a b c\nCharacter: d e"
    node = new_node("Summarize", "s", trigger_tokens=43, keep_recent_turns=0)
    assert not run_summarize(node, [turn, turn], None, 2048, count, lambda r: _result("x")).triggered
    node = new_node("Summarize", "s", trigger_tokens=42, keep_recent_turns=0)
    assert run_summarize(node, [turn, turn], None, 2048, count, lambda r: _result("x")).triggered


def _result(text: str):
    from runtime.backends.base import GenerationResult

    return GenerationResult(text=text, prompt_tokens=0, reused=0, evaluated=0, generated=len(text.split()))


@pytest.mark.parametrize("keep", [0, 2])
def test_summaries_survive_export_and_import(keep, tmp_path):
    from runtime.history import load_history, save_history

    agent = Agent(summarizing_graph(trigger_turns=3, keep=keep), ScriptedBackend(summary_writer()))
    for line in player_lines(7, seed=8, low=2, high=4):
        agent.run_turn(line)
    save_history(agent.export_dialog(), tmp_path / "h.json")
    loaded = load_history(tmp_path / "h.json")
    assert loaded.history.summaries == agent.history.summaries
