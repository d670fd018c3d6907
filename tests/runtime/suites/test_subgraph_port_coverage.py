"""Coverage of a Subgraph node's ports (issue 38): a port is taken when a turn leaves the behaviour
through it (its Exit node, or ``next`` when a node's exit ends the behaviour), as the canvas shows it;
the run itself only counts the node's one way in. Scripted backend: exact."""

from __future__ import annotations

import shutil
from pathlib import Path

from runtime.asset.file import load_asset
from runtime.backends.scripted import ScriptedBackend
from runtime.resources import examples_dir
from runtime.suites.file import load_suite
from runtime.suites.report import Coverage, behaviour_ports_taken
from runtime.suites.run import run_suites


def test_a_subgraph_nodes_ports_are_taken_by_the_turns_that_left_its_behaviour(tmp_path: Path) -> None:
    shutil.copy(examples_dir() / "gate_guard.json", tmp_path)
    shutil.copytree(examples_dir() / "behaviours", tmp_path / "behaviours")
    suite = tmp_path / "guard.suite.yaml"
    suite.write_text("asset: gate_guard.json\ncases:\n  - name: three\n    turns:\n      - say: \"I threaten you\"\n"
                     "      - say: \"hello there\"\n      - say: \"where is the inn\"\n", encoding="utf-8")
    report = run_suites([load_suite(suite)], ScriptedBackend)
    assert [t.path[-1] for t in report.results[0].turns] == ["guard/warned", "directions", "directions"]
    # The asset as the file holds it, as the editor's Tests dock counts it (the guard's ports, not ``enter``).
    coverage = Coverage(load_asset(tmp_path / "gate_guard.json"))
    for result in report.results:
        coverage.add(result)
    assert coverage.exits[("guard", "warned")] == 1, "left through its Exit node 'warned'"
    assert coverage.exits[("guard", "next")] == 2, "left where a node's exit ended the behaviour"
    never = coverage.never_taken
    assert ("guard", "refused") in never
    assert ("guard", "warned") not in never and ("guard", "next") not in never


def test_ports_taken_follow_nested_behaviours_and_loops() -> None:
    ports = {"guard": {"flee", "calm", "next"}, "guard/inner": {"run", "next"}}
    path = ["guard", "guard/inner", "guard/inner/a", "guard/inner/run", "guard/calm", "stern",
            "guard", "guard/inner", "guard/inner/a", "guard/inner/run", "guard",  # back into itself
            "guard/x"]  # the turn ends inside it: a node's exit to END
    assert behaviour_ports_taken(path, ports) == {
        ("guard/inner", "run"): 2, ("guard", "calm"): 1, ("guard", "next"): 2}
    assert behaviour_ports_taken(["guard", "guard/x"], {}) == {}, "only the Subgraph nodes asked about"
