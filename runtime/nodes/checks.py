"""What a node type's validation rules see: ``NodeChecks``.

``runtime.validation.validate_asset`` checks what no single node can (ids, the start node,
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
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from runtime.problems import Problem

if TYPE_CHECKING:  # pragma: no cover
    from runtime.asset import Asset
    from runtime.nodes.base import NodeBase

TokenCounter = Callable[[str], int]
ModelContext = Callable[[str], "int | None"]


class NodeChecks:
    """The graph around one node, token counts, model sizes, and where problems go."""

    def __init__(
        self,
        asset: Asset,
        problems: list[Problem],
        source: str = "",
        asset_dir: str | os.PathLike[str] | None = None,
        count: TokenCounter | None = None,
        model_context: ModelContext | None = None,
    ) -> None:
        self.asset = asset
        self.problems = problems
        self.source = source
        self.asset_dir = asset_dir
        self.count: TokenCounter = count or estimate_tokens
        self._model_context = model_context
        self.by_id = {n.id: n for n in asset.nodes}
        self.reachable: set[str] = set()
        self.node: NodeBase | None = None
        self._once: dict[str, Any] = {}
        self._successors: dict[str, list[str]] = {}
        self._predecessors: dict[str, list[str]] | None = None

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
        return self._model_context(self.asset.model_for(node))

    def successors(self, node_id: str) -> list[str]:
        """The nodes ``node_id``'s exits lead to (END and exits that name no node left out)."""
        found = self._successors.get(node_id)
        if found is None:
            found = self._successors[node_id] = [t for t in self.by_id[node_id].exits().values() if t in self.by_id]
        return found

    def predecessors(self, node_id: str) -> list[str]:
        """The nodes with an exit to ``node_id`` (each once, in node order)."""
        if self._predecessors is None:
            before: dict[str, list[str]] = {n: [] for n in self.by_id}
            for source in self.by_id:
                for target in dict.fromkeys(self.successors(source)):
                    before[target].append(source)
            self._predecessors = before
        return self._predecessors.get(node_id, [])

    def leading_to(self, node_ids: set[str] | list[str]) -> set[str]:
        """``node_ids`` and every node from which a turn can go on to one of them (one walk back
        along the exits)."""
        found = {n for n in node_ids if n in self.by_id}
        stack = list(found)
        while stack:
            for before in self.predecessors(stack.pop()):
                if before not in found:
                    found.add(before)
                    stack.append(before)
        return found

    def runs_later(self, wanted: Callable[[NodeBase], bool]) -> dict[str, str]:
        """Node id -> the nearest node for which ``wanted`` is true that a turn can run after it (one or
        more exits on; the node itself only on a loop back to it). Nodes after which no such node
        can run are left out. One walk back along the exits from every wanted node, for all nodes
        at once: share it with ``once``."""
        later: dict[str, str] = {}
        # (node, the nearest wanted node at or after it); the queue keeps them nearest first
        queue = deque((n.id, n.id) for n in self.by_id.values() if wanted(n))
        labelled = {node_id for node_id, _ in queue}
        while queue:
            node_id, nearest = queue.popleft()
            for before in self.predecessors(node_id):
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
        start = self.by_id.get(self.asset.start_node)
        if start is None or stop(start):
            return set()
        seen = {start.id}
        stack = [start.id]
        while stack:
            for nxt in self.successors(stack.pop()):
                if nxt not in seen and not stop(self.by_id[nxt]):
                    seen.add(nxt)
                    stack.append(nxt)
        return seen

    def downstream(self, node_id: str) -> set[str]:
        """Every node a turn can run after ``node_id`` (walking its exits)."""
        after: set[str] = set()
        stack = self.successors(node_id)
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
