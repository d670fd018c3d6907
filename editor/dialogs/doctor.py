"""Backend → Reproducibility Self-Test…: ``parley doctor`` for the window's backend and model.

The self-test (``runtime.doctor``) runs on a thread of its own: on the embedded backend it probes
which settings give the same numbers at another thread count and then runs the replay cases on the
open asset's model (or the sample model); on a server it runs the cases there (a llama.cpp server's
with ``cache_prompt`` on and off). The dialog shows what it is doing, then the settings table, each
case with PASS or FAIL and what differed, and the verdict. Closing the dialog stops the test.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QColor, QGuiApplication
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QDialogButtonBox,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from editor.services.backend_choice import BackendChoice
from editor.threads.thread_service import OneRunService
from runtime.backends.base import Backend
from runtime.doctor.self_test import (
    VERDICT_TEXT,
    SelfTestCancelled,
    SelfTestReport,
    embedded_report,
    server_report,
)
from runtime.models.folder import default_model_name
from runtime.problems import BackendError, InputError

# A self-test job: given where to say what it does and the stop flag, the report.
SelfTestJob = Callable[[Callable[[str], None], threading.Event], SelfTestReport]

PASS_COLOR = "#6fcf7f"
FAIL_COLOR = "#ff8080"
QUIET_COLOR = "#9a9a9a"
VERDICT_COLORS = {"yes": PASS_COLOR, "same threads": "#e0c060", "no": FAIL_COLOR, "not allowed": QUIET_COLOR,
                  "not known": "#e0c060"}


def self_test_job(backend_maker: Callable[[], Backend] | None, model: str, asset_dir: str | Path | None) -> SelfTestJob:
    """The job for a window: the embedded backend (``backend_maker`` None) on ``model`` (else the sample
    model), or the server ``backend_maker`` makes."""

    def job(progress: Callable[[str], None], cancel: threading.Event) -> SelfTestReport:
        if backend_maker is not None:
            return server_report(backend_maker, progress=progress, cancel=cancel)
        return embedded_report(model or default_model_name(), asset_dir=asset_dir, progress=progress, cancel=cancel)

    return job


def _outcome(job: SelfTestJob, progress: Callable[[str], None], cancel: threading.Event) -> SelfTestReport | str:
    """The self-test's report, or why it has none (what the dialog says)."""
    try:
        return job(progress, cancel)
    except SelfTestCancelled:
        return "The self-test was stopped."
    except (BackendError, InputError) as exc:
        return str(exc)
    except Exception as exc:  # noqa: BLE001 - any failure is the dialog's to show, not a crash
        return f"{type(exc).__name__}: {exc}"


class SelfTestRun(OneRunService):
    """Runs one self-test at a time on a thread of its own; its signals come on the UI thread."""

    progress = Signal(str)
    finished = Signal(object)  # the SelfTestReport
    failed = Signal(str)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__("parley-self-test", parent)

    def start(self, job: SelfTestJob) -> bool:
        if self.busy or self.closed:
            return False
        self._cancel.clear()
        run = self._new_job(lambda: _outcome(job, run.report, self._cancel))
        run.yielded.connect(self._on_progress)
        run.returned.connect(self._on_returned)
        run.start()
        return True

    def _on_progress(self, text: str) -> None:
        if not self.closed:
            self.progress.emit(text)

    def _on_returned(self, outcome: SelfTestReport | str) -> None:
        if self.closed:
            return
        self._end()
        if isinstance(outcome, str):
            self.failed.emit(outcome)
        else:
            self.finished.emit(outcome)


def _item(text: str, color: str = "", tip: str = "") -> QTableWidgetItem:
    item = QTableWidgetItem(text)
    item.setFlags(Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable)
    if color:
        item.setForeground(QColor(color))
    item.setToolTip(tip or text)
    return item


def _table(headers: list[str], parent: QWidget) -> QTableWidget:
    table = QTableWidget(0, len(headers), parent)
    table.setHorizontalHeaderLabels(headers)
    table.verticalHeader().setVisible(False)
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    table.setWordWrap(True)
    header = table.horizontalHeader()
    for column in range(len(headers) - 1):
        header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
    header.setSectionResizeMode(len(headers) - 1, QHeaderView.ResizeMode.Stretch)
    return table


class DoctorDialog(QDialog):
    """Runs ``job`` when shown (and on *Run Again*) and shows its report; ``subject`` says what is tested."""

    def __init__(self, job: SelfTestJob, subject: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Reproducibility Self-Test")
        self.job = job
        self.report: SelfTestReport | None = None
        self.run = SelfTestRun(self)
        self.run.progress.connect(self._progress)
        self.run.finished.connect(self._show_report)
        self.run.failed.connect(self._show_failure)
        self.run.busy_changed.connect(self._busy)

        layout = QVBoxLayout(self)
        self.subject = QLabel(subject, self)
        self.subject.setWordWrap(True)
        layout.addWidget(self.subject)
        self.status = QLabel("", self)
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.status)
        layout.addWidget(QLabel("Which settings repeat a conversation bit for bit:", self))
        self.settings = _table(["", "Setting", "Reproducible", "Why"], self)
        layout.addWidget(self.settings, 3)
        self.cases_title = QLabel("Replay cases:", self)
        layout.addWidget(self.cases_title)
        self.cases = _table(["Result", "Case", "Time", "What differed"], self)
        layout.addWidget(self.cases, 3)
        self.verdict = QLabel("", self)
        self.verdict.setWordWrap(True)
        self.verdict.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.verdict)

        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, self)
        self.again = QPushButton("Run &Again", self)
        self.copy = QPushButton("&Copy Report", self)
        self.copy.setToolTip("Copy the report as JSON (what parley doctor --json prints)")
        self.copy.setEnabled(False)
        buttons.addButton(self.again, QDialogButtonBox.ButtonRole.ActionRole)
        buttons.addButton(self.copy, QDialogButtonBox.ButtonRole.ActionRole)
        buttons.rejected.connect(self.reject)
        self.again.clicked.connect(self.start)
        self.copy.clicked.connect(self.copy_report)
        layout.addWidget(buttons)
        self.resize(980, 640)

    # --- running ---------------------------------------------------------------------------------

    def start(self) -> bool:
        """Run the self-test (again); False while one runs."""
        if not self.run.start(self.job):
            return False
        self.report = None
        self.copy.setEnabled(False)
        self.settings.setRowCount(0)
        self.cases.setRowCount(0)
        self.verdict.setText("")
        self._set_status("Starting\u2026", QUIET_COLOR)
        return True

    def _busy(self, busy: bool) -> None:
        self.again.setEnabled(not busy)

    def _progress(self, text: str) -> None:
        status, _, rest = text.partition(" ")
        if status in ("PASS", "FAIL", "SKIP"):
            self._add_case(status, rest.partition(": ")[0], None, rest.partition(": ")[2])
        else:
            self._set_status(text[:1].upper() + text[1:] + "\u2026", QUIET_COLOR)

    def _set_status(self, text: str, color: str = "") -> None:
        self.status.setStyleSheet(f"color: {color};" if color else "")
        self.status.setText(text)

    # --- the report ------------------------------------------------------------------------------

    def _show_report(self, report: SelfTestReport) -> None:
        self.report = report
        self.copy.setEnabled(True)
        self._set_status(f"{report.backend} \u00b7 {report.model} \u00b7 {report.seconds:.1f} s")
        self.settings.setRowCount(0)
        for row in report.settings:
            at = self.settings.rowCount()
            self.settings.insertRow(at)
            self.settings.setItem(at, 0, _item("\u25b6" if row.chosen else "", tip="the chosen setting"
                                               if row.chosen else " "))
            self.settings.setItem(at, 1, _item(row.setting))
            self.settings.setItem(at, 2, _item(VERDICT_TEXT[row.reproducible], VERDICT_COLORS[row.reproducible]))
            self.settings.setItem(at, 3, _item(row.reason))
        self.cases.setRowCount(0)
        for run in report.runs:
            if len(report.runs) > 1:
                at = self.cases.rowCount()
                self.cases.insertRow(at)
                self.cases.setItem(at, 1, _item(run.configuration + (" (chosen)" if run.chosen else ""),
                                                QUIET_COLOR))
            for case in run.cases:
                self._add_case(case.status, case.name, case.seconds, case.detail)
        chosen = report.chosen[0].configuration if report.chosen else ""
        self.cases_title.setText(f"Replay cases on {chosen}:" if len(report.runs) == 1 else "Replay cases:")
        self._fit_rows()
        lines = [f"<b style='color: {PASS_COLOR if report.passed else FAIL_COLOR}'>"
                 + ("The chosen settings are reproducible." if report.passed else
                    "The chosen settings are NOT reproducible.") + "</b>",
                 f"The backend says: {report.promise.note}."]
        if report.alternative:
            lines.append(f"Exact alternative: {report.alternative}.")
        self.verdict.setText("<br>".join(lines))

    def _add_case(self, status: str, name: str, seconds: float | None, detail: str) -> None:
        at = self.cases.rowCount()
        self.cases.insertRow(at)
        color = {"PASS": PASS_COLOR, "FAIL": FAIL_COLOR}.get(status, QUIET_COLOR)
        self.cases.setItem(at, 0, _item(status, color))
        self.cases.setItem(at, 1, _item(name))
        self.cases.setItem(at, 2, _item("" if seconds is None else f"{seconds:.1f} s"))
        self.cases.setItem(at, 3, _item(detail))
        self.cases.resizeRowToContents(at)

    def _fit_rows(self) -> None:
        for table in (self.settings, self.cases):
            table.resizeRowsToContents()

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self._fit_rows()  # the columns have their widths only now

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._fit_rows()

    def _show_failure(self, text: str) -> None:
        self._set_status(f"The self-test could not finish: {text}", FAIL_COLOR)

    def copy_report(self) -> bool:
        if self.report is None:
            return False
        QGuiApplication.clipboard().setText(self.report.to_json())
        return True

    def done(self, result: int) -> None:
        self.run.shutdown()  # a self-test still running stops with the dialog
        super().done(result)


def subject_text(backend: str, model: str) -> str:
    return (f"Runs the replay cases (regenerate, rewind, edit, replay, a cold import of the history, other thread "
            f"counts) through an agent on <b>{backend}</b> with <b>{model}</b>, and says which settings give the "
            "same replies bit for bit.")


def open_doctor_dialog(choice: BackendChoice, model: str, asset_dir: str | Path | None,
                       parent: QWidget | None = None) -> DoctorDialog:
    """Show the dialog (not modal: the window stays usable) and start the self-test of the window's
    chosen backend, on ``model`` (the open asset's default model; "" for the sample model)."""
    shown = "the model it serves" if choice.remote else Path(model).name if model else "the sample model"
    subject = subject_text(choice.description, shown)
    try:
        maker = choice.maker()
    except BackendError as exc:  # the chosen profile cannot be made any more (its key variable is gone)
        failure = str(exc)

        def job(_progress: Callable[[str], None], _cancel: threading.Event) -> SelfTestReport:
            raise BackendError(failure)
    else:
        job = self_test_job(maker, model, asset_dir)
    dialog = DoctorDialog(job, subject, parent)
    dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    dialog.show()
    dialog.start()
    return dialog
