"""The editor's Validator keeps what an edit left unchanged (each node's own rules, the graph's
walks) between validations; after any sequence of edits it must give exactly what a fresh
validate_asset gives: the same problems in the same order."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime.asset.model import Asset, new_node
from runtime.asset.validation import Validator, validate_asset

TYPES = ["Generate", "GenerateAndSpeak", "Summarize", "ClassifyIntent", "ToolCall", "Retrieve"]
IDS = [f"n{i}" for i in range(8)]
CONTEXTS = {"small.gguf": 256, "big.gguf": 8192}


def model_context(name: str) -> int | None:
    return CONTEXTS.get(name)


def make(type_name: str, node_id: str, target: str, data) -> object:
    fields: dict = {}
    if type_name in ("Generate", "GenerateAndSpeak", "ToolCall"):
        fields.update(default_exit=target, system_prompt=data.draw(st.sampled_from(["", "Be brief.", "x " * 400])),
                      history_mode=data.draw(st.sampled_from(["full", "summarized", "none"])),
                      history_role=data.draw(st.sampled_from(["assistant", "none"])),
                      model_name=data.draw(st.sampled_from(["", "small.gguf", "big.gguf"])),
                      max_tokens=data.draw(st.sampled_from([64, 300])))
        if type_name == "ToolCall" and data.draw(st.booleans()):
            fields["tools"] = [{"name": "look"}]
    elif type_name == "Summarize":
        fields.update(default_exit=target, trigger_tokens=data.draw(st.sampled_from([100, 5000])),
                      context_size=data.draw(st.sampled_from([0, 2048])))
    elif type_name == "ClassifyIntent":
        fields.update(fallback_exit=target,
                      intents=[{"name": "buy", "exit": data.draw(st.sampled_from(IDS + ["", "ghost"]))}]
                      if data.draw(st.booleans()) else [])
    elif type_name == "Retrieve":
        fields.update(default_exit=target)
    fields["title"] = data.draw(st.sampled_from(["", "A title"]))
    return new_node(type_name, node_id, **fields)


def a_node(data, node_id: str | None = None):
    node_id = node_id or data.draw(st.sampled_from(IDS))
    return make(data.draw(st.sampled_from(TYPES)), node_id, data.draw(st.sampled_from(IDS + ["", "ghost"])), data)


def edit(asset: Asset, data) -> None:
    """One edit as the editor makes it: a changed node is a new object; a move sets the position."""
    kind = data.draw(st.sampled_from(["replace", "title", "add", "remove", "start", "default_model", "move"]))
    nodes = asset.nodes
    if kind == "add" or not nodes:
        nodes.insert(data.draw(st.integers(0, len(nodes))), a_node(data))
        return
    index = data.draw(st.integers(0, len(nodes) - 1))
    if kind == "replace":
        nodes[index] = a_node(data, data.draw(st.sampled_from([nodes[index].id, *IDS])))
    elif kind == "title":
        nodes[index] = nodes[index].model_copy(update={"title": data.draw(st.text(max_size=3))})
    elif kind == "remove":
        nodes.pop(index)
    elif kind == "start":
        asset.start_node = data.draw(st.sampled_from(IDS + ["", "ghost"]))
    elif kind == "default_model":
        asset.default_model = data.draw(st.sampled_from(["", "small.gguf", "big.gguf", "m.gguf"]))
    else:
        nodes[index].position = (data.draw(st.floats(-500, 500)), 0.0)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_incremental_validation_equals_a_fresh_one_after_random_edits(data):
    asset = Asset(default_model=data.draw(st.sampled_from(["", "m.gguf"])), start_node="n0",
                  nodes=[a_node(data, node_id) for node_id in IDS[:data.draw(st.integers(0, 6))]])
    validator = Validator()
    source = data.draw(st.sampled_from(["", "a.json"]))
    for _ in range(data.draw(st.integers(1, 12))):
        kept = validator.validate(asset, source, model_context=model_context)
        assert kept == validate_asset(asset, source, model_context=model_context)
        if data.draw(st.integers(0, 5)) == 0:
            source = data.draw(st.sampled_from(["", "a.json", "b.json"]))  # saved under another name
        else:
            edit(asset, data)
    assert validator.validate(asset, source, model_context=model_context) == validate_asset(
        asset, source, model_context=model_context)


def test_a_knowledge_file_that_appears_is_seen_by_a_kept_validator(tmp_path):
    node = new_node("Retrieve", "r", source_file="facts.txt")
    asset = Asset(start_node="r", nodes=[node])
    validator = Validator()
    assert any("not found" in p.message for p in validator.validate(asset, asset_dir=tmp_path))
    (tmp_path / "facts.txt").write_text("The inn opens at dawn.\n")
    assert validator.validate(asset, asset_dir=tmp_path) == validate_asset(asset, asset_dir=tmp_path) == []


def test_a_title_edit_runs_only_the_changed_nodes_own_rules(monkeypatch):
    from runtime.nodes import Generate

    asset = Asset(start_node="n0", default_model="m.gguf", nodes=[
        new_node("Generate", f"n{i}", default_exit=f"n{i + 1}" if i < 99 else "") for i in range(100)])
    validator = Validator()
    validator.validate(asset)
    calls = []
    original = Generate.check
    monkeypatch.setattr(Generate, "check", lambda self, checks: (calls.append(self.id), original(self, checks)))
    asset.nodes[50] = asset.nodes[50].model_copy(update={"title": "edited"})
    assert validator.validate(asset) == validate_asset(asset)
    assert calls.count("n50") == 2 and len(calls) == 101, "the kept validator ran n50's rules alone"
