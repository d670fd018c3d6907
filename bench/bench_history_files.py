"""History files with many alternatives: the file's size, and the time to save and to load it.

One conversation whose second turn was regenerated N times (every alternative kept in the tree, as
the designer's loop keeps them). Issue 20 measured 100,000 alternatives at 23 s to load and 35 s to
save (600 MB) with version 2 files, which wrote the current branch twice and pretty-printed.

    python bench/bench_history_files.py            # writes bench/results/history_files.json
    python bench/bench_history_files.py --alternatives 10000
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from conversation import write_results

from runtime.dialogue import dialog_file
from runtime.dialogue.history import DialogHistory, Reply, SavedDialog, Summary, Turn
from runtime.dialogue.tree import AgentState, ConversationTree


def conversation(alternatives: int) -> SavedDialog:
    variables = {"mood": "calm", "gold": 12, "name": "Mira"}
    tree = ConversationTree(AgentState(variables=variables))
    first = tree.add(None, Turn("hello", [Reply("npc", "hi there")]), AgentState((), {"npc": 0}, variables, {}))
    summary = Summary("They met at the inn.", 0, 1, "sum")
    last = None
    for i in range(alternatives):
        reply = Reply("npc", f"alternative reply number {i} " + "words " * 20)
        last = tree.add(first, Turn("what now?", [reply]), AgentState((summary,), {"npc": 1, "sum": 1}, variables, {}))
    tree.select(last)
    return SavedDialog(DialogHistory(tree.turns(), [summary]), {"npc": 1, "sum": 1}, dict(variables), {}, 0, tree)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--alternatives", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each step; the fastest is reported")
    args = parser.parse_args()
    saved = conversation(args.alternatives)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "history.json")
        saves, loads = [], []
        for _ in range(args.repeat):
            started = time.perf_counter()
            dialog_file.save_history(saved, path)
            saves.append(time.perf_counter() - started)
            started = time.perf_counter()
            loaded = dialog_file.load_history(path)
            loads.append(time.perf_counter() - started)
        size = os.path.getsize(path)
    assert loaded == saved, "the history loads back the same"
    summary = {
        "alternatives": args.alternatives, "file_mb": round(size / 1e6, 1),
        "save_s": round(min(saves), 2), "load_s": round(min(loads), 2),
        "readable": size <= dialog_file.MAX_HISTORY_BYTES, "format_version": dialog_file.HISTORY_VERSION,
    }
    print(summary)
    write_results("history_files", {"summary": summary, "save_s": [round(s, 3) for s in saves],
                                    "load_s": [round(s, 3) for s in loads]})


if __name__ == "__main__":
    main()
