"""The estimator counts the behaviours' model-backed nodes, each a context of its own under its
namespaced id; a behaviour that cannot be read is a problem, not a crash."""

from __future__ import annotations

from pathlib import Path

from runtime.asset.estimate import estimate_asset
from runtime.asset.file import load_asset
from runtime.models.memory import Settings
from tests.runtime.asset.test_behaviours import THREATS, asset, generate, subgraph, write
from tests.runtime.tiny_gguf import write_tiny_gguf

CPU = Settings(gpu_memory=0)


def test_each_namespaced_node_is_a_context_of_its_own(tmp_path: Path) -> None:
    model = write_tiny_gguf(tmp_path / "m.gguf")
    write(tmp_path / "behaviours" / "threats.json", THREATS)
    path = write(tmp_path / "host.json", asset(
        "first", subgraph("first", "behaviours/threats.json", {"refuse": "second", "calm": "", "next": ""}),
        subgraph("second", "behaviours/threats.json", {"refuse": "", "calm": "", "next": ""}),
        generate("reply", context_size=512)))
    estimate = estimate_asset(load_asset(path), lambda name: model, CPU, asset_file=str(path))
    assert [n.node_id for n in estimate.nodes] == [
        "first/classify", "first/warn", "first/chat", "second/classify", "second/warn", "second/chat", "reply"]
    assert estimate.problems == ()
    assert len(estimate.models) == 1 and len(estimate.models[0].node_ids) == 7
    alone = estimate_asset(load_asset(tmp_path / "behaviours" / "threats.json"), lambda name: model, CPU)
    assert estimate.agent_ram == 2 * alone.agent_ram + estimate.node("reply").ram_bytes


def test_a_missing_behaviour_is_a_problem_of_the_estimate(tmp_path: Path) -> None:
    model = write_tiny_gguf(tmp_path / "m.gguf")
    path = write(tmp_path / "host.json", asset("g", subgraph("g", "gone.json", {"next": "reply"}), generate("reply")))
    estimate = estimate_asset(load_asset(path), lambda name: model, CPU, asset_file=str(path))
    assert [n.node_id for n in estimate.nodes] == ["reply"]
    assert [(p.node_id, p.field) for p in estimate.problems] == [("g", "behaviour")]


def test_parley_estimate_sizes_and_takes_namespaced_nodes(tmp_path: Path, capsys) -> None:
    import json

    from runtime.cli import main

    model = write_tiny_gguf(tmp_path / "m.gguf")
    write(tmp_path / "behaviours" / "threats.json", THREATS)
    path = write(tmp_path / "host.json", asset(
        "guard", subgraph("guard", "behaviours/threats.json", {"refuse": "", "calm": "", "next": ""})))
    raw = json.loads(path.read_text())
    raw["default_model"] = str(model)
    path.write_text(json.dumps(raw))
    assert main(["estimate", str(path), "--context", "guard/warn=512", "--json"]) == 0
    nodes = {n["id"]: n for n in json.loads(capsys.readouterr().out)["nodes"]}
    assert set(nodes) == {"guard/classify", "guard/warn", "guard/chat"}
    assert main(["estimate", str(path), "--context", "guard/nothing=512"]) == 2
    (tmp_path / "behaviours" / "threats.json").unlink()
    assert main(["estimate", str(path)]) == 2
    assert "guard.behaviour: error: no file behaviours/threats.json" in capsys.readouterr().err
