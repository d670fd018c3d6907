"""``parley replay`` on the sample model: a bundle written from a conversation replays byte-identical
in a cold process, and a bundle that no longer says what the engine does names the first turn, node
and token that differ."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from runtime.agent import Agent
from runtime.asset.file import load_asset
from runtime.bundle.file import bundle_from_dict, load_bundle, make_bundle, write_bundle
from runtime.bundle.replay import replay_bundle
from runtime.cli import main
from runtime.resources import examples_dir

pytestmark = pytest.mark.model

LINES = ["Good evening! Is there a room free tonight?", "What is the best dish on the menu?", "Thank you, goodnight."]
REPLAY_TIMEOUT_S = 900  # generous: the machine may be busy; nothing waits this long when all is well


@pytest.fixture(scope="module")
def recorded(sample_model, tmp_path_factory):
    """A bundle of three turns of the chat example, written by the process that talked."""
    from runtime.backends.llama import LlamaBackend

    asset = load_asset(examples_dir() / "chat.json")
    nodes = [n.model_copy(update={"max_tokens": 16}) for n in asset.nodes]
    asset = asset.model_copy(update={"default_model": str(sample_model), "nodes": nodes})
    backend = LlamaBackend(examples_dir())
    try:
        agent = Agent(asset, backend, str(examples_dir()))
        replies = [agent.run_turn(line).reply for line in LINES]
        bundle = make_bundle(asset, agent.export_dialog(), backend, examples_dir(), asset_source="chat.json")
    finally:
        backend.close()
    path = tmp_path_factory.mktemp("bundle") / "chat.parley-bundle"
    write_bundle(bundle, path)
    return path, replies


def generated(raw, turn_id: int) -> list[int]:
    """The tokens turn ``turn_id`` generated at node reply: the last chunk its journal read (one at a time)."""
    turn = next(t for t in raw["conversation"]["turns"] if t["id"] == turn_id)
    chunk = turn["state"]["journals"]["reply"]["chunks"][-1]
    assert chunk.get("singles"), "a turn's generated tokens are read one at a time"
    return chunk["tokens"]


def test_a_bundle_replays_byte_identical_in_a_cold_process(recorded):
    path, _replies = recorded
    raw = json.loads(path.read_text(encoding="utf-8"))
    assert all(len(generated(raw, i)) >= 8 for i in range(3)), "each turn's decode journal is in the bundle"
    done = subprocess.run([sys.executable, "-m", "runtime", "replay", str(path), "--json"], capture_output=True,
                          text=True, timeout=REPLAY_TIMEOUT_S, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["identical"] and report["first_difference"] is None
    assert [(t["turn"], t["outcome"]) for t in report["turns"]] == [(1, "identical"), (2, "identical"), (3, "identical")]
    assert report["reproducibility"]["exact"] and report["notes"] == []


def test_a_changed_generated_token_is_named_by_turn_node_and_token(recorded, tmp_path, capsys):
    path, _replies = recorded
    raw = json.loads(path.read_text(encoding="utf-8"))
    tokens = generated(raw, 2)
    real = tokens[3]
    tokens[3] = real + 1  # what the third turn's reply node generated, changed at its fourth token
    tampered = tmp_path / "tampered.parley-bundle"
    tampered.write_text(json.dumps(raw), encoding="utf-8")

    assert main(["replay", str(tampered)]) == 1
    out = capsys.readouterr().out
    assert "turn 1 (id 0): identical" in out and "turn 2 (id 1): identical" in out
    first = next(line for line in out.splitlines() if line.startswith("first difference: "))
    assert first.startswith("first difference: turn 3 (id 2): DIFFERENT: node reply, generated token 3 (cache "
                            "position "), first
    assert f"(token {real + 1}), replayed " in first and first.endswith(f"(token {real})"), first
    assert "1 of 3 turns replayed differ" in out


def test_another_seed_salt_changes_the_first_turn_and_says_where(recorded):
    path, _replies = recorded
    raw = json.loads(path.read_text(encoding="utf-8"))
    # each turn records the salt it was generated with (version 4): claim the first ran with another
    first_turn = next(t for t in raw["conversation"]["turns"] if t["id"] == 0)
    first_turn.setdefault("state", {})["seed_salt"] = 12345
    report = replay_bundle(bundle_from_dict(raw, "salted.parley-bundle"), stop_at_first=True)
    first = report.first_difference
    assert not report.identical and report.stopped_early and first is not None
    assert (first.index, first.turn_id, first.outcome) == (0, 0, "different")
    difference = first.difference
    assert difference.node == "reply" and difference.what == "generated token"
    assert difference.recorded_id != difference.replayed_id and difference.token is not None
    assert [t.outcome for t in report.turns] == ["different"], "it stopped at the first difference"


def test_replies_alone_are_compared_where_no_journal_was_recorded(sample_model):
    """A conversation that kept no decode journals (a history from before them, turns on a server): its
    replies are still compared, and the first that differs is named by its token."""
    from runtime.backends.scripted import ScriptedBackend

    asset = load_asset(examples_dir() / "chat.json").model_copy(update={"default_model": str(sample_model)})
    agent = Agent(asset, ScriptedBackend())
    agent.run_turn("Hello")
    report = replay_bundle(make_bundle(asset, agent.export_dialog(), asset_dir=examples_dir()), stop_at_first=True)
    first = report.first_difference
    assert first is not None and first.turn_id == 0 and first.difference.node == "reply"
    assert first.difference.what == "reply token", first.describe()
    recorded = agent.export_dialog().history.turns[0].entries[0].text
    assert recorded.startswith(first.difference.recorded.strip()), (recorded, first.describe())


def test_the_bundle_a_replay_reads_is_the_one_written(recorded):
    path, replies = recorded
    bundle = load_bundle(path)
    assert [turn.entries[0].text for turn in bundle.conversation.history.turns] == replies
