"""Above the Diff tab's side-by-side: what changed in the asset between a failed test turn's last passing
run and this run, field by field (a click on a row shows that node's turn)."""

from __future__ import annotations

import dataclasses
import json

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QAbstractItemView, QTreeWidget, QTreeWidgetItem, QWidget

from editor.services.suite_run import TurnComparison
from runtime.asset.model import Asset
from runtime.suites.kept import asset_changes


class ChangesList(QTreeWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setHeaderLabels(["Node", "Field", "Was", "Now"])
        self.setRootIsDecorated(False)
        self.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.setToolTip("What changed in the asset since the last passing run (click a row to "
                        "see that node's turn)")
        self.hide()

    def show_changes(self, comparison: TurnComparison | None, compared: object) -> None:
        """The asset edits since the last passing run, for a failed test turn compared with it (``compared``:
        the label picked under Compare with); hidden otherwise."""
        self.clear()
        if comparison is None or compared != comparison.against_label:
            self.hide()
            return
        if not comparison.changes:
            why = comparison.no_changes or ("No edits to the asset since the last passing run: the model's output "
                                            "changed on its own.")
            item = QTreeWidgetItem(self, [why])
            item.setFirstColumnSpanned(True)
        for change in comparison.changes:
            item = QTreeWidgetItem(self, [change.node or "(asset)", change.field, _short(change.old),
                                          _short(change.new)])
            item.setData(0, Qt.ItemDataRole.UserRole, change.node)
            item.setToolTip(0, change.text())
            for column, value in ((2, change.old), (3, change.new)):
                item.setToolTip(column, str(value))
        self.setHeaderLabels(["Node", "Field", *comparison.headers])
        for column in range(4):
            self.resizeColumnToContents(column)
        # as tall as its rows (up to 6): the side-by-side below keeps the rest
        rows = min(self.topLevelItemCount(), 6)
        row_height = self.sizeHintForRow(0) if rows else 0
        self.setFixedHeight(self.header().sizeHint().height() + rows * row_height + 2 * self.frameWidth() + 2)
        self.show()


def with_asset_now(comparison: TurnComparison, asset: Asset) -> TurnComparison:
    """``comparison`` with its edits listed from its passing run to ``asset`` (the document as it is now),
    when its last column says "Now"; else as it is (A against B: two fixed graphs)."""
    if comparison.against is None or comparison.headers[-1] != "Now":
        return comparison
    return dataclasses.replace(comparison, changes=asset_changes(comparison.against.asset, asset))


def _short(value: object) -> str:
    if value is None:
        return "(none)"
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = text.replace("\n", " \u21b5 ")
    return text if len(text) <= 80 else text[:79] + "\u2026"
