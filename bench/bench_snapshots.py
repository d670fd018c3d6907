"""Snapshots: rewinding across a trim or a new summary, with and without cache snapshots.

The long-conversation example (Generate with a 512-token context, so a 448-token prompt budget that
trims, and a Summarize node that folds old turns past 200 tokens) runs a scripted conversation twice
on the sample model: on ``LlamaBackend()`` (snapshots within 256 MiB) and on
``LlamaBackend(snapshot_mib=0)`` (none: what a cut threw away is read again), the two taking turns.
Then, newest first, each agent goes back to before every turn after which a trim or a new summary
rewrote the reply node's cache, and says that turn's line again. Reported:

- that both runs say the same, and every rewound turn is bit for bit the turn it was (the reply, and
  every node's prompt and output), with snapshots and without;
- per rewound turn and node, the tokens read and the turn's seconds, with snapshots and without;
- the snapshots: how many are kept, their bytes (and bytes per cached token), how many were taken
  and restored, and the milliseconds ``llama_state_seq_get_data`` (take) and ``set_data`` (restore)
  took, timed through the backend.

    python bench/bench_snapshots.py            # 12 turns, ~3 min: bench/results/snapshots.json
    python bench/bench_snapshots.py --turns 6  # a smoke run (written only with --write)
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from conversation import (
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

ASSET = ROOT / "resources" / "examples" / "long_conversation.json"
TURNS = 12
NODE = "reply"


def rewrites(result: Any, summary_written_before: bool) -> list[str]:
    """What rewrote the reply node's cache on this turn: a trim, or a summary written the turn before."""
    nodes = {n.node: n for n in result.diagnostics.nodes}
    out = []
    if nodes[NODE].trim is not None and nodes[NODE].trim.triggered:
        out.append("trim")
    if summary_written_before:
        out.append("new summary")
    return out


def reading(result: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for n in result.diagnostics.nodes:
        if n.tokens.prompt:
            out[n.node] = out.get(n.node, 0) + n.tokens.evaluated
    return out


class Conversation:
    """One backend's agent: the scripted turns, then the rewinds."""

    def __init__(self, snapshot_mib: float | None) -> None:
        self.backend = LlamaBackend(str(ASSET.parent)) if snapshot_mib is None else \
            LlamaBackend(str(ASSET.parent), snapshot_mib=snapshot_mib)
        asset = load_asset(ASSET)
        self.agent = Agent(asset, self.backend, str(ASSET.parent))
        self.backend.load_model(asset.default_model)  # before the clock
        self.original: list[Any] = []
        self.turns: list[dict[str, Any]] = []
        self.rewinds: list[dict[str, Any]] = []
        self._summary_before = False

    def say(self, line: str) -> None:
        t0 = time.perf_counter()
        result = self.agent.run_turn(line)
        seconds = time.perf_counter() - t0
        self.original.append(result)
        nodes = {n.node: n for n in result.diagnostics.nodes}
        self.turns.append({"turn": len(self.turns) + 1, "rewritten_by": rewrites(result, self._summary_before),
                           "summary_written": nodes["summarize"].summary is not None,
                           "prompt": nodes[NODE].tokens.prompt, "read": reading(result), "turn_s": round(seconds, 2)})
        self._summary_before = self.turns[-1]["summary_written"]

    def say_again(self, index: int, line: str, calls: StateCalls) -> None:
        restored = len(calls.calls["set_data"])
        self.agent.rewind(index)
        t0 = time.perf_counter()
        again = self.agent.run_turn(line)
        seconds = time.perf_counter() - t0
        difference = first_difference(fingerprint(again), fingerprint(self.original[index]))
        self.rewinds.append({"turn": index + 1, "identical": not difference, "difference": difference,
                             "read": reading(again), "read_first_time": reading(self.original[index]),
                             "turn_s": round(seconds, 2),
                             "snapshots_restored": len(calls.calls["set_data"]) - restored})

    def snapshot_state(self) -> dict[str, Any]:
        snapshots = self.backend.snapshots
        cells = sum(s.journal.length for s in snapshots._kept.values())  # bench only: what they hold
        return {"kept": len(snapshots), "bytes": snapshots.bytes,
                "bytes_per_token": round(snapshots.bytes / cells) if cells else None,
                "taken": snapshots.taken, "restored": snapshots.restored,
                "budget_mib": round(snapshots.budget / 2**20)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=TURNS)
    parser.add_argument("--write", action="store_true", help="write the results of a shorter run too")
    args = parser.parse_args()
    sample_model()  # fetched if missing
    lines = player_lines(args.turns, seed=6)
    started = time.perf_counter()
    runs = {"snapshots": Conversation(None), "no_snapshots": Conversation(0)}
    names = list(runs)
    # The two take turns (the order swapping every turn), so a busy moment of the machine falls on both.
    # Only the backend with snapshots calls get_data / set_data (the other's budget holds none).
    try:
        with StateCalls() as calls:
            for i, line in enumerate(lines):
                for name in names[i % 2:] + names[: i % 2]:
                    runs[name].say(line)
                print(f"turn {i + 1}: " + "; ".join(f"{n} {runs[n].turns[-1]}" for n in names), flush=True)
            after_the_conversation = runs["snapshots"].snapshot_state()
            taken_forward = len(calls.calls["get_data"])
            rewritten = [r["turn"] - 1 for r in runs["snapshots"].turns if r["rewritten_by"]]
            # every turn after which the cache was rewritten: going back to it crosses that rewrite
            targets = [i for i in reversed(range(1, len(lines))) if any(j > i for j in rewritten)]
            for k, i in enumerate(targets):
                for name in names[k % 2:] + names[: k % 2]:
                    runs[name].say_again(i, lines[i], calls)
                print(f"rewound to turn {i + 1}: " + "; ".join(f"{n} {runs[n].rewinds[-1]}" for n in names), flush=True)
        with_, without = runs["snapshots"], runs["no_snapshots"]
        state = {**with_.snapshot_state(), "set_data_calls": len(calls.calls["set_data"]),
                 "taken_by_the_rewinds": len(calls.calls["get_data"]) - taken_forward}
        same_conversation = [fingerprint(r) for r in with_.original] == [fingerprint(r) for r in without.original]
    finally:
        for run in runs.values():
            run.backend.close()
    compared = []
    for a, b in zip(with_.rewinds, without.rewinds):
        compared.append({"turn": a["turn"], "identical_with": a["identical"], "identical_without": b["identical"],
                         "read_with": a["read"], "read_without": b["read"], "read_first_time": a["read_first_time"],
                         "turn_s_with": a["turn_s"], "turn_s_without": b["turn_s"],
                         "snapshots_restored": a["snapshots_restored"]})

    def mean(values: list[float], digits: int) -> float | None:
        return round(statistics.mean(values), digits) if values else None

    summary = {
        "asset": str(ASSET.relative_to(ROOT)), "turns": args.turns,
        "rewrites": {str(r["turn"]): r["rewritten_by"] for r in with_.turns if r["rewritten_by"]},
        "rewinds": len(compared),
        "same_conversation_with_and_without_snapshots": same_conversation,
        "identical_with_snapshots": sum(c["identical_with"] for c in compared),
        "identical_without_snapshots": sum(c["identical_without"] for c in compared),
        "reply_read_with_mean": mean([c["read_with"].get(NODE, 0) for c in compared], 1),
        "reply_read_without_mean": mean([c["read_without"].get(NODE, 0) for c in compared], 1),
        "turn_s_with_mean": mean([c["turn_s_with"] for c in compared], 2),
        "turn_s_without_mean": mean([c["turn_s_without"] for c in compared], 2),
        "snapshots_after_the_conversation": after_the_conversation,
        "snapshots": state,
        "state_calls": calls.summary(),
        "wall_s": round(time.perf_counter() - started, 1),
    }
    summary["pass"] = bool(compared) and same_conversation and \
        summary["identical_with_snapshots"] == summary["identical_without_snapshots"] == len(compared)
    print(summary)
    if args.turns == TURNS or args.write:
        write_results("snapshots", {"summary": summary, "rewinds": compared,
                                    "turns": {"snapshots": with_.turns, "no_snapshots": without.turns}})
    return 0 if summary["pass"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
