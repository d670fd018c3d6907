"""A form of typed editors for a pydantic model's fields, grouped into sections.

``make_editor`` picks each field's editor from its name, type, constraints and flags; a list of
records (tools, intents, attributes, knowledge) gets a ``ModelListEditor`` holding a form of its
own for the selected record.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from PySide6.QtCore import Signal
from PySide6.QtWidgets import QFormLayout, QGroupBox, QLabel, QVBoxLayout, QWidget

from editor.canvas.node_types import GROUP_ORDER
from editor.docks.properties.field_editors import (
    EXIT_FIELDS,
    FILE_FIELDS,
    MODEL_FIELDS,
    BoolEditor,
    ChoiceEditor,
    ExitChoices,
    FieldEditor,
    FloatEditor,
    IntEditor,
    JsonEditor,
    LineEditor,
    LinesEditor,
    MetadataEditor,
    ModelEditor,
    OptionalTextEditor,
    PositionEditor,
    TextEditor,
    field_flag,
    field_group,
    field_label,
    tooltip,
)
from editor.docks.properties.list_editor import ModelListEditor
from runtime.asset.model import GameEvent


def _list_item_model(annotation: Any) -> type[BaseModel] | None:
    if typing.get_origin(annotation) is list:
        (arg,) = typing.get_args(annotation) or (None,)
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


# Records whose ``exit`` is one of a node's ports, not a node: the field named here takes the node
# choices instead, and ``exit`` picks one of that node's ports (``PortChoices``).
NODE_FIELD_OF: dict[type[BaseModel], str] = {GameEvent: "node"}

# (label, port) for a node's id: the choices of a record's ``exit`` that names one of its node's ports.
PortChoices = Callable[[str], list[tuple[str, str]]]


def make_editor(name: str, info: FieldInfo, exit_choices: ExitChoices | None = None,
                node_fields: tuple[str, ...] = EXIT_FIELDS, port_choices: PortChoices | None = None) -> FieldEditor:
    """The editor for one field, chosen from its name, type, constraints and flags; ``node_fields``
    name the fields that pick a node from ``exit_choices``; ``port_choices`` lists a node's ports for
    the records that pick one (``NODE_FIELD_OF``)."""
    annotation = info.annotation
    origin = typing.get_origin(annotation)
    if name in node_fields and exit_choices is not None:
        return ChoiceEditor(exit_choices)
    if annotation is bool:
        return BoolEditor(field_label(name))
    if annotation is int:
        return IntEditor(info)
    if annotation is float:
        return FloatEditor(info)
    if origin is Literal:
        return ChoiceEditor([(str(v), v) for v in typing.get_args(annotation)])
    if annotation is str:
        if field_flag(info, "multiline"):
            return TextEditor(field_flag(info, "mustache"))
        if name in MODEL_FIELDS:
            return ModelEditor(MODEL_FIELDS[name])
        return LineEditor(FILE_FIELDS.get(name, ""))
    if origin is tuple:
        return PositionEditor()
    item_model = _list_item_model(annotation)
    if item_model is not None:
        node_field = NODE_FIELD_OF.get(item_model)
        record_form = ModelForm(item_model, exit_choices, grouped=False,
                                node_fields=(node_field,) if node_field else EXIT_FIELDS,
                                port_choices=port_choices if node_field else None)
        return ModelListEditor(item_model, record_form)
    if origin is list:
        return LinesEditor()
    if name == "metadata":
        return MetadataEditor()  # without the editor's own layout data
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if args == [str]:
            return OptionalTextEditor("Ask the designer when a test conversation calls it")
    return JsonEditor()


class ModelForm(QWidget):
    """Editors for the fields of a pydantic model, grouped into sections."""

    field_edited = Signal(str, object, bool)  # field, value, merge

    def __init__(self, model: type[BaseModel], exit_choices: ExitChoices | None = None,
                 exclude: tuple[str, ...] = (), grouped: bool = True, group_order: tuple[str, ...] = GROUP_ORDER,
                 node_fields: tuple[str, ...] = EXIT_FIELDS, port_choices: PortChoices | None = None,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model = model
        self.editors: dict[str, FieldEditor] = {}
        self._values: dict[str, Any] = {}  # the values shown, for choices that depend on another field
        node_field = NODE_FIELD_OF.get(model) if port_choices is not None else None
        self.sections: dict[str, QGroupBox] = {}
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        fields = [(n, f) for n, f in model.model_fields.items() if n not in exclude and n != "type"]
        groups: dict[str, list[tuple[str, FieldInfo]]] = {}
        for name, info in fields:
            groups.setdefault(field_group(info) if grouped else "", []).append((name, info))
        order = sorted(groups, key=lambda g: group_order.index(g) if g in group_order else len(group_order))
        for group in order:
            if grouped:
                box = QGroupBox(group, self)
                self.sections[group] = box
                form = QFormLayout(box)
                layout.addWidget(box)
            else:
                holder = QWidget(self)
                form = QFormLayout(holder)
                form.setContentsMargins(0, 0, 0, 0)
                layout.addWidget(holder)
            form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
            form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
            for name, info in groups[group]:
                if node_field and name == "exit":  # one of the ports of the node the record names
                    editor: FieldEditor = ChoiceEditor(lambda: port_choices(str(self._values.get(node_field, ""))))
                else:
                    editor = make_editor(name, info, exit_choices, node_fields, port_choices)
                editor.setObjectName(f"field:{name}")
                editor.setToolTip(tooltip(name, info))
                editor.edited.connect(lambda value, merge, n=name: self._edited(n, value, merge))
                self.editors[name] = editor
                if isinstance(editor, BoolEditor):
                    form.addRow("", editor)
                else:
                    label = QLabel(field_label(name), self)
                    label.setToolTip(editor.toolTip())
                    if isinstance(editor, (TextEditor, JsonEditor)) or _list_item_model(info.annotation):
                        form.addRow(label)
                        form.addRow(editor)
                    else:
                        form.addRow(label, editor)
        layout.addStretch(1)

    def _edited(self, name: str, value: Any, merge: bool) -> None:
        self._values[name] = value
        if name == NODE_FIELD_OF.get(self.model) and "exit" in self.editors:
            self.editors["exit"].refresh_choices()  # the new node's ports
        self.field_edited.emit(name, value, merge)

    def set_values(self, values: dict[str, Any] | BaseModel) -> None:
        for name, editor in self.editors.items():
            value = getattr(values, name) if isinstance(values, BaseModel) else values.get(name)
            self._values[name] = value
        for name, editor in self.editors.items():
            if name == "exit" and NODE_FIELD_OF.get(self.model):
                editor.refresh_choices()  # before its value: the ports of this record's node
            editor.set_value(self._values[name])

    def refresh_choices(self) -> None:
        for editor in self.editors.values():
            editor.refresh_choices()

