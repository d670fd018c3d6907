"""The Tests dock's tree: each suite file beside the asset (or the problems that keep it from being
read), its cases and, after a run, each turn with its checks, passed in green and failed in red."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import QHeaderView, QTreeWidget, QTreeWidgetItem, QWidget

from runtime.problems import Problem
from runtime.suites.checks import Check
from runtime.suites.file import LoadedSuite
from runtime.suites.report import CaseResult, TurnOutcome

PASS, FAIL = "\u2713", "\u2717"
PASS_COLOUR, FAIL_COLOUR, DIM_COLOUR = QColor(110, 200, 120), QColor(235, 95, 80), QColor(150, 150, 150)
ROLE = Qt.ItemDataRole.UserRole
NODE_ROLE = Qt.ItemDataRole.UserRole + 1  # a check's row: the node the check is about, to show on the canvas
CaseKey = tuple[str, str]  # suite file name, case name


@dataclass
class SuiteEntry:
    """A suite file beside the asset: loaded, or the problems that keep it from loading."""

    path: Path
    loaded: LoadedSuite | None
    problems: list[Problem]

    @property
    def name(self) -> str:
        return self.path.name


def problem_text(problem: Problem) -> str:
    """A suite problem as the dock lists it: file, line and column first, then the case and field it names."""
    where = Path(problem.file).name if problem.file else ""
    if problem.line:
        where += f", line {problem.line}" + (f", column {problem.column}" if problem.column else "")
    return f"{where}: {problem.message}" if where else problem.message


def check_line(check: Check) -> str:
    return f"{PASS if check.passed else FAIL} {check.kind}: {check.message}"


def turn_note(outcome: TurnOutcome) -> str:
    """What a turn was expected to do and what failed, failed checks first (the Turn Inspector shows it)."""
    lines = [f"{FAIL} the turn failed: {outcome.error}"] if outcome.error else []
    checks = sorted(outcome.checks, key=lambda c: c.passed)
    lines += [check_line(c) for c in checks]
    return "\n".join(lines) if lines else "This turn has no expectations."


class ResultsTree(QTreeWidget):
    """Draws what it is given; the dock keeps the suites, results and runs. ``case_items`` holds each
    case's row by (suite file name, case name) and is only ever cleared, never replaced."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.case_items: dict[CaseKey, QTreeWidgetItem] = {}
        self.setHeaderLabels(["Suite / case / turn", "Result"])
        header = self.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Interactive)
        self.setColumnWidth(1, 230)
        self.setToolTip("Click a turn to open its prompts in the Turn Inspector")

    def fill(self, entries: list[SuiteEntry], placeholder: str, results: dict[CaseKey, CaseResult],
             fill_case: Callable[[CaseKey], None]) -> None:
        """The suites ``entries`` (``placeholder`` above them when it is not "") with their ``results`` so far;
        ``fill_case(key)`` draws a case."""
        self.clear()
        self.case_items.clear()
        if placeholder:
            item = QTreeWidgetItem(self, [placeholder])
            item.setFirstColumnSpanned(True)
            item.setForeground(0, QBrush(DIM_COLOUR))
            item.setToolTip(0, placeholder)
        for entry in entries:
            item = QTreeWidgetItem(self, [entry.name, ""])
            item.setData(0, ROLE, ("suite", entry.name))
            item.setToolTip(0, str(entry.path))
            if entry.loaded is None:
                for problem in entry.problems:
                    child = QTreeWidgetItem(item, [problem_text(problem)])
                    child.setFirstColumnSpanned(True)
                    child.setForeground(0, QBrush(FAIL_COLOUR))
                    child.setToolTip(0, str(problem))
            else:
                for case in entry.loaded.suite.cases:
                    key = (entry.name, case.name)
                    case_item = QTreeWidgetItem(item, [case.name, ""])
                    case_item.setData(0, ROLE, ("case", *key))
                    self.case_items[key] = case_item
                    fill_case(key)
            self.show_suite_result(item, entry, results)
            item.setExpanded(True)

    def suite_item(self, name: str) -> QTreeWidgetItem | None:
        for i in range(self.topLevelItemCount()):
            item = self.topLevelItem(i)
            if item.data(0, ROLE) == ("suite", name):
                return item
        return None

    def show_suite_result(self, item: QTreeWidgetItem, entry: SuiteEntry, results: dict[CaseKey, CaseResult]) -> None:
        if entry.loaded is None:
            count = len(entry.problems)
            _set_result(item, f"{FAIL} cannot be read ({count} problem{'s' if count != 1 else ''})", False)
            return
        keys = [(entry.name, c.name) for c in entry.loaded.suite.cases]
        done = [results[k] for k in keys if k in results]
        if not done:
            _set_result(item, f"{len(keys)} case{'s' if len(keys) != 1 else ''}", None)
            return
        failed = sum(not r.passed for r in done)
        text = f"{FAIL} {failed} failed, {len(done) - failed} passed" if failed else f"{PASS} {len(done)} passed"
        if len(done) < len(keys):
            text += f", {len(keys) - len(done)} not run"
        _set_result(item, text, not failed)

    def fill_case(self, key: CaseKey, result: CaseResult | None, turns_so_far: list[TurnOutcome], running: bool,
                  case_turns: int) -> None:
        """A case's row and its turns, from its ``result`` (or, while it runs, the turns finished so far);
        ``case_turns``: how many turns the case has."""
        item = self.case_items.get(key)
        if item is None:
            return
        expanded = item.isExpanded()
        item.takeChildren()
        turns = result.turns if result is not None else turns_so_far
        for outcome in turns:
            self._turn_item(item, key, outcome)
        if result is None:
            if running:
                _set_result(item, f"running\u2026 ({len(turns)} turn{'s' if len(turns) != 1 else ''} done)"
                            if turns else "waiting\u2026", None)
            else:
                _set_result(item, "not run", None)
            item.setToolTip(1, "")
            item.setExpanded(expanded or bool(turns))
            return
        if result.error:
            child = QTreeWidgetItem(item, [f"{FAIL} {result.error}"])
            child.setFirstColumnSpanned(True)
            child.setForeground(0, QBrush(FAIL_COLOUR))
            child.setToolTip(0, result.error)
        for number, check in result.conversation:
            child = QTreeWidgetItem(item, [f"after turn {number}: {check_line(check)}"])
            child.setFirstColumnSpanned(True)
            child.setForeground(0, QBrush(PASS_COLOUR if check.passed else FAIL_COLOUR))
            child.setToolTip(0, check.message)
        if result.server:
            item.setToolTip(0, f"{result.case}\nran on {result.server}")
        if result.passed:
            _set_result(item, f"{PASS} passed \u00b7 {result.seconds:.1f} s", True)
        elif result.error == "stopped":
            _set_result(item, f"{FAIL} stopped", False)
        else:
            failed_turns = sum(not t.passed for t in result.turns)
            _set_result(item, f"{FAIL} failed \u00b7 {failed_turns} of {case_turns} turns", False)
        item.setToolTip(1, "\n".join(result.failures) or "Every check passed.")
        item.setExpanded(not result.passed)

    def _turn_item(self, parent: QTreeWidgetItem, key: CaseKey, outcome: TurnOutcome) -> None:
        line = outcome.line if len(outcome.line) <= 60 else outcome.line[:60] + "\u2026"
        item = QTreeWidgetItem(parent, [f"Turn {outcome.number}: {line}", ""])
        item.setData(0, ROLE, ("turn", *key, outcome.number))
        failed = [c for c in outcome.checks if not c.passed]
        if outcome.error:
            _set_result(item, f"{FAIL} did not finish", False)
        elif failed:
            _set_result(item, f"{FAIL} {len(failed)} of {len(outcome.checks)} checks failed", False)
        else:
            _set_result(item, f"{PASS} passed ({len(outcome.checks)} check{'s' if len(outcome.checks) != 1 else ''})",
                        True)
        path = " \u2192 ".join([*outcome.path, "END"]) if outcome.path else "(no path)"
        reply = outcome.reply if len(outcome.reply) <= 300 else outcome.reply[:300] + "\u2026"
        item.setToolTip(0, f"Player: {outcome.line}\nPath: {path}\nReply: {reply}\n\n{turn_note(outcome)}"
                        + ("\n\nClick to open this turn's prompts in the Turn Inspector." if outcome.result else ""))
        item.setToolTip(1, turn_note(outcome))
        if outcome.error:
            child = QTreeWidgetItem(item, [f"{FAIL} {outcome.error}"])
            child.setFirstColumnSpanned(True)
            child.setForeground(0, QBrush(FAIL_COLOUR))
            child.setData(0, ROLE, ("turn", *key, outcome.number))
        for check in sorted(outcome.checks, key=lambda c: c.passed):
            child = QTreeWidgetItem(item, [check_line(check)])
            child.setFirstColumnSpanned(True)
            child.setForeground(0, QBrush(PASS_COLOUR if check.passed else FAIL_COLOUR))
            child.setToolTip(0, check.message)
            child.setData(0, ROLE, ("turn", *key, outcome.number))
            child.setData(0, NODE_ROLE, check.node)
        item.setExpanded(bool(failed or outcome.error))



def _set_result(item: QTreeWidgetItem, text: str, passed: bool | None) -> None:
    item.setText(1, text)
    colour = DIM_COLOUR if passed is None else PASS_COLOUR if passed else FAIL_COLOUR
    item.setForeground(1, QBrush(colour))
    if passed is False:
        item.setForeground(0, QBrush(FAIL_COLOUR))
    else:
        item.setData(0, Qt.ItemDataRole.ForegroundRole, None)  # the palette's text colour
