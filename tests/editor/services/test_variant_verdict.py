"""A variant comparison says its result in a designer's words (the statistic only as detail), and the
Tests dock's tree shows the comparison's run of the editor's graph, not the red run before it."""

from __future__ import annotations

import html
import json
from pathlib import Path

import pytest

from editor.model.commands import SetNodeFieldCommand
from editor.services.variant_compare import verdict_text
from runtime.backends.scripted import ScriptedBackend
from runtime.suites.variants import CaseComparison, VariantReport
from tests.editor.docks.tests.listing import open_listed

ASSET = {
    "version": 1, "name": "chat", "default_model": "m.gguf", "start_node": "reply",
    "nodes": [{"id": "reply", "type": "GenerateAndSpeak", "system_prompt": "You are Mira, the innkeeper.",
               "template": "", "max_tokens": 32}],
}

SUITE = """\
asset: chat.json
cases:
  - name: greets
    turns:
      - say: "Good evening, is there a room?"
        expect:
          path: [reply]
  - name: says mira
    turns:
      - say: "Who are you?"
        expect:
          reply: {contains: ["Mira"]}
"""


def report(cases: int, runs: int, discordant: tuple[int, int], p: float) -> VariantReport:
    rows = [CaseComparison(f"chat.suite.yaml::case {i}", runs, runs, runs, 0) for i in range(cases)]
    return VariantReport("a.json", "b.json", rows, conversations=cases * runs, differing_turns=0, pass_rate_a=0.5,
                         pass_rate_b=0.5, difference=0.0, ci_low=-0.2, ci_high=0.2, discordant=discordant,
                         mcnemar_p=p)


def test_the_verdict_is_in_a_designers_words():
    chance = verdict_text(report(10, 1, (2, 1), 1.0))
    assert chance.startswith("No real difference between A and B: 3 of 10 cases differ"), chance
    assert "chance explains" in chance and "McNemar" not in chance and "p =" not in chance
    assert verdict_text(report(4, 3, (0, 9), 0.004)).startswith(
        "B is better than A: 9 of 12 conversations differ (9 pass only on B, 0 only on A), more than chance")
    assert verdict_text(report(10, 1, (7, 0), 0.016)).startswith("A is better than B")
    assert verdict_text(report(5, 1, (0, 0), 1.0)) == ("No difference between A and B: all 5 cases passed or "
                                                       "failed alike on both.")


@pytest.fixture
def chat(tmp_path) -> Path:
    (tmp_path / "chat.json").write_text(json.dumps(ASSET), encoding="utf-8")
    (tmp_path / "chat.suite.yaml").write_text(SUITE, encoding="utf-8")
    return tmp_path / "chat.json"


def test_the_tree_shows_the_comparisons_run_not_the_red_one_before(window, chat, qtbot):
    window.suite_run.make_backend = ScriptedBackend
    window.workspace.switch("Test")
    dock = open_listed(qtbot, window, chat)
    with qtbot.waitSignal(dock.run.finished, timeout=30_000):
        assert dock.run_all()
    mira = dock.case_items["chat.suite.yaml", "says mira"]
    assert mira.text(1).startswith("\u2717"), "the run before: red"
    assert dock.windowTitle() == "Tests (1 failed)"

    doc = window.document  # the fix: the reply names Mira after the player's line
    doc.push(SetNodeFieldCommand(doc, "reply", "template", "", "Say Mira."))
    doc.push(SetNodeFieldCommand(doc, "reply", "placement", doc.node("reply").placement, "after"))
    with qtbot.waitSignal(dock.variants.finished, timeout=60_000):
        assert dock.compare_with_variant(saved=True)
    mira = dock.case_items["chat.suite.yaml", "says mira"]
    assert mira.text(1).startswith("\u2713"), f"the tree shows B (the editor's graph) as compared: {mira.text(1)}"
    assert dock.windowTitle() == "Tests"
    assert "the tree shows B's results" in dock.status.text()

    summary = html.unescape(dock.variant_panel.summary.text())
    verdict = summary.index("No real difference between A and B: 1 of 2 cases differ")
    assert verdict < summary.index("McNemar p = "), "the statistic comes after, as detail"
    dock.resize(700, 520)
    dock.grab().save("/tmp/parley-variant-verdict.png")

    # A turn the comparison ran keeps no prompts: the dock says so, and how to get them
    assert not dock.open_turn("chat.suite.yaml", "says mira", 1)
    assert "variant comparison" in dock.status.text()
