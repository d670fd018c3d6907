"""Layered auto-layout for node graphs that may have cycles and very long chains.

Sugiyama-style, in plain loops (no recursion, so a 10,000-node chain is fine):
break cycles by reversing the back edges a depth-first walk finds, put each node in
the layer after its furthest predecessor, order each layer by the mean position of
its neighbours, then place layers left to right.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

Size = tuple[float, float]


def layered_positions(
    nodes: Sequence[str],
    edges: Iterable[tuple[str, str]],
    sizes: Mapping[str, Size] | None = None,
    roots: Sequence[str] = (),
    column_gap: float = 80.0,
    row_gap: float = 30.0,
    sweeps: int = 4,
) -> dict[str, tuple[float, float]]:
    """Top-left positions for ``nodes``; edges go left to right wherever the graph allows.

    ``roots`` are laid out first (the start node), so the walk that finds back edges
    starts where a turn starts. Edges naming unknown nodes and self-loops are ignored.
    """
    sizes = sizes or {}
    known = set(nodes)
    succ: dict[str, list[str]] = {n: [] for n in nodes}
    for a, b in edges:
        if a in known and b in known and a != b and b not in succ[a]:
            succ[a].append(b)

    forward = _acyclic_edges(nodes, succ, roots)
    layer = _longest_path_layers(nodes, forward)
    columns = _order_layers(nodes, forward, layer, sweeps)

    positions: dict[str, tuple[float, float]] = {}
    x = 0.0
    heights = [sum(sizes.get(n, (160.0, 60.0))[1] for n in col) + row_gap * (len(col) - 1) for col in columns]
    tallest = max(heights, default=0.0)
    for col, height in zip(columns, heights):
        width = max((sizes.get(n, (160.0, 60.0))[0] for n in col), default=0.0)
        y = (tallest - height) / 2.0
        for n in col:
            positions[n] = (x, y)
            y += sizes.get(n, (160.0, 60.0))[1] + row_gap
        x += width + column_gap
    return positions


def _acyclic_edges(nodes: Sequence[str], succ: dict[str, list[str]], roots: Sequence[str]) -> list[tuple[str, str]]:
    """Edges without the back edges of an iterative depth-first walk."""
    state: dict[str, int] = {}  # 1 = on the walk's stack, 2 = finished
    forward: list[tuple[str, str]] = []
    order = [r for r in roots if r in succ] + [n for n in nodes]
    for root in order:
        if root in state:
            continue
        state[root] = 1
        stack: list[tuple[str, int]] = [(root, 0)]
        while stack:
            node, i = stack[-1]
            children = succ[node]
            if i < len(children):
                stack[-1] = (node, i + 1)
                child = children[i]
                mark = state.get(child)
                if mark == 1:
                    continue  # back edge: drop it, it closes a cycle
                forward.append((node, child))
                if mark is None:
                    state[child] = 1
                    stack.append((child, 0))
            else:
                state[node] = 2
                stack.pop()
    return forward


def _longest_path_layers(nodes: Sequence[str], edges: list[tuple[str, str]]) -> dict[str, int]:
    indegree = {n: 0 for n in nodes}
    succ: dict[str, list[str]] = {n: [] for n in nodes}
    for a, b in edges:
        succ[a].append(b)
        indegree[b] += 1
    layer = {n: 0 for n in nodes}
    ready = [n for n in nodes if indegree[n] == 0]
    while ready:
        node = ready.pop()
        for child in succ[node]:
            layer[child] = max(layer[child], layer[node] + 1)
            indegree[child] -= 1
            if indegree[child] == 0:
                ready.append(child)
    return layer


def _order_layers(nodes: Sequence[str], edges: list[tuple[str, str]], layer: dict[str, int], sweeps: int) -> list[list[str]]:
    count = max(layer.values(), default=-1) + 1
    columns: list[list[str]] = [[] for _ in range(count)]
    for n in nodes:
        columns[layer[n]].append(n)
    preds: dict[str, list[str]] = {n: [] for n in nodes}
    succs: dict[str, list[str]] = {n: [] for n in nodes}
    for a, b in edges:
        preds[b].append(a)
        succs[a].append(b)

    def reorder(col: list[str], neighbours: dict[str, list[str]], rank: dict[str, int]) -> list[str]:
        def key(item: tuple[int, str]) -> float:
            index, n = item
            around = [rank[m] for m in neighbours[n] if m in rank]
            return sum(around) / len(around) if around else float(index)

        return [n for _, n in sorted(enumerate(col), key=key)]

    for sweep in range(sweeps):
        rank = {n: i for col in columns for i, n in enumerate(col)}
        if sweep % 2 == 0:
            for i in range(1, count):
                columns[i] = reorder(columns[i], preds, rank)
                rank.update({n: j for j, n in enumerate(columns[i])})
        else:
            for i in range(count - 2, -1, -1):
                columns[i] = reorder(columns[i], succs, rank)
                rank.update({n: j for j, n in enumerate(columns[i])})
    return columns
