"""The Turn Inspector dock: a turn's path through the graph and, per node, its Prompt & output."""

from __future__ import annotations

import html
from collections.abc import Callable

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QComboBox,
    QDockWidget,
    QHBoxLayout,
    QLabel,
    QScrollArea,
    QSplitter,
    QTabWidget,
    QTextBrowser,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from editor.docks.turn_inspector.budget_bar import BudgetBar, BudgetShares
from editor.docks.turn_inspector.changes_list import ChangesList, with_asset_now
from editor.docks.turn_inspector.node_text import STYLE, html_text, prompt_html, stats_html
from editor.docks.turn_inspector.scene_turns import SceneTurns
from editor.docks.turn_inspector.side_by_side import FIRST_DIFFERENCE, rows_of, side_by_side_html
from editor.services.backend_choice import EMBEDDED_LABEL
from editor.services.suite_run import TurnComparison
from editor.session.record import SNAPSHOT_MEANING, InspectedTurn
from editor.session.scene_view import LineKey, SceneShown, SceneView
from editor.session.view import SessionView
from runtime.backends.base import Reproducibility
from runtime.diagnostics import NodeDiagnostics
from runtime.names import NAMESPACE_SEP
from runtime.nodes import NODE_TYPES, node_model
from runtime.prompting.prompt import budget_segments

# Turns from elsewhere (test runs) kept in the turn picker, newest last
EXTERNAL_KEPT = 20

# The canvas's path marking (``Canvas.highlight_path``), passed in so the dock never imports the canvas.
PathHighlighter = Callable[[list[str]], None]

class TurnInspectorDock(QDockWidget):
    node_clicked = Signal(str)  # a node of the path: the window selects and centres it on the canvas

    def __init__(self, view: SessionView, highlight_path: PathHighlighter | None = None,
                 parent: QWidget | None = None, scene: SceneView | None = None) -> None:  # scene: a scene's turns too
        super().__init__("Turn Inspector", parent)
        self.view = view
        self.scene = scene
        self.highlight_path = highlight_path  # marks a turn's path on the canvas
        body = QWidget(self)
        layout = QVBoxLayout(body)
        layout.setContentsMargins(4, 4, 4, 4)

        top = QHBoxLayout()
        top.addWidget(QLabel("Turn"))
        self.turn_picker = QComboBox(self)
        # Bounded by a length, not by the longest turn's label: the dock stays under 360 px wide
        self.turn_picker.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.turn_picker.setMinimumContentsLength(6)
        top.addWidget(self.turn_picker, 1)
        top.addWidget(QLabel("Compare with"))
        self.compare_picker = QComboBox(self)
        self.compare_picker.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.compare_picker.setMinimumContentsLength(6)
        self.compare_picker.setToolTip("Pick a second turn to see what changed in the selected node's prompt")
        top.addWidget(self.compare_picker, 1)
        layout.addLayout(top)

        # A turn from elsewhere (a test run): what it was expected to do, above its path
        self.note_label = QLabel(self)
        self.note_label.setObjectName("expectation")
        self.note_label.setWordWrap(True)
        self.note_label.setTextFormat(Qt.TextFormat.RichText)
        self.note_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.note_label.setStyleSheet("QLabel#expectation { background: #2f2a22; color: #dddddd; border-left: 3px solid #e5c07b;"
                                      " padding: 3px 6px; }")
        self.note_label.hide()
        layout.addWidget(self.note_label)
        self.external: dict[str, tuple[InspectedTurn, str]] = {}  # label -> a record not of this conversation, note
        self.comparisons: dict[str, TurnComparison] = {}  # a failed test turn's label -> its last passing run
        self.scene_turns = SceneTurns()  # a scene's NPC lines, turns from elsewhere too

        summary = QHBoxLayout()
        self.path_label = QLabel(self)
        self.path_label.setWordWrap(True)
        self.path_label.setTextFormat(Qt.TextFormat.RichText)
        self.path_label.linkActivated.connect(self.show_node)
        self.path_label.linkActivated.connect(self.node_clicked)
        summary.addWidget(self.path_label, 1)
        # What the embedded backend's cache snapshots held after the turn (its RAM use, against the budget)
        self.snapshots_label = QLabel(self)
        self.snapshots_label.setObjectName("snapshots")
        self.snapshots_label.setStyleSheet("QLabel#snapshots { color: #9a9a9a; }")
        self.snapshots_label.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignTop)
        summary.addWidget(self.snapshots_label)
        layout.addLayout(summary)
        # The backend that ran the turn does not promise the same reply again: say so before a replay does
        self.repro_label = QLabel(self)
        self.repro_label.setObjectName("reproducibility")
        self.repro_label.setWordWrap(True)
        self.repro_label.setStyleSheet("QLabel#reproducibility { color: #e5c07b; }")
        self.repro_label.hide()
        layout.addWidget(self.repro_label)

        splitter = QSplitter(Qt.Orientation.Horizontal, self)
        # The nodes that ran, in order; a behaviour's nodes (guard/classify) nested under the Subgraph
        # node that ran them (guard)
        self.node_list = QTreeWidget(splitter)
        self.node_list.setHeaderHidden(True)
        self.node_list.setIndentation(12)
        self.node_list.setMaximumWidth(180)
        self._build_node_details(splitter)
        splitter.setStretchFactor(0, 0)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([180, 10_000])  # the node list at its width, the prompt and the Diff take the rest
        layout.addWidget(splitter, 1)
        self.setWidget(body)

        self.turn_picker.currentIndexChanged.connect(self._turn_picked)
        self.compare_picker.currentIndexChanged.connect(lambda _i: self._show_diff())
        self.node_list.currentItemChanged.connect(lambda *_items: self._show_node_details())
        # Bound methods, not lambdas: Qt drops a connection when its receiver is destroyed.
        view.turn_finished.connect(self.refresh)
        view.history_changed.connect(self.refresh)
        view.restarted.connect(self.refresh)
        view.turn_selected.connect(self.pick_turn)
        document = getattr(view.actions, "document", None)
        if document is not None:  # every edit, undo and redo: the edits list's "Now" column is the asset now
            document.undo_stack.indexChanged.connect(self._asset_edited)
        if scene is not None:
            scene.opened.connect(self._show_scene)
            scene.changed.connect(self._show_scene)
            scene.line_selected.connect(self.pick_scene_line)
        self.refresh()

    def _build_node_details(self, splitter: QSplitter) -> None:
        """The selected node's budget bar and figures above its Prompt & output and Diff tabs."""
        # The node's figures above its prompt, in a splitter: the figures scroll within their share,
        # so the Prompt and Diff views keep the room (they showed about 2 lines in a short dock)
        details = self.details = QSplitter(Qt.Orientation.Vertical, splitter)
        details.setChildrenCollapsible(False)
        head = QWidget(details)
        d = QVBoxLayout(head)
        d.setContentsMargins(0, 0, 0, 0)
        self.budget_bar = BudgetBar(head)
        d.addWidget(self.budget_bar)
        self.stats = QLabel(head)
        self.stats.setWordWrap(True)
        self.stats.setTextFormat(Qt.TextFormat.RichText)
        self.stats.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.stats.setAlignment(Qt.AlignmentFlag.AlignTop)
        stats_scroll = QScrollArea(head)
        stats_scroll.setWidgetResizable(True)
        stats_scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        stats_scroll.setWidget(self.stats)
        stats_scroll.setMinimumHeight(36)
        d.addWidget(stats_scroll, 1)
        self.tabs = QTabWidget(details)
        self.tabs.setMinimumHeight(160)
        self.prompt_view = QTextBrowser(self.tabs)
        self.prompt_view.document().setDefaultStyleSheet(STYLE)
        diff_page = QWidget(self.tabs)
        page = QVBoxLayout(diff_page)
        page.setContentsMargins(0, 0, 0, 0)
        page.setSpacing(2)
        # What changed in the asset between a test turn's last passing run and this run, field by field
        self.changes_list = ChangesList(diff_page)
        self.changes_list.itemClicked.connect(self._change_clicked)
        page.addWidget(self.changes_list)
        self.diff_view = QTextBrowser(diff_page)
        self.diff_view.document().setDefaultStyleSheet(STYLE)
        page.addWidget(self.diff_view, 1)
        self.diff_page = diff_page
        self.tabs.addTab(self.prompt_view, "Prompt && output")
        self.tabs.addTab(diff_page, "Diff")
        details.setStretchFactor(0, 1)
        details.setStretchFactor(1, 5)
        details.setSizes([90, 600])

    # --- turns ------------------------------------------------------------------------------

    @property
    def record(self) -> InspectedTurn | None:
        turn_id = self.turn_picker.currentData()
        if isinstance(turn_id, str):
            return self.external[turn_id][0] if turn_id in self.external else None
        return self.view.records.get(turn_id) if turn_id is not None else None

    def show_external(self, record: InspectedTurn, label: str, note: str = "",
                      comparison: TurnComparison | None = None) -> None:
        """Show a turn that is not of the live conversation (a test run's), picked under ``label``, with
        ``note`` (what it was expected to do; lines starting with \u2717 failed) above its path.

        It opens in a fresh comparison: with ``comparison`` (a failed turn), on the node whose
        expectation failed, in the Diff against the same turn of the last passing run, scrolled to the
        first prompt part that differs, the asset edits since that run listed; else compared with nothing."""
        for key in (label, comparison.against_label if comparison is not None else None):
            self.external.pop(key, None)  # type: ignore[arg-type]
        if comparison is not None and comparison.against is not None:
            self.external[comparison.against_label] = (comparison.against, "The last run of this case that passed.")
        self.external[label] = (record, note)
        self.comparisons.pop(label, None)
        if comparison is not None:
            self.comparisons[label] = comparison
        while len(self.external) - len(self.scene_turns.npcs) > EXTERNAL_KEPT:
            gone = next(label for label in self.external if label not in self.scene_turns.npcs)
            del self.external[gone]
            self.comparisons.pop(gone, None)
        self.refresh()
        self.compare_picker.blockSignals(True)
        against = comparison.against_label if comparison is not None and comparison.against is not None else None
        self.compare_picker.setCurrentIndex(max(0, self.compare_picker.findData(against)) if against else 0)
        self.compare_picker.blockSignals(False)
        self.turn_picker.setCurrentIndex(self.turn_picker.findData(label))
        self._turn_picked()  # the compare pick changed even when the turn did not
        if comparison is not None:
            if comparison.focus:
                self.show_node(comparison.focus)
            self.tabs.setCurrentWidget(self.diff_page)
            self.diff_view.scrollToAnchor(FIRST_DIFFERENCE)

    def forget_external(self) -> None:
        """Drop the turns from elsewhere (another asset's test runs), but a scene's (its NPCs take turns on the canvas)."""
        if gone := [label for label in self.external if label not in self.scene_turns.npcs]:
            self.external = {label: kept for label, kept in self.external.items() if label not in gone}
            self.comparisons.clear()
            self.refresh()

    # --- a scene's turns ------------------------------------------------------------------------

    def _show_scene(self, shown: SceneShown) -> None:
        """Each NPC line of the scene as a turn to pick, as that NPC saw it (``SceneTurns``)."""
        self.scene_turns.fill(shown, self.external)
        self.refresh()
        if self.scene is not None and self.scene.selected is not None:
            self.pick_scene_line(self.scene.selected)

    def pick_scene_line(self, key: LineKey) -> None:
        """Show the scene line ``key``'s turn (an NPC's)."""
        index = self.turn_picker.findData(self.scene_turns.labels.get(key, None))
        if index >= 0 and index != self.turn_picker.currentIndex():
            self.turn_picker.setCurrentIndex(index)

    def shown_scene_npc(self) -> str:
        """The NPC whose scene turn is shown ("" when the turn shown is not a scene's)."""
        label = self.turn_picker.currentData()
        return self.scene_turns.npcs.get(label, "") if isinstance(label, str) else ""

    def _path(self) -> list[int]:
        tree = self.view.saved.tree
        return tree.path() if tree is not None else []

    def refresh(self, *_changed: object) -> None:
        """Fill the pickers: the turns of the current branch, and to compare with, those and every other
        turn recorded (a turn's alternatives first), keeping the picked ones."""
        records = self.view.records
        current = self.turn_picker.currentData()
        keep = current if isinstance(current, str) and current in self.external else self.view.selected_turn
        compare = self.compare_picker.currentData()
        for picker in (self.turn_picker, self.compare_picker):
            picker.blockSignals(True)
            picker.clear()
        self.compare_picker.addItem("\u2014", None)
        path = self._path()
        tree = self.view.saved.tree
        for index, turn_id in enumerate(path):
            if turn_id in records:
                text = _turn_label(index, records[turn_id].diagnostics.player)
                self.turn_picker.addItem(text, turn_id)
        live = self.turn_picker.count()
        for label in self.external:
            self.turn_picker.addItem(label, label)
            self.compare_picker.addItem(label, label)  # test-run turns compare too
        for index, turn_id in enumerate(path):
            alternatives = tree.alternatives(turn_id) if tree is not None else [turn_id]
            for at, other in enumerate(alternatives):
                if other in records:
                    suffix = f" (alternative {at + 1}/{len(alternatives)})" if len(alternatives) > 1 else ""
                    self.compare_picker.addItem(_turn_label(index, records[other].diagnostics.player, suffix), other)
        shown = {self.compare_picker.itemData(i) for i in range(self.compare_picker.count())}
        for turn_id in sorted(set(records) - shown):
            record = records[turn_id]
            self.compare_picker.addItem(_branch_label(tree, turn_id, record), turn_id)
            self.compare_picker.setItemData(self.compare_picker.count() - 1, record.diagnostics.player,
                                            Qt.ItemDataRole.ToolTipRole)
        for picker, value in ((self.turn_picker, keep), (self.compare_picker, compare)):
            index = picker.findData(value)
            fallback = (live - 1 if live else picker.count() - 1) if picker is self.turn_picker else 0
            picker.setCurrentIndex(index if index >= 0 else fallback)
            picker.blockSignals(False)
        self._turn_picked()

    def pick_turn(self, turn: int) -> None:
        index = self.turn_picker.findData(turn)
        if index >= 0 and index != self.turn_picker.currentIndex():
            self.turn_picker.setCurrentIndex(index)

    def _turn_picked(self) -> None:
        record = self.record
        current_node = self.current_node_id()
        self.node_list.blockSignals(True)
        self.node_list.clear()
        self._show_note()
        self._show_reproducibility(record)
        if record is None:
            self.path_label.setText("<i>No turn yet: say something in the Conversation dock.</i>")
            self.node_list.blockSignals(False)
            self._show_node_details()
            self._highlight([])
            return
        picked = self.turn_picker.currentData()
        if not isinstance(picked, str):
            self.view.select_turn(record.turn_id)
        elif self.scene is not None and picked in self.scene_turns.npcs:
            self.scene.select_line(self.scene_turns.key_of(picked))
        d = record.diagnostics
        links = " \u2192 ".join(f"<a href='{html.escape(n)}' style='color:#7fb2e5'>{html.escape(n)}</a>" for n in d.path)
        warn = warnings_html(d.warnings, d.path)
        # where the turn ran, when not on this computer (reuse and timings are that server's); a turn
        # followed on `parley serve` ran there whatever backend its diagnostics name
        external = isinstance(self.turn_picker.currentData(), str)  # a test run's: its ids are not ours
        ran_on = (not external and self.view.backend_of(record.turn_id)) or d.backend
        remote = ran_on and ran_on != EMBEDDED_LABEL
        where = f" \u00b7 on {html.escape(ran_on)}" if remote else ""
        self.path_label.setText(f"<b>Path:</b> {links} \u2192 END &nbsp; <span style='color:#9a9a9a'>"
                                f"{d.total_ms:.0f} ms{where}</span>{warn}")
        rows = self._fill_node_tree(d.nodes)
        row = next((i for i, n in enumerate(d.nodes) if n.node == current_node), self._replying_row(record))
        if rows:
            self.node_list.setCurrentItem(rows[min(row, len(rows) - 1)])
        self.node_list.blockSignals(False)
        self._show_node_details()
        self._highlight(d.path)

    def _show_reproducibility(self, record: InspectedTurn | None) -> None:
        """The turn's "not reproducible" line (hidden when its backend is exact, or not known) and its
        backend's snapshot use."""
        repro = record.reproducibility if record is not None else None
        if repro is not None and not repro.exact:
            self.repro_label.setText(not_reproducible_text(record))  # type: ignore[arg-type]
            self.repro_label.setToolTip(repro.note)
            self.repro_label.show()
        else:
            self.repro_label.hide()
            self.repro_label.setToolTip("")
        use = record.snapshots if record is not None else None
        self.snapshots_label.setVisible(use is not None)
        self.snapshots_label.setText(use.text if use is not None else "")
        self.snapshots_label.setToolTip(f"After this turn: {use.detail} {SNAPSHOT_MEANING} Backend \u2192 Cache "
                                        "Snapshot Budget sets the budget." if use is not None else "")

    def _show_note(self) -> None:
        label = self.turn_picker.currentData()
        if not isinstance(label, str) or label not in self.external:
            self.note_label.hide()
            return
        note = self.external[label][1].splitlines()
        passed = [line for line in note if line.startswith("\u2713")]
        lines = []
        for line in note:
            if line in passed and len(passed) > 1 and any(not n.startswith("\u2713") for n in note):
                continue  # beside a failure the passed checks fold to one line: the Diff below needs the room
            colour = "#ff8a7a" if line.startswith("\u2717") else "#8fd18f" if line.startswith("\u2713") else "#dddddd"
            lines.append(f"<span style='color:{colour}'>{html_text(line)}</span>")
        if len(lines) < len(note):
            kinds = ", ".join(dict.fromkeys(line[2:].split(":", 1)[0] for line in passed))
            lines.append(f"<span style='color:#8fd18f'>\u2713 {len(passed)} more passed ({html_text(kinds)}): hover to "
                         "see them</span>")
        comparison = self.comparisons.get(label)
        heading = comparison.note_heading if comparison is not None else self.scene_turns.headings.get(label, "expected")
        self.note_label.setText(f"<b>{html_text(label)}</b> \u00b7 {html_text(heading)}:<br/>" + "<br/>".join(lines))
        self.note_label.setToolTip("\n".join(note))
        self.note_label.show()

    def _fill_node_tree(self, nodes: list[NodeDiagnostics]) -> list[QTreeWidgetItem]:
        """One row per node run, in order (returned so); a behaviour's node (``guard/classify``) under
        the row of the Subgraph node that ran it (``guard``), nested behaviours deeper."""
        rows: list[QTreeWidgetItem] = []
        latest: dict[str, QTreeWidgetItem] = {}  # node id -> its latest row (a node may run twice)

        def parent_of(node_id: str) -> QTreeWidgetItem | None:
            owner, _sep, _name = node_id.rpartition(NAMESPACE_SEP)
            if not owner:
                return None
            if owner not in latest:  # its Subgraph node has no row of its own: a row to hold it
                holder = QTreeWidgetItem([owner])
                holder.setData(0, Qt.ItemDataRole.UserRole, owner)
                self._add_row(holder, parent_of(owner))
                latest[owner] = holder
            return latest[owner]

        for diag in nodes:
            bypassed = " \u00b7 bypassed" if diag.bypassed else ""  # passed along its exit without running
            # a bypassed node's row says so in place of its type (the list is narrow), greyed like on the canvas
            item = QTreeWidgetItem([f"{diag.node}  ({'bypassed' if diag.bypassed else diag.type})"])
            item.setData(0, Qt.ItemDataRole.UserRole, diag.node)
            item.setToolTip(0, f"{diag.node} ({diag.type}) \u00b7 {diag.timings.total_ms:.0f} ms \u00b7 exit "
                               f"{diag.exit or '-'}{bypassed}")
            if diag.bypassed:
                item.setForeground(0, QColor("#9a9a9a"))
            self._add_row(item, parent_of(diag.node))
            latest[diag.node] = item
            rows.append(item)
        self.node_list.expandAll()
        return rows

    def _add_row(self, item: QTreeWidgetItem, parent: QTreeWidgetItem | None) -> None:
        if parent is None:
            self.node_list.addTopLevelItem(item)
        else:
            parent.addChild(item)

    def node_rows(self) -> list[QTreeWidgetItem]:
        """Every row of the node tree, top to bottom (a behaviour's nodes after their Subgraph node)."""
        out: list[QTreeWidgetItem] = []
        stack = [self.node_list.topLevelItem(i) for i in reversed(range(self.node_list.topLevelItemCount()))]
        while stack:
            item = stack.pop()
            out.append(item)
            stack += [item.child(i) for i in reversed(range(item.childCount()))]
        return out

    def node_labels(self) -> list[str]:
        """The rows' texts, top to bottom."""
        return [item.text(0) for item in self.node_rows()]

    @staticmethod
    def _replying_row(record: InspectedTurn) -> int:
        """The row of the node whose reply the player got (the last player-facing node that ran; a
        behaviour's node, which the asset's file does not hold, is known by its type)."""
        def player_facing(diag: NodeDiagnostics) -> bool:
            if record.asset.node_ids().count(diag.node):
                return record.asset.node(diag.node).PLAYER_FACING
            return diag.type in NODE_TYPES and node_model(diag.type).PLAYER_FACING

        rows = [i for i, n in enumerate(record.diagnostics.nodes) if player_facing(n)]
        return rows[-1] if rows else 0

    def _highlight(self, path: list[str]) -> None:
        if self.highlight_path is not None:
            self.highlight_path(path)

    # --- one node ---------------------------------------------------------------------------

    def current_node_id(self) -> str:
        item = self.node_list.currentItem()
        return item.data(0, Qt.ItemDataRole.UserRole) if item is not None else ""

    def show_node(self, node_id: str) -> None:
        for item in self.node_rows():
            if item.data(0, Qt.ItemDataRole.UserRole) == node_id:
                self.node_list.setCurrentItem(item)
                return

    def node_diagnostics(self, record: InspectedTurn | None, node_id: str) -> NodeDiagnostics | None:
        if record is None:
            return None
        return next((n for n in record.diagnostics.nodes if n.node == node_id), None)

    def _show_node_details(self) -> None:
        record = self.record
        diag = self.node_diagnostics(record, self.current_node_id())
        if record is None or diag is None:
            self.budget_bar.set_shares(None)
            self.stats.setText("")
            self.prompt_view.setHtml("")
            self.diff_view.setHtml("")
            return
        parts = record.parts.get(diag.node)
        if parts is not None and diag.tokens.budget is not None:
            context = record.context_sizes.get(diag.node, diag.tokens.budget)
            self.budget_bar.set_shares(BudgetShares(budget_segments(parts), diag.tokens.budget, context))
            self.budget_bar.show()
        else:
            self.budget_bar.set_shares(None)
            self.budget_bar.setVisible(diag.tokens.budget is not None)
        self.stats.setText(stats_html(diag, parts or [], self.summary_through(diag)))
        self.prompt_view.setHtml(prompt_html(diag, parts))
        self._show_diff()

    def summary_through(self, diag: NodeDiagnostics) -> int:
        """The last turn covered by the summary in this node's prompt (-1: none), from the earlier turns' records."""
        record = self.record
        if record is None or not any(p.kind == "summary" for p in record.parts.get(diag.node, [])):
            return -1
        if isinstance(self.turn_picker.currentData(), str):
            return -1  # a test run's turn: its earlier turns are not recorded here
        records = self.view.records
        earlier = [records[t] for t in self._path()[:record.turn] if t in records]
        covered = [n.summary.covered_through for r in earlier for n in r.diagnostics.nodes if n.summary is not None]
        return max(covered, default=-1)

    # --- comparing two turns ------------------------------------------------------------------

    def _show_diff(self) -> None:
        self.diff_view.setHtml(self.diff_html())
        self._show_changes()

    def compared_record(self) -> InspectedTurn | None:
        """The turn picked under Compare with: one of this conversation's, or a test run's."""
        other_id = self.compare_picker.currentData()
        if isinstance(other_id, str):
            return self.external[other_id][0] if other_id in self.external else None
        return self.view.records.get(other_id) if other_id is not None else None

    def comparison(self) -> TurnComparison | None:
        """The shown test turn's last passing run, when it failed and the Tests dock sent one."""
        label = self.turn_picker.currentData()
        return self.comparisons.get(label) if isinstance(label, str) else None

    def diff_html(self) -> str:
        """The selected node's output and prompt on the compared turn (left) and this turn (right), in
        two aligned columns: words removed marked on the left, words added on the right, the first
        prompt part that differs marked."""
        other_id = self.compare_picker.currentData()
        node_id = self.current_node_id()
        record = self.record
        comparison = self.comparison()
        if record is not None and comparison is not None and comparison.against is None and other_id is None:
            return f"<i>Nothing to compare with: {html_text(comparison.why_none)}.</i>"
        if other_id is None or record is None:
            return ("<i>Pick a turn under \u201cCompare with\u201d (another turn, another alternative of this "
                    "one, or a test run's) to see what changed in this node's prompt and output.</i>")
        other = self.compared_record()
        a, b = self.node_diagnostics(other, node_id), self.node_diagnostics(record, node_id)
        if other is None or a is None or b is None:
            return f"<i>Node {html.escape(node_id)} did not run on both turns.</i>"
        rows = [f"<p class='warn'>\u26a0 {html_text(line)}</p>" for line in numerics_warnings(other, record)]
        rows.append(f"<p class='ctx'><b>{html.escape(node_id)}</b> \u00b7 left: the compared turn, right: this one "
                    "\u00b7 <span class='del'>removed</span> <span class='add'>added</span></p>")
        rows.append(side_by_side_html(
            self.compare_picker.currentText(), self.turn_picker.currentText(), a.output, b.output,
            rows_of(a, other.parts.get(node_id)), rows_of(b, record.parts.get(node_id))))  # type: ignore[union-attr]
        return "".join(rows)

    def _asset_edited(self, *_changed: object) -> None:
        if self.comparisons:
            asset = self.view.actions.document.asset
            self.comparisons = {label: with_asset_now(c, asset) for label, c in self.comparisons.items()}
            self._show_changes()

    def _show_changes(self) -> None:
        self.changes_list.show_changes(self.comparison(), self.compare_picker.currentData())

    def _change_clicked(self, item: QTreeWidgetItem, _column: int = 0) -> None:
        node = item.data(0, Qt.ItemDataRole.UserRole)
        if node:
            self.show_node(node)


def not_reproducible_text(record: InspectedTurn) -> str:
    """The Turn Inspector's line for a turn whose backend is not exact."""
    return (f"\u26a0 Not reproducible on {record.diagnostics.backend or 'this backend'}: a replay may change "
            "this reply with the same graph and seed.")


def warnings_html(warnings: list[str], path: list[str]) -> str:
    """A turn's warnings where their count is shown: each one's text, after a link to its node (the
    runtime writes them as "node: text"); "⚠ 1 warning(s)" alone did not say which."""
    if not warnings:
        return ""
    rows = []
    for warning in warnings:
        node, sep, text = warning.partition(": ")
        if sep and node in path:
            rows.append(f"<a href='{html.escape(node)}' style='color:#7fb2e5'>{html.escape(node)}</a>: "
                        f"{html.escape(text)}")
        else:
            rows.append(html.escape(warning))
    count = f"{len(warnings)} warning{'s' if len(warnings) != 1 else ''}"
    head = f"<br/><span style='color:#e5c07b'>\u26a0 {count}:</span> "
    return head + rows[0] if len(rows) == 1 else head + "".join(f"<br/>&nbsp;&nbsp;\u2022 {row}" for row in rows)


def numerics_warnings(old: InspectedTurn, new: InspectedTurn) -> list[str]:
    """Why the differences between two turns may be numerics rather than the graph: a backend that is
    not exact, or two backends (whose numbers always differ). Empty when both ran on one exact backend."""
    lines = []
    backends = {r.diagnostics.backend for r in (old, new)}
    if len(backends) > 1:
        lines.append(f"The two turns ran on different backends ({' and '.join(sorted(b or 'unknown' for b in backends))}): "
                     "their numbers differ, so replies and outputs may differ with the same prompt.")
    inexact: dict[str, Reproducibility] = {}
    for r in (old, new):
        if r.reproducibility is not None and not r.reproducibility.exact:
            inexact.setdefault(r.diagnostics.backend, r.reproducibility)
    for backend, repro in inexact.items():
        lines.append(f"{backend or 'The backend'} is not reproducible ({repro.note}): differences in the output "
                     "may come from its numerics, not from the graph.")
    return lines


def _branch_label(tree, turn_id: int, record: InspectedTurn) -> str:
    """A turn off the current branch, told apart from every other one: at which turns its branch takes
    which alternative (``ConversationTree.branch_steps``), and the start of its reply."""
    steps = tree.branch_steps(turn_id) if tree is not None and turn_id in tree.nodes else []
    where = f" \u00b7 branch ({', '.join(f'turn {i + 1}: {at}/{n}' for i, at, n in steps)})" if steps \
        else " \u00b7 further on"
    reply = " ".join(record.diagnostics.reply.split())
    more = "\u2026" if len(reply) > 32 else ""
    return f"Turn {record.turn + 1}{where}: \u201c{reply[:32]}{more}\u201d"


def _turn_label(index: int, player: str, suffix: str = "") -> str:
    return f"Turn {index + 1}{suffix}: {player[:40]}" + ("\u2026" if len(player) > 40 else "")
