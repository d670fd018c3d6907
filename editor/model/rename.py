"""A safe rename: a node's new id and the test suites beside the asset that follow it, in one undo step.

The suites' expectations name nodes by id (``path``, ``visits``, ``not_visits``, ``exits``), and a
Subgraph node's behaviour by namespaced ids (``guard/classify``): a rename that left them would break
the tests silently. Undo writes the suite files back as they were.
"""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtGui import QUndoCommand

from editor.model.commands import MacroCommand, RenameNodeCommand
from editor.model.document import Document
from runtime.files.writing import atomic_write_text
from runtime.problems import InputError
from runtime.suites.file import SuiteRename, read_suite_text, rename_node_in_suite_text, suites_renaming

log = logging.getLogger("parley.editor")


class SuiteFilesCommand(QUndoCommand):
    """The suite files a rename of the node ``old`` to ``new`` changes: redo writes each as renamed,
    undo as it was. A file changed since (a case saved, expectations edited) is renamed (back) in
    place instead, so that change is kept. A file that cannot be written is left and logged: the
    node's rename still stands, and the Tests dock shows the suite's problem."""

    def __init__(self, renames: list[SuiteRename], old: str, new: str, parent: MacroCommand | None = None) -> None:
        super().__init__(f"Rename {old} to {new} in {len(renames)} test suite{'s' if len(renames) != 1 else ''}")
        if parent is not None:
            parent.add(self)
        self.renames = renames
        self.old = old
        self.new = new
        self.failed: list[str] = []  # the files the last redo or undo could not write, and why

    def redo(self) -> None:
        self.failed = [why for r in self.renames if (why := _write(r.path, r.before, r.after, self.old, self.new))]

    def undo(self) -> None:
        self.failed = [why for r in self.renames if (why := _write(r.path, r.after, r.before, self.new, self.old))]


def _write(path: Path, was: str, becomes: str, old: str, new: str) -> str:
    """Write ``becomes`` to ``path`` when it holds ``was``, else its own text with ``old`` renamed
    ``new``; "" when it worked, else why not."""
    from ruamel.yaml.error import YAMLError

    try:
        current = read_suite_text(path)
        text = becomes if current == was else rename_node_in_suite_text(current, old, new)[0]
        if text != current:
            atomic_write_text(path, text)
    except (InputError, OSError, YAMLError) as exc:
        log.warning("could not rename %s to %s in %s", old, new, path, exc_info=True)
        return f"{path.name}: {exc}"
    return ""


def rename_node(document: Document, old: str, new: str) -> str:
    """Rename the node ``old`` to ``new`` (a checked id: ``Document.check_node_field``) and the
    nodes the suites beside the asset's file name, as one undo step; what to tell the designer: how
    many expectations followed it, in which files, and any file that could not be written."""
    renames: list[SuiteRename] = []
    if document.path:
        try:
            renames = suites_renaming(document.path, old, new)
        except OSError:  # the folder cannot be listed: the node alone is renamed
            log.warning("could not look for suites beside %s", document.path, exc_info=True)
    if not renames:
        document.push(RenameNodeCommand(document, old, new))
        return f"Renamed {old} to {new}; no test expectation named it."
    changed = sum(r.changed for r in renames)
    counted = f"{changed} expectation{'s' if changed != 1 else ''}"
    step = MacroCommand(f"Rename {old} to {new} ({counted} in the tests)")
    RenameNodeCommand(document, old, new, step)
    suites = SuiteFilesCommand(renames, old, new, step)
    document.push(step)
    told = f"Renamed {old} to {new} and {counted} in {', '.join(r.path.name for r in renames)} that named it."
    if suites.failed:
        told += f" Not written (they still name {old}): {'; '.join(suites.failed)}"
    return told
