"""Text that is not text at run time (issue 14, defect 4): a lone surrogate still arrives in a typed
line (bytes that were not UTF-8), a runtime system prompt or an asset kept in memory; tokenizing,
diagnostics and saving read it as U+FFFD instead of raising UnicodeEncodeError."""

from __future__ import annotations

import json

import pytest

from runtime.agent import Agent
from runtime.asset.file import load_asset
from runtime.asset.model import Asset, new_node
from runtime.backends.scripted import ScriptedBackend
from runtime.diagnostics import TurnDiagnostics
from runtime.names import utf8, without_surrogates
from runtime.resources import examples_dir


def test_a_diagnostics_line_with_a_lone_surrogate_can_be_written(tmp_path):
    line = TurnDiagnostics(turn=0, player="hi \ud800 there", reply="ok").to_json_line()
    (tmp_path / "d.jsonl").write_text(line, encoding="utf-8")  # raised UnicodeEncodeError
    assert json.loads(line)["player"] == "hi \ufffd there"


@pytest.mark.parametrize("example", ["chat.json", "tool_calling.json", "retrieval.json", "intent_router.json"])
def test_a_turn_with_a_lone_surrogate_runs_on_the_scripted_backend(example, tmp_path):
    agent = Agent(load_asset(examples_dir() / example), ScriptedBackend(), str(examples_dir()))
    result = agent.run_turn("Where is the \udcff market?")
    assert result.diagnostics is not None
    (tmp_path / "d.jsonl").write_text(result.diagnostics.to_json_line(), encoding="utf-8")


def test_the_llama_backend_tokenizes_a_lone_surrogate_as_a_replacement_character():
    """The llama.cpp backend encoded text with str.encode('utf-8'): UnicodeEncodeError."""
    from runtime.backends.llama import _LoadedModel

    seen: list[bytes] = []

    class Model:
        def tokenize(self, data: bytes, add_bos: bool, special: bool) -> list[int]:
            seen.append(data)
            return list(data)

    loaded = _LoadedModel.__new__(_LoadedModel)
    loaded.model = Model()
    assert loaded.tokenize("a\ud800b", special=False) == list("a\ufffdb".encode())
    assert seen == ["a\ufffdb".encode()]


@pytest.mark.model
def test_the_sample_model_counts_a_line_with_a_lone_surrogate(sample_model):
    from runtime.backends.llama import LlamaBackend

    backend = LlamaBackend()
    try:
        assert backend.count_tokens(str(sample_model), "hi \ud800") == backend.count_tokens(str(sample_model), "hi \ufffd")
    finally:
        backend.close()


def test_an_asset_in_memory_with_a_lone_surrogate_runs():
    asset = Asset(start_node="reply", default_model="m", nodes=[
        new_node("GenerateAndSpeak", "reply", system_prompt="You are \ud800 Mira.")])
    result = Agent(asset, ScriptedBackend()).run_turn("Hello")
    assert result.reply


def test_text_helpers():
    assert utf8("é\udfff") == "é\ufffd".encode()
    assert without_surrogates("plain") == "plain"
    assert without_surrogates("\ud83d\ude00") == "\ufffd\ufffd"  # two lone halves are not one emoji in a str
