"""``parley-studio [ASSET]`` and ``parley-studio --screenshot OUT.png [ASSET]``.

``--talk LINE`` (repeatable) runs a scripted test conversation on the real model
before the screenshot, and ``--show-dock NAME`` raises a dock (``TurnInspectorDock``,
``RawJsonDock``, ``VramEstimatorDock``, ...), so documentation images show the docks
with a conversation in them.

``--exit-when-ready`` prints how long the launch took, once the window (and ASSET) is shown and
takes input, and exits: bench/bench_open_process.py times whole launches with it.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path

PRELOAD_LLAMA_AFTER_MS = 300
MAX_WINDOW_SIDE = 16_384  # Qt's own limit on a widget's width and height is 16,777,215; no screen is this big


def window_size(text: str) -> tuple[int, int]:
    """``--size WxH`` as (width, height); argparse reports a bad value and exits with status 2."""
    found = re.fullmatch(r"\s*(\d{1,9})\s*[xX]\s*(\d{1,9})\s*", text, re.ASCII)
    if found is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size such as 1500x900 (width x height in pixels)")
    width, height = int(found[1]), int(found[2])
    if not (1 <= width <= MAX_WINDOW_SIDE and 1 <= height <= MAX_WINDOW_SIDE):
        raise argparse.ArgumentTypeError(f"{text!r}: width and height must be 1 to {MAX_WINDOW_SIDE:,} pixels")
    return width, height


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="parley-studio", description="Author the dialogue graphs of LLM characters.")
    parser.add_argument("asset", nargs="?", metavar="ASSET", help="a workflow asset (.json) to open")
    parser.add_argument("--screenshot", metavar="OUT.png",
                        help="render the main window offscreen to OUT.png and exit")
    parser.add_argument("--size", default=(1500, 900), type=window_size, metavar="WxH",
                        help="window size for --screenshot and --exit-when-ready, in pixels (default 1500x900)")
    parser.add_argument("--select", metavar="NODE_ID", help="select this node before the screenshot")
    parser.add_argument("--talk", action="append", default=[], metavar="LINE",
                        help="with --screenshot: say LINE to the character first (repeatable; runs on the model)")
    parser.add_argument("--show-dock", action="append", default=[], metavar="NAME",
                        help="with --screenshot: bring this dock to the front (e.g. TurnInspectorDock)")
    parser.add_argument("--workspace", choices=["Author", "Talk", "Test"],
                        help="start in this workspace preset (the View menu's, Ctrl+1/2/3)")
    parser.add_argument("--self-test", action="store_true",
                        help="run one turn of the example chat agent on the sample model, print the reply and exit")
    parser.add_argument("--exit-when-ready", action="store_true",
                        help="print the seconds from launch to a shown window that takes input (JSON) and exit")
    return parser


LAUNCH_TIME_ENV = "PARLEY_LAUNCH_TIME"  # time.time() when a launcher started this process (bench/)


def seconds_since_launch() -> float:
    """Seconds since this process was launched: since ``PARLEY_LAUNCH_TIME`` (the launcher's
    ``time.time()``) when set, else since the kernel started the process (Linux, 10 ms steps),
    else since this module was imported."""
    launched = os.environ.get(LAUNCH_TIME_ENV)
    if launched:
        return time.time() - float(launched)
    try:
        # Field 22 of /proc/self/stat: the start in clock ticks after boot (after the ')' of the name).
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        return time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return time.perf_counter() - _IMPORTED


_IMPORTED = time.perf_counter()


def main(argv: Sequence[str] | None = None) -> int:
    phases = {"main": seconds_since_launch()}  # the interpreter's start and this module's import
    args = build_parser().parse_args(argv)
    if args.self_test:  # no window: checks the runtime, resources and llama.cpp of this install
        from editor.self_test import run_self_test

        return run_self_test()
    if args.screenshot or args.exit_when_ready:
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
        if "PARLEY_STUDIO_SETTINGS" not in os.environ:
            # The default layout, not whatever this machine's last session left behind.
            import tempfile

            os.environ["PARLEY_STUDIO_SETTINGS"] = os.path.join(tempfile.mkdtemp(), "parley-studio.ini")
    os.environ.setdefault("QT_PREFERRED_BINDING", "PySide6")

    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("Parley Studio")
    app.setOrganizationName("Parley")
    phases["qt"] = seconds_since_launch()

    from editor.widgets.theme import apply_theme
    from editor.window.main_window import MainWindow

    phases["import_main_window"] = seconds_since_launch()
    apply_theme(app)
    crash_watch = None
    if not (args.screenshot or args.exit_when_ready):
        from editor import settings as app_settings
        from editor.services.recovery import CRASH_NAME
        from runtime.crashes import CrashWatch

        # A native crash (llama.cpp) writes its report beside the recovery files; the next start tells it.
        crash_watch = CrashWatch(app_settings.recovery_dir(), CRASH_NAME)
        crash_watch.start()
    window = MainWindow(crash_watch=crash_watch)
    if args.workspace:
        window.workspace.switch(args.workspace)
    if not args.asset:
        window.show_start_page()  # the recent files, the examples and New from template; opening one hides it
    phases["window_built"] = seconds_since_launch()
    if args.screenshot or args.exit_when_ready:
        window.resize(*args.size)
    window.show()
    phases["shown"] = seconds_since_launch()
    if not (args.screenshot or args.exit_when_ready):
        window.offer_recovery()
    if args.asset:
        window.open_path(args.asset)
        phases["asset_open"] = seconds_since_launch()
    if args.exit_when_ready:
        return leave(_exit_when_ready(app, window, phases))
    from PySide6.QtCore import QTimer

    from editor.session.local import preload_llama

    # llama.cpp's bindings once the window is up and idle, well before anyone can type a first line
    # (a conversation imports them itself if it starts sooner).
    QTimer.singleShot(PRELOAD_LLAMA_AFTER_MS, preload_llama)
    if args.screenshot:
        if args.talk and _talk(app, window, args.talk) != 0:
            window.document.undo_stack.setClean()
            window.close()
            return leave(1)
        return leave(_screenshot(app, window, args.screenshot, args.select, args.show_dock))
    code = app.exec()
    if crash_watch is not None:
        crash_watch.stop()  # a clean quit: the windows have closed, and deleted what they kept
    return leave(code)


def leave(code: int) -> int:
    """``code``, once every window has closed; or, when a closed window had to leave a thread
    running (``editor.threads.thread_job.threads_left_running``), the process ends here with ``code``.

    Python's exit would destroy that thread's QThread while it runs, and Qt aborts the process
    then (SIGABRT, "QThread: Destroyed while thread ... is still running"); waiting for it could
    take for ever (a call no cancel reaches). Nothing is lost by leaving at once: the windows
    asked to save their assets and saved (and synced) their layouts as they closed; the editor's
    other settings were written when they changed (each ``app_settings()`` object syncs as it goes)."""
    from editor.threads.thread_job import threads_left_running

    left = threads_left_running()
    if not left:
        return code
    import logging

    names = ", ".join(t.objectName() or "a thread" for t in left)
    print(f"parley-studio: {names} still running after its window closed; leaving without waiting for it",
          file=sys.stderr)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _exit_when_ready(app, window, phases: dict[str, float]) -> int:
    """Run the event loop until the window has handled what its first show queued (the layout's
    timers, the framing of the graph) and the canvas (or the start page in its place) has painted;
    print the phases' times since launch as JSON, close and return the loop's status."""
    import json

    from PySide6.QtCore import QEvent, QObject, QTimer

    class PaintWatch(QObject):
        painted = False

        def eventFilter(self, watched, event):
            if event.type() == QEvent.Type.Paint:
                self.painted = True
            return False

    # What the window shows in the middle: the start page (no ASSET), else the canvas
    viewport = window.start_page.page.widget() if window.start_page.shown else window.canvas.viewer.viewport()
    watch = PaintWatch()
    viewport.installEventFilter(watch)
    # The first show queues zero-timers up to three deep (the docks' tabs, the window's size, the
    # framing): a step of the loop for each, then the canvas's paint if it is still to come.
    steps = [3]

    def step() -> None:
        steps[0] -= 1
        if steps[0] > 0 or not watch.painted:
            QTimer.singleShot(0, step)
            return
        phases["ready"] = seconds_since_launch()
        viewport.removeEventFilter(watch)
        print(json.dumps({"ready_s": round(phases["ready"], 4),
                          "phases_s": {k: round(v, 4) for k, v in phases.items()}}), flush=True)
        window.document.undo_stack.setClean()  # nothing to ask about on the way out
        window.close()
        app.quit()

    QTimer.singleShot(0, step)
    return app.exec()


def _talk(app, window, lines: list[str]) -> int:
    """Say each line in the window's test conversation (a scene's, when one is open) and wait for the
    reply; 1 on a failed turn."""
    if window.scene_mode.active:
        return _talk_to_scene(app, window, lines)
    conversation = window.conversation
    failures: list[str] = []
    conversation.turn_failed.connect(lambda failure: failures.append(failure.message))
    for line in lines:
        conversation.say(line)
        while conversation.busy:
            app.processEvents()
            time.sleep(0.01)
        if failures:
            print(f"--talk {line!r} failed: {failures[-1]}", file=sys.stderr)
            return 1
    return 0


def _talk_to_scene(app, window, lines: list[str]) -> int:
    """Say each line to the open scene, one round each, once it has opened; 1 on a failed round."""
    view = window.scene.view
    failures: list[str] = []
    view.failed.connect(lambda failure: failures.append(failure.message))

    def wait() -> None:
        while view.busy:
            app.processEvents()
            time.sleep(0.01)

    wait()  # the scene opens on its thread
    for line in lines:
        if not view.is_open or not view.actions.say(line):
            failures.append(failures[-1] if failures else "the scene did not open")
        wait()
        if failures:
            print(f"--talk {line!r} failed: {failures[-1]}", file=sys.stderr)
            return 1
    return 0


def _screenshot(app, window, out: str, select: str | None, show_docks: Sequence[str] = ()) -> int:
    from PySide6.QtCore import Qt

    for _ in range(3):
        app.processEvents()
    window.canvas.frame_for_reading()
    if select:
        window.canvas.select([select])
    for name in show_docks:
        dock = window.docks.get(name)
        if dock is None:
            print(f"--show-dock: no dock named {name!r} (docks: {', '.join(window.docks)})", file=sys.stderr)
            return 1
        dock.show()
        dock.raise_()
        # Give a raised dock room: half the height at the bottom, most of the side's height at a side.
        share = 0.5 if window.dockWidgetArea(dock) == Qt.DockWidgetArea.BottomDockWidgetArea else 0.62
        window.resizeDocks([dock], [int(window.height() * share)], Qt.Orientation.Vertical)
    app.processEvents()
    ok = window.grab().save(out)
    window.document.undo_stack.setClean()  # nothing to ask about on the way out
    window.close()
    print(out if ok else f"could not write {out}", file=sys.stdout if ok else sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
