"""A scene on the sample model: how the NPCs' prompts attribute the others' lines in a chat template
with only user and assistant roles, and that the model answers them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from runtime.resources import examples_dir
from runtime.scene.scene import Scene

pytestmark = pytest.mark.model


def tavern_on(model: Path, folder: Path, max_tokens: int = 24) -> Path:
    """The tavern scene and its NPCs' assets, copied into ``folder`` with ``model`` as their model and
    short replies; the scene's path."""
    shutil.copytree(examples_dir(), folder / "examples")
    for name in ("tavern_keeper", "bard", "gate_guard"):
        path = folder / "examples" / f"{name}.json"
        raw = json.loads(path.read_text(encoding="utf-8"))
        raw["default_model"] = str(model)
        for node in raw["nodes"]:
            if "max_tokens" in node:
                node["max_tokens"] = max_tokens
        path.write_text(json.dumps(raw), encoding="utf-8")
    return folder / "examples" / "scenes" / "tavern.scene.json"


def test_each_npc_reads_the_others_lines_as_named_user_lines_and_answers(sample_model: Path, tmp_path: Path) -> None:
    from runtime.backends.llama import LlamaBackend

    path = tavern_on(sample_model, tmp_path)
    backend = LlamaBackend(asset_dir=path.parent)
    try:
        scene = Scene.open(path, backend)
        first = scene.say("Good evening! Is there a room, and a song?")
        second = scene.say("Tomas, play us something about the sea.")
    finally:
        backend.close()
    assert first.speakers == ["mira", "tomas"] and second.speakers[0] == "tomas"
    mira_said = first.turns[0].result.reply
    assert mira_said.strip()
    bard = first.turns[1].result.diagnostics.nodes[-1]  # his Generate and Speak node
    roles = [m.role for m in bard.input.prompt]
    assert roles == ["system", "user"], roles
    assert bard.input.prompt[1].content == f"Traveller: Good evening! Is there a room, and a song?\nMira: {mira_said}"
    # his next prompt: his own line came back as his assistant message, the others' as named user lines
    later = second.turns[0].result.diagnostics.nodes[-1].input.prompt
    assert [m.role for m in later] == ["system", "user", "assistant", "user"], [m.role for m in later]
    assert later[2].content == first.turns[1].result.reply
    assert later[1].content == f"Traveller: Good evening! Is there a room, and a song?\nMira: {mira_said}"
    assert later[3].content.startswith("Traveller: Tomas, play us something about the sea.")
    assert all(t.result.reply.strip() for t in second.turns)


def test_rounds_read_ahead_between_them_come_out_the_same_when_said_again(sample_model: Path, tmp_path: Path) -> None:
    """The read-ahead after each round changes how the NPCs' caches were read, so a round said again
    (the editor's regenerate and replay) reads on from the recorded read-ahead: bit for bit the same."""
    from runtime.backends.llama import LlamaBackend

    path = tavern_on(sample_model, tmp_path)
    raw = json.loads(path.read_text(encoding="utf-8"))
    raw["npcs"][2]["present"] = True  # Brann too: his guard's branches sit out rounds
    path.write_text(json.dumps(raw), encoding="utf-8")
    lines = ["Good evening, all!", "Brann, is the north road safe?", "Mira, a room for the night?",
             "Tomas, a song about the sea!"]
    backend = LlamaBackend(asset_dir=path.parent)
    try:
        scene = Scene.open(path, backend)
        said, read = [], []
        for line in lines:
            said.append([(t.npc, t.result.reply) for t in scene.say(line).turns])
            read.append(scene.warm())
        scene.rewind(3)
        again = [[(t.npc, t.result.reply) for t in scene.say(line).turns] for line in lines[1:]]
    finally:
        backend.close()
    assert any(tokens for npcs in read for tokens in npcs.values()), "the NPCs read ahead"
    assert again == said[1:]
