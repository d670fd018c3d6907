"""Overhead: a runtime turn vs a plain llama-cpp-python call on the same prompt, same generated tokens.

Both sides keep their context warm and reuse the shared system-prompt prefix; every
iteration uses a new player line, so both read the same new tokens and generate the
same number of tokens (greedy, cut at --tokens). The ratio is runtime time / plain
time over all iterations of one run; the goal is at most 1.05. A turn runs through the one door,
``runtime.session.Session``; a third side runs the bare ``Agent`` (how every entry point ran a turn
before the session), so ``ratio_session_vs_agent`` is what the door costs, measured in the same run.

    python bench/bench_overhead.py            # writes bench/results/overhead.json
"""

from __future__ import annotations

import argparse
import statistics
import time

from conversation import player_lines, sample_model, write_results
from llama_cpp import Llama

from runtime.agent import Agent
from runtime.asset.model import Asset
from runtime.backends.llama import LlamaBackend
from runtime.session.session import Session

GOAL = 1.05
STORYTELLER = "You are Tomas, a storyteller. Answer every question with a long, detailed story full of names and places."


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=64, help="tokens generated per call")
    parser.add_argument("--context", type=int, default=2048)
    args = parser.parse_args()

    model = sample_model()
    asset = Asset.model_validate({
        "name": "bench: overhead", "default_model": model, "start_node": "reply",
        "nodes": [{"id": "reply", "type": "Generate", "context_size": args.context, "max_tokens": args.tokens,
                   "system_prompt": STORYTELLER, "temperature": 0.0, "seed": 0}],
    })
    backend = LlamaBackend()
    plain = Llama(model_path=model, n_ctx=args.context, n_batch=512, n_threads=backend.n_threads,
                  n_threads_batch=backend.n_threads_batch, verbose=True)  # verbose=False would redirect stdout
    lines = player_lines(args.iterations + 1, seed=9)
    lines = [f"{line} Tell it as a long story." for line in lines]
    rows = []
    try:
        # warm-up: both contexts created, the system prompt read once
        Session(asset, backend).turn(lines[0])
        plain.create_chat_completion(messages=[{"role": "system", "content": STORYTELLER}, {"role": "user", "content": lines[0]}],
                                     max_tokens=args.tokens, temperature=0.0)
        for i, line in enumerate(lines[1:]):
            # alternate which side goes first, so drift in machine load hits both
            order = [("runtime", "agent", "plain"), ("plain", "runtime", "agent"), ("agent", "plain", "runtime")][i % 3]
            timing: dict[str, tuple[float, float]] = {}
            node = bare = None
            reference = None
            for side in order:
                w0, c0 = time.perf_counter(), time.process_time()
                if side == "runtime":
                    node = Session(asset, backend).turn(line).diagnostics.nodes[0]
                elif side == "agent":
                    bare = Agent(asset, backend).run_turn(line).diagnostics.nodes[0]
                else:
                    messages = [{"role": "system", "content": STORYTELLER}, {"role": "user", "content": line}]
                    reference = plain.create_chat_completion(messages=messages, max_tokens=args.tokens, temperature=0.0)
                timing[side] = (time.perf_counter() - w0, time.process_time() - c0)
            assert node is not None and bare is not None and reference is not None
            assert [m.content for m in node.input.prompt] == [STORYTELLER, line]
            plain_generated = reference["usage"]["completion_tokens"]
            same = (node.tokens.generated == bare.tokens.generated == plain_generated == args.tokens
                    and node.tokens.prompt == reference["usage"]["prompt_tokens"])
            rows.append({
                "iteration": i, "first": order[0],
                "runtime_s": round(timing["runtime"][0], 4), "agent_s": round(timing["agent"][0], 4),
                "plain_s": round(timing["plain"][0], 4),
                "runtime_cpu_s": round(timing["runtime"][1], 4), "plain_cpu_s": round(timing["plain"][1], 4),
                "ratio": round(timing["runtime"][0] / timing["plain"][0], 4),
                "runtime_prompt_tokens": node.tokens.prompt, "plain_prompt_tokens": reference["usage"]["prompt_tokens"],
                "runtime_evaluated": node.tokens.evaluated,
                "runtime_generated": node.tokens.generated, "plain_generated": plain_generated,
                # greedy decoding can still end early (EOS) on one side; such pairs did different work
                "same_work": same,
            })
            print(rows[-1])
    finally:
        backend.close()
        plain.close()

    used = [r for r in rows if r["same_work"]]
    ratio = sum(r["runtime_s"] for r in used) / sum(r["plain_s"] for r in used)
    door = sum(r["runtime_s"] for r in used) / sum(r["agent_s"] for r in used)
    cpu_ratio = sum(r["runtime_cpu_s"] for r in used) / sum(r["plain_cpu_s"] for r in used)
    summary = {
        "iterations": len(rows), "pairs_with_same_work": len(used), "tokens_per_call": args.tokens,
        "ratio_total_wall_time": round(ratio, 4),
        "ratio_total_cpu_time": round(cpu_ratio, 4),
        "ratio_median": round(statistics.median(r["ratio"] for r in used), 4),
        "ratio_session_vs_agent": round(door, 4),
        "agent_mean_s": round(statistics.mean(r["agent_s"] for r in used), 4),
        "runtime_mean_s": round(statistics.mean(r["runtime_s"] for r in used), 4),
        "plain_mean_s": round(statistics.mean(r["plain_s"] for r in used), 4),
        "goal": GOAL,
        "pass": ratio <= GOAL,
    }
    write_results("overhead", {"summary": summary, "iterations": rows})
    print(summary)
    return 0 if summary["pass"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
