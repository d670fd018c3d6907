"""The minimap on a 5,000-node asset in the real main window.

Writes bench/results/minimap.json: the time to rebuild the minimap's picture of the nodes (once per
step of the event loop that changed the asset), the time of the minimap's own paint in each frame
while the view pans (the picture and the view's rectangle), how many rebuilds a move of every node in one undo
step makes (one), and what the minimap adds to a frame of panning and of zooming the canvas: the
same frames with it shown and hidden, taken in turns. Renders offscreen (raster), as the tests do;
the machine's load is recorded beside the numbers.

    python bench/bench_minimap.py [--nodes 5000] [--frames 60] [--rounds 4]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("QT_PREFERRED_BINDING", "PySide6")

from bench_open_large import large_asset, summary

from runtime.asset.file import save_asset

GOALS = {
    "rebuild_ms_median": 50.0,  # after an edit, once
    "paint_ms_p95": 4.0,  # the minimap's own paint in a frame while the view moves: a small part of 16 ms
    # A frame of the canvas itself takes about 120 ms at 5,000 nodes on this machine (the scene, not the
    # minimap), and runs minutes apart differ by more than 2 ms: what showing the minimap adds to a
    # frame is held to the noise, 5 % of the frame with it hidden; its own share is paint_ms.
    "added_to_pan_frame_fraction": 0.05,
    "added_to_zoom_frame_fraction": 0.05,
}


def _frames(app, viewer, frames: int, step, repaint) -> list[float]:
    times = []
    for i in range(frames):
        started = time.perf_counter()
        step(i)
        repaint()
        app.processEvents()
        times.append((time.perf_counter() - started) * 1000)
    return times


def compare(app, window, frames: int, rounds: int, step) -> dict:
    """Frames of ``step`` with the minimap shown and hidden, in turns (the same view each round)."""
    viewer, minimap = window.canvas.viewer, window.minimap
    shown: list[float] = []
    hidden: list[float] = []
    start = tuple(viewer.scene_rect())
    for _round in range(rounds):
        for on, into in ((True, shown), (False, hidden)):
            minimap.set_enabled(on)
            viewer.set_scene_rect(list(start))
            app.processEvents()
            assert minimap.isVisible() == on
            into.extend(_frames(app, viewer, frames, step, viewer.repaint))
    minimap.set_enabled(True)
    viewer.set_scene_rect(list(start))
    app.processEvents()
    on, off = summary(shown), summary(hidden)
    return {"minimap_shown": on, "minimap_hidden": off,
            "added_ms_mean": round(on["mean_ms"] - off["mean_ms"], 2),
            "added_ms_median": round(on["median_ms"] - off["median_ms"], 2),
            "added_fraction": round(on["mean_ms"] / off["mean_ms"] - 1.0, 3)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--frames", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "minimap.json"))
    args = parser.parse_args()
    load_before = os.getloadavg()

    settings_dir = tempfile.mkdtemp(prefix="parley-bench-")
    os.environ["PARLEY_STUDIO_SETTINGS"] = str(Path(settings_dir) / "settings.ini")
    os.environ["PARLEY_STUDIO_RECOVERY"] = str(Path(settings_dir) / "recovery")
    path = Path(settings_dir) / f"large_{args.nodes}.json"
    save_asset(large_asset(args.nodes), path)

    from PySide6.QtWidgets import QApplication

    from editor.model.commands import MoveCommand
    from editor.widgets.theme import apply_theme
    from editor.window.main_window import MainWindow

    app = QApplication.instance() or QApplication([])
    apply_theme(app)
    window = MainWindow()
    window.resize(1600, 1000)
    window.show()
    app.processEvents()
    assert window.open_path(str(path))
    window.canvas.finish_building()
    for _ in range(5):
        app.processEvents()
    canvas, minimap, viewer, doc = window.canvas, window.minimap, window.canvas.viewer, window.document
    assert minimap.isVisible() and len(doc.asset.nodes) == args.nodes

    # --- rebuilding the picture
    rebuild_ms = []
    for _ in range(15):
        started = time.perf_counter()
        minimap.rebuild_now()
        rebuild_ms.append((time.perf_counter() - started) * 1000)

    # --- one step that moves every node: one rebuild
    before = minimap.rebuilds
    moves = {n.id: (n.position, (n.position[0] + 40.0, n.position[1])) for n in doc.asset.nodes}
    doc.push(MoveCommand(doc, moves, "Move every node"))
    for _ in range(5):
        app.processEvents()
    rebuilds_for_the_move = minimap.rebuilds - before
    doc.undo_stack.undo()
    for _ in range(5):
        app.processEvents()

    # --- the minimap's own paint in real frames while the view moves (the view as it opened: legible,
    # from START): its paintEvent timed inside each frame that pans
    paint_ms: list[float] = []
    own_paint = minimap.paintEvent

    def timed_paint(event) -> None:
        started = time.perf_counter()
        own_paint(event)
        paint_ms.append((time.perf_counter() - started) * 1000)

    minimap.paintEvent = timed_paint
    paint_frames = 200
    for i in range(paint_frames):
        direction = 1 if (i // 50) % 2 == 0 else -1
        viewer._set_viewer_pan(30 * direction, 12 * direction)
        app.processEvents()
    minimap.paintEvent = own_paint
    painted_per_frame = len(paint_ms) / paint_frames

    def pan(i: int) -> None:
        direction = 1 if (i // 30) % 2 == 0 else -1
        viewer._set_viewer_pan(40 * direction, 16 * direction)  # what a middle-drag does

    def zoom(i: int) -> None:
        viewer._set_viewer_zoom(120 if i % 2 == 0 else -120, 0.0)  # a wheel notch in, then out

    pan_as_opened = compare(app, window, args.frames, args.rounds, pan)
    zoom_as_opened = compare(app, window, args.frames, args.rounds, zoom)
    canvas.frame_selection()  # the whole graph in view: the most items for the canvas to paint
    app.processEvents()
    pan_whole = compare(app, window, max(10, args.frames // 4), 2, pan)
    rebuild = summary(rebuild_ms)
    paint = summary(paint_ms)

    result = {
        "nodes": args.nodes,
        "window": [window.width(), window.height()],
        "minimap_px": [minimap.width(), minimap.height()],
        "rebuild_ms": rebuild,
        "paint_ms": paint,
        "minimap_paints_per_panned_frame": round(painted_per_frame, 2),
        "rebuilds_after_moving_every_node_in_one_step": rebuilds_for_the_move,
        "pan_frames_as_opened": pan_as_opened,
        "zoom_frames_as_opened": zoom_as_opened,
        "pan_frames_whole_graph": pan_whole,
        "goals": GOALS,
        "meets_goals": {
            "rebuild_ms_median": rebuild["median_ms"] < GOALS["rebuild_ms_median"],
            "paint_ms_p95": paint["p95_ms"] < GOALS["paint_ms_p95"],
            "added_to_pan_frame_fraction": pan_as_opened["added_fraction"] < GOALS["added_to_pan_frame_fraction"],
            "added_to_zoom_frame_fraction": zoom_as_opened["added_fraction"] < GOALS["added_to_zoom_frame_fraction"],
            "one_rebuild_per_step": rebuilds_for_the_move == 1,
            "repainted_with_every_pan": painted_per_frame >= 1.0,
        },
        "load_average_before": [round(v, 2) for v in load_before],
        "load_average_after": [round(v, 2) for v in os.getloadavg()],
        "renderer": os.environ.get("QT_QPA_PLATFORM", ""),
        "python": sys.version.split()[0],
    }
    window.document.undo_stack.setClean()
    window.close()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0 if all(result["meets_goals"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
