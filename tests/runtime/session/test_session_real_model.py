"""A session on the real sample model: the conversation survives an edited graph and a new backend,
and the next turn's prompt holds the turns before (the model reads them again from a cold cache)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.backends.llama import LlamaBackend
from runtime.session.session import Session, open_graph
from tests.samples import example_on_sample_model

pytestmark = pytest.mark.model
LINES = ["Good evening. Is there a room for the night?", "My name is Aldric. What is the soup today?"]


@pytest.fixture()
def chat(sample_model, tmp_path) -> Path:
    example_on_sample_model("chat", sample_model, tmp_path, 12)
    return tmp_path / "chat.json"


def _history_in_prompt(record_prompt, line: str) -> bool:
    return any(p.kind == "history" and line in p.text for p in record_prompt.parts)


def test_the_conversation_survives_a_new_backend_and_an_edited_graph(chat):
    first, second = LlamaBackend(chat.parent), LlamaBackend(chat.parent)
    try:
        session = Session.open(chat, first)
        assert session.folder == str(chat.parent.resolve())
        one = session.turn(LINES[0])
        session.use_backend(second)  # a cold cache: the history is read again
        two = session.turn(LINES[1])
        assert session.backend is second and [t.player for t in session.agent.history.turns] == LINES
        assert _history_in_prompt(two.prompts["reply"], LINES[0]) and one.reply

        edited = open_graph(chat)
        reply = next(n for n in edited.nodes if n.id == "reply")
        edited = edited.model_copy(update={"nodes": [
            reply.model_copy(update={"system_prompt": "You are Mira, a terse innkeeper."}) if n.id == "reply" else n
            for n in edited.nodes]})
        session.use_asset(edited, chat.parent)
        three = session.turn("Thank you.")
        assert len(session.agent.history.turns) == 3
        parts = three.prompts["reply"].parts
        assert parts[0].kind == "system" and "terse innkeeper" in parts[0].text
        assert _history_in_prompt(three.prompts["reply"], LINES[1])
    finally:
        first.close()
        second.close()
