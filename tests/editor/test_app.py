"""parley-studio's command line refuses bad values with a message and exit status 2 (issue 14,
defect 17: `--size abc` raised ValueError after the window was built)."""

from __future__ import annotations

import pytest

from editor.app import build_parser, main


@pytest.mark.parametrize("size", ["abc", "1500", "1500x", "x900", "0x900", "1500x0", "-5x10", "99999x900", "1.5x2"])
def test_a_bad_size_is_a_message_and_exit_2(size, capsys):
    with pytest.raises(SystemExit) as info:
        main(["--screenshot", "out.png", f"--size={size}"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "argument --size" in err and repr(size) in err and "Traceback" not in err


@pytest.mark.parametrize(("size", "expected"), [("800x600", (800, 600)), ("1600X1000", (1600, 1000)),
                                                (" 640 x 480 ", (640, 480))])
def test_good_sizes(size, expected):
    assert build_parser().parse_args(["--size", size]).size == expected


def test_the_default_size():
    assert build_parser().parse_args([]).size == (1500, 900)


def test_exit_when_ready_reports_the_launch_in_order(tmp_path):
    """--exit-when-ready (bench/bench_open_process.py) prints one JSON line: the seconds from launch
    to each phase, in the order they happen, after the window has shown the asset and painted."""
    import json
    import os
    import subprocess
    import sys

    from runtime.resources import examples_dir

    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", PARLEY_STUDIO_SETTINGS=str(tmp_path / "s.ini"),
               PARLEY_STUDIO_RECOVERY=str(tmp_path / "recovery"))
    env.pop("PARLEY_LAUNCH_TIME", None)  # from the kernel's start time of the process
    example = min(examples_dir().glob("*.json"))
    run = subprocess.run([sys.executable, "-m", "editor.app", "--exit-when-ready", str(example)], check=False, env=env,
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout.strip().splitlines()[-1])
    phases = report["phases_s"]
    assert list(phases) == ["main", "qt", "import_main_window", "window_built", "shown", "asset_open", "ready"]
    times = list(phases.values())
    assert times == sorted(times) and 0 < times[0]
    assert report["ready_s"] == phases["ready"]


def test_the_window_starts_without_what_it_needs_later(tmp_path):
    """The main window (its modules, and building it) leaves llama.cpp's bindings, numpy, the gguf
    package, httpx, setuptools and the server (runtime.serve) to the first use (0.6 s of every
    launch, issue 23), and NodeGraphQt's Qt module is served lazily (editor.qt_for_nodegraph)."""
    import os
    import subprocess
    import sys

    later = ["llama_cpp", "runtime.backends.llama", "numpy", "gguf", "httpx", "runtime.serve", "rank_bm25", "jinja2",
             "fastapi", "uvicorn", "runtime.doctor.self_test", "setuptools"]
    code = ("import sys, editor.window.main_window; from PySide6.QtWidgets import QApplication; app = QApplication([]); "
            f"window = editor.window.main_window.MainWindow(); loaded = [m for m in {later!r} if m in sys.modules]; "
            "assert not loaded, loaded; "
            "assert 'QtSubmodule' in repr(type(sys.modules['Qt'].QtCore)), sys.modules['Qt']")
    run = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "QT_PREFERRED_BINDING": "PySide6", "QT_QPA_PLATFORM": "offscreen",
                              "PARLEY_STUDIO_SETTINGS": str(tmp_path / "s.ini")})
    assert run.returncode == 0, run.stderr[-2000:]
