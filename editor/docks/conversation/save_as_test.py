"""*Save as test*: this branch of the conversation as a test case in ``<asset stem>.suite.yaml`` beside
the asset, saying the same lines and expecting the path each turn took."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QWidget

from editor.dialogs.expectations import ExpectationsDialog, case_with
from editor.docks.conversation.status import TurnStatus
from editor.session.view import SessionView
from runtime.problems import InputError
from runtime.session.session import graph_of
from runtime.suites.checks import case_from_turns
from runtime.suites.file import save_case


class SaveAsTest(QObject):
    saved = Signal(str)  # the suite file a case was saved to

    def __init__(self, view: SessionView, status: TurnStatus, parent: QWidget) -> None:
        super().__init__(parent)
        self.view = view
        self.actions = view.actions
        self.status = status
        self.dialog_parent = parent
        self.save_dialog: ExpectationsDialog | None = None

    def save_as_test_case(self, name: str | None = None) -> str:
        """Add this branch of the conversation to ``<asset stem>.suite.yaml`` beside the asset as a case that
        says the same lines and expects the path each turn took (and the variables changed here). Without
        a name, a form shows each turn's recorded path to confirm or correct, and the name, and OK saves
        (``saved``; "" is returned). Returns the name it was saved under, or "" when nothing was."""
        doc = self.actions.document
        if not doc.path:
            self.status.show_error("Save the asset to a file first: its test cases go into a .suite.yaml file "
                                   "beside it.")
            return ""
        history = self.view.saved.history.turns
        count = len(history)
        records = [self.view.record(i) for i in range(count)]
        turns = [(r.diagnostics, turn) for r, turn in zip(records, history) if r is not None]
        if not turns:
            self.status.show_error("Nothing to save yet: talk to the character first (seeded or imported turns "
                                   "have no recorded path).")
            return ""
        asset = doc.asset
        variables = {k: v for k, v in self.view.saved.variables.items()
                     if k in asset.variables and asset.variables[k] != v}
        if name is None:  # the recorded path of each turn, to confirm or correct before it is frozen
            first = turns[0][0].player
            case = case_from_turns("", turns, variables)
            dialog = ExpectationsDialog(
                "Save as test case", "Each turn expects the path it took here. Correct any turn that went the wrong "
                "way (a threat routed to directions) before it becomes what the test expects.",
                [(t["say"], t["expect"]) for t in case["turns"]], self.graph_ids(),
                name=first if len(first) <= 40 else first[:40] + "\u2026", parent=self.dialog_parent)
            dialog.accepted.connect(lambda: self._save_case(
                dialog.name, case_with(case, dialog.expectations()), len(turns), count))
            dialog.finished.connect(dialog.deleteLater)
            self.save_dialog = dialog
            dialog.open()
            return ""
        if not name.strip():
            self.status.show_error("A test case needs a name; nothing was saved.")
            return ""
        return self._save_case(name.strip(), case_from_turns(name.strip(), turns, variables), len(turns), count)

    def graph_ids(self) -> list[str]:
        """The ids a turn's expectations may name, as the suite checks them: the asset's nodes and, under
        namespaced ids (``guard/classify``), the nodes of the behaviours its Subgraph nodes run."""
        doc = self.actions.document
        ids = dict.fromkeys(doc.asset.node_ids())
        try:
            ids.update(dict.fromkeys(graph_of(doc.asset, doc.asset_dir, doc.path).node_ids()))
        except InputError:  # a behaviour that cannot be read now: Problems says so, and the suite will too
            pass
        return list(ids)

    def _save_case(self, name: str, case: dict, saved: int, count: int) -> str:
        """Add ``case`` under ``name`` to the suite beside the asset (``saved`` of the branch's ``count``
        turns had a recorded path); the name it got, or "" when nothing was saved."""
        doc = self.actions.document
        suite = Path(doc.path).with_name(f"{Path(doc.path).stem}.suite.yaml")
        turns = range(saved)
        try:
            saved = save_case(suite, doc.path, {**case, "name": name})
        except (InputError, OSError) as exc:
            self.status.show_error(f"Could not save the test case to {suite.name}; nothing changed.\n{exc}")
            return ""
        skipped = count - len(turns)
        self.status.set_status(
            f"Saved the test case \u201c{saved}\u201d ({len(turns)} turn{'s' if len(turns) != 1 else ''}) "
            f"to {suite.name}: run it from the Tests dock."
            + (f" {skipped} turn{'s' if skipped != 1 else ''} without a recorded path (seeded or "
               "imported) left out." if skipped else ""))
        self.saved.emit(str(suite))
        return saved
