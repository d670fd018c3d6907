"""Subgraphs in the editor: what a Subgraph node shows of its behaviour, opening a behaviour,
watching the behaviour files an asset uses, and Edit > Extract to Behaviour.

A behaviour is an ordinary asset file that a Subgraph node runs (``runtime.nodes.subgraph``);
its ports are its Exit nodes, then ``next`` (``runtime.asset.behaviours.behaviour_ports``). The
runtime runs a behaviour's nodes under namespaced ids (``guard/classify``); the canvas shows them on
the Subgraph node that runs them (``Canvas.shown_on``).

``SubgraphSupport`` is one window's part: ``install(window)`` makes it and adds its action.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PySide6.QtCore import QEvent, QFileSystemWatcher, QObject, Qt, Signal
from PySide6.QtGui import QAction, QKeySequence, QUndoCommand
from PySide6.QtWidgets import (
    QApplication,
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QPushButton,
    QWidget,
)

from editor.canvas import add_action, context_menu
from editor.model.commands import (
    AddNodeCommand,
    MacroCommand,
    RemoveNodeOnlyCommand,
    SetAgentFieldCommand,
    SetExitCommand,
    SetNodeFieldCommand,
)
from editor.model.document import Document
from runtime.asset.behaviours import END_PORT, behaviour_path, ports_of
from runtime.asset.file import dumps_asset, load_asset, save_asset
from runtime.asset.model import END, Asset, NodeBase, new_node
from runtime.names import NAMESPACE_SEP, free_id
from runtime.nodes import shown_exit_label, shown_exits
from runtime.problems import AssetError

# The window (editor.window.main_window.MainWindow), not imported even for its type: the node views import
# this module, and through the window every dock (which the docks' import contracts forbid).
MainWindow = Any

SUBGRAPH, EXIT = "Subgraph", "Exit"
NEXT_PORT = END_PORT  # the port a behaviour's exits that end the turn become
BEHAVIOUR_FILTER = "Parley behaviours (*.json);;All files (*)"
EXTRACT_SHORTCUT = "Ctrl+Alt+B"
DEFAULT_ASSET_NAME = Asset.model_fields["name"].default
NOT_ID = re.compile(r"[^A-Za-z0-9_\-]")


# --- what a behaviour file holds -------------------------------------------------------------------


@dataclass(frozen=True)
class BehaviourInfo:
    """What the editor shows of one behaviour file: its name, its ports and its Subgraph nodes' files."""

    path: Path  # the file, resolved
    name: str  # the asset's name, or the file's name when the asset has none of its own
    ports: list[str] | None  # None: the file could not be read as a behaviour
    problem: str  # why not ('' when it could)
    uses: tuple[str, ...] = ()  # the behaviour files its own Subgraph nodes run, as they name them
    asset: Asset | None = None


# The files read so far, by path and content: a file is read again only when its bytes change.
_INFOS: dict[tuple[str, bytes], BehaviourInfo] = {}
# Each open document's folder, by its asset (``id``), so a Subgraph node's summary, painted from the
# node and its asset alone, finds the file its relative path names (``SubgraphSupport`` keeps it).
_FOLDERS: dict[int, Path | None] = {}


def resolve(asset_dir: Path | None, behaviour: str) -> Path | None:
    """The file a Subgraph node's ``behaviour`` names from its asset's folder (None: it names none
    that can be found: empty, absolute, or the asset has no folder yet; validation says why). An
    asset with no folder yet names a behaviour chosen for it by its absolute path: that is found,
    and the asset's first save names it relative (``SubgraphSupport``)."""
    if asset_dir is None and behaviour.strip() and os.path.isabs(behaviour):
        return Path(os.path.normpath(behaviour))
    try:
        return Path(os.path.normpath(behaviour_path(asset_dir, behaviour)))
    except ValueError:
        return None


def _content(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def behaviour_info(asset_dir: Path | None, behaviour: str) -> BehaviourInfo:
    """What the file ``behaviour`` (relative to ``asset_dir``) holds now."""
    path = resolve(asset_dir, behaviour)
    content = _content(path) if path is not None else None
    if path is None or content is None:
        why = "no behaviour chosen" if not behaviour.strip() else "file not found" if path is not None \
            else "save the asset first" if asset_dir is None else "give a path relative to the asset"
        return BehaviourInfo(path or Path(behaviour), Path(behaviour).name or "(none)", None, why)
    key = (str(path), hashlib.sha1(content).digest())
    info = _INFOS.get(key)
    if info is None:
        try:
            asset = load_asset(path)
        except AssetError as exc:
            first = exc.problems[0].message if exc.problems else str(exc)
            info = BehaviourInfo(path, path.name, None, f"cannot be read: {first}")
        else:
            name = asset.name if asset.name and asset.name != DEFAULT_ASSET_NAME else path.name
            uses = tuple(getattr(n, "behaviour", "") for n in asset.nodes if n.type_name == SUBGRAPH)
            info = BehaviourInfo(path, name, ports_of(asset), "", uses, asset)
        if len(_INFOS) > 256:
            _INFOS.clear()
        _INFOS[key] = info
    return info


def behaviour_node(asset: Asset, asset_dir: Path | None, node_id: str) -> NodeBase | None:
    """The node a namespaced id (``guard/warn``, ``guard/inner/x``) names: in the behaviour that the
    Subgraph node ``guard`` of ``asset`` runs, read from its file. None: no such node, or a file on
    the way cannot be read."""
    *subgraphs, last = node_id.split(NAMESPACE_SEP)
    graph, folder = asset, asset_dir
    for part in subgraphs:
        node = next((n for n in graph.nodes if n.id == part), None)
        if node is None or node.type_name != SUBGRAPH:
            return None
        info = behaviour_info(folder, getattr(node, "behaviour", ""))
        if info.asset is None:
            return None
        graph, folder = info.asset, info.path.parent
    return next((n for n in graph.nodes if n.id == last), None) if subgraphs else None


def subgraph_summary(node: NodeBase, asset: Asset) -> list[str]:
    """A Subgraph node's lines on the canvas: the behaviour's name and its file (or what is wrong)."""
    behaviour = getattr(node, "behaviour", "")
    if not behaviour.strip():
        return ["no behaviour chosen", "choose its file in Properties"]
    folder = _FOLDERS.get(id(asset))
    info = behaviour_info(folder, behaviour)
    lines = [f"runs: {info.name}", behaviour]
    if info.problem:
        lines.append(info.problem)
    elif folder is None:  # named by its absolute path: the first save makes it relative
        lines.append("relative once the asset is saved")
    else:
        lines.append("double-click to open it")
    return lines


def exit_summary(node: NodeBase, _asset: Asset) -> list[str]:
    return ["ends the behaviour here:", f"port \u201c{node.id}\u201d of its", "Subgraph node"]


def files_used(asset: Asset, asset_dir: Path | None) -> list[Path]:
    """Every behaviour file ``asset`` runs, its behaviours' behaviours too (each once, cycles cut)."""
    found: dict[Path, None] = {}
    todo = [(asset_dir, getattr(n, "behaviour", "")) for n in asset.nodes if n.type_name == SUBGRAPH]
    while todo:
        folder, behaviour = todo.pop(0)
        if not behaviour.strip():
            continue
        path = resolve(folder, behaviour)
        if path is None or path in found:
            continue
        found[path] = None
        info = behaviour_info(folder, behaviour)
        todo += [(path.parent, used) for used in info.uses]
    return list(found)


# --- a test run's counts on a Subgraph node's ports -------------------------------------------------


def subgraph_port_counts(asset: Asset, asset_dir: Path | None, exits: Mapping[tuple[str, str], int],
                         visits: Mapping[str, int]) -> dict[tuple[str, str], int]:
    """How often each Subgraph node's ports were taken, from a test run's counts of the namespaced
    nodes (an Exit node ``guard/flee`` reached is port ``flee`` of ``guard``; a behaviour's exit to END
    taken is its ``next``). Only the ports the counts do not name already."""
    out: dict[tuple[str, str], int] = {}
    for node in asset.nodes:
        if node.type_name != SUBGRAPH:
            continue
        counts = _port_counts(node.id, asset_dir, getattr(node, "behaviour", ""), exits, visits, set())
        for port in shown_exits(node):
            if (node.id, port) not in exits:
                out[(node.id, port)] = counts.get(port, 0)
    return out


def _port_counts(namespace: str, folder: Path | None, behaviour: str, exits: Mapping[tuple[str, str], int],
                 visits: Mapping[str, int], seen: set[Path]) -> Counter:
    info = behaviour_info(folder, behaviour)
    counts: Counter = Counter()
    if info.asset is None or info.path in seen:
        return counts
    seen = seen | {info.path}
    for inner in info.asset.nodes:
        inner_id = f"{namespace}{NAMESPACE_SEP}{inner.id}"
        if inner.type_name == EXIT:
            counts[inner.id] += visits.get(inner_id, 0)
            continue
        if inner.type_name == SUBGRAPH:
            nested = _port_counts(inner_id, info.path.parent, getattr(inner, "behaviour", ""), exits, visits, seen)
            taken = {port: nested.get(port, 0) for port in shown_exits(inner)}
        else:
            taken = {port: exits.get((inner_id, port), 0) for port in shown_exits(inner)}
        for port, target in shown_exits(inner).items():
            if target == END:
                counts[NEXT_PORT] += taken.get(port, 0)
    return counts


# --- Extract to Behaviour --------------------------------------------------------------------------


class ExtractRefused(ValueError):
    """The selection cannot become a behaviour; the message says why and what to do."""


@dataclass
class Extraction:
    """What Extract to Behaviour writes and changes: the behaviour, the Subgraph node in the selection's
    place, the exits that led into the selection (they lead to the Subgraph node now)."""

    behaviour: Asset
    subgraph: NodeBase
    chosen: list[str]  # the selected node ids, in document order
    entry: str  # the behaviour's start node
    inbound: list[tuple[str, str]]  # (node id, port) outside the selection that led to the entry
    takes_start: bool  # the agent started at the entry: it starts at the Subgraph node now


def _free_id(base: str, taken: set[str]) -> str:
    stem = NOT_ID.sub("_", base) or "behaviour"
    if not re.match(r"[A-Za-z_]", stem):
        stem = "_" + stem
    return free_id(stem, taken, "behaviour")


def plan_extraction(asset: Asset, node_ids: list[str], behaviour: str, name: str) -> Extraction:
    """The behaviour made of the nodes ``node_ids`` of ``asset`` and the Subgraph node that runs it
    from ``behaviour`` (its path relative to the asset's folder). Raises ``ExtractRefused`` when the
    rest of the graph enters the selection at more than one node (a behaviour has one start)."""
    inside = set(node_ids)
    chosen = [n for n in asset.nodes if n.id in inside]
    if not chosen:
        raise ExtractRefused("Select the nodes to extract first.")
    entries: dict[str, list[str]] = {}
    if asset.start_node in inside:
        entries[asset.start_node] = ["START"]
    inbound_all: list[tuple[str, str, str]] = []
    for node in asset.nodes:
        if node.id in inside:
            continue
        for port, target in shown_exits(node).items():
            if target in inside:
                entries.setdefault(target, []).append(f"{node.id} \u25b8 {shown_exit_label(node, port)}")
                inbound_all.append((node.id, port, target))
    if len(entries) > 1:
        order = [n.id for n in chosen if n.id in entries]
        where = "; ".join(f"{entry} (from {', '.join(entries[entry])})" for entry in order)
        raise ExtractRefused(
            f"The selection has {len(entries)} entries: {where}. A behaviour starts at one node, so the rest of "
            "the graph may lead into the selection at one node only. Select fewer nodes, or more, so that one "
            "node is where the others come in.")
    entry = next(iter(entries), chosen[0].id)
    xs = [n.position[0] for n in chosen]
    ys = [n.position[1] for n in chosen]
    left, top = min(xs), min(ys)
    taken = set(inside) | {NEXT_PORT}  # an Exit node is named for where it leads, unique in the behaviour
    exit_ids: dict[str, str] = {}  # a target outside the selection -> the Exit node that leads there
    ends = False
    nodes: list[NodeBase] = []
    for node in chosen:
        changes: dict[str, str] = {}
        for port, target in shown_exits(node).items():
            if target == END:
                ends = True
            elif target not in inside:
                if target not in exit_ids:
                    exit_ids[target] = _free_id(target, taken)
                    taken.add(exit_ids[target])
                changes[port] = exit_ids[target]
        moved = node.with_exits(changes) if changes else node.model_copy(deep=True)
        nodes.append(moved.model_copy(update={"position": (node.position[0] - left, node.position[1] - top)}))
    right = max(xs) - left + 320.0
    for row, exit_id in enumerate(exit_ids.values()):
        nodes.append(new_node(EXIT, exit_id, position=(right, row * 120.0)))
    behaviour_asset = Asset(name=name, default_model=asset.default_model, start_node=entry,
                            variables=dict(asset.variables), nodes=nodes)
    ports = {exit_id: target for target, exit_id in exit_ids.items()}
    if ends:
        ports[NEXT_PORT] = END
    stem = Path(behaviour).stem
    subgraph = new_node(SUBGRAPH, _free_id(stem, set(asset.node_ids())), behaviour=behaviour, exits=ports,
                        position=(left, top))
    inbound = [(source, port) for source, port, target in inbound_all if target == entry]
    return Extraction(behaviour_asset, subgraph, [n.id for n in chosen], entry, inbound, asset.start_node == entry)


def extraction_command(document: Document, plan: Extraction, file_name: str) -> MacroCommand:
    """One undo step: the exits into the selection lead to the Subgraph node, the selected nodes go
    and the Subgraph node takes the place of the first of them (undo puts every node back as it was)."""
    count = len(plan.chosen)
    command = MacroCommand(f"Extract {count} node{'s' if count != 1 else ''} to {file_name}")
    sub_id = plan.subgraph.id
    for source, port in plan.inbound:
        SetExitCommand(document, source, port, plan.entry, sub_id, command)
    if plan.takes_start:
        SetAgentFieldCommand(document, "start_node", plan.entry, sub_id, command)
    first = min(document.index_of(i) for i in plan.chosen)
    for node_id in sorted(plan.chosen, key=document.index_of, reverse=True):
        RemoveNodeOnlyCommand(document, node_id, command)
    AddNodeCommand(document, plan.subgraph, first, command)
    return command


# --- Properties: choosing a behaviour sets the node's ports ----------------------------------------


def behaviour_reference(document: Document, chosen: str) -> str:
    """How a Subgraph node names the file ``chosen``: relative to the asset's folder (with /), as
    the design asks; as it is when the asset has no folder yet (its first save makes it relative,
    ``first_save_command``) or it already is relative."""
    folder = document.asset_dir
    if folder is None or not os.path.isabs(chosen):
        return chosen
    try:
        return Path(os.path.relpath(chosen, folder)).as_posix()
    except ValueError:  # another drive: no relative path (validation asks for one)
        return chosen


def ports_for(document: Document, node: NodeBase, behaviour: str) -> dict[str, str] | None:
    """The node's exits for ``behaviour``'s ports (the targets of ports it keeps stay); None when the
    file cannot be read (validation says why; the exits are left as they are)."""
    info = behaviour_info(document.asset_dir, behaviour)
    if info.ports is None:
        return None
    old = dict(getattr(node, "exit_targets", {}))
    return {port: old.get(port, END) for port in info.ports}


def edit_subgraph_field(document: Document, node_id: str, field: str, value: Any) -> QUndoCommand | None:
    """The Properties dock's edit of a Subgraph node's field: a new behaviour also sets the node's
    ports from the file, in the same undo step. None: the dock's plain edit."""
    if field != "behaviour" or not isinstance(value, str):
        return None
    node = document.node(node_id)
    value = behaviour_reference(document, value)
    command = MacroCommand(f"Run {value or 'no behaviour'} in {node_id}")
    if value != node.behaviour:  # type: ignore[attr-defined]
        SetNodeFieldCommand(document, node_id, "behaviour", node.behaviour, value, command)  # type: ignore[attr-defined]
    exits = ports_for(document, node, value)
    old = dict(node.exit_targets)  # type: ignore[attr-defined]
    if exits is not None and exits != old:
        SetNodeFieldCommand(document, node_id, "exits", old, exits, command)
    return command if command.parts else MacroCommand("")


def first_save_command(document: Document, before: Path | None) -> MacroCommand | None:
    """After the asset was written to a file in a new folder (from ``before``, None: it had none):
    the behaviours chosen by absolute path are named relative to its folder, and a node whose
    behaviour could not be read from ``before`` but can be now gets its ports. None: nothing to do."""
    command = MacroCommand(f"Name behaviours relative to {Path(document.path).name}")
    for node in document.asset.nodes:
        if node.type_name != SUBGRAPH:
            continue
        behaviour = node.behaviour  # type: ignore[attr-defined]
        value = behaviour_reference(document, behaviour)
        if value != behaviour:
            SetNodeFieldCommand(document, node.id, "behaviour", behaviour, value, command)
        if behaviour_info(before, behaviour).ports is None:
            exits = ports_for(document, node, value)
            old = dict(node.exit_targets)  # type: ignore[attr-defined]
            if exits is not None and exits != old:
                SetNodeFieldCommand(document, node.id, "exits", old, exits, command)
    return command if command.parts else None


# --- the window's part -----------------------------------------------------------------------------


class BehaviourChangedBar(QFrame):
    """The bar over the top of the canvas: "guard_threats.json changed on disk — Reload"."""

    reload_requested = Signal()
    dismissed = Signal()

    def __init__(self, parent: QWidget) -> None:
        super().__init__(parent)
        self.setObjectName("behaviourChangedBar")
        self.setStyleSheet("QFrame#behaviourChangedBar { background: #3a3320; border: 1px solid #e5c07b;"
                           " border-radius: 4px; } QLabel { color: #eeeeee; }")
        row = QHBoxLayout(self)
        row.setContentsMargins(8, 4, 4, 4)
        self.label = QLabel(self)
        self.label.setTextFormat(Qt.TextFormat.PlainText)
        row.addWidget(self.label, 1)
        self.reload_button = QPushButton("Reload", self)
        self.reload_button.setToolTip("Read the behaviour again: its name and ports, the problems, and the agent "
                                      "of the next turn")
        self.reload_button.clicked.connect(lambda _c=False: self.reload_requested.emit())
        row.addWidget(self.reload_button)
        self.dismiss_button = QPushButton("Not now", self)
        self.dismiss_button.clicked.connect(lambda _c=False: self.dismissed.emit())
        row.addWidget(self.dismiss_button)
        self.hide()
        parent.installEventFilter(self)

    def show_files(self, paths: list[Path]) -> None:
        names = [p.name for p in paths]
        text = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
        self.label.setText(f"{text} changed on disk \u2014 Reload to use {'it' if len(names) == 1 else 'them'}")
        self.place()
        self.show()
        self.raise_()

    def place(self) -> None:
        parent = self.parentWidget()
        width = max(200, parent.width() - 16)
        self.setGeometry(8, 8, width, self.sizeHint().height())

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Resize and self.isVisible():
            self.place()
        return False


class SubgraphSupport(QObject):
    """One window's subgraphs: the watch on the behaviour files its asset uses and the reload bar,
    double-click to open a behaviour, and Extract to Behaviour."""

    files_changed = Signal(list)  # the behaviour files (paths) that changed on disk: the bar is shown
    reloaded = Signal()

    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self.window = window
        self.document = document = window.document
        self.watcher = QFileSystemWatcher(self)
        self.watched: dict[Path, bytes | None] = {}  # file -> its content when last seen (None: missing)
        self.pending: list[Path] = []  # changed since, not reloaded yet
        self.last_refusal = ""  # what Extract to Behaviour last said it could not do
        self._registered = -1  # the asset whose folder _FOLDERS holds for this window
        self.folder: Path | None = None  # the asset's folder as _FOLDERS holds it
        window.destroyed.connect(lambda *_: _FOLDERS.pop(self._registered, None))
        self.bar = BehaviourChangedBar(window.canvas.viewer)
        self.bar.reload_requested.connect(self.reload)
        self.bar.dismissed.connect(self.dismiss)
        self.watcher.fileChanged.connect(self._look)
        self.watcher.directoryChanged.connect(self._look)
        document.reset.connect(self._asset_replaced)
        document.path_changed.connect(self._path_changed)
        document.node_added.connect(self._node_added_or_changed)
        document.node_removed.connect(self._rescan)
        document.node_changed.connect(self._node_added_or_changed)
        window.canvas.node_opened.connect(self.open_node)
        self._asset_replaced()

    # --- the files ---------------------------------------------------------------------------

    def _asset_replaced(self, *_changed: object) -> None:
        _FOLDERS.pop(self._registered, None)
        self._registered = id(self.document.asset)
        self.folder = _FOLDERS[self._registered] = self.document.asset_dir
        self.pending = []
        self.bar.hide()
        self.watched.clear()
        self._rescan()
        self._redraw_subgraphs()

    def _path_changed(self, _path: str) -> None:
        before = self.folder
        self._asset_replaced()
        if before != self.document.asset_dir and self._saved_as_shown():
            self._name_behaviours_relative(before)

    def _saved_as_shown(self) -> bool:
        """Whether the asset's file holds the asset as it is: it was just saved there. (Opening a file
        changes the path too, before the asset: its file holds another asset.)"""
        try:
            return Path(self.document.path).read_text(encoding="utf-8") == dumps_asset(self.document.asset)
        except (OSError, UnicodeDecodeError):
            return False

    def _name_behaviours_relative(self, before: Path | None) -> None:
        """The asset's first save (or a save in another folder): ``first_save_command`` as one undo step,
        and the file written again to hold it (the save marks the document clean after this)."""
        doc = self.document
        command = first_save_command(doc, before)
        if command is None:
            return
        doc.push(command)
        try:
            save_asset(doc.asset, doc.path)
        except OSError as exc:
            doc.undo_stack.undo()  # the file holds the paths as they were chosen; so does the editor
            self.window.statusBar().showMessage(
                f"Could not name the behaviours relative to {doc.path}: {exc.strerror or exc}", 8000)

    def _node_added_or_changed(self, node_id: str, field: str = "behaviour") -> None:
        if field in ("behaviour", "exits", "type") and self.document.has_node(node_id) \
                and self.document.node(node_id).type_name == SUBGRAPH:
            self._rescan()

    def _rescan(self, *_changed: object) -> None:
        """Watch exactly the behaviour files the asset uses now (and the folders they are in)."""
        used = files_used(self.document.asset, self.document.asset_dir)
        for path in used:
            if path not in self.watched:
                self.watched[path] = _content(path)
        for path in [p for p in self.watched if p not in used]:
            del self.watched[path]
        self.pending = [p for p in self.pending if p in self.watched]
        if not self.pending:
            self.bar.hide()
        wanted = {str(p) for p in self.watched if p.exists()} | {str(p.parent) for p in self.watched if p.parent.is_dir()}
        have = set(self.watcher.files()) | set(self.watcher.directories())
        if have - wanted:
            self.watcher.removePaths(sorted(have - wanted))
        if wanted - have:
            self.watcher.addPaths(sorted(wanted - have))

    def _look(self, _path: str = "") -> None:
        """A watched file or folder changed: which behaviour files hold something new? (An editor that
        saves by replacing the file ends its watch: it is watched again.)"""
        changed = []
        for path, seen in self.watched.items():
            now = _content(path)
            if now != seen:
                self.watched[path] = now
                changed.append(path)
        self._rescan()
        fresh = [p for p in changed if p not in self.pending]
        if fresh:
            self.pending += fresh
            self.bar.show_files(self.pending)
            self.files_changed.emit(list(self.pending))

    def dismiss(self) -> None:
        self.pending = []
        self.bar.hide()

    def reload(self) -> None:
        """Use the behaviour files as they are now: each Subgraph node's ports follow its file (one undo
        step, when they change), the graph is checked again, and the next turn builds its agent anew."""
        names = ", ".join(p.name for p in self.pending) or "behaviours"
        self.pending = []
        self.bar.hide()
        doc = self.document
        command = MacroCommand(f"Reload {names}")
        for node in doc.asset.nodes:
            if node.type_name == SUBGRAPH:
                exits = ports_for(doc, node, node.behaviour)  # type: ignore[attr-defined]
                old = dict(node.exit_targets)  # type: ignore[attr-defined]
                if exits is not None and exits != old:
                    SetNodeFieldCommand(doc, node.id, "exits", old, exits, command)
        self._rescan()
        if command.parts:
            doc.push(command)  # checked again after the edit
        else:
            self.window.revalidate()
        self._redraw_subgraphs()
        self.window.conversation.files_changed()
        self.reloaded.emit()

    def _redraw_subgraphs(self) -> None:
        for node in self.document.asset.nodes:
            if node.type_name == SUBGRAPH:
                self.window.canvas.refresh_node(node.id)

    # --- opening a behaviour -----------------------------------------------------------------

    def open_node(self, node_id: str) -> MainWindow | None:
        """Double-click on a Subgraph node: its behaviour in a window of its own (the one that has it
        open already, if any). None when the node runs no file that exists."""
        doc = self.document
        if not doc.has_node(node_id) or doc.node(node_id).type_name != SUBGRAPH:
            return None
        behaviour = doc.node(node_id).behaviour  # type: ignore[attr-defined]
        path = resolve(doc.asset_dir, behaviour)
        if path is None or not path.is_file():
            self.window.statusBar().showMessage(
                f"{node_id} runs no behaviour file to open" if path is None else f"No file {path} to open", 6000)
            return None
        for widget in QApplication.topLevelWidgets():
            if isinstance(widget, type(self.window)) and widget.document.path and \
                    Path(widget.document.path) == path.resolve():
                widget.show()
                widget.raise_()
                widget.activateWindow()
                return widget
        other = self.window.new_window()
        other.open_path(str(path))
        return other

    # --- Extract to Behaviour ----------------------------------------------------------------

    def extract(self) -> Extraction | None:
        """Edit > Extract to Behaviour: the selected nodes become a behaviour file (asked for) and a
        Subgraph node in their place, in one undo step. The file stays when the step is undone."""
        doc = self.document
        ids = self.window.canvas.selected_ids()
        if not ids:
            self.refuse("Select the nodes to extract first.")
            return None
        if not doc.path:
            self.refuse("Save the asset first: a behaviour's file is named relative to the asset's folder.")
            return None
        try:
            plan_extraction(doc.asset, ids, "behaviour.json", "check")  # refuse before asking for a file
        except ExtractRefused as exc:
            self.refuse(str(exc))
            return None
        suggested = str(doc.asset_dir / "behaviours" / f"{_free_id(ids[0], set())}.json")
        path, _ = QFileDialog.getSaveFileName(self.window, "Extract to behaviour", suggested, BEHAVIOUR_FILTER)
        if not path:
            return None
        if not path.endswith(".json"):
            path += ".json"
        target = Path(os.path.normpath(os.path.abspath(path)))
        if doc.path and target == Path(doc.path).resolve():
            self.refuse("The behaviour cannot be written over the asset itself: choose another file.")
            return None
        name = target.stem.replace("_", " ").capitalize()
        plan = plan_extraction(doc.asset, ids, behaviour_reference(doc, str(target)), name)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            save_asset(plan.behaviour, target)
        except OSError as exc:
            self.refuse(f"Could not write {target}: {exc.strerror or exc}. Nothing was changed.")
            return None
        self.watched[target] = _content(target)  # written here: no "changed on disk" for it
        doc.push(extraction_command(doc, plan, target.name))
        self.window.canvas.select([plan.subgraph.id])
        self.window.statusBar().showMessage(
            f"Extracted {len(plan.chosen)} node{'s' if len(plan.chosen) != 1 else ''} to {target} (undo puts "
            f"{'them' if len(plan.chosen) != 1 else 'it'} back; the file stays)", 8000)
        return plan

    def refuse(self, message: str) -> QMessageBox:
        box = QMessageBox(QMessageBox.Icon.Information, "Extract to behaviour", message,
                          QMessageBox.StandardButton.Ok, self.window)
        box.setObjectName("extract_refused")
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.open()  # not exec(): the window stays live behind it
        self.last_refusal = message
        return box


def install(window: MainWindow) -> SubgraphSupport:
    """The window's subgraph support and its action (Edit menu and the canvas's menu)."""
    support = SubgraphSupport(window)
    action = QAction("E&xtract to Behaviour\u2026", window)
    action.setShortcut(QKeySequence(EXTRACT_SHORTCUT))
    tip = (f"Turn the selected nodes into a behaviour file and a Subgraph node that runs it ({EXTRACT_SHORTCUT})")
    action.setStatusTip(tip)
    action.setToolTip(tip)
    action.triggered.connect(lambda _c=False: support.extract())
    add_action(window.canvas, action)
    support.extract_action = action
    edit = next((a.menu() for a in window.menuBar().actions() if a.menu() is not None and a.text() == "&Edit"), None)
    if edit is not None:
        edit.addSeparator()
        edit.addAction(action)
    context_menu(window.canvas).addAction(action)
    return support


__all__ = ["BehaviourInfo", "ExtractRefused", "Extraction", "SubgraphSupport", "behaviour_info", "behaviour_node",
           "edit_subgraph_field", "extraction_command", "files_used", "first_save_command", "install", "plan_extraction",
           "subgraph_port_counts", "subgraph_summary"]
