"""An agent whose graph runs a behaviour through a Subgraph node: the behaviour's nodes run under
namespaced ids, share the agent's history, variables and slots, each keeps its own cache, and the
diagnostics, the history file and the serve session names hold the namespaced ids. The scripted
backend makes every prompt exact; the last test talks on the real sample model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtime.agent import Agent
from runtime.asset.file import load_asset
from runtime.backends.scripted import ScriptedBackend
from runtime.dialogue.dialog_file import dumps_history, history_from_dict
from runtime.problems import AssetError

EXAMPLES = Path(__file__).resolve().parents[2] / "resources" / "examples"


def write(path: Path, raw: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(raw), encoding="utf-8")
    return path


def generate(node_id: str, exit_to: str = "", **fields) -> dict:
    return {"id": node_id, "type": "Generate", "system_prompt": f"You are {node_id}.", "default_exit": exit_to,
            **fields}


BEHAVIOUR = {
    "version": 1, "name": "threats", "start_node": "classify", "variables": {"mood": "wary"},
    "nodes": [
        {"id": "classify", "type": "ClassifyIntent", "slot": "threat",
         "intents": [{"name": "threaten", "exit": "warn"}, {"name": "bribe", "exit": "refuse"}],
         "fallback_exit": "calm"},
        generate("warn", "refuse", template="{{vars.mood}} {{slots.threat}}", placement="after"),
        {"id": "refuse", "type": "Exit"},
        {"id": "calm", "type": "Exit"},
    ],
}
HOST = {
    "version": 1, "name": "guard", "default_model": "m.gguf", "start_node": "guard", "variables": {"name": "Brann"},
    "nodes": [
        {"id": "guard", "type": "Subgraph", "behaviour": "behaviours/threats.json",
         "exits": {"refuse": "stern", "calm": "chat"}},
        generate("stern", template="{{vars.name}} saw {{slots.threat}}", placement="after"),
        generate("chat"),
    ],
}


@pytest.fixture
def host(tmp_path: Path) -> Path:
    write(tmp_path / "behaviours" / "threats.json", BEHAVIOUR)
    return write(tmp_path / "guard.json", HOST)


def agent_for(path: Path, backend=None, session_id: str = "") -> Agent:
    return Agent(load_asset(path), backend or ScriptedBackend(), str(path.parent), session_id=session_id)


def test_the_behaviours_nodes_run_under_namespaced_ids(host: Path) -> None:
    backend = ScriptedBackend()
    agent = agent_for(host, backend)
    result = agent.run_turn("I threaten you, guard")
    assert result.path == ["guard", "guard/classify", "guard/warn", "guard/refuse", "stern"]
    diag = result.diagnostics
    assert [(n.node, n.type, n.exit, n.next_node) for n in diag.nodes] == [
        ("guard", "Subgraph", "enter", "guard/classify"),
        ("guard/classify", "ClassifyIntent", "intent:threaten", "guard/warn"),
        ("guard/warn", "Generate", "default_exit", "guard/refuse"),
        ("guard/refuse", "Exit", "default_exit", "stern"),
        ("stern", "Generate", "default_exit", ""),
    ]
    # the behaviour's variable and the slot its classifier wrote are the agent's
    warn = next(n for n in diag.nodes if n.node == "guard/warn")
    assert warn.input.prompt[-1].content.endswith("wary threaten")
    stern = next(n for n in diag.nodes if n.node == "stern")
    assert any(m.role == "user" and m.content.endswith("Brann saw threaten") for m in stern.input.prompt)
    assert result.reply == "guard/warn heard: I threaten you, guard wary threaten\nstern heard: I threaten you, guard Brann saw threaten"
    assert set(result.prompts) == {"guard/classify", "guard/warn", "stern"}
    assert {key for key, _request in backend.calls} == {"guard/classify", "guard/warn", "stern"}
    assert agent.source_asset.node_ids() == ["guard", "stern", "chat"]
    assert "guard/warn" in agent.asset.node_ids()


def test_the_behaviours_nodes_share_the_history(host: Path) -> None:
    backend = ScriptedBackend()
    agent = agent_for(host, backend)
    agent.run_turn("I threaten you")
    second = agent.run_turn("hello there")
    assert second.path == ["guard", "guard/classify", "guard/calm", "chat"]
    chat_prompt = [m.content for m in next(n for n in second.diagnostics.nodes if n.node == "chat").input.prompt]
    # the earlier turn's replies, the behaviour's among them, are replayed to a node of the agent
    assert any(c.startswith("guard/warn heard: I threaten you") for c in chat_prompt)
    assert agent.history.turns[0].entries[0].node == "guard/warn"


def test_each_namespaced_node_keeps_its_own_cache(tmp_path: Path, host: Path) -> None:
    # one behaviour run twice: two namespaces, two caches, two sessions on the backend
    twice = json.loads(json.dumps(HOST))
    twice["start_node"] = "first"
    twice["nodes"] = [
        {"id": "first", "type": "Subgraph", "behaviour": "behaviours/threats.json",
         "exits": {"refuse": "second", "calm": "second"}},
        {"id": "second", "type": "Subgraph", "behaviour": "behaviours/threats.json",
         "exits": {"refuse": "", "calm": ""}},
    ]
    path = write(tmp_path / "twice.json", twice)
    backend = ScriptedBackend()
    agent = agent_for(path, backend, session_id="npc-1")
    result = agent.run_turn("I threaten you")
    assert result.path == ["first", "first/classify", "first/warn", "first/refuse",
                           "second", "second/classify", "second/warn", "second/refuse"]
    assert set(backend._sessions) == {"npc-1/first/classify", "npc-1/first/warn", "npc-1/second/classify",
                                      "npc-1/second/warn"}
    assert agent.node_cache("first/warn") is not agent.node_cache("second/warn")


def test_the_history_file_keeps_namespaced_ids(host: Path) -> None:
    agent = agent_for(host)
    agent.run_turn("I threaten you")
    saved = agent.export_dialog()
    text = dumps_history(saved)
    assert '"guard/warn"' in text
    again = agent_for(host)
    again.import_dialog(history_from_dict(json.loads(text)))
    assert again.history.turns[0].entries[0].node == "guard/warn"
    assert again.run_turn("hello").path[-1] == "chat"


def test_params_of_a_namespaced_node_change_between_turns(host: Path) -> None:
    agent = agent_for(host)
    agent.change_params("guard/warn", {"temperature": 0.2, "system_prompt": "Be stern."})
    assert agent.asset.node("guard/warn").temperature == 0.2
    result = agent.run_turn("I threaten you")
    assert next(n for n in result.diagnostics.nodes if n.node == "guard/warn").input.prompt[0].content == "Be stern."


def test_an_agent_on_its_expanded_asset_is_the_same_agent(host: Path) -> None:
    agent = agent_for(host)
    again = Agent(agent.asset, ScriptedBackend(), str(host.parent))  # the editor does this on a new backend
    assert again.asset.node_ids() == agent.asset.node_ids()
    assert again.run_turn("I threaten you").path[-1] == "stern"


def test_an_agent_whose_behaviour_is_missing_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "guard.json", HOST)
    with pytest.raises(AssetError) as raised:
        agent_for(path)
    assert raised.value.problems[0].node_id == "guard" and raised.value.problems[0].field == "behaviour"


def test_an_exit_node_ends_a_turn_of_the_behaviour_run_alone(host: Path) -> None:
    path = host.parent / "behaviours" / "threats.json"
    alone = load_asset(path).model_copy(update={"default_model": "m.gguf"})
    agent = Agent(alone, ScriptedBackend(), str(path.parent))
    assert agent.run_turn("I bribe you").path == ["classify", "refuse"]


def test_the_examples_share_one_behaviour() -> None:
    paths = [EXAMPLES / "gate_guard.json", EXAMPLES / "tavern_keeper.json"]
    behaviours = {node.behaviour for path in paths for node in load_asset(path).nodes if node.type_name == "Subgraph"}
    assert behaviours == {"behaviours/guard_threats.json"}
    for path in paths:
        agent = agent_for(path)
        result = agent.run_turn("I will threaten you with my sword")
        assert any(n.startswith("guard/") for n in result.path), result.path


@pytest.mark.model
def test_a_subgraph_conversation_on_the_sample_model(sample_model: Path) -> None:
    from runtime.backends.llama import LlamaBackend

    path = EXAMPLES / "gate_guard.json"
    backend = LlamaBackend(path.parent)
    try:
        agent = Agent(load_asset(path).model_copy(update={"default_model": str(sample_model)}), backend,
                      str(path.parent))
        results = [agent.run_turn("Open the gate or I will cut you down!"),
                   agent.run_turn("Sorry. Which way is the inn?")]
    finally:
        backend.close()
    for result in results:
        assert result.path[0] == "guard" and result.path[1] == "guard/classify"
        nodes = {n.node: n for n in result.diagnostics.nodes}
        assert nodes["guard/classify"].input.prompt, "the namespaced classifier's prompt is in the diagnostics"
        assert nodes["guard/classify"].exit.startswith("intent:") or nodes["guard/classify"].exit == "fallback_exit"
        replied = [n for n in result.diagnostics.nodes if n.output and n.type in ("Generate", "GenerateAndSpeak")]
        assert replied and result.reply
        for node in replied:
            assert node.input.prompt[0].role == "system" and node.input.prompt[-1].role == "user"
    # the second turn's prompts replay the first turn's reply, whichever node wrote it
    second = [n for n in results[1].diagnostics.nodes if n.type in ("Generate", "GenerateAndSpeak")]
    first_reply = results[0].reply.split("\n")[0]
    assert any(first_reply in m.content for n in second for m in n.input.prompt)


def test_a_behaviours_files_are_read_from_its_own_folder(tmp_path: Path) -> None:
    # the behaviour's Retrieve node names lore.txt beside the behaviour, not beside the agent
    (tmp_path / "behaviours").mkdir()
    facts = ["The mill burned in the great frost.", "The toll is two pennies.", "The inn has a cellar.",
             "Wolves live in the hills.", "The stones hum at midsummer."]
    (tmp_path / "behaviours" / "lore.txt").write_text("\n\n".join(facts) + "\n", encoding="utf-8")
    write(tmp_path / "behaviours" / "lore.json", {
        "version": 1, "start_node": "recall", "nodes": [
            {"id": "recall", "type": "Retrieve", "source_file": "lore.txt", "top_k": 1, "default_exit": ""}]})
    path = write(tmp_path / "npc.json", {
        "version": 1, "default_model": "m.gguf", "start_node": "lore", "nodes": [
            {"id": "lore", "type": "Subgraph", "behaviour": "behaviours/lore.json", "exits": {"next": "reply"}},
            generate("reply", template="{{#knowledge}}{{text}}{{/knowledge}}")]})
    from runtime.asset.validation import check_file

    assert [p for p in check_file(path) if p.severity == "error"] == []
    agent = agent_for(path)
    assert agent.folder_of("lore/recall") == str(tmp_path / "behaviours")
    assert agent.folder_of("reply") == str(tmp_path)
    result = agent.run_turn("what about the toll?")
    assert "two pennies" in result.slots["knowledge"][0]["text"]
    (tmp_path / "behaviours" / "lore.txt").rename(tmp_path / "behaviours" / "gone.txt")
    assert [(p.node_id, p.field) for p in check_file(path) if p.severity == "error"] == [("lore/recall", "source_file")]
