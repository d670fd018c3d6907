"""The runtime on the real sample model (SmolLM2-135M-Instruct Q4_1) through the llama.cpp backend.

The deterministic tests check the exact arithmetic; these check the same behaviours hold
with a real tokenizer, chat template, KV cache and grammar-constrained sampling.
"""

from __future__ import annotations

import threading

import pytest

from runtime.agent import Agent, TurnCancelled
from runtime.asset.file import load_asset
from runtime.dialogue.dialog_file import dumps_history, parse_history
from runtime.events import Speak, Summarized, Token, ToolCalled
from runtime.problems import BackendError
from runtime.prompting.prompt import SUMMARY_HEADING
from runtime.resources import examples_dir

pytestmark = pytest.mark.model

LINES = [
    "Good evening! I just arrived from the coast road.",
    "My name is Aldric and I am looking for my lost brother.",
    "He was wearing a green cloak and carried a lute.",
    "Have you seen anyone like that around here?",
    "I promise to pay you ten silver for any news.",
    "What do people in the village talk about these days?",
    "Is the road to the mountains safe at night?",
    "Tell me a short story about the old mill.",
    "Who else might know something about travellers?",
    "Thank you. I will come back tomorrow morning.",
    "One more thing: where can I buy bread?",
    "Goodbye for now, and keep the fire warm.",
]


@pytest.fixture(scope="module")
def model(sample_model) -> str:
    return str(sample_model)


@pytest.fixture(scope="module")
def backend():
    from runtime.backends.llama import LlamaBackend

    b = LlamaBackend(asset_dir=examples_dir())
    yield b
    b.close()


def example(name: str, model: str, **node_changes):
    asset = load_asset(examples_dir() / f"{name}.json").model_copy(update={"default_model": model})
    nodes = [n.model_copy(update=node_changes.get(n.id, {})) for n in asset.nodes]
    return asset.model_copy(update={"nodes": nodes})


def test_chat_example_streams_speaks_and_reuses_the_cache(model, backend):
    agent = Agent(example("chat", model, reply={"max_tokens": 40}), backend, str(examples_dir()))
    previous = None
    for i, line in enumerate(LINES[:3]):
        events = []
        result = agent.run_turn(line, on_event=events.append)
        d = result.diagnostics.nodes[0]
        assert result.reply.strip()
        assert "".join(e.text for e in events if isinstance(e, Token)) == result.reply
        spoken = " ".join(e.text for e in events if isinstance(e, Speak))
        assert spoken.split() == result.reply.split()
        assert d.tokens.prompt == d.tokens.reused + d.tokens.evaluated
        assert d.tokens.budget == 2048 - 40
        # The budget's arithmetic (tokenizer + 8 per message) covers the real chat template.
        assert d.tokens.prompt <= d.tokens.counted + 8
        if previous is not None:
            # The last user message carries this turn's context line, so the prompts part after the
            # system prompt: it (50 tokens, less than the 64-token blocks of old) comes from the cache.
            assert not d.tokens.cold and d.tokens.reused >= 40
        previous = d.tokens
        assert d.input.prompt[-1].content.endswith(line)
        assert d.input.prompt[-1].content.startswith("It is evening. The player's name is Traveller.")


def test_long_conversation_trims_on_the_real_model(model, backend):
    # Only the reply node (no Summarize), so the example's 512-token window has to trim.
    asset = example("long_conversation", model, reply={"max_tokens": 48, "default_exit": ""})
    agent = Agent(asset, backend, str(examples_dir()))
    previous = 0
    trims = 0
    for line in LINES:
        d = agent.run_turn(line).diagnostics.nodes[0]
        assert d.tokens.budget == 512 - 48
        assert d.tokens.counted <= 464
        assert d.tokens.prompt <= d.tokens.counted + 8  # the real chat template costs less than 8 a message
        assert d.trim.window_start_before == previous and d.trim.window_start_after >= previous
        previous = d.trim.window_start_after
        if d.trim.triggered:
            trims += 1
            assert d.tokens.counted <= 464 * 3 // 4
            assert d.tokens.reused < d.tokens.evaluated  # the start changed: most of the prompt is read again
        # System message and current turn always there; history starts with a whole turn.
        assert d.input.prompt[0].role == "system" and d.input.prompt[-1].content == line
        history = d.input.prompt[1:-1]
        if history:
            assert history[0].content == agent.history.turns[d.trim.window_start_after].player
    assert trims >= 1
    assert len(agent.history.turns) == len(LINES)


def test_long_conversation_summaries_on_the_real_model(model, backend):
    asset = example("long_conversation", model, reply={"max_tokens": 32, "seed": 7},
                    summarize={"max_summary_tokens": 48, "trigger_tokens": 0, "trigger_turns": 4,
                               "keep_recent_turns": 2})
    agent = Agent(asset, backend, str(examples_dir()))
    summaries = []
    for line in LINES[:6]:
        events = []
        summary = agent.history.summary  # the one this turn's prompts use
        result = agent.run_turn(line, on_event=events.append)
        summaries += [e for e in events if isinstance(e, Summarized)]
        d = result.diagnostics.nodes[0]
        if summary is not None:
            assert d.input.prompt[0].content.endswith(f"{SUMMARY_HEADING}\n{summary.text}")
            covered = {t.player for t in agent.history.turns[: summary.covered_through + 1]}
            assert not any(m.content in covered for m in d.input.prompt[1:-1])
            assert d.input.prompt[1].content == agent.history.turns[summary.covered_through + 1].player
    # Folds at turn 3 (turns 0-1) and turn 5 (turns 2-3); the 2 latest turns stay verbatim.
    assert [(e.covered_through, e.folded_turns) for e in summaries] == [(1, 2), (3, 2)]
    assert all(0 < e.summary_chars == len(e.text) for e in summaries)
    assert len(agent.history.summary.text.split()) <= 48

    # Export then import: the next prompt is the same.
    copy = Agent(asset, backend, str(examples_dir()))
    copy.import_dialog(parse_history(dumps_history(agent.export_dialog())))
    a = agent.run_turn(LINES[6]).diagnostics.nodes[0]
    b = copy.run_turn(LINES[6]).diagnostics.nodes[0]
    assert a.input.prompt == b.input.prompt
    assert a.trim == b.trim


def test_tool_calling_example_stores_a_whole_pair(model, backend):
    agent = Agent(example("tool_calling", model), backend, str(examples_dir()))
    events = []
    result = agent.run_turn("How many arrows do we have in the stores?", on_event=events.append,
                            tool_result=lambda node, tool, args: '{"silver": 3}')
    calls = [e for e in events if isinstance(e, ToolCalled)]
    assert len(calls) == 1 and calls[0].tool in ("check_stock", "price_of")
    assert isinstance(calls[0].arguments.get("item"), str)
    answer = next(n for n in result.diagnostics.nodes if n.node == "reply")
    assert answer.input.prompt[-1].role == "tool" and answer.input.prompt[-2].name == calls[0].tool
    # Next turn: the pair is replayed whole, the hidden tool node's raw output is not a reply.
    result = agent.run_turn("And how much do they cost?", tool_result=lambda node, tool, args: '{"silver": 3}')
    answer = next(n for n in result.diagnostics.nodes if n.node == "reply")
    roles = [m.role for m in answer.input.prompt]
    tool_at = roles.index("tool")
    assert roles[tool_at - 1] == "assistant" and answer.input.prompt[tool_at - 1].name


def test_intent_router_and_retrieval_examples(model, backend):
    agent = Agent(example("intent_router", model), backend, str(examples_dir()))
    result = agent.run_turn("Where is the market?")
    assert result.path[0] == "classify" and result.path[1] in ("directions", "warn", "smalltalk")
    assert result.slots["intent"] in ("ask_directions", "threaten", "")
    agent = Agent(example("retrieval", model), backend, str(examples_dir()))
    result = agent.run_turn("When did the old mill burn down?")
    reply = next(n for n in result.diagnostics.nodes if n.node == "reply")
    assert "The old mill burned down" in reply.input.prompt[-1].content


def test_cancel_and_backend_errors_leave_the_history_as_it_was(model, backend):
    agent = Agent(example("chat", model, reply={"max_tokens": 40}), backend, str(examples_dir()))
    agent.run_turn(LINES[0])
    before = agent.export_dialog()
    cancel = threading.Event()
    with pytest.raises(TurnCancelled):
        agent.run_turn(LINES[1], on_event=lambda e: isinstance(e, Token) and cancel.set(), cancel=cancel)
    assert agent.export_dialog() == before
    tiny = example("chat", model, reply={"context_size": 64, "max_tokens": 8})
    agent = Agent(tiny, backend, str(examples_dir()))
    with pytest.raises(BackendError, match="context holds 64"):
        agent.run_turn(LINES[1])
    assert agent.history.turns == [] and agent.windows == {}


def test_retrieval_with_embeddings_embeds_the_entries_once(model, backend, monkeypatch):
    embedded: list[int] = []
    real_embed = backend.embed

    def counting_embed(name, texts):
        embedded.append(len(texts))
        return real_embed(name, texts)

    monkeypatch.setattr(backend, "embed", counting_embed)
    agent = Agent(example("retrieval", model, recall={"embedding_model": model}, reply={"max_tokens": 8}),
                  backend, str(examples_dir()))
    for line in ["When did the old mill burn down?", "Who guards the gate?", "Who founded the village?"]:
        result = agent.run_turn(line)
        assert len(result.slots["knowledge"]) == 2
    entries = len(agent.node_cache("recall")["index"].entries)
    assert entries > 2
    assert embedded == [entries + 1, 1, 1]  # the entries once, then only each turn's query


def test_rewind_and_regenerate_on_the_sample_model_are_reproducible_and_reuse_the_cache(model):
    """Fixed seeds: a regenerated turn with an unchanged graph gives the same reply (and is the same
    alternative); after rewinding three turns, the node reads only what follows the prefix its cache
    still holds; a re-rolled seed gives another alternative."""
    from runtime.backends.llama import LlamaBackend

    backend = LlamaBackend(asset_dir=examples_dir())
    try:
        agent = Agent(example("chat", model, reply={"max_tokens": 24, "seed": 7}), backend, str(examples_dir()))
        first = [agent.run_turn(line) for line in LINES[:5]]
        again = agent.regenerate(2)
        reply = again.diagnostics.nodes[0]
        assert again.reply == first[2].reply, "same build, same seed, same prompt: same reply"
        assert reply.input.prompt == first[2].diagnostics.nodes[0].input.prompt
        # The cache held turn 4's prompt; only what follows the common prefix (the end of turn 1's
        # exchange on) is read again, not the whole prompt.
        assert 0 < reply.tokens.evaluated < reply.tokens.prompt and not reply.tokens.cold
        assert reply.tokens.reused >= first[1].diagnostics.nodes[0].tokens.prompt - 40
        # the same turn, its cache read the same way: that alternative again, not a second one like it
        assert again.repeated and again.turn_id == first[2].turn_id
        assert len(agent.tree.alternatives(again.turn_id)) == 1
        agent.reroll_seeds(12345)
        rerolled = agent.regenerate(2)
        assert len(agent.tree.alternatives(rerolled.turn_id)) == 2
        agent.select_turn(first[2].turn_id)
        assert [t.player for t in agent.history.turns] == LINES[:5]
    finally:
        backend.close()


def test_regenerate_then_replay_the_later_turns_adds_no_alternative_twice(model):
    """Friction 19 on the sample model: regenerate turn 2 with re-rolled seeds, replay the old branch's
    later turns on the new one, then replay them again and the whole first branch: each turn that comes
    out the same (same line, same replies, its caches read the same way) is the turn already there."""
    from runtime.backends.llama import LlamaBackend

    backend = LlamaBackend(asset_dir=examples_dir())
    try:
        agent = Agent(example("chat", model, reply={"max_tokens": 12, "seed": 3}), backend, str(examples_dir()))
        first = [agent.run_turn(line).turn_id for line in LINES[:4]]
        later = agent.recorded_lines(2)
        agent.reroll_seeds(777)
        again = agent.regenerate(1)
        assert not again.repeated and agent.tree.alternatives(again.turn_id) == [first[1], again.turn_id]
        replayed = [agent.run_turn(line) for line, _old in later]
        assert not any(r.repeated for r in replayed) and len(agent.tree) == 7
        agent.rewind(2)
        twice = [agent.run_turn(line) for line, _old in later]
        assert [r.turn_id for r in twice] == [r.turn_id for r in replayed] and all(r.repeated for r in twice)
        assert [r.reply for r in twice] == [r.reply for r in replayed]
        assert len(agent.tree) == 7 and len(agent.tree.alternatives(twice[0].turn_id)) == 1
        # the first branch, with the first seeds, once more from its first turn: all four turns are its own
        agent.reroll_seeds(0)
        agent.rewind(0)
        assert [agent.run_turn(line).turn_id for line in LINES[:4]] == first
        assert len(agent.tree) == 7 and len(agent.tree.alternatives(first[1])) == 2
    finally:
        backend.close()
