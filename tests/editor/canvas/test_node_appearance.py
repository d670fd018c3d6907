"""The summary painted on each canvas node: what the node says or decides, in a designer's words,
short enough to read at the zoom a file opens at."""

from __future__ import annotations

import re

import pytest
from PySide6.QtGui import QFontMetricsF

from editor.canvas import node_appearance
from editor.canvas.node_types import SUMMARY_LINES, view_of
from runtime.asset.file import load_asset
from runtime.asset.model import Asset, new_node
from runtime.resources import examples_dir

JARGON = re.compile(r"\(agent\)|\bctx\b|history assistant|\u00b7 full|BM25|\btok\b")


def summary(node, asset=None):
    asset = asset or Asset(default_model="agent.gguf", nodes=[node])
    return view_of(node.type_name).summary(node, asset)


def example_summaries():
    for path in sorted(examples_dir().glob("*.json")):
        asset = load_asset(path)
        for node in asset.nodes:
            yield path.name, node, summary(node, asset)


def test_every_example_summary_is_short_and_free_of_jargon():
    for name, node, lines in example_summaries():
        assert 1 <= len(lines) <= SUMMARY_LINES, (name, node.id, lines)
        for line in lines:
            assert len(line) <= 34, (name, node.id, line)
            assert not JARGON.search(line), (name, node.id, line)


def test_reply_nodes_say_what_they_are_told():
    by_id = {(name, node.id): lines for name, node, lines in example_summaries()}
    # The character's name, then what tells this reply apart from the other replies of the character.
    assert by_id[("intent_router.json", "directions")][:2] == [
        "as Brann: \u201cGive short, gruff", "directions. The market is north,"]
    assert by_id[("chat.json", "reply")][-1] == "uses: time_of_day, player_name"
    assert by_id[("retrieval.json", "reply")][-1] == "uses: knowledge"
    quartermaster = by_id[("tool_calling.json", "lookup")]
    assert quartermaster[0] == "calls: check_stock, price_of"
    assert quartermaster[1].startswith("\u201cYou are the quartermaster's"), "no name: the prompt as written"
    assert summary(new_node("Generate", "g", system_prompt="You are Mira. Be brief.")) == ["as Mira: \u201cBe brief.\u201d"]
    assert summary(new_node("Generate", "g", system_prompt="You are Mira.")) == ["\u201cYou are Mira.\u201d"]
    # No system prompt: the template, or what is missing.
    assert summary(new_node("Generate", "g", template="Say hello to {{vars.name}}.")) == [
        "template: Say hello to", "{{vars.name}}.", "uses: name"]
    assert summary(new_node("GenerateAndSpeak", "g")) == ["no system prompt"]
    hidden = summary(new_node("Generate", "think", system_prompt="Plan the answer.", history_role="none",
                              history_mode="last_n", history_window=4))
    assert hidden == ["\u201cPlan the answer.\u201d", "last 4 entries \u00b7 hidden step"]


def test_decisions_and_memory_in_the_designers_words():
    intents = new_node("ClassifyIntent", "c", intents=[{"name": "greet"}, {"name": "bye"}])
    assert summary(intents) == ["decides: greet / bye / fallback"]
    attributes = new_node("ClassifyAttributes", "a", attributes=[
        {"name": "mood", "values": ["calm", "angry"]}, {"name": "tone", "values": ["polite", "rude"]}])
    assert summary(attributes) == ["fills: mood (calm/angry), tone", "(polite/rude)"]
    many = new_node("ClassifyAttributes", "a", attributes=[
        {"name": f"attribute_{n}", "values": ["one", "two", "three"]} for n in range(4)])
    assert summary(many)[0].startswith("fills: attribute_0, attribute_1")
    assert summary(new_node("Retrieve", "r", source_file="lore.jsonl")) == ["finds 3 facts in lore.jsonl"]
    assert summary(new_node("Retrieve", "r", top_k=1, entries=[{"text": "A fact."}], embedding_model="e.gguf")) == [
        "finds 1 fact in 1 written here", "by meaning"]
    assert summary(new_node("Summarize", "s")) == [
        "folds every ~1024 tokens", "keeps last 3 turns word for word", "summary up to 256 tokens"]
    assert summary(new_node("ToolCall", "t", tools=[{"name": "weather"}, {"name": "map"}])) == ["calls: weather, map"]


def test_the_model_is_named_only_when_it_is_not_the_agents():
    asset = Asset(default_model="agent.gguf")
    same = new_node("ClassifyIntent", "c", model_name="agent.gguf")
    other = new_node("ClassifyIntent", "c", model_name="/models/Other-7B.Q4.gguf")
    assert not any("model" in line for line in summary(same, asset))
    assert summary(other, asset)[-1] == "model: Other-7B.Q4.gguf"
    assert summary(new_node("Summarize", "s"), Asset())[-1] == "no model set"


@pytest.mark.parametrize("example", ["intent_router", "chat", "tool_calling", "retrieval", "long_conversation"])
def test_summaries_are_legible_at_the_zoom_an_example_opens_at(make_window, qtbot, example):
    """On a 1920x1080 window a summary's capital letters are at least 9 px high on screen (they were
    under 9 at 7.5 pt), and the examples' nodes stay narrower than their 320-unit column spacing."""
    window = make_window()
    window.resize(1920, 1080)
    qtbot.waitUntil(lambda: window.canvas.viewer.viewport().width() > 900)
    window.open_path(str(examples_dir() / f"{example}.json"))
    scale = window.canvas.viewer.transform().m11()
    cap = QFontMetricsF(node_appearance._SUMMARY_FONT).tightBoundingRect("H").height()
    assert cap * scale >= 9.0, f"summary capitals {cap * scale:.1f} px high at zoom {scale:.2f}"
    for node in window.document.asset.nodes:
        item = window.canvas.canvas_node(node.id).view
        assert item.summary and item.boundingRect().width() <= 290, (node.id, item.boundingRect().width())
