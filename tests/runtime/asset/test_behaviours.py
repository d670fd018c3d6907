"""Behaviours: the ports a behaviour file gives a Subgraph node, and the flattened graph an agent
runs (ids namespaced by the Subgraph node, exits led on), exactly; and the problems of behaviours
that cannot run (missing, a cycle, not loadable, no exit, exits that do not match)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtime.asset.behaviours import behaviour_ports, expand, load_behaviour, problems
from runtime.asset.file import asset_from_dict, parse_asset
from runtime.asset.model import Asset
from runtime.names import NAMESPACE_SEP, owner_of
from runtime.nodes import NODE_TYPES, shown_exits
from runtime.nodes.exit import Exit
from runtime.nodes.subgraph import Subgraph
from runtime.problems import AssetError


def generate(node_id: str, exit_to: str = "", **fields) -> dict:
    return {"id": node_id, "type": "Generate", "system_prompt": f"You are {node_id}.", "default_exit": exit_to,
            **fields}


def classify(node_id: str, routes: dict[str, str], fallback: str = "") -> dict:
    return {"id": node_id, "type": "ClassifyIntent",
            "intents": [{"name": name, "exit": target} for name, target in routes.items()],
            "fallback_exit": fallback}


def subgraph(node_id: str, behaviour: str, exits: dict[str, str]) -> dict:
    return {"id": node_id, "type": "Subgraph", "behaviour": behaviour, "exits": exits}


def asset(start: str, *nodes: dict, **fields) -> dict:
    return {"version": 1, "name": start, "default_model": "m.gguf", "start_node": start, "nodes": list(nodes),
            **fields}


def write(path: Path, raw: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(raw), encoding="utf-8")
    return path


# A behaviour with two named exits and one END exit: ports refuse, calm, next.
THREATS = asset(
    "classify",
    classify("classify", {"threaten": "warn", "bribe": "refuse"}, fallback="calm"),
    generate("warn", "refuse"),
    {"id": "refuse", "type": "Exit"},
    {"id": "calm", "type": "Exit"},
    generate("chat", ""),
    variables={"patience": 3},
)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    write(tmp_path / "behaviours" / "threats.json", THREATS)
    return tmp_path


def test_the_node_types_are_registered() -> None:
    assert NODE_TYPES["Subgraph"].model is Subgraph
    assert NODE_TYPES["Exit"].model is Exit
    assert owner_of("guard/classify") == "guard" and owner_of("guard/inner/x") == "guard" and owner_of("x") == "x"
    assert NAMESPACE_SEP == "/"


def test_a_subgraph_node_saves_its_exits_under_the_name_exits(folder: Path) -> None:
    loaded = asset_from_dict(asset("guard", subgraph("guard", "behaviours/threats.json",
                                                     {"refuse": "", "calm": "after", "next": ""}),
                                   generate("after")))
    node = loaded.node("guard")
    assert node.exits() == {"refuse": "", "calm": "after", "next": ""}
    assert node.exit_field("calm") == "exits.calm"
    assert node.with_exits({"refuse": "after"}).exits()["refuse"] == "after"
    from runtime.asset.file import dumps_asset

    saved = json.loads(dumps_asset(loaded))["nodes"][0]
    assert saved["exits"] == {"refuse": "", "calm": "after", "next": ""} and "exit_targets" not in saved
    assert shown_exits(loaded.node("after")) == {"default_exit": ""}
    exit_node = asset_from_dict(asset("e", {"id": "e", "type": "Exit"})).node("e")
    assert exit_node.exits() == {}, "an Exit node has no exits of its own"


def test_ports_are_the_exit_nodes_in_file_order_then_next(folder: Path) -> None:
    assert behaviour_ports(folder / "behaviours" / "threats.json") == ["refuse", "calm", "next"]
    no_end = asset_from_dict(asset("a", classify("a", {"x": "out"}, fallback="out"), {"id": "out", "type": "Exit"}))
    assert behaviour_ports(no_end) == ["out"]
    only_end = asset_from_dict(asset("a", generate("a", "")))
    assert behaviour_ports(only_end) == ["next"]
    exit_called_next = asset_from_dict(asset("a", generate("a", "next"), {"id": "next", "type": "Exit"},
                                             generate("b", "")))
    assert behaviour_ports(exit_called_next) == ["next"], "an Exit node called next is the END port"


def test_expand_namespaces_the_behaviours_nodes_and_leads_its_exits_on(folder: Path) -> None:
    host = asset_from_dict(asset(
        "greet", generate("greet", "guard"),
        subgraph("guard", "behaviours/threats.json", {"refuse": "bar", "calm": "", "next": "greet"}),
        generate("bar", ""), variables={"patience": 9}))
    flat = expand(host, folder)
    assert flat.node_ids() == ["greet", "guard", "guard/classify", "guard/warn", "guard/refuse", "guard/calm",
                               "guard/chat", "bar"]
    exits = {n.id: shown_exits(n) for n in flat.nodes}
    assert exits == {
        "greet": {"default_exit": "guard"},
        "guard": {"enter": "guard/classify"},
        "guard/classify": {"intent:threaten": "guard/warn", "intent:bribe": "guard/refuse",
                           "fallback_exit": "guard/calm"},
        "guard/warn": {"default_exit": "guard/refuse"},
        "guard/refuse": {"default_exit": "bar"},
        "guard/calm": {"default_exit": ""},
        "guard/chat": {"default_exit": "greet"},  # an END exit of the behaviour: the Subgraph's 'next'
        "bar": {"default_exit": ""},
    }
    assert flat.variables == {"patience": 9}, "the agent's own value of a behaviour's variable wins"
    assert flat.start_node == "greet" and flat.default_model == "m.gguf"
    assert flat.node("guard/warn").system_prompt == "You are warn."
    assert expand(flat, folder) is flat, "an expanded asset is expanded already"
    assert host.node("guard").exits() == {"refuse": "bar", "calm": "", "next": "greet"}, "the source is unchanged"


def test_an_asset_without_behaviours_is_its_own_expansion(folder: Path) -> None:
    plain = asset_from_dict(asset("a", generate("a")))
    assert expand(plain, folder) is plain
    assert expand(plain, None) is plain


def test_an_exit_node_of_an_asset_run_directly_ends_the_turn(folder: Path) -> None:
    behaviour = load_behaviour(folder, "behaviours/threats.json")
    flat = expand(behaviour, folder / "behaviours")
    assert flat.node("refuse").exits() == {"default_exit": ""}
    assert flat.node("calm").exits() == {"default_exit": ""}
    assert flat.node("warn").exits() == {"default_exit": "refuse"}


def test_one_behaviour_twice_gets_two_namespaces(folder: Path) -> None:
    host = asset_from_dict(asset(
        "first",
        subgraph("first", "behaviours/threats.json", {"refuse": "second", "calm": "second", "next": "second"}),
        subgraph("second", "behaviours/threats.json", {"refuse": "", "calm": "", "next": ""})))
    flat = expand(host, folder)
    ids = flat.node_ids()
    assert len(ids) == len(set(ids)) == 2 + 2 * 5
    assert flat.node("first/refuse").exits() == {"default_exit": "second"}
    assert flat.node("second/classify").exits()["intent:bribe"] == "second/refuse"


def test_nested_behaviours_resolve_from_their_own_folder(folder: Path) -> None:
    # behaviours/patrol.json runs threats.json beside it (not behaviours/behaviours/threats.json)
    write(folder / "behaviours" / "patrol.json", asset(
        "look", generate("look", "inner"),
        subgraph("inner", "threats.json", {"refuse": "done", "calm": "", "next": "look"}),
        {"id": "done", "type": "Exit"}))
    assert behaviour_ports(folder / "behaviours" / "patrol.json") == ["done", "next"]
    host = asset_from_dict(asset("patrol", subgraph("patrol", "behaviours/patrol.json",
                                                    {"done": "after", "next": ""}), generate("after")))
    flat = expand(host, folder)
    exits = {n.id: shown_exits(n) for n in flat.nodes}
    assert exits["patrol"] == {"enter": "patrol/look"}
    assert exits["patrol/look"] == {"default_exit": "patrol/inner"}
    assert exits["patrol/inner"] == {"enter": "patrol/inner/classify"}
    assert exits["patrol/inner/refuse"] == {"default_exit": "patrol/done"}
    assert exits["patrol/inner/calm"] == {"default_exit": ""}, "the inner END goes on to the outer next: END"
    assert exits["patrol/inner/chat"] == {"default_exit": "patrol/look"}
    assert exits["patrol/done"] == {"default_exit": "after"}
    assert owner_of("patrol/inner/classify") == "patrol"


def test_a_behaviour_is_read_on_every_expansion(folder: Path) -> None:
    host = asset_from_dict(asset("guard", subgraph("guard", "behaviours/threats.json",
                                                   {"refuse": "", "calm": "", "next": ""})))
    assert expand(host, folder).node("guard/warn").system_prompt == "You are warn."
    changed = json.loads(json.dumps(THREATS))
    changed["nodes"][1]["system_prompt"] = "You are stern."
    write(folder / "behaviours" / "threats.json", changed)
    assert expand(host, folder).node("guard/warn").system_prompt == "You are stern."


def located(found: list) -> list[tuple[str, str, str]]:
    return [(p.node_id, p.field, p.message) for p in found]


def test_a_missing_behaviour_is_an_error_at_the_node(folder: Path) -> None:
    host = asset_from_dict(asset("guard", subgraph("guard", "behaviours/nope.json", {"next": ""})))
    found = problems(host, folder, "host.json")
    assert [(p.node_id, p.field, p.file) for p in found] == [("guard", "behaviour", "host.json")]
    assert "no file behaviours/nope.json" in found[0].message
    with pytest.raises(AssetError) as raised:
        expand(host, folder, "host.json")
    assert raised.value.problems == found


def test_absolute_paths_and_unsaved_assets_are_refused(folder: Path) -> None:
    absolute = asset_from_dict(asset("g", subgraph("g", str(folder / "behaviours" / "threats.json"), {})))
    found = problems(absolute, folder)
    assert len(found) == 1 and "absolute path" in found[0].message and found[0].field == "behaviour"
    unsaved = asset_from_dict(asset("g", subgraph("g", "behaviours/threats.json", {})))
    assert "save it first" in problems(unsaved, None)[0].message


def test_a_cycle_of_files_is_found_with_its_chain(tmp_path: Path) -> None:
    write(tmp_path / "a.json", asset("b", subgraph("b", "b.json", {"next": ""})))
    write(tmp_path / "b.json", asset("a", subgraph("a", "a.json", {"next": ""})))
    host = parse_asset((tmp_path / "a.json").read_text())
    found = problems(host, tmp_path, str(tmp_path / "a.json"))
    assert len(found) == 1 and found[0].node_id == "b" and found[0].field == "behaviour"
    assert "a cycle of behaviours: a.json uses b.json uses a.json" in found[0].message
    # without knowing its own file, one step further in
    found = problems(host, tmp_path)
    assert "a cycle of behaviours: b.json uses a.json uses b.json" in found[0].message
    with pytest.raises(AssetError):
        expand(host, tmp_path)


def test_a_behaviour_that_runs_itself_is_a_cycle(tmp_path: Path) -> None:
    write(tmp_path / "self.json", asset("me", subgraph("me", "self.json", {"next": ""})))
    host = asset_from_dict(asset("g", subgraph("g", "self.json", {"next": ""})))
    message = problems(host, tmp_path)[0].message
    assert "in the behaviour self.json: me.behaviour: a cycle of behaviours: self.json uses self.json" in message


def test_an_invalid_behaviour_gives_its_own_located_problems(folder: Path) -> None:
    broken = json.loads(json.dumps(THREATS))
    broken["nodes"][1]["max_token"] = 5
    write(folder / "behaviours" / "broken.json", broken)
    host = asset_from_dict(asset("g", subgraph("g", "behaviours/broken.json", {"next": ""})))
    found = problems(host, folder)
    assert [(p.node_id, p.field) for p in found] == [("g", "behaviour")]
    assert "the behaviour behaviours/broken.json cannot be loaded: behaviours/broken.json:warn.max_token: error:" \
        in found[0].message
    (folder / "behaviours" / "bad.json").write_text("{not json", encoding="utf-8")
    host = asset_from_dict(asset("g", subgraph("g", "behaviours/bad.json", {"next": ""})))
    assert "behaviours/bad.json:1:2: error: malformed JSON" in problems(host, folder)[0].message


def test_a_behaviour_with_no_exit_is_an_error(tmp_path: Path) -> None:
    write(tmp_path / "loop.json", asset("a", generate("a", "b"), generate("b", "a")))
    host = asset_from_dict(asset("g", subgraph("g", "loop.json", {})))
    found = problems(host, tmp_path)
    assert located(found) == [("g", "behaviour", ("the behaviour loop.json has no exit: add an Exit node to it (a "
                                                 "named exit), or leave one of its exits empty (END, the port 'next')"))]


def test_exits_that_do_not_match_the_ports_are_errors_at_exits(folder: Path) -> None:
    host = asset_from_dict(asset("g", subgraph("g", "behaviours/threats.json", {"refuse": "", "flee": ""})))
    found = problems(host, folder)
    assert [(p.node_id, p.field) for p in found] == [("g", "exits"), ("g", "exits.flee")]
    assert "none for calm, next" in found[0].message and "no exit 'flee'" in found[1].message
    flat = expand(host, folder)  # still runs: a port it does not name ends the turn
    assert flat.node("g/calm").exits() == {"default_exit": ""}
    assert flat.node("g/chat").exits() == {"default_exit": ""}


def test_a_problem_in_a_nested_behaviour_names_the_whole_way(folder: Path) -> None:
    write(folder / "behaviours" / "outer.json", asset("in", subgraph("in", "gone.json", {"next": ""})))
    host = asset_from_dict(asset("g", subgraph("g", "behaviours/outer.json", {"next": ""})))
    found = problems(host, folder)
    assert [(p.node_id, p.field) for p in found] == [("g", "behaviour")]
    assert found[0].message.startswith("in the behaviour behaviours/outer.json: in.behaviour: no file "
                                       "behaviours/gone.json")


def test_expanded_ids_are_refused_in_files() -> None:
    with pytest.raises(AssetError):
        asset_from_dict(asset("a/b", generate("a/b")))
    assert isinstance(asset_from_dict(asset("a", generate("a"))), Asset)


def test_a_subgraph_node_without_a_behaviour_yet_is_one_problem_and_no_crash() -> None:
    """A Subgraph node just added from the palette names no file yet: validation says so once (the
    node's own check), and expand refuses it with a located error rather than failing on the path."""
    from runtime.asset.validation import validate_asset

    fresh = asset_from_dict(asset("guard", subgraph("guard", "", {}), generate("after")))
    found = [(p.node_id, p.field, p.message) for p in validate_asset(fresh) if p.severity == "error"]
    assert found == [("guard", "behaviour", "no behaviour: choose the asset file this node runs")]
    with pytest.raises(AssetError) as refused:
        expand(fresh, None)
    assert [(p.node_id, p.field) for p in refused.value.problems] == [("guard", "behaviour")]


def test_behaviours_that_expand_past_the_limit_are_refused_at_once(tmp_path: Path) -> None:
    """Issue 39: 13 small files that each ran the next twice froze POST /v1/sessions for 19 s and
    parley validate for 38 s (2**13 copies), and a chain 1,000 deep ended in a RecursionError."""
    from runtime.asset.behaviours import MAX_BEHAVIOUR_DEPTH

    for level in range(13):
        inner = f"b{level + 1}.json"
        nodes = ([subgraph("one", inner, {"next": "two"}), subgraph("two", inner, {"next": ""})] if level < 12
                 else [generate("say")])
        write(tmp_path / f"b{level}.json", asset(nodes[0]["id"], *nodes))
    host = asset_from_dict(asset("top", subgraph("top", "b0.json", {"next": ""})))
    found = problems(host, tmp_path, str(tmp_path / "host.json"))  # said once the count passes the limit
    assert [(p.node_id, p.field) for p in found] == [("top", "behaviour")]
    assert "expand to more than 10,000 nodes" in found[0].message
    with pytest.raises(AssetError, match="expand to more than 10,000 nodes"):
        expand(host, tmp_path)

    for level in range(40):  # a chain: each runs the next once
        nodes = [subgraph("down", f"c{level + 1}.json", {"next": ""})] if level < 39 else [generate("say")]
        write(tmp_path / f"c{level}.json", asset(nodes[0]["id"], *nodes))
    chain = asset_from_dict(asset("top", subgraph("top", "c0.json", {"next": ""})))
    (deep,) = problems(chain, tmp_path)
    assert f"{MAX_BEHAVIOUR_DEPTH} deep here" in deep.message and deep.node_id == "top"
