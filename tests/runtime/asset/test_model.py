"""Every node type's defaults and constraints."""

import pytest
from pydantic import ValidationError

from runtime.asset.model import (
    ASSET_VERSION,
    NODE_TYPES,
    Asset,
    Attribute,
    ClassifyAttributes,
    ClassifyIntent,
    Generate,
    GenerateAndSpeak,
    Intent,
    Retrieve,
    Summarize,
    Tool,
    ToolCall,
    new_node,
)
from runtime.resources import default_prompt

GENERATING_DEFAULTS = {
    "title": "",
    "model_name": "",
    "context_size": 0,
    "max_tokens": 256,
    "system_prompt": "",
    "history_role": "assistant",
    "input": "",
    "template": "",
    "placement": "before",
    "history_mode": "full",
    "history_window": 8,
    "temperature": 0.7,
    "top_p": 0.95,
    "seed": 1,
    "default_exit": "",
    "position": (0.0, 0.0),
    "metadata": {},
}


def test_every_spec_node_type_exists():
    assert set(NODE_TYPES) == {
        "Generate", "GenerateAndSpeak", "ToolCall", "Summarize", "ClassifyIntent", "ClassifyAttributes", "Guard", "Retrieve",
        "Subgraph", "Exit",
    }


@pytest.mark.parametrize("cls", [Generate, GenerateAndSpeak, ToolCall])
def test_generating_node_defaults(cls):
    node = cls(id="n")
    for field, expected in GENERATING_DEFAULTS.items():
        assert getattr(node, field) == expected, field
    if cls is ToolCall:
        assert node.tools == [] and node.disposition == "replay"


def test_summarize_defaults_follow_the_spec():
    node = Summarize(id="s")
    assert node.context_size == 2048
    assert node.keep_recent_turns == 3
    assert node.trigger_tokens == 1024 and node.trigger_turns == 0
    assert node.max_summary_tokens <= node.context_size - 64
    assert node.model_name == "" and node.default_exit == "" and node.notify_client is False
    assert node.system_prompt == default_prompt("summarize_system")
    prompt = node.system_prompt.lower()
    for rule in ("third person", "name the speakers", "verbatim", "only what was said", "not instructions", "length"):
        assert rule in prompt, rule
    assert "{{transcript}}" in node.template and "{{previous_summary}}" in node.template


def test_classifier_and_retrieve_defaults():
    ci = ClassifyIntent(id="c")
    assert ci.intents == [] and ci.fallback_exit == "" and ci.slot == "intent" and ci.context_size == 2048
    ca = ClassifyAttributes(id="a")
    assert ca.attributes == [] and ca.default_exit == ""
    r = Retrieve(id="r")
    assert r.top_k == 3 and r.slot == "knowledge" and r.embedding_model == "" and r.entries == []


def test_asset_defaults():
    a = Asset()
    assert a.version == ASSET_VERSION and a.enable_diagnostics is True and a.variables == {} and a.start_node == ""


@pytest.mark.parametrize(
    "cls, fields, bad_field",
    [
        (Generate, {"max_tokens": 0}, "max_tokens"),
        (Generate, {"context_size": 512, "max_tokens": 512}, "max_tokens"),
        (Generate, {"context_size": -1}, "context_size"),
        (Generate, {"history_role": "user"}, "history_role"),
        (Generate, {"placement": "middle"}, "placement"),
        (Generate, {"history_mode": "everything"}, "history_mode"),
        (Generate, {"history_window": 0}, "history_window"),
        (Generate, {"temperature": 2.5}, "temperature"),
        (Generate, {"top_p": 0}, "top_p"),
        (Generate, {"seed": -2}, "seed"),
        (Generate, {"input": "not a slot"}, "input"),
        (GenerateAndSpeak, {"max_tokens": 4096, "context_size": 2048}, "max_tokens"),
        (ToolCall, {"disposition": "sometimes"}, "disposition"),
        (ToolCall, {"tools": [{"name": "a"}, {"name": "a"}]}, "tools"),
        (ToolCall, {"tools": [{"name": "a", "parameters": {"type": "string"}}]}, "tools"),
        (Summarize, {"max_summary_tokens": 2000}, "max_summary_tokens"),
        (Summarize, {"context_size": 512, "max_summary_tokens": 449}, "max_summary_tokens"),
        (Summarize, {"trigger_tokens": 0, "trigger_turns": 0}, "trigger_tokens"),
        (Summarize, {"keep_recent_turns": -1}, "keep_recent_turns"),
        (ClassifyIntent, {"intents": [{"name": "x"}, {"name": "x"}]}, "intents"),
        (ClassifyIntent, {"slot": ""}, "slot"),
        (ClassifyAttributes, {"attributes": [{"name": "mood", "values": []}]}, "attributes"),
        (ClassifyAttributes, {"attributes": [{"name": "mood", "values": ["a", "a"]}]}, "attributes"),
        (Retrieve, {"top_k": 0}, "top_k"),
        (Retrieve, {"entries": [{"text": ""}]}, "entries"),
    ],
)
def test_constraints_reject_bad_values(cls, fields, bad_field):
    with pytest.raises(ValidationError) as info:
        cls(id="n", **fields)
    assert bad_field in str(info.value)


def test_constraint_boundaries_accept_good_values():
    Generate(id="n", context_size=512, max_tokens=511)
    Summarize(id="s", context_size=512, max_summary_tokens=448)
    Summarize(id="s", trigger_tokens=0, trigger_turns=4)
    ClassifyIntent(id="c", intents=[Intent(name="greet", exit="x")])
    ClassifyAttributes(id="a", attributes=[Attribute(name="mood", values=["calm", "angry"])])
    ToolCall(id="t", tools=[Tool(name="look")])


def test_unknown_keys_are_rejected_not_lost():
    with pytest.raises(ValidationError, match="extra"):
        Generate(id="n", max_token=3)
    node = Generate(id="n", metadata={"designer_note": "keep"})
    assert node.metadata == {"designer_note": "keep"}


def test_exits_name_ports_in_display_order():
    ci = ClassifyIntent(id="c", intents=[Intent(name="a", exit="x"), Intent(name="b", exit="y")], fallback_exit="z")
    assert ci.exits() == {"intent:a": "x", "intent:b": "y", "fallback_exit": "z"}
    assert new_node("Generate", "g", default_exit="c").exits() == {"default_exit": "c"}


def test_model_for_uses_agent_default_when_empty():
    a = Asset(default_model="base.gguf", nodes=[Generate(id="g"), Summarize(id="s", model_name="small.gguf")])
    assert a.model_for(a.node("g")) == "base.gguf"
    assert a.model_for(a.node("s")) == "small.gguf"


def test_names_with_a_trailing_newline_are_not_identifiers():
    """`$` matches before a final newline; ids and variable names must match whole."""
    import pydantic

    from runtime.asset.model import Asset, is_valid_id

    assert is_valid_id("reply") and not is_valid_id("reply\n")
    with pytest.raises(pydantic.ValidationError):
        Asset(variables={"x\n": 1})
