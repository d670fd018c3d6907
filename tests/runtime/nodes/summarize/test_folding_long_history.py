"""A Summarize node's cost per turn does not grow with the history (issue 14: with 100,000 turns
waiting to be folded, each turn took 30 s, because the search for what fits counted transcripts of
the whole pending history, and every pending turn was counted again each turn)."""

from __future__ import annotations

from runtime.agent import Agent
from runtime.asset.file import load_asset
from runtime.backends.scripted import ScriptedBackend
from runtime.dialogue.history import Reply, Turn
from runtime.nodes.summarize.folding import TurnCosts, fold_turns, turn_tokens
from runtime.resources import examples_dir


class CountingBackend(ScriptedBackend):
    """Counts what the tokenizer is asked to count."""

    def __init__(self) -> None:
        super().__init__(reply=lambda key, _request: "They talked about the weather." if key == "summarize" else "Aye.")
        self.counted_calls = 0
        self.counted_chars = 0

    def count_tokens(self, model: str, text: str) -> int:
        self.counted_calls += 1
        self.counted_chars += len(text)
        return super().count_tokens(model, text)


def counted_per_turn(history_turns: int) -> tuple[int, int]:
    """(count_tokens calls, characters counted) on the third turn after seeding a long history
    that no summary covers yet (the example folds about 55 turns a turn)."""
    backend = CountingBackend()
    agent = Agent(load_asset(examples_dir() / "long_conversation.json"), backend, str(examples_dir()))
    agent.seed_history([Turn(f"Line {i} about the weather.", [Reply("reply", f"Reply {i}: it is fine.")])
                        for i in range(history_turns)])
    for line in ("Hello.", "And the harvest?"):
        agent.run_turn(line)
    backend.counted_calls = backend.counted_chars = 0
    agent.run_turn("Tell me more.")
    assert agent.history.summaries, "the example folds"
    return backend.counted_calls, backend.counted_chars


def test_what_is_counted_per_turn_does_not_grow_with_the_history():
    calls_1k, chars_1k = counted_per_turn(1_000)
    calls_10k, chars_10k = counted_per_turn(10_000)
    # Before: 11 calls and 82,000 characters at 1,000 turns; 16 calls and 757,000 at 10,000.
    assert calls_10k <= calls_1k + 1, (calls_1k, calls_10k)
    assert chars_10k <= 1.2 * chars_1k, (chars_1k, chars_10k)


def test_turn_costs_count_each_turn_once_across_runs():
    counted: list[str] = []

    def count(text: str) -> int:
        counted.append(text)
        return len(text.split())

    turns = [Turn(f"line {i}", [Reply("r", f"reply {i}")]) for i in range(50)]
    costs = TurnCosts()
    first = costs.total(turns, count)
    assert first == sum(turn_tokens(t, lambda s: len(s.split())) for t in turns)
    assert len(counted) == 100
    newer = turns[20:] + [Turn("new line", [])]
    assert costs.total(newer, count) == sum(turn_tokens(t, lambda s: len(s.split())) for t in newer)
    assert counted[100:] == ["new line"], "only the new turn is counted"
    edited = Turn("line 30 edited", turns[30].entries)
    newer[10] = edited
    costs.total(newer, count)
    assert counted[101:] == ["line 30 edited", "reply 30"], "an edited turn (a new Turn) is counted again"


def test_the_fold_is_the_same_with_remembered_costs():
    asset = load_asset(examples_dir() / "long_conversation.json")
    node = asset.node("summarize")
    turns = [Turn(f"Line {i} about the weather.", [Reply("reply", f"Reply {i}: it is fine.")]) for i in range(300)]

    def generate(_request):
        from runtime.backends.base import GenerationResult

        return GenerationResult(text="A summary.", prompt_tokens=1, reused=0, evaluated=1, generated=2)

    def count(text: str) -> int:
        return len(text.split())

    plain = fold_turns(node, turns, None, 1024, count, generate)
    costs = TurnCosts()
    fold_turns(node, turns[:-1], None, 1024, count, generate, costs=costs)
    remembered = fold_turns(node, turns, None, 1024, count, generate, costs=costs)
    assert plain.summary == remembered.summary and plain.unsummarized_tokens == remembered.unsummarized_tokens
    assert plain.messages == remembered.messages
