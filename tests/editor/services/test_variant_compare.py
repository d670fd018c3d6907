"""The Tests dock's "Compare with variant\u2026" on the scripted backend: it picks another asset (a file
dialog) or the saved version of the open one (the file against the unsaved document), compares them
on the comparison's own thread, shows each case's passes on A and B, its differing turns and first
divergence, the paired difference with its interval and McNemar's p, and a click on a divergence
opens both prompts side by side in the Turn Inspector, scrolled to the first part that differs, with
the edits from A to B listed."""

from __future__ import annotations

import html
import json
import math
import threading
from pathlib import Path

import pytest
from PySide6.QtCore import QThread

from editor.docks.tests.dock import TestsDock
from editor.docks.turn_inspector.dock import TurnInspectorDock
from editor.docks.turn_inspector.side_by_side import FIRST_MARK
from editor.model.commands import SetNodeFieldCommand
from editor.services import variant_compare
from editor.services.variant_compare import prompt_messages
from runtime.backends.scripted import ScriptedBackend
from runtime.suites.variants import CaseComparison, TurnDivergence, VariantReport
from tests.editor.docks.tests.listing import open_listed

COMPARE_TIMEOUT_MS = 60_000

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
      - say: "What is for supper?"
        expect:
          reply: {contains: ["heard"]}
  - name: says mira
    turns:
      - say: "Who are you?"
        expect:
          reply: {contains: ["Mira"]}
"""


def variant_asset(system_prompt: str) -> dict:
    data = json.loads(json.dumps(ASSET))
    data["nodes"][0]["system_prompt"] = system_prompt
    return data


@pytest.fixture
def chat(tmp_path) -> Path:
    (tmp_path / "chat.json").write_text(json.dumps(ASSET), encoding="utf-8")
    (tmp_path / "chat.suite.yaml").write_text(SUITE, encoding="utf-8")
    (tmp_path / "chat_b.json").write_text(json.dumps(variant_asset("You are Mira, the grumpy innkeeper.")),
                                          encoding="utf-8")
    return tmp_path / "chat.json"


@pytest.fixture
def dock(window, chat, qtbot) -> TestsDock:
    window.suite_run.make_backend = ScriptedBackend
    window.workspace.switch("Test")
    return open_listed(qtbot, window, chat)


def test_the_real_comparison_shows_each_case_and_opens_the_first_divergence(dock, qtbot, chat, window):
    """compare_variants itself, on the scripted backend: B's reply node says "Mira" after the player's
    line, so "says mira" passes only on B, and every turn's prompt differs from its fifth token."""
    b = variant_asset("You are Mira, the grumpy innkeeper.")
    b["nodes"][0].update(template="Say Mira.", placement="after")
    (chat.parent / "chat_mira.json").write_text(json.dumps(b), encoding="utf-8")
    _request, report = compare(qtbot, dock, lambda: dock.compare_with_variant(variant=str(chat.parent / "chat_mira.json")))
    assert (report.conversations, report.differing_turns, report.discordant) == (2, 3, (0, 1))
    where = "turn 1 \u00b7 reply \u00b7 prompt token 5"
    assert dock.variant_panel.rows() == [["greets", "1/1", "1/1", "2", where], ["says mira", "0/1", "1/1", "1", where]]
    summary = dock.variant_panel.summary.text()
    assert "Pass rate A 50 %, B 100 %" in summary and "difference B\u2212A +50 points" in summary
    assert f"McNemar p = {report.mcnemar_p:.3g}" in summary and "3 differing turns" in summary

    inspector = window.dock(TurnInspectorDock)
    with qtbot.waitSignal(dock.turn_opened):
        dock.variant_panel.table.itemClicked.emit(dock.variant_panel.table.topLevelItem(1), 4)
    assert inspector.turn_picker.currentText() == "B (chat_mira.json): says mira \u00b7 run 1 \u00b7 turn 1"
    assert inspector.compare_picker.currentText() == "A (chat.json): says mira \u00b7 run 1 \u00b7 turn 1"
    diff = inspector.diff_view.toPlainText()
    assert FIRST_MARK in diff and "SYSTEM" in diff and "USER" in diff
    assert "You are Mira, the innkeeper." in diff and "You are Mira, the grumpy innkeeper." in diff
    assert "reply heard: Who are you? Say Mira." in diff, "B's output beside A's"
    fields = {changes.text(1) for changes in (inspector.changes_list.topLevelItem(i)
                                              for i in range(inspector.changes_list.topLevelItemCount()))}
    assert {"system_prompt", "template", "placement"} <= fields


def test_an_unchanged_variant_shows_no_differing_turn(dock, qtbot, chat):
    (chat.parent / "chat_same.json").write_text(json.dumps(ASSET), encoding="utf-8")
    _request, report = compare(qtbot, dock, lambda: dock.compare_with_variant(variant=str(chat.parent / "chat_same.json")))
    assert report.differing_turns == 0
    assert dock.variant_panel.rows() == [["greets", "1/1", "1/1", "0", "\u2014"], ["says mira", "0/1", "0/1", "0", "\u2014"]]
    assert "The two replied alike on every turn." in dock.variant_panel.summary.text()


def hand_built_report(asset_a: str, asset_b: str) -> VariantReport:
    divergence = TurnDivergence(
        "chat.suite.yaml::greets", 0, 1, "reply", 3, "Welcome, traveller!", "What do you want?",
        "system: You are Mira, the innkeeper.\nuser: Good evening, is there a room?",
        "system: You are Mira, the grumpy innkeeper.\nuser: Good evening, is there a room?", part="prompt")
    return VariantReport(
        asset_a, asset_b,
        [CaseComparison("chat.suite.yaml::greets", 3, 3, 1, 5, divergence),
         CaseComparison("chat.suite.yaml::says mira", 3, 2, 2, 0, None)],
        conversations=6, differing_turns=5, pass_rate_a=5 / 6, pass_rate_b=3 / 6, difference=-2 / 6,
        ci_low=-0.71, ci_high=0.04, discordant=(2, 0), mcnemar_p=0.5)


def compare(qtbot, dock: TestsDock, start) -> tuple:
    """Start a comparison and wait for its report (re-emitted on the UI thread by the dock's service)."""
    with qtbot.waitSignal(dock.variants.finished, timeout=COMPARE_TIMEOUT_MS) as done:
        assert start()
    return done.args


def test_another_asset_compares_off_the_ui_thread_and_shows_the_table(dock, qtbot, monkeypatch, chat):
    calls = []

    def fake(suite, variant, backend, cancel=None, **_options):
        calls.append((suite, Path(variant), QThread.currentThread(), threading.current_thread().name))
        assert isinstance(backend(), ScriptedBackend), "the window's backend choice runs the comparison"
        return hand_built_report(str(chat), str(variant))

    monkeypatch.setattr(variant_compare, "compare_variants", fake)
    picked = []
    monkeypatch.setattr(variant_compare, "pick_variant_file", lambda parent, start: picked.append(start)
                        or str(chat.parent / "chat_b.json"))
    monkeypatch.setattr("editor.docks.tests.dock.pick_variant_file", variant_compare.pick_variant_file)
    request, _report = compare(qtbot, dock, dock.compare_with_variant)
    assert picked == [str(chat.parent)], "the dialog opens in the asset's folder"
    (suite, variant, thread, _name), = calls
    assert suite.path == chat.parent / "chat.suite.yaml" and variant == chat.parent / "chat_b.json"
    assert suite.asset.node("reply").system_prompt == "You are Mira, the innkeeper.", "A: the open asset"
    assert thread is not dock.thread(), "compare_variants ran off the UI thread"
    assert (request.label_a, request.label_b) == ("chat.json", "chat_b.json")

    panel = dock.variant_panel
    assert panel.isVisible()
    assert panel.rows() == [
        ["greets", "3/3", "1/3", "5", "turn 1 \u00b7 reply \u00b7 prompt token 3"],
        ["says mira", "2/3", "2/3", "0", "\u2014"],
    ]
    summary = panel.summary.text()
    for part in ("Pass rate A 83 %, B 50 %", "difference B\u2212A -33 points", "95 % interval -71 to +4",
                 "McNemar p = 0.5", "2 passed only on A, 0 only on B", "5 differing turns",
                 "First divergence: \u201cgreets\u201d run 1, turn 1 \u00b7 reply \u00b7 prompt token 3"):
        assert part in summary.replace("&quot;", '"'), (part, summary)
    assert "Compared chat.json (A) with chat_b.json (B)" in dock.status.text()
    assert dock.compare_button.isEnabled()


def test_a_divergence_opens_both_prompts_side_by_side(dock, qtbot, monkeypatch, chat, window):
    monkeypatch.setattr(variant_compare, "compare_variants",
                        lambda suite, variant, **_kw: hand_built_report(str(chat), str(variant)))
    compare(qtbot, dock, lambda: dock.compare_with_variant(variant=str(chat.parent / "chat_b.json")))
    inspector = window.dock(TurnInspectorDock)
    row = dock.variant_panel.table.topLevelItem(0)
    with qtbot.waitSignal(dock.turn_opened) as opened:
        dock.variant_panel.table.itemClicked.emit(row, 4)
    _record_b, label_b, note, comparison = opened.args
    assert label_b == "B (chat_b.json): greets \u00b7 run 1 \u00b7 turn 1"
    assert comparison.against_label == "A (chat.json): greets \u00b7 run 1 \u00b7 turn 1"
    assert note.startswith("\u2717 A (chat.json) and B (chat_b.json) first differ in case \u201cgreets\u201d, run 1, "
                           "turn 1, at node reply, prompt token 3.")
    assert inspector.turn_picker.currentText() == label_b
    assert f"<b>{label_b}</b> \u00b7 where A and B part:" in inspector.note_label.text()
    assert "only this node's prompt and output are kept" in html.unescape(inspector.stats.text())
    assert inspector.compare_picker.currentText() == comparison.against_label
    assert inspector.tabs.currentWidget() is inspector.diff_page
    diff = inspector.diff_view.toPlainText()
    assert FIRST_MARK in diff
    assert "You are Mira, the innkeeper." in diff and "You are Mira, the grumpy innkeeper." in diff
    assert "Welcome, traveller!" in diff and "What do you want?" in diff
    assert "<span class='add'>grumpy " in inspector.diff_html(), "B's added word is marked"
    # the edits from A to B, in the inspector's edit list, headed A and B
    changes = inspector.changes_list
    assert changes.isVisibleTo(inspector)
    assert [changes.headerItem().text(c) for c in range(4)] == ["Node", "Field", "A", "B"]
    assert (changes.topLevelItem(0).text(0), changes.topLevelItem(0).text(1)) == ("reply", "system_prompt")
    # the summary's link opens the same divergence
    with qtbot.waitSignal(dock.turn_opened) as again:
        dock.variant_panel.summary.linkActivated.emit("first")
    assert again.args[1] == label_b


def test_the_saved_version_is_compared_with_the_unsaved_document(dock, qtbot, monkeypatch, chat, window):
    seen = []

    def fake(suite, variant, **_kw):
        seen.append((suite.asset.node("reply").system_prompt, variant.node("reply").system_prompt))
        return hand_built_report(str(chat), "")

    monkeypatch.setattr(variant_compare, "compare_variants", fake)
    assert not dock.compare_with_variant(saved=True), "no unsaved edits: nothing to compare"
    assert "no unsaved edits" in dock.status.text()
    doc = window.document
    doc.push(SetNodeFieldCommand(doc, "reply", "system_prompt", doc.node("reply").system_prompt,
                                 "You are Mira, who hates guests."))
    assert doc.modified
    request, _report = compare(qtbot, dock, lambda: dock.compare_with_variant(saved=True))
    assert seen == [("You are Mira, the innkeeper.", "You are Mira, who hates guests.")], "A saved, B unsaved"
    assert (request.label_a, request.label_b) == ("chat.json as saved", "chat.json with the unsaved edits")
    assert json.loads(chat.read_text(encoding="utf-8"))["nodes"][0]["system_prompt"] == ASSET["nodes"][0][
        "system_prompt"], "the saved file is untouched"


def test_a_comparison_that_fails_says_why_and_the_dock_stays_usable(dock, qtbot, monkeypatch, chat):
    def broken(suite, variant, **_kw):
        raise ValueError(f"{variant}: nodes.0.type: unknown node type 'Nope'")

    monkeypatch.setattr(variant_compare, "compare_variants", broken)
    with qtbot.waitSignal(dock.variants.failed, timeout=COMPARE_TIMEOUT_MS):
        assert dock.compare_with_variant(variant=str(chat.parent / "chat_b.json"))
    assert "Could not compare chat.json with chat_b.json: ValueError" in dock.variant_panel.summary.text()
    assert "unknown node type" in dock.variant_panel.summary.text()
    assert dock.compare_button.isEnabled()
    dock.variant_panel.close_button.click()
    assert not dock.variant_panel.isVisible()


def test_cancelling_the_file_dialog_runs_nothing(dock, monkeypatch):
    monkeypatch.setattr("editor.docks.tests.dock.pick_variant_file", lambda parent, start: "")
    assert not dock.compare_with_variant()
    assert not dock.variants.busy and not dock.variant_panel.isVisible()


def test_prompts_split_into_their_messages():
    messages = prompt_messages("system: Be kind.\nTwo lines.\nuser: hi\nassistant: hello")
    assert [(m.role, m.content) for m in messages] == [("system", "Be kind.\nTwo lines."), ("user", "hi"),
                                                       ("assistant", "hello")]
    assert [(m.role, m.content) for m in prompt_messages("free text")] == [("user", "free text")]


def test_one_conversation_has_no_interval(chat):
    report = hand_built_report(str(chat), str(chat))
    report.ci_low = report.ci_high = math.nan
    request = variant_compare.VariantRequest(chat.parent / "chat.suite.yaml", chat, "a.json", "b.json")
    assert "no 95 % interval from one conversation" in variant_compare.summary_text(report, request)


def blocking(began: threading.Event, report: VariantReport):
    """A comparison that runs until it is cancelled (as a turn does on its cancel)."""
    def compare_until_cancelled(suite, variant, cancel=None, **_kw):
        began.set()
        assert cancel is not None and cancel.wait(COMPARE_TIMEOUT_MS / 1000), "never cancelled"
        return report
    return compare_until_cancelled


def test_stop_cancels_the_comparison(dock, qtbot, monkeypatch, chat):
    began = threading.Event()
    monkeypatch.setattr(variant_compare, "compare_variants", blocking(began, hand_built_report(str(chat), "")))
    with qtbot.waitSignal(dock.variants.finished, timeout=COMPARE_TIMEOUT_MS):
        assert dock.compare_with_variant(variant=str(chat.parent / "chat_b.json"))
        assert not dock.compare_button.isEnabled() and dock.stop_button.isEnabled()
        assert began.wait(COMPARE_TIMEOUT_MS / 1000)
        dock.stop_button.click()
    assert dock.variant_panel.summary.text().startswith("<b>Stopped</b>: only the cases run before Stop count.")
    assert dock.compare_button.isEnabled() and not dock.stop_button.isEnabled()


def test_closing_the_window_ends_a_running_comparison(dock, qtbot, monkeypatch, chat, window):
    began = threading.Event()
    monkeypatch.setattr(variant_compare, "compare_variants", blocking(began, hand_built_report(str(chat), "")))
    assert dock.compare_with_variant(variant=str(chat.parent / "chat_b.json"))
    assert began.wait(COMPARE_TIMEOUT_MS / 1000)
    job = dock.variants.job
    window.document.undo_stack.setClean()
    window.close()
    assert dock.variants.closed and not job.is_running(), "the window's shutdown cancelled and joined it"
