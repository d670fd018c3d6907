"""A 50 MB system prompt in the editor: open time, one edit and peak memory (issue 14 found 21 s
and 2.2 GB). Writes bench/results/huge_text.json.

The asset is the chat example's shape, one Generate and Speak node whose system prompt is
``--mb`` megabytes of prose. ``open_s`` is ``MainWindow.open_path`` to a painted canvas, as
bench_validation measures it; ``select_s`` selects the node (the Properties dock shows the prompt: past
``LARGE_TEXT_CHARS`` its start, read-only, with an *Edit Full Text* button); ``edit_s`` is one title
edit (revalidation and the docks) with the node selected; ``prompt_edit_s`` changes the prompt itself
through the dock's editor (one character more, then undone; the whole text is checked each time);
``full_text_dialog_s`` (with ``--full-dialog``) opens the whole prompt in the dialog;
``peak_rss_mb`` is the process's peak resident memory, less what it was before opening.

    python bench/bench_huge_text.py [--mb 50] [--full-dialog]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("QT_PREFERRED_BINDING", "PySide6")

from runtime.asset.file import save_asset
from runtime.asset.model import Asset, new_node

MODEL = "SmolLM2-135M-Instruct.Q4_1.gguf"
GOAL_OPEN_S = 3.0
GOAL_SELECT_S = 1.0


def huge_asset(megabytes: float) -> Asset:
    sentence = "You are Mira, the innkeeper of the Gilded Goose; answer guests warmly and briefly. "
    prompt = sentence * int(megabytes * 2**20 / len(sentence))
    node = new_node("GenerateAndSpeak", "reply", system_prompt=prompt, context_size=2048, max_tokens=96)
    return Asset(name="huge prompt", default_model=MODEL, start_node="reply", nodes=[node])


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=float, default=50.0)
    parser.add_argument("--full-dialog", action="store_true",
                        help="also time opening the whole prompt in the Edit Full Text dialog (slow: Qt lays out one long paragraph)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "huge_text.json"))
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="parley-bench-"))
    os.environ["PARLEY_STUDIO_SETTINGS"] = str(work / "settings.ini")
    os.environ["PARLEY_STUDIO_RECOVERY"] = str(work / "recovery")
    path = work / "huge.json"
    save_asset(huge_asset(args.mb), path)

    from PySide6.QtWidgets import QApplication

    from editor.model.commands import set_node_field
    from editor.widgets.theme import apply_theme
    from editor.window.main_window import MainWindow

    app = QApplication.instance() or QApplication([])
    apply_theme(app)
    window = MainWindow()
    window.resize(1600, 1000)
    window.show()
    app.processEvents()
    before = peak_mb()
    started = time.perf_counter()
    assert window.open_path(str(path))
    app.processEvents()
    window.canvas.viewer.viewport().repaint()
    opened = time.perf_counter() - started
    doc = window.document
    started = time.perf_counter()
    window.canvas.select(["reply"])  # the Properties dock shows the prompt
    app.processEvents()
    selected = time.perf_counter() - started
    selected_peak = peak_mb()
    started = time.perf_counter()
    doc.push(set_node_field(doc, "reply", "title", "edited"))
    app.processEvents()
    edited = time.perf_counter() - started
    # The prompt itself edited as a designer does: through the dock's editor (one character
    # added at the end), then undone; the document must hold the whole text each time.
    editor = window.properties.form.editors["system_prompt"]
    prompt = doc.node("reply").system_prompt
    started = time.perf_counter()
    editor.edited.emit(prompt + "!", False)
    app.processEvents()
    prompt_edited = time.perf_counter() - started
    assert doc.node("reply").system_prompt == prompt + "!"
    doc.undo_stack.undo()
    app.processEvents()
    assert doc.node("reply").system_prompt == prompt
    full_dialog = None
    if args.full_dialog:
        started = time.perf_counter()
        dialog = editor.open_full_text()
        app.processEvents()
        full_dialog = round(time.perf_counter() - started, 3)
        assert dialog.value() == prompt
        dialog.reject()
    result = {
        "prompt_mb": args.mb, "file_mb": round(path.stat().st_size / 2**20, 1),
        "open_s": round(opened, 3), "select_s": round(selected, 3), "edit_s": round(edited, 3),
        "prompt_edit_s": round(prompt_edited, 3), "full_text_dialog_s": full_dialog,
        "peak_rss_after_select_mb": round(selected_peak, 1),
        "peak_rss_mb": round(peak_mb(), 1), "peak_rss_added_mb": round(peak_mb() - before, 1),
        "summary": window.canvas.canvas_node("reply").view.summary,
        "goal_open_s": GOAL_OPEN_S, "goal_select_s": GOAL_SELECT_S,
        "meets_goal": opened < GOAL_OPEN_S and selected < GOAL_SELECT_S,
        "renderer": os.environ.get("QT_QPA_PLATFORM", ""), "python": sys.version.split()[0],
    }
    doc.undo_stack.setClean()
    window.close()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    print(json.dumps(result, ensure_ascii=False))
    return 0 if result["meets_goal"] else 1


if __name__ == "__main__":
    sys.exit(main())
