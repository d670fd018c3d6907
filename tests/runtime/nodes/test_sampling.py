"""Issue 23, friction 10: min-p and a repeat penalty on the generating nodes, passed to the backend;
saner starting values for a node the designer adds, without changing what an existing file means;
and a warning for a reply that loops up to max_tokens."""

from __future__ import annotations

import pytest

from runtime.agent import Agent
from runtime.asset.file import asset_from_dict, asset_to_dict
from runtime.asset.model import new_node, palette_node
from runtime.backends.scripted import ScriptedBackend
from runtime.nodes.repetition import repeated_phrase, runaway_warning
from runtime.problems import AssetError
from tests.runtime.conversations import asset, node_diag

LOOP = "I see. " + "You're cut down! " * 40


@pytest.mark.parametrize("type_name", ["Generate", "GenerateAndSpeak", "ToolCall"])
def test_min_p_and_repeat_penalty_reach_the_request(type_name):
    backend = ScriptedBackend()
    agent = Agent(asset((type_name, "reply", {"min_p": 0.12, "repeat_penalty": 1.25, "system_prompt": "Be brief."})),
                  backend)
    agent.run_turn("Hello")
    (_, request), *_ = [c for c in backend.calls if c[0] == "reply"]
    assert (request.min_p, request.repeat_penalty) == (0.12, 1.25)


def test_a_file_without_the_fields_loads_as_before():
    loaded = asset_from_dict({"version": 1, "start_node": "reply", "nodes": [{"id": "reply", "type": "Generate"}]})
    node = loaded.node("reply")
    # The sampler had min-p 0.05 built in and no penalty; max_tokens and context_size keep their meaning.
    assert (node.max_tokens, node.context_size, node.min_p, node.repeat_penalty) == (256, 0, 0.05, 1.0)


def test_saving_writes_the_new_fields_beside_the_other_sampling_ones():
    keys = list(asset_to_dict(asset(("Generate", "reply", {})))["nodes"][0])
    assert keys[keys.index("top_p") + 1:keys.index("top_p") + 4] == ["min_p", "repeat_penalty", "seed"]


@pytest.mark.parametrize("type_name", ["Generate", "GenerateAndSpeak", "ToolCall"])
def test_a_node_the_designer_adds_starts_short_with_a_bounded_context_and_a_mild_penalty(type_name):
    node = palette_node(type_name, "n")
    assert (node.max_tokens, node.context_size, node.repeat_penalty) == (128, 2048, 1.1)
    assert new_node(type_name, "n").max_tokens == 256  # what a file without the field means


def test_palette_node_fields_win_over_its_starting_values():
    assert palette_node("Generate", "n", max_tokens=40).max_tokens == 40


@pytest.mark.parametrize(("field", "value", "words"), [
    ("repeat_penalty", 0.9, "greater than or equal to 1"), ("repeat_penalty", 2.5, "less than or equal to 2"),
    ("min_p", 1.0, "less than 1"), ("min_p", -0.1, "greater than or equal to 0"),
])
def test_out_of_range_values_are_refused_naming_the_field(field, value, words):
    with pytest.raises(AssetError) as info:
        asset_from_dict({"version": 1, "start_node": "r", "nodes": [{"id": "r", "type": "Generate", field: value}]})
    (problem,) = info.value.problems
    assert (problem.node_id, problem.field) == ("r", field)
    assert words in problem.message


def test_a_reply_that_loops_up_to_max_tokens_gets_a_warning_naming_the_phrase():
    backend = ScriptedBackend(lambda key, request: LOOP)
    result = Agent(asset(("Generate", "reply", {"max_tokens": 30, "system_prompt": "x"})), backend).run_turn("Hi")
    warnings = node_diag(result.diagnostics, "reply").warnings
    assert any("repeated itself up to max_tokens" in w and "You're cut down!" in w and "repeat_penalty" in w
               for w in warnings), warnings


def test_a_long_reply_that_does_not_loop_is_only_said_to_be_cut():
    prose = " ".join(f"word{i}" for i in range(100))
    backend = ScriptedBackend(lambda key, request: prose)
    result = Agent(asset(("Generate", "reply", {"max_tokens": 30, "system_prompt": "x"})), backend).run_turn("Hi")
    warnings = node_diag(result.diagnostics, "reply").warnings
    assert any("cut at max_tokens (30 tokens)" in w for w in warnings)
    assert not any("repeated itself" in w for w in warnings)


def test_a_loop_that_ends_by_itself_is_no_runaway():
    backend = ScriptedBackend(lambda key, request: "Go! " * 10)
    result = Agent(asset(("Generate", "reply", {"max_tokens": 30, "system_prompt": "x"})), backend).run_turn("Hi")
    assert not any("repeated itself" in w for w in node_diag(result.diagnostics, "reply").warnings)


@pytest.mark.parametrize(("text", "expected"), [
    (LOOP, ("You're cut down!", 40)),
    ("The guard looks at you. " + "Halt, who goes there? " * 6, ("Halt, who goes there?", 6)),
    ("and the river and the river and the river and the river and the river", ("and the river", 5)),
])
def test_the_detector_finds_the_repeated_phrase(text, expected):
    assert repeated_phrase(text) == expected


@pytest.mark.parametrize("text", [
    ("The guard looks at you for a long moment. Then he steps aside and points toward the old mill by the "
     "river, where the smoke rises. Go quickly, he says, before the captain sees you here again."),
    "Yes. Yes. Yes.",  # too short to call a loop
    "",
])
def test_the_detector_leaves_ordinary_replies_alone(text):
    assert repeated_phrase(text) is None
    assert runaway_warning(text, 50) is None
