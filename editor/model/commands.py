"""Undo commands: every edit of the asset is one of these, pushed on the document's stack.

Each command is tiny and only calls a ``Document`` method; the canvas and docks
follow the document's signals, so undo and redo refresh every view for free.
Compound edits (deleting nodes with the exits that point at them, pasting) are a
macro of smaller commands, as in orange-canvas-core's ``document/commands.py``.
"""

from __future__ import annotations

import weakref
from collections import Counter
from typing import Any

from PySide6.QtGui import QUndoCommand

from editor.model.document import COMMENT_KEY_PREFIX, Document
from runtime.asset.model import END, Comment, NodeBase
from runtime.nodes import shown_exits


class DocumentCommand(QUndoCommand):
    """A command that changes a document. It holds the document weakly: the document's undo stack
    holds its commands, and a command holding the document back made each document a cycle that
    only the garbage collector freed, which then deleted the stack's Python commands half torn
    down (a segmentation fault in QUndoStack::clear)."""

    @property
    def document(self) -> Document:
        document = self._document()
        if document is None:
            raise RuntimeError("the command's document is gone")
        return document

    @document.setter
    def document(self, document: Document) -> None:
        self._document = weakref.ref(document)


class MacroCommand(QUndoCommand):
    """Several commands as one undo step. The parts are kept in a Python list, not as Qt
    child commands: Qt deletes discarded children from C++, which PySide's Python
    subclasses do not survive."""

    def __init__(self, text: str = "") -> None:
        super().__init__(text)
        self.parts: list[QUndoCommand] = []

    def add(self, command: QUndoCommand) -> None:
        self.parts.append(command)

    def redo(self) -> None:
        for part in self.parts:
            part.redo()

    def undo(self) -> None:
        for part in reversed(self.parts):
            part.undo()


def _join(command: QUndoCommand, parent: MacroCommand | None) -> None:
    if parent is not None:
        parent.add(command)


# Ids for mergeWith: consecutive edits of one text field become one undo step.
_MERGE_NODE_FIELD = 1001
_MERGE_AGENT_FIELD = 1002


class AddNodeCommand(DocumentCommand):
    def __init__(self, document: Document, node: NodeBase, index: int | None = None,
                 parent: MacroCommand | None = None) -> None:
        super().__init__(f"Add {node.display_title}")
        _join(self, parent)
        self.document = document
        self.node = node
        self.index = index

    def redo(self) -> None:
        self.document.add_node(self.node, self.index)

    def undo(self) -> None:
        self.document.remove_node(self.node.id)


class RemoveNodeOnlyCommand(DocumentCommand):
    """Remove one node (the exits pointing at it are handled by ``remove_nodes``)."""

    def __init__(self, document: Document, node_id: str, parent: MacroCommand | None = None) -> None:
        super().__init__(f"Remove {node_id}")
        _join(self, parent)
        self.document = document
        self.node_id = node_id
        self.index = -1
        self.node: NodeBase | None = None

    def redo(self) -> None:
        self.index, self.node = self.document.remove_node(self.node_id)

    def undo(self) -> None:
        assert self.node is not None
        self.document.add_node(self.node, self.index)


class SetNodeFieldCommand(DocumentCommand):
    def __init__(self, document: Document, node_id: str, field: str, old: Any, new: Any,
                 parent: MacroCommand | None = None, text: str = "", merge: bool = False) -> None:
        super().__init__(text or f"Change {field.replace('_', ' ')} of {node_id}")
        _join(self, parent)
        self.document = document
        self.node_id = node_id
        self.field = field
        self.old = old
        self.new = new
        self.merge = merge

    def redo(self) -> None:
        self.document.set_node_field(self.node_id, self.field, self.new)

    def undo(self) -> None:
        self.document.set_node_field(self.node_id, self.field, self.old)

    def id(self) -> int:
        return _MERGE_NODE_FIELD if self.merge else -1

    def mergeWith(self, other: QUndoCommand) -> bool:
        if not isinstance(other, SetNodeFieldCommand) or not other.merge:
            return False
        if (other.node_id, other.field) != (self.node_id, self.field):
            return False
        self.new = other.new
        return True


class RenameNodeCommand(DocumentCommand):
    def __init__(self, document: Document, old_id: str, new_id: str, parent: MacroCommand | None = None) -> None:
        super().__init__(f"Rename {old_id} to {new_id}")
        _join(self, parent)
        self.document = document
        self.old_id = old_id
        self.new_id = new_id

    def redo(self) -> None:
        self.document.rename_node(self.old_id, self.new_id)

    def undo(self) -> None:
        self.document.rename_node(self.new_id, self.old_id)


class SetExitCommand(DocumentCommand):
    def __init__(self, document: Document, node_id: str, port: str, old: str, new: str,
                 parent: MacroCommand | None = None) -> None:
        label = "END" if new == END else new
        super().__init__(f"Connect {node_id}.{port} to {label}")
        _join(self, parent)
        self.document = document
        self.node_id = node_id
        self.port = port
        self.old = old
        self.new = new

    def redo(self) -> None:
        self.document.set_exit(self.node_id, self.port, self.new)

    def undo(self) -> None:
        self.document.set_exit(self.node_id, self.port, self.old)


class MoveCommand(DocumentCommand):
    """Move nodes, terminals and comments: ``moves`` maps a node id, ``@start``/``@end`` or a comment's
    ``#<id>`` to (old, new)."""

    def __init__(self, document: Document, moves: dict[str, tuple[tuple[float, float], tuple[float, float]]],
                 text: str = "", parent: MacroCommand | None = None) -> None:
        super().__init__(text or _move_text(moves))
        _join(self, parent)
        self.document = document
        self.moves = moves

    def _apply(self, which: int) -> None:
        for key, positions in self.moves.items():
            if key.startswith("@"):
                self.document.set_terminal_position(key[1:], positions[which])
            elif key.startswith(COMMENT_KEY_PREFIX):
                self.document.set_comment_fields(key[1:], {"position": positions[which]})
            else:
                self.document.set_position(key, positions[which])

    def redo(self) -> None:
        self._apply(1)

    def undo(self) -> None:
        self._apply(0)


def _move_text(moves: dict) -> str:
    """'Move reply', 'Move 3 nodes', 'Move a comment and 2 nodes' (a backdrop dragged with its nodes)."""
    comments = sum(key.startswith(COMMENT_KEY_PREFIX) for key in moves)
    nodes = len(moves) - comments
    if not comments:
        return f"Move {next(iter(moves))}" if nodes == 1 else f"Move {nodes} nodes"
    what = "a comment" if comments == 1 else f"{comments} comments"
    return f"Move {what}" + (f" and {nodes} node{'s' if nodes != 1 else ''}" if nodes else "")


class SetAgentFieldCommand(DocumentCommand):
    def __init__(self, document: Document, field: str, old: Any, new: Any,
                 parent: MacroCommand | None = None, merge: bool = False) -> None:
        super().__init__(f"Change agent {field.replace('_', ' ')}")
        _join(self, parent)
        self.document = document
        self.field = field
        self.old = old
        self.new = new
        self.merge = merge

    def redo(self) -> None:
        self.document.set_agent_field(self.field, self.new)

    def undo(self) -> None:
        self.document.set_agent_field(self.field, self.old)

    def id(self) -> int:
        return _MERGE_AGENT_FIELD if self.merge else -1

    def mergeWith(self, other: QUndoCommand) -> bool:
        if not isinstance(other, SetAgentFieldCommand) or not other.merge or other.field != self.field:
            return False
        self.new = other.new
        return True


class AddCommentCommand(DocumentCommand):
    def __init__(self, document: Document, comment: Comment, index: int | None = None,
                 parent: MacroCommand | None = None) -> None:
        super().__init__(f"Add {comment_label(comment)}")
        _join(self, parent)
        self.document = document
        self.comment = comment
        self.index = index

    def redo(self) -> None:
        self.document.add_comment(self.comment, self.index)

    def undo(self) -> None:
        self.document.remove_comment(self.comment.id)


class RemoveCommentCommand(DocumentCommand):
    def __init__(self, document: Document, comment_id: str, parent: MacroCommand | None = None) -> None:
        super().__init__(f"Remove {comment_label(document.comment(comment_id))}")
        _join(self, parent)
        self.document = document
        self.comment_id = comment_id
        self.index = -1
        self.comment: Comment | None = None

    def redo(self) -> None:
        self.index, self.comment = self.document.remove_comment(self.comment_id)

    def undo(self) -> None:
        assert self.comment is not None
        self.document.add_comment(self.comment, self.index)


class SetCommentCommand(DocumentCommand):
    """Change some fields of a comment in one step (a resize: position and size; the edit dialog:
    title, text and colour). ``old`` and ``new`` map the same field names to values."""

    def __init__(self, document: Document, comment_id: str, old: dict[str, Any], new: dict[str, Any],
                 text: str = "", parent: MacroCommand | None = None) -> None:
        super().__init__(text or f"Edit {comment_label(document.comment(comment_id))}")
        _join(self, parent)
        self.document = document
        self.comment_id = comment_id
        self.old = old
        self.new = new

    def redo(self) -> None:
        self.document.set_comment_fields(self.comment_id, self.new)

    def undo(self) -> None:
        self.document.set_comment_fields(self.comment_id, self.old)


def comment_label(comment: Comment) -> str:
    """How an undo step names a comment: 'backdrop "Greeting"', 'note'."""
    return f'{comment.kind} "{comment.title}"' if comment.title else comment.kind


def set_comment(document: Document, comment_id: str, changes: dict[str, Any], text: str = "") -> SetCommentCommand | None:
    """The command that makes ``changes`` to a comment, or None when they change nothing. Raises
    ``FieldRejected`` (checked before anything is pushed)."""
    updated = document.check_comment_fields(comment_id, changes)
    current = document.comment(comment_id)
    new = {f: getattr(updated, f) for f in changes if getattr(updated, f) != getattr(current, f)}
    if not new:
        return None
    old = {f: getattr(current, f) for f in new}
    return SetCommentCommand(document, comment_id, old, new, text)


# --- compound edits --------------------------------------------------------------------------


def remove_nodes(document: Document, node_ids: list[str]) -> MacroCommand:
    """One undo step that removes nodes, ends the exits that pointed at them, drops the game events
    marked on them and clears the start node if it was removed."""
    doomed = [i for i in node_ids if document.has_node(i)]
    parent = MacroCommand(f"Delete {doomed[0]}" if len(doomed) == 1 else f"Delete {len(doomed)} nodes")
    gone = set(doomed)
    for node in document.asset.nodes:
        if node.id in gone:
            continue
        for port, target in shown_exits(node).items():
            if target in gone:
                SetExitCommand(document, node.id, port, target, END, parent)
    if document.asset.start_node in gone:
        SetAgentFieldCommand(document, "start_node", document.asset.start_node, "", parent)
    events = [e.model_dump() for e in document.asset.game_events]
    kept = [e for e in events if e["node"] not in gone]  # a removed node's game events go with it
    if kept != events:
        SetAgentFieldCommand(document, "game_events", events, kept, parent)
    # Remove from the back so each undo re-inserts at the index it came from.
    for node_id in sorted(doomed, key=document.index_of, reverse=True):
        RemoveNodeOnlyCommand(document, node_id, parent)
    return parent


def remove_comments(document: Document, comment_ids: list[str], parent: MacroCommand | None = None) -> MacroCommand:
    """One undo step (or parts of ``parent``) that removes comments; the nodes inside a backdrop stay."""
    command = parent if parent is not None else MacroCommand()
    doomed = [i for i in comment_ids if document.has_comment(i)]
    if parent is None:
        command.setText(f"Delete {comment_label(document.comment(doomed[0]))}" if len(doomed) == 1
                        else f"Delete {len(doomed)} comments")
    for comment_id in sorted(doomed, key=document.comment_index, reverse=True):
        RemoveCommentCommand(document, comment_id, command)
    return command


def disconnect(document: Document, exits: list[tuple[str, str]], start: bool = False,
               parent: MacroCommand | None = None) -> MacroCommand:
    """Deleting connections: each exit (node id, port) ends the turn instead (an exit always
    leads somewhere, END when nowhere else), and with ``start`` the agent has no start node.
    Adds to ``parent`` when given; exits already at END change nothing."""
    command = parent if parent is not None else MacroCommand()
    for node_id, port in exits:
        if document.has_node(node_id) and port in shown_exits(document.node(node_id)):
            old = document.exit_target(node_id, port)
            if old != END:
                SetExitCommand(document, node_id, port, old, END, command)
    if start and document.asset.start_node:
        SetAgentFieldCommand(document, "start_node", document.asset.start_node, "", command)
    return command


def add_nodes(document: Document, nodes: list[NodeBase], text: str) -> MacroCommand:
    """One undo step that adds ``nodes`` (a paste, a duplicate). Raises ``ValueError`` and builds
    nothing when two of them share an id or one is taken: pushed, that command would stop half
    way and leave undo and redo broken (``runtime.asset.clipboard.prepare_paste`` gives free ids)."""
    ids = [node.id for node in nodes]
    clashes = sorted({i for i in ids if document.has_node(i)} | {i for i, n in Counter(ids).items() if n > 1})
    if clashes:
        raise ValueError(f"cannot add nodes whose ids are taken or repeated: {', '.join(map(repr, clashes))}")
    parent = MacroCommand(text)
    for node in nodes:
        AddNodeCommand(document, node, None, parent)
    return parent


def set_node_field(document: Document, node_id: str, field: str, value: Any, merge: bool = False) -> QUndoCommand:
    """The command that sets one field (an id change becomes a rename)."""
    old = getattr(document.node(node_id), field)
    if field == "id":
        return RenameNodeCommand(document, node_id, value)
    return SetNodeFieldCommand(document, node_id, field, old, value, merge=merge)


def copy_incoming_exits(document: Document, copies: dict[str, str],
                        parent: MacroCommand) -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]]:
    """Duplicate with Connections: give the copies the connections that came into their originals.

    ``copies`` maps each original's id to its copy's (the copies are added in ``parent`` already). An
    exit leads to one node only, so an exit into an original cannot also lead to its copy: for each
    exit of a node outside the copied ones that leads to an original, the first of that node's exits
    that ends the turn (END, in the node's port order) is pointed at the copy instead. A node with no
    such free exit gives none, and the original keeps its connections either way.

    Returns what was connected and what was not, each as (source node, port, copy) triples (the port
    of a skipped one is the exit into the original)."""
    connected: list[tuple[str, str, str]] = []
    skipped: list[tuple[str, str, str]] = []
    for node in document.asset.nodes:
        if node.id in copies or node.id in copies.values():
            continue  # exits among the copied nodes are repointed by the copy itself
        exits = shown_exits(node)
        free = [port for port, target in exits.items() if target == END]
        for port, target in exits.items():
            if target not in copies:
                continue
            if free:
                spare = free.pop(0)
                SetExitCommand(document, node.id, spare, END, copies[target], parent)
                connected.append((node.id, spare, copies[target]))
            else:
                skipped.append((node.id, port, copies[target]))
    return connected, skipped
