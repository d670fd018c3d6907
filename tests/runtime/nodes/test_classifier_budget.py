"""The LLM classifiers (Classify Intent, Classify Attributes) share one over-budget check: a prompt
that does not fit the node's budget is not sent; the node warns, naming the budget and the field to
raise, and takes the way it takes for an answer it cannot use (Classify Intent: the fallback exit;
Classify Attributes: no slot written, the default exit)."""

from __future__ import annotations

import pytest

from runtime.agent import Agent
from runtime.asset.model import Asset, new_node
from runtime.backends.scripted import ScriptedBackend
from tests.runtime.conversations import MODEL, node_diag, words

MOOD = [{"name": "mood", "values": ["happy", "angry"], "slot": "mood"}]
INTENTS = [{"name": "greet", "exit": "reply"}]


def _asset(type_name: str, context_size: int, model: str = MODEL) -> Asset:
    fields = ({"attributes": MOOD, "default_exit": "reply"} if type_name == "ClassifyAttributes"
              else {"intents": INTENTS, "fallback_exit": "reply"})
    nodes = [new_node(type_name, "classify", context_size=context_size, **fields),
             new_node("Generate", "reply", system_prompt="answer", context_size=512, max_tokens=16, temperature=0.0)]
    return Asset(default_model=model, start_node="classify", nodes=nodes)


def _over_budget(d, taken: str) -> None:
    assert d.exit == taken
    assert len(d.warnings) == 1 and "does not fit its budget of 32" in d.warnings[0]
    assert "without asking the model. Raise context_size." in d.warnings[0]
    assert d.tokens.budget == 32 and d.tokens.counted > 32
    assert d.tokens.generated == 0 and d.output == ""  # the model was not asked
    assert [m.role for m in d.input.prompt] == ["system", "user"]  # what would have been sent is shown


@pytest.mark.parametrize("type_name, taken, instead", [
    ("ClassifyAttributes", "default_exit", "wrote no slot"),
    ("ClassifyIntent", "fallback_exit", "took the fallback exit"),
])
def test_a_prompt_over_the_budget_is_not_sent(type_name, taken, instead):
    backend = ScriptedBackend()
    result = Agent(_asset(type_name, 64), backend).run_turn(words(80, "w"))
    assert result.path == ["classify", "reply"]
    d = node_diag(result.diagnostics, "classify")
    _over_budget(d, taken)
    assert f"; {instead} without asking the model" in d.warnings[0]
    assert result.slots.get("mood") is None and result.slots.get("intent", "") == ""
    assert [key for key, _ in backend.calls] == ["reply"]


def test_classify_attributes_writes_its_slots_when_the_prompt_fits():
    asset = _asset("ClassifyAttributes", 2048)
    asset.nodes[1].template = "(mood: {{slots.mood}})"
    result = Agent(asset, ScriptedBackend()).run_turn("I am so happy today")
    d = node_diag(result.diagnostics, "classify")
    assert d.exit == "default_exit" and d.warnings == [] and d.output == '{"mood": "happy"}'
    assert "(mood: happy)" in node_diag(result.diagnostics, "reply").input.prompt[-1].content


@pytest.mark.model
@pytest.mark.parametrize("type_name, taken", [("ClassifyAttributes", "default_exit"), ("ClassifyIntent", "fallback_exit")])
def test_a_prompt_over_the_budget_is_not_sent_on_the_sample_model(type_name, taken, sample_model):
    from runtime.backends.llama import LlamaBackend

    backend = LlamaBackend()
    try:
        result = Agent(_asset(type_name, 64, str(sample_model)), backend).run_turn(
            "Good evening, innkeeper! I have walked all day along the coast road and I would like a room.")
    finally:
        backend.close()
    assert result.path == ["classify", "reply"]
    _over_budget(node_diag(result.diagnostics, "classify"), taken)
