"""Trimming: full re-reads over a 120-turn conversation with a small window, 75 % hysteresis vs trim-to-fit.

Runs the same scripted conversation twice through one Generate node on the sample
model: once as the runtime trims (drop oldest turns down to 75 % of the budget), once
dropping only until the prompt fits (the target set to 100 %). A re-read is a turn
whose prompt start changed, so the node read (nearly) its whole prompt again.

    python bench/bench_trimming.py            # writes bench/results/trimming.json
"""

from __future__ import annotations

import argparse
import time

from conversation import player_lines, sample_model, single_generate, write_results

import runtime.prompting.budget
from runtime.agent import Agent
from runtime.backends.llama import LlamaBackend


def run(model: str, turns: int, context: int, max_tokens: int, target_percent: int) -> dict:
    runtime.prompting.budget.TRIM_TARGET_PERCENT = target_percent
    backend = LlamaBackend()
    agent = Agent(single_generate(model, context_size=context, max_tokens=max_tokens), backend)
    rows = []
    started = time.perf_counter()
    try:
        for i, line in enumerate(player_lines(turns, seed=5)):
            node = agent.run_turn(line).diagnostics.nodes[0]
            t = node.tokens
            rows.append({
                "turn": i, "prompt": t.prompt, "reused": t.reused, "evaluated": t.evaluated,
                "trimmed": bool(node.trim.triggered), "dropped_turns": node.trim.dropped_turns,
                "prompt_ms": round(node.timings.prompt_ms, 1),
            })
    finally:
        backend.close()
        runtime.prompting.budget.TRIM_TARGET_PERCENT = 75
    later = rows[1:]
    return {
        "target_percent": target_percent,
        "trims": sum(r["trimmed"] for r in rows),
        # measured: the node read more than half of its prompt again
        "full_rereads": sum(r["evaluated"] > r["prompt"] / 2 for r in later),
        "evaluated_tokens": sum(r["evaluated"] for r in rows),
        "prompt_tokens": sum(r["prompt"] for r in rows),
        "prompt_ms_total": round(sum(r["prompt_ms"] for r in rows), 1),
        "mean_history_prompt_tokens": round(sum(r["prompt"] for r in later) / len(later), 1),
        "wall_s": round(time.perf_counter() - started, 1),
        "turns": rows,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=120)
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--max-tokens", type=int, default=32)
    args = parser.parse_args()
    model = sample_model()
    results = {}
    for name, percent in (("hysteresis_75", 75), ("trim_to_fit", 100)):
        results[name] = run(model, args.turns, args.context, args.max_tokens, percent)
        r = results[name]
        print(f"{name}: {r['trims']} trims, {r['full_rereads']} full re-reads, {r['evaluated_tokens']} tokens evaluated, "
              f"{r['prompt_ms_total']} ms reading prompts")
    h, f = results["hysteresis_75"], results["trim_to_fit"]
    summary = {
        "turns": args.turns, "context_size": args.context, "max_tokens": args.max_tokens,
        "budget": args.context - args.max_tokens,
        "full_rereads": {"hysteresis_75": h["full_rereads"], "trim_to_fit": f["full_rereads"]},
        "trims": {"hysteresis_75": h["trims"], "trim_to_fit": f["trims"]},
        "evaluated_tokens": {"hysteresis_75": h["evaluated_tokens"], "trim_to_fit": f["evaluated_tokens"]},
        "prompt_ms_total": {"hysteresis_75": h["prompt_ms_total"], "trim_to_fit": f["prompt_ms_total"]},
        "mean_prompt_tokens": {"hysteresis_75": h["mean_history_prompt_tokens"], "trim_to_fit": f["mean_history_prompt_tokens"]},
        "pass": h["full_rereads"] < f["full_rereads"],
    }
    write_results("trimming", {"summary": summary, "runs": results})
    print(summary)
    return 0 if summary["pass"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
