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
