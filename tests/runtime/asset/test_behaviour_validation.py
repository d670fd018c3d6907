"""Validation of an asset that runs behaviours: the behaviours' own problems at the Subgraph node
(missing, a cycle, not loadable, no exit, exits that do not match), the behaviour's nodes checked as
they run (under namespaced ids, with the rest of the graph), and ``parley validate``'s exit status."""

from __future__ import annotations

import json
from pathlib import Path

from runtime.asset.file import load_asset
from runtime.asset.validation import Validator, check_file
from runtime.cli import main
from tests.runtime.asset.test_behaviours import THREATS, asset, classify, generate, subgraph, write

EXAMPLES = Path(__file__).resolve().parents[3] / "resources" / "examples"


def where(problems) -> list[tuple[str, str, str]]:
    return [(p.severity, p.node_id, p.field) for p in problems]


def test_the_examples_are_valid() -> None:
    for name in ("gate_guard.json", "tavern_keeper.json", "behaviours/guard_threats.json"):
        errors = [p for p in check_file(EXAMPLES / name) if p.severity == "error"]
        assert errors == [], name


def test_a_valid_host_has_no_behaviour_problems(tmp_path: Path) -> None:
    write(tmp_path / "behaviours" / "threats.json", THREATS)
    path = write(tmp_path / "host.json", asset(
        "guard", subgraph("guard", "behaviours/threats.json", {"refuse": "", "calm": "after", "next": ""}),
        generate("after")))
    assert [p for p in check_file(path) if p.severity == "error"] == []


def test_a_broken_behaviour_makes_parley_validate_fail(tmp_path: Path, capsys) -> None:
    broken = json.loads(json.dumps(THREATS))
    broken["nodes"][1]["max_tokens"] = "many"
    write(tmp_path / "behaviours" / "threats.json", broken)
    path = write(tmp_path / "host.json", asset(
        "guard", subgraph("guard", "behaviours/threats.json", {"refuse": "", "calm": "", "next": ""})))
    assert main(["validate", str(path)]) == 1
    out = capsys.readouterr().out
    assert (f"{path}:guard.behaviour: error: the behaviour behaviours/threats.json cannot be loaded: "
            "behaviours/threats.json:warn.max_tokens: error: must be a whole number, not text") in out


def test_missing_file_cycle_and_no_exit_are_errors_at_the_node(tmp_path: Path) -> None:
    write(tmp_path / "loop.json", asset("a", generate("a", "b"), generate("b", "a")))
    write(tmp_path / "a.json", asset("b", subgraph("b", "b.json", {"next": ""})))
    write(tmp_path / "b.json", asset("a", subgraph("a", "a.json", {"next": ""})))
    path = write(tmp_path / "host.json", asset(
        "one", subgraph("one", "gone.json", {"next": "two"}), subgraph("two", "loop.json", {"next": "three"}),
        subgraph("three", "a.json", {"next": ""})))
    found = [p for p in check_file(path) if p.field == "behaviour"]
    assert where(found) == [("error", "one", "behaviour"), ("error", "two", "behaviour"),
                            ("error", "three", "behaviour")]
    assert "no file gone.json" in found[0].message
    assert "has no exit" in found[1].message
    assert "a cycle of behaviours: a.json uses b.json uses a.json" in found[2].message


def test_the_behaviours_nodes_are_checked_under_namespaced_ids(tmp_path: Path) -> None:
    behaviour = asset("ask", generate("ask", "gone"), generate("hidden", ""))
    write(tmp_path / "b.json", behaviour)
    path = write(tmp_path / "host.json", asset("g", subgraph("g", "b.json", {"next": ""})))
    problems = check_file(path)
    assert ("error", "g/ask", "default_exit") in where(problems)
    assert next(p for p in problems if p.node_id == "g/ask").message == "exit names no node: 'g/gone'"
    assert ("warning", "g/hidden", "") in where(problems)  # unreachable in the graph as it runs


def test_a_slot_a_behaviour_writes_is_one_the_agent_reads(tmp_path: Path) -> None:
    # no false alarm: the host's node reads the slot the behaviour's classifier wrote before it
    write(tmp_path / "b.json", asset("c", classify("c", {"threaten": ""}, fallback="")))
    host = asset("g", subgraph("g", "b.json", {"next": "after"}),
                 generate("after", input="intent"))
    path = write(tmp_path / "host.json", host)
    assert [p for p in check_file(path) if p.severity == "error"] == []


def test_an_exit_of_the_subgraph_naming_no_node_is_at_its_exits_field(tmp_path: Path) -> None:
    write(tmp_path / "behaviours" / "threats.json", THREATS)
    path = write(tmp_path / "host.json", asset(
        "guard", subgraph("guard", "behaviours/threats.json", {"refuse": "nowhere", "calm": "", "next": ""})))
    problems = check_file(path)
    assert ("error", "guard", "exits.refuse") in where(problems)
    assert not [p for p in problems if p.node_id == "guard/refuse"]


def test_mismatched_exits_are_errors_and_the_rest_is_still_checked(tmp_path: Path) -> None:
    write(tmp_path / "behaviours" / "threats.json", THREATS)
    path = write(tmp_path / "host.json", asset(
        "guard", subgraph("guard", "behaviours/threats.json", {"refuse": "", "flee": ""})))
    assert {("error", "guard", "exits"), ("error", "guard", "exits.flee")} <= set(where(check_file(path)))


def test_an_edited_behaviour_changes_the_next_validation(tmp_path: Path) -> None:
    write(tmp_path / "behaviours" / "threats.json", THREATS)
    path = write(tmp_path / "host.json", asset(
        "guard", subgraph("guard", "behaviours/threats.json", {"refuse": "", "calm": "", "next": ""})))
    validator = Validator()
    host = load_asset(path)
    assert [p for p in validator.validate(host, str(path), tmp_path) if p.severity == "error"] == []
    (tmp_path / "behaviours" / "threats.json").unlink()
    assert where(p for p in validator.validate(host, str(path), tmp_path) if p.severity == "error") == [
        ("error", "guard", "behaviour")]


def test_a_behaviour_validated_alone_ends_at_its_exit_nodes(tmp_path: Path) -> None:
    path = write(tmp_path / "b.json", THREATS)
    assert [p for p in check_file(path) if p.severity == "error"] == []


def test_parley_validate_finds_a_broken_template_in_a_behaviour(tmp_path: Path, capsys) -> None:
    write(tmp_path / "b.json", asset("ask", generate("ask", "", template="{{#vars.x}}unclosed")))
    path = write(tmp_path / "host.json", asset("g", subgraph("g", "b.json", {"next": ""})))
    assert main(["validate", str(path)]) == 1
    assert f"{path}:g/ask.template: error:" in capsys.readouterr().out
