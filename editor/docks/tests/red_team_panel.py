"""The Tests dock's red-team panel: a run's numbers (per family the attack success with its 95 %
interval and how often a guard fired, per marked game event the same, the benign lines flagged and
the guards' p50/p95 latency) and its successful attacks, each opened in the Turn Inspector with a click
(``attack_opened``). Hidden until a red-team run starts."""

from __future__ import annotations

import html
import math
from typing import ClassVar

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QBrush, QColor, QFont
from PySide6.QtWidgets import (
    QHeaderView,
    QSplitter,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from editor.widgets.report_head import ReportHead
from runtime.suites.redteam import Attempt, Rate, RedTeamReport

PASSED, FAILED, DIM = QColor(110, 200, 120), QColor(235, 95, 80), QColor(150, 150, 150)
ATTEMPT_ROLE = Qt.ItemDataRole.UserRole
ARROW = " \u2192 "


def percent(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{100 * x:.1f} %"


def interval(rate: Rate) -> str:
    low, high = rate.interval
    return f"{percent(low)} \u2013 {percent(high)}"


def ms(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:.2f} ms"


def summary_html(report: RedTeamReport, stopped: bool = False) -> str:
    """The run in a few lines: the verdict, the benign lines flagged, the guards' latency."""
    over = report.over_threshold()
    verdict = (f"<span style='color:{FAILED.name()}'>{html.escape('; '.join(over))}</span>" if over else
               f"<span style='color:{PASSED.name()}'>every rate within its threshold</span>")
    kinds = ", ".join(f"{html.escape(k)} {ms(v.p50)} / {ms(v.p95)}" for k, v in sorted(report.check_latency.items()))
    guards = ", ".join(report.line_guards)
    benign = (f"Benign lines flagged: <b>{report.benign.successes}/{report.benign.attempts}</b> "
              f"({percent(report.benign.rate)}, 95 % {interval(report.benign)}) by {html.escape(guards)}"
              if guards else "Benign lines: no guard checks the player's line")
    return (("<b>Stopped</b>: only the lines played before Stop count. " if stopped else "")
            + f"<b>Red team</b> on {html.escape(report.asset)}: {len(report.attempts)} attacks, "
            f"{len(report.successes)} succeeded \u00b7 {verdict}<br/>{benign}<br/>"
            f"Guard latency p50 / p95: <b>{ms(report.latency.p50)} / {ms(report.latency.p95)}</b> over "
            f"{report.latency.runs} runs" + (f" ({kinds})" if kinds else ""))


class RedTeamPanel(QWidget):
    """A red-team run's report (hidden until one runs)."""

    attack_opened = Signal(object)  # runtime.suites.redteam.Attempt: open its turn in the Turn Inspector
    closed = Signal()

    COLUMNS: ClassVar[list[str]] = ["Family / game event", "Succeeded", "Rate", "95 % interval", "Guard fired"]
    ATTACK_COLUMNS: ClassVar[list[str]] = ["Family", "Attack line", "How", "Reply"]

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("RedTeamPanel")
        self.report: RedTeamReport | None = None
        self._running = ("", "")  # the asset and suite of the run going on
        self._played = self._through = 0
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        head = ReportHead(self, "Close the red-team report", self.clear)
        self.summary, self.close_button = head.summary, head.close_button
        layout.addLayout(head)
        self.table = QTreeWidget(self)
        self.table.setObjectName("redTeamTable")
        self.table.setHeaderLabels(self.COLUMNS)
        self.table.setRootIsDecorated(True)
        header = self.table.header()
        header.setStretchLastSection(False)  # the numbers stay beside their names in a wide dock
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Interactive)
        self.table.setColumnWidth(0, 170)
        for column, width in ((1, 76), (2, 62), (3, 116), (4, 84)):
            self.table.setColumnWidth(column, width)
        self.attacks = QTreeWidget(self)
        self.attacks.setObjectName("redTeamAttacks")
        self.attacks.setHeaderLabels(self.ATTACK_COLUMNS)
        self.attacks.setRootIsDecorated(False)
        self.attacks.setToolTip("Click a successful attack to open its turn in the Turn Inspector")
        self.attacks.setColumnWidth(0, 110)
        self.attacks.setColumnWidth(1, 260)
        self.attacks.setColumnWidth(2, 170)
        self.attacks.header().setStretchLastSection(True)
        self.attacks.itemClicked.connect(self._clicked)
        self.attacks.itemActivated.connect(self._clicked)
        tables = QSplitter(Qt.Orientation.Vertical, self)
        tables.setChildrenCollapsible(False)
        tables.addWidget(self.table)
        tables.addWidget(self.attacks)
        layout.addWidget(tables, 1)
        self.hide()

    def _reveal(self) -> None:
        if not self.isHidden():
            return
        self.show()
        splitter = self.parent()
        if isinstance(splitter, QSplitter):
            total = sum(splitter.sizes()) or 400
            splitter.setSizes([total // 4, total - total // 4])

    def running(self, label: str, suite: str) -> None:
        self.report = None
        self._running = (label, suite)
        self._played = self._through = 0
        self.table.clear()
        self.attacks.clear()
        self._say_progress()
        self._reveal()

    def attempted(self, attempt: Attempt) -> None:
        """One more attack played (while the run goes on): counted in the summary."""
        if self.report is not None:
            return
        self._played += 1
        self._through += attempt.success
        self._say_progress()

    def _say_progress(self) -> None:
        label, suite = self._running
        played = (f": {self._played} attack{'s' if self._played != 1 else ''} played, {self._through} got through"
                  if self._played else "")
        self.summary.setText(f"Red team: attacking {html.escape(label)} with the settings of "
                             f"{html.escape(suite)}{played}\u2026")

    def failed(self, why: str) -> None:
        self.report = None
        self.table.clear()
        self.attacks.clear()
        self.summary.setText(f"<span style='color:{FAILED.name()}'>The red-team run could not run: "
                             f"{html.escape(why)}</span>")
        self._reveal()

    def show_report(self, report: RedTeamReport, stopped: bool = False) -> None:
        self.report = report
        self.summary.setText(summary_html(report, stopped))
        self.table.clear()
        families = self._group("Attack families", f"{len(report.families)}")
        for f in report.families:
            over = f.success.attempts > 0 and f.success.rate > report.max_success
            self._rate_row(families, f.name, f.success, over, percent(f.guard_fired.rate),
                           f"{f.title} (goal: {f.goal})" + (f"; {f.errors} turns failed" if f.errors else ""))
        if report.events:
            events = self._group("Game events", f"{len(report.events)}")
            for e in report.events:
                where = f"{e.node}.{e.exit}" if e.exit else e.node
                per = ", ".join(f"{name} {r.successes}/{r.attempts}" for name, r in e.families.items() if r.successes)
                self._rate_row(events, e.name, e.overall, e.overall.successes > 0, "",
                               f"at {where}" + (f"; reached by {per}" if per else ""))
        if report.flagged:
            flagged = self._group("Benign lines flagged", f"{len(report.flagged)}")
            for line in report.flagged:
                item = QTreeWidgetItem(flagged, [f"\u201c{line.line}\u201d \u2014 {line.guard}: {line.policy}"])
                item.setFirstColumnSpanned(True)
                item.setToolTip(0, line.why)
            flagged.setExpanded(False)
        self.attacks.clear()
        if not report.successes:
            none = QTreeWidgetItem(self.attacks, ["No attack succeeded."])
            none.setFirstColumnSpanned(True)
            none.setForeground(0, QBrush(DIM))
        for attempt in report.successes:
            item = QTreeWidgetItem(self.attacks, [attempt.family, attempt.line.replace("\n", " "),
                                                  ", ".join(attempt.how), attempt.reply.replace("\n", " ")])
            item.setData(0, ATTEMPT_ROLE, attempt)
            item.setForeground(2, QBrush(FAILED))
            path = ARROW.join(attempt.path)
            item.setToolTip(1, f"{attempt.line}\n\npath: {path}\n\nClick to open the turn in the Turn Inspector."
                            if attempt.result is not None else attempt.line)
        self._reveal()

    def _group(self, title: str, count: str) -> QTreeWidgetItem:
        item = QTreeWidgetItem(self.table, [f"{title} ({count})"])
        font = QFont(item.font(0))
        font.setBold(True)
        item.setFont(0, font)
        item.setFirstColumnSpanned(True)
        item.setExpanded(True)
        return item

    def _rate_row(self, parent: QTreeWidgetItem, name: str, rate: Rate, bad: bool, guard: str, tip: str) -> None:
        item = QTreeWidgetItem(parent, [name, f"{rate.successes}/{rate.attempts}", percent(rate.rate),
                                        interval(rate), guard])
        for column in (1, 2, 3, 4):
            item.setTextAlignment(column, Qt.AlignmentFlag.AlignCenter)
        item.setForeground(2, QBrush(FAILED if bad else PASSED if rate.attempts else DIM))
        for column in range(len(self.COLUMNS)):
            item.setToolTip(column, tip)

    def rows(self) -> list[list[str]]:
        """The numbers table as text, group rows and their children in order (what tests read)."""
        out = []
        for i in range(self.table.topLevelItemCount()):
            group = self.table.topLevelItem(i)
            out.append([group.text(0)])
            out += [[group.child(j).text(c) for c in range(len(self.COLUMNS))] for j in range(group.childCount())]
        return out

    def attack_rows(self) -> list[Attempt]:
        """The successful attacks listed, in order."""
        items = [self.attacks.topLevelItem(i) for i in range(self.attacks.topLevelItemCount())]
        return [a for a in (item.data(0, ATTEMPT_ROLE) for item in items) if a is not None]

    def _clicked(self, item: QTreeWidgetItem, _column: int = 0) -> None:
        attempt = item.data(0, ATTEMPT_ROLE)
        if attempt is not None:
            self.attack_opened.emit(attempt)

    def clear(self) -> None:
        self.report = None
        self.table.clear()
        self.attacks.clear()
        self.hide()
        self.closed.emit()
