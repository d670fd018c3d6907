"""Conversation test suites on the test backend: loading (errors name file, line, case and field),
every kind of expectation, the runner (a failing case never stops the others), reports, shards,
repeats and coverage, and `parley test`'s exit codes."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from runtime.backends.scripted import ScriptedBackend, default_reply
from runtime.cli import main
from runtime.suites import (
    Judge,
    SuiteError,
    case_from_turns,
    load_suite,
    run_suites,
    save_case,
    shard_of,
)

ASSET = {
    "version": 1, "name": "router", "default_model": "m.gguf", "start_node": "classify",
    "variables": {"mood": "calm"},
    "nodes": [
        {"id": "classify", "type": "ClassifyIntent", "intents": [
            {"name": "greet", "exit": "hello"}, {"name": "shop", "exit": "tools"}], "fallback_exit": "hello"},
        {"id": "hello", "type": "GenerateAndSpeak", "system_prompt": "Greet.", "template": "Mood: {{vars.mood}}"},
        {"id": "tools", "type": "ToolCall", "default_exit": "hello", "tools": [
            {"name": "stock", "parameters": {"type": "object", "properties": {"item": {"type": "string"}}},
             "mock_result": "3 left"}]},
    ],
}


def write(tmp_path: Path, suite: str, asset: dict | None = None) -> Path:
    (tmp_path / "router.json").write_text(json.dumps(asset or ASSET), encoding="utf-8")
    path = tmp_path / "router.suite.yaml"
    path.write_text(suite, encoding="utf-8")
    return path


GOOD = """\
asset: router.json
cases:
  - name: greets
    variables: {mood: grumpy}
    turns:
      - say: "greet me please"
        expect:
          path: [classify, hello]
          exits: {classify: "intent:greet"}
          intent: greet
          slots: {intent: greet}
          reply: {contains: ["heard"], not_contains: ["zebra"], regex: "greet", max_words: 30, mentions_one_of: [please, merci]}
          budget: {max_prompt_tokens: 500, no_trim: true, summary_written: false}
  - name: shops
    turns:
      - say: "shop for a sword"
        expect:
          visits: [tools]
          not_visits: []
          tool: {name: stock, arguments: {}, arguments_schema: {type: object}}
    expect:
      - at_turn: 1
        reply: {contains: ["heard"]}
"""


def scripted():
    return ScriptedBackend()


def test_every_kind_of_expectation_passes_when_it_holds(tmp_path) -> None:
    loaded = load_suite(write(tmp_path, GOOD))
    report = run_suites([loaded], scripted)
    assert report.passed, [r.failures for r in report.results]
    greets = report.results[0]
    kinds = {c.kind for c in greets.turns[0].checks}
    assert kinds == {"path", "exits", "intent", "slots", "reply", "budget"}
    coverage = next(iter(report.coverage.values()))
    assert coverage.never_taken == [("classify", "fallback_exit")] and coverage.percent == 100 * 7 / 8


def test_each_expectation_fails_with_what_happened(tmp_path) -> None:
    suite = GOOD.replace("path: [classify, hello]", "path: [classify, tools]").replace(
        '"intent:greet"', '"fallback_exit"').replace("intent: greet\n", "intent: shop\n").replace(
        "contains: [\"heard\"], not_contains", "contains: [\"nope\"], not_contains").replace(
        "max_words: 30", "max_words: 1").replace("{name: stock, arguments: {}", "{name: stock, arguments: {item: axe}")
    report = run_suites([load_suite(write(tmp_path, suite))], scripted)
    greets, shops = report.results
    failed = {c.kind: c.message for c in greets.turns[0].checks if not c.passed}
    assert set(failed) == {"path", "exits", "intent", "reply"}
    assert "took classify > hello" in failed["path"] and "chose greet" in failed["intent"]
    assert not shops.passed and any("tool" in f for f in shops.failures)
    assert not report.passed


def test_a_failing_case_never_stops_the_others(tmp_path) -> None:
    asset = json.loads(json.dumps(ASSET))
    asset["nodes"][1]["template"] = "{{#broken}"  # every turn through 'hello' fails
    suite = GOOD + """\
  - name: never reaches hello
    turns:
      - say: "shop"
        expect: {visits: [classify]}
"""
    report = run_suites([load_suite(write(tmp_path, suite, asset))], scripted)
    assert [r.passed for r in report.results] == [False, False, False]
    assert "the turn failed" in report.results[0].failures[0]
    assert len(report.results) == 3, "every case ran"


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


def test_shards_split_the_cases_stably_and_completely(tmp_path) -> None:
    loaded = load_suite(write(tmp_path, GOOD))
    ids = [loaded.case_id(c) for c in loaded.suite.cases]
    parts = [run_suites([loaded], scripted, shard=(i, 3)).results for i in range(3)]
    names = sorted(r.case for part in parts for r in part)
    assert names == sorted(c.name for c in loaded.suite.cases)
    assert [shard_of(i, 3) for i in ids] == [shard_of(i, 3) for i in ids]


def test_repeats_give_pass_rates_and_find_flaky_cases(tmp_path) -> None:
    loaded = load_suite(write(tmp_path, GOOD))
    calls = {"n": 0}

    def flaky_backend():
        def reply(key, request):
            calls["n"] += 1
            if request.json_schema is None and not request.choices and request.seed % 2:
                return "zebra heard greet please"  # an odd seed breaks not_contains
            return default_reply(key, request)

        return ScriptedBackend(reply)

    report = run_suites([loaded], flaky_backend, repeat=4)
    rates = report.pass_rates()
    assert rates["router.suite.yaml::greets"] == (2, 4)
    assert report.flaky() == ["router.suite.yaml::greets"]


def test_the_judge_gives_a_verdict_and_its_reason() -> None:
    def reply(key, request):
        return json.dumps({"verdict": "fail", "reason": "The reply is rude to the player."})

    judge = Judge(ScriptedBackend(reply), "m.gguf")
    check = judge.grade("polite", "hello", "go away")
    assert not check.passed and "rude to the player" in check.message


def test_parley_test_exit_codes_and_reports(tmp_path, capsys) -> None:
    suite = write(tmp_path, GOOD)
    junit, report = tmp_path / "out.xml", tmp_path / "out.json"
    assert main(["test", str(suite), "--backend", "scripted", "--junit", str(junit), "--json", str(report)]) == 0
    out = capsys.readouterr().out
    assert "PASS router.suite.yaml::greets" in out and "2 passed, 0 failed" in out
    tree = ET.parse(junit).getroot()
    assert tree.get("tests") == "2" and tree.get("failures") == "0"
    data = json.loads(report.read_text(encoding="utf-8"))
    assert data["passed"] and data["coverage"][str(tmp_path / "router.json")]["never_taken"] == ["classify.fallback_exit"]

    failing = tmp_path / "failing.suite.yaml"
    failing.write_text(GOOD.replace("max_words: 30", "max_words: 1"), encoding="utf-8")
    assert main(["test", str(failing), "--backend", "scripted", "--junit", str(junit)]) == 1
    assert ET.parse(junit).getroot().get("failures") == "1"
    assert "FAIL router.suite.yaml::greets" not in capsys.readouterr().out  # the file's own name is used
    assert main(["test", str(tmp_path / "missing.suite.yaml"), "--backend", "scripted"]) == 2
    assert main(["test", str(suite), "--backend", "scripted", "--shard", "4/3"]) == 2
    assert main(["test", str(suite), "--backend", "scripted", "--min-coverage", "101"]) == 2

    partial = tmp_path / "partial.suite.yaml"
    partial.write_text(GOOD.split("  - name: shops")[0], encoding="utf-8")
    assert main(["test", str(partial), "--backend", "scripted", "--min-coverage", "90"]) == 1
    assert "never taken: classify.intent:shop" in capsys.readouterr().out


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
