"""A turn on the real sample model with the agent's language set: the line reaches the real chat
template within the budget's arithmetic, and the template reads the language (docs/localisation.md)."""

from __future__ import annotations

import pytest

from runtime.agent import Agent
from runtime.asset.file import load_asset
from runtime.resources import examples_dir

pytestmark = pytest.mark.model


def test_a_turn_on_the_sample_model_in_german(sample_model) -> None:
    from runtime.backends.llama import LlamaBackend

    chat = load_asset(examples_dir() / "chat.json")
    reply = chat.node("reply").model_copy(update={
        "max_tokens": 24, "template": chat.node("reply").template + " Speak {{language}}."})
    german = chat.model_copy(update={"default_model": str(sample_model), "language": "de", "nodes": [reply]})
    backend = LlamaBackend(asset_dir=examples_dir())
    try:
        result = Agent(german, backend, str(examples_dir())).run_turn("Guten Abend! Ist ein Zimmer frei?")
    finally:
        backend.close()
    node = result.diagnostics.nodes[0]
    system, *_, user = node.input.prompt
    assert system.content.endswith("in character.\n\nAnswer in German.")
    assert user.content.startswith("It is evening. The player's name is Traveller. Speak German.")
    assert result.reply.strip()
    # the budget's arithmetic (tokenizer + 8 per message) still covers the real chat template
    assert node.tokens.prompt <= node.tokens.counted + 8
