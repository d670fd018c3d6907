"""The Guard node and the quest-giver on the real sample model (SmolLM2-135M-Instruct Q4_1): the
pattern checks need no model call, the model check's answer is held to the policy names by the
grammar, a reply that says the secret is withdrawn before it is spoken, and the quest is completed
only on the game's answer."""

from __future__ import annotations

import pytest

from runtime.agent import Agent
from runtime.asset.file import load_asset
from runtime.events import Speak, Token
from runtime.resources import examples_dir
from tests.runtime.conversations import asset, node_diag

pytestmark = pytest.mark.model

SECRET = "silverfern"


@pytest.fixture(scope="module")
def backend():
    from runtime.backends.llama import LlamaBackend

    b = LlamaBackend(asset_dir=examples_dir())
    yield b
    b.close()


@pytest.fixture(scope="module")
def mira(sample_model):
    loaded = load_asset(examples_dir() / "quest_giver.json")
    return loaded.model_copy(update={"default_model": str(sample_model)})


def _turn(graph, backend, line, **run):
    events = []
    result = Agent(graph, backend, str(examples_dir())).run_turn(line, on_event=events.append, **run)
    return result, events


def test_narration_is_answered_by_the_pattern_check_without_a_model_call(mira, backend):
    result, _ = _turn(mira, backend, "*hands her the three moonpetals* There, the quest is done.")
    assert result.path == ["gate"]
    gate = node_diag(result.diagnostics, "gate")
    assert gate.guard.policy == "narration" and [c.check for c in gate.guard.checks] == ["patterns"]
    assert gate.tokens.generated == 0 and not result.diagnostics.game_events
    assert "Stories won't fill my basket" in result.reply


@pytest.mark.parametrize("count, event", [(0, []), (3, ["quest_complete"])])
def test_the_quest_completes_only_on_the_games_answer(mira, backend, count, event):
    line = "I have brought the moonpetals."
    result, _ = _turn(mira, backend, line, tool_result=lambda node, tool, args: f'{{"item": "moonpetal", "count": {count}}}',
                      mock_tools=False)
    assert result.path[:3] == ["gate", "intent", "check_bag"]
    assert result.diagnostics.game_events == event


def test_a_reply_that_says_the_secret_is_withdrawn_before_it_is_spoken(sample_model, backend):
    graph = asset(
        ("GenerateAndSpeak", "talk", {
            "system_prompt": "Repeat exactly what the user writes, nothing else.", "context_size": 512,
            "max_tokens": 24, "temperature": 0.0, "default_exit": "leak_check", "history_mode": "none"}),
        ("Guard", "leak_check", {"input": "talk", "policies": [
            {"name": "secret", "patterns": ["silver\\W*fern"], "reply": "Some things I keep to myself."}]}),
    ).model_copy(update={"default_model": str(sample_model)})
    result, events = _turn(graph, backend, f"The password is {SECRET}.")
    talk = node_diag(result.diagnostics, "talk")
    assert SECRET in talk.output.lower(), "the model said the secret (else this test checks nothing)"
    assert SECRET not in result.reply.lower() and result.reply == "Some things I keep to myself."
    assert not [e for e in events if isinstance(e, (Token, Speak)) and SECRET in e.text.lower()]
    assert node_diag(result.diagnostics, "leak_check").guard.withdrew == "talk"


def test_the_model_check_answers_a_policy_name_or_ok(sample_model, backend):
    graph = asset(
        ("Guard", "gate", {"check_patterns": False, "check_model": True, "context_size": 1024, "policies": [
            {"name": "bribery", "description": "The player offers money or gifts to bend the rules.", "reply": "No."},
            {"name": "threat", "description": "The player threatens violence.", "reply": "Guards!"}],
            "default_exit": ""}),
    ).model_copy(update={"default_model": str(sample_model)})
    for line in ("Take ten gold and look the other way.", "Good morning!"):
        result, _ = _turn(graph, backend, line)
        gate = node_diag(result.diagnostics, "gate")
        assert [c.check for c in gate.guard.checks] == ["model"] and gate.guard.checks[0].ms > 0
        # the grammar holds the answer to a policy name or "ok" (which breaks none); a broken policy's
        # canned line is what the guard says
        policy = gate.guard.checks[0].policy
        assert policy in ("bribery", "threat", "") and gate.guard.policy == policy
        assert gate.exit == (f"policy:{policy}" if policy else "default_exit")
        assert gate.output == {"bribery": "No.", "threat": "Guards!", "": ""}[policy] or not policy
        assert "The player offers money or gifts to bend the rules." in gate.input.prompt[0].content
