"""Validation walks the graph a bounded number of times however large it is (issue 14, defect 14:
a 5,000-node chain took 11 s to validate and the editor 7 s per edit)."""

from __future__ import annotations

from pathlib import Path

from runtime.asset.model import Asset, Generate, GenerateAndSpeak, Summarize, new_node
from runtime.asset.validation import validate_asset
from runtime.nodes import NodeChecks

RUNTIME = str(Path(__file__).resolve().parents[3] / "runtime")


def chain(count: int, kind: str = "Generate") -> Asset:
    nodes = [new_node(kind, f"n{i}", default_exit=f"n{i + 1}" if i + 1 < count else "", system_prompt="Hi.")
             for i in range(count)]
    return Asset(default_model="m.gguf", start_node="n0", nodes=nodes)


def exits_calls(asset: Asset, monkeypatch) -> int:
    calls = 0
    original = Generate.exits

    def counted(self):
        nonlocal calls
        calls += 1
        return original(self)

    monkeypatch.setattr(Generate, "exits", counted)
    validate_asset(asset)
    monkeypatch.setattr(Generate, "exits", original)
    return calls


def test_reachability_reads_each_nodes_exits_a_bounded_number_of_times(monkeypatch):
    """The END check went round the whole graph until nothing changed: n passes over a chain."""
    small, large = exits_calls(chain(200), monkeypatch), exits_calls(chain(2000), monkeypatch)
    assert large <= 10 * small * 1.1, (small, large)
    assert large <= 2000 * 6


def test_a_5000_node_chain_validates_with_no_problems():
    assert validate_asset(chain(5000)) == []  # 11 s before issue 14; bench_validation times it


def test_a_loop_with_no_way_out_is_still_an_error_in_a_long_chain():
    asset = chain(3000)
    last = asset.nodes[-1]
    asset.nodes[-1] = last.model_copy(update={"default_exit": "n2000"})
    problems = validate_asset(asset)
    stuck = {p.node_id for p in problems if p.severity == "error"}
    assert stuck == {f"n{i}" for i in range(3000)}, "every node only leads into the loop"


def test_a_loop_with_a_way_out_is_fine():
    asset = chain(50)
    asset.nodes[10] = asset.nodes[10].model_copy(update={"default_exit": "n3"})  # n3..n10 loop
    asset.nodes.append(new_node("Generate", "out", system_prompt="Hi."))
    asset.nodes[5] = asset.nodes[5].model_copy(update={"default_exit": "out"})
    problems = validate_asset(asset)
    assert not [p for p in problems if p.severity == "error"]


def test_runs_later_names_the_nearest_node_after_each():
    nodes = [
        Summarize(id="s", default_exit="a"), Generate(id="a", default_exit="t"),
        new_node("ToolCall", "t", default_exit="b", tools=[{"name": "x"}]), GenerateAndSpeak(id="b"),
        Generate(id="loop", default_exit="loop"),
    ]
    asset = Asset(start_node="s", nodes=nodes)
    checks = NodeChecks(asset, [])
    later = checks.runs_later(lambda n: n.PLAYER_FACING)
    assert later == {"s": "a", "a": "b", "t": "b", "loop": "loop"}
    assert checks.leading_to(["b"]) == {"s", "a", "t", "b"}
    assert checks.predecessors("b") == ["t"] and checks.successors("s") == ["a"]


def runtime_calls(asset: Asset) -> int:
    """Python function calls in the runtime's own code while ``asset`` validates: a count of work
    that, unlike a time, does not depend on how busy the machine is."""
    import sys

    calls = 0

    def count(frame, event, _arg):
        nonlocal calls
        if event == "call" and frame.f_code.co_filename.startswith(RUNTIME):
            calls += 1

    sys.setprofile(count)
    try:
        validate_asset(asset)
    finally:
        sys.setprofile(None)
    return calls


def test_the_rules_of_every_node_type_do_work_in_proportion_to_the_graph():
    """Validation work per node stays flat (a rule that walks the graph per node grows with it)."""
    small, large = (runtime_calls(chain(count, "GenerateAndSpeak")) for count in (250, 1000))
    assert large <= 4 * small * 1.15, f"{small} calls at 250 nodes, {large} at 1,000"
