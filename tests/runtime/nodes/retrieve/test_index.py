"""Retrieve nodes: knowledge from the asset and from a file beside it, BM25 ranking, embedding ranking."""

from __future__ import annotations

import pytest

from runtime.agent import Agent
from runtime.asset.file import load_asset
from runtime.asset.model import new_node
from runtime.backends.scripted import ScriptedBackend
from runtime.nodes.retrieve.index import BM25Ranker, EmbeddingRanker, Knowledge, load_knowledge, ranker_for
from runtime.problems import InputError
from runtime.resources import examples_dir
from tests.runtime.conversations import asset, node_diag, prompt_of

FACTS = [
    Knowledge("mill", "The old mill burned down in the winter of the great frost."),
    Knowledge("inn", "The Wayside Inn is run by Mira; its cellar holds the best cider."),
    Knowledge("guard", "The gate guard Brann lost two fingers to a wolf."),
    Knowledge("river", "The river Bracken floods every spring."),
]


def test_bm25_ranks_the_matching_entries_first_and_only_matches():
    found = BM25Ranker().rank("who runs the inn with the cider?", FACTS, 3)
    assert [f.entry.id for f in found] == ["inn"]
    found = BM25Ranker().rank("when did the mill burn, and the wolf?", FACTS, 3)
    assert {f.entry.id for f in found} == {"mill", "guard"}
    assert BM25Ranker().rank("dragons", FACTS, 3) == []
    assert BM25Ranker().rank("", FACTS, 3) == []


def test_embedding_ranker_is_used_when_the_backend_can_embed():
    node = new_node("Retrieve", "r", embedding_model="embed.gguf")
    ranker, warning = ranker_for(node, ScriptedBackend())
    assert isinstance(ranker, EmbeddingRanker) and warning == ""
    assert ranker.rank("wolf fingers guard", FACTS, 1)[0].entry.id == "guard"
    ranker, warning = ranker_for(node, object())
    assert isinstance(ranker, BM25Ranker) and "BM25" in warning
    assert isinstance(ranker_for(new_node("Retrieve", "r"), ScriptedBackend())[0], BM25Ranker)


def test_knowledge_files(tmp_path):
    (tmp_path / "k.jsonl").write_text('{"id": "a", "text": "alpha fact"}\n\n{"text": "beta fact"}\n')
    (tmp_path / "k.txt").write_text("First paragraph\nstill first.\n\n\nSecond one.\n")
    node = new_node("Retrieve", "r", entries=[{"text": "inline fact"}], source_file="k.jsonl")
    assert [(k.id, k.text) for k in load_knowledge(node, tmp_path)] == [
        ("r[0]", "inline fact"), ("a", "alpha fact"), ("k.jsonl:3", "beta fact")]
    node = new_node("Retrieve", "r", source_file="k.txt")
    assert [k.text for k in load_knowledge(node, tmp_path)] == ["First paragraph\nstill first.", "Second one."]


@pytest.mark.parametrize("name, content, message", [
    ("bad.jsonl", '{"text": "ok"}\n{"text": \n', "bad.jsonl:2:0: error: malformed JSON"),
    ("bad.jsonl", '{"text": "ok"}\n["x"]\n', 'bad.jsonl:2:0: error: each line is an object with a non-empty "text"'),
    ("bad.csv", "a,b", "knowledge files are .jsonl or .txt"),
    ("missing.jsonl", None, "cannot read the knowledge file"),
])
def test_bad_knowledge_files_are_clear_errors(tmp_path, name, content, message):
    if content is not None:
        (tmp_path / name).write_text(content)
    with pytest.raises(InputError) as info:
        load_knowledge(new_node("Retrieve", "recall", source_file=name), tmp_path, "agent.json")
    assert message in str(info.value)
    assert info.value.problems[0].node_id == "recall"


def test_retrieved_knowledge_frames_the_current_turn_only():
    graph = load_asset(examples_dir() / "retrieval.json")
    agent = Agent(graph, ScriptedBackend(), asset_dir=str(examples_dir()))
    result = agent.run_turn("When did the old mill burn?")
    recall = node_diag(result.diagnostics, "recall")
    assert recall.retrieved[0].id == "fact1"
    assert result.slots["knowledge"][0]["text"].startswith("The old mill burned down")
    current = prompt_of(result.diagnostics, "reply")[-1][1]
    assert current.startswith("Archive notes:\n- The old mill burned down") and current.endswith("When did the old mill burn?")
    # Next turn: the earlier turn comes back as the player's plain line, without its knowledge.
    result = agent.run_turn("Who is the gate guard?")
    prompt = prompt_of(result.diagnostics, "reply")
    assert prompt[1] == ("user", "When did the old mill burn?", "")
    assert "Brann" in prompt[-1][1] and "mill" not in prompt[-1][1]


def test_retrieve_query_from_a_slot_and_a_missing_file_fails_the_turn_clearly():
    graph = asset(
        ("ClassifyAttributes", "topic", {"attributes": [{"name": "about", "values": ["mill", "wolf"]}],
                                         "default_exit": "recall"}),
        ("Retrieve", "recall", {"entries": [{"text": t.text} for t in FACTS], "query": "about", "top_k": 1,
                                "default_exit": "reply"}),
        ("Generate", "reply", {"context_size": 512, "max_tokens": 32, "template": "{{#knowledge}}{{text}}{{/knowledge}}"}),
    )
    result = Agent(graph, ScriptedBackend()).run_turn("tell me of the wolf")
    assert node_diag(result.diagnostics, "recall").input.prompt[0].content == "wolf"
    assert result.slots["knowledge"][0]["text"] == FACTS[2].text
    graph = asset(("Retrieve", "recall", {"source_file": "notes.jsonl"}))
    with pytest.raises(InputError, match="save it first"):
        Agent(graph, ScriptedBackend()).run_turn("hi")


class CountingEmbedder(ScriptedBackend):
    """The scripted backend's embeddings, counting calls and texts."""

    def __init__(self) -> None:
        super().__init__()
        self.embedded: list[list[str]] = []

    def embed(self, model: str, texts: list[str]) -> list[list[float]]:
        self.embedded.append(list(texts))
        return super().embed(model, texts)


def _embedding_graph(entries: list[str], **fields):
    return asset(
        ("Retrieve", "recall", {"entries": [{"text": t} for t in entries], "embedding_model": "embed.gguf",
                                "top_k": 1, "default_exit": "reply", **fields}),
        ("Generate", "reply", {"context_size": 512, "max_tokens": 32, "template": "{{#knowledge}}{{text}}{{/knowledge}}"}),
    )


def test_entries_are_embedded_once_across_turns():
    backend = CountingEmbedder()
    agent = Agent(_embedding_graph([f.text for f in FACTS]), backend)
    lines = ["tell me of the wolf", "the mill burned?", "inn cellar cider", "river floods"]
    expected = ["guard", "mill", "inn", "river"]
    for line, fact in zip(lines, expected):
        result = agent.run_turn(line)
        assert result.slots["knowledge"][0]["text"] == next(f.text for f in FACTS if f.id == fact)
    # the first turn embeds the query and the four entries; every later turn only its query
    assert [len(c) for c in backend.embedded] == [5, 1, 1, 1]
    assert [c[0] for c in backend.embedded] == lines


def test_changed_knowledge_is_embedded_again(tmp_path):
    (tmp_path / "k.jsonl").write_text('{"text": "The ferryman is called Oswin."}\n')
    graph = _embedding_graph(["The old mill burned down."], source_file="k.jsonl")
    backend = CountingEmbedder()
    agent = Agent(graph, backend, asset_dir=str(tmp_path))
    agent.run_turn("who is the ferryman")
    agent.run_turn("what burned")
    assert [len(c) for c in backend.embedded] == [3, 1]
    # the designer edits the knowledge file: its entries are read and embedded again
    (tmp_path / "k.jsonl").write_text('{"text": "The ferryman is called Oswin."}\n{"text": "Oswin fears the river."}\n')
    result = agent.run_turn("oswin fears the river?")
    assert result.slots["knowledge"][0]["text"] == "Oswin fears the river."
    assert [len(c) for c in backend.embedded] == [3, 1, 2]  # the query and the one new entry
    # a new agent (the editor rebuilds agents on edits) starts from scratch
    Agent(graph, backend, asset_dir=str(tmp_path)).run_turn("who is the ferryman")
    assert len(backend.embedded[-1]) == 4


def test_bm25_index_is_built_once_per_entries(monkeypatch):
    from runtime.nodes.retrieve import index as retrieval

    built = []
    real = retrieval.BM25Okapi

    def counting(corpus):
        built.append(len(corpus))
        return real(corpus)

    monkeypatch.setattr(retrieval, "BM25Okapi", counting)
    graph = load_asset(examples_dir() / "retrieval.json")
    agent = Agent(graph, ScriptedBackend(), asset_dir=str(examples_dir()))
    for line in ["When did the old mill burn?", "Who is the gate guard?", "Who founded the village?"]:
        agent.run_turn(line)
    assert len(built) == 1
