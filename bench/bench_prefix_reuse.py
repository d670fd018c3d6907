"""Prefix reuse: a 40-turn scripted conversation through Generate -> Summarize on the sample model.

For each ordinary turn of the Generate node (no trim, no new summary since its previous
call), ``evaluated / (tokens new since its previous call)`` must be at most 1.1 and the
reused share of its prompt at least 90 %.

    python bench/bench_prefix_reuse.py            # writes bench/results/prefix_reuse.json
    python bench/bench_prefix_reuse.py --fast     # LlamaBackend(reproducible=False): prefix_reuse_fast.json

By default llama.cpp reads prompts in fixed 64-token blocks and reuses only whole blocks (so replays are
reproducible): an ordinary turn reads the new tokens plus the rest of the last block, and the reply the
model generated. ``--fast`` reuses the longest common prefix, generated tokens included.
"""

from __future__ import annotations

import argparse
import statistics
import time

from conversation import generate_then_summarize, player_lines, sample_model, write_results

from runtime.agent import Agent
from runtime.backends.llama import LlamaBackend

MAX_EVALUATED_RATIO = 1.1
MIN_REUSED_SHARE = 0.90


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--fast", action="store_true", help="reproducible=False: reuse every common token")
    args = parser.parse_args()

    model = sample_model()
    backend = LlamaBackend(reproducible=not args.fast)
    agent = Agent(generate_then_summarize(model), backend)
    rows = []
    previous_prompt = None
    summary_written_last_turn = False
    started = time.perf_counter()
    try:
        for i, line in enumerate(player_lines(args.turns, seed=4)):
            result = agent.run_turn(line)
            nodes = {n.node: n for n in result.diagnostics.nodes}
            reply = nodes["reply"]
            t = reply.tokens
            trimmed = bool(reply.trim and reply.trim.triggered)
            summary_now = nodes["summarize"].summary is not None
            ordinary = previous_prompt is not None and not trimmed and not summary_written_last_turn
            new_tokens = t.prompt - previous_prompt if previous_prompt is not None else t.prompt
            rows.append({
                "turn": i, "prompt": t.prompt, "reused": t.reused, "evaluated": t.evaluated, "generated": t.generated,
                "new_tokens": new_tokens, "trimmed": trimmed, "summary_written": summary_now,
                "ordinary": ordinary,
                "evaluated_ratio": round(t.evaluated / new_tokens, 3) if ordinary and new_tokens > 0 else None,
                "reused_share": round(t.reused / t.prompt, 3) if t.prompt else None,
                "prompt_ms": round(reply.timings.prompt_ms, 1), "generate_ms": round(reply.timings.generate_ms, 1),
                "summarize_evaluated": nodes["summarize"].tokens.evaluated,
            })
            previous_prompt = t.prompt
            summary_written_last_turn = summary_now
            print(f"turn {i:2d}: prompt {t.prompt:5d} reused {t.reused:5d} evaluated {t.evaluated:4d} "
                  f"new {new_tokens:4d} {'ordinary' if ordinary else 'trim' if trimmed else 'after summary' if i else 'first'}"
                  f"{' +summary' if summary_now else ''}")
    finally:
        backend.close()

    ordinary = [r for r in rows if r["ordinary"]]
    ratios = [r["evaluated_ratio"] for r in ordinary if r["evaluated_ratio"] is not None]
    shares = [r["reused_share"] for r in ordinary]
    summary = {
        "turns": len(rows),
        "ordinary_turns": len(ordinary),
        "trimmed_turns": sum(r["trimmed"] for r in rows),
        "summaries_written": sum(r["summary_written"] for r in rows),
        "evaluated_ratio_max": max(ratios) if ratios else None,
        "evaluated_ratio_mean": round(statistics.mean(ratios), 3) if ratios else None,
        "reused_share_min": min(shares) if shares else None,
        "reused_share_mean": round(statistics.mean(shares), 3) if shares else None,
        # all ordinary turns together: reused tokens / prompt tokens
        "reused_share_overall": round(sum(r["reused"] for r in ordinary) / sum(r["prompt"] for r in ordinary), 3)
        if ordinary else None,
        # a short prompt cannot reach 90 %: the new player line alone (~21 tokens) is over 10 % of it
        "turns_below_share_target": [
            {"turn": r["turn"], "prompt": r["prompt"], "evaluated": r["evaluated"], "reused_share": r["reused_share"]}
            for r in ordinary if r["reused_share"] < MIN_REUSED_SHARE
        ],
        "targets": {"evaluated_ratio_max": MAX_EVALUATED_RATIO, "reused_share_min": MIN_REUSED_SHARE},
        "wall_s": round(time.perf_counter() - started, 1),
    }
    summary["pass_evaluated_ratio"] = bool(ratios) and summary["evaluated_ratio_max"] <= MAX_EVALUATED_RATIO
    summary["pass_reused_share_every_turn"] = bool(shares) and summary["reused_share_min"] >= MIN_REUSED_SHARE
    summary["pass_reused_share_overall"] = bool(shares) and summary["reused_share_overall"] >= MIN_REUSED_SHARE
    summary["pass"] = summary["pass_evaluated_ratio"] and summary["pass_reused_share_overall"]
    summary["reproducible"] = not args.fast
    write_results("prefix_reuse_fast" if args.fast else "prefix_reuse", {"summary": summary, "turns": rows})
    print({k: v for k, v in summary.items()})
    return 0 if summary["pass"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
