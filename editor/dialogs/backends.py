"""The Backends dialog: add, edit, remove and check the servers agents can run on.

Profiles are written to ``backends.json`` in the user's settings (``runtime.backends.profiles``),
shared with ``parley --backend``; never to an asset. An API key is never saved: a profile names the
environment variable that holds it. "Check connection" contacts the server on a thread of its own
and shows what answered (its label) or why nothing did.
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import ValidationError
from pydantic_core import ErrorDetails
from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from editor.services.backend_choice import BackendChoice, problems_text
from editor.threads.thread_service import OneRunService
from runtime.backends.http import Cancelled, cancel_scope, display_url
from runtime.backends.profiles import (
    KIND_LABELS,
    MAX_CONTEXT_SIZE,
    MAX_TIMEOUT_S,
    BackendProfile,
    load_profiles,
    make_backend,
    profiles_path,
    save_profiles,
)
from runtime.files.located import Place, located_problems
from runtime.problems import BackendError, InputError

CHECK_TIMEOUT_S = 10.0  # the longest wait for the server's next byte while checking
ERROR_STYLE = "color: #ff8080;"
FIELDS = ("name", "kind", "url", "api_key_env", "model", "context_size", "timeout")


# --- checking a connection (off the UI thread) ----------------------------------------------------


def _check(profile: BackendProfile, cancel: threading.Event) -> tuple[bool, str]:
    """Contact the server ``profile`` names: whether it answered, and its label or the error."""
    try:
        backend = make_backend(profile)
        try:
            with cancel_scope(cancel):  # closing the dialog ends the check at once
                backend.load_model("")  # asks the server what it is (/props, /v1/models)
            label = backend.label
        finally:
            backend.close()
    except Cancelled:
        return False, "the check was stopped"
    except BackendError as exc:
        return False, str(exc)
    except Exception as exc:  # noqa: BLE001 - any failure is the check's answer, not a crash
        return False, f"{type(exc).__name__}: {exc}"
    return True, label


class ConnectionCheck(OneRunService):
    """Contacts one server at a time on a thread of its own; ``finished`` comes on the UI thread."""

    finished = Signal(bool, str)  # reached, the backend's label or the error

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__("parley-backend-check", parent)

    def start(self, profile: BackendProfile) -> bool:
        if self.busy or self.closed:
            return False
        self._cancel.clear()
        profile = profile.model_copy(update={"timeout": min(profile.timeout, CHECK_TIMEOUT_S)})
        job = self._new_job(lambda: _check(profile, self._cancel))
        job.returned.connect(self._on_done)
        job.start()
        return True

    def _on_done(self, answer: tuple[bool, str]) -> None:
        if self.closed:
            return
        self._end()
        self.finished.emit(*answer)


# --- the dialog -----------------------------------------------------------------------------------


def _form_field(err: ErrorDetails) -> Place:
    """The form row an error shows under: its field's, else the name's (an error of the whole profile)."""
    field = str(err["loc"][0]) if err["loc"] else "name"
    return Place(field=field if field in FIELDS else "name")


def _credentials(url: str) -> str:
    """The ``user:password`` of ``url`` ("" when it has none)."""
    try:
        netloc = urlsplit(url).netloc
    except ValueError:
        return ""
    return netloc.rpartition("@")[0]


def _with_credentials(url: str, credentials: str) -> str:
    """``url`` with ``credentials`` put back before its host, unless it has its own (or is no URL)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if not parts.netloc or "@" in parts.netloc:
        return url
    return parts._replace(netloc=f"{credentials}@{parts.netloc}").geturl()


def _draft(profile: BackendProfile) -> dict[str, Any]:
    return profile.model_dump()


def _new_draft(names: set[str]) -> dict[str, Any]:
    n = 1
    while f"server-{n}" in names:
        n += 1
    return {"name": f"server-{n}", "kind": "llama-server", "url": "http://127.0.0.1:8080", "api_key_env": "",
            "model": "", "context_size": 0, "timeout": 120.0, "structured_output": "auto"}


class BackendsDialog(QDialog):
    """Edits the saved backend profiles; Save writes them all (or nothing, while a value is bad)."""

    def __init__(self, choice: BackendChoice | None = None, parent: QWidget | None = None,
                 path: Path | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Backends")
        self.setObjectName("BackendsDialog")
        self.choice = choice
        self.path = path or profiles_path()
        self.drafts: list[dict[str, Any]] = []
        self.load_error = ""
        self._filling = False
        self._saved_credentials = ""  # the shown profile's user:password, kept while its box is ticked
        try:
            self.drafts = [_draft(p) for p in load_profiles(self.path)]
        except InputError as exc:
            self.load_error = problems_text(exc)
        self.check = ConnectionCheck(self)
        self.check.finished.connect(self._checked)
        self.check.busy_changed.connect(self._check_busy)

        # Built top to bottom, in the order the widgets are made: Tab follows that order.
        layout = QVBoxLayout(self)
        self._build_intro(layout)
        body = QHBoxLayout()
        body.addLayout(self._build_profile_list())
        body.addWidget(self._build_form(), 1)
        layout.addLayout(body, 1)
        self._build_footer(layout)
        self._follow_edits()

        for draft in self.drafts:
            QListWidgetItem(draft["name"], self.list)
        if self.drafts:
            self.list.setCurrentRow(0)
        else:
            self._row_changed(-1)
        self.resize(780, 600)

    # --- building the dialog ------------------------------------------------------------------------

    def _build_intro(self, layout: QVBoxLayout) -> None:
        """Where the profiles are kept, and why none are shown when the file could not be read."""
        intro = QLabel("Servers your agents can run on, kept in your settings, never in an asset: "
                       f"<tt>{self.path}</tt>. Pick one in the Conversation dock or the Backend menu. (Scripted, "
                       "there too, needs no server: canned replies, instant, to check the wiring.)", self)
        intro.setWordWrap(True)
        intro.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(intro)
        self.file_error = QLabel(self)
        self.file_error.setObjectName("file_error")
        self.file_error.setWordWrap(True)
        self.file_error.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.file_error.setStyleSheet("QLabel#file_error { background: #3d2626; color: #ffb0b0; padding: 4px; "
                                      "border-radius: 3px; }")
        if self.load_error:
            self.file_error.setText(f"The profiles file could not be read, so no profiles are shown:\n"
                                    f"{self.load_error}\nFix the file by hand and open this dialog again, or "
                                    "add profiles here: saving then asks before it replaces the file.")
        else:
            self.file_error.hide()
        layout.addWidget(self.file_error)

    def _build_profile_list(self) -> QVBoxLayout:
        """The profiles' names, with Add and Remove under them."""
        side = QVBoxLayout()
        self.list = QListWidget(self)
        self.list.setMinimumWidth(160)
        self.list.currentRowChanged.connect(self._row_changed)
        side.addWidget(self.list, 1)
        buttons = QHBoxLayout()
        self.add_button = QPushButton("Add", self)
        self.add_button.setToolTip("A new profile")
        self.add_button.clicked.connect(lambda _c=False: self.add_profile())
        self.remove_button = QPushButton("Remove", self)
        self.remove_button.clicked.connect(lambda _c=False: self.remove_profile())
        buttons.addWidget(self.add_button)
        buttons.addWidget(self.remove_button)
        side.addLayout(buttons)
        return side

    def _build_form(self) -> QWidget:
        """The shown profile's fields, each with its error under it, then Check connection."""
        self.form_box = QWidget(self)
        form_column = QVBoxLayout(self.form_box)
        form_column.setContentsMargins(0, 0, 0, 0)
        form = self.form = QFormLayout()
        form_column.addLayout(form)
        form_column.addStretch(1)  # the rows keep their own heights; the room left goes below them
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        self.errors: dict[str, QLabel] = {}
        for field, label, editor, extra in self._build_field_editors():
            form.addRow(label, self._form_cell(field, editor, extra))
        self._build_check_rows(form)
        return self.form_box

    def _build_field_editors(self) -> list[tuple[str, str, QWidget, list[QWidget]]]:
        """The form's rows: (field, label, its editor, the notes under it)."""
        self.name_edit = QLineEdit(self)
        self.name_edit.setToolTip(BackendProfile.model_fields["name"].description)
        self.kind_combo = QComboBox(self)
        for kind, label in KIND_LABELS.items():
            self.kind_combo.addItem(label, kind)
        self.kind_combo.setToolTip(BackendProfile.model_fields["kind"].description)
        self.url_edit = QLineEdit(self)
        self.url_edit.setPlaceholderText("http://HOST:PORT")
        self.url_edit.setToolTip(BackendProfile.model_fields["url"].description)
        # An address's user:password@ is never shown: the field shows the rest, and this box keeps them.
        self.keep_credentials = QCheckBox("Keep the user name and password saved in this address (not shown)", self)
        self.keep_credentials.setChecked(True)
        self.keep_credentials.hide()
        self.key_env_edit = QLineEdit(self)
        self.key_env_edit.setPlaceholderText("none (the server needs no key)")
        self.key_env_edit.setToolTip(BackendProfile.model_fields["api_key_env"].description)
        self.key_state = QLabel(self)
        self.key_state.setWordWrap(True)
        self.model_edit = QLineEdit(self)
        self.model_edit.setPlaceholderText("the only model the server serves")
        self.model_edit.setToolTip(BackendProfile.model_fields["model"].description)
        self.context_spin = QSpinBox(self)
        self.context_spin.setRange(0, MAX_CONTEXT_SIZE)
        self.context_spin.setSingleStep(1024)
        self.context_spin.setSpecialValueText("ask the server")
        self.context_spin.setSuffix(" tokens")
        self.context_spin.setToolTip(BackendProfile.model_fields["context_size"].description)
        self.timeout_spin = QDoubleSpinBox(self)
        self.timeout_spin.setRange(1, MAX_TIMEOUT_S)
        self.timeout_spin.setDecimals(0)
        self.timeout_spin.setSuffix(" s")
        self.timeout_spin.setToolTip(BackendProfile.model_fields["timeout"].description)
        key_note = QLabel("The key itself is never saved: Parley Studio reads it from this environment variable "
                          "when it connects.", self)
        key_note.setWordWrap(True)
        key_note.setStyleSheet("color: #9a9a9a;")
        self.openai_note = QLabel("Model and context size are for OpenAI-compatible servers: a llama.cpp server "
                                  "serves the model it was started with and says its slots' size.", self)
        self.openai_note.setWordWrap(True)
        self.openai_note.setStyleSheet("color: #9a9a9a;")
        return [("name", "Name", self.name_edit, []), ("kind", "Kind", self.kind_combo, []),
                ("url", "URL", self.url_edit, [self.keep_credentials]),
                ("api_key_env", "API key variable", self.key_env_edit, [self.key_state, key_note]),
                ("model", "Model", self.model_edit, []),
                ("context_size", "Context size", self.context_spin, [self.openai_note]),
                ("timeout", "Timeout", self.timeout_spin, [])]

    def _form_cell(self, field: str, editor: QWidget, extra: list[QWidget]) -> QWidget:
        """One field's cell: its editor, its error (``errors[field]``, hidden until there is one), its notes."""
        cell = QWidget(self)
        cell_layout = QVBoxLayout(cell)
        cell_layout.setContentsMargins(0, 0, 0, 0)
        cell_layout.setSpacing(2)
        cell_layout.addWidget(editor)
        error = QLabel(cell)
        error.setObjectName(f"error_{field}")
        error.setWordWrap(True)
        error.setStyleSheet(ERROR_STYLE)
        error.hide()
        cell_layout.addWidget(error)
        for widget in extra:
            cell_layout.addWidget(widget)
        self.errors[field] = error
        return cell

    def _build_check_rows(self, form: QFormLayout) -> None:
        """Check connection, and what answered under it."""
        check_row = QHBoxLayout()
        self.check_button = QPushButton("Check connection", self)
        self.check_button.setToolTip("Contact the server now and show what answers")
        self.check_button.clicked.connect(lambda _c=False: self.check_connection())
        check_row.addWidget(self.check_button)
        check_row.addStretch(1)
        form.addRow("", check_row)
        self.check_result = QLabel(self)
        self.check_result.setWordWrap(True)
        self.check_result.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        form.addRow("", self.check_result)

    def _build_footer(self, layout: QVBoxLayout) -> None:
        """The status line, then Save and Cancel."""
        self.status = QLabel(self)
        self.status.setWordWrap(True)
        layout.addWidget(self.status)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Save | QDialogButtonBox.StandardButton.Cancel,
                                        self)
        self.buttons.accepted.connect(self.save)
        self.buttons.rejected.connect(self.reject)
        layout.addWidget(self.buttons)

    def _follow_edits(self) -> None:
        """Every change to a field goes into the shown profile's draft."""
        for edit in (self.name_edit, self.url_edit, self.key_env_edit, self.model_edit):
            edit.textEdited.connect(self._edited)
        self.kind_combo.currentIndexChanged.connect(self._edited)
        self.keep_credentials.toggled.connect(self._edited)
        self.context_spin.valueChanged.connect(self._edited)
        self.timeout_spin.valueChanged.connect(self._edited)

    # --- the profiles -------------------------------------------------------------------------------

    @property
    def row(self) -> int:
        return self.list.currentRow()

    def select(self, name: str) -> bool:
        for i, draft in enumerate(self.drafts):
            if draft["name"] == name:
                self.list.setCurrentRow(i)
                return True
        return False

    def add_profile(self) -> None:
        draft = _new_draft({d["name"] for d in self.drafts})
        self.drafts.append(draft)
        QListWidgetItem(draft["name"], self.list)
        self.list.setCurrentRow(len(self.drafts) - 1)
        self.name_edit.setFocus()
        self.name_edit.selectAll()

    def remove_profile(self) -> None:
        row = self.row
        if 0 <= row < len(self.drafts):
            del self.drafts[row]
            self.list.takeItem(row)  # moves the current row, which fills the form
            if not self.drafts:
                self._row_changed(-1)

    def _row_changed(self, row: int) -> None:
        has = 0 <= row < len(self.drafts)
        self.form_box.setEnabled(has)
        self.remove_button.setEnabled(has)
        self.check_result.setText("")
        if not has:
            self._filling = True
            for edit in (self.name_edit, self.url_edit, self.key_env_edit, self.model_edit):
                edit.clear()
            self._filling = False
            self._saved_credentials = ""
            self.keep_credentials.hide()
            self._show_errors({})
            self.key_state.setText("")
            return
        draft = self.drafts[row]
        self._filling = True
        self.name_edit.setText(draft["name"])
        self.kind_combo.setCurrentIndex(max(0, self.kind_combo.findData(draft["kind"])))
        self.url_edit.setText(display_url(draft["url"]))
        self._saved_credentials = _credentials(draft["url"])
        self.keep_credentials.setChecked(True)
        self.keep_credentials.setVisible(bool(self._saved_credentials))
        self.key_env_edit.setText(draft["api_key_env"])
        self.model_edit.setText(draft["model"])
        self.context_spin.setValue(int(draft["context_size"]))
        self.timeout_spin.setValue(float(draft["timeout"]))
        self._filling = False
        self._refresh()

    def _edited(self, *_args: object) -> None:
        row = self.row
        if self._filling or not 0 <= row < len(self.drafts):
            return
        draft = self.drafts[row]
        url = self.url_edit.text().strip()
        if self._saved_credentials and self.keep_credentials.isChecked():
            url = _with_credentials(url, self._saved_credentials)
        draft.update(name=self.name_edit.text().strip(), kind=self.kind_combo.currentData(),
                     url=url, api_key_env=self.key_env_edit.text().strip(),
                     model=self.model_edit.text().strip(), context_size=self.context_spin.value(),
                     timeout=float(self.timeout_spin.value()))
        self.list.item(row).setText(draft["name"] or "(no name)")
        self.check_result.setText("")
        self._refresh()

    def _refresh(self) -> None:
        row = self.row
        draft = self.drafts[row]
        openai = draft["kind"] == "openai"
        self.model_edit.setEnabled(openai)
        self.context_spin.setEnabled(openai)
        self.openai_note.setVisible(not openai)
        problems = self.problems(row)
        self._show_errors(problems)
        env = draft["api_key_env"]
        if not env or "api_key_env" in problems:
            self.key_state.setText("")
            self.key_state.hide()
        else:
            self.key_state.show()
            if os.environ.get(env):
                self.key_state.setText(f"\u2714 {env} is set in this editor's environment now.")
                self.key_state.setStyleSheet("color: #6fcf7f;")
            else:
                self.key_state.setText(f"\u26a0 {env} is not set in this editor's environment: turns on this backend "
                                       "fail until it is (set it, then start Parley Studio again).")
                self.key_state.setStyleSheet("color: #e5c07b;")
        self._relayout()

    def _relayout(self) -> None:
        """Wrapped notes and errors appear and go: QFormLayout keeps the old row heights unless told."""
        for label in [*self.errors.values(), self.key_state, self.openai_note, self.keep_credentials]:
            label.updateGeometry()
            parent = label.parentWidget()
            if parent is not None and parent.layout() is not None:
                parent.layout().invalidate()
                parent.updateGeometry()
        self.form.invalidate()
        # QFormLayout keeps the row heights it computed for a width until the width changes: change it
        box = self.form_box
        if box.width() > 1:
            box.resize(box.width() - 1, box.height())
            box.resize(box.width() + 1, box.height())

    def _show_errors(self, problems: dict[str, str]) -> None:
        for field, label in self.errors.items():
            message = problems.get(field, "")
            label.setText(message)
            label.setVisible(bool(message))

    # --- validation ---------------------------------------------------------------------------------

    def problems(self, row: int) -> dict[str, str]:
        """Field -> what is wrong with it, for the profile at ``row`` ({} when it is good)."""
        try:
            self.profile(row)
        except ValidationError as exc:
            out: dict[str, str] = {}
            for problem in located_problems(exc, "", _form_field):
                out.setdefault(problem.field, problem.message)
            return out
        name = self.drafts[row]["name"]
        if any(i != row and d["name"] == name for i, d in enumerate(self.drafts)):
            return {"name": f"another profile is named {name!r}: each needs a name of its own"}
        return {}

    def profile(self, row: int) -> BackendProfile:
        """The profile at ``row`` as it would be saved. Raises ValidationError."""
        values = dict(self.drafts[row])
        if values["kind"] != "openai":  # only OpenAI-compatible servers take a model and a context size
            values.update(model="", context_size=0)
        return BackendProfile.model_validate(values)

    def profiles(self) -> list[BackendProfile] | None:
        """Every profile as it would be saved, or None after showing the first bad one's problems."""
        for row in range(len(self.drafts)):
            if self.problems(row):
                self.list.setCurrentRow(row)
                self._refresh()
                return None
        return [self.profile(row) for row in range(len(self.drafts))]

    # --- saving -------------------------------------------------------------------------------------

    def save(self) -> bool:
        """Write every profile to the file and close; nothing is written while a value is bad."""
        profiles = self.profiles()
        if profiles is None:
            self.set_status(f"Nothing was saved: fix {self.drafts[self.row]['name'] or 'this profile'}'s fields "
                            "marked in red first.", error=True)
            return False
        if self.load_error and self.path.exists():
            if not self.ask_overwrite():
                self.set_status("Nothing was saved: the profiles file is as it was.", error=True)
                return False
            backup = self.path.with_name(self.path.name + ".broken")
            try:
                shutil.copyfile(self.path, backup)
            except OSError as exc:
                self.set_status(f"Nothing was saved: the unreadable file could not be kept as {backup} "
                                f"({exc.strerror or exc}).", error=True)
                return False
        try:
            save_profiles(profiles, self.path)
        except OSError as exc:
            self.set_status(f"Could not write {self.path}: {exc.strerror or exc}. Nothing was saved.", error=True)
            return False
        self.load_error = ""
        if self.choice is not None:
            self.choice.reload()
        self.accept()
        return True

    def ask_overwrite(self) -> bool:
        """Whether to replace the unreadable profiles file (its content is kept beside it)."""
        answer = QMessageBox.question(
            self, "Replace the profiles file?",
            f"{self.path} could not be read:\n\n{self.load_error}\n\nReplace it with the profiles in this dialog? "
            f"Its present content is kept as {self.path.name}.broken.",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No, QMessageBox.StandardButton.No)
        return answer == QMessageBox.StandardButton.Yes

    def set_status(self, text: str, error: bool = False) -> None:
        self.status.setStyleSheet(ERROR_STYLE if error else "")
        self.status.setText(text)

    # --- checking -----------------------------------------------------------------------------------

    def check_connection(self) -> bool:
        """Contact the selected profile's server on a thread of its own; the answer shows below."""
        row = self.row
        if not 0 <= row < len(self.drafts):
            return False
        if self.problems(row):
            self._refresh()
            self._show_check(False, "Fix the fields marked in red first.")
            return False
        profile = self.profile(row)
        if not self.check.start(profile):
            return False
        self.check_result.setStyleSheet("color: #9a9a9a;")
        self.check_result.setText(f"Contacting {profile.shown_url}\u2026")
        return True

    def _checked(self, ok: bool, text: str) -> None:
        self._show_check(ok, f"Connected: {text}" if ok else f"Not reached: {text}")

    def _show_check(self, ok: bool, text: str) -> None:
        self.check_result.setStyleSheet("color: #6fcf7f;" if ok else ERROR_STYLE)
        self.check_result.setText(("\u2714 " if ok else "\u2716 ") + text)

    def _check_busy(self, busy: bool) -> None:
        self.check_button.setEnabled(not busy)
        self.check_button.setText("Checking\u2026" if busy else "Check connection")

    def done(self, result: int) -> None:
        self.check.shutdown()  # a check still running ends with the dialog
        super().done(result)


def open_backends_dialog(choice: BackendChoice, parent: QWidget | None = None) -> bool:
    """Show the dialog (modal); True when the profiles were saved."""
    dialog = BackendsDialog(choice, parent)
    try:
        return bool(dialog.exec())
    finally:
        dialog.deleteLater()
