"""The Properties dock: the selected node's settings, or the agent's when nothing is selected.

Edits become undo commands; a value the model refuses is kept in its editor with
the reason under it (and in the Problems dock), and the asset is left unchanged.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QEvent, QObject, QSignalBlocker, Qt, QTimer, Signal
from PySide6.QtGui import QFocusEvent
from PySide6.QtWidgets import QDockWidget, QLabel, QLineEdit, QScrollArea, QVBoxLayout, QWidget

from editor.canvas.node_types import view_of
from editor.docks.properties.field_editors import FieldEditor, IntEditor, LineEditor
from editor.docks.properties.form import ModelForm
from editor.model.commands import MacroCommand, SetAgentFieldCommand, SetNodeFieldCommand
from editor.model.document import Document, FieldRejected
from editor.model.game_events import exit_choices
from editor.model.rename import rename_node
from runtime.asset.model import END, Asset, ModelParams, NodeBase
from runtime.asset.validation import ModelFiles
from runtime.nodes import node_model
from runtime.nodes.base import context_zero_text
from runtime.problems import Problem

AGENT_EXCLUDE = ("version", "nodes")


class PropertiesDock(QDockWidget):
    """Shows one form at a time: a node's, several nodes' count, or the agent's."""

    input_problems_changed = Signal(list)  # Problems for values the model refused
    told = Signal(str)  # what an edit did beyond the asset, for the status bar (a rename's tests followed it)

    def __init__(self, document: Document, parent: QWidget | None = None) -> None:
        super().__init__("Properties", parent)
        self.setObjectName("PropertiesDock")
        self.document = document
        self.node_id: str | None = None
        self._forms: dict[str, ModelForm] = {}
        self._rejected: dict[tuple[str, str], Problem] = {}
        self._sections: tuple[str, ...] = ()  # the node sections on show (all when empty): show_sections
        # Each node's values as it was added (or as File > New made it): a click in a single-line field
        # still holding its starting value selects it, so typing replaces it ("Reply" + typing gave
        # "ReplyGreet")
        self._started: dict[str, dict[str, Any]] = {}
        self._click_selects = _ClickSelects(self)

        body = QWidget(self)
        self._layout = QVBoxLayout(body)
        self.header = QLabel(body)
        self.header.setWordWrap(True)
        self.header.setTextFormat(Qt.TextFormat.RichText)
        self._layout.addWidget(self.header)
        self.sections_label = QLabel("Prompt and sampling here \u00b7 <a href='all'>all settings</a>", body)
        self.sections_label.setToolTip("The Author workspace (Ctrl+1) shows every setting; so does this link, "
                                       "until the next workspace switch")
        self.sections_label.linkActivated.connect(lambda _link: self.show_sections(()))
        self.sections_label.hide()
        self._layout.addWidget(self.sections_label)
        self.scroll = QScrollArea(body)
        self.scroll.setWidgetResizable(True)
        self.scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        self._layout.addWidget(self.scroll)
        self.setWidget(body)

        document.node_changed.connect(self._on_node_changed)
        document.node_renamed.connect(self._on_node_renamed)
        document.node_removed.connect(self._on_node_removed)
        document.node_added.connect(self._on_node_added)
        document.node_moved.connect(self._on_node_moved)
        document.agent_changed.connect(self._on_agent_changed)
        document.reset.connect(self._on_reset)
        self._on_reset()

    # --- which form -----------------------------------------------------------------------

    @property
    def form(self) -> ModelForm | None:
        widget = self.scroll.widget()
        return widget if isinstance(widget, ModelForm) else None

    def show_selection(self, node_ids: list[str]) -> None:
        if len(node_ids) == 1 and self.document.has_node(node_ids[0]):
            self._show_node(node_ids[0])
        elif node_ids:
            self.node_id = None
            self.header.setText(f"<b>{len(node_ids)} nodes selected</b><br/>Select one node to edit it.")
            self._set_form(None)
        else:
            self._show_agent()

    def _form_for(self, key: str) -> ModelForm:
        # One form per node type, built once: building a form costs more than filling it.
        form = self._forms.get(key)
        if form is None:
            if key == "@agent":
                form = ModelForm(Asset, self._start_choices, exclude=AGENT_EXCLUDE, port_choices=self._port_choices)
                form.field_edited.connect(self._agent_edited)
            else:
                view = view_of(key)
                form = ModelForm(node_model(key), self._exit_choices, exclude=view.hidden_fields,
                                 group_order=view.groups)
                form.field_edited.connect(self._node_edited)
                for name, editor in form.editors.items():
                    if type(editor) is LineEditor and not hasattr(editor, "browse_button"):  # not a file's
                        editor.line.setProperty("field", name)
                        editor.line.installEventFilter(self._click_selects)
            self._forms[key] = form
        return form

    def _set_form(self, form: ModelForm | None) -> None:
        current = self.scroll.widget()
        if current is not form or form is None:
            if current is not None:
                self.scroll.takeWidget()
                current.hide()
            if form is not None:
                self.scroll.setWidget(form)
                form.show()
            else:
                self.scroll.setWidget(QWidget())
        self._apply_sections()

    # --- sections on show -----------------------------------------------------------------

    def show_sections(self, sections: tuple[str, ...]) -> None:
        """Show only these sections of a node's form (all when empty, or when the form has none of
        them); the Talk and Test workspaces keep to the prompt and sampling (editor/window/workspace.py)."""
        self._sections = tuple(sections)
        self._apply_sections()

    def _apply_sections(self) -> None:
        form = self.form
        boxes = form.sections if form is not None and self.node_id is not None else {}
        kept = {name for name in boxes if name in self._sections}
        for name, box in boxes.items():
            box.setVisible(not kept or name in kept)
        self.sections_label.setVisible(bool(kept) and len(kept) < len(boxes))

    def starting_value(self, field: str, text: str) -> bool:
        """Whether the selected node's ``field`` still holds what it started with in this window."""
        started = self._started.get(self.node_id or "")
        return started is not None and field in started and str(started[field]) == text

    def _show_node(self, node_id: str) -> None:
        node = self.document.node(node_id)
        self.node_id = node_id
        view = view_of(node.type_name)
        r, g, b = view.fill
        self.header.setText(
            f"<span style='color: rgb({min(255, r + 90)},{min(255, g + 90)},{min(255, b + 90)})'>\u25a0</span> "
            f"<b>{view.label}</b> &nbsp;<span style='color:gray'>{node_id}</span><br/>"
            f"<span style='color:gray'>{view.help}</span>"
        )
        form = self._form_for(node.type_name)
        self._fill_node_form(form, node_id)
        self._set_form(form)

    def _show_agent(self) -> None:
        self.node_id = None
        self.header.setText("<b>Agent</b><br/><span style='color:gray'>Settings of the whole agent. "
                            "Select a node to edit it.</span>")
        form = self._form_for("@agent")
        form.refresh_choices()
        with _Quiet(form):
            form.set_values(self.document.asset)
        self._show_errors(form, "")
        self._set_form(form)

    def _fill_node_form(self, form: ModelForm, node_id: str) -> None:
        node = self.document.node(node_id)
        form.refresh_choices()
        with _Quiet(form):
            form.set_values(node)
        self._apply_limits(form, node)
        self._show_context_zero(form, node)
        self._show_errors(form, node_id)

    def _apply_limits(self, form: ModelForm, node: NodeBase) -> None:
        """Constraints between fields (the node type's ``field_limits``), as narrowed spin box ranges."""
        for name, maximum in node.field_limits().items():
            editor = form.editors.get(name)
            if isinstance(editor, IntEditor):
                editor.set_maximum(maximum)

    def _show_context_zero(self, form: ModelForm, node: NodeBase) -> None:
        """Context Size 0 says which size it stands for: the trained size of the node's model, read
        from its GGUF header (cached by runtime.models.gguf) when the file is there."""
        editor = form.editors.get("context_size")
        if isinstance(editor, IntEditor) and isinstance(node, ModelParams):
            trained = ModelFiles(self.document.asset_dir).context(self.document.asset.model_for(node))
            editor.set_zero_means(context_zero_text(trained))

    def _show_errors(self, form: ModelForm, node_id: str) -> None:
        for name, editor in form.editors.items():
            problem = self._rejected.get((node_id, name))
            editor.set_error(problem.message if problem else "")

    # --- choices --------------------------------------------------------------------------

    def _exit_choices(self) -> list[tuple[str, str]]:
        return [("END (ends the turn)", END)] + [
            (f"{n.display_title} ({n.id})" if n.title else n.id, n.id) for n in self.document.asset.nodes
        ]

    def _start_choices(self) -> list[tuple[str, str]]:
        return [("(none)", "")] + [
            (f"{n.display_title} ({n.id})" if n.title else n.id, n.id) for n in self.document.asset.nodes
        ]

    def _port_choices(self, node_id: str) -> list[tuple[str, str]]:
        """A game event's "when": the node running, or one of its exits (none for a node not there)."""
        if not self.document.has_node(node_id):
            return [("when the node runs", "")]
        return exit_choices(self.document.node(node_id))

    def _refresh_choices(self) -> None:
        form = self.form
        if form is not None:
            form.refresh_choices()

    # --- edits -> commands ----------------------------------------------------------------

    def _node_edited(self, field: str, value: Any, merge: bool) -> None:
        node_id = self.node_id
        if node_id is None:
            return
        doc = self.document
        try:
            doc.check_node_field(node_id, field, value)
        except FieldRejected as exc:
            self._reject(node_id, field, exc.message)
            return
        self._accept(node_id, field)
        special = view_of(doc.node(node_id).type_name).edit
        command = special(doc, node_id, field, value) if special is not None else None
        if command is not None:  # the type's own edit (a Subgraph's behaviour also sets its ports)
            if not isinstance(command, MacroCommand) or command.parts:
                doc.push(command)
            return
        old = getattr(doc.node(node_id), field)
        if old == value:
            return
        if field == "id":
            self.told.emit(rename_node(doc, node_id, value))  # the suites beside the asset follow it
        else:
            doc.push(SetNodeFieldCommand(doc, node_id, field, old, value, merge=merge))

    def _agent_edited(self, field: str, value: Any, merge: bool) -> None:
        doc = self.document
        try:
            doc.check_agent_field(field, value)
        except FieldRejected as exc:
            self._reject("", field, exc.message)
            return
        self._accept("", field)
        old = getattr(doc.asset, field)
        if old != value:
            doc.push(SetAgentFieldCommand(doc, field, old, value, merge=merge))

    def _reject(self, node_id: str, field: str, message: str) -> None:
        self._rejected[(node_id, field)] = Problem("error", f"not applied: {message}", self.document.path,
                                                   node_id=node_id, field=field)
        form = self.form
        if form is not None and field in form.editors:
            form.editors[field].set_error(f"Not applied: {message}")
        self.input_problems_changed.emit(list(self._rejected.values()))

    def _accept(self, node_id: str, field: str) -> None:
        if self._rejected.pop((node_id, field), None) is not None:
            form = self.form
            if form is not None and field in form.editors:
                form.editors[field].set_error("")
            self.input_problems_changed.emit(list(self._rejected.values()))

    @property
    def rejected(self) -> list[Problem]:
        return list(self._rejected.values())

    # --- following the document -----------------------------------------------------------

    def _on_node_added(self, node_id: str) -> None:
        if self.document.has_node(node_id):
            self._started[node_id] = self.document.node(node_id).model_dump()
        self._refresh_choices()

    def _on_node_changed(self, node_id: str, _field: str) -> None:
        if node_id == self.node_id and self.form is not None:
            self._fill_node_form(self.form, node_id)
        else:
            self._refresh_choices()

    def _on_node_moved(self, node_id: str) -> None:
        if node_id == self.node_id and self.form is not None:
            with _Quiet(self.form):
                self.form.editors["position"].set_value(self.document.node(node_id).position)

    def _on_node_renamed(self, old: str, new: str) -> None:
        for key in [k for k in self._rejected if k[0] == old]:
            self._rejected[(new, key[1])] = self._rejected.pop(key)
        if self.node_id == old:
            self._show_node(new)
        else:
            self._refresh_choices()

    def _on_node_removed(self, node_id: str) -> None:
        dropped = [k for k in self._rejected if k[0] == node_id]
        for key in dropped:
            del self._rejected[key]
        if dropped:
            self.input_problems_changed.emit(list(self._rejected.values()))
        if node_id == self.node_id:
            self.show_selection([])
        else:
            self._refresh_choices()

    def _on_reset(self) -> None:
        """A new asset (File > New, Open): refused values belonged to the old one's nodes."""
        # File > New's nodes hold starting values; an opened file's (or example's) hold what its designer wrote
        doc = self.document
        self._started = {n.id: n.model_dump() for n in doc.asset.nodes} if not (doc.path or doc.folder) else {}
        if self._rejected:
            self._rejected.clear()
            for form in self._forms.values():
                for editor in form.editors.values():
                    editor.set_error("")
            self.input_problems_changed.emit([])
        self.show_selection([])

    def _on_agent_changed(self, field: str) -> None:
        if self.node_id is None and self.form is self._forms.get("@agent"):
            with _Quiet(self.form):
                self.form.set_values(self.document.asset)

    # --- focus from the Problems dock -----------------------------------------------------

    def focus_field(self, field: str) -> FieldEditor | None:
        """Scroll to and focus the editor of ``field`` ('intents.0.exit' focuses Intents)."""
        form = self.form
        if form is None or not field:
            return None
        editor = form.editors.get(field.split(".", 1)[0])
        if editor is None:
            return None
        self.raise_()
        self.scroll.ensureWidgetVisible(editor)
        target = getattr(editor, "focus_widget", editor)
        target.setFocus(Qt.FocusReason.OtherFocusReason)
        editor.setStyleSheet("QWidget#" + editor.objectName().replace(":", "\\:") + " { background: #3a3d41; }")
        QTimer.singleShot(900, editor, lambda: editor.setStyleSheet(""))
        return editor


class _ClickSelects(QObject):
    """Selects a single-line field's text when a click focuses it and it holds the node's starting
    value (after the click has placed the cursor), so typing replaces it."""

    def __init__(self, dock: PropertiesDock) -> None:
        super().__init__(dock)
        self._dock = dock

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if (event.type() == QEvent.Type.FocusIn and isinstance(event, QFocusEvent)
                and event.reason() == Qt.FocusReason.MouseFocusReason and isinstance(watched, QLineEdit)
                and self._dock.starting_value(str(watched.property("field")), watched.text())):
            QTimer.singleShot(0, watched, watched.selectAll)
        return False


class _Quiet:
    """Blocks a form's signals while the dock fills it, so filling is not an edit."""

    def __init__(self, form: ModelForm) -> None:
        self._blockers = [QSignalBlocker(form)] + [QSignalBlocker(e) for e in form.editors.values()]

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        for blocker in self._blockers:
            blocker.unblock()

