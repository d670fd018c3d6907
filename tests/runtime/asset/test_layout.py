"""Auto-layout: cycles, long chains, and no overlaps."""

from __future__ import annotations

import random

from runtime.asset.layout import layered_positions


def overlaps(positions, sizes) -> bool:
    boxes = [(x, y, x + sizes[n][0], y + sizes[n][1]) for n, (x, y) in positions.items()]
    boxes.sort()
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            if b[0] >= a[2]:
                break
            if a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]:
                return True
    return False


def test_cycle_is_laid_out_left_to_right_from_the_root():
    nodes = ["a", "b", "c"]
    edges = [("a", "b"), ("b", "c"), ("c", "a")]
    pos = layered_positions(nodes, edges, roots=["a"])
    assert pos["a"][0] < pos["b"][0] < pos["c"][0]


def test_ten_thousand_node_chain_needs_no_recursion():
    nodes = [f"n{i}" for i in range(10_000)]
    edges = [(nodes[i], nodes[i + 1]) for i in range(len(nodes) - 1)] + [(nodes[-1], nodes[0])]
    pos = layered_positions(nodes, edges, roots=["n0"])
    xs = [pos[n][0] for n in nodes]
    assert xs == sorted(xs) and len(set(xs)) == len(xs)


def test_random_graphs_have_no_overlapping_nodes():
    rng = random.Random(7)
    nodes = [f"n{i}" for i in range(300)]
    sizes = {n: (rng.uniform(120, 260), rng.uniform(50, 140)) for n in nodes}
    edges = [(rng.choice(nodes), rng.choice(nodes)) for _ in range(600)]
    pos = layered_positions(nodes, edges, sizes, roots=["n0"])
    assert set(pos) == set(nodes)
    assert not overlaps(pos, sizes)


def test_unknown_targets_and_self_loops_are_ignored():
    pos = layered_positions(["a", "b"], [("a", "a"), ("a", "zzz"), ("a", "b")])
    assert pos["a"][0] < pos["b"][0]
