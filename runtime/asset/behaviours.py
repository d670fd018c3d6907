"""Behaviours: asset files that other assets run as one step, through a Subgraph node.

A behaviour is an ordinary asset file. Its **ports** (the exits of every Subgraph node that runs it)
are its Exit nodes, by id in file order, then ``next`` when one of its other nodes' exits ends the
turn (END). A Subgraph node names the file relative to its own asset's folder (a behaviour that runs
another names it relative to its own folder); absolute paths are refused, so that a folder of
agents and their behaviours can move as a whole.

``expand`` gives the graph an agent runs: every Subgraph node ``guard`` stays and runs straight
through (its one exit, ``enter``, goes to ``guard/<the behaviour's start node>``); the behaviour's
nodes are added as ``guard/<id>`` (nested: ``guard/inner/x``), their exits to ``X`` lead to
``guard/X``, their END exits to the Subgraph's ``next`` target, and its Exit node ``guard/NAME`` to
the Subgraph's target for port NAME. Ids holding ``/`` (``runtime.names.NAMESPACE_SEP``) exist only
in expanded graphs, never in files.

Behaviours are read afresh by every ``expand`` and ``problems`` call: there is no cache to go
stale, so an edited behaviour changes every asset using it on its next load.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath, PureWindowsPath

from runtime.asset.file import load_asset
from runtime.asset.model import END, Asset, NodeBase, is_valid_id
from runtime.names import NAMESPACE_SEP, namespaced
from runtime.nodes import shown_exits
from runtime.nodes.exit import Exit
from runtime.nodes.subgraph import END_PORT, Subgraph
from runtime.problems import AssetError, Problem

__all__ = ["END_PORT", "behaviour_path", "behaviour_ports", "expand", "expanded_from_dict", "expanded_to_dict",
           "has_behaviours", "load_behaviour", "node_folders", "ports_of", "problems"]

PathLike = str | os.PathLike[str]


def behaviour_path(asset_dir: PathLike | None, rel: str) -> Path:
    """The file a Subgraph node's ``behaviour`` names, from the folder of the asset holding the node.
    Raises ValueError saying what to do for an empty or absolute path, or no folder (an unsaved asset)."""
    if not rel.strip():
        raise ValueError("no behaviour: choose the asset file this node runs")
    if asset_dir is None:  # before "absolute": the editor names a behaviour so until the first save
        raise ValueError("the asset has no folder yet: save it first, then its behaviours are found relative to it")
    if PurePosixPath(rel).is_absolute() or PureWindowsPath(rel).is_absolute() or PureWindowsPath(rel).drive:
        raise ValueError(f"{rel!r} is an absolute path; give the behaviour's path relative to this asset's folder "
                         "(behaviours/guard_threats.json), so the folder can move as a whole")
    return Path(asset_dir) / rel.replace("\\", "/")


def load_behaviour(asset_dir: PathLike | None, rel: str) -> Asset:
    """The behaviour ``rel`` names from ``asset_dir``, read now. Raises ``AssetError`` with its own
    problems (located in its file), or one naming the path when it cannot be found."""
    try:
        path = behaviour_path(asset_dir, rel)
    except ValueError as exc:
        raise AssetError([Problem("error", str(exc), field="behaviour")]) from None
    if not path.is_file():
        raise AssetError([Problem("error", f"no behaviour file {rel} (looked for {path})", str(path))])
    return load_asset(path)


def ports_of(behaviour: Asset) -> list[str]:
    """A behaviour's ports: its Exit nodes' ids in file order, then ``next`` when another node's exit
    ends the turn (an Exit node called ``next`` is that same port)."""
    ports = [n.id for n in behaviour.nodes if isinstance(n, Exit)]
    ends = any(target == END for n in behaviour.nodes if not isinstance(n, Exit)
               for target in shown_exits(n).values())
    if ends and END_PORT not in ports:
        ports.append(END_PORT)
    return ports


def behaviour_ports(behaviour: Asset | PathLike) -> list[str]:
    """``ports_of`` the behaviour, given as an asset or the path of its file (read now; raises
    ``AssetError``)."""
    return ports_of(behaviour if isinstance(behaviour, Asset) else load_asset(behaviour))


def has_behaviours(asset: Asset) -> bool:
    """Whether ``asset`` holds a Subgraph or Exit node that ``expand`` would change (one not expanded yet)."""
    return any(isinstance(n, Subgraph) and not n.expanded or isinstance(n, Exit) and not n.exits()
               for n in asset.nodes)


# --- reading the behaviours of an asset, all the way down ---------------------------------------------


# How far behaviours may run behaviours, and how many nodes an asset's behaviours may expand to:
# 13 small files each running the next twice froze the server for 19 s (2**13 copies), and a chain
# 1,000 deep ended in a RecursionError.
MAX_BEHAVIOUR_DEPTH = 16
MAX_EXPANDED_NODES = 10_000


@dataclass
class _Hop:
    """One behaviour file being expanded (the chain of these finds a cycle before it recurses)."""

    path: Path
    shown: str


@dataclass
class _Reading:
    """What one ``expand`` or ``problems`` call read: each file once, however many nodes run it."""

    root: Path | None
    source: str
    files: dict[Path, Asset | AssetError] = field(default_factory=dict)
    # The only files there are, when given (a repro bundle's), by ``os.path.normpath`` of their path:
    # nothing is read from disk.
    given: Mapping[str, Asset] | None = None
    # The only folders files may be read from, when given (``parley serve``'s --assets): a file outside
    # them, however reached (``..``, a link), is refused unread, and no problem shows a full path.
    within: tuple[Path, ...] = ()
    expanded: int = 0  # nodes the behaviours read so far expand to, every Subgraph node counted
    over: bool = False  # past MAX_EXPANDED_NODES: said once, and nothing more is read

    def identity(self, path: Path) -> Path:
        """The file ``path`` is, however it is spelled (a cycle is the same file twice)."""
        return path.resolve() if self.given is None else Path(os.path.normpath(path))

    def is_file(self, path: Path) -> bool:
        return path.is_file() if self.given is None else os.path.normpath(path) in self.given

    def shown(self, path: Path) -> str:
        if self.root is not None:
            try:
                return Path(os.path.relpath(path, self.root)).as_posix()
            except ValueError:  # another drive
                pass
        return str(path)

    def read(self, path: Path) -> Asset:
        if self.given is not None:
            return self.given[os.path.normpath(path)]
        key = path.resolve()
        if key not in self.files:
            try:
                self.files[key] = load_asset(path)
            except AssetError as exc:
                self.files[key] = exc
        found = self.files[key]
        if isinstance(found, AssetError):
            raise found
        return found


def _node_problems(reading: _Reading, node: Subgraph, folder: Path | None, chain: list[_Hop], where: str,
                   into: list[Problem]) -> tuple[Path, Asset] | None:
    """The behaviour ``node`` runs, read, with its own problems and those of the behaviours it runs
    (``where`` names the node to the user). Every problem found goes to ``into``, located at the node's
    ``behaviour`` field; None when the behaviour cannot be expanded."""
    def error(message: str, fieldname: str = "behaviour") -> None:
        into.append(Problem("error", message, reading.source, where, fieldname))

    if reading.over:
        return None
    if len(chain) >= MAX_BEHAVIOUR_DEPTH:
        error(f"behaviours run behaviours {MAX_BEHAVIOUR_DEPTH} deep here, the most there may be; run the inner "
              "ones from fewer levels")
        return None
    try:
        path = behaviour_path(folder, node.behaviour)
    except ValueError as exc:
        if node.behaviour.strip():  # an empty one is the node's own check's problem
            error(str(exc))
        return None
    shown = reading.shown(path)
    resolved = reading.identity(path)
    if any(hop.path == resolved for hop in chain):
        names = [hop.shown for hop in chain[next(i for i, h in enumerate(chain) if h.path == resolved):]]
        error(f"a cycle of behaviours: {' uses '.join([*names, shown])}; a behaviour cannot run itself")
        return None
    if reading.within and reading.given is None and not any(resolved.is_relative_to(d) for d in reading.within):
        error(f"{node.behaviour}: outside the folders this server serves (--assets); a behaviour must be inside "
              "them, and a link out of them is not followed")
        return None
    if not reading.is_file(path):
        kind = "not a file" if reading.given is None and path.exists() else "no file"
        error(f"{kind} {shown}: the behaviour this node runs" + ("" if reading.within else f" (looked for {path})"))
        return None
    try:
        behaviour = reading.read(path)
    except AssetError as exc:
        for problem in exc.problems:
            error(f"the behaviour {shown} cannot be loaded: {dataclasses.replace(problem, file=shown)}")
        return None
    reading.expanded += len(behaviour.nodes)
    if reading.expanded > MAX_EXPANDED_NODES:
        reading.over = True
        error(f"the behaviours expand to more than {MAX_EXPANDED_NODES:,} nodes (each Subgraph node runs its "
              f"own copy of its behaviour; {shown} among them): run fewer, or fewer nested ones")
        return None
    ports = ports_of(behaviour)
    if not ports:
        error(f"the behaviour {shown} has no exit: add an Exit node to it (a named exit), or leave one of its "
              "exits empty (END, the port 'next')")
    failed = len(into)
    inner_chain = [*chain, _Hop(resolved, shown)]
    for inner in behaviour.nodes:
        if isinstance(inner, Subgraph) and not inner.expanded:
            found: list[Problem] = []
            _node_problems(reading, inner, path.parent, inner_chain, inner.id, found)
            for problem in found:
                error(f"in the behaviour {shown}: {problem.node_id}.{problem.field}: {problem.message}")
    if len(into) > failed or not ports:
        return None
    missing = [p for p in ports if p not in node.exit_targets]
    if missing:
        error(f"the behaviour {shown} has the exits {', '.join(ports)}; this node has none for "
              f"{', '.join(missing)} (reload the behaviour to add them)", "exits")
    for key in node.exit_targets:
        if key not in ports:
            error(f"the behaviour {shown} has no exit {key!r} (its exits: {', '.join(ports)}); reload the "
                  "behaviour to drop it", f"exits.{key}")
    return path, behaviour


def problems(asset: Asset, asset_dir: PathLike | None, source: str = "", *,
             files: Mapping[str, Asset] | None = None, within: Sequence[PathLike] = ()) -> list[Problem]:
    """Every problem of the behaviours ``asset``'s Subgraph nodes run, as errors at each node's
    ``behaviour`` (or ``exits``) field: a path that is absolute or names no file, a cycle of files
    running each other, a behaviour that cannot be loaded (each of its problems, located in its file),
    one with no exit, and exits that do not match the behaviour's ports. ``source`` is the asset's
    file (it is part of a cycle too). ``files``, when given, are the only behaviour files there are
    (a repro bundle's), by ``os.path.normpath`` of the path ``behaviour_path`` gives from
    ``asset_dir``: nothing is read from disk. ``within``, when given, are the only folders a behaviour
    may be read from (``parley serve``'s --assets: a file outside them is refused unread)."""
    root = Path(asset_dir) if asset_dir is not None else None
    reading = _Reading(root, source, given=files, within=tuple(Path(d).resolve() for d in within))
    chain = ([_Hop(Path(source).resolve(), Path(source).name)]
             if files is None and source and Path(source).is_file() else [])
    found: list[Problem] = []
    for node in asset.nodes:
        if isinstance(node, Subgraph) and not node.expanded:
            _node_problems(reading, node, root, chain, node.id, found)
    return found


def node_folders(expanded: Asset) -> dict[str, str]:
    """Namespaced node id -> the folder of the behaviour file it comes from, for every node of an
    expanded asset that a behaviour added: a relative path in such a node (a Retrieve node's
    ``source_file``) is read from its own behaviour's folder. The agent's own nodes are not in it."""
    folders = {n.id: n.behaviour_folder for n in expanded.nodes if isinstance(n, Subgraph) and n.expanded}
    out = {}
    for node in expanded.nodes:
        owner = node.id
        while NAMESPACE_SEP in owner:
            owner = owner.rsplit(NAMESPACE_SEP, 1)[0]
            if owner in folders:  # the nearest Subgraph node: the behaviour the node is written in
                out[node.id] = folders[owner]
                break
    return out


_EXPANDED_KEY = "__expanded__"  # where an expanded node's own state is kept in ``expanded_to_dict``


def expanded_to_dict(asset: Asset) -> dict:
    """An asset, expanded or not, as JSON data that ``expanded_from_dict`` reads back the same (a
    kept test run's asset): an expanded node's state (a Subgraph node's entry and folder, an Exit
    node's target) is kept under ``__expanded__``. Not an asset file: files hold no namespaced ids."""
    raw = asset.model_dump(mode="json", by_alias=True)
    for node, out in zip(asset.nodes, raw["nodes"]):
        if isinstance(node, Subgraph) and node.expanded:
            out[_EXPANDED_KEY] = {"entry": node.exits()["enter"], "folder": node.behaviour_folder}
        elif isinstance(node, Exit) and node.exits():
            out[_EXPANDED_KEY] = {"target": node.exits()["default_exit"]}
    return raw


def expanded_from_dict(raw: dict) -> Asset:
    """``expanded_to_dict``'s data as the asset it was. Raises ValueError (a pydantic
    ValidationError among them) or KeyError for data it did not write."""
    from runtime.nodes import node_model

    nodes: list[NodeBase] = []
    for data in raw.get("nodes", []):
        data = dict(data)
        state, node_id = data.pop(_EXPANDED_KEY, None), data.get("id", "")
        # validated under a plain id, then given its own (a namespaced one no file may hold)
        node = node_model(data["type"]).model_validate({**data, "id": "node"}).model_copy(update={"id": node_id})
        if NAMESPACE_SEP in node_id and not all(is_valid_id(part) for part in node_id.split(NAMESPACE_SEP)):
            raise ValueError(f"{node_id!r} is not a node id")
        if isinstance(node, Subgraph) and state is not None:
            node = node.entered(str(state["entry"]), str(state["folder"]))
        elif isinstance(node, Exit) and state is not None:
            node = node.leading_to(str(state["target"]))
        nodes.append(node)
    return Asset.model_validate({**raw, "nodes": nodes})


# --- expanding ------------------------------------------------------------------------------------


def expand(asset: Asset, asset_dir: PathLike | None, source: str = "", *,
           files: Mapping[str, Asset] | None = None) -> Asset:
    """The flattened graph an agent runs (see the module's docstring); ``asset`` itself when it holds
    no Subgraph or Exit node, and an asset expanded already is returned as it is. Raises
    ``AssetError`` with ``problems`` when a behaviour cannot be expanded (missing, a cycle, not
    loadable, no exit). Exits that do not match the behaviour's ports are no reason to refuse: a
    port this node does not name ends the turn, a name the behaviour has no port for is not used
    (validation reports both). ``files``: as for ``problems``, the only behaviour files there are."""
    if not has_behaviours(asset):
        return asset
    found = problems(asset, asset_dir, source, files=files)
    # A Subgraph node with no behaviour yet (one just added) is its own check's problem, not a file's
    empty = [Problem("error", "no behaviour: choose the asset file this node runs", source, n.id, "behaviour")
             for n in asset.nodes if isinstance(n, Subgraph) and not n.expanded and not n.behaviour.strip()]
    errors = empty + [p for p in found if p.severity == "error" and p.field == "behaviour"]
    if errors:
        raise AssetError(errors)
    root = Path(asset_dir) if asset_dir is not None else None
    reading = _Reading(root, source, given=files)
    nodes, variables = _flattened(asset, root, reading)
    top = [n.leading_to(END) if isinstance(n, Exit) and not n.exits() else n for n in nodes]
    return asset.model_copy(update={"nodes": top, "variables": {**variables, **asset.variables}})


def _flattened(asset: Asset, folder: Path | None, reading: _Reading) -> tuple[list[NodeBase], dict]:
    """``asset``'s nodes with every Subgraph node's behaviour added under its namespace (its own Exit
    nodes left as they are, for the asset running it to lead on), and the behaviours' variables."""
    nodes: list[NodeBase] = []
    variables: dict = {}
    for node in asset.nodes:
        if not isinstance(node, Subgraph) or node.expanded:
            nodes.append(node)
            continue
        path = behaviour_path(folder, node.behaviour)
        behaviour = reading.read(path)
        inner, inner_variables = _flattened(behaviour, path.parent, reading)
        variables.update({**inner_variables, **behaviour.variables})
        ns = node.id
        after = node.exit_targets.get(END_PORT, END)

        def lead(target: str, ns: str = ns, after: str = after) -> str:
            return after if target == END else namespaced(ns, target)

        nodes.append(node.entered(namespaced(ns, behaviour.start_node), str(path.parent)))
        ids = {n.id for n in inner}
        for n in inner:
            nodes.append(_moved(n, ns, lead, node.exit_targets, ids))
    return nodes, variables


def _moved(node: NodeBase, ns: str, lead, targets: dict[str, str], ids: set[str] = frozenset()) -> NodeBase:
    """``node`` of a behaviour as the node ``ns`` of the asset running it has it: its id namespaced,
    its exits led on (``lead``); the behaviour's own Exit nodes go on to the Subgraph node's
    ``targets``. A node that checks the reply of one of the behaviour's nodes (``ids``; a Guard's
    input) checks that node under its namespaced id, the slot it writes."""
    new_id = namespaced(ns, node.id)
    checked = node.checks_reply_of()
    renamed = {"input": namespaced(ns, checked)} if checked in ids else {}
    if isinstance(node, Exit):
        if node.exits():  # an Exit of a behaviour nested further in: led on already, within its behaviour
            return node.model_copy(update={"id": new_id}).leading_to(lead(node.exits()["default_exit"]))
        return node.model_copy(update={"id": new_id}).leading_to(targets.get(node.id, END))
    if isinstance(node, Subgraph) and node.expanded:
        return node.model_copy(update={"id": new_id}).entered(lead(node.exits()["enter"]), node.behaviour_folder)
    exits = shown_exits(node)
    if exits:
        # with_exits validates the node anew, and a namespaced id is no id a file may hold: it is
        # led on under its own last name, then renamed
        plain = node.model_copy(update={"id": "behaviour_node"})
        node = plain.with_exits({port: lead(target) for port, target in exits.items()})
    return node.model_copy(update={"id": new_id, **renamed})
