"""The suite the suite tests share: a router asset (a classifier, a reply, a tool call) and a suite
with every kind of expectation, on the scripted backend."""

from __future__ import annotations

import json
from pathlib import Path

from runtime.backends.scripted import ScriptedBackend

ASSET = {
    "version": 1, "name": "router", "default_model": "m.gguf", "start_node": "classify",
    "variables": {"mood": "calm"},
    "nodes": [
        {"id": "classify", "type": "ClassifyIntent", "intents": [
            {"name": "greet", "exit": "hello"}, {"name": "shop", "exit": "tools"}], "fallback_exit": "hello"},
        {"id": "hello", "type": "GenerateAndSpeak", "system_prompt": "Greet.", "template": "Mood: {{vars.mood}}"},
        {"id": "tools", "type": "ToolCall", "default_exit": "hello", "tools": [
            {"name": "stock", "parameters": {"type": "object", "properties": {"item": {"type": "string"}}},
             "mock_result": "3 left"}]},
    ],
}


def write(tmp_path: Path, suite: str, asset: dict | None = None) -> Path:
    (tmp_path / "router.json").write_text(json.dumps(asset or ASSET), encoding="utf-8")
    path = tmp_path / "router.suite.yaml"
    path.write_text(suite, encoding="utf-8")
    return path


GOOD = """\
asset: router.json
cases:
  - name: greets
    variables: {mood: grumpy}
    turns:
      - say: "greet me please"
        expect:
          path: [classify, hello]
          exits: {classify: "intent:greet"}
          intent: greet
          slots: {intent: greet}
          reply: {contains: ["heard"], not_contains: ["zebra"], regex: "greet", max_words: 30, mentions_one_of: [please, merci]}
          budget: {max_prompt_tokens: 500, no_trim: true, summary_written: false}
  - name: shops
    turns:
      - say: "shop for a sword"
        expect:
          visits: [tools]
          not_visits: []
          tool: {name: stock, arguments: {}, arguments_schema: {type: object}}
    expect:
      - at_turn: 1
        reply: {contains: ["heard"]}
"""


def scripted():
    return ScriptedBackend()
