"""Many NPCs on one model: a hundred conversations on one LlamaBackend within a KV budget.

NPC agents npc-0 .. npc-99 (the chat and intent-router examples, alternating, their replies cut to
``--max-tokens``) share one embedded backend, so one load of the sample model's weights, with
``kv_budget_mib`` holding about ten node contexts. They talk round robin, turn by turn, so every
NPC's caches are parked (saved as state snapshots) before its next turn and restored then.
Reported:

- process memory (VmRSS after the load, peak VmHWM, final VmRSS) against the budget, the parked
  snapshots and the weights; ``kv_stats``; ``model_loads`` (the goal: 1);
- per node call that restored a parked cache, its prompt_ms and the tokens it read; and, on a sample
  of NPCs, their last turn said again back to back (so under the same load) three ways, each
  ``--repeats`` times: restored from the very parked caches it had, read cold (the NPC's caches
  released), and warm (those caches put back in a live context before the call, as if never
  parked); the same reply each time. The goal: a restored call takes at most 0.2x the time of the
  cold read (restored against warm is what parking itself costs);
- the parks' and restores' own cost (``llama_state_seq_get_data`` / ``set_data``), and the load
  average (other processes share the machine).

    python bench/bench_npcs.py                              # 100 NPCs x 3 turns: bench/results/npcs.json
    python bench/bench_npcs.py --sessions 6 --turns 2       # a smoke run (written only with --write)
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from conversation import ROOT, StateCalls, player_lines, sample_model, write_results

from runtime.agent import Agent
from runtime.asset.file import load_asset
from runtime.backends.llama import LlamaBackend, context_mib
from runtime.models.gguf import read_gguf

EXAMPLES = ROOT / "resources" / "examples"
ASSETS = ["chat.json", "intent_router.json"]
SESSIONS = 100
TURNS = 3
KV_BUDGET_GB = 0.75  # about ten contexts of the examples (a chat node's 2048 tokens ~92 MiB, a router node's ~49)
MAX_TOKENS = 12
COLD_SAMPLES = 10
REPEATS = 3
# Lines that take the router down each of its exits, between the scripted player's
_ROUTER_LINES = ["Where is the market?", "Open the gate or I will break it down!", "Nice weather today."]


def memory_mib() -> dict[str, float]:
    """This process's resident memory now and at its peak (Linux /proc/self/status)."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                out[name] = round(int(value.split()[0]) / 1024, 1)
    return out


def example(name: str, model: str, max_tokens: int) -> Any:
    asset = load_asset(EXAMPLES / name)
    asset.default_model = model
    for node in asset.nodes:
        if hasattr(node, "max_tokens"):
            node.max_tokens = max_tokens
    return asset


def node_calls(result: Any) -> dict[str, dict[str, Any]]:
    return {n.node: {"prompt": n.tokens.prompt, "evaluated": n.tokens.evaluated, "reused": n.tokens.reused,
                     "cold": n.tokens.cold, "prompt_ms": round(n.timings.prompt_ms, 1)}
            for n in result.diagnostics.nodes if n.tokens.prompt}


MODES = ["restored", "cold", "warm"]


def say_again(backend: LlamaBackend, agent: Agent, line: str, parked: list[Any], mode: str, last: int
              ) -> tuple[str, dict[str, dict[str, Any]]]:
    """The NPC's last turn again: from ``parked`` (its caches before that turn) restored by the call,
    or put back in live contexts beforehand (warm), or from nothing (cold)."""
    agent.rewind(last)
    for node in agent.asset.nodes:
        backend.release(f"{agent.session_id}/{node.id}")
    if mode != "cold":
        for p in parked:
            backend.store_parked(p)
    if mode == "warm":  # bench only: what the call would find had the NPC never been parked
        sessions = backend.sessions()
        for p in parked:
            session = sessions[p.snapshot.key]
            with session.model.lock:
                session._unpark(session._ensure_context())
                session.last_used = time.monotonic()  # not the first parked again for its sibling node
    result = agent.run_turn(line)
    return result.reply, node_calls(result)


def median(values: list[float]) -> float | None:
    return round(statistics.median(values), 2) if values else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=SESSIONS, help="NPC agents (npc-0 ..)")
    parser.add_argument("--turns", type=int, default=TURNS, help="turns each, round robin")
    parser.add_argument("--kv-budget-gb", type=float, default=KV_BUDGET_GB, help="what all node contexts may take")
    parser.add_argument("--max-tokens", type=int, default=MAX_TOKENS, help="each reply node's max_tokens")
    parser.add_argument("--cold-samples", type=int, default=COLD_SAMPLES,
                        help="NPCs whose last turn is said again: restored, cold and warm")
    parser.add_argument("--repeats", type=int, default=REPEATS, help="times each of those three (the fastest kept)")
    parser.add_argument("--write", action="store_true", help="write the results of a smaller run too")
    args = parser.parse_args()
    model = sample_model()
    load_before = os.getloadavg()
    budget_mib = args.kv_budget_gb * 1024
    backend = LlamaBackend(str(EXAMPLES), kv_budget_mib=budget_mib)
    memory_at_start = memory_mib()
    backend.load_model(model)  # before the clock
    memory_after_load = memory_mib()
    info = read_gguf(Path(model))
    sizes = {n: round(context_mib(info, backend.context_params(n)), 1) for n in (1024, 2048)}

    # which node calls restored a parked cache: the backend hands each one out once
    restored_keys: list[str] = []
    take_parked = backend.take_parked

    def noting_take(key: str) -> Any:
        found = take_parked(key)
        if found is not None:
            restored_keys.append(key)
        return found

    backend.take_parked = noting_take  # type: ignore[method-assign]

    names = [ASSETS[i % len(ASSETS)] for i in range(args.sessions)]
    assets = {name: example(name, model, args.max_tokens) for name in ASSETS}
    agents = [Agent(assets[name], backend, str(EXAMPLES), session_id=f"npc-{i}") for i, name in enumerate(names)]
    scripted = player_lines(args.sessions * args.turns, seed=22)
    lines = [[scripted[t * args.sessions + i] if names[i] == "chat.json" or (i + t) % 2 else
              _ROUTER_LINES[(i // 2 + t) % len(_ROUTER_LINES)] for t in range(args.turns)]
             for i in range(args.sessions)]
    said: list[list[dict[str, Any]]] = [[] for _ in agents]
    peak_live = 0.0
    last = args.turns - 1
    sampled = range(min(args.cold_samples, len(agents)))
    parked_before_last: dict[int, list[Any]] = {}
    started = time.perf_counter()
    try:
        with StateCalls() as calls:
            for t in range(args.turns):
                turn_started = time.perf_counter()
                for i, agent in enumerate(agents):
                    if t == last and i in sampled:  # bench only: the parked caches its last turn restores
                        prefix = f"{agent.session_id}/"
                        parked_before_last[i] = [v for k, v in backend._parked.items() if k.startswith(prefix)]
                    before = len(restored_keys)
                    t0 = time.perf_counter()
                    result = agent.run_turn(lines[i][t])
                    restored = {k.split("/", 1)[1] for k in restored_keys[before:]}
                    said[i].append({"reply": result.reply, "path": result.path, "restored": sorted(restored),
                                    "turn_s": round(time.perf_counter() - t0, 2), "nodes": node_calls(result)})
                    peak_live = max(peak_live, backend.kv_stats().live_mib)
                stats = backend.kv_stats()
                print(f"turn {t + 1}: {args.sessions} NPCs in {time.perf_counter() - turn_started:.1f} s; "
                      f"{stats.live_contexts} live ({stats.live_mib:.0f} MiB), {stats.parked} parked "
                      f"({stats.parked_mib:.1f} MiB), {stats.parks} parks, {stats.restores} restores; "
                      f"{memory_mib()}", flush=True)
            conversation_s = time.perf_counter() - started
            stats_after = backend.kv_stats()
            memory_after = memory_mib()
            parking = calls.summary()

            # The last turn of the sampled NPCs again, back to back three ways (rotating which goes first).
            comparisons = []
            for i in sampled:
                agent, nodes = agents[i], said[i][last]["restored"]
                if not nodes:
                    continue
                times: dict[str, dict[str, list[dict[str, Any]]]] = {m: {n: [] for n in nodes} for m in MODES}
                same = True
                for r in range(args.repeats):
                    for mode in MODES[r % 3:] + MODES[: r % 3]:
                        calls_now = say_again(backend, agent, lines[i][last], parked_before_last[i], mode, last)
                        same = same and calls_now[0] == said[i][last]["reply"]
                        for node in nodes:
                            times[mode][node].append(calls_now[1][node])
                for node in nodes:
                    best = {m: min(times[m][node], key=lambda c: c["prompt_ms"]) for m in MODES}
                    comparisons.append({
                        "npc": agent.session_id, "node": node, "same_reply": same, **best,
                        "restored_vs_cold": round(best["restored"]["prompt_ms"] / best["cold"]["prompt_ms"], 3),
                        "restored_vs_warm": round(best["restored"]["prompt_ms"] / best["warm"]["prompt_ms"], 3),
                    })
    finally:
        backend.close()

    ratios = [c["restored_vs_cold"] for c in comparisons]
    over_warm = [c["restored_vs_warm"] for c in comparisons]
    token_ratios = [c["restored"]["evaluated"] / c["cold"]["evaluated"] for c in comparisons]
    restored_calls = [n for turns in said for turn in turns for node, n in turn["nodes"].items()
                      if node in turn["restored"]]
    set_data = parking["set_data"]
    cold_ms = median([c["cold"]["prompt_ms"] for c in comparisons])
    summary = {
        "sessions": args.sessions, "turns": args.turns, "max_tokens": args.max_tokens,
        "assets": {name: names.count(name) for name in ASSETS},
        "model": Path(model).name, "model_loads": backend.model_loads,
        "model_file_mib": round(Path(model).stat().st_size / 2**20, 1),
        "context_mib": {"1024 tokens": sizes[1024], "2048 tokens": sizes[2048]},
        "kv_budget_mib": round(budget_mib, 1),
        "contexts_that_fit": {"chat (2048)": int(budget_mib // sizes[2048]), "router (1024)": int(budget_mib // sizes[1024])},
        "peak_live_mib": round(peak_live, 1),
        "kv_stats": {k: (round(v, 1) if isinstance(v, float) else v) for k, v in asdict(stats_after).items()},
        "memory_mib": {"at_start": memory_at_start, "after_load": memory_after_load, "after_conversation": memory_after,
                       "peak_over_load": round(memory_after["VmHWM"] - memory_after_load["VmRSS"], 1),
                       "final_over_load": round(memory_after["VmRSS"] - memory_after_load["VmRSS"], 1),
                       "budget_plus_parked": round(budget_mib + stats_after.parked_mib, 1)},
        "restored_calls_in_the_conversation": {
            "calls": len(restored_calls), "prompt_ms_median": median([n["prompt_ms"] for n in restored_calls]),
            "evaluated_median": median([n["evaluated"] for n in restored_calls])},
        "said_again": {"calls": len(comparisons), "repeats": args.repeats,
                       "prompt_ms_median": {m: median([c[m]["prompt_ms"] for c in comparisons]) for m in MODES},
                       "evaluated_median": {m: median([c[m]["evaluated"] for c in comparisons]) for m in MODES}},
        "restored_vs_cold_ms": {"median": median(ratios), "max": round(max(ratios), 3) if ratios else None,
                                "per_node": {n: median([c["restored_vs_cold"] for c in comparisons if c["node"] == n])
                                             for n in sorted({c["node"] for c in comparisons})},
                                "goal": 0.2, "met": bool(ratios) and statistics.median(ratios) <= 0.2},
        "restored_vs_cold_tokens_median": median(token_ratios),
        "restored_vs_warm_ms_median": median(over_warm),
        "set_data_ms_median": set_data["ms_median"],
        "set_data_vs_cold_read": round(set_data["ms_median"] / cold_ms, 3) if set_data["ms_median"] and cold_ms else None,
        "parking": parking,
        "said_again_same_reply": all(c["same_reply"] for c in comparisons),
        "conversation_s": round(conversation_s, 1),
        "turn_s_median": median([turn["turn_s"] for turns in said for turn in turns]),
        "load_average": {"before": [round(x, 2) for x in load_before], "after": [round(x, 2) for x in os.getloadavg()]},
    }
    print(summary)
    if args.write or (args.sessions >= SESSIONS and args.turns >= TURNS):
        write_results("npcs", {"summary": summary, "comparisons": comparisons,
                               "npcs": {agents[i].session_id: said[i] for i in range(min(len(agents), 10))}})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
