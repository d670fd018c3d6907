"""The PyInstaller builds the packaging tests (and bench_serve_executable) run: each built by
packaging/build.py, and rebuilt only when a source file changed since its last build."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT = 1800

# The folders whose files go into each target (packaging/ holds its spec and entry script).
SOURCES = {
    "studio": ("runtime", "editor", "resources", "packaging"),
    "serve": ("runtime", "resources", "packaging"),
}


def _load_build_script():
    """packaging/build.py, the one build command (loaded by path: `build` is also a PyPI package)."""
    spec = importlib.util.spec_from_file_location("parley_packaging_build", ROOT / "packaging" / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


app_build = _load_build_script()


def newest_source(target: str = "studio") -> float:
    files = (p for folder in SOURCES[target] for p in (ROOT / folder).rglob("*")
             if p.is_file() and "__pycache__" not in p.parts)
    return max(p.stat().st_mtime for p in files)


def built(target: str = "studio") -> Path:
    """``target``'s frozen executable, built first when it is missing or older than a source file."""
    exe = app_build.executable(target)
    if not exe.is_file() or exe.stat().st_mtime < newest_source(target):
        run = subprocess.run([sys.executable, str(ROOT / "packaging" / "build.py"), target], cwd=ROOT, check=False,
                             capture_output=True, text=True, timeout=BUILD_TIMEOUT)
        assert run.returncode == 0, f"the {target} build failed:\n{run.stdout[-4000:]}\n{run.stderr[-4000:]}"
        assert exe.is_file()
    return exe
