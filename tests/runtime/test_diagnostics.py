"""Turn diagnostics: the committed schema is current, and every turn's object matches it."""

from __future__ import annotations

import json

import jsonschema

from runtime.agent import Agent
from runtime.asset.file import load_asset
from runtime.backends.scripted import ScriptedBackend
from runtime.diagnostics import TurnDiagnostics
from runtime.resources import examples_dir, schemas_dir


def test_every_example_turn_matches_the_schema_and_round_trips():
    schema = json.loads((schemas_dir() / "turn-diagnostics.schema.json").read_text(encoding="utf-8"))
    validator = jsonschema.Draft202012Validator(schema)
    for name in ("chat", "intent_router", "tool_calling", "retrieval", "long_conversation"):
        graph = load_asset(examples_dir() / f"{name}.json")
        agent = Agent(graph, ScriptedBackend(), asset_dir=str(examples_dir()))
        for line in ["How many arrows?", "When did the mill burn?", "Hello"] * 3:
            diagnostics = agent.run_turn(line).diagnostics
            raw = json.loads(diagnostics.to_json_line())
            validator.validate(raw)
            assert TurnDiagnostics.model_validate(raw) == diagnostics
            for node in raw["nodes"]:
                assert set(node) >= {"node", "type", "input", "output", "exit", "tokens", "trim", "timings", "warnings"}
                assert set(node["tokens"]) >= {"budget", "prompt", "reused", "evaluated", "generated"}
                if node["trim"]:
                    assert set(node["trim"]) >= {"window_start_before", "window_start_after", "dropped_turns", "triggered"}
            assert raw["player"] == line and raw["path"] == [n["node"] for n in raw["nodes"]]
