"""*Save as test* of a conversation that went through a Subgraph node: the form checks the turns' nodes
against the graph as it runs (the behaviour's nodes under namespaced ids, ``guard/classify``), not only
the file's own ids, and the case it writes passes when ``parley test`` runs it."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from editor.dialogs.expectations import ExpectationsDialog
from runtime.backends.scripted import ScriptedBackend
from runtime.cli import main
from runtime.suites.file import load_suite
from tests.editor.canvas.test_subgraphs import GUARD, THREATS, write
from tests.editor.docks.tests.listing import listed, open_listed


def test_a_conversation_through_a_behaviour_is_saved_as_a_test_that_passes(make_window, qtbot, tmp_path: Path):
    write(tmp_path / "behaviours" / "threats.json", THREATS)
    asset = write(tmp_path / "guard.json", GUARD)
    window = make_window()
    window.suite_run.make_backend = ScriptedBackend
    window.conversation.use_backend(ScriptedBackend)
    tests = open_listed(qtbot, window, asset)
    with qtbot.waitSignal(window.conversation.turn_finished, timeout=30_000):
        assert window.conversation.say("I threaten you: out of my way.")
    qtbot.waitUntil(lambda: not window.conversation.busy, timeout=30_000)
    ran = [n.node for n in window.conversation.record(0).diagnostics.nodes]
    assert "guard/classify" in ran, ran

    chat = window.conversation_dock
    chat.save_test_button.click()
    dialog = chat.findChild(ExpectationsDialog)
    assert dialog is not None and dialog.isVisible()
    (turn,) = dialog.turns
    assert "guard/classify" in turn.path.text()
    with listed(qtbot, tests), qtbot.waitSignal(chat.test_case_saved, timeout=5_000):
        QTest.mouseClick(dialog.buttons.button(dialog.buttons.StandardButton.Ok), Qt.MouseButton.LeftButton)
        if dialog.isVisible():  # refused: say why rather than time out
            raise AssertionError(dialog.error.text())

    suite = tmp_path / "guard.suite.yaml"
    (case,) = load_suite(suite).suite.cases
    assert case.turns[0].expect.path == ran, "the path as it ran, the behaviour's nodes by namespaced id"
    assert main(["test", str(suite), "--backend", "scripted"]) == 0, "the saved case passes"
