"""Validation, opening and one edit on large graphs: is each linear in the graph's size?

Writes bench/results/validation.json. For each size (500, 5,000 and 50,000 nodes by default) and
each shape it measures:

- ``validate_s``: ``validate_asset`` on the asset, with its model files looked up, as the editor
  and ``parley validate`` run it (the median of ``--runs`` runs);
- ``open_s``: ``MainWindow.open_path`` to a canvas that has painted and takes input (load,
  validation, canvas build, Properties, first paint), as bench/bench_open_large.py measures;
- ``canvas_complete_s``: until every node is on the canvas (above 1,000 nodes the canvas draws the
  nodes nearest the start first and the rest in slices while the window already takes input), and
  ``longest_event_loop_step_s``, the longest the window was busy meanwhile;
- ``edit_s``: one edit in that window (a node's title changed through the undo stack, which
  revalidates and shows the problems), the median of ``--edits`` edits, the first of them right
  after the last node is drawn; ``edit_max_s`` the slowest of them, and ``every_edit_under_goal``
  whether each one took less than the goal (50 ms).

Shapes: ``chain`` is Generate nodes one after another (each exit to the next, the last to END);
``branching`` is bench_open_large's graph of every node type, intent branches and loops back.
Goals (issue 14): a 5,000-node asset opens in under 3 s and an edit revalidates in under 50 ms:
every edit, not only the median (``worst_edit_s_at_5000``, ``every_edit_at_5000_under_goal``).
Each shape and size runs in a child process stopped after ``--limit`` seconds (what it measured
by then is kept, with a note), so the bench ends in bounded time however slow a step is.

    python bench/bench_validation.py [--sizes 500 5000 50000] [--shapes chain branching] [--limit 300] [--no-editor]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("QT_PREFERRED_BINDING", "PySide6")

from bench_open_large import large_asset

from runtime.asset.file import load_asset, save_asset
from runtime.asset.model import Asset, new_node
from runtime.asset.validation import ModelFiles, validate_asset

GOAL_OPEN_S = 3.0  # at 5,000 nodes
GOAL_EDIT_S = 0.050
MODEL = "SmolLM2-135M-Instruct.Q4_1.gguf"


def chain_asset(count: int) -> Asset:
    """Generate nodes in one line, each exit to the next; the last ends the turn."""
    nodes = [
        new_node("Generate", f"n{i}", default_exit=f"n{i + 1}" if i + 1 < count else "",
                 system_prompt="You are a guard. Answer briefly.", context_size=2048, max_tokens=128,
                 position=((i % 25) * 280.0, (i // 25) * 220.0))
        for i in range(count)
    ]
    return Asset(name=f"{count}-node chain", default_model=MODEL, start_node="n0", nodes=nodes)


SHAPES = {"chain": chain_asset, "branching": large_asset}


def time_validation(path: Path, runs: int) -> tuple[float, int]:
    asset = load_asset(path)
    times, problems = [], 0
    for _ in range(runs):
        started = time.perf_counter()
        problems = len(validate_asset(asset, str(path), asset_dir=path.parent, models=ModelFiles(path.parent)))
        times.append(time.perf_counter() - started)
    return statistics.median(times), problems


def time_editor(app, path: Path, edits: int) -> dict:
    from editor.model.commands import set_node_field
    from editor.window.main_window import MainWindow

    window = MainWindow()
    window.resize(1600, 1000)
    window.show()
    app.processEvents()
    started = time.perf_counter()
    assert window.open_path(str(path))
    app.processEvents()
    window.canvas.viewer.viewport().repaint()  # the first frame a person sees
    opened = time.perf_counter() - started
    # A large graph is drawn in slices after it opens (editor.canvas: PROGRESSIVE_ABOVE): the
    # window takes input meanwhile; the edits below are timed once every node is drawn.
    longest_slice = 0.0
    while window.canvas.building:
        slice_started = time.perf_counter()
        app.processEvents()
        longest_slice = max(longest_slice, time.perf_counter() - slice_started)
    drawn = time.perf_counter() - started

    doc = window.document
    node_id = doc.asset.nodes[len(doc.asset.nodes) // 2].id
    times = []
    for i in range(edits):
        started = time.perf_counter()
        doc.push(set_node_field(doc, node_id, "title", f"edited {i}"))
        app.processEvents()
        times.append(time.perf_counter() - started)
    validate_only = []
    for _ in range(edits):
        started = time.perf_counter()
        validate_asset(doc.asset, doc.path, asset_dir=doc.asset_dir, models=ModelFiles(doc.asset_dir))
        validate_only.append(time.perf_counter() - started)
    doc.undo_stack.setClean()
    window.close()
    window.deleteLater()
    app.processEvents()
    return {"open_s": round(opened, 3), "canvas_complete_s": round(drawn, 3),
            "longest_event_loop_step_s": round(longest_slice, 4), "edit_s": round(statistics.median(times), 4),
            "edits": len(times), "edit_max_s": round(max(times), 4),
            "every_edit_under_goal": max(times) < GOAL_EDIT_S,
            "edit_validation_s": round(statistics.median(validate_only), 4)}


def measure_one(args: argparse.Namespace) -> int:
    """One shape and size in this process: print its row as JSON (the parent bounds its time)."""
    work = Path(tempfile.mkdtemp(prefix="parley-bench-"))
    os.environ["PARLEY_STUDIO_SETTINGS"] = str(work / "settings.ini")
    os.environ["PARLEY_STUDIO_RECOVERY"] = str(work / "recovery")
    shape, size = args.one[0], int(args.one[1])
    path = work / f"{shape}_{size}.json"
    save_asset(SHAPES[shape](size), path)
    validated, problems = time_validation(path, args.runs)
    row: dict = {"shape": shape, "nodes": size, "validate_s": round(validated, 4), "problems": problems}
    print(json.dumps(row), flush=True)  # the parent keeps this much if the editor runs out of time
    if not args.no_editor:
        from PySide6.QtWidgets import QApplication

        from editor.widgets.theme import apply_theme

        app = QApplication.instance() or QApplication([])
        apply_theme(app)
        row.update(time_editor(app, path, args.edits))
        print(json.dumps(row), flush=True)
    return 0


def run_bounded(args: argparse.Namespace, shape: str, size: int) -> dict:
    """``measure_one`` in a child process, stopped after ``--limit`` seconds."""
    command = [sys.executable, __file__, "--one", shape, str(size), "--runs", str(args.runs if size < 50_000 else 1),
               "--edits", str(args.edits)] + (["--no-editor"] if args.no_editor else [])
    started = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=args.limit, check=False)
        out, note = done.stdout, "" if done.returncode == 0 else f"failed (exit {done.returncode}): {done.stderr[-300:]}"
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        note = f"stopped after {args.limit:.0f} s (--limit)"
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    row = rows[-1] if rows else {"shape": shape, "nodes": size}
    if note:
        row["note"] = note + ("" if rows else "; validation did not finish")
    row["wall_s"] = round(time.perf_counter() - started, 1)
    return row


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[500, 5000, 50000])
    parser.add_argument("--shapes", nargs="+", choices=sorted(SHAPES), default=["chain", "branching"])
    parser.add_argument("--runs", type=int, default=3, help="validation runs per graph (median)")
    parser.add_argument("--edits", type=int, default=20, help="edits per graph (median and slowest)")
    parser.add_argument("--limit", type=float, default=300.0,
                        help="seconds one shape and size may take (validation and editor); then it is stopped")
    parser.add_argument("--no-editor", action="store_true", help="measure validation only")
    parser.add_argument("--one", nargs=2, metavar=("SHAPE", "SIZE"), help=argparse.SUPPRESS)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "validation.json"))
    args = parser.parse_args()
    if args.one:
        return measure_one(args)

    rows = []
    for shape in args.shapes:
        for size in args.sizes:
            row = run_bounded(args, shape, size)
            rows.append(row)
            print(json.dumps(row), flush=True)

    def at(size: int, key: str) -> list[float]:
        return [r[key] for r in rows if r["nodes"] == size and key in r]

    worst_edit = max(at(5000, "edit_max_s"), default=None)
    every_edit = worst_edit is not None and worst_edit < GOAL_EDIT_S
    result = {
        "rows": rows,
        "goals": {"open_s_at_5000": GOAL_OPEN_S, "edit_s_at_5000": GOAL_EDIT_S},
        "worst_edit_s_at_5000": worst_edit,
        "every_edit_at_5000_under_goal": every_edit,
        "meets_goals": bool(at(5000, "open_s")) and max(at(5000, "open_s")) < GOAL_OPEN_S and every_edit,
        "limit_s": args.limit,
        "renderer": os.environ.get("QT_QPA_PLATFORM", ""),
        "python": sys.version.split()[0],
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    if worst_edit is not None:
        print(f"worst edit at 5,000 nodes: {worst_edit * 1000:.1f} ms; every edit under "
              f"{GOAL_EDIT_S * 1000:.0f} ms: {'yes' if every_edit else 'NO'}", flush=True)
    return 0 if result["meets_goals"] or 5000 not in args.sizes else 1


if __name__ == "__main__":
    sys.exit(main())
