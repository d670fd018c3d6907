"""A test case's expectations in a form, turn by turn: the path, the nodes visited and not, each
classifier's exit, the intent, and texts the reply must or must not contain. "Save as test" shows it
with each turn's recorded path so a wrong route is corrected before it is frozen; the Tests dock edits
a saved case's expectations with it (``runtime.suites.file.set_case_expectations`` writes them)."""

from __future__ import annotations

import re
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QGroupBox,
    QLabel,
    QLineEdit,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

ARROW = " \u2192 "
_NODES = re.compile(r"\s*(?:\u2192|->|>|,)\s*|\s+")
NONE_INTENT = "(none)"  # the intent field's word for "no intent was chosen" ("" : not checked)


def nodes_text(nodes: list[str] | None) -> str:
    return ARROW.join(nodes or [])


def parse_nodes(text: str) -> list[str]:
    """Node ids as typed: separated by arrows (\u2192, ->, >), commas or spaces."""
    return [n for n in _NODES.split(text.strip()) if n]


def exits_text(exits: dict[str, str]) -> str:
    return "; ".join(f"{node} = {port}" for node, port in exits.items())


def parse_exits(text: str) -> dict[str, str]:
    """``classify = intent:greet; other = default_exit`` as a mapping. Raises ``ValueError``."""
    out = {}
    for item in (i.strip() for i in text.split(";")):
        if not item:
            continue
        node, sep, port = item.partition("=")
        if not sep or not node.strip() or not port.strip():
            raise ValueError(f"{item!r}: write node = exit (e.g. classify = intent:greet)")
        out[node.strip()] = port.strip()
    return out


def texts_text(texts: list[str]) -> str:
    return " | ".join(texts)


def parse_texts(text: str) -> list[str]:
    return [t.strip() for t in text.split("|") if t.strip()]


class TurnForm(QGroupBox):
    """One turn's expectations."""

    def __init__(self, number: int, say: str, expect: dict[str, Any], parent: QWidget | None = None) -> None:
        line = say if len(say) <= 70 else say[:70] + "\u2026"
        super().__init__(f"Turn {number}: \u201c{line}\u201d", parent)
        self.number = number
        form = QFormLayout(self)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        reply = expect.get("reply") or {}
        intent = expect.get("intent")
        self.path = self._field(form, "Path", nodes_text(expect.get("path")),
                                "The nodes the turn must visit, exactly, in order (\u2192, > or commas between "
                                "them). Empty: the path is not checked.")
        self.visits = self._field(form, "Visits", ", ".join(expect.get("visits") or []),
                                  "Nodes the turn must visit, in any order.")
        self.not_visits = self._field(form, "Does not visit", ", ".join(expect.get("not_visits") or []),
                                      "Nodes the turn must not visit.")
        self.exits = self._field(form, "Exits", exits_text(expect.get("exits") or {}),
                                 "The exit a node takes: node = exit, separated by ';' "
                                 "(e.g. classify = intent:ask_directions).")
        self.intent = self._field(form, "Intent", NONE_INTENT if intent == "" else intent or "",
                                  f"The intent a Classify Intent node chose; {NONE_INTENT}: none. Empty: not checked.")
        self.contains = self._field(form, "Reply contains", texts_text(reply.get("contains") or []),
                                    "Texts the reply must contain (case-insensitive), separated by '|'.")
        self.not_contains = self._field(form, "Reply does not contain", texts_text(reply.get("not_contains") or []),
                                        "Texts the reply must not contain, separated by '|'.")

    @staticmethod
    def _field(form: QFormLayout, label: str, value: str, tip: str) -> QLineEdit:
        edit = QLineEdit(value)
        edit.setToolTip(tip)
        edit.setPlaceholderText("not checked")
        form.addRow(label, edit)
        return edit

    def expectations(self) -> dict[str, Any]:
        """The form's fields (each present; empty: removed). Raises ``ValueError`` naming the field."""
        intent = self.intent.text().strip()
        try:
            exits = parse_exits(self.exits.text())
        except ValueError as exc:
            raise ValueError(f"turn {self.number}, Exits: {exc}") from None
        return {
            "path": parse_nodes(self.path.text()) or None,
            "visits": parse_nodes(self.visits.text()),
            "not_visits": parse_nodes(self.not_visits.text()),
            "exits": exits,
            "intent": "" if intent == NONE_INTENT else intent or None,
            "reply": {"contains": parse_texts(self.contains.text()), "not_contains": parse_texts(self.not_contains.text())},
        }


class ExpectationsDialog(QDialog):
    """A case's expectations turn by turn, and its name when ``name`` is given (a case being saved).
    OK is refused, with the reason shown, while a field names a node the asset does not have."""

    def __init__(self, title: str, intro: str, turns: list[tuple[str, dict[str, Any]]], node_ids: list[str],
                 name: str | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(title)
        self.node_ids = list(node_ids)
        layout = QVBoxLayout(self)
        text = QLabel(intro, self)
        text.setWordWrap(True)
        layout.addWidget(text)
        self.name_edit: QLineEdit | None = None
        if name is not None:
            names = QFormLayout()
            self.name_edit = QLineEdit(name, self)
            names.addRow("Name of the test case", self.name_edit)
            layout.addLayout(names)
        body = QWidget(self)
        column = QVBoxLayout(body)
        self.turns = [TurnForm(i, say, expect, body) for i, (say, expect) in enumerate(turns, 1)]
        for form in self.turns:
            column.addWidget(form)
        column.addStretch(1)
        scroll = QScrollArea(self)
        scroll.setWidgetResizable(True)
        scroll.setWidget(body)
        layout.addWidget(scroll, 1)
        self.error = QLabel(self)
        self.error.setWordWrap(True)
        self.error.setStyleSheet("color: #eb5f50;")
        self.error.hide()
        layout.addWidget(self.error)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel,
                                        Qt.Orientation.Horizontal, self)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        layout.addWidget(self.buttons)
        self.resize(640, min(720, 180 + 250 * len(turns)))

    @property
    def name(self) -> str:
        return self.name_edit.text().strip() if self.name_edit is not None else ""

    def expectations(self) -> list[dict[str, Any]]:
        """Each turn's expectations. Raises ``ValueError`` naming the turn and field."""
        out = []
        known = set(self.node_ids)
        for form in self.turns:
            expect = form.expectations()
            for field, label in (("path", "Path"), ("visits", "Visits"), ("not_visits", "Does not visit"),
                                 ("exits", "Exits")):
                unknown = [n for n in expect[field] or [] if n not in known]
                if unknown:
                    raise ValueError(f"turn {form.number}, {label}: no node {', '.join(map(repr, unknown))} in the "
                                     f"asset (its nodes: {', '.join(self.node_ids)})")
            out.append(expect)
        return out

    def accept(self) -> None:
        if self.name_edit is not None and not self.name:
            self._refuse("A test case needs a name.")
            return
        try:
            self.expectations()
        except ValueError as exc:
            self._refuse(str(exc))
            return
        super().accept()

    def _refuse(self, why: str) -> None:
        self.error.setText(why)
        self.error.show()


def case_with(case: dict[str, Any], expectations: list[dict[str, Any]]) -> dict[str, Any]:
    """A case (as ``case_from_turns`` makes it) with each turn's expectations as the form gives them:
    empty fields dropped, the others (the tool called) kept."""
    turns = []
    for turn, wanted in zip(case["turns"], expectations):
        expect = {}
        for key, value in wanted.items():
            if key == "reply":
                value = {k: v for k, v in value.items() if v}
            if value is not None and value != [] and value != {}:
                expect[key] = value
        expect.update((k, v) for k, v in turn.get("expect", {}).items() if k not in wanted)
        turns.append({**turn, "expect": expect})
    return {**case, "turns": turns}
