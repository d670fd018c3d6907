"""Comparing the open asset with a variant from the Tests dock: a paired A/B run of a suite, off the UI thread.

"Compare with variant\u2026" picks B: another asset file (A: the open asset as it is in the editor,
unsaved edits included, as Run all tests it), or the saved version of the open asset (A: its file on
disk, B: the document with its unsaved edits). ``VariantComparison`` runs
``runtime.suites.variants.compare_variants`` on a thread of its own (one comparison at a time) and
re-emits its report from the UI thread. ``VariantPanel`` shows the report: a verdict in a designer's
words (better, or a difference chance explains), per case the passes on A and B and the turns that
differ, as details the paired difference with its 95 % interval and McNemar's p, and
each case's first divergence (turn, node, token); clicking one sends both prompts out
(``divergence_opened``) as two turn records the Turn Inspector shows side by side.
"""

from __future__ import annotations

import html
import logging
import math
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (
    QFileDialog,
    QHeaderView,
    QSplitter,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from editor.services.suite_run import TurnComparison
from editor.session.record import InspectedTurn
from editor.threads.thread_service import RequestRunService
from editor.widgets.report_head import ReportHead
from runtime.asset.model import Asset
from runtime.backends.base import Backend
from runtime.diagnostics import NodeDiagnostics, NodeInput, PromptMessage, TurnDiagnostics
from runtime.suites.file import load_suite
from runtime.suites.kept import asset_changes
from runtime.suites.variants import (
    CaseComparison,
    TurnDivergence,
    VariantReport,
    compare_variants,
    variant_suite,
)

log = logging.getLogger("parley.editor")

BackendFactory = Callable[[], Backend]
SAME, DIFFERENT, DIM = QColor(110, 200, 120), QColor(235, 95, 80), QColor(150, 150, 150)
DIVERGENCE_ROLE = Qt.ItemDataRole.UserRole
# what a divergence's turn holds, said where its (zero) timings and token counts show
KEPT_ONLY = ("From a variant comparison: only this node's prompt and output are kept, not its timings or token "
             "counts (run the case in the Tests dock for those).")


def pick_variant_file(parent: QWidget | None, start_dir: str) -> str:
    """The asset file to compare with, picked in a file dialog ("": cancelled). Tests replace it."""
    path, _filter = QFileDialog.getOpenFileName(parent, "Compare with variant", start_dir,
                                                "Parley assets (*.json);;All files (*)")
    return path


@dataclass
class VariantRequest:
    """What one comparison runs: a suite file, A and B, and how to name both sides."""

    suite: Path
    variant: Path | Asset  # B: an asset file, or the document as it is in the editor
    label_a: str
    label_b: str
    asset_a: Asset | None = None  # A: None for the suite's asset file as saved, else the document
    stopped: bool = False  # Stop was pressed: the cases not run yet were skipped on both

    def asset(self, side: str) -> Asset | None:
        """Side "a" or "b" as the comparison ran it (read again from its file; None: it cannot be)."""
        try:
            loaded = load_suite(self.suite)
            if side == "a":
                return loaded.asset if self.asset_a is None else variant_suite(loaded, self.asset_a).asset
            return variant_suite(loaded, self.variant).asset
        except Exception:  # the files changed since: the prompts still show, without the edits
            log.warning("could not read side %s of the comparison on %s", side, self.suite, exc_info=True)
            return None


def _compare(request: VariantRequest, make_backend: BackendFactory, cancel: threading.Event) -> VariantReport:
    """One comparison, off the UI thread: the suite as its file is now, A and B."""
    loaded = load_suite(request.suite)
    if request.asset_a is not None:
        loaded = variant_suite(loaded, request.asset_a)
    return compare_variants(loaded, request.variant, backend=make_backend, cancel=cancel)


class VariantComparison(RequestRunService):
    """The window's variant comparisons (one at a time). Lives on the UI thread; all its signals
    are emitted there (so widgets and pytest-qt only see UI-thread signals): ``started``
    (VariantRequest), then ``finished`` (VariantRequest, VariantReport) or ``failed`` (VariantRequest, why)."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__("parley-variant-compare", parent)

    def start(self, request: VariantRequest, make_backend: BackendFactory) -> bool:
        """Compare on the worker thread; False when one is going on or the window closed."""
        cancel = self._begin(request)
        if cancel is None:
            return False
        return self._launch(self._new_job(lambda: _compare(request, make_backend, cancel)))


# --- the divergence as two turns the Turn Inspector shows side by side ------------------------

_CHATML = re.compile(r"<\|im_start\|>(system|user|assistant|tool)\n(.*?)(?:<\|im_end\|>|\Z)", re.DOTALL)
_ROLE_LINE = re.compile(r"^(system|user|assistant|tool):[ \t]?", re.MULTILINE | re.IGNORECASE)


def prompt_messages(prompt: str) -> list[PromptMessage]:
    """A prompt as the model saw it, message by message (so the side-by-side lines up message with
    message): chat-template markers, ``role:`` lines, else the whole text as one message."""
    found = [PromptMessage(role=role, content=text.strip("\n")) for role, text in _CHATML.findall(prompt)]
    if found:
        return found
    starts = list(_ROLE_LINE.finditer(prompt))
    if starts and starts[0].start() == 0:
        out = []
        for i, match in enumerate(starts):
            end = starts[i + 1].start() if i + 1 < len(starts) else len(prompt)
            role = match.group(1).lower()
            out.append(PromptMessage(role=role, content=prompt[match.end():end].strip("\n")))  # type: ignore[arg-type]
        return out
    return [PromptMessage(role="user", content=prompt)]


def divergence_record(div: TurnDivergence, asset: Asset, side: str) -> InspectedTurn:
    """One side ("a" or "b") of a divergence as a turn record: the node's prompt and its output."""
    prompt, text = (div.prompt_a, div.text_a) if side == "a" else (div.prompt_b, div.text_b)
    try:
        node_type = asset.node(div.node).type
    except (KeyError, ValueError):
        node_type = ""
    diag = NodeDiagnostics(node=div.node, type=node_type, input=NodeInput(prompt=prompt_messages(prompt)),
                           output=text, warnings=[KEPT_ONLY])
    turn = TurnDiagnostics(turn=max(div.turn - 1, 0), player="", path=[div.node], nodes=[diag], reply=text)
    return InspectedTurn(turn, asset)


def divergence_labels(div: TurnDivergence, label_a: str, label_b: str) -> tuple[str, str]:
    where = f"{_case_name(div.case)} \u00b7 run {div.run + 1} \u00b7 turn {div.turn}"
    return f"A ({label_a}): {where}", f"B ({label_b}): {where}"


def _case_name(case: str) -> str:
    """``suite::case`` as the table names it: the case."""
    return case.partition("::")[2] or case


def divergence_text(div: TurnDivergence) -> str:
    """Where the two part: "turn 1 \u00b7 reply \u00b7 output token 3"."""
    node = div.node or "the path"
    return f"turn {div.turn} \u00b7 {node} \u00b7 {div.part} token {div.token_index}"


def divergence_note(div: TurnDivergence, label_a: str, label_b: str) -> str:
    """What the Turn Inspector says above the two prompts."""
    node = f"at node {div.node}" if div.node else "in the path"
    return (f"\u2717 A ({label_a}) and B ({label_b}) first differ in case \u201c{_case_name(div.case)}\u201d, "
            f"run {div.run + 1}, turn {div.turn}, {node}, {div.part} token {div.token_index}.\n"
            f"A: {_clip(div.text_a)}\nB: {_clip(div.text_b)}")


def divergence_opening(div: TurnDivergence, request: VariantRequest) -> tuple[InspectedTurn, str, str, TurnComparison]:
    """What the Tests dock sends the Turn Inspector (``turn_opened``): B's turn, its label and note,
    and A's turn to compare it with, on the node where they diverge, with the asset edits from A to B."""
    asset_a, asset_b = request.asset("a"), request.asset("b")
    label_a, label_b = divergence_labels(div, request.label_a, request.label_b)
    changes = asset_changes(asset_a, asset_b) if asset_a is not None and asset_b is not None else []
    fallback = Asset()
    record_a = divergence_record(div, asset_a or fallback, "a")
    record_b = divergence_record(div, asset_b or fallback, "b")
    comparison = TurnComparison(record_a, label_a, div.node, changes, headers=("A", "B"),
                                no_changes="A and B have the same graph: the replies differ on their own.",
                                note_heading="where A and B part")
    return record_b, label_b, divergence_note(div, request.label_a, request.label_b), comparison


def _clip(text: str, limit: int = 160) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= limit else text[:limit - 1] + "\u2026"


# --- the panel ------------------------------------------------------------------------------


def _percent(value: float) -> str:
    return f"{value * 100:.0f} %"


def _points(value: float) -> str:
    return f"{value * 100:+.0f}"


def _interval(report: VariantReport) -> str:
    if math.isnan(report.ci_low) or math.isnan(report.ci_high):
        return "no 95 % interval from one conversation"
    # a difference of pass rates lies within \u00b1100 points: a wider interval (few conversations) is cut there
    low, high = max(report.ci_low, -1.0), min(report.ci_high, 1.0)
    wide = " \u2014 too few conversations to tell" if (low, high) == (-1.0, 1.0) else ""
    return f"95 % interval {_points(low)} to {_points(high)}{wide}"


def verdict_text(report: VariantReport) -> str:
    """The comparison in a designer's words: is one side better, or is the difference luck? McNemar's
    test decides, on the conversations that passed on one side only; the statistic is in the details."""
    n = report.conversations
    unit = "case" if n == len(report.cases) else "conversation"  # each case ran once: a conversation is a case
    if n == 0:
        return "Nothing was compared: no case ran."
    a_only, b_only = report.discordant
    differ = a_only + b_only
    if differ == 0:
        which = f"the {unit}" if n == 1 else f"all {n} {unit}s"
        return f"No difference between A and B: {which} passed or failed alike on both."
    split = f"{b_only} pass{'es' if b_only == 1 else ''} only on B, {a_only} only on A"
    if report.significant:
        better, worse = ("B", "A") if b_only > a_only else ("A", "B")
        return (f"{better} is better than {worse}: {differ} of {_count(n, unit)} differ ({split}), more than "
                "chance explains.")
    return (f"No real difference between A and B: {differ} of {_count(n, unit)} differ ({split}), which chance "
            f"explains. More {unit}s would tell a small difference from luck.")


def _count(n: int, unit: str) -> str:
    return f"{n} {unit}{'s' if n != 1 else ''}"


def summary_text(report: VariantReport, request: VariantRequest) -> str:
    """The details under the verdict: both pass rates, the paired difference with its interval, McNemar's p."""
    b_won, a_won = report.discordant[1], report.discordant[0]
    return (f"A: {request.label_a} \u00b7 B: {request.label_b} \u00b7 {report.conversations} conversation"
            f"{'s' if report.conversations != 1 else ''} on each. Pass rate A {_percent(report.pass_rate_a)}, "
            f"B {_percent(report.pass_rate_b)}; difference B\u2212A {_points(report.difference)} points "
            f"({_interval(report)}); McNemar p = "
            f"{report.mcnemar_p:.3g} ({a_won} passed only on A, {b_won} only on B). "
            f"{report.differing_turns} differing turn{'s' if report.differing_turns != 1 else ''}.")


class VariantPanel(QWidget):
    """A comparison's report: a summary line and the per-case table (hidden until one runs)."""

    divergence_opened = Signal(object)  # TurnDivergence: open both prompts side by side
    closed = Signal()

    COLUMNS: ClassVar[list[str]] = ["Case", "Pass A", "Pass B", "Differing turns", "First divergence"]

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("VariantPanel")
        self.report: VariantReport | None = None
        self.request: VariantRequest | None = None
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        head = ReportHead(self, "Close the comparison", self.clear)
        self.summary, self.close_button = head.summary, head.close_button
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse
                                             | Qt.TextInteractionFlag.LinksAccessibleByMouse)
        self.summary.linkActivated.connect(self._link)
        layout.addLayout(head)
        self.table = QTreeWidget(self)
        self.table.setObjectName("variantTable")
        self.table.setHeaderLabels(self.COLUMNS)
        self.table.setRootIsDecorated(False)
        self.table.setToolTip("Click a case's first divergence to open both prompts side by side in the Turn Inspector")
        header = self.table.header()
        header.setStretchLastSection(True)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Interactive)
        self.table.setColumnWidth(0, 150)
        for column, width in ((1, 56), (2, 56), (3, 104)):
            self.table.setColumnWidth(column, width)
        self.table.itemClicked.connect(self._clicked)
        self.table.itemActivated.connect(self._clicked)
        layout.addWidget(self.table, 1)
        self.hide()

    def _reveal(self) -> None:
        """Shown below the suites: with the larger share of the splitter it is in, when it appears."""
        if not self.isHidden():
            return
        self.show()
        splitter = self.parent()
        if isinstance(splitter, QSplitter):
            total = sum(splitter.sizes()) or 400
            splitter.setSizes([total * 2 // 5, total - total * 2 // 5])

    def running(self, request: VariantRequest) -> None:
        self.request, self.report = request, None
        self.table.clear()
        self.summary.setText(f"Comparing A ({_h(request.label_a)}) with B ({_h(request.label_b)}) on "
                             f"{_h(request.suite.name)}\u2026")
        self._reveal()

    def failed(self, request: VariantRequest, why: str) -> None:
        self.request, self.report = request, None
        self.table.clear()
        self.summary.setText(f"<span style='color:{DIFFERENT.name()}'>Could not compare {_h(request.label_a)} "
                             f"with {_h(request.label_b)}: {_h(why)}</span>")
        self._reveal()

    def show_report(self, request: VariantRequest, report: VariantReport) -> None:
        self.request, self.report = request, report
        first = self.first_divergence()
        text = (f"<b>{_h(verdict_text(report))}</b><br/><span style='color:{DIM.name()}'>"
                f"{_h(summary_text(report, request))}</span>")
        if request.stopped:
            text = "<b>Stopped</b>: only the cases run before Stop count. " + text
        if first is not None:
            text += (f"<br/>First divergence: \u201c{_h(_case_name(first.case))}\u201d run {first.run + 1}, "
                     f"{_h(divergence_text(first))} \u00b7 <a href='first' style='color:#7fb2e5'>open both prompts</a>")
        elif report.differing_turns == 0:
            text += "<br/>The two replied alike on every turn."
        self.summary.setText(text)
        self.table.clear()
        for case in report.cases:
            self._row(case)
        self._reveal()

    def first_divergence(self) -> TurnDivergence | None:
        cases = self.report.cases if self.report is not None else []
        return next((c.first_divergence for c in cases if c.first_divergence is not None), None)

    def rows(self) -> list[list[str]]:
        """The table as text (what the tests read)."""
        return [[self.table.topLevelItem(i).text(c) for c in range(len(self.COLUMNS))]
                for i in range(self.table.topLevelItemCount())]

    def _row(self, case: CaseComparison) -> None:
        div = case.first_divergence
        item = QTreeWidgetItem(self.table, [_case_name(case.case), f"{case.passed_a}/{case.runs}", f"{case.passed_b}/{case.runs}",
                                            str(case.differing_turns), divergence_text(div) if div else "\u2014"])
        for column in (1, 2, 3):
            item.setTextAlignment(column, Qt.AlignmentFlag.AlignCenter)
        if case.passed_a != case.passed_b:
            item.setForeground(1 if case.passed_a > case.passed_b else 2, QBrush(SAME))
            item.setForeground(2 if case.passed_a > case.passed_b else 1, QBrush(DIFFERENT))
        item.setForeground(3, QBrush(DIFFERENT if case.differing_turns else DIM))
        if div is not None:
            item.setData(0, DIVERGENCE_ROLE, div)
            item.setForeground(4, QBrush(QColor("#7fb2e5")))
            tip = f"A: {_clip(div.text_a)}\nB: {_clip(div.text_b)}\n\nClick to open both prompts in the Turn Inspector."
            for column in range(len(self.COLUMNS)):
                item.setToolTip(column, tip)

    def _clicked(self, item: QTreeWidgetItem, _column: int = 0) -> None:
        div = item.data(0, DIVERGENCE_ROLE)
        if div is not None:
            self.divergence_opened.emit(div)

    def _link(self, _href: str) -> None:
        first = self.first_divergence()
        if first is not None:
            self.divergence_opened.emit(first)

    def clear(self) -> None:
        self.report = self.request = None
        self.table.clear()
        self.hide()
        self.closed.emit()


def _h(text: str) -> str:
    return html.escape(text)
