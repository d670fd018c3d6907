"""Backend > Attach to Server…: pick a session of a running ``parley serve`` to follow, and the panel
the Conversation dock shows while one is followed.

The dialog remembers the last address in the editor's settings. It also lists the servers running on
this computer (each ``parley serve`` announces its address while it serves: ``runtime.serve.running``),
so one started with ``--port 0`` is found without its port typed in: the latest started is offered
first, unless the remembered address is one of them or is another computer's. The token is never saved
(nor offered to be): it is a secret of the server's, typed again each time the editor starts, and kept
in memory only while the window follows the session.
"""

from __future__ import annotations

import html
import time
from pathlib import PurePath
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from editor import settings as app_settings
from editor.session.follow import (
    DEFAULT_ADDRESS,
    ServerAddress,
    ServerAttach,
    error_text,
    server_address,
)
from editor.threads.thread_job import ThreadJob

if TYPE_CHECKING:  # the window imports this module as it starts; runtime.serve is for when it attaches
    from runtime.serve.protocol import Health, SessionOut
    from runtime.serve.running import RunningServer

ADDRESS_KEY = "attach/address"
ERROR_STYLE = "color: #ff8080;"
LIST_TIMEOUT_S = 5.0  # listing is quick on a server that is there; one that is not should say so soon
COLUMNS = ("Session", "Asset", "Turns", "Busy")


def last_address() -> str:
    value = app_settings.app_settings().value(ADDRESS_KEY, "")
    return str(value) if value else ""


def local_servers() -> list[RunningServer]:
    """The ``parley serve`` servers running on this computer, the latest started first."""
    from runtime.serve.running import running_servers

    return running_servers()


def _is_local(url: str) -> bool:
    try:
        host = urlsplit(url if "://" in url else f"http://{url}").hostname or ""
    except ValueError:
        return False
    return host in ("localhost", "127.0.0.1", "::1") or host.startswith("127.")


def first_address(remembered: str, found: list[RunningServer]) -> str:
    """The address the dialog opens with: the remembered one when a server runs there or it is another
    computer's; else the latest server started here (its port may be any: ``--port 0``); else the
    remembered one, else parley serve's default."""
    urls = [s.url for s in found]
    if remembered and (remembered in urls or not _is_local(remembered)):
        return remembered
    return urls[0] if urls else remembered or DEFAULT_ADDRESS


def server_text(server: RunningServer) -> str:
    """How the list of local servers names one: its address, what it serves, since when."""
    folders = ", ".join(PurePath(p).name or p for p in server.assets) or "?"
    since = time.strftime("%H:%M", time.localtime(server.started))
    token = " \u00b7 wants a token" if server.wants_token else ""
    return f"{server.url}  \u2014  assets {folders} \u00b7 started {since}{token}"


def remember_address(url: str) -> None:
    store = app_settings.app_settings()
    store.setValue(ADDRESS_KEY, url)
    store.sync()


class AttachDialog(QDialog):
    """The server's address and token, its sessions (id, asset, turns, busy), and Attach."""

    attach_requested = Signal(object, object)  # ServerAddress, SessionOut: the designer's pick, on Attach
    listed = Signal(bool)  # a listing ended: whether the server answered with its sessions

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("attach_dialog")
        self.setWindowTitle("Attach to Server")
        self.setMinimumWidth(560)
        self.request: ThreadJob | None = None  # listing the sessions, while it runs
        self.sessions: list[SessionOut] = []
        self.listed_address: ServerAddress | None = None  # where the sessions shown came from
        layout = QVBoxLayout(self)
        intro = QLabel("Follow a session a game runs on <tt>parley serve</tt>: its turns appear here as they "
                       "happen, read-only. Take over copies it into this window to go on from any turn.", self)
        intro.setWordWrap(True)
        layout.addWidget(intro)

        form = QFormLayout()
        self.found = local_servers()
        self.running_here = QComboBox(self)
        self.running_here.setObjectName("attach_running_here")
        self.running_here.setToolTip("The parley serve servers running on this computer, found by the address "
                                     "each announces while it serves (whatever port it took, --port 0 too)")
        for server in self.found:
            self.running_here.addItem(server_text(server), server.url)
        self.running_here.activated.connect(self._pick_running)
        row = QHBoxLayout()
        self.address = QLineEdit(first_address(last_address(), self.found), self)
        self.address.setObjectName("attach_address")
        self.address.setToolTip("What `parley serve` printed when it started: http://HOST:PORT")
        self.address.returnPressed.connect(self.list_sessions)
        row.addWidget(self.address, 1)
        self.list_button = QPushButton("List Sessions", self)
        self.list_button.setAutoDefault(False)
        self.list_button.clicked.connect(lambda _c=False: self.list_sessions())
        row.addWidget(self.list_button)
        form.addRow("Server", row)
        if self.found:
            form.addRow("Running here", self.running_here)
        else:
            self.running_here.hide()
        self.token = QLineEdit(self)
        self.token.setObjectName("attach_token")
        self.token.setEchoMode(QLineEdit.EchoMode.Password)
        self.token.setPlaceholderText("only if the server was started with a token")
        self.token.setToolTip("Sent as \u201cAuthorization: Bearer\u201d on every request. Never saved: type it "
                              "again after restarting the editor.")
        self.token.returnPressed.connect(self.list_sessions)
        form.addRow("Token", self.token)
        layout.addLayout(form)

        self.table = QTableWidget(0, len(COLUMNS), self)
        self.table.setObjectName("attach_sessions")
        self.table.setHorizontalHeaderLabels(list(COLUMNS))
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().hide()
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(2, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(3, QHeaderView.ResizeMode.ResizeToContents)
        self.table.itemSelectionChanged.connect(self._enable_attach)
        self.table.doubleClicked.connect(lambda _index: self.accept())
        layout.addWidget(self.table, 1)

        self.status = QLabel(self)
        self.status.setObjectName("attach_status")
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        # room for two lines: a wrapped label does not grow a dialog already shown
        self.status.setMinimumHeight(2 * self.status.fontMetrics().lineSpacing() + 4)
        self.status.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
        layout.addWidget(self.status)

        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel, self)
        self.attach_button = self.buttons.addButton("Attach", QDialogButtonBox.ButtonRole.AcceptRole)
        self.attach_button.setEnabled(False)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        layout.addWidget(self.buttons)
        shown = self.running_here.findData(self.address.text())
        if shown >= 0:
            self.running_here.setCurrentIndex(shown)
        self.set_status("List the server's sessions, pick one, then Attach." if self.found else
                        "No parley serve is running on this computer; type a server's address (what "
                        "`parley serve` printed when it started), then List Sessions.")

    def _pick_running(self, index: int) -> None:
        """A server running here was picked: its address, and its sessions listed."""
        url = self.running_here.itemData(index)
        if url:
            self.address.setText(str(url))
            self.list_sessions()

    def set_status(self, text: str, error: bool = False) -> None:
        self.status.setStyleSheet(ERROR_STYLE if error else "")
        self.status.setText(text)

    # --- listing ----------------------------------------------------------------------------------

    def list_sessions(self) -> bool:
        """Ask the server for its sessions on a thread of its own (``listed`` says how it went). False
        when the address is not one (said in the dialog) or a listing is still running."""
        if self.request is not None:
            return False
        try:
            url = server_address(self.address.text())
        except ValueError as exc:
            self.set_status(str(exc), error=True)
            return False
        address = ServerAddress(url, self.token.text().strip())

        def work() -> tuple[Health, list[SessionOut]]:
            with address.client(LIST_TIMEOUT_S) as client:
                return client.health(), client.sessions()

        self.set_status(f"Asking {url} for its sessions\u2026")
        self.list_button.setEnabled(False)
        job = self.request = ThreadJob(work, name="parley-server-request", exit_wait_ms=None, parent=self)
        job.finished.connect(lambda: self._listed(address, job.result, job.error))
        job.start()
        return True

    def _listed(self, address: ServerAddress, result: object, error: object) -> None:
        request, self.request = self.request, None
        if request is not None:
            request.deleteLater()
        self.list_button.setEnabled(True)
        if error is not None or not isinstance(result, tuple):
            self._fill([])
            self.set_status(error_text(error, address.url) if isinstance(error, Exception) else "No answer.",
                            error=True)
            self.listed.emit(False)
            return
        health, sessions = result
        self.listed_address = address
        self._fill(sessions)
        count = len(sessions)
        if count:
            self.set_status(f"{address.url} runs {count} session{'s' if count != 1 else ''} on {health.backend}. "
                            "Pick one to follow.")
        else:
            self.set_status(f"{address.url} answers ({health.backend}) but runs no session yet: start the game "
                            "(or POST /v1/sessions), then List Sessions again.")
        self.listed.emit(True)

    def _fill(self, sessions: list[SessionOut]) -> None:
        self.sessions = list(sessions)
        self.table.setRowCount(len(sessions))
        for row, session in enumerate(sessions):
            cells = (session.id, f"{session.asset}  \u2014  {session.asset_name}", str(session.turns),
                     "busy" if session.busy else "")
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if column in (2, 3):
                    item.setTextAlignment(Qt.AlignmentFlag.AlignCenter)
                item.setToolTip(f"{session.id}: {session.asset} (\u201c{session.asset_name}\u201d) on {session.backend}")
                self.table.setItem(row, column, item)
        if sessions:
            self.table.selectRow(0)
        self._enable_attach()

    # --- picking ----------------------------------------------------------------------------------

    def pick(self, session_id: str) -> bool:
        """Select the listed session ``session_id``; whether it is listed."""
        for row, session in enumerate(self.sessions):
            if session.id == session_id:
                self.table.selectRow(row)
                return True
        return False

    def chosen(self) -> SessionOut | None:
        rows = self.table.selectionModel().selectedRows()
        return self.sessions[rows[0].row()] if rows and rows[0].row() < len(self.sessions) else None

    def _enable_attach(self) -> None:
        self.attach_button.setEnabled(self.chosen() is not None and self.listed_address is not None)

    def accept(self) -> None:
        session, address = self.chosen(), self.listed_address
        if session is None or address is None:
            self.set_status("List the server's sessions and pick one first.", error=True)
            return
        remember_address(address.url)  # the address only: the token is never saved
        self.attach_requested.emit(address, session)
        super().accept()

    def done(self, result: int) -> None:
        if self.request is not None:
            self.request.stop(None)  # each request ends within its timeout
        super().done(result)


class AttachPanel(QFrame):
    """Above the chat while a session is followed: which one, where, how it goes, and Take over / Detach."""

    def __init__(self, attach: ServerAttach, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.attach = attach
        self.setObjectName("attach_panel")
        self.setStyleSheet("QFrame#attach_panel { background: #1c3346; border-radius: 3px; }")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 4)
        layout.setSpacing(2)
        self.label = QLabel(self)
        self.label.setWordWrap(True)
        self.label.setTextFormat(Qt.TextFormat.RichText)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.label)
        self.mismatch_label = QLabel(self)
        self.mismatch_label.setObjectName("attach_mismatch")
        self.mismatch_label.setWordWrap(True)
        self.mismatch_label.setStyleSheet("color: #e5c07b;")
        self.mismatch_label.hide()
        layout.addWidget(self.mismatch_label)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        self.take_over_button = QPushButton("Take over", self)
        self.take_over_button.setToolTip("Copy the session into this window's conversation, to go on, regenerate "
                                         "or replay from any turn here. The game's session is not changed.")
        self.take_over_button.clicked.connect(lambda _c=False: self.take_over())
        self.detach_button = QPushButton("Detach", self)
        self.detach_button.setToolTip("Stop following. The game's session goes on, untouched; this window's own "
                                      "conversation comes back.")
        self.detach_button.clicked.connect(lambda _c=False: attach.detach())
        buttons.addWidget(self.take_over_button)
        buttons.addWidget(self.detach_button)
        layout.addLayout(buttons)
        attach.changed.connect(self.refresh)
        self.refresh()

    def take_over(self) -> None:
        problem = self.attach.take_over()
        if problem:
            self.attach.status = problem
            self.refresh()

    def refresh(self) -> None:
        attach, session = self.attach, self.attach.session
        if session is None or attach.address is None:
            self.label.setText("")
            self.mismatch_label.hide()
            return
        where = html.escape(attach.address.url)
        state = "Following" if attach.following else "Attached to"
        self.label.setText(
            f"<b>{state} <tt>{html.escape(session.id)}</tt></b> via server {where} &nbsp;"
            f"<span style='color:#9a9a9a'>{html.escape(session.asset)} \u00b7 {html.escape(session.asset_name)} "
            f"\u00b7 {html.escape(session.backend)}</span><br/>{html.escape(attach.status)}"
            + "".join(f"<br/><span style='color:#e5c07b'>\u26a0 {html.escape(n)}</span>" for n in attach.notes))
        self.mismatch_label.setText(f"\u26a0 {attach.mismatch}" if attach.mismatch else "")
        self.mismatch_label.setVisible(bool(attach.mismatch))
        self.take_over_button.setEnabled(attach.request is None and not attach.mismatch)
