"""Graph-level checks of an asset: the problems a single field cannot see.

Field types and ranges are checked by the model on load (``runtime.asset.file``);
this module checks how nodes fit together and warns about the pitfalls the spec
names. It runs on every edit in the editor, so it stays cheap: no model is loaded,
and token counts come from the caller's counter (a real tokenizer when one is
loaded, an estimate otherwise).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from runtime.asset.behaviours import expand, has_behaviours, node_folders
from runtime.asset.behaviours import problems as behaviour_problems
from runtime.asset.file import load_asset
from runtime.asset.model import END, Asset, ModelParams, NodeBase
from runtime.models.folder import ModelFileError, resolve_model
from runtime.models.gguf import GGUFInfo, read_gguf
from runtime.names import NAMESPACE_SEP
from runtime.nodes import PLUGIN_PROBLEMS, NodeChecks, checked_exits, failure_text, shown_exits
from runtime.nodes.checks import GraphShape, ModelContext, TokenCounter, estimate_tokens
from runtime.nodes.exit import Exit
from runtime.nodes.subgraph import Subgraph
from runtime.problems import AssetError, InputError, Problem

__all__ = ["ModelContext", "ModelFiles", "TokenCounter", "Validator", "check_file", "estimate_tokens", "validate_asset"]


_LOOKUP_ERRORS = (InputError, ModelFileError, OSError, ValueError)
log = logging.getLogger("parley.runtime")


class ModelFiles:
    """The model files an asset names, looked up on this machine: their trained context size (from the
    GGUF header, cached) and why a file cannot be used. Lookups never raise."""

    def __init__(self, asset_dir: str | os.PathLike[str] | None = None) -> None:
        self.asset_dir = asset_dir
        # One lookup per model name for this object's life (one validation): nodes share models.
        self._found: dict[str, GGUFInfo | Exception] = {}

    def _info(self, name: str) -> GGUFInfo:
        if name not in self._found:
            try:
                self._found[name] = read_gguf(resolve_model(name, self.asset_dir))
            except _LOOKUP_ERRORS as exc:
                self._found[name] = exc
        found = self._found[name]
        if isinstance(found, Exception):
            raise found
        return found

    def context(self, name: str) -> int | None:
        try:
            return self._info(name).context_length or None
        except _LOOKUP_ERRORS:
            return None

    def problem(self, name: str) -> str | None:
        try:
            self._info(name)
        except _LOOKUP_ERRORS as exc:
            return " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        return None


def as_run(asset: Asset, asset_dir: str | os.PathLike[str] | None, source: str = "") -> tuple[Asset, list[Problem]]:
    """``asset`` as an agent runs it, for a reader of the whole graph (validation, the memory
    estimate): its behaviours, read from ``asset_dir``, expanded into namespaced nodes
    (``guard/classify``), and no problems; or, when a behaviour cannot be expanded, the asset as it is
    and why. With the session's, the one way a graph's behaviours are read, so a new reader cannot
    skip them by forgetting a call."""
    if not has_behaviours(asset):
        return asset, []
    try:
        return expand(asset, asset_dir, source), []
    except AssetError as exc:
        return asset, list(exc.problems)


def validate_asset(asset: Asset, *args: Any, **options: Any) -> list[Problem]:
    """Every graph-level error and warning, in node order: ``Validator.validate`` (and its
    parameters) on a fresh validator."""
    return Validator().validate(asset, *args, **options)


class _NodeFacts:
    """What validation keeps about one node object while it is unchanged (the editor replaces a
    node it changes; only its position is set in place, and no rule reads it)."""

    __slots__ = ("entry", "exits", "exits_failed", "local", "memo", "node", "own_model", "uses_model")

    def __init__(self, node: NodeBase) -> None:
        self.node = node  # kept alive, so id(node) names this object for as long as the facts live
        self.exits, self.exits_failed = _node_exits(node)
        # A node without exits (an Exit node) ends the turn where it is.
        self.entry = (node.id, tuple(self.exits.values()) or (END,))
        self.uses_model = node.uses_model()
        self.own_model = node.model_name if isinstance(node, ModelParams) else ""
        self.local: tuple[tuple, list[Problem]] | None = None  # (what check() saw, its problems)
        self.memo: dict = {}  # NodeChecks.node_value


class Validator:
    """``validate_asset`` for an asset validated again after every edit (the editor's document).

    It gives exactly the problems ``validate_asset`` gives, in the same order, but keeps what an
    edit cannot have changed: each node's own rules (``check``) while the node object is the same
    (the editor replaces a node it changes), and the graph's walks (reachability, what runs after
    what) while the ids, exits and start node are as they were. The rules that need the rest of the
    graph (``check_in_graph``) run on every validation, on those kept walks.
    """

    def __init__(self) -> None:
        self._facts: dict[int, _NodeFacts] = {}
        self._shape: GraphShape | None = None
        self._local_key: tuple = ()

    def validate(
        self,
        asset: Asset,
        source: str = "",
        asset_dir: str | os.PathLike[str] | None = None,
        count_tokens: TokenCounter | None = None,
        model_context: ModelContext | None = None,
        models: ModelFiles | None = None,
    ) -> list[Problem]:
        """Every graph-level error and warning, in node order. With ``models``, model files are
        looked up (a missing or unreadable one is a warning) and their context sizes feed the
        budget checks.

        An asset with Subgraph nodes is validated as it runs: its behaviours (read from
        ``asset_dir`` now) expanded, their nodes' problems under namespaced ids (``guard/classify``),
        then the problems of the behaviours themselves at each Subgraph node (``behaviours.problems``).
        A behaviour that cannot be expanded leaves the asset checked as it is, its Subgraph nodes
        taken at their word (their ``exits``)."""
        if not has_behaviours(asset):
            return self._validate(asset, source, asset_dir, count_tokens, model_context, models)
        found = behaviour_problems(asset, asset_dir, source)
        flat, refused = (asset, found) if any(p.field == "behaviour" for p in found) else as_run(asset, asset_dir, source)
        if refused:  # a behaviour cannot be expanded (or a Subgraph node has none yet)
            return self._validate(asset, source, asset_dir, count_tokens, model_context, models) + found
        checked = self._validate(flat, source, asset_dir, count_tokens, model_context, models, node_folders(flat))
        return _at_source_nodes(flat, checked) + found

    def _validate(
        self,
        asset: Asset,
        source: str,
        asset_dir: str | os.PathLike[str] | None,
        count_tokens: TokenCounter | None,
        model_context: ModelContext | None,
        models: ModelFiles | None,
        folders: dict[str, str] | None = None,  # a behaviour's node -> its file's folder
    ) -> list[Problem]:
        if model_context is None and models is not None:
            model_context = models.context
        kept = self._facts
        facts: dict[int, _NodeFacts] = {}
        for node in asset.nodes:
            fact = kept.get(id(node))
            facts[id(node)] = fact if fact is not None and fact.node is node else _NodeFacts(node)
        self._facts = facts
        ordered = [facts[id(node)] for node in asset.nodes]
        entries = tuple(f.entry for f in ordered)
        shape = self._shape
        if shape is None or shape.start != asset.start_node or shape.key[1] != entries:
            shape = self._shape = GraphShape(asset.start_node, entries)

        problems: list[Problem] = [Problem("warning", p, source) for p in PLUGIN_PROBLEMS]
        checks = NodeChecks(asset, problems, source, asset_dir, count_tokens, model_context, shape,
                            lambda node: facts[id(node)].memo)

        def error(message: str, node_id: str = "", field: str = "") -> None:
            problems.append(Problem("error", message, source, node_id, field))

        def warning(message: str, node_id: str = "", field: str = "") -> None:
            problems.append(Problem("warning", message, source, node_id, field))

        problems += shape.walk(("repeated ids", source), lambda: _repeated_ids(shape, source))
        by_id = checks.by_id

        if not asset.nodes:
            error("the asset has no nodes; add one and make it the start node", field="nodes")
        if not asset.start_node:
            if asset.nodes:
                error("no start node is set", field="start_node")
        elif asset.start_node not in by_id:
            error(f"start node {asset.start_node!r} is not a node of this asset", field="start_node")

        dangling = set(shape.dangling)
        # What a node's own rules see besides the node; the same object while it stays the same, so
        # that each node's kept result is checked with ``is`` (comparing paths 5,000 times is not free).
        local_key = (source, asset_dir, count_tokens)
        if local_key != self._local_key:
            self._local_key = local_key
        local_key = self._local_key
        for index, (node, fact) in enumerate(zip(asset.nodes, ordered)):
            if fact.exits_failed:
                error(fact.exits_failed, node.id)
            if index in dangling:
                for port, target in fact.exits.items():
                    if target != END and target not in by_id:
                        error(f"exit names no node: {target!r}", node.id, _exit_field(node, port))
            if fact.uses_model and not asset.model_source(fact.own_model)[0]:
                warning("no model: set the node's model_name or the agent's default_model", node.id, "model_name")
            if node.bypassed:
                port = node.bypass_port()
                along = f"pass along its {node.exit_label(port)} exit" if port else "end at it"
                loop = _bypass_loop(node, by_id)
                if loop:
                    error(f"bypassed, and its {node.exit_label(port)} exit leads back to it through bypassed "
                          f"nodes only ({' -> '.join(loop)}): every turn that reaches it would go round without end. "
                          "Run one of them, or point an exit elsewhere", node.id, "bypassed")
                else:
                    warning(f"bypassed: turns {along} without running it", node.id, "bypassed")
            if fact.local is not None and fact.local[0] is local_key and not node.CHECK_READS_FILES:
                problems += fact.local[1]
            else:
                first = len(problems)
                checks.asset_dir = folders.get(node.id, asset_dir) if folders else asset_dir
                _run_check(node, "check", lambda node=node: node.check(checks.about(node)), problems, source)
                fact.local = (local_key, problems[first:])

        if asset.start_node in by_id:
            seen, reported = shape.walk(("reachability", source), lambda: _reachability(asset, checks, source))
            checks.reachable = set(seen)
            problems += reported
            if asset.game_events:
                problems += _game_events(asset, checks, source)
        problems += _reply_tags(asset, source)

        if models is not None:
            reported_models: set[str] = set()
            for node, fact in zip(asset.nodes, ordered):
                name, field = asset.model_source(fact.own_model) if fact.uses_model else ("", "")
                if name and name not in reported_models:
                    reported_models.add(name)
                    trouble = models.problem(name)
                    if trouble:
                        warning(trouble, node.id if field == "model_name" else "", field)
        if model_context is not None:
            for node, fact in zip(asset.nodes, ordered):
                if fact.uses_model:
                    for problem in _above_trained(asset, node, model_context):
                        error(problem, node.id, "context_size")
        for node in asset.nodes:
            checks.asset_dir = folders.get(node.id, asset_dir) if folders else asset_dir
            _run_check(node, "check_in_graph", lambda node=node: node.check_in_graph(checks.about(node)), problems,
                       source)
        return problems


def _at_source_nodes(flat: Asset, problems: list[Problem]) -> list[Problem]:
    """``problems`` of an expanded asset, each where the designer fixes it: an exit of a behaviour's
    Exit node (``guard/refuse``) is the Subgraph node's exit for that port (``guard``, ``exits.refuse``)."""
    subgraphs = {n.id for n in flat.nodes if isinstance(n, Subgraph)}
    out = []
    for problem in problems:
        owner, _sep, port = problem.node_id.rpartition(NAMESPACE_SEP)
        if problem.field == "id" and owner in subgraphs and isinstance(_node_or_none(flat, problem.node_id), Exit):
            problem = dataclasses.replace(problem, node_id=owner, field=f"exits.{port}")
        out.append(problem)
    return out


def _node_or_none(asset: Asset, node_id: str) -> NodeBase | None:
    try:
        return asset.node(node_id)
    except KeyError:
        return None


def _above_trained(asset: Asset, node: NodeBase, model_context: ModelContext) -> list[str]:
    """Why a Context Size above the model's trained size cannot run: an error, not a warning, since
    every backend refuses such a context when the node runs (the turn fails), so the asset as it
    stands does not work with this model."""
    found = []
    for use in node.model_uses():
        name = asset.model_source(use.model_name, use.field)[0]
        trained = model_context(name) if name and use.context_size else None
        if trained and use.context_size > trained:
            found.append(
                f"context_size ({use.context_size:,}) is larger than {Path(name).name} was trained for "
                f"({trained:,} tokens): the engine refuses to run this node. Lower it to {trained:,} or less, "
                f"or set 0 to use the model's own ({trained:,})")
    return found


# --- a node type's own code, which may fail (a plugin's above all) -----------------------------------


def _node_exits(node: NodeBase) -> tuple[dict[str, str], str]:
    """The node's exits, and why they could not be read ("" when they could): a node type whose
    exits() raises, or gives something other than port -> node id, is a problem on the node and
    has no exits, so the rest of the graph is still checked."""
    found: dict[str, str] = {}

    def read() -> None:
        found.update(checked_exits(node))

    failed = _node_code(node, "exits", read)
    return ({}, failed) if failed else (found, "")


def _run_check(node: NodeBase, method: str, call: Callable[[], object], problems: list[Problem],
               source: str) -> None:
    """``call`` (one of the node's rules); if the node type's code raises, that is an error on the node
    and the other nodes are checked as usual."""
    failed = _node_code(node, method, call)
    if failed:
        problems.append(Problem("error", failed, source, node.id))


def _node_code(node: NodeBase, method: str, call: Callable[[], object]) -> str:
    """Why ``call`` into the node type's code failed ("" when it did not). Whatever it raises is
    kept (SystemExit too); only Ctrl+C on the main thread goes on."""
    try:
        call()
    except BaseException as exc:  # a node type's bug is a problem on its node, not a crash
        if isinstance(exc, KeyboardInterrupt) and threading.current_thread() is threading.main_thread():
            raise
        log.warning("node %s (%s): %s() raised", node.id, node.type_name, method, exc_info=exc)
        return (f"the {node.type_name} node type's {method}() failed, so the node is not fully checked: "
                f"{failure_text(exc)} (a bug in the node type: tell its author)")
    return ""


def _bypass_loop(node: NodeBase, by_id: Mapping[str, NodeBase]) -> list[str]:
    """The ids around a loop a turn takes through bypassed nodes only, from ``node`` back to it, or
    [] (a bypassed node passes the turn along its bypass port without running)."""
    path = [node.id]
    current = node
    while True:
        try:
            port = current.bypass_port()
            target = current.exits().get(port, END) if port else END
        except Exception:  # noqa: BLE001 - a plugin's exits that fail are reported on their own node
            return []
        if target == node.id:
            return [*path, node.id]
        following = by_id.get(target)
        if following is None or not following.bypassed or target in path:
            return []  # END, a node that runs, or a loop that does not come back to ``node`` (its own node says so)
        path.append(target)
        current = following


def _exit_field(node: NodeBase, port: str) -> str:
    try:
        return node.exit_field(port)
    except Exception:  # noqa: BLE001 - a node type's bug: the problem is shown on the node itself
        return ""


def _repeated_ids(shape: GraphShape, source: str) -> list[Problem]:
    seen: set[str] = set()
    repeated = []
    for node_id, _targets in shape.key[1]:
        if node_id in seen:
            repeated.append(Problem("error", "two nodes share this id; ids must be unique", source, node_id, "id"))
        seen.add(node_id)
    return repeated


def _reachability(asset: Asset, checks: NodeChecks, source: str) -> tuple[set[str], list[Problem]]:
    """Warn about nodes no turn reaches and fail loops no turn leaves; returns the reachable ids and
    the problems. Two walks, each visiting every node and exit once: forward from the start node,
    and back from the nodes that can end the turn. Depends on the graph's shape only."""
    problems: list[Problem] = []
    stack = [asset.start_node]
    seen = {asset.start_node}
    while stack:
        for nxt in checks.successors(stack.pop()):
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)

    for node_id, _targets in checks.shape.key[1]:
        if node_id not in seen:
            problems.append(Problem("warning", "unreachable: no path from the start node leads here", source, node_id))

    # Nodes that can reach END: those with an END exit (or one that names no node, reported
    # above), then everything that leads to them.
    can_end = checks.leading_to(checks.shape.ends)
    for node_id in sorted(n for n in seen if n not in can_end):
        problems.append(Problem(
            "error", "every path from this node loops back without reaching END: the turn can never finish",
            source, node_id))
    return seen, problems


def _game_events(asset: Asset, checks: NodeChecks, source: str) -> list[Problem]:
    """Errors for marks that name no node or exit; a warning for each marked node or exit a turn can
    reach on the player's word alone: from the start node, through no node that asks the game."""
    problems: list[Problem] = []
    way = ungrounded_paths(asset, checks)
    for index, event in enumerate(asset.game_events):
        node = checks.by_id.get(event.node)
        where = f"game_events.{index}"
        if node is None:
            problems.append(Problem("error", f"game event {event.name!r} names no node: {event.node!r}", source,
                                    "", f"{where}.node"))
            continue
        exits = shown_exits(node)
        if event.exit and event.exit not in exits:
            shown = ", ".join(exits) or "none"
            problems.append(Problem("error", f"game event {event.name!r} names exit {event.exit!r}, which node "
                                    f"{node.id!r} does not have (its exits: {shown})", source, node.id, where))
            continue
        if node.id not in way or (event.exit and node.ASKS_THE_GAME):
            continue
        steps = path_text(asset, way, node.id) + (f" \u2192 {node.exit_label(event.exit)}" if event.exit else "")
        problems.append(Problem(
            "warning", f"the game acts on {event.name!r} here, and a player can get here on their word alone: "
            f"{steps}, with no Tool Call the game answers on the way. Ask the game first: a Tool Call (such as "
            "check_inventory) whose outcomes branch on the game's answer.", source, node.id, ""))
    return problems


def _reply_tags(asset: Asset, source: str) -> list[Problem]:
    """A warning for each reply tag no node writes: the game would never get it."""
    written = {slot for node in asset.nodes for slot in node.slots_written()}
    return [Problem("warning", f"reply tag {name!r} is written by no node, so the game never gets it: add it as an "
                    "attribute of a Classify Attributes node (its slot), or remove it", source, "", f"reply_tags.{index}")
            for index, name in enumerate(asset.reply_tags) if name not in written]


def ungrounded_paths(asset: Asset, checks: NodeChecks) -> dict[str, tuple[str, str]]:
    """Node id -> (the node before it, the exit taken) on a shortest path from the start node that
    runs no node asking the game (a Tool Call); the start node maps to ('', '')."""
    start = asset.start_node
    if start not in checks.by_id:
        return {}
    way = {start: ("", "")}
    queue = [start]
    for current in queue:
        node = checks.by_id[current]
        if node.ASKS_THE_GAME:
            continue
        for port, target in shown_exits(node).items():
            if target in checks.by_id and target not in way:
                way[target] = (current, port)
                queue.append(target)
    return {k: v for k, v in way.items() if not checks.by_id[k].ASKS_THE_GAME or k == start}


def path_text(asset: Asset, way: dict[str, tuple[str, str]], node_id: str) -> str:
    """The path ``ungrounded_paths`` found to ``node_id``, as 'start \u2192 classify (turn_in) \u2192 reward'."""
    steps = [node_id]
    current = node_id
    while way[current][0]:
        before, port = way[current]
        label = asset.node(before).exit_label(port)
        steps.append(f"{before} ({label})" if port not in ("default_exit", "") else before)
        current = before
    return " \u2192 ".join(reversed(steps))


def check_file(path: str | os.PathLike[str], **kwargs) -> list[Problem]:
    """Load and validate one asset file: every problem, load errors included."""
    try:
        asset = load_asset(path)
    except AssetError as exc:
        return exc.problems
    kwargs.setdefault("models", ModelFiles(Path(path).parent))
    return validate_asset(asset, str(path), asset_dir=Path(path).parent, **kwargs)
