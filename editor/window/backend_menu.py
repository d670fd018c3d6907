"""The window's Backend menu: where the agent runs (this computer or a saved server), Backends…, the
cache snapshot budget, the reproducibility self-test, and following a session of `parley serve`
(Attach to Server…, Take Over Session, Detach)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Qt
from PySide6.QtGui import QAction, QActionGroup
from PySide6.QtWidgets import QApplication, QMenu, QMenuBar, QMessageBox

from editor.dialogs.attach import AttachDialog
from editor.dialogs.backends import open_backends_dialog
from editor.dialogs.snapshot_budget import SnapshotBudgetDialog
from editor.services.backend_choice import BUILT_IN
from editor.session.follow import ServerAddress
from runtime.asset.model import Asset

if TYPE_CHECKING:
    from editor.dialogs.doctor import DoctorDialog
    from editor.window.main_window import MainWindow


class BackendMenu(QObject):
    """The Backend menu of ``window`` and what its entries do; ``menu`` is the QMenu in the menu bar."""

    def __init__(self, window: MainWindow, bar: QMenuBar) -> None:
        super().__init__(window)
        self.window = window
        self.backends = window.backends
        self.attach = window.attach
        self.menu: QMenu = bar.addMenu("&Backend")
        self.group = QActionGroup(self)
        self.group.setExclusive(True)
        self.backends_action = QAction("&Backends\u2026", window)
        self.backends_action.setStatusTip("Add, edit, remove and check the servers agents can run on")
        self.backends_action.triggered.connect(lambda _c=False: self.edit_backends())
        self.snapshot_budget_action = QAction("Cache &Snapshot Budget\u2026", window)
        self.snapshot_budget_action.setStatusTip("How much RAM the embedded backend's cache snapshots may take "
                                                 "(rewinds across a trim or a summary restore them)")
        self.snapshot_budget_action.triggered.connect(lambda _c=False: self.edit_snapshot_budget())
        self.self_test_action = QAction("Reproducibility Self-&Test\u2026", window)
        self.self_test_action.setStatusTip("Check that the chosen backend and model replay a conversation bit for "
                                           "bit, and which settings do (parley doctor)")
        self.self_test_action.triggered.connect(lambda _c=False: self.run_self_test())
        self.attach_action = window._action("&Attach to Server\u2026", self.open_attach_dialog,
                                            tip="Follow a session a game runs on `parley serve`, live and read-only")
        self.take_over_action = window._action("&Take Over Session", self.take_over,
                                               tip="Copy the followed session into this window's conversation")
        self.detach_action = window._action("De&tach", self.attach.detach,
                                            tip="Stop following the session; the game's session is not changed")
        self.take_over_action.setEnabled(False)
        self.detach_action.setEnabled(False)
        self.fill()
        # Bound methods, not lambdas: Qt drops a connection to a method when its object is deleted.
        self.backends.changed.connect(self._backend_changed)
        self.backends.profiles_changed.connect(self.fill)
        self.attach.changed.connect(self._attach_changed)
        self.attach.ended.connect(self._attach_ended)

    # --- the backend ----------------------------------------------------------------------------

    def _backend_changed(self) -> None:
        """The next turn (and the next test run) runs on the backend chosen now."""
        self.window.conversation.use_backend(self.window._backend_maker())
        self.fill()
        self.window.statusBar().showMessage(f"Backend: {self.backends.description}", 6000)

    def fill(self) -> None:
        menu = self.menu
        menu.clear()
        for action in self.group.actions():
            self.group.removeAction(action)
            action.deleteLater()
        entries = list(BUILT_IN)  # the embedded runtime, and the scripted backend (no model: wiring)
        entries += [(p.name, p.name, p.description) for p in self.backends.profiles]
        for title, spec, tip in entries:
            action = QAction(title, self.group)
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
            self.fill()  # the check mark goes back to the backend in use
            QMessageBox.warning(self.window, "Backend not changed", f"Cannot run on {spec}: {problem}")
            return False
        return True

    def edit_backends(self) -> bool:
        return open_backends_dialog(self.backends, self.window)

    def snapshot_budget_dialog(self) -> SnapshotBudgetDialog:
        """The budget dialog over this window's conversation; OK applies it to every open window."""
        from editor.window.main_window import MainWindow

        windows = [w for w in QApplication.topLevelWidgets() if isinstance(w, MainWindow) and w.isVisible()]
        conversations = [w.conversation for w in dict.fromkeys([self.window, *windows])]
        return SnapshotBudgetDialog(self.window.conversation, self.window, conversations)

    def run_self_test(self) -> DoctorDialog:
        """Backend → Reproducibility Self-Test…: the chosen backend on the open asset's model."""
        # Imported here: it imports llama.cpp's bindings (0.1 s), not wanted while the window starts.
        from editor.dialogs.doctor import open_doctor_dialog

        doc = self.window.document
        return open_doctor_dialog(self.backends, doc.asset.default_model, doc.asset_dir, self.window)

    def edit_snapshot_budget(self) -> bool:
        return self.snapshot_budget_dialog().exec() == SnapshotBudgetDialog.DialogCode.Accepted

    # --- following a session on a server -------------------------------------------------------

    def open_attach_dialog(self) -> AttachDialog:
        """Backend > Attach to Server…: pick a session of a running `parley serve` to follow."""
        dialog = AttachDialog(self.window)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.attach_requested.connect(self.attach_to)
        dialog.open()  # not exec(): the window stays live behind it
        return dialog

    def attach_to(self, address: ServerAddress, session) -> bool:
        """Follow ``session`` (a SessionOut) on the server at ``address``; False, said why, when it cannot."""
        problem = self.attach.attach(address, session)
        if problem:
            QMessageBox.warning(self.window, "Not attached", problem)
            return False
        self.window.conversation_dock.show()
        self.window.conversation_dock.raise_()
        return True

    def take_over(self) -> bool:
        problem = self.attach.take_over()
        if problem:
            self.window.statusBar().showMessage(problem, 10_000)
        return not problem

    def _attach_changed(self) -> None:
        attached, mismatch = self.attach.attached, bool(self.attach.mismatch)
        dock = self.window.conversation_dock
        # Only when that changes: the dock redraws the chat, which would drop a turn streaming in.
        if attached and (not dock.read_only or mismatch != (dock.follow_asset is not None)):
            # another asset's session: its nodes go by their ids, not by this document's titles
            dock.set_read_only("this conversation is followed on a server (Take over to talk here)",
                               self.window.attach_panel, Asset() if mismatch else None)
        elif not attached and dock.read_only:
            dock.set_read_only("")
        self.take_over_action.setEnabled(attached and not self.attach.mismatch)
        self.detach_action.setEnabled(attached)
        self.attach_action.setEnabled(not attached)
        if attached and self.attach.mismatch:
            self.window.canvas.highlight_path([])

    def _attach_ended(self, why: str) -> None:
        self.window.statusBar().showMessage(why, 10_000)
