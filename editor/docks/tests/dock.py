"""The Tests dock: the suites beside the asset, their cases and, after a run, each turn's checks.

The suites are the ``*.suite.yaml`` files beside the asset that name it (``runtime.suites.file.suites_beside``),
read on a thread of their own (``SuiteRun.reading``: a large suite takes seconds to parse); the tree
shows them once read (``suites_listed``). Run all and Run selected read the files again first. A run goes through the window's ``SuiteRun`` (its own thread and model copy) on the graph as it is in
the editor, unsaved edits included; each case's turns appear as they finish. A suite file that
cannot be read is listed with its problems (file, line, case, field). A click on a turn sends its
record and checks out (``turn_opened``) for the Turn Inspector, a failed one with the same turn of
the case's last passing run (kept by the run: ``runtime.suites.kept``) and the asset edits since; a run's node and exit counts go out as
``coverage_changed`` for the canvas. The dock never imports another dock or the canvas.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import cast

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QDockWidget,
    QLabel,
    QMenu,
    QProgressBar,
    QSizePolicy,
    QSplitter,
    QToolButton,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from editor.dialogs.expectations import ExpectationsDialog
from editor.docks.tests.case_expectations import edit_case_expectations
from editor.docks.tests.red_team_panel import RedTeamPanel
from editor.docks.tests.results_tree import (
    FAIL_COLOUR,
    NODE_ROLE,
    ROLE,
    CaseKey,
    ResultsTree,
    SuiteEntry,
    turn_note,
)
from editor.model.document import Document
from editor.services.backend_choice import is_scripted_label
from editor.services.red_team_run import RedTeamRequest, RedTeamRun
from editor.services.suite_run import SuiteRun, TurnComparison, example_source
from editor.services.variant_compare import (
    VariantComparison,
    VariantPanel,
    VariantRequest,
    divergence_opening,
    pick_variant_file,
)
from editor.session.record import InspectedTurn, inspected_turn
from editor.widgets.flow_layout import wrapping_row
from runtime.asset.model import Asset
from runtime.suites.file import LoadedSuite, SuiteBeside
from runtime.suites.kept import asset_changes, blamed_node
from runtime.suites.redteam import Attempt, RedTeamReport
from runtime.suites.report import CaseResult, Coverage, Report, TurnOutcome
from runtime.suites.variants import VariantReport


class TestsDock(QDockWidget):
    __test__ = False  # not a pytest test class

    # InspectedTurn, label ("Test: case \u00b7 turn 2"), note (the checks), and for a failed turn a
    # TurnComparison with the same turn of the last passing run (else None: nothing to compare)
    turn_opened = Signal(object, str, str, object)
    node_clicked = Signal(str)  # a check's row names a node: the window selects and centres it
    coverage_changed = Signal(object)  # runtime.suites.report.Coverage of the last run, or None: clear it
    suites_listed = Signal()  # the tree shows the suite files beside the asset as they were just read

    def __init__(self, document: Document, run: SuiteRun, parent: QWidget | None = None) -> None:
        super().__init__("Tests", parent)
        self.setObjectName("TestsDock")
        self.document = document
        self.run = run
        self.entries: list[SuiteEntry] = []
        self.results: dict[CaseKey, CaseResult] = {}
        self.partial: dict[CaseKey, list[TurnOutcome]] = {}  # turns of the cases running, as they finish
        self._compared_only: set[CaseKey] = set()  # results a variant comparison gave (it keeps no prompts)
        self.running: set[CaseKey] = set()
        self.coverage: Coverage | None = None
        self._assets: dict[str, Asset] = {}  # suite file name -> the asset its cases last ran on
        self._red_team_asset: Asset | None = None  # the graph the last red-team run attacked
        self._path: str | None = None
        self._example = ""  # the shipped example the untitled document was opened from ("": none)
        self._stale = False  # the asset's path changed during a run: list its suites afterwards
        self._reading = False  # the suite files are being read (the tree shows the last listing)
        self._then: Callable[[], object] | None = None  # what to do once they are read (a run asked for)

        body = QWidget(self)
        layout = QVBoxLayout(body)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.setSpacing(3)
        tip = " on the graph as it is in the editor (unsaved edits included), on a model copy of its own"
        self.run_all_button = self._button("Run all", "Run every case of every suite" + tip, self.run_all)
        self.run_selected_button = self._button("Run selected", "Run the selected case (or every case of the "
                                                "selected suite)" + tip, self.run_selected)
        self.stop_button = self._button("Stop", "Stop the running turn; the cases not run yet are skipped", self.stop)
        self.refresh_button = self._button("Refresh", "Read the suite files beside the asset again", self.refresh)
        self.clear_coverage_button = self._button("Clear coverage", "Take the visit and exit counts off the canvas",
                                                  self.clear_coverage)
        self.edit_button = self._button("Edit expectations\u2026", "Edit the selected case's expectations in a form "
                                        "(the suite file keeps its comments and order)", self.edit_expectations)
        self.compare_button = QToolButton(self)
        self.compare_button.setText("Compare with variant\u2026")
        self.compare_button.setToolTip("Run the selected suite (else the first) on this asset (A) and a variant (B) "
                                       "with the same seeds: each case's passes on both, and where they first differ")
        self.compare_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        menu = QMenu(self.compare_button)
        menu.addAction("Another asset\u2026", lambda: self.compare_with_variant())
        self.compare_saved_action = menu.addAction("The saved version of this one (B: the unsaved edits)",
                                                   lambda: self.compare_with_variant(saved=True))
        menu.aboutToShow.connect(lambda: self.compare_saved_action.setEnabled(self.document.modified))
        self.compare_button.setMenu(menu)
        self.red_team_button = self._button("Red team", "Attack the asset as it is in the editor with the shipped "
                                            "attack pack and the selected suite's red_team settings (else the "
                                            "first suite's): per family how often an attack succeeded, the benign "
                                            "lines the guards flag, and the guards' latency", self.run_red_team)
        self.progress = QProgressBar(self)
        self.progress.setMaximumWidth(160)
        self.progress.setMaximumHeight(16)
        self.progress.setFormat("%v of %m cases")
        self.progress.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.progress.hide()
        # wraps in a narrow dock: in one row the buttons set a 384 px minimum width
        layout.addWidget(wrapping_row(self, [self.run_all_button, self.run_selected_button, self.stop_button,
                                             self.refresh_button, self.clear_coverage_button, self.edit_button,
                                             self.compare_button, self.red_team_button, self.progress]))
        self.status = QLabel(self)
        self.status.setWordWrap(True)  # a run's summary names the exits never taken: it may take two lines
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.status.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        layout.addWidget(self.status)

        self.tree = ResultsTree(self)
        self.case_items = self.tree.case_items  # each case's row, by (suite file name, case name)
        self.tree.itemClicked.connect(self._item_clicked)
        self.tree.itemActivated.connect(self._item_clicked)
        # A comparison with a variant (hidden until one runs): below the tree, in a splitter
        self.variants = VariantComparison(run)  # shut down with the run's service
        self.variant_panel = VariantPanel(self)
        self.variant_panel.divergence_opened.connect(self.open_divergence)
        self.variants.started.connect(self.variant_panel.running)
        self.variants.started.connect(self._comparison_started)
        self.variants.finished.connect(self.variant_panel.show_report)
        self.variants.failed.connect(self.variant_panel.failed)
        self.variants.finished.connect(self._compared)
        self.variants.busy_changed.connect(self._comparing)
        splitter = QSplitter(Qt.Orientation.Vertical, self)
        splitter.setChildrenCollapsible(False)
        splitter.addWidget(self.tree)
        splitter.addWidget(self.variant_panel)
        # A red-team run's report (hidden until one runs), below them
        self.red_team = RedTeamRun(run)  # shut down with the run's service
        self.red_team_panel = RedTeamPanel(self)
        self.red_team_panel.attack_opened.connect(self.open_attack)
        self.red_team.started.connect(lambda r: self.red_team_panel.running(r.label, r.suite.name))
        self.red_team.attempted.connect(self.red_team_panel.attempted)
        self.red_team.finished.connect(self._red_teamed)
        self.red_team.failed.connect(lambda _r, why: self.red_team_panel.failed(why))
        self.red_team.failed.connect(lambda _r, why: self.set_status(f"The red-team run stopped: {why}", error=True))
        self.red_team.busy_changed.connect(self._red_teaming)
        splitter.addWidget(self.red_team_panel)
        layout.addWidget(splitter, 1)
        self.setWidget(body)

        run.started.connect(self._started)
        run.turn_done.connect(self._turn_done)
        run.case_done.connect(self._case_done)
        run.finished.connect(self._finished)
        run.failed.connect(self._failed)
        run.busy_changed.connect(self._busy)
        run.reading.listed.connect(self._listed)
        # Bound methods, not lambdas: Qt drops a connection when its receiver is destroyed.
        document.path_changed.connect(self._path_changed)
        document.reset.connect(self._reset)
        document.node_renamed.connect(self._renamed)
        self.visibilityChanged.connect(self._shown)
        self._busy(False)
        self.refresh()

    def _button(self, text: str, tip: str, slot) -> QToolButton:
        button = QToolButton(self)
        button.setText(text)
        button.setToolTip(tip)
        button.clicked.connect(lambda _c=False: slot())
        return button

    def set_status(self, text: str, error: bool = False) -> None:
        self.status.setStyleSheet(f"color: {FAIL_COLOUR.name()};" if error else "")
        self.status.setText(text)
        self.status.setToolTip(text)

    # --- the suites beside the asset ----------------------------------------------------------

    @property
    def asset_path(self) -> str:
        """The file whose suites the dock lists and runs: the document's, else, for an example opened as
        an unsaved copy, the shipped example's ("": neither)."""
        return self.document.path or self._example

    def _path_changed(self, _path: str) -> None:
        self._example = ""  # saved to a file of its own, or another asset (whose reset finds its example)
        self.refresh()

    def _reset(self) -> None:
        """A whole new asset: when it is an unchanged copy of a file in the folder it was opened from (an
        example, opened untitled so saving never overwrites it), the suites beside that file are its."""
        doc = self.document
        self._example = "" if doc.path or doc.folder is None else example_source(doc.folder, doc.asset)
        self.refresh()
        if self._example:
            self.set_status(f"The suites that ship beside the example {Path(self._example).name}: runs test the "
                            "graph as it is here (an unsaved copy; Save As keeps it, the example stays as shipped).")

    def _shown(self, visible: bool) -> None:
        if visible:
            self.refresh()

    def _renamed(self, *_ids: str) -> None:
        # A rename rewrites the suites that name the node in the same undo step, after the node itself
        # (editor.model.rename): read them once that step is done.
        QTimer.singleShot(0, self, self.refresh)

    def refresh(self, *_changed: object) -> None:
        """Read the suites beside the document's file again, off the UI thread; the tree follows
        when they are read (``suites_listed``). Results of cases still there are kept."""
        if self.run.busy:
            self._stale = True
            return
        self._stale = False
        path = self.asset_path
        if path != self._path:  # another asset: nothing of the old one's runs applies
            self._path = path
            self.results.clear()
            self._compared_only.clear()
            self._assets.clear()
            self.entries = []
            self._then = None
            self.setWindowTitle("Tests")  # not "Tests (1 failed)" of the old asset's run
            self.set_status("")
            if self.coverage is not None:
                self.clear_coverage()  # its counts are not of the new asset's same-named nodes
        if not path:
            self._reading = False
            self._listed_now([])
            return
        self._reading = True
        if not self.entries:
            self._fill()  # "Reading…" until they are read
        # Checked against the graph as it is here, as the cases run on it: a renamed node's suites
        # name its new id before the asset is saved
        edited = self.document.asset.model_copy(deep=True) if self.document.modified else None
        self.run.reading.read(path, edited)

    def _listed(self, asset_path: str, found: object) -> None:
        if not self._reading or asset_path != self.asset_path:
            return  # read for an asset no longer open: the open one's read is asked for already
        self._reading = False
        entries: list[SuiteEntry] = []
        if isinstance(found, Exception):
            reason = found.strerror if isinstance(found, OSError) and found.strerror else found
            self.set_status(f"Could not look for suites beside {Path(asset_path).name}: {reason}", True)
        else:
            entries = [SuiteEntry(s.path, s.loaded, s.problems) for s in cast("list[SuiteBeside]", found)]
        self._listed_now(entries)

    def _listed_now(self, entries: list[SuiteEntry]) -> None:
        self.entries = entries
        known = {(e.name, c.name) for e in self.entries if e.loaded for c in e.loaded.suite.cases}
        self.results = {k: v for k, v in self.results.items() if k in known}
        self._fill()
        then, self._then = self._then, None
        self.suites_listed.emit()
        if then is not None:
            then()

    def _fill(self) -> None:
        placeholder = ""
        path = self.asset_path
        if not path:
            placeholder = "Save the asset to a file: its tests are the .suite.yaml files beside it that name it."
        elif self._reading and not self.entries:
            placeholder = f"Reading the test suites beside {Path(path).name}\u2026"
        elif not self.entries:
            stem = Path(path).stem
            placeholder = (f"No test suites beside {Path(path).name}. Save a conversation as a test "
                           f"case from the Conversation dock, or write {stem}.suite.yaml.")
        self.tree.fill(self.entries, placeholder, self.results, self._fill_case)

    def _entry(self, name: str) -> SuiteEntry | None:
        return next((e for e in self.entries if e.name == name), None)

    def _case_turns(self, key: CaseKey) -> list:
        entry = self._entry(key[0])
        case = next((c for c in entry.loaded.suite.cases if c.name == key[1]), None) if entry and entry.loaded else None
        return case.turns if case is not None else []

    def _fill_case(self, key: CaseKey) -> None:
        """A case's row and its turns, from its result (or, while it runs, the turns finished so far)."""
        self.tree.fill_case(key, self.results.get(key), self.partial.get(key, []), key in self.running,
                            len(self._case_turns(key)))

    def _show_suite_result(self, name: str) -> None:
        entry, item = self._entry(name), self.tree.suite_item(name)
        if entry is not None and item is not None:
            self.tree.show_suite_result(item, entry, self.results)

    # --- running --------------------------------------------------------------------------------

    def selected_cases(self) -> list[CaseKey]:
        """The cases the selection names: a case, the case of a turn or check, or every case of a suite."""
        item = self.tree.currentItem()
        data = item.data(0, ROLE) if item is not None else None
        if not data:
            return []
        if data[0] == "suite":
            entry = self._entry(data[1])
            return [(entry.name, c.name) for c in entry.loaded.suite.cases] if entry and entry.loaded else []
        return [(data[1], data[2])]

    def run_all(self) -> bool:
        """Read the suite files again, then run every case (on the worker thread). False when
        nothing can run now; True when the run starts once the files are read."""
        if self.run.busy:
            self.set_status("A run is going on: stop it first.")
            return False
        if not self.asset_path:
            self.set_status("Nothing to run: save the asset to a file, and write its test suites beside it.")
            return False
        self._then = self._run_all_listed
        self.refresh()  # the files as they are now
        return True

    def _run_all_listed(self) -> None:
        keys = [(e.name, c.name) for e in self.entries if e.loaded for c in e.loaded.suite.cases]
        if not keys:
            self.set_status("Nothing to run: no suite beside the asset could be read." if self.entries
                            else "Nothing to run: there are no test suites beside the asset.", error=bool(self.entries))
            return
        self.run_cases(keys)

    def run_selected(self) -> bool:
        """Read the suite files again, then run the selected cases; False when none is selected."""
        keys = self.selected_cases()
        if not keys:
            self.set_status("Select a case (or a suite) to run.")
            return False
        if self.run.busy:
            self.set_status("A run is going on: stop it first.")
            return False
        self._then = lambda: self.run_cases(keys)
        self.refresh()  # the files as they are now
        return True

    def run_cases(self, keys: list[CaseKey]) -> bool:
        """Run these cases (suite file name, case name) on the worker thread; False if none can run now."""
        if self.run.busy:
            self.set_status("A run is going on: stop it first.")
            return False
        wanted = set(keys)
        loaded = []
        for entry in self.entries:
            if entry.loaded is None:
                continue
            cases = [c for c in entry.loaded.suite.cases if (entry.name, c.name) in wanted]
            if cases:
                asset = self._asset_for(entry.loaded)
                self._assets[entry.name] = asset
                loaded.append(dataclasses.replace(
                    entry.loaded, suite=entry.loaded.suite.model_copy(update={"cases": cases}), asset=asset))
        if not loaded:
            self.set_status("Those cases are not in the suite files any more: Refresh.", error=True)
            return False
        ran = {(s.name, c.name) for s in loaded for c in s.suite.cases}
        for key in ran:
            self.results.pop(key, None)
            self._compared_only.discard(key)
            self.partial[key] = []
        self.running = set(ran)
        asset_dir = str(self.document.asset_dir) if self.document.asset_dir else ""
        if not self.run.start(loaded, asset_dir):
            self.running.clear()
            self.set_status("Could not start the run (is one going on?).", error=True)
            return False
        for key in ran:
            self._fill_case(key)
        for entry in self.entries:
            self._show_suite_result(entry.name)
        return True

    def _asset_for(self, loaded: LoadedSuite) -> Asset:
        """What a suite's cases run on: the document's graph when the suite tests the open file (so
        unsaved edits are tested), else the file's."""
        doc = self.document
        path = self.asset_path
        if path and (loaded.path.parent / loaded.suite.asset).resolve() == Path(path).resolve():
            asset = doc.asset.model_copy(deep=True)
            if loaded.suite.model:
                asset = asset.model_copy(update={"default_model": loaded.suite.model})
            return asset
        return loaded.asset

    def stop(self) -> None:
        self.variants.stop()
        self.red_team.stop()
        if self.run.busy:
            self.run.stop()
            self.set_status("Stopping\u2026 the running turn ends within a moment; the other cases are skipped.")

    def _busy(self, busy: bool) -> None:
        self.run_all_button.setEnabled(not busy)
        self.run_selected_button.setEnabled(not busy)
        self.refresh_button.setEnabled(not busy)
        self.stop_button.setEnabled(busy or self.variants.busy or self.red_team.busy)

    def _started(self, count: int) -> None:
        self.progress.setRange(0, count)
        self.progress.setValue(0)
        self.progress.show()
        self.set_status(f"Running {count} case{'s' if count != 1 else ''}\u2026")

    def _turn_done(self, case_id: str, outcome: TurnOutcome) -> None:
        suite, _sep, case = case_id.partition("::")
        key = (suite, case)
        self.partial.setdefault(key, []).append(outcome)
        self._fill_case(key)
        self.set_status(f"Running \u201c{case}\u201d: turn {outcome.number} "
                        f"{'passed' if outcome.passed else 'failed'}\u2026")

    def _case_done(self, result: CaseResult) -> None:
        key = (result.suite, result.case)
        self.results[key] = result
        self.partial.pop(key, None)
        self.running.discard(key)
        self._fill_case(key)
        self.progress.setValue(self.progress.value() + 1)
        self._show_suite_result(result.suite)

    def _finished(self, report: Report) -> None:
        self._end_run()
        results = report.results
        failed = sum(not r.passed for r in results)
        text = f"{len(results) - failed} passed, {failed} failed in {report.seconds:.1f} s"
        where = {r.server for r in results if r.server}
        if len(where) == 1:
            label = where.pop()
            text += f" on {label}" + (": canned replies, no model, so this checks the wiring, not the wording"
                                      if is_scripted_label(label) else "")
        if self.run.stopping:
            skipped = sum(r.error == "stopped" for r in results)
            text = f"Stopped: {text}" + (f" ({skipped} not run)" if skipped else "")
        ran = [r for r in results if r.turns]
        asset = self._assets.get(ran[0].suite) if ran else None
        if asset is not None:
            coverage = Coverage(asset)
            for r in ran:
                coverage.add(r)
            self.coverage = coverage
            never = [f"{node}.{port}" for node, port in coverage.never_taken]
            text += f" \u00b7 coverage {coverage.percent:.0f} %"
            if never:
                text += f" \u00b7 never taken: {', '.join(never)}"
            self.coverage_changed.emit(coverage)
        self.set_status(text, error=bool(failed))
        self.setWindowTitle(f"Tests ({failed} failed)" if failed else "Tests")
        if self._stale:
            self.refresh()

    def _failed(self, message: str) -> None:
        self._end_run()
        self.set_status(f"The run stopped: {message}", error=True)
        for key in list(self.partial):
            self._fill_case(key)
        if self._stale:
            self.refresh()

    def _end_run(self) -> None:
        self.progress.hide()
        running, self.running = self.running, set()
        self.partial.clear()
        for key in running:
            self._fill_case(key)

    def clear_coverage(self) -> None:
        self.coverage = None
        self.coverage_changed.emit(None)

    # --- editing a case's expectations ---------------------------------------------------------

    def edit_expectations(self) -> ExpectationsDialog | None:
        """Open the selected case's expectations in a form (not modal: the dock stays usable); OK
        writes them to its suite file, keeping the file's comments and order, and lists it again."""
        keys = self.selected_cases()
        entry = self._entry(keys[0][0]) if len(keys) == 1 else None
        case = next((c for c in entry.loaded.suite.cases if c.name == keys[0][1]), None) \
            if entry is not None and entry.loaded is not None else None
        if case is None:
            self.set_status("Select one case (or one of its turns) to edit its expectations.")
            return None
        if not self.document.path and self._example:
            self.set_status("This suite ships with the example, which stays as shipped: save the asset (Save As) "
                            "and write its suite beside it to edit expectations.")
            return None
        return edit_case_expectations(entry, case, self, self.set_status, self.refresh)  # type: ignore[arg-type]

    # --- opening a turn in the Turn Inspector ---------------------------------------------------

    def outcome(self, suite: str, case: str, number: int) -> TurnOutcome | None:
        result = self.results.get((suite, case))
        turns = result.turns if result is not None else self.partial.get((suite, case), [])
        return next((t for t in turns if t.number == number), None)

    def open_turn(self, suite: str, case: str, number: int) -> bool:
        """Send a turn's record and its checks out for the Turn Inspector; False when it has no record."""
        outcome = self.outcome(suite, case, number)
        if outcome is None:
            return False
        result = outcome.result
        if result is None or result.diagnostics is None:
            why = outcome.error or ("it ran in the variant comparison, which keeps only where A and B part: "
                                    "run the case to see its prompts" if (suite, case) in self._compared_only
                                    else "the asset turns diagnostics off")
            self.set_status(f"Turn {number} of \u201c{case}\u201d has no prompts to show: {why}", error=True)
            return False
        asset = self._assets.get(suite) or self._entry(suite).loaded.asset  # type: ignore[union-attr]
        comparison = None if outcome.passed else self.comparison(suite, case, number, outcome, asset)
        self.turn_opened.emit(inspected_turn(result, asset), f"Test: {case} \u00b7 turn {number}", turn_note(outcome),
                              comparison)
        return True

    def comparison(self, suite: str, case: str, number: int, outcome: TurnOutcome, asset: Asset) -> TurnComparison:
        """A failed turn against the same turn of the case's last passing run (kept by the run), with
        the node whose expectation failed and the asset edits since that run."""
        focus = blamed_node(outcome.checks)
        entry = self._entry(suite)
        passing = self.run.kept.last_passing(entry.path, case) if entry is not None else None
        if passing is None:
            return TurnComparison(None, "", focus, [], "this case has not passed yet, so there is no passing run "
                                  "to compare with")
        changes = asset_changes(passing.asset, asset)
        turn = passing.turn(number)
        if turn is None or turn.diagnostics is None:
            return TurnComparison(None, "", focus, changes, f"the last passing run has no prompts for turn {number}")
        when = datetime.fromisoformat(passing.when).astimezone().strftime("%d %b %H:%M")
        record = InspectedTurn(turn.diagnostics, passing.asset, parts=turn.parts, context_sizes=turn.context_sizes)
        return TurnComparison(record, f"Test: {case} \u00b7 turn {number} \u00b7 passed {when}", focus, changes)

    def _item_clicked(self, item: QTreeWidgetItem, _column: int = 0) -> None:
        data = item.data(0, ROLE)
        if data and data[0] == "turn":
            self.open_turn(data[1], data[2], data[3])
        node_id = item.data(0, NODE_ROLE)
        if node_id:
            self.node_clicked.emit(node_id)


    # --- comparing with a variant ---------------------------------------------------------------

    def compare_with_variant(self, saved: bool = False, variant: str = "") -> bool:
        """Run the selected suite (else the first) on A and B with the same seeds, on the comparison's
        thread: A the document as it is in the editor (unsaved edits included), B ``variant``, else a file
        picked in a dialog; with ``saved``, A the saved file and B the document. False when nothing runs."""
        entry = self._entry(self.selected_cases()[0][0]) if self.selected_cases() else None
        entry = entry or next((e for e in self.entries if e.loaded is not None), None)
        if entry is None or not self.asset_path:
            self.set_status("Nothing to compare: save the asset, and write a test suite beside it.")
            return False
        if self.variants.busy:
            self.set_status("A comparison is going on.")
            return False
        name = Path(self.asset_path).name
        if saved:
            if not self.document.modified:
                self.set_status(f"{name} has no unsaved edits: the saved version is the same.")
                return False
            request = VariantRequest(entry.path, self.document.asset.model_copy(deep=True), f"{name} as saved",
                                     f"{name} with the unsaved edits")
        else:
            variant = variant or pick_variant_file(self, str(Path(self.asset_path).parent))
            if not variant:
                return False
            request = VariantRequest(entry.path, Path(variant), name + (" (unsaved edits)" if self.document.modified
                                     else ""), Path(variant).name, self.document.asset.model_copy(deep=True))
        asset_dir = str(self.document.asset_dir) if self.document.asset_dir else ""
        if not self.variants.start(request, self.run._maker(asset_dir)):
            self.set_status("Could not start the comparison.", error=True)
            return False
        self.set_status(f"Comparing {request.label_a} with {request.label_b} on {entry.name}\u2026")
        return True

    def _comparing(self, busy: bool) -> None:
        self.compare_button.setEnabled(not busy)
        self.stop_button.setEnabled(busy or self.run.busy)

    def _comparison_started(self, request: VariantRequest) -> None:
        """The comparison runs the suite again: the tree no longer shows the results of the run before."""
        stale = [key for key in self.results if key[0] == request.suite.name]
        for key in stale:
            del self.results[key]
            self._compared_only.discard(key)
            self._fill_case(key)
        self._show_suite_result(request.suite.name)
        failed = sum(not r.passed for r in self.results.values())
        self.setWindowTitle(f"Tests ({failed} failed)" if failed else "Tests")

    def _compared(self, request: VariantRequest, report: VariantReport) -> None:
        # The tree shows the side that is the graph as it is in the editor: B when comparing with the
        # saved version (B is the unsaved edits), else A.
        side = "B" if isinstance(request.variant, Asset) else "A"
        shown = report.reports.get(side)
        name = request.suite.name
        if shown is not None and self._entry(name) is not None:
            for result in shown.results:
                key = (result.suite, result.case)
                if key[0] == name and key[1] in {c for s, c in self._cases_of(name)}:
                    self.results[key] = result
                    self._compared_only.add(key)
                    self._fill_case(key)
            self._show_suite_result(name)
            failed = sum(not r.passed for r in self.results.values())
            self.setWindowTitle(f"Tests ({failed} failed)" if failed else "Tests")
        self.set_status(f"Compared {request.label_a} (A) with {request.label_b} (B) on {request.suite.name}: "
                        f"the table is below; the tree shows {side}'s results.")

    def _cases_of(self, name: str) -> list[CaseKey]:
        entry = self._entry(name)
        return [(name, c.name) for c in entry.loaded.suite.cases] if entry is not None and entry.loaded else []

    def open_divergence(self, divergence: object) -> None:
        """Both prompts of a divergence side by side in the Turn Inspector (B's turn against A's)."""
        request = self.variant_panel.request
        if request is not None:
            self.turn_opened.emit(*divergence_opening(divergence, request))  # type: ignore[arg-type]

    # --- red-team runs ----------------------------------------------------------------------------

    def run_red_team(self) -> bool:
        """Attack the document's graph (unsaved edits included) with the red_team settings of the
        selected suite, else of the first suite that has them, else of the first suite (the defaults),
        on the red-team run's thread. False when nothing runs."""
        loaded = [e for e in self.entries if e.loaded is not None]
        selected = self._entry(self.selected_cases()[0][0]) if self.selected_cases() else None
        entry = (selected if selected is not None and selected.loaded is not None else None) or next(
            (e for e in loaded if e.loaded.suite.red_team is not None), None) or (loaded[0] if loaded else None)
        if entry is None or not self.asset_path:
            self.set_status("Nothing to attack: save the asset, and write a test suite beside it (its red_team "
                            "section says which attacks, secrets and benign lines).")
            return False
        if self.red_team.busy:
            self.set_status("A red-team run is going on.")
            return False
        asset_dir = str(self.document.asset_dir) if self.document.asset_dir else ""
        name = Path(self.asset_path).name + (" (unsaved edits)" if self.document.modified else "")
        request = RedTeamRequest(entry.path, self.document.asset.model_copy(deep=True), asset_dir, name)
        if not self.red_team.start(request, self.run._maker(asset_dir)):
            self.set_status("Could not start the red-team run.", error=True)
            return False
        self._red_team_asset = request.asset
        self.set_status(f"Red team: attacking {name} with the settings of {entry.name}\u2026")
        return True

    def _red_teaming(self, busy: bool) -> None:
        self.red_team_button.setEnabled(not busy)
        self.stop_button.setEnabled(busy or self.run.busy or self.variants.busy)

    def _red_teamed(self, request: RedTeamRequest, report: RedTeamReport) -> None:
        self.red_team_panel.show_report(report, request.stopped)
        over = report.over_threshold()
        self.set_status(f"Red team on {request.label}: {len(report.successes)} of {len(report.attempts)} attacks "
                        f"succeeded" + (f"; {'; '.join(over)}" if over else "; every rate within its threshold"),
                        error=bool(over))

    def open_attack(self, attempt: Attempt) -> bool:
        """Send a successful attack's turn out for the Turn Inspector; False when it has no prompts."""
        result = attempt.result
        if result is None or result.diagnostics is None:
            self.set_status("This attack's turn has no prompts to show: the asset turns diagnostics off.", error=True)
            return False
        asset = self._red_team_asset or self.document.asset
        note = f"\u2717 the attack succeeded: {', '.join(attempt.how)}\nline: {attempt.line}"
        if attempt.game_content:
            note += f"\ngame content: {attempt.game_content}"
        self.turn_opened.emit(inspected_turn(result, asset), f"Red team: {attempt.family} #{attempt.index + 1}",
                              note, None)
        return True
