"""The main window: menus, the canvas in the middle, docks around it, and files.

Docks are built from ``DOCKS`` so a new panel is one entry there plus its module.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from PySide6.QtCore import QByteArray, QPoint, Qt, QTimer
from PySide6.QtGui import QAction, QActionGroup, QCloseEvent, QKeySequence
from PySide6.QtWidgets import (
    QApplication,
    QDockWidget,
    QFileDialog,
    QLabel,
    QMainWindow,
    QMenu,
    QMessageBox,
    QProgressBar,
    QWidget,
)

from editor import settings as app_settings
from editor.attach_dialog import AttachDialog, AttachPanel
from editor.backend_choice import EMBEDDED_TITLE, BackendChoice
from editor.backends_dialog import open_backends_dialog
from editor.bypass import install_bypass
from editor.canvas import Canvas, add_action, context_menu
from editor.canvas.arrange import install_arrange
from editor.canvas.comments import add_comments, install_comments
from editor.canvas.minimap import install_minimap
from editor.commands import (
    MacroCommand,
    SetAgentFieldCommand,
    SetExitCommand,
    add_nodes,
    disconnect,
    remove_comments,
    remove_nodes,
)
from editor.docks.conversation.dock import ConversationDock
from editor.docks.palette.dock import PaletteDock
from editor.docks.problems.dock import ProblemsDock
from editor.docks.properties.dock import PropertiesDock
from editor.docks.raw_json.dock import RawJsonDock
from editor.docks.tests.dock import TestsDock
from editor.docks.turn_inspector.dock import TurnInspectorDock
from editor.docks.undo_history.dock import UndoHistoryDock
from editor.docks.vram_estimator.dock import VramEstimatorDock
from editor.document import Document
from editor.garbage import collect_on_the_ui_thread
from editor.help_menu import fill_help_menu
from editor.node_find import NodeFind
from editor.node_types import categories
from editor.recovery import Autosave, offer_left_behind, tell_lone_crashes, what_crashed
from editor.runtime_worker import InspectedTurn, LiveConversation
from editor.sample_model_download import (
    SAMPLE_MODEL_SIZE,
    DownloadReactions,
    SampleModelDownload,
    open_models_folder,
    with_copy_hint,
)
from editor.server_attach import ServerAddress, ServerAttach
from editor.snapshot_budget import SnapshotBudgetDialog
from editor.start_page import StartPageHost, empty_agent
from editor.subgraphs import install as install_subgraphs
from editor.subgraphs import subgraph_port_counts
from editor.suite_run import SuiteRun
from editor.thread_service import SHUTDOWN_WAIT_MS
from editor.workspace import Workspace, preset_buttons
from runtime.asset.clipboard import comments_in_text, nodes_from_text, nodes_to_text, prepare_paste
from runtime.asset.file import load_asset_for_editing, save_asset
from runtime.asset.model import Asset
from runtime.asset.validation import ModelFiles, Validator
from runtime.models.folder import default_model_name
from runtime.problems import AssetError, Problem
from runtime.resources import examples_dir

if TYPE_CHECKING:
    from editor.doctor_dialog import DoctorDialog
    from runtime.crashes import CrashWatch
    from runtime.suites.report import Coverage

FILE_FILTER = "Parley assets (*.json);;All files (*)"
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
    gives ``editor.start_page.empty_agent()``: the same with one reply node."""
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
             lambda w: ConversationDock(w.conversation, w, w.download, w.backends)),
    DockSpec("TurnInspectorDock", Qt.DockWidgetArea.BottomDockWidgetArea,
             lambda w: TurnInspectorDock(w.conversation, w.highlight_turn_path, w)),
    DockSpec("RawJsonDock", Qt.DockWidgetArea.BottomDockWidgetArea,
             lambda w: RawJsonDock(w.conversation, w)),
    DockSpec("VramEstimatorDock", Qt.DockWidgetArea.RightDockWidgetArea,
             lambda w: VramEstimatorDock(w.document, w, w.conversation, w.backends)),
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
        self.start_page = StartPageHost(self)  # the central area: the canvas, or the start page in front of it
        # The window's shared services, passed to the docks that use them.
        self.backends = BackendChoice(self)  # where the agent runs (the user's settings, not the asset)
        self.conversation = LiveConversation(self.document, self, make_backend=self._backend_maker(),
                                             crash_watch=crash_watch)
        self.conversation.set_snapshot_budget(app_settings.snapshot_budget_mib())  # the designer's, from the settings
        self.download = SampleModelDownload(self)
        # Following a session of `parley serve` in the conversation's place (Backend > Attach to Server…)
        self.attach = ServerAttach(self.conversation, self)
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
        self.arrange = install_arrange(self)  # Edit > Arrange: align and distribute the selection
        self._wire()
        self.status = QLabel(self)
        self.statusBar().addPermanentWidget(self.status)
        self.download_progress = QProgressBar(self)
        self.download_progress.setRange(0, 0)  # pip reports nothing until it is done: a busy bar
        self.download_progress.setMaximumWidth(120)
        self.download_progress.setMaximumHeight(14)
        self.download_progress.setToolTip("Downloading the sample model")
        self.download_progress.hide()
        self.statusBar().addPermanentWidget(self.download_progress)
        self._download_from_menu = False
        self.download_reactions = r = DownloadReactions(self.download, self.download_progress, parent=self)
        r.running.connect(self._download_started)
        r.step.connect(self._download_progress)
        r.done.connect(self._download_finished)
        r.failed.connect(self._download_failed)
        r.refused.connect(self._download_refused)
        self.download.busy_changed.connect(self._download_busy)
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
        self.save_as_action = self._action("Save &As\u2026", self.save_as, standard_shortcuts(Key.SaveAs, "Ctrl+Shift+S"))
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
        self.start_action = self._action("Set as &Start Node", self.set_start_node, "Ctrl+Shift+Home", canvas=True)
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
        self.download_sample_action = self._action(
            "&Download Sample Model\u2026", self.download_sample_model,
            tip=f"Download the sample model ({SAMPLE_MODEL_SIZE}) into the models folder")
        self.open_models_action = self._action("&Open Models Folder", open_models_folder,
                                               tip="Show the folder the editor looks for model files in")
        self.attach_action = self._action("&Attach to Server\u2026", self.open_attach_dialog,
                                          tip="Follow a session a game runs on `parley serve`, live and read-only")
        self.take_over_action = self._action("&Take Over Session", self.take_over,
                                             tip="Copy the followed session into this window's conversation")
        self.detach_action = self._action("De&tach", self.attach.detach,
                                          tip="Stop following the session; the game's session is not changed")
        self.take_over_action.setEnabled(False)
        self.detach_action.setEnabled(False)

    def _build_menus(self) -> None:
        bar = self.menuBar()
        file_menu = bar.addMenu("&File")
        file_menu.addActions([self.new_action, self.new_window_action, self.open_action])
        self.recent_menu = file_menu.addMenu("Open &Recent")
        self.examples_menu = file_menu.addMenu("&Examples")
        for path in sorted(examples_dir().glob("*.json")):
            action = self.examples_menu.addAction(path.stem.replace("_", " ").capitalize())
            action.setData(str(path))
            action.triggered.connect(lambda _c=False, p=str(path): self.open_path(p, as_example=True))
        file_menu.addAction(self.start_page_action)
        file_menu.addSeparator()
        file_menu.addActions([self.save_action, self.save_as_action])
        file_menu.addSeparator()
        file_menu.addActions([self.close_action, self.quit_action])
        self.recent_menu.aboutToShow.connect(self._fill_recent_menu)
        self._fill_recent_menu()

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

        self.models_menu = bar.addMenu("&Models")
        self.models_menu.addActions([self.download_sample_action, self.open_models_action])

        self.backend_menu = bar.addMenu("&Backend")
        self.backend_group = QActionGroup(self)
        self.backend_group.setExclusive(True)
        self.backends_action = QAction("&Backends\u2026", self)
        self.backends_action.setStatusTip("Add, edit, remove and check the servers agents can run on")
        self.backends_action.triggered.connect(lambda _c=False: self.edit_backends())
        self.snapshot_budget_action = QAction("Cache &Snapshot Budget\u2026", self)
        self.snapshot_budget_action.setStatusTip("How much RAM the embedded backend's cache snapshots may take "
                                                 "(rewinds across a trim or a summary restore them)")
        self.snapshot_budget_action.triggered.connect(lambda _c=False: self.edit_snapshot_budget())
        self.self_test_action = QAction("Reproducibility Self-&Test\u2026", self)
        self.self_test_action.setStatusTip("Check that the chosen backend and model replay a conversation bit for "
                                           "bit, and which settings do (parley doctor)")
        self.self_test_action.triggered.connect(lambda _c=False: self.run_self_test())
        self._fill_backend_menu()

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
        # Backdrops and notes (editor/canvas/comments.py) and Bypass (editor/bypass.py), in Edit and here
        self.comment_actions = install_comments(self, edit, menu)
        self.bypass_actions = install_bypass(self, edit, menu)

    def _fill_add_menu(self, menu: QMenu, at_cursor: bool) -> None:
        for views in categories().values():
            for view in views:
                action = menu.addAction(view.label)
                action.triggered.connect(
                    lambda _c=False, t=view.type: self.canvas.add_node(
                        t, self.canvas.scene_cursor_pos() if at_cursor else None))
            menu.addSeparator()

    def _fill_recent_menu(self) -> None:
        self.recent_menu.clear()
        files = app_settings.recent_files()
        for path in files:
            there = Path(path).is_file()
            action = self.recent_menu.addAction(path if there else f"{path} (not found)")
            action.setEnabled(there)  # moved or deleted: the start page can forget it
            action.triggered.connect(lambda _c=False, p=path: self.open_path(p))
        if files:
            self.recent_menu.addSeparator()
            self.recent_menu.addAction("Clear", lambda: (app_settings.clear_recent_files(), self._fill_recent_menu()))
        self.recent_menu.setEnabled(bool(files))

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
        tests = self.dock(TestsDock)
        tests.turn_opened.connect(self._open_test_turn)
        tests.coverage_changed.connect(self._show_coverage)
        self.conversation_dock.test_case_saved.connect(tests.refresh)
        self.backends.changed.connect(self._backend_changed)
        self.backends.profiles_changed.connect(self._fill_backend_menu)
        self.attach.changed.connect(self._attach_changed)
        self.attach.ended.connect(self._attach_ended)

    # --- the backend ----------------------------------------------------------------------------

    def _backend_maker(self):
        try:
            return self.backends.maker()
        except Exception as exc:  # noqa: BLE001 - a choice checked a moment ago; never stop the window
            self.statusBar().showMessage(f"The backend cannot be used: {exc}", 15_000)
            return None

    def _backend_changed(self) -> None:
        """The next turn (and the next test run) runs on the backend chosen now."""
        self.conversation.use_backend(self._backend_maker())
        self._fill_backend_menu()
        self.statusBar().showMessage(f"Backend: {self.backends.description}", 6000)

    def _fill_backend_menu(self) -> None:
        menu = self.backend_menu
        menu.clear()
        for action in self.backend_group.actions():
            self.backend_group.removeAction(action)
            action.deleteLater()
        entries = [(EMBEDDED_TITLE, "embedded", "Run the agent on this computer (llama.cpp)")]
        entries += [(p.name, p.name, p.description) for p in self.backends.profiles]
        for title, spec, tip in entries:
            action = QAction(title, self.backend_group)
            action.setCheckable(True)
            action.setChecked(spec == self.backends.spec)
            action.setStatusTip(tip)
            action.setData(spec)
            action.triggered.connect(lambda _c=False, s=spec: self.choose_backend(s))
            menu.addAction(action)
        if self.backends.load_error:
            broken = menu.addAction("(backends.json could not be read: see Backends\u2026)")
            broken.setEnabled(False)
        menu.addSeparator()
        menu.addAction(self.backends_action)
        menu.addAction(self.snapshot_budget_action)
        menu.addAction(self.self_test_action)
        menu.addSeparator()
        menu.addActions([self.attach_action, self.take_over_action, self.detach_action])

    def choose_backend(self, spec: str) -> bool:
        problem = self.backends.choose(spec)
        if problem:
            self._fill_backend_menu()  # the check mark goes back to the backend in use
            QMessageBox.warning(self, "Backend not changed", f"Cannot run on {spec}: {problem}")
            return False
        return True

    def edit_backends(self) -> bool:
        return open_backends_dialog(self.backends, self)

    def snapshot_budget_dialog(self) -> SnapshotBudgetDialog:
        """The budget dialog over this window's conversation; OK applies it to every open window."""
        windows = [w for w in QApplication.topLevelWidgets() if isinstance(w, MainWindow) and w.isVisible()]
        conversations = [w.conversation for w in dict.fromkeys([self, *windows])]
        return SnapshotBudgetDialog(self.conversation, self, conversations)

    def run_self_test(self) -> DoctorDialog:
        """Backend → Reproducibility Self-Test…: the chosen backend on the open asset's model."""
        # Imported here: it imports llama.cpp's bindings (0.1 s), not wanted while the window starts.
        from editor.doctor_dialog import open_doctor_dialog

        return open_doctor_dialog(self.backends, self.document.asset.default_model, self.document.asset_dir, self)

    def edit_snapshot_budget(self) -> bool:
        return self.snapshot_budget_dialog().exec() == SnapshotBudgetDialog.DialogCode.Accepted

    # --- following a session on a server -------------------------------------------------------

    def open_attach_dialog(self) -> AttachDialog:
        """Backend > Attach to Server…: pick a session of a running `parley serve` to follow."""
        dialog = AttachDialog(self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.attach_requested.connect(self.attach_to)
        dialog.open()  # not exec(): the window stays live behind it
        return dialog

    def attach_to(self, address: ServerAddress, session) -> bool:
        """Follow ``session`` (a SessionOut) on the server at ``address``; False, said why, when it cannot."""
        problem = self.attach.attach(address, session)
        if problem:
            QMessageBox.warning(self, "Not attached", problem)
            return False
        self.conversation_dock.show()
        self.conversation_dock.raise_()
        return True

    def take_over(self) -> bool:
        problem = self.attach.take_over()
        if problem:
            self.statusBar().showMessage(problem, 10_000)
        return not problem

    def highlight_turn_path(self, node_ids: list[str]) -> None:
        """The Turn Inspector's path marks, but none from a followed session that runs another asset."""
        self.canvas.highlight_path(node_ids if self.attach.draws_paths() else [])

    def _attach_changed(self) -> None:
        attached, mismatch = self.attach.attached, bool(self.attach.mismatch)
        dock = self.conversation_dock
        # Only when that changes: the dock redraws the chat, which would drop a turn streaming in.
        if attached and (not dock.read_only or mismatch != (dock.follow_asset is not None)):
            # another asset's session: its nodes go by their ids, not by this document's titles
            dock.set_read_only("this conversation is followed on a server (Take over to talk here)",
                               self.attach_panel, Asset() if mismatch else None)
        elif not attached and dock.read_only:
            dock.set_read_only("")
        self.take_over_action.setEnabled(attached and not self.attach.mismatch)
        self.detach_action.setEnabled(attached)
        self.attach_action.setEnabled(not attached)
        if attached and self.attach.mismatch:
            self.canvas.highlight_path([])

    def _attach_ended(self, why: str) -> None:
        self.statusBar().showMessage(why, 10_000)

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
        """Models > Download Sample Model: fetch it on a background thread; the status bar shows how it goes."""
        if not self.download_reactions.ask():
            return False
        self._download_from_menu = True
        return True

    def _download_refused(self, sentence: str) -> None:
        self.statusBar().showMessage(sentence, 5000)

    def _download_busy(self, busy: bool) -> None:
        self.download_sample_action.setEnabled(not busy)

    def _download_started(self) -> None:
        self.statusBar().showMessage(f"Downloading the sample model ({SAMPLE_MODEL_SIZE})\u2026")

    def _download_progress(self, message: str) -> None:
        self.statusBar().showMessage(f"Sample model: {message}")

    def _download_finished(self, path: str) -> None:
        self._download_from_menu = False
        self.statusBar().showMessage(f"The sample model is ready: {path}", 10_000)
        # The model names that were missing resolve now: check the graph and estimate again.
        self._after_edit()
        self.dock(VramEstimatorDock).update_estimate()

    def _download_failed(self, message: str, cancelled: bool) -> None:
        from_menu, self._download_from_menu = self._download_from_menu, False
        self.statusBar().showMessage("The sample model download stopped." if cancelled
                                     else "The sample model could not be downloaded.", 10_000)
        if cancelled or not from_menu:
            return  # the Conversation dock shows its own offer's errors
        box = QMessageBox(QMessageBox.Icon.Warning, "Sample model not downloaded",
                          "The sample model could not be downloaded.", QMessageBox.StandardButton.Ok, self)
        box.setInformativeText(with_copy_hint(message))
        box.setObjectName("download_failed")
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        open_button = box.addButton("Open Models Folder", QMessageBox.ButtonRole.ActionRole)
        open_button.clicked.connect(lambda _c=False: open_models_folder())
        box.open()  # not exec(): the window stays live behind it

    # --- title and problems ---------------------------------------------------------------------

    def _update_title(self, *_ignored: object) -> None:
        doc = self.document
        name = Path(doc.path).name if doc.path else "Untitled"
        self.setWindowTitle(f"{name}[*] \u2014 {doc.asset.name} \u2014 Parley Studio")
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
        """Ask what to do with unsaved changes; False means the person cancelled."""
        if not self.document.modified:
            return True
        name = Path(self.document.path).name if self.document.path else "Untitled"
        answer = QMessageBox.question(
            self, "Unsaved changes", f"Save the changes to {name} before closing it?",
            QMessageBox.StandardButton.Save | QMessageBox.StandardButton.Discard | QMessageBox.StandardButton.Cancel,
            QMessageBox.StandardButton.Save,
        )
        if answer == QMessageBox.StandardButton.Save:
            return self.save()
        return answer == QMessageBox.StandardButton.Discard

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
        """File > New: an agent with one reply node (``empty_agent``), never an error; False if cancelled."""
        if not self.maybe_save():
            return False
        self.set_asset(empty_agent())
        return True

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
        start = str(Path(self.document.path).parent) if self.document.path else ""
        path, _ = QFileDialog.getOpenFileName(self, "Open asset", start, FILE_FILTER)
        if path:
            self.open_path(path)

    def open_path(self, path: str, as_example: bool = False) -> bool:
        """Open an asset. A file the model refuses values of opens repaired
        (``load_asset_for_editing``), with each repair in the Problems dock and the document marked
        modified, so the file changes only when the designer saves. A file that cannot be read as an
        asset at all is refused: its errors go to the Problems dock and the current asset stays."""
        if not self.maybe_save():
            return False
        started = time.perf_counter()
        try:
            opened = load_asset_for_editing(path)
        except AssetError as exc:
            self.load_problems = list(exc.problems)
            self._show_problems()
            self.problems_dock.raise_()
            self.statusBar().showMessage(f"Could not open {path}: see Problems", 8000)
            return False
        # An example opens as a new, unsaved asset, so saving never overwrites the shipped file.
        # An example keeps its folder: its behaviours and files are found there until it is saved elsewhere.
        self.set_asset(opened.asset, "" if as_example else str(Path(path).resolve()), modified=bool(opened.problems),
                       folder=str(Path(path).resolve().parent))
        if not as_example:
            self._fill_recent_menu_after(path)
        if opened.problems:
            self.load_problems = list(opened.problems)
            self._show_problems()
            self.problems_dock.raise_()
            count = len(opened.problems)
            self.statusBar().showMessage(
                f"Opened {path} with {count} value{'s' if count != 1 else ''} changed to open it: see Problems. "
                "The file is unchanged until you save.", 15_000)
            return True
        self.statusBar().showMessage(f"Opened {path} in {1000 * (time.perf_counter() - started):.0f} ms", 5000)
        return True

    def _fill_recent_menu_after(self, path: str) -> None:
        app_settings.add_recent_file(path)
        self._fill_recent_menu()

    def save(self) -> bool:
        if not self.document.path:
            return self.save_as()
        return self.save_to(self.document.path)

    def save_as(self) -> bool:
        suggested = self.document.path or f"{self.document.asset.name.lower().replace(' ', '_')}.json"
        path, _ = QFileDialog.getSaveFileName(self, "Save asset", suggested, FILE_FILTER)
        if not path:
            return False
        if not path.endswith(".json"):
            path += ".json"
        return self.save_to(path)

    def save_to(self, path: str) -> bool:
        try:
            save_asset(self.document.asset, path)
        except OSError as exc:
            QMessageBox.critical(self, "Save failed", f"Could not save {path}:\n{exc.strerror or exc}\n"
                                 "Nothing was lost: the asset is still open. Choose another place with Save As.")
            return False
        self.document.set_path(str(Path(path).resolve()))
        self.document.undo_stack.setClean()
        self.load_problems = []  # the file now holds what the editor shows
        self.autosave.save_now()  # the asset needs no keeping now; the conversation may
        self._fill_recent_menu_after(path)
        self._after_edit()
        self._update_title()
        self.statusBar().showMessage(f"Saved {path}", 4000)
        return True

    def offer_recovery(self) -> bool:
        """Offer back what a crash left (every recovery file, in one question, saying what crashed); True
        if one was opened: its graph, and its conversation continued in the Conversation dock with the
        line that was being said back in the box."""
        folder = app_settings.recovery_dir()
        told = tell_lone_crashes(folder)
        if told:
            self.statusBar().showMessage(told, 15_000)
        found = offer_left_behind(self, folder)
        if found is None:
            return False
        self.set_asset(found.asset, found.original_path, modified=found.modified, folder=found.folder)
        found.forget()
        if found.conversation is not None or found.line:
            self.conversation_dock.continue_from(found.conversation, found.line, what_crashed(found))
        self.autosave.save_now()
        return True

    # --- editing --------------------------------------------------------------------------------

    def copy(self) -> None:
        """Edit > Copy: the selected nodes and comments (a selected backdrop brings the nodes inside it)."""
        ids, comments = self.comment_actions.selection()
        if ids or comments:
            QApplication.clipboard().setText(nodes_to_text([self.document.node(i) for i in ids], comments))

    def cut(self) -> None:
        ids, comments = self.comment_actions.selection()
        if ids or comments:
            self.copy()
            command = remove_nodes(self.document, ids)
            remove_comments(self.document, [c.id for c in comments], command)
            command.setText(f"Cut {_things(len(ids), len(comments))}")
            self.document.push(command)

    def paste(self) -> None:
        self.paste_text(QApplication.clipboard().text(), None)

    def paste_text(self, text: str, pos: tuple[float, float] | None) -> list[str]:
        """Paste nodes (and comments) from JSON text; returns the new node ids. Bad text is reported,
        nothing changes."""
        try:
            nodes = nodes_from_text(text)
            comments = comments_in_text(text)
        except AssetError as exc:
            first = exc.problems[0]
            self.statusBar().showMessage(f"Nothing pasted: {first.where.lstrip(':')}: {first.message}", 8000)
            return []
        if not nodes and not comments:
            return []
        if pos is None:
            # beside the originals, never on top of them
            offset = self.canvas.clear_offset(nodes) if nodes else (40.0, 40.0)
        else:
            left = min(p.position[0] for p in [*nodes, *comments])
            top = min(p.position[1] for p in [*nodes, *comments])
            offset = (pos[0] - left, pos[1] - top)
        pasted = prepare_paste(nodes, set(self.document.asset.node_ids()), offset)
        command = add_nodes(self.document, pasted, f"Paste {_things(len(pasted), len(comments))}")
        comment_ids = add_comments(self.document, comments, offset, command)
        if pasted and not self.document.asset.start_node:
            SetAgentFieldCommand(self.document, "start_node", "", pasted[0].id, command)
        self.document.push(command)
        ids = [n.id for n in pasted]
        self.canvas.select(ids)
        self.canvas.comments.select(comment_ids, add=True)
        return ids

    def duplicate(self) -> list[str]:
        ids, comments = self.comment_actions.selection()
        if not ids and not comments:
            return []
        originals = [self.document.node(i) for i in ids]
        offset = self.canvas.clear_offset(originals) if originals else (40.0, 40.0)
        pasted = prepare_paste(originals, set(self.document.asset.node_ids()), offset)
        command = add_nodes(self.document, pasted, f"Duplicate {_things(len(pasted), len(comments))}")
        comment_ids = add_comments(self.document, comments, offset, command)
        self.document.push(command)
        new_ids = [n.id for n in pasted]
        self.canvas.select(new_ids)
        self.canvas.comments.select(comment_ids, add=True)
        return new_ids

    def delete_selected(self) -> None:
        """Edit > Delete: the selected nodes and comments (a backdrop's nodes stay), or else the selected
        connections (their exits then end the turn). A marquee also catches pipes that merely cross it,
        so with nodes selected only the nodes (and the exits into them) go."""
        doc = self.document
        ids = self.canvas.selected_ids()
        comment_ids = self.canvas.comments.selected_ids()
        if ids or comment_ids:
            command = remove_nodes(doc, ids) if ids else remove_comments(doc, comment_ids)
            if ids and comment_ids:
                remove_comments(doc, comment_ids, command)
                command.setText(f"Delete {_things(len(ids), len(comment_ids))}")
            doc.push(command)
            return
        exits, start = self.canvas.selected_connections()
        command = disconnect(doc, exits, start)
        if command.parts:
            (only, *more) = command.parts
            if more:
                command.setText(f"Delete {len(command.parts)} connections")
            elif isinstance(only, SetExitCommand):
                command.setText(f"Disconnect {only.node_id}.{only.port}")
            else:
                command.setText("Disconnect the start node")
            doc.push(command)

    def set_start_node(self) -> None:
        ids = self.canvas.selected_ids()
        doc = self.document
        if len(ids) == 1 and ids[0] != doc.asset.start_node:
            command = MacroCommand(f"Start at {ids[0]}")
            SetAgentFieldCommand(doc, "start_node", doc.asset.start_node, ids[0], command)
            doc.push(command)

    # --- window state ---------------------------------------------------------------------------

    def _restore_layout(self) -> None:
        store = app_settings.app_settings()
        geometry = store.value("window/geometry")
        if isinstance(geometry, QByteArray):
            self.restoreGeometry(geometry)
        else:
            self.resize(1400, 860)
        # one saved arrangement per workspace preset (editor/workspace.py), not one for the window
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
        self.download.shutdown()
        self.suite_run.shutdown(SHUTDOWN_WAIT_MS)  # stops a test run and its thread
        doctor = sys.modules.get("editor.doctor_dialog")  # no self-test window was opened unless it is imported
        for dialog in self.findChildren(doctor.DoctorDialog) if doctor else ():
            dialog.run.shutdown()  # a self-test stops with its window
        self.conversation_dock.stop_voice()
        self.statusBar().clearMessage()  # stops the message's timer with the window
        event.accept()


def _things(nodes: int, comments: int) -> str:
    """'2 nodes', '1 node and 1 comment', '3 comments': what an edit of nodes and comments changed."""
    parts = [f"{n} {word}{'' if n == 1 else 's'}" for n, word in ((nodes, "node"), (comments, "comment")) if n]
    return " and ".join(parts) or "0 nodes"


# Windows opened with File > New Window stay alive while they are open.
_open_windows: list[MainWindow] = []
