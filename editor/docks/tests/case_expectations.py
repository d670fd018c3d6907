"""*Edit expectations…*: one case's expectations in a form; OK writes them to its suite file, keeping
the file's comments and order."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtWidgets import QWidget

from editor.dialogs.expectations import ExpectationsDialog
from editor.docks.tests.results_tree import SuiteEntry
from runtime.problems import InputError
from runtime.suites.file import set_case_expectations


def edit_case_expectations(entry: SuiteEntry, case, parent: QWidget, say: Callable[..., None],
                           written: Callable[[], None]) -> ExpectationsDialog:
    """Open ``case`` of the loaded suite ``entry`` in a form (not modal: the dock stays usable). ``say(text,
    error=False)`` tells how the write went; ``written`` runs after a write that worked."""
    turns = [(t.say, t.expect.model_dump(exclude_none=True, exclude_defaults=True)) for t in case.turns]
    dialog = ExpectationsDialog(
        f"Expectations of \u201c{case.name}\u201d", f"What each turn of \u201c{case.name}\u201d must do "
        f"({entry.name}). Slots, tools, budgets and judges are kept as the file has them.", turns,
        entry.loaded.asset.node_ids(), parent=parent)  # type: ignore[union-attr]
    dialog.accepted.connect(lambda: _write(entry.path, case.name, dialog, say, written))
    dialog.finished.connect(dialog.deleteLater)
    dialog.open()
    return dialog


def _write(path: Path, case: str, dialog: ExpectationsDialog, say: Callable[..., None],
           written: Callable[[], None]) -> None:
    try:
        set_case_expectations(path, case, dialog.expectations())
    except (InputError, OSError, ValueError) as exc:
        say(f"Could not write the expectations of \u201c{case}\u201d to {path.name}; it is unchanged: {exc}", error=True)
        return
    say(f"Wrote the expectations of \u201c{case}\u201d to {path.name}: run it again to check them.")
    written()
