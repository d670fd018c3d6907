"""The main window: menus, the canvas in the middle, docks around it, and files.

Docks are built from ``DOCKS`` so a new panel is one entry there plus its module.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from PySide6.QtCore import QByteArray, QPoint, Qt, QTimer
from PySide6.QtGui import QAction, QCloseEvent, QKeySequence
from PySide6.QtWidgets import (
    QApplication,
    QDockWidget,
    QLabel,
    QMainWindow,
    QMenu,
    QWidget,
)

from editor import settings as app_settings
from editor.canvas import Canvas, add_action, context_menu
from editor.canvas.arrange import install_arrange
from editor.canvas.comments import install_comments
from editor.canvas.minimap import install_minimap
from editor.canvas.node_find import NodeFind
from editor.canvas.node_types import categories
from editor.canvas.steady_zoom import install_steady_zoom
from editor.canvas.subgraphs import install as install_subgraphs
from editor.canvas.subgraphs import subgraph_port_counts
from editor.dialogs.attach import AttachDialog, AttachPanel
from editor.dialogs.snapshot_budget import SnapshotBudgetDialog
from editor.docks.conversation.dock import ConversationDock
from editor.docks.palette.dock import PaletteDock
from editor.docks.problems.dock import ProblemsDock
from editor.docks.properties.dock import PropertiesDock
from editor.docks.raw_json.dock import RawJsonDock
from editor.docks.tests.dock import TestsDock
from editor.docks.turn_inspector.dock import TurnInspectorDock
from editor.docks.undo_history.dock import UndoHistoryDock
from editor.docks.vram_estimator.dock import VramEstimatorDock
from editor.garbage import collect_on_the_ui_thread
from editor.model.bypass import install_bypass
from editor.model.document import Document
from editor.model.game_events import install_game_events
from editor.model.strings import install_strings
from editor.services.backend_choice import BackendChoice
from editor.services.recovery import Autosave
from editor.services.sample_model_download import (
    SampleModelDownload,
)
from editor.services.suite_run import SuiteRun
from editor.session.follow import ServerAttach
from editor.session.local import LiveConversation
from editor.session.record import InspectedTurn
from editor.session.scene import SceneConversation
from editor.threads.thread_service import SHUTDOWN_WAIT_MS
from editor.window.backend_menu import BackendMenu
from editor.window.edit_menu import EditMenu
from editor.window.file_menu import FileMenu
from editor.window.help_menu import fill_help_menu
from editor.window.models_menu import ModelsMenu
from editor.window.scene_mode import SceneMode
from editor.window.start_page import StartPageHost
from editor.window.workspace import Workspace, preset_buttons
from runtime.asset.model import Asset
from runtime.asset.validation import ModelFiles, Validator
from runtime.models.folder import default_model_name
from runtime.problems import Problem

if TYPE_CHECKING:
    from runtime.crashes import CrashWatch
    from runtime.suites.report import Coverage

AnyDock = TypeVar("AnyDock", bound=QDockWidget)



def standard_shortcuts(key: QKeySequence.StandardKey, *also: str) -> list[QKeySequence]:
    """The platform's key sequences for a standard action, then each of ``also`` it lacks.

    Each sequence appears once: an action listing one twice makes Qt call the key ambiguous
    and do nothing."""
    out: list[QKeySequence] = []
    for sequence in [*QKeySequence.keyBindings(key), *(QKeySequence(text) for text in also)]:
        if not sequence.isEmpty() and sequence not in out:
            out.append(sequence)
    return out


def new_agent() -> Asset:
    """What a new window starts with, behind its start page: no nodes, and the models folder's sample
    model (or its only model) as the default model, so the first node added can talk at once. File > New
    gives ``editor.window.start_page.empty_agent()``: the same with one reply node."""
    return Asset(default_model=default_model_name())

@dataclass(frozen=True)
class DockSpec:
    """One dock the window builds: its object name (the key its place is saved under),
    where it starts, and how to make it."""

    name: str
    area: Qt.DockWidgetArea
    make: Callable[[MainWindow], QDockWidget]


# The window's docks, in the order they are built. Each gets the services it needs from the window
# (the document, the test conversation, the download, the canvas's path marking); none looks for another.
DOCKS: list[DockSpec] = [
    DockSpec("PaletteDock", Qt.DockWidgetArea.LeftDockWidgetArea, lambda w: PaletteDock(w)),
    DockSpec("UndoHistoryDock", Qt.DockWidgetArea.LeftDockWidgetArea, lambda w: UndoHistoryDock(w.document.undo_stack, w)),
    DockSpec("PropertiesDock", Qt.DockWidgetArea.RightDockWidgetArea, lambda w: PropertiesDock(w.document, w)),
    DockSpec("ProblemsDock", Qt.DockWidgetArea.BottomDockWidgetArea, lambda w: ProblemsDock(w)),
    DockSpec("ConversationDock", Qt.DockWidgetArea.RightDockWidgetArea,
             lambda w: ConversationDock(w.conversation.view, w, w.download, w.backends, w.scene.view)),
    DockSpec("TurnInspectorDock", Qt.DockWidgetArea.BottomDockWidgetArea,
             lambda w: TurnInspectorDock(w.conversation.view, w.highlight_turn_path, w, w.scene.view)),
    DockSpec("RawJsonDock", Qt.DockWidgetArea.BottomDockWidgetArea,
             lambda w: RawJsonDock(w.conversation.view, w)),
    DockSpec("VramEstimatorDock", Qt.DockWidgetArea.RightDockWidgetArea,
             lambda w: VramEstimatorDock(w.document, w, w.conversation.view, w.backends)),
    DockSpec("TestsDock", Qt.DockWidgetArea.BottomDockWidgetArea,
             lambda w: TestsDock(w.document, w.suite_run, w)),
]


class MainWindow(QMainWindow):
    """One asset in one window."""

    def __init__(self, autosave_ms: int = 30_000, parent: QWidget | None = None,
                 crash_watch: CrashWatch | None = None) -> None:
        """``crash_watch``: the process's (``editor.app`` starts it); each turn is noted in it as it runs."""
        super().__init__(parent)
        self.crash_watch = crash_watch
        collect_on_the_ui_thread()  # worker threads must never destroy this window's Qt objects
        self.setObjectName("ParleyStudio")
        self._framed_once = False  # the graph is framed for reading once the window is first shown
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose, False)
        self.document = Document(new_agent(), parent=self)
        self.canvas = Canvas(self.document, self)
        self.edit_menu = EditMenu(self)  # Cut, Copy, Paste, Duplicate, Delete, Set as Start Node
        self.files = FileMenu(self)  # New, Open, Open Recent, Examples, Save, Save As, crash recovery
        self.start_page = StartPageHost(self)  # the central area: the canvas, or the start page in front of it
        # The window's shared services, passed to the docks that use them.
        self.backends = BackendChoice(self)  # where the agent runs (the user's settings, not the asset)
        self.conversation = LiveConversation(self.document, self, make_backend=self._backend_maker(),
                                             crash_watch=crash_watch)
        self.conversation.set_snapshot_budget(app_settings.snapshot_budget_mib())  # the designer's, from the settings
        # A scene (*.scene.json) in the conversation's place: several NPCs, the canvas one NPC's graph at a time
        self.scene = SceneConversation(self)
        self.scene_mode = SceneMode(self, self.scene)
        self.download = SampleModelDownload(self)
        # Following a session of `parley serve` in the conversation's place (Backend > Attach to Server…)
        self.attach = ServerAttach(self.conversation.view, self)
        self.suite_run = SuiteRun(self)
        self.suite_run.backend_factory = self.backends.factory  # test runs use the same backend
        self.load_problems: list[Problem] = []
        self._node_find: NodeFind | None = None  # Ctrl+F's popup, made when first asked for
        self.problems: list[Problem] = []
        self._validator = Validator()
        self.docks: dict[str, QDockWidget] = {}
        # The right column (properties, conversation) runs the full height; the bottom docks stop at it.
        self.setCorner(Qt.Corner.BottomRightCorner, Qt.DockWidgetArea.RightDockWidgetArea)
        for spec in DOCKS:
            dock = spec.make(self)
            dock.setObjectName(spec.name)
            self.addDockWidget(spec.area, dock)
            self.docks[spec.name] = dock
        # Which docks stand around the canvas: the Author, Talk and Test presets (View menu, Ctrl+1/2/3)
        self.workspace = Workspace(self, self.docks)

        self.attach_panel = AttachPanel(self.attach, self)
        self.attach_panel.hide()
        self._build_actions()
        self._build_menus()
        self.minimap = install_minimap(self)  # View > Show Minimap, in the canvas's corner
        self.steady_zoom = install_steady_zoom(self)  # a workspace switch or a dock keeps the zoom and centre
        self.arrange = install_arrange(self)  # Edit > Arrange: align and distribute the selection
        self._wire()
        self.status = QLabel(self)
        self.statusBar().addPermanentWidget(self.status)
        self.download_progress = self.models.download_progress
        self.statusBar().addPermanentWidget(self.download_progress)
        self.download_reactions = self.models.download_reactions
        self.autosave = Autosave(self.document, app_settings.recovery_dir(), autosave_ms, self, self.conversation)
        self.autosave.failed.connect(lambda message: self.statusBar().showMessage(message, 15000))
        # Subgraph nodes: their behaviour files watched, double-click opens one, Edit > Extract to Behaviour
        self.subgraphs = install_subgraphs(self)
        self.canvas.rebuild()
        self._restore_layout()
        self._after_edit()
        self._update_title()

    def showEvent(self, event) -> None:
        super().showEvent(event)
        if not self._framed_once:
            # The docks take their shares of the window only once it has its final size, and the
            # canvas its real size after that: frame the graph then.
            self._framed_once = True
            self.workspace.window_shown()
            QTimer.singleShot(0, self, lambda: QTimer.singleShot(0, self, self.canvas.frame_for_reading))

    # --- docks by type --------------------------------------------------------------------------

    def dock(self, kind: type[AnyDock]) -> AnyDock:
        """The window's dock of type ``kind`` (``docks`` holds them by object name, for the saved layout)."""
        for dock in self.docks.values():
            if isinstance(dock, kind):
                return dock
        raise LookupError(f"the window has no {kind.__name__}")

    @property
    def properties(self) -> PropertiesDock:
        return self.dock(PropertiesDock)

    @property
    def problems_dock(self) -> ProblemsDock:
        return self.dock(ProblemsDock)

    @property
    def conversation_dock(self) -> ConversationDock:
        return self.dock(ConversationDock)

    @property
    def palette(self) -> PaletteDock:
        return self.dock(PaletteDock)

    # --- actions and menus ----------------------------------------------------------------------

    def _action(self, text: str, slot: Callable[[], object],
                shortcut: QKeySequence.StandardKey | list[QKeySequence] | str | None = None,
                canvas: bool = False, tip: str = "") -> QAction:
        action = QAction(text, self)
        if isinstance(shortcut, QKeySequence.StandardKey):
            action.setShortcuts(standard_shortcuts(shortcut))
        elif isinstance(shortcut, list):
            action.setShortcuts(shortcut)
        elif shortcut is not None:
            action.setShortcut(QKeySequence(shortcut))
        if tip:
            action.setStatusTip(tip)
            action.setToolTip(tip)
        action.triggered.connect(lambda _checked=False: slot())
        if canvas:
            add_action(self.canvas, action)
        else:
            self.addAction(action)
        return action

    def _build_actions(self) -> None:
        # Standard actions take the platform's own keys (QKeySequence.StandardKey), plus the usual
        # ones a platform's list may lack; every key sequence belongs to one action only.
        Key = QKeySequence.StandardKey
        self.new_action = self._action("&New", self.new_asset, Key.New)
        self.new_window_action = self._action("New &Window", self.new_window, "Ctrl+Shift+N")
        self.start_page_action = self._action("Start &Page", self.show_start_page, "Alt+Home",
                                              tip="New from a template, the recent files and the examples (Alt+Home)")
        self.open_action = self._action("&Open\u2026", self.open_dialog, Key.Open)
        self.save_action = self._action("&Save", self.save, Key.Save)
        self.save_as_action = self._action("Save &As\u2026", self.files.save_as, standard_shortcuts(Key.SaveAs, "Ctrl+Shift+S"))
        self.close_action = self._action("&Close Window", self.close, standard_shortcuts(Key.Close, "Ctrl+W"))
        self.quit_action = self._action("&Quit", QApplication.closeAllWindows, standard_shortcuts(Key.Quit, "Ctrl+Q"))
        self.undo_action = self.document.undo_stack.createUndoAction(self, "&Undo")
        self.undo_action.setShortcuts(standard_shortcuts(Key.Undo, "Ctrl+Z"))
        self.redo_action = self.document.undo_stack.createRedoAction(self, "&Redo")
        self.redo_action.setShortcuts(standard_shortcuts(Key.Redo, "Ctrl+Shift+Z", "Ctrl+Y"))
        self.addActions([self.undo_action, self.redo_action])
        self.cut_action = self._action("Cu&t", self.cut, Key.Cut, canvas=True)
        self.copy_action = self._action("&Copy", self.copy, Key.Copy, canvas=True)
        self.paste_action = self._action("&Paste", self.paste, Key.Paste, canvas=True)
        self.duplicate_action = self._action("D&uplicate", self.duplicate, "Ctrl+D", canvas=True)
        self.delete_action = self._action("&Delete", self.delete_selected,
                                          standard_shortcuts(Key.Delete, "Backspace"), canvas=True)
        self.select_all_action = self._action("Select &All", self.canvas.select_all, Key.SelectAll, canvas=True)
        # Not Ctrl+Shift+S: that is Save As.
        self.start_action = self._action("Set as &Start Node", self.edit_menu.set_start_node, "Ctrl+Shift+Home",
                                         canvas=True)
        self.find_action = self._action("&Find Node\u2026", self.find_node, standard_shortcuts(Key.Find, "Ctrl+F"),
                                        tip="Find a node by its title, id, prompt, template or intents (Ctrl+F)")
        self.search_action = self._action("Add Node by &Name\u2026", self.canvas.show_node_search, "Tab",
                                          canvas=True, tip="Type a node type's name (Tab)")
        self.frame_action = self._action("&Frame Selection", self.canvas.frame_readably, "F", canvas=True,
                                         tip="Zoom to the selected nodes, or to all nodes, never too small to read")
        self.zoom_selection_action = self._action("&Zoom to Selection", self.zoom_to_selection, "Shift+F",
                                                  canvas=True, tip="Fit the selected nodes in the canvas (Shift+F)")
        self.layout_action = self._action("Auto-&Layout", self.canvas.auto_layout, "Ctrl+L",
                                          tip="Arrange the graph in layers from the start node")
        # Models > Download Sample Model…, Open Models Folder, and the download in the status bar
        self.models = ModelsMenu(self, self._model_ready)
        self.download_sample_action = self.models.download_sample_action
        self.open_models_action = self.models.open_models_action

    def _build_menus(self) -> None:
        bar = self.menuBar()
        file_menu = bar.addMenu("&File")
        file_menu.addActions([self.new_action, self.new_window_action, self.open_action])
        self.files.add_recent_and_examples(file_menu)
        self.recent_menu, self.examples_menu = self.files.recent_menu, self.files.examples_menu
        file_menu.addAction(self.start_page_action)
        file_menu.addSeparator()
        file_menu.addActions([self.save_action, self.save_as_action])
        file_menu.addSeparator()
        self.strings_actions = install_strings(self, file_menu)  # Export and Import Strings…
        file_menu.addSeparator()
        file_menu.addActions([self.close_action, self.quit_action])

        edit = bar.addMenu("&Edit")
        edit.addActions([self.undo_action, self.redo_action])
        edit.addSeparator()
        edit.addActions([self.cut_action, self.copy_action, self.paste_action, self.duplicate_action,
                         self.delete_action])
        edit.addSeparator()
        edit.addActions([self.select_all_action, self.start_action])
        edit.addSeparator()
        edit.addAction(self.find_action)

        self.add_menu = bar.addMenu("&Add")
        self._fill_add_menu(self.add_menu, at_cursor=False)
        self.add_menu.addSeparator()
        self.add_menu.addAction(self.search_action)

        self.models_menu = self.models.add_to(bar)
        self.backend_controls = BackendMenu(self, bar)
        self.backend_menu = self.backend_controls.menu
        for name in ("backends_action", "snapshot_budget_action", "self_test_action", "attach_action",
                     "take_over_action", "detach_action"):
            setattr(self, name, getattr(self.backend_controls, name))

        view = bar.addMenu("&View")
        view.addActions([self.frame_action, self.zoom_selection_action, self.layout_action])
        view.addSeparator()
        view.addActions([*self.workspace.actions.values(), self.workspace.reset_action])
        bar.setCornerWidget(preset_buttons(self.workspace, bar), Qt.Corner.TopRightCorner)
        view.addSeparator()
        for dock in self.docks.values():
            view.addAction(dock.toggleViewAction())

        self.help_menu = bar.addMenu("&Help")
        self.help_actions = fill_help_menu(self.help_menu, self)

        menu = context_menu(self.canvas)
        add_here = menu.addMenu("Add Node")
        self._fill_add_menu(add_here, at_cursor=True)
        menu.addAction(self.search_action)
        menu.addSeparator()
        menu.addActions([self.undo_action, self.redo_action])
        menu.addSeparator()
        menu.addActions([self.cut_action, self.copy_action, self.paste_action, self.duplicate_action,
                         self.delete_action])
        menu.addSeparator()
        menu.addActions([self.select_all_action, self.start_action, self.frame_action, self.zoom_selection_action,
                         self.layout_action])
        # Backdrops and notes (editor/canvas/comments.py) and Bypass (editor/model/bypass.py), in Edit and here
        self.comment_actions = install_comments(self, edit, menu)
        self.bypass_actions = install_bypass(self, edit, menu)
        self.game_event_actions = install_game_events(self, edit, menu)  # editor/model/game_events.py
        self.edit_menu.add_to_menus(edit, menu)  # Duplicate with Connections, Find in Project

    def _fill_add_menu(self, menu: QMenu, at_cursor: bool) -> None:
        for views in categories().values():
            for view in views:
                action = menu.addAction(view.label)
                action.triggered.connect(
                    lambda _c=False, t=view.type: self.canvas.add_node(
                        t, self.canvas.scene_cursor_pos() if at_cursor else None))
            menu.addSeparator()

    def _wire(self) -> None:
        # Bound methods, not lambdas: Qt drops a connection to a method when the window
        # is deleted, while a lambda would still run and touch the deleted window.
        doc = self.document
        doc.undo_stack.indexChanged.connect(self._after_edit)
        doc.undo_stack.cleanChanged.connect(self._update_title)
        doc.reset.connect(self._after_edit)
        doc.path_changed.connect(self._update_title)
        doc.agent_changed.connect(self._update_title)
        self.canvas.selection_changed.connect(self.properties.show_selection)
        self.canvas.file_dropped.connect(self.open_path)
        self.canvas.text_dropped.connect(self.paste_text)
        self.palette.add_requested.connect(self.canvas.add_node)
        self.problems_dock.problem_activated.connect(self.show_problem)
        # A node named in a dock (a chat reply, the inspector's path, a test's check, a VRAM row): one
        # click shows it on the canvas
        for dock in (self.conversation_dock, self.dock(TurnInspectorDock), self.dock(TestsDock),
                     self.dock(VramEstimatorDock)):
            dock.node_clicked.connect(self.show_node)
        self.properties.input_problems_changed.connect(self._show_problems)
        self.properties.told.connect(lambda text: self.statusBar().showMessage(text, 10_000))
        tests = self.dock(TestsDock)
        tests.turn_opened.connect(self._open_test_turn)
        tests.coverage_changed.connect(self._show_coverage)
        self.conversation_dock.test_case_saved.connect(tests.refresh)
        self.conversation_dock.scene_npc_picked.connect(self.scene_mode.show_npc)
    # --- the backend ----------------------------------------------------------------------------

    def _backend_maker(self):
        try:
            return self.backends.maker()
        except Exception as exc:  # noqa: BLE001 - a choice checked a moment ago; never stop the window
            self.statusBar().showMessage(f"The backend cannot be used: {exc}", 15_000)
            return None

    def choose_backend(self, spec: str) -> bool:
        return self.backend_controls.choose_backend(spec)

    def snapshot_budget_dialog(self) -> SnapshotBudgetDialog:
        return self.backend_controls.snapshot_budget_dialog()

    def open_attach_dialog(self) -> AttachDialog:
        return self.backend_controls.open_attach_dialog()

    def highlight_turn_path(self, node_ids: list[str]) -> None:
        """The Turn Inspector's path marks, but none from a followed session that runs another asset, nor
        from a scene's NPC whose graph the canvas does not show."""
        draws = self.attach.draws_paths() and self.scene_mode.draws_inspected_path()
        self.canvas.highlight_path(node_ids if draws else [])

    def _open_test_turn(self, record: InspectedTurn, label: str, note: str, comparison: object = None) -> None:
        """A test run's turn (the Tests dock) in the Turn Inspector, with what it was expected to do
        (and a failed one beside the same turn of the last passing run)."""
        inspector = self.dock(TurnInspectorDock)
        inspector.show_external(record, label, note, comparison)
        inspector.show()
        inspector.raise_()

    def _show_coverage(self, coverage: Coverage | None) -> None:
        """A test run's node and exit counts on the canvas (None: take them off)."""
        if coverage is None:
            self.canvas.clear_coverage()
        else:
            doc = self.document  # a Subgraph node's ports: from the counts of its behaviour's nodes
            ports = subgraph_port_counts(doc.asset, doc.asset_dir, coverage.exits, coverage.visits)
            self.canvas.show_coverage(coverage.visits, {**ports, **coverage.exits})

    # --- the sample model -----------------------------------------------------------------------

    def download_sample_model(self) -> bool:
        return self.models.download_sample_model()

    def _model_ready(self) -> None:
        # The model names that were missing resolve now: check the graph and estimate again.
        self._after_edit()
        self.dock(VramEstimatorDock).update_estimate()

    # --- title and problems ---------------------------------------------------------------------

    def _update_title(self, *_ignored: object) -> None:
        doc = self.document
        name = Path(doc.path).name if doc.path else "Untitled"
        scene = self.scene_mode.title_prefix() if hasattr(self, "scene_mode") else ""  # (not yet while it is built)
        self.setWindowTitle(f"{scene}{name}[*] \u2014 {doc.asset.name} \u2014 Parley Studio")
        self.setWindowModified(doc.modified)

    def _after_edit(self, *_ignored: object) -> None:
        """Run after every edit, undo and redo: validate and show the results."""
        doc = self.document
        # The validator keeps what an edit left unchanged (each node's own rules, the graph's walks):
        # the same problems as validate_asset, in a fraction of the time on a large graph.
        self.problems = self._validator.validate(doc.asset, doc.path, asset_dir=doc.asset_dir,
                                                 models=ModelFiles(doc.asset_dir))
        if not doc.asset.nodes:
            # A new asset has no nodes yet: a normal state, which the canvas's hint explains, not an error
            self.problems = [p for p in self.problems if not (p.field == "nodes" and not p.node_id)]
        self._show_problems()

    def revalidate(self) -> None:
        """Check the graph again and show the results (files it reads changed: a behaviour)."""
        self._after_edit()

    def _show_problems(self, *_ignored: object) -> None:
        everything = self.load_problems + self.properties.rejected + self.problems
        was_empty = not self.problems_dock.problems
        self.problems_dock.set_problems(everything)
        if was_empty and everything and self.problems_dock.height() < 120:
            # the dock was one line ("No problems"): give the rows room to be read
            self.resizeDocks([self.problems_dock], [160], Qt.Orientation.Vertical)
        self.canvas.mark_problems(everything)
        errors = sum(p.severity == "error" for p in everything)
        counts = (len(self.document.asset.nodes), "node"), (errors, "error"), (len(everything) - errors, "warning")
        self.status.setText(" \u00b7 ".join(f"{n} {word}{'' if n == 1 else 's'}" for n, word in counts))

    def find_node(self) -> NodeFind:
        """Edit > Find Node (Ctrl+F): a popup at the top of the canvas; the node picked is shown."""
        if self._node_find is None:
            self._node_find = NodeFind(self)
            self._node_find.chosen.connect(self.show_node)
        viewport = self.canvas.viewer.viewport()
        self._node_find.popup_at(self.document.asset, viewport.mapToGlobal(QPoint(viewport.width() // 2, 8)),
                                 min(480, max(300, viewport.width() - 40)))
        return self._node_find

    def zoom_to_selection(self) -> None:
        """View > Zoom to Selection (Shift+F): fit the selected nodes; F frames the whole graph."""
        if not self.canvas.zoom_to_selection():
            self.statusBar().showMessage("Select the nodes to zoom to (F frames the whole graph)", 4000)

    def show_node(self, node_id: str) -> bool:
        """Select the node ``node_id`` and centre it on the canvas; False when the asset has no such node
        (a followed session of another asset, a test turn of an older graph). A behaviour's node
        (``guard/classify``) is shown as the Subgraph node that runs it."""
        node_id = self.canvas.shown_on(node_id)
        if self.attach.mismatch or not self.document.has_node(node_id):
            self.statusBar().showMessage(f"No node {node_id!r} in this asset", 4000)
            return False
        self.canvas.select([node_id])
        self.canvas.center_on(node_id)
        return True

    def show_problem(self, node_id: str, field: str) -> None:
        """Select the node a problem names and focus the field in the Properties dock."""
        node_id = self.canvas.shown_on(node_id)
        if node_id and self.document.has_node(node_id):
            self.canvas.select([node_id])
            self.canvas.center_on(node_id)
        elif not node_id:
            self.canvas.select([])
        self.properties.focus_field(field)

    # --- files ----------------------------------------------------------------------------------

    def maybe_save(self) -> bool:
        return self.files.maybe_save()

    def set_asset(self, asset: Asset, path: str = "", modified: bool = False, folder: str = "") -> None:
        """Show ``asset`` (from the file ``path``; without one, its relative paths are read from ``folder``)."""
        doc = self.document
        self.autosave.discard()
        doc.undo_stack.clear()
        doc.folder = Path(folder) if folder and not path else None
        doc.set_path(path)
        self.load_problems = []
        doc.set_asset(asset)
        # Nothing of the old asset stays on show: its test turns, path marks and visit counts name
        # nodes the new asset may have under the same ids (the Tests dock clears its own results).
        self.dock(TurnInspectorDock).forget_external()
        self.canvas.highlight_path([])
        self.canvas.clear_coverage()
        if modified:
            doc.undo_stack.resetClean()
        self.properties.show_selection([])
        self._update_title()
        self.canvas.frame_for_reading()

    def new_asset(self) -> bool:
        return self.files.new_asset()

    def show_start_page(self) -> None:
        """File > Start Page (Alt+Home): templates, recent files and examples, in front of the canvas."""
        self.start_page.show()

    def new_window(self) -> MainWindow:
        window = MainWindow(crash_watch=self.crash_watch)
        window.show_start_page()
        window.show()
        _open_windows.append(window)
        return window

    def open_dialog(self) -> None:
        self.files.open_dialog()

    def open_path(self, path: str, as_example: bool = False) -> bool:
        return self.files.open_path(path, as_example)

    def save(self) -> bool:
        return self.files.save()

    def save_to(self, path: str) -> bool:
        return self.files.save_to(path)

    def offer_recovery(self) -> bool:
        return self.files.offer_recovery()

    # --- editing (``EditMenu``) ------------------------------------------------------------------

    def copy(self) -> None:
        self.edit_menu.copy()

    def cut(self) -> None:
        self.edit_menu.cut()

    def paste(self) -> None:
        self.edit_menu.paste()

    def paste_text(self, text: str, pos: tuple[float, float] | None) -> list[str]:
        return self.edit_menu.paste_text(text, pos)

    def duplicate(self) -> list[str]:
        return self.edit_menu.duplicate()

    def delete_selected(self) -> None:
        self.edit_menu.delete_selected()

    # --- window state ---------------------------------------------------------------------------

    def _restore_layout(self) -> None:
        store = app_settings.app_settings()
        geometry = store.value("window/geometry")
        if isinstance(geometry, QByteArray):
            self.restoreGeometry(geometry)
        else:
            self.resize(1400, 860)
        # one saved arrangement per workspace preset (editor/window/workspace.py), not one for the window
        self.workspace.start()

    def save_layout(self) -> None:
        store = app_settings.app_settings()
        store.setValue("window/geometry", self.saveGeometry())
        store.remove("window/state")
        store.sync()
        self.workspace.remember()

    def closeEvent(self, event: QCloseEvent) -> None:
        if not self.maybe_save():
            event.ignore()
            return
        self.save_layout()
        self.autosave.stop()
        # Each stops its work (any turn and server request) and waits for its thread, a few
        # seconds at most: one that still runs is left to end by itself, never destroyed running.
        self.attach.shutdown()  # closes the watch stream: the server's session is not changed
        self.conversation.shutdown()
        self.scene.shutdown()
        self.download.shutdown()
        self.suite_run.shutdown(SHUTDOWN_WAIT_MS)  # stops a test run and its thread
        doctor = sys.modules.get("editor.dialogs.doctor")  # no self-test window was opened unless it is imported
        for dialog in self.findChildren(doctor.DoctorDialog) if doctor else ():
            dialog.run.shutdown()  # a self-test stops with its window
        self.conversation_dock.stop_voice()
        self.statusBar().clearMessage()  # stops the message's timer with the window
        event.accept()


# Windows opened with File > New Window stay alive while they are open.
_open_windows: list[MainWindow] = []
