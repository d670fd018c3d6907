"""What a node type's validation rules see: ``NodeChecks``.

``runtime.asset.validation.validate_asset`` checks what no single node can (ids, the start node,
exit targets, reachability, model files) and asks each node for its own rules through
``node.check(checks)`` and, once reachability is known, ``node.check_in_graph(checks)``.

Validation runs on every edit, on graphs of thousands of nodes, so a rule must not walk the
graph once per node: the walks here visit each node and exit once, and ``once`` shares one
walk between every node that asks (``runs_later`` answers "what can run after this node?"
for all nodes in one walk; ``downstream`` walks from one node and is for rules of rare nodes).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from runtime.nodes.base import END
from runtime.problems import Problem

if TYPE_CHECKING:  # pragma: no cover
    from runtime.nodes.base import NodeBase

TokenCounter = Callable[[str], int]


class Graph(Protocol):
    """What the checks read of an asset (``runtime.asset.model.Asset`` is one): named here, so the
    node types never import the asset model that is built from their registry."""

    start_node: str
    nodes: Sequence[NodeBase]
    variables: dict[str, Any]

    def model_for(self, node: NodeBase) -> str: ...

ModelContext = Callable[[str], "int | None"]


class GraphShape:
    """The shape of a graph: its node ids in order, where each node's exits lead, and the start node.

    The walks over a graph (what follows what, what a turn can reach) depend on nothing else, so
    they are kept here: ``runtime.asset.validation.Validator`` keeps a shape, with every walk done on
    it, from one validation to the next while an edit leaves the shape as it was (a title, a
    prompt, a temperature), and a new shape starts with no walks. Walk results are shared:
    read them, never change them.
    """

    def __init__(self, start: str, entries: tuple[tuple[str, tuple[str, ...]], ...]) -> None:
        # entries: (node id, the targets of its exits in order, '' for END) for every node in order
        self.key = (start, entries)
        self.start = start
        ids = {node_id for node_id, _targets in entries}
        # A repeated id (an error reported elsewhere) is the last node with it, as a dict of nodes keeps it.
        self.successors: dict[str, list[str]] = {
            node_id: [t for t in targets if t in ids] for node_id, targets in entries}
        # Nodes (by position) with an exit that names no node, and the ids of nodes that can end the
        # turn: an END exit or one that names no node.
        self.dangling = [i for i, (_n, targets) in enumerate(entries) if any(t != END and t not in ids for t in targets)]
        self.ends = [node_id for node_id, targets in entries if any(t == END or t not in ids for t in targets)]
        self._predecessors: dict[str, list[str]] | None = None
        self.walks: dict[tuple, Any] = {}

    def predecessors(self) -> dict[str, list[str]]:
        if self._predecessors is None:
            before: dict[str, list[str]] = {n: [] for n in self.successors}
            for source, targets in self.successors.items():
                for target in dict.fromkeys(targets):
                    before[target].append(source)
            self._predecessors = before
        return self._predecessors

    def walk(self, key: tuple, compute: Callable[[], Any]) -> Any:
        """``compute()`` for this shape: once, however many validations ask."""
        if key not in self.walks:
            self.walks[key] = compute()
        return self.walks[key]


def graph_shape(asset: Graph) -> GraphShape:
    return GraphShape(asset.start_node, tuple((n.id, tuple(n.exits().values())) for n in asset.nodes))


class NodeChecks:
    """The graph around one node, token counts, model sizes, and where problems go."""

    def __init__(
        self,
        asset: Graph,
        problems: list[Problem],
        source: str = "",
        asset_dir: str | os.PathLike[str] | None = None,
        count: TokenCounter | None = None,
        model_context: ModelContext | None = None,
        shape: GraphShape | None = None,
        memo: Callable[[NodeBase], dict[Any, Any]] | None = None,
    ) -> None:
        self.asset = asset
        self.problems = problems
        self.source = source
        self.asset_dir = asset_dir
        self.count: TokenCounter = count or estimate_tokens
        self._model_context = model_context
        self._contexts: dict[str, int | None] = {}
        self.by_id = {n.id: n for n in asset.nodes}
        self.shape = shape if shape is not None else graph_shape(asset)
        self._memo = memo
        self.reachable: set[str] = set()
        self.node: NodeBase | None = None
        self._once: dict[str, Any] = {}

    def about(self, node: NodeBase) -> NodeChecks:
        """These checks, reporting on ``node``."""
        self.node = node
        return self

    def error(self, message: str, field: str = "") -> None:
        self._report("error", message, field)

    def warning(self, message: str, field: str = "") -> None:
        self._report("warning", message, field)

    def _report(self, severity: str, message: str, field: str) -> None:
        node_id = self.node.id if self.node is not None else ""
        self.problems.append(Problem(severity, message, self.source, node_id, field))  # type: ignore[arg-type]

    def model_context(self, node: NodeBase) -> int | None:
        """The trained context size of the model ``node`` uses, when it can be read."""
        if self._model_context is None:
            return None
        name = self.asset.model_for(node)
        if name not in self._contexts:
            self._contexts[name] = self._model_context(name)
        return self._contexts[name]

    def node_value(self, node: NodeBase, key: Any, compute: Callable[[], Any]) -> Any:
        """``compute()``, a value that depends only on ``node``'s fields and ``key`` (which names
        everything else it depends on): kept with the node while the node is unchanged."""
        if self._memo is None:
            return compute()
        kept = self._memo(node)
        if key not in kept:
            kept[key] = compute()
        return kept[key]

    def history_budget(self, node: NodeBase) -> int | None:
        """``node.history_budget`` with the context size of its model (kept with the node)."""
        context = self.model_context(node)
        return self.node_value(node, ("history_budget", context), lambda: node.history_budget(context))

    def successors(self, node_id: str) -> list[str]:
        """The nodes ``node_id``'s exits lead to (END and exits that name no node left out)."""
        return self.shape.successors[node_id]

    def predecessors(self, node_id: str) -> list[str]:
        """The nodes with an exit to ``node_id`` (each once, in node order)."""
        return self.shape.predecessors().get(node_id, [])

    def leading_to(self, node_ids: set[str] | list[str]) -> set[str]:
        """``node_ids`` and every node from which a turn can go on to one of them (one walk back
        along the exits)."""
        start = frozenset(n for n in node_ids if n in self.by_id)
        return set(self.shape.walk(("leading_to", start), lambda: self._leading_to(start)))

    def _leading_to(self, start: frozenset[str]) -> set[str]:
        found = set(start)
        stack = list(found)
        before = self.shape.predecessors()
        while stack:
            for node_id in before.get(stack.pop(), ()):
                if node_id not in found:
                    found.add(node_id)
                    stack.append(node_id)
        return found

    def runs_later(self, wanted: Callable[[NodeBase], bool]) -> dict[str, str]:
        """Node id -> the nearest node for which ``wanted`` is true that a turn can run after it (one or
        more exits on; the node itself only on a loop back to it). Nodes after which no such node
        can run are left out. One walk back along the exits from every wanted node, for all nodes
        at once: share it with ``once``."""
        chosen = tuple(node_id for node_id, node in self.by_id.items() if wanted(node))
        return dict(self.shape.walk(("runs_later", chosen), lambda: self._runs_later(chosen)))

    def _runs_later(self, chosen: tuple[str, ...]) -> dict[str, str]:
        later: dict[str, str] = {}
        # (node, the nearest wanted node at or after it); the queue keeps them nearest first
        queue = deque((node_id, node_id) for node_id in chosen)
        labelled = set(chosen)
        before_of = self.shape.predecessors()
        while queue:
            node_id, nearest = queue.popleft()
            for before in before_of.get(node_id, ()):
                if before not in later:
                    later[before] = nearest
                    if before not in labelled:
                        labelled.add(before)
                        queue.append((before, nearest))
        return later

    def once(self, key: str, compute: Callable[[], Any]) -> Any:
        """``compute()``, computed once per validation: a graph walk every node of a type shares."""
        if key not in self._once:
            self._once[key] = compute()
        return self._once[key]

    def reachable_without(self, stop: Callable[[NodeBase], bool]) -> set[str]:
        """The nodes a turn can run on some path from the start node that runs no node for which
        ``stop`` is true (those nodes are left out, and so is what only they lead to)."""
        stopped = frozenset(node_id for node_id, node in self.by_id.items() if stop(node))
        return set(self.shape.walk(("reachable_without", stopped), lambda: self._reachable_without(stopped)))

    def _reachable_without(self, stopped: frozenset[str]) -> set[str]:
        start = self.asset.start_node
        if start not in self.by_id or start in stopped:
            return set()
        seen = {start}
        stack = [start]
        successors = self.shape.successors
        while stack:
            for nxt in successors[stack.pop()]:
                if nxt not in seen and nxt not in stopped:
                    seen.add(nxt)
                    stack.append(nxt)
        return seen

    def downstream(self, node_id: str) -> set[str]:
        """Every node a turn can run after ``node_id`` (walking its exits)."""
        return set(self.shape.walk(("downstream", node_id), lambda: self._downstream(node_id)))

    def _downstream(self, node_id: str) -> set[str]:
        after: set[str] = set()
        stack = list(self.successors(node_id))
        while stack:
            current = stack.pop()
            if current in after:
                continue
            after.add(current)
            stack.extend(self.successors(current))
        return after


def estimate_tokens(text: str) -> int:
    """A tokenizer-free estimate (about four characters a token for English)."""
    return (len(text) + 3) // 4
