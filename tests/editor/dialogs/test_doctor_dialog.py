"""Backend → Reproducibility Self-Test…: the self-test runs on a thread of its own, the dialog shows its
settings table, the cases as they finish and the verdict, a failure says why, and closing stops it."""

from __future__ import annotations

import json
import threading

import pytest
from PySide6.QtGui import QGuiApplication

from editor.dialogs.doctor import DoctorDialog, self_test_job
from runtime.backends.base import Reproducibility
from runtime.doctor.cases import CASES, ReplayCaseResult, regenerate
from runtime.doctor.self_test import CaseSet, SelfTestReport, SettingRow, embedded_report
from runtime.problems import BackendError
from runtime.resources import examples_dir


def _report(passed: bool) -> SelfTestReport:
    cases = [ReplayCaseResult("regenerate the last turn with the same seed", True, "", 1.5),
             ReplayCaseResult("the same conversation at other thread counts", passed,
                        "" if passed else "at 2 threads: turn 1, node reply: output differs at character 3", 2.0)]
    rows = [SettingRow("flash attention off, f16 KV cache", "yes", "the same numbers at 1 and 2 threads", True),
            SettingRow("flash attention on, f16 KV cache", "same threads", "other numbers at 1 than at 2 threads")]
    return SelfTestReport("embedded (llama.cpp on this computer)", "SmolLM2-135M-Instruct.Q4_1.gguf",
                  Reproducibility(True, True, "a replay with the same seed is exact"), rows,
                  [CaseSet("flash attention off, f16 KV cache, 1 thread", True, cases, 3.5)],
                  "" if passed else "exact at any thread count: flash attention off", 4.0)


def _dialog(qtbot, job) -> DoctorDialog:
    dialog = DoctorDialog(job, "the subject")
    qtbot.addWidget(dialog)
    return dialog


def _cells(table) -> list[list[str]]:
    return [[table.item(r, c).text() if table.item(r, c) else "" for c in range(table.columnCount())]
            for r in range(table.rowCount())]


@pytest.mark.parametrize("passed", [True, False])
def test_the_report_shows_the_settings_the_cases_and_the_verdict(qtbot, passed) -> None:
    said: list[str] = []

    def job(progress, cancel):
        progress("probing the numbers of 2 settings")
        progress("PASS regenerate the last turn with the same seed")
        said.append("ran")
        return _report(passed)

    dialog = _dialog(qtbot, job)
    with qtbot.waitSignal(dialog.run.finished, timeout=30_000):
        assert dialog.start()
    assert said == ["ran"]
    assert dialog.report is not None and dialog.copy.isEnabled()
    settings = _cells(dialog.settings)
    assert settings[0][1:3] == ["flash attention off, f16 KV cache", "yes"] and settings[0][0]  # chosen
    assert settings[1][1:3] == ["flash attention on, f16 KV cache", "at one thread count"] and not settings[1][0]
    cases = _cells(dialog.cases)
    assert [row[0] for row in cases] == ["PASS", "PASS" if passed else "FAIL"]
    assert cases[1][3] == ("" if passed else "at 2 threads: turn 1, node reply: output differs at character 3")
    verdict = dialog.verdict.text()
    assert ("are reproducible" in verdict) == passed and ("NOT reproducible" in verdict) == (not passed)
    assert ("Exact alternative: exact at any thread count" in verdict) == (not passed)
    assert dialog.copy_report()
    assert json.loads(QGuiApplication.clipboard().text())["passed"] is passed
    assert dialog.again.isEnabled()


def test_a_self_test_that_cannot_run_says_why(qtbot) -> None:
    def job(progress, cancel):
        raise BackendError("model file 'missing.gguf' not found")

    dialog = _dialog(qtbot, job)
    with qtbot.waitSignal(dialog.run.failed, timeout=30_000):
        dialog.start()
    assert "could not finish: model file 'missing.gguf' not found" in dialog.status.text()
    assert dialog.report is None and not dialog.copy.isEnabled() and dialog.again.isEnabled()


def test_closing_the_dialog_stops_a_running_self_test(qtbot) -> None:
    began = threading.Event()
    stopped = threading.Event()

    def job(progress, cancel):
        began.set()
        cancel.wait(60)
        stopped.set()
        raise BackendError("stopped")

    dialog = _dialog(qtbot, job)
    assert dialog.start()
    assert not dialog.start()  # one at a time
    assert began.wait(30)
    job = dialog.run.job
    dialog.reject()
    assert stopped.is_set() and dialog.run.closed
    assert job is not None and not job.is_running()


@pytest.mark.model
def test_the_dialog_runs_the_self_test_on_the_sample_model(qtbot, sample_model) -> None:
    def job(progress, cancel):
        return embedded_report(str(sample_model), threads=1, probe=[("off", "f16")],
                               cases=[c for c in CASES if c[1] is regenerate],
                               progress=progress, cancel=cancel)

    dialog = _dialog(qtbot, job)
    with qtbot.waitSignal(dialog.run.finished, timeout=600_000):
        dialog.start()
    assert _cells(dialog.settings)[0][1:3] == ["flash attention off, f16 KV cache", "yes"]
    assert [row[:2] for row in _cells(dialog.cases)] == [["PASS", "regenerate the last turn with the same seed"]]
    assert "The chosen settings are reproducible." in dialog.verdict.text()


def test_a_job_for_the_embedded_backend_names_a_missing_model(qtbot, tmp_path) -> None:
    job = self_test_job(None, "missing.gguf", tmp_path)
    dialog = _dialog(qtbot, job)
    with qtbot.waitSignal(dialog.run.failed, timeout=30_000):
        dialog.start()
    assert "missing.gguf" in dialog.status.text()


def test_the_backend_menu_runs_the_self_test_on_the_open_assets_model(make_window, qtbot, tmp_path) -> None:
    asset = json.loads((examples_dir() / "chat.json").read_text(encoding="utf-8"))
    asset["default_model"] = "missing.gguf"
    path = tmp_path / "agent.json"
    path.write_text(json.dumps(asset), encoding="utf-8")
    window = make_window()
    assert window.open_path(str(path))
    assert window.self_test_action in window.backend_menu.actions()
    window.self_test_action.trigger()
    dialogs = window.findChildren(DoctorDialog)
    assert len(dialogs) == 1
    with qtbot.waitSignal(dialogs[0].run.failed, timeout=30_000):
        pass
    assert "missing.gguf" in dialogs[0].status.text()
