"""Rewind and replay: the KV caches follow.

Ten turns through Generate -> Summarize on the sample model, then a rewind to before turn 7 and
turn 7 said again (the same line: with fixed seeds the reply must come out the same). For the
first replayed call of each node, compare what it evaluated with what it had to: the tokens
after the longest prefix its cache still held that is made of whole prompt blocks (llama.cpp
reads prompts in fixed blocks so replays are reproducible). A cold agent reading the same turn
from scratch is the baseline.

    python bench/bench_rewind.py            # writes bench/results/rewind.json
"""

from __future__ import annotations

import argparse
import time

from conversation import generate_then_summarize, player_lines, sample_model, single_generate, write_results

from runtime.agent import Agent
from runtime.backends.llama import CANONICAL_BLOCK, LlamaBackend

TURNS = 10
REWIND_TO = 6  # before turn 7 (turns count from 0 here)


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def scenario(make_asset, lines: list[str]) -> tuple[dict, list[dict]]:
    model = sample_model()
    backend = LlamaBackend()
    agent = Agent(make_asset(model), backend)
    rows = []
    try:
        first = [agent.run_turn(line) for line in lines]
        agent.rewind(REWIND_TO)
        sessions = backend.sessions()
        held = {key: list(session.tokens) for key, session in sessions.items()}
        held_canonical = {key: session.canonical for key, session in sessions.items()}
        summaries_after = [r.turn + 1 for r in first[REWIND_TO:] for n in r.diagnostics.nodes if n.summary]
        t0 = time.perf_counter()
        again = agent.run_turn(lines[REWIND_TO])
        replay_ms = (time.perf_counter() - t0) * 1000
        for diag in again.diagnostics.nodes:
            if not diag.tokens.prompt or diag.node not in held:
                continue  # a summarizer that did not call the model on this turn
            session = backend.sessions()[diag.node]
            prompt = session.tokens[: diag.tokens.prompt]  # what it read for this call (then generated)
            prefix = min(common_prefix(held[diag.node], prompt), held_canonical[diag.node], len(prompt) - 1)
            kept = prefix - prefix % CANONICAL_BLOCK
            rows.append({
                "node": diag.node, "prompt": diag.tokens.prompt, "reused": diag.tokens.reused,
                "evaluated": diag.tokens.evaluated, "common_prefix": prefix,
                "must_evaluate": diag.tokens.prompt - kept,
                "evaluates_only_after_the_prefix": diag.tokens.evaluated == diag.tokens.prompt - kept,
            })
        same_reply = again.reply == first[REWIND_TO].reply
    finally:
        backend.close()

    cold_backend = LlamaBackend()
    cold = Agent(make_asset(model), cold_backend)
    try:
        for line in lines[:REWIND_TO]:
            cold.run_turn(line)
        cold_backend.release_all()
        t0 = time.perf_counter()
        cold_result = cold.run_turn(lines[REWIND_TO])
        cold_ms = (time.perf_counter() - t0) * 1000
        cold_evaluated = {n.node: n.tokens.evaluated for n in cold_result.diagnostics.nodes if n.tokens.prompt}
    finally:
        cold_backend.close()
    summary = {
        "same_reply_after_rewind": same_reply,
        # a summary written after the rewind point changed the later system messages the caches hold
        "summaries_written_in_the_turns_rewound": summaries_after,
        "every_node_evaluates_only_after_its_common_prefix": all(r["evaluates_only_after_the_prefix"] for r in rows),
        "replayed_turn": {r["node"]: f"{r['evaluated']} of {r['prompt']} read ({r['reused']} from the cache)"
                          for r in rows},
        "cold_turn_evaluated": cold_evaluated,
        "replayed_turn_ms": round(replay_ms), "cold_turn_ms": round(cold_ms),
    }
    return summary, rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    started = time.perf_counter()
    lines = player_lines(TURNS, seed=4)
    results = {}
    for name, make in (("generate", lambda m: single_generate(m, context_size=2048, max_tokens=48)),
                       ("generate_then_summarize", generate_then_summarize)):
        summary, rows = scenario(make, lines)
        results[name] = {"summary": summary, "nodes": rows}
        print(name, summary)
    ok = all(r["summary"]["every_node_evaluates_only_after_its_common_prefix"] and r["summary"]["same_reply_after_rewind"]
             for r in results.values())
    write_results("rewind", {"turns": TURNS, "rewound_to_before_turn": REWIND_TO + 1, "block": CANONICAL_BLOCK,
                             "scenarios": results, "pass": ok, "wall_s": round(time.perf_counter() - started, 1)})
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
