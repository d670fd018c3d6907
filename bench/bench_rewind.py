"""Rewind and replay: going back to any of the last 10 turns costs at most one ordinary turn of reading.

Two example agents on the sample model, whose prompts do not trim in the span (checked and reported):
the chat example (one GenerateAndSpeak node, 14 turns) and the intent router (a classifier and three
reply nodes, 11 turns). After the conversation, for each of its last 10 turns, newest first: rewind
to before that turn and say the same line again. Per node, the tokens it read on the rewound turn are
compared with what it read on that turn the first time (the goal: at most that, issue 21) and with its
mean ordinary turn; the turn must come out bit for bit the same (the reply, and every node's prompt and
output). A second pass goes the other way, oldest first, each rewind from the turn said before it: the
cells a later turn read were cut away by then and come back from a snapshot or are read again.

    python bench/bench_rewind.py             # ~2 min: bench/results/rewind.json
    python bench/bench_rewind.py --quick     # a smoke run: 5 turns each, rewinds to the last 3
                                             # (written only with --write)
    python bench/bench_rewind.py --scenario intent_router   # one of them (the other's results stay)

``earlier_chunks_read_again`` counts tokens of chunks that calls before the rewound turn had read and
that it read again: the cache kept a turn's cells only as that turn's chunk computed them, so a chunk
the rewound turn keeps part of (its line began like the line before) is read whole again once a later
turn has cut it away.

Rewinding across a trim or a new summary (snapshots) is bench_snapshots.py.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from conversation import (
    RESULTS,
    ROOT,
    StateCalls,
    fingerprint,
    first_difference,
    player_lines,
    sample_model,
    write_results,
)

from runtime.agent import Agent
from runtime.asset.file import load_asset
from runtime.backends.llama import LlamaBackend
from runtime.models.journal import DecodeJournal

EXAMPLES = ROOT / "resources" / "examples"
# turns: the last 10 of them do not trim (the router's reply nodes trim on turn 12 of this script)
SCENARIOS = {"chat": (EXAMPLES / "chat.json", 14), "intent_router": (EXAMPLES / "intent_router.json", 11)}
REWOUND = 10


def reading(result: Any) -> dict[str, int]:
    """Tokens each node read on a turn (a node called twice counts both calls)."""
    out: dict[str, int] = {}
    for n in result.diagnostics.nodes:
        if n.tokens.prompt:
            out[n.node] = out.get(n.node, 0) + n.tokens.evaluated
    return out


def rebuilt(before: DecodeJournal | None, after: DecodeJournal, kept: int) -> int:
    """Tokens of chunks that calls before the turn had read, read again on it (the cache no longer held
    them as first read, e.g. a chunk the turn keeps only part of)."""
    if before is None:
        return 0
    earlier = set(zip(before.starts(), before.chunks))
    return sum(len(c.tokens) for start, c in zip(after.starts(), after.chunks)
               if start >= kept and not c.singles and any(s == start and e.tokens == c.tokens for s, e in earlier))


def trims(result: Any) -> list[str]:
    return [n.node for n in result.diagnostics.nodes if n.trim is not None and n.trim.triggered]


def scenario(asset_path: Path, turns: int, rewound: int) -> dict[str, Any]:
    asset = load_asset(asset_path)
    lines = player_lines(turns, seed=5)
    backend = LlamaBackend(str(asset_path.parent))
    agent = Agent(asset, backend, str(asset_path.parent))
    backend.load_model(asset.default_model)  # before the clock
    try:
        original, original_s = [], []
        for line in lines:
            t0 = time.perf_counter()
            original.append(agent.run_turn(line))
            original_s.append(time.perf_counter() - t0)
        leaf = agent.tree.current
        trimmed = {r.turn: trims(r) for r in original if trims(r)}
        # a node's ordinary turn: any call after its first, when nothing trimmed
        ordinary: dict[str, list[int]] = {}
        seen: set[str] = set()
        for r in original:
            for node, read in reading(r).items():
                if node in seen and not trims(r):
                    ordinary.setdefault(node, []).append(read)
                seen.add(node)
        mean_ordinary = {node: statistics.mean(reads) for node, reads in ordinary.items()}
        first_rewound = turns - rewound

        def rewind_and_say(index: int) -> dict[str, Any]:
            agent.rewind(index)
            journals = dict(agent.journals)  # how each node's cache was read before the turn
            t0 = time.perf_counter()
            again = agent.run_turn(lines[index])
            seconds = time.perf_counter() - t0
            before, now = reading(original[index]), reading(again)
            kept = {n.node: n.tokens.reused for n in again.diagnostics.nodes if n.tokens.prompt}
            nodes = {node: {"read": read, "read_first_time": before.get(node),
                            "mean_ordinary_turn": round(mean_ordinary[node], 1) if node in mean_ordinary else None,
                            "earlier_chunks_read_again": rebuilt(journals.get(node), agent.journals[node], kept[node]),
                            "at_most_the_first_time": before.get(node) is not None and read <= before[node]}
                     for node, read in now.items()}
            difference = first_difference(fingerprint(again), fingerprint(original[index]))
            return {"turn": index + 1, "identical": not difference, "difference": difference, "nodes": nodes,
                    "turn_s": round(seconds, 2), "turn_s_first_time": round(original_s[index], 2)}

        with StateCalls() as calls:  # set_data calls: the snapshots restored
            newest_first = [rewind_and_say(i) for i in reversed(range(first_rewound, turns))]
            restored_newest_first = len(calls.calls["set_data"])
            agent.select_turn(leaf)
            oldest_first = [rewind_and_say(i) for i in range(first_rewound, turns)]
            restored_oldest_first = len(calls.calls["set_data"]) - restored_newest_first
        snapshots = {"kept": len(backend.snapshots), "bytes": backend.snapshots.bytes,
                     "taken": backend.snapshots.taken, "set_data_calls": len(calls.calls["set_data"])}
    finally:
        backend.close()

    def verdict(rows: list[dict[str, Any]]) -> dict[str, Any]:
        calls = [(r["turn"], node, n) for r in rows for node, n in r["nodes"].items()]
        return {
            "identical": sum(r["identical"] for r in rows), "of": len(rows),
            "each_node_at_most_its_first_reading": all(n["at_most_the_first_time"] for _, _, n in calls),
            "over_the_first_reading": [{"turn": t, "node": node, **n} for t, node, n in calls
                                       if not n["at_most_the_first_time"]],
            "earlier_chunks_read_again": sum(n["earlier_chunks_read_again"] for _, _, n in calls),
            "read_mean": round(statistics.mean(n["read"] for _, _, n in calls), 1) if calls else None,
            "read_first_time_mean": round(statistics.mean(n["read_first_time"] or 0 for _, _, n in calls), 1)
            if calls else None,
            "turn_s_mean": round(statistics.mean(r["turn_s"] for r in rows), 2),
            "turn_s_first_time_mean": round(statistics.mean(r["turn_s_first_time"] for r in rows), 2),
        }

    rewound_span = range(first_rewound, turns)
    summary = {
        "asset": str(asset_path.relative_to(ROOT)), "turns": turns, "rewound": f"turns {first_rewound + 1} to {turns}",
        "trims": {str(t + 1): nodes for t, nodes in trimmed.items()},
        "trim_in_the_rewound_span": any(t in rewound_span for t in trimmed),
        "mean_ordinary_turn_read": {node: round(v, 1) for node, v in mean_ordinary.items()},
        "newest_first": verdict(newest_first), "oldest_first": verdict(oldest_first),
        "snapshots_restored": {"newest_first": restored_newest_first, "oldest_first": restored_oldest_first},
        "snapshots": snapshots,
    }
    summary["pass"] = (not summary["trim_in_the_rewound_span"]
                       and all(summary[k]["identical"] == summary[k]["of"]
                               and summary[k]["each_node_at_most_its_first_reading"]
                               for k in ("newest_first", "oldest_first")))
    return {"summary": summary, "newest_first": newest_first, "oldest_first": oldest_first}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 turns, the last 3 rewound")
    parser.add_argument("--write", action="store_true", help="write the results of a quick run too")
    parser.add_argument("--scenario", choices=list(SCENARIOS), help="run only this one (kept beside the others' results)")
    args = parser.parse_args()
    sample_model()  # fetched if missing
    started = time.perf_counter()
    plan = {name: (path, 5, 3) if args.quick else (path, turns, REWOUND) for name, (path, turns) in SCENARIOS.items()
            if args.scenario in (None, name)}
    results = {}
    for name, (path, turns, rewound) in plan.items():
        results[name] = scenario(path, turns, rewound)
        print(name, results[name]["summary"], flush=True)
    ok = all(r["summary"]["pass"] for r in results.values())
    print("pass" if ok else "FAIL")
    if not args.quick or args.write:
        earlier = RESULTS / "rewind.json"
        if args.scenario and earlier.exists():  # the other scenarios' last results stay
            kept = json.loads(earlier.read_text(encoding="utf-8")).get("scenarios", {})
            results = {**{k: v for k, v in kept.items() if k in SCENARIOS}, **results}
        write_results("rewind", {"quick": args.quick, "scenarios": results,
                                 "pass": all(r["summary"]["pass"] for r in results.values()),
                                 "wall_s": round(time.perf_counter() - started, 1)})
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
