"""The runtime's own cost per turn as the dialog history grows (no model: the scripted backend).

Prompt building looks at the whole history on every turn (window starts, summary
coverage, last-N selection), so its cost grows with the history even though the
prompt does not. This measures milliseconds per turn of the runtime alone over a long
conversation through a three-node graph (ToolCall -> hidden Generate -> GenerateAndSpeak),
each node trimming its own 2048-token window. Goal: under 5 ms per turn at 2,000 turns,
a small fraction of one real model call.

    python bench/bench_runtime_turn.py            # writes bench/results/runtime_turn.json
"""

from __future__ import annotations

import argparse
import statistics
import time

from conversation import player_lines, write_results

from runtime.agent import Agent
from runtime.asset.model import Asset
from runtime.backends.scripted import ScriptedBackend

GOAL_MS = 5.0


def graph() -> Asset:
    common = {"context_size": 2048, "max_tokens": 128}
    return Asset.model_validate({
        "name": "bench: runtime turn",
        "default_model": "scripted.gguf",
        "start_node": "lookup",
        "nodes": [
            {"id": "lookup", "type": "ToolCall", **common, "system_prompt": "Call a tool.", "default_exit": "think",
             "tools": [{"name": "check_stock", "parameters": {"type": "object", "properties": {"item": {"type": "string"}}},
                        "mock_result": "{\"count\": 240}"}]},
            {"id": "think", "type": "Generate", **common, "history_role": "none", "system_prompt": "Plan the answer.",
             "default_exit": "reply"},
            {"id": "reply", "type": "GenerateAndSpeak", **common, "system_prompt": "You are Brom. Be brief.",
             "template": "Plan: {{slots.think}}"},
        ],
    })


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=2000)
    args = parser.parse_args()

    agent = Agent(graph(), ScriptedBackend())
    timings: list[float] = []
    for line in player_lines(args.turns, seed=9):
        started = time.perf_counter()
        agent.run_turn(line)
        timings.append((time.perf_counter() - started) * 1000)

    def window(end: int) -> dict[str, float]:
        part = timings[max(0, end - 100): end]
        return {"median_ms": round(statistics.median(part), 3), "max_ms": round(max(part), 3)}

    checkpoints = {str(n): window(n) for n in (100, 500, 1000, 2000) if n <= len(timings)}
    last = checkpoints[str(max(int(k) for k in checkpoints))]
    results = {
        "turns": args.turns,
        "nodes_per_turn": 3,
        "ms_per_turn_over_the_100_turns_before": checkpoints,
        "goal_ms_per_turn": GOAL_MS,
        "meets_goal": last["median_ms"] <= GOAL_MS,
    }
    write_results("runtime_turn", results)
    print(results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
