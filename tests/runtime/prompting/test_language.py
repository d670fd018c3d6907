"""The agent's language (``Asset.language``) reaches the prompts: a player-facing node's system prompt
ends with "Answer in German.", and templates read {{language}} and {{language_tag}}; exact prompts on
the scripted backend, whose token is a word and whose message costs 8 tokens more."""

from __future__ import annotations

import json

import pytest

from runtime.agent import Agent
from runtime.asset.file import dumps_asset, load_asset, parse_asset
from runtime.asset.model import Asset
from runtime.problems import AssetError
from runtime.prompting.language import answer_line, language_name, language_tag_problem
from runtime.resources import examples_dir
from runtime.schemas import workflow_asset_schema
from tests.runtime.conversations import asset, backend, node_diag, prompt_of


@pytest.mark.parametrize("tag, name", [
    ("de", "German"), ("DE", "German"), ("pt-BR", "Portuguese (Brazil)"), ("zh-Hant", "Chinese (Traditional)"),
    ("es-419", "Spanish (Latin America)"), ("de-CH-1996", "German (de-CH-1996)"), ("tlh", "tlh"), ("", ""),
])
def test_a_tag_is_said_by_its_english_name(tag, name) -> None:
    assert language_name(tag) == name


@pytest.mark.parametrize("tag, problem", [
    ("", ""), ("fr", ""), ("en-GB", ""), ("en_GB", "(write 'en-GB')"), ("German", "not a BCP 47 language tag"),
    ("x" * 36, "at most 35 characters"),
])
def test_a_tag_is_checked(tag, problem) -> None:
    said = language_tag_problem(tag)
    assert (problem in said) if problem else said == ""


def graph(**fields) -> Asset:
    return asset(
        ("ClassifyIntent", "classify", {"system_prompt": "Pick one.", "intents": [
            {"name": "greet", "description": "says hello", "exit": "reply"}], "fallback_exit": "reply"}),
        ("Generate", "reply", {"system_prompt": "Be kind.", "context_size": 512, "max_tokens": 32,
                               "template": "Say it in {{language}} ({{language_tag}}).", "placement": "after"}),
        **fields,
    )


def test_a_reply_is_asked_for_in_the_agents_language_exactly() -> None:
    result = Agent(graph(language="de"), backend({"reply": 5})).run_turn("hello there")
    assert prompt_of(result.diagnostics, "reply") == [
        ("system", "Be kind.\n\nAnswer in German.", ""),
        ("user", "hello there\n\nSay it in German (de).", ""),
    ]
    # the budget counts the line: 5 + 7 words, 8 tokens a message
    assert node_diag(result.diagnostics, "reply").tokens.counted == (5 + 7) + 2 * 8
    # a classifier answers with a label: it is not told a language
    assert prompt_of(result.diagnostics, "classify")[0][1].startswith("Pick one.")
    assert "Answer in" not in prompt_of(result.diagnostics, "classify")[0][1]


def test_without_a_language_the_prompt_is_as_before() -> None:
    result = Agent(graph(), backend({"reply": 5})).run_turn("hello there")
    assert prompt_of(result.diagnostics, "reply") == [
        ("system", "Be kind.", ""), ("user", "hello there\n\nSay it in  ().", "")]
    assert node_diag(result.diagnostics, "reply").tokens.counted == (2 + 6) + 2 * 8


def test_a_system_prompt_set_at_run_time_still_ends_with_the_language() -> None:
    agent = Agent(graph(language="fr-CA"), backend({"reply": 5}))
    agent.set_system_prompt("reply", "Sois gentil.")
    result = agent.run_turn("bonjour")
    assert prompt_of(result.diagnostics, "reply")[0] == ("system", f"Sois gentil.\n\n{answer_line('fr-CA')}", "")
    assert answer_line("fr-CA") == "Answer in French (Canada)."


def test_a_reply_without_a_system_prompt_gets_the_line_alone() -> None:
    graph_ = asset(("GenerateAndSpeak", "reply", {"context_size": 512, "max_tokens": 16}), language="ja")
    result = Agent(graph_, backend({"reply": 3})).run_turn("konnichiwa")
    assert prompt_of(result.diagnostics, "reply")[0] == ("system", "Answer in Japanese.", "")


# --- the setting in the asset file ---------------------------------------------------------------


def test_the_language_is_saved_only_when_set_so_older_files_save_unchanged() -> None:
    path = examples_dir() / "chat.json"
    old = load_asset(path)
    assert old.language == "" and '"language"' not in dumps_asset(old)
    german = old.model_copy(update={"language": "de"})
    text = dumps_asset(german)
    assert '"language": "de"' in text and parse_asset(text).language == "de"


def test_a_bad_language_in_a_file_is_a_located_error() -> None:
    raw = json.loads((examples_dir() / "chat.json").read_text(encoding="utf-8"))
    raw["language"] = "Deutsch"
    with pytest.raises(AssetError) as caught:
        parse_asset(json.dumps(raw), "npc.json")
    [problem] = caught.value.problems
    assert str(problem).startswith("npc.json:language: error: 'Deutsch' is not a BCP 47 language tag")


def test_the_schema_has_the_language_and_its_pattern() -> None:
    language = workflow_asset_schema()["properties"]["language"]
    assert language["type"] == "string" and language["default"] == "" and "pattern" in language
