"""Checking turns: every kind of expectation, passing when it holds and failing with what happened,
and the judge's verdict."""

from __future__ import annotations

import json

from runtime.backends.scripted import ScriptedBackend
from runtime.suites.checks import Judge
from runtime.suites.file import load_suite
from runtime.suites.run import run_suites
from tests.runtime.suites.router import GOOD, scripted, write


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
    assert "took classify \u2192 hello" in failed["path"] and "chose greet" in failed["intent"]
    assert not shops.passed and any("tool" in f for f in shops.failures)
    assert not report.passed


def test_the_judge_gives_a_verdict_and_its_reason() -> None:
    def reply(key, request):
        return json.dumps({"verdict": "fail", "reason": "The reply is rude to the player."})

    judge = Judge(ScriptedBackend(reply), "m.gguf")
    check = judge.grade("polite", "hello", "go away")
    assert not check.passed and "rude to the player" in check.message
