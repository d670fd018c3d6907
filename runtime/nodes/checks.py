"""What a node type's validation rules see: ``NodeChecks``.

``runtime.validation.validate_asset`` checks what no single node can (ids, the start node,
exit targets, reachability, model files) and asks each node for its own rules through
``node.check(checks)`` and, once reachability is known, ``node.check_in_graph(checks)``.
"""

from __future__ import annotations

import os
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
        return [t for t in self.by_id[node_id].exits().values() if t in self.by_id]

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
