"""Issue 14's leftovers: numbers built in memory, paste values, every file read bounded, one home
for the surrogate helpers, and a token-count cache that forgets the least recently used."""

from __future__ import annotations

import math
import os

import pytest
from pydantic import ValidationError

import runtime.agent as agent_module
from runtime import history, names
from runtime.agent import Agent
from runtime.asset import Asset, new_node
from runtime.asset_file import problems_from_validation
from runtime.backends.scripted import ScriptedBackend
from runtime.clipboard import nodes_from_text
from runtime.history import HistoryError, load_history
from runtime.problems import AssetError, InputError, read_input_text


@pytest.mark.parametrize("field, value", [
    ("max_tokens", True), ("context_size", False), ("temperature", True), ("seed", False),
    ("temperature", math.nan), ("top_p", math.inf), ("position", (math.nan, 0.0)), ("position", (True, 1.0)),
])
def test_number_fields_refuse_bools_and_nan_when_built_in_memory(field, value):
    with pytest.raises(ValidationError) as caught:
        new_node("Generate", "g", **{field: value})
    (problem,) = problems_from_validation(caught.value, {"nodes": [{"id": "g", field: value}]}, "")
    assert problem.field == field and ("not true" in problem.message or "not false" in problem.message
                                       or "finite" in problem.message)


def test_assignment_refuses_bools_and_nan_too():
    node = new_node("Generate", "g")
    with pytest.raises(ValidationError):
        node.max_tokens = True
    with pytest.raises(ValidationError):
        node.temperature = math.nan
    with pytest.raises(ValidationError):
        Asset(version=True)
    node.temperature = 1  # an int is a number
    assert node.temperature == 1.0 and new_node("Generate", "h", position=[1, 2]).position == (1.0, 2.0)


@pytest.mark.parametrize("value, says", [
    ("true", "not true"), ('"5"', "not text"), ("9" * 5000, "5,000 digits"), ('"\\ud800"', "lone surrogate"),
])
def test_paste_refuses_the_values_a_file_is_refused_for(value, says):
    field = "title" if "ud800" in value else "max_tokens"
    with pytest.raises(AssetError) as caught:
        nodes_from_text(f'{{"type": "Generate", "id": "g", "{field}": {value}}}')
    (problem,) = caught.value.problems
    assert problem.node_id == "g" and problem.field == field and says in problem.message


def test_paste_of_broken_json_names_line_and_column():
    with pytest.raises(AssetError) as caught:
        nodes_from_text('{"nodes": [')
    assert caught.value.problems[0].message.startswith("not node JSON") and caught.value.problems[0].line == 1


def test_every_input_file_is_checked_before_it_is_read(tmp_path):
    fifo = tmp_path / "history.json"
    os.mkfifo(fifo)
    with pytest.raises(HistoryError, match="pipe"):
        load_history(fifo)  # opening a FIFO blocked for ever
    with pytest.raises(HistoryError, match="folder"):
        load_history(tmp_path)
    big = tmp_path / "big.txt"
    big.write_text("x" * 2000)
    with pytest.raises(InputError, match="at most"):
        read_input_text(big, InputError, max_bytes=1000)
    assert read_input_text(big, InputError, max_bytes=2000) == "x" * 2000


def test_history_uses_the_surrogate_helpers_of_names():
    assert history.without_surrogates is names.without_surrogates
    assert history.shown_name is names.shown_name
    assert history.REPLACEMENT == names.REPLACEMENT


def test_token_counts_forget_the_least_recently_used(monkeypatch):
    monkeypatch.setattr(agent_module, "TOKEN_COUNT_CACHE", 3)
    backend = ScriptedBackend()
    counted: list[str] = []
    original = backend.count_tokens

    def count_tokens(model, text):
        counted.append(text)
        return original(model, text)

    monkeypatch.setattr(backend, "count_tokens", count_tokens)
    agent = Agent(Asset(nodes=[new_node("Generate", "g")], start_node="g"), backend)
    count = agent.token_counter("m")
    for text in ("a", "b", "c", "a", "d"):  # "a" used again: "b" is the oldest when "d" comes
        count(text)
    counted.clear()
    for text in ("a", "c", "d"):
        count(text)
    assert counted == [], "the recent counts were kept (clearing all made every one recounted)"
    count("b")
    assert counted == ["b"]
