"""Simulated players on the sample model, with the network off: conversations per minute, and the
coverage after each conversation of random persona play against coverage-guided play, on the
intent router and the gate guard (a behaviour's classifier), as a table and a plot.

The sample model plays both the players and the agents (one embedded backend). The script runs
itself again under ``unshare -rn`` (a user and network namespace of its own: no interface but a
down loopback), then checks that a connection out is refused before anything runs, and records
what the refusal said.

    python bench/bench_simulated_players.py        # writes bench/results/simulated_players.json
                                                   # and bench/results/simulated_players_coverage.png
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml
from conversation import RESULTS, sample_model, write_results

from runtime.backends.llama import LlamaBackend
from runtime.resources import examples_dir
from runtime.suites.file import load_suite
from runtime.suites.simulate import SimulatedPlayer, simulate

EXAMPLES = ["intent_router.json", "gate_guard.json"]
PERSONAS = [
    {"name": "lost traveller", "description": "A tired traveller, new to town, polite and a little lost.",
     "goals": ["find somewhere to sleep", "learn the town's news"]},
    {"name": "hothead", "description": "A rough sellsword in a hurry who has no patience for guards.",
     "goals": ["get through the gate quickly"]},
]
MARKER = "PARLEY_BENCH_NETWORK_OFF"


def network_off() -> str:
    """What a connection out said (it must fail); raises when it got through."""
    try:
        socket.create_connection(("1.1.1.1", 80), timeout=3).close()
    except OSError as exc:
        return f"connect to 1.1.1.1:80 refused: {exc}"
    raise SystemExit("the network is on: run this under `unshare -rn` (or without --no-unshare)")


def suite_for(folder: Path, example: str, conversations: int, turns: int) -> Path:
    path = folder / f"{Path(example).stem}.suite.yaml"
    personas = [{**p, "max_turns": turns, "conversations": conversations} for p in PERSONAS]
    path.write_text(yaml.safe_dump({"asset": str(examples_dir() / example), "personas": personas},
                                   sort_keys=False), encoding="utf-8")
    return path


def plot(runs: dict[str, dict[str, dict]], target: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(1, len(runs), figsize=(5 * len(runs), 3.6), sharey=True)
    for ax, (example, modes) in zip(list(axes) if len(runs) > 1 else [axes], runs.items()):
        for mode, style in (("random", "--o"), ("guided", "-s")):
            curve = modes[mode]["coverage_curve"]
            ax.plot(range(len(curve)), curve, style, label=mode, markersize=4)
        ax.set_title(example)
        ax.set_xlabel("conversations")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylim(0, 100)
        ax.grid(alpha=0.3)
    (list(axes) if len(runs) > 1 else [axes])[0].set_ylabel("coverage (% of nodes and exits)")
    (list(axes) if len(runs) > 1 else [axes])[0].legend(loc="lower right")
    fig.suptitle("Simulated players on the sample model: random vs coverage-guided")
    fig.tight_layout()
    fig.savefig(target, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=4, help="per persona (2 personas)")
    parser.add_argument("--turns", type=int, default=2, help="lines per conversation")
    parser.add_argument("--no-unshare", action="store_true", help="run as is (the network must already be off)")
    parser.add_argument("--plot-only", action="store_true", help="draw the plot again from the results file")
    args = parser.parse_args()
    if args.plot_only:
        import json

        plot(json.loads((RESULTS / "simulated_players.json").read_text(encoding="utf-8"))["runs"],
             RESULTS / "simulated_players_coverage.png")
        return 0
    if not args.no_unshare and os.environ.get(MARKER) != "1":
        if shutil.which("unshare") is None:
            raise SystemExit("unshare is missing: turn the network off yourself and pass --no-unshare")
        return subprocess.call(["unshare", "-rn", sys.executable, *sys.argv], env={**os.environ, MARKER: "1"})
    refusal = network_off()
    print(refusal)
    model = sample_model()
    runs: dict[str, dict[str, dict]] = {}
    conversations = turns = 0
    seconds = 0.0
    backend = LlamaBackend()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for example in EXAMPLES:
                loaded = load_suite(suite_for(Path(tmp), example, args.conversations, args.turns))
                runs[example] = {}
                for mode in ("random", "guided"):
                    result = simulate(loaded, backend, SimulatedPlayer(backend, model), guided=mode == "guided",
                                      on_conversation=lambda c: print(f"  {c.name}: {c.lines} -> "
                                                                      f"{[t.path for t in c.turns]}", flush=True))
                    played = sum(len(c.turns) for c in result.conversations)
                    conversations += len(result.conversations)
                    turns += played
                    seconds += result.seconds
                    runs[example][mode] = {
                        "conversations": len(result.conversations), "turns": played,
                        "agent_turns": result.agent_turns,  # guided: with the lines tried and taken back
                        "seconds": round(result.seconds, 1),
                        "coverage_curve": [round(p, 1) for p in result.curve],
                        "never_taken": [f"{n}.{p}" for n, p in result.coverage.never_taken],
                        "errors": result.errors,
                        "discoveries": len(result.discoveries),
                    }
                    print(example, mode, runs[example][mode], flush=True)
    finally:
        backend.close()
    table = [{"example": example, "mode": mode, **{f"after_{n}": c for n, c in enumerate(r["coverage_curve"])}}
             for example, modes in runs.items() for mode, r in modes.items()]
    summary = {
        "network": refusal,
        "personas": len(PERSONAS), "conversations_per_persona": args.conversations, "turns_per_conversation": args.turns,
        "player_and_agent_model": Path(model).name,
        "conversations_per_minute": round(conversations / seconds * 60, 2) if seconds else None,
        "turns_per_minute": round(turns / seconds * 60, 2) if seconds else None,
        "load_average_at_end": list(os.getloadavg()),
        "runs": runs, "table": table,
    }
    write_results("simulated_players", summary)
    plot(runs, RESULTS / "simulated_players_coverage.png")
    print(summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
