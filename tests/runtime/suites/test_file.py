"""Suite files: loading (errors name file, line, case and field) and adding a case from a conversation."""

from __future__ import annotations

import pytest

from runtime.backends.scripted import ScriptedBackend
from runtime.suites.checks import case_from_turns
from runtime.suites.file import SuiteError, load_suite, save_case
from runtime.suites.run import run_suites
from tests.runtime.suites.router import GOOD, scripted, write


@pytest.mark.parametrize(("change", "where", "says"), [
    ("    variables: {mood: grumpy}", 4, "cases.0.variabels"),
    ('          regex: "("', 0, "regex"),
    ("          path: [classify, nowhere]", 0, "no node 'nowhere'"),
])
def test_bad_suites_name_file_line_case_and_field(tmp_path, change, where, says) -> None:
    if "variabels" in says:
        suite = GOOD.replace("    variables: {mood: grumpy}", "    variabels: {mood: grumpy}")
    elif "regex" in says:
        suite = GOOD.replace('regex: "greet"', 'regex: "("')
    else:
        suite = GOOD.replace("path: [classify, hello]", "path: [classify, nowhere]")
    with pytest.raises(SuiteError) as caught:
        load_suite(write(tmp_path, suite))
    problem = caught.value.problems[0]
    text = str(caught.value)
    assert problem.file.endswith("router.suite.yaml") and problem.line > 0
    assert "case 'greets'" in text and says in text
    if where:
        assert problem.line == where


def test_broken_yaml_names_the_line(tmp_path) -> None:
    with pytest.raises(SuiteError) as caught:
        load_suite(write(tmp_path, "asset: router.json\ncases:\n  - name: [unclosed\n"))
    assert caught.value.problems[0].line == 4 or caught.value.problems[0].line == 3


def test_a_conversation_saved_as_a_case_passes(tmp_path) -> None:
    from runtime.agent import Agent
    from runtime.asset.file import load_asset

    write(tmp_path, GOOD)
    agent = Agent(load_asset(tmp_path / "router.json"), ScriptedBackend())
    diags = [agent.run_turn(line).diagnostics for line in ("greet me", "shop for a sword")]
    turns = list(zip(diags, agent.history.turns))
    suite_path = tmp_path / "saved.suite.yaml"
    name = save_case(suite_path, tmp_path / "router.json", case_from_turns("from the chat", turns))
    assert name == "from the chat"
    assert save_case(suite_path, tmp_path / "router.json", case_from_turns("from the chat", turns)) == "from the chat (2)"
    loaded = load_suite(suite_path)
    assert loaded.suite.cases[0].turns[1].expect.tool.name == "stock"
    assert run_suites([loaded], scripted).passed
