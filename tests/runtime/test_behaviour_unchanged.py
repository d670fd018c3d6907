"""The same conversation on the test backend gives the same diagnostics, whatever the runtime's
internals: a golden file recorded before the node types moved into one registry (issue 11).

Every node type runs here, with budgets small enough that nodes trim and the summarizer folds.
Only timings are left out of the comparison. To record the golden file again after a deliberate
change in behaviour: ``python -m tests.runtime.test_behaviour_unchanged``.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from runtime.agent import Agent, TurnResult
from tests.runtime.conversations import asset, backend, player_lines

GOLDEN = Path(__file__).parent / "data" / "golden_diagnostics.jsonl"
# The Turn Inspector's prompt parts, as the editor used to read them back out of the flattened
# prompt (before the runtime recorded them while building the prompt).
GOLDEN_PARTS = Path(__file__).parent / "data" / "golden_prompt_parts.json"


def every_node_type_asset():
    return asset(
        ("Retrieve", "lore", {"entries": [{"id": "inn", "text": "The inn is called the Green Lamp."},
                                          {"id": "road", "text": "The north road is closed by snow."}],
                              "top_k": 1, "default_exit": "mood"}),
        ("ClassifyAttributes", "mood", {"attributes": [{"name": "tone", "values": ["calm", "angry"]}],
                                        "default_exit": "route"}),
        ("ClassifyIntent", "route", {"intents": [{"name": "ask_tool", "exit": "tools"},
                                                 {"name": "chat", "exit": "think"}],
                                     "fallback_exit": "think"}),
        ("ToolCall", "tools", {"context_size": 600, "max_tokens": 40, "default_exit": "reply",
                               "history_mode": "last_n", "history_window": 3,
                               "tools": [{"name": "weather", "description": "Today's weather",
                                          "parameters": {"type": "object", "properties": {}},
                                          "mock_result": "snow all day"}]}),
        ("Generate", "think", {"context_size": 300, "max_tokens": 40, "history_role": "none",
                               "default_exit": "reply"}),
        ("GenerateAndSpeak", "reply", {"context_size": 700, "max_tokens": 60, "seed": 3,
                                       "template": "{{#knowledge}}Fact: {{text}}\n{{/knowledge}}Mood: {{slots.tone}}",
                                       "history_mode": "summarized", "history_window": 6,
                                       "default_exit": "fold"}),
        ("Summarize", "fold", {"trigger_turns": 3, "trigger_tokens": 0, "keep_recent_turns": 2,
                               "max_summary_tokens": 60, "context_size": 900}),
        start="lore",
    )


def lines() -> list[str]:
    said = player_lines(9, seed=7, low=8, high=40)
    said[2] += " ask_tool please"
    said[6] += " ask_tool again"
    return said


def run_conversation() -> list[TurnResult]:
    agent = Agent(every_node_type_asset(), backend({"think": 25, "reply": 45, "fold": 30}))
    return [agent.run_turn(line) for line in lines()]


def conversation() -> list[dict[str, Any]]:
    out = []
    for result in run_conversation():
        assert result.diagnostics is not None
        out.append(_without_timings(result.diagnostics.model_dump(mode="json")))
    return out


def _without_timings(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_timings(v) for k, v in value.items() if not k.endswith("_ms")}
    if isinstance(value, list):
        return [_without_timings(v) for v in value]
    return value


def test_diagnostics_equal_the_golden_file() -> None:
    golden = [json.loads(line) for line in GOLDEN.read_text(encoding="utf-8").splitlines()]
    got = conversation()
    assert len(got) == len(golden)
    for turn, (expected, actual) in enumerate(zip(golden, got)):
        # added after the golden file was recorded: which backend ran the turn
        assert actual.pop("backend") == "scripted (deterministic test replies)"
        # added later too: whether a node was bypassed (none is here)
        assert [node.pop("bypassed") for node in actual["nodes"]] == [False] * len(actual["nodes"])
        # and later still: a Guard node's record and the game events reached (no Guard, no mark here)
        assert [node.pop("guard") for node in actual["nodes"]] == [None] * len(actual["nodes"])
        assert actual.pop("game_events") == []
        assert actual == expected, f"turn {turn} differs from the golden diagnostics"


def test_recorded_prompt_parts_equal_what_the_inspector_read_back_before() -> None:
    golden = json.loads(GOLDEN_PARTS.read_text(encoding="utf-8"))
    results = run_conversation()
    for turn, (expected, result) in enumerate(zip(golden, results, strict=True)):
        got = {node: [asdict(p) for p in prompt.parts] for node, prompt in result.prompts.items() if node in expected}
        assert got == expected, f"turn {turn}: prompt parts differ"
        # classifiers and the summarizer record theirs too (the recording is new: no golden to compare)
        assert {"mood", "route"} <= set(result.prompts)
        for node, prompt in result.prompts.items():  # the parts make up the prompt, message by message
            diag = next(n for n in result.diagnostics.nodes if n.node == node)
            assert max(p.message for p in prompt.parts) == len(diag.input.prompt) - 1
            assert sum(p.tokens for p in prompt.parts) == diag.tokens.counted


def test_the_golden_conversation_runs_every_node_type_trims_and_folds() -> None:
    golden = [json.loads(line) for line in GOLDEN.read_text(encoding="utf-8").splitlines()]
    types = {n["type"] for turn in golden for n in turn["nodes"]}
    assert types == {"Retrieve", "ClassifyAttributes", "ClassifyIntent", "ToolCall", "Generate",
                     "GenerateAndSpeak", "Summarize"}
    assert any(n["trim"] and n["trim"]["triggered"] for turn in golden for n in turn["nodes"])
    assert any(n["summary"] for turn in golden for n in turn["nodes"])


if __name__ == "__main__":
    GOLDEN.write_text("".join(json.dumps(t, sort_keys=True) + "\n" for t in conversation()), encoding="utf-8")
    print(f"wrote {GOLDEN}")
