"""The open asset: the one model every editor view reads and every command changes.

``Document`` holds a ``runtime.asset.model.Asset`` and is the only place that changes it.
Each change emits a signal naming what changed, and only when the value really
changed (orange-canvas-core's scheme does the same), so views can follow the
model without echoing edits back. Nodes are pydantic models that check themselves,
so a changed node is rebuilt and validated whole: a value the model rejects raises
``FieldRejected`` and the document stays as it was.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QUndoCommand, QUndoStack

from runtime.asset.file import problems_from_validation
from runtime.asset.model import END, Asset, Comment, NodeBase
from runtime.names import free_id
from runtime.nodes import shown_exits

# Canvas-only items (the START and END terminals) keep their positions here, inside
# the asset's free-form metadata, so a saved file reopens with the same layout.
EDITOR_METADATA_KEY = "parley_studio"
TERMINALS = ("start", "end")
# A comment (a backdrop or a note) on the canvas and in a move is keyed "#<comment id>": node ids
# never start with "#", nor the terminals' "@start" and "@end".
COMMENT_KEY_PREFIX = "#"


def comment_key(comment_id: str) -> str:
    return f"{COMMENT_KEY_PREFIX}{comment_id}"


class FieldRejected(ValueError):
    """The model refused a value; ``message`` says why, ``node_id``/``field`` say where."""

    def __init__(self, message: str, node_id: str = "", field: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.node_id = node_id
        self.field = field


class Document(QObject):
    """The asset being edited, its file path, and change notifications."""

    node_added = Signal(str)  # node id
    node_removed = Signal(str)  # node id
    node_changed = Signal(str, str)  # node id, field name
    node_moved = Signal(str)  # node id
    node_renamed = Signal(str, str)  # old id, new id
    agent_changed = Signal(str)  # asset-level field name
    terminal_moved = Signal(str)  # "start" or "end"
    comment_added = Signal(str)  # comment id
    comment_removed = Signal(str)  # comment id
    comment_changed = Signal(str, str)  # comment id, field name (one emission per changed field)
    reset = Signal()  # a whole new asset was set
    path_changed = Signal(str)

    def __init__(self, asset: Asset | None = None, path: str | None = None, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._asset = asset if asset is not None else Asset()
        self._path = path or ""
        # Where an asset without a file of its own reads its relative paths from (behaviours, models):
        # the folder of the example it was opened from. A path, once saved, takes over.
        self.folder: Path | None = None
        self.undo_stack = QUndoStack(self)
        # node id -> its index in asset.nodes, rebuilt after a change that moves nodes: the canvas
        # and the docks look nodes up by id all the time, and a scan made opening a graph quadratic.
        self._indexes: dict[str, int] | None = None
        # Ids a rename freed in this session: no new node gets one, or an expectation written for the
        # renamed node (in a suite not beside the asset, a copy, a note) would name a different node.
        self._retired_ids: set[str] = set()

    def push(self, command: QUndoCommand) -> None:
        """Run an edit and record it for undo. Check values first (``check_*``): a
        command whose redo raises would be recorded half done."""
        self.undo_stack.push(command)

    @property
    def modified(self) -> bool:
        return not self.undo_stack.isClean()

    # --- whole document -------------------------------------------------------------------

    @property
    def asset(self) -> Asset:
        """The live asset. Read it; change it only through the methods below."""
        return self._asset

    @property
    def path(self) -> str:
        return self._path

    def set_path(self, path: str) -> None:
        if path != self._path:
            self._path = path
            self.path_changed.emit(path)

    @property
    def asset_dir(self) -> Path | None:
        return Path(self._path).parent if self._path else self.folder

    def set_asset(self, asset: Asset) -> None:
        self._asset = asset
        self._indexes = None
        self.reset.emit()

    def has_node(self, node_id: str) -> bool:
        return self._find(node_id) is not None

    def node(self, node_id: str) -> NodeBase:
        return self._asset.nodes[self.index_of(node_id)]

    def index_of(self, node_id: str) -> int:
        index = self._find(node_id)
        if index is None:
            raise KeyError(node_id)
        return index

    def _find(self, node_id: str) -> int | None:
        nodes = self._asset.nodes
        if self._indexes is None or len(self._indexes) != len(nodes):
            self._indexes = {}
            for index, node in enumerate(nodes):
                self._indexes.setdefault(node.id, index)  # the first of a repeated id, as a scan finds
        index = self._indexes.get(node_id)
        if index is not None and index < len(nodes) and nodes[index].id == node_id:
            return index
        if index is not None:  # the list was changed without the document: look again
            self._indexes = None
            return self._find_by_scan(node_id)
        return None

    def _find_by_scan(self, node_id: str) -> int | None:
        return next((i for i, node in enumerate(self._asset.nodes) if node.id == node_id), None)

    def used_ids(self) -> set[str]:
        """The ids a new node may not take: the nodes' ids and those a rename freed in this session."""
        return set(self._asset.node_ids()) | self._retired_ids

    def unique_id(self, base: str, taken: set[str] | None = None) -> str:
        """``base`` made unique among the node ids and the ids a rename freed (``reply``, ``reply_2``, ...)."""
        return free_id(base, self.used_ids() | (taken or set()))

    # --- nodes ----------------------------------------------------------------------------

    def add_node(self, node: NodeBase, index: int | None = None) -> None:
        if self.has_node(node.id):
            raise ValueError(f"a node with id {node.id!r} already exists")
        nodes = self._asset.nodes
        nodes.insert(len(nodes) if index is None else index, node)
        self._indexes = None
        self.node_added.emit(node.id)

    def remove_node(self, node_id: str) -> tuple[int, NodeBase]:
        index = self.index_of(node_id)
        node = self._asset.nodes.pop(index)
        self._indexes = None
        self.node_removed.emit(node_id)
        return index, node

    def set_node_field(self, node_id: str, field: str, value: Any) -> bool:
        """Set one field of a node; True when it changed. Raises ``FieldRejected``."""
        if field == "id":
            return self.rename_node(node_id, value)
        node = self.node(node_id)
        if getattr(node, field) == value:
            return False
        raw = node.model_dump()
        raw[field] = copy.deepcopy(value)
        self._replace(node_id, self._validated(type(node), raw, node_id))
        self.node_changed.emit(node_id, field)
        return True

    def check_node_field(self, node_id: str, field: str, value: Any) -> None:
        """Raise ``FieldRejected`` if ``value`` would be refused; change nothing."""
        node = self.node(node_id)
        if field == "id" and value != node_id and self.has_node(value):
            raise FieldRejected(f"another node already has the id {value!r}", node_id, "id")
        raw = node.model_dump()
        raw[field] = copy.deepcopy(value)
        self._validated(type(node), raw, node_id)

    def set_exit(self, node_id: str, port: str, target: str) -> bool:
        """Point exit ``port`` of a node at ``target`` ('' is END)."""
        node = self.node(node_id)
        if shown_exits(node)[port] == target:
            return False
        field = node.exit_field(port).split(".", 1)[0]  # 'intents.2.exit' is stored in 'intents'
        changed = self._validated_exits(node, {port: target})
        return self.set_node_field(node_id, field, changed.model_dump()[field])

    def exit_target(self, node_id: str, port: str) -> str:
        return shown_exits(self.node(node_id)).get(port, END)

    def set_position(self, node_id: str, position: tuple[float, float]) -> bool:
        node = self.node(node_id)
        position = (float(position[0]), float(position[1]))
        if not all(math.isfinite(v) for v in position):
            # The canvas cannot draw a node at NaN or infinity (it raised on every repaint).
            raise FieldRejected(f"a position must be two finite numbers, not {position}", node_id, "position")
        if tuple(node.position) == position:
            return False
        # Assignment validates the one field only, which is all a move needs (and cheap).
        node.position = position
        self.node_moved.emit(node_id)
        return True

    def rename_node(self, old_id: str, new_id: str) -> bool:
        """Give a node a new id and repoint every exit and the start node at it."""
        if old_id == new_id:
            return False
        if self.has_node(new_id):
            raise FieldRejected(f"another node already has the id {new_id!r}", old_id, "id")
        node = self.node(old_id)
        raw = node.model_dump()
        raw["id"] = new_id
        renamed = self._validated(type(node), raw, old_id)
        self._replace(old_id, renamed)
        self._retired_ids.add(old_id)
        retargeted: list[tuple[str, str]] = []
        for other in list(self._asset.nodes):
            for port, target in shown_exits(other).items():
                if target == old_id:
                    retargeted.append((other.id, port))
        for other_id, port in retargeted:
            self._set_exit_quietly(other_id, port, new_id)
        if self._asset.start_node == old_id:
            self._asset.start_node = new_id
        marked = any(event.node == old_id for event in self._asset.game_events)
        for event in self._asset.game_events:  # a game event names its node by id: it follows the node
            if event.node == old_id:
                event.node = new_id
        self.node_renamed.emit(old_id, new_id)
        for other_id, _port in retargeted:
            self.node_changed.emit(other_id, "exits")
        if self._asset.start_node == new_id:
            self.agent_changed.emit("start_node")
        if marked:
            self.agent_changed.emit("game_events")
        return True

    def _set_exit_quietly(self, node_id: str, port: str, target: str) -> None:
        node = self.node(node_id)
        self._replace(node_id, self._validated_exits(node, {port: target}))

    @staticmethod
    def _validated_exits(node: NodeBase, targets: dict[str, str]) -> NodeBase:
        try:
            return node.with_exits(targets)
        except ValidationError as exc:
            raise FieldRejected(str(exc), node.id, "exits") from None

    def _replace(self, node_id: str, node: NodeBase) -> None:
        self._asset.nodes[self.index_of(node_id)] = node
        if node.id != node_id:
            self._indexes = None

    @staticmethod
    def _validated(model: type[NodeBase], raw: dict[str, Any], node_id: str) -> NodeBase:
        try:
            return model.model_validate(raw)
        except ValidationError as exc:
            problems = problems_from_validation(exc, {"nodes": [raw]}, "")
            first = problems[0] if problems else None
            message = "; ".join(p.message if not p.field else f"{p.field}: {p.message}" for p in problems)
            raise FieldRejected(message or str(exc), node_id, first.field if first else "") from None

    # --- agent settings -------------------------------------------------------------------

    def check_agent_field(self, field: str, value: Any) -> None:
        trial = self._asset.model_copy()
        try:
            setattr(trial, field, copy.deepcopy(value))
        except ValidationError as exc:
            problems = problems_from_validation(exc, {}, "")
            raise FieldRejected("; ".join(p.message for p in problems) or str(exc), "", field) from None

    def set_agent_field(self, field: str, value: Any) -> bool:
        if field in ("nodes",):
            raise ValueError("nodes change through add_node/remove_node")
        if getattr(self._asset, field) == value:
            return False
        try:
            setattr(self._asset, field, copy.deepcopy(value))
        except ValidationError as exc:
            problems = problems_from_validation(exc, {}, "")
            message = "; ".join(p.message for p in problems) or str(exc)
            raise FieldRejected(message, "", field) from None
        self.agent_changed.emit(field)
        return True

    # --- canvas-only items ----------------------------------------------------------------

    def terminal_position(self, name: str) -> tuple[float, float] | None:
        saved = self._asset.metadata.get(EDITOR_METADATA_KEY, {}).get(f"{name}_position")
        if isinstance(saved, (list, tuple)) and len(saved) == 2:
            return float(saved[0]), float(saved[1])
        return None

    def set_terminal_position(self, name: str, position: tuple[float, float] | None) -> bool:
        if name not in TERMINALS:
            raise KeyError(name)
        if self.terminal_position(name) == (None if position is None else tuple(map(float, position))):
            return False
        metadata = copy.deepcopy(self._asset.metadata)
        section = metadata.setdefault(EDITOR_METADATA_KEY, {})
        if position is None:
            section.pop(f"{name}_position", None)
            if not section:
                metadata.pop(EDITOR_METADATA_KEY)
        else:
            section[f"{name}_position"] = [float(position[0]), float(position[1])]
        self._asset.metadata = metadata
        self.terminal_moved.emit(name)
        return True

    # --- comments (backdrops and notes): layout only, never run --------------------------------

    def has_comment(self, comment_id: str) -> bool:
        return any(c.id == comment_id for c in self._asset.comments)

    def comment(self, comment_id: str) -> Comment:
        return self._asset.comments[self.comment_index(comment_id)]

    def comment_index(self, comment_id: str) -> int:
        for index, comment in enumerate(self._asset.comments):
            if comment.id == comment_id:
                return index
        raise KeyError(comment_id)

    def unique_comment_id(self, base: str = "comment", taken: set[str] | None = None) -> str:
        """``base`` made unique among the comment ids (``note``, ``note_2``, ...)."""
        return free_id(base, {c.id for c in self._asset.comments} | (taken or set()), "comment")

    def add_comment(self, comment: Comment, index: int | None = None) -> None:
        if self.has_comment(comment.id):
            raise ValueError(f"a comment with id {comment.id!r} already exists")
        comments = self._asset.comments
        comments.insert(len(comments) if index is None else index, comment)
        self.comment_added.emit(comment.id)

    def remove_comment(self, comment_id: str) -> tuple[int, Comment]:
        index = self.comment_index(comment_id)
        comment = self._asset.comments.pop(index)
        self.comment_removed.emit(comment_id)
        return index, comment

    def check_comment_fields(self, comment_id: str, changes: dict[str, Any]) -> Comment:
        """The comment with ``changes`` applied, checked whole; raises ``FieldRejected``, changes nothing."""
        comment = self.comment(comment_id)
        if "id" in changes:
            raise FieldRejected("a comment's id does not change", "", "id")
        raw = comment.model_dump()
        raw.update(copy.deepcopy(changes))
        try:
            return Comment.model_validate(raw)
        except ValidationError as exc:
            problems = problems_from_validation(exc, {}, "")
            first = problems[0] if problems else None
            message = "; ".join(p.message if not p.field else f"{p.field}: {p.message}" for p in problems)
            raise FieldRejected(f"comment {comment_id!r}: {message or exc}", "",
                                first.field if first else "") from None

    def set_comment_fields(self, comment_id: str, changes: dict[str, Any]) -> bool:
        """Change some fields of a comment at once (a resize moves and sizes it); True when one changed.
        Raises ``FieldRejected``."""
        updated = self.check_comment_fields(comment_id, changes)
        comment = self.comment(comment_id)
        changed = [f for f in changes if getattr(updated, f) != getattr(comment, f)]
        if not changed:
            return False
        self._asset.comments[self.comment_index(comment_id)] = updated
        for field in changed:
            self.comment_changed.emit(comment_id, field)
        return True
