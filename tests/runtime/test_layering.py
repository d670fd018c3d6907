"""The runtime never imports Qt, NodeGraphQt or the editor (import-linter contract in pyproject.toml)."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_import_linter_contract_holds():
    exe = shutil.which("lint-imports")
    cmd = [exe] if exe else [sys.executable, "-m", "importlinter.cli"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Contracts: 3 kept, 0 broken" in out.stdout  # runtime is Qt-free; docks independent; canvas imports no dock


def test_runtime_imports_without_qt():
    code = "import sys, runtime.asset_file, runtime.validation, runtime.cli; assert not any(m.startswith(('PySide6', 'Qt', 'NodeGraphQt')) for m in sys.modules)"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def test_no_two_classes_share_a_name():
    """One name, one concept: a class name means one thing across runtime/ and editor/."""
    import collections
    import re

    where = collections.defaultdict(list)
    for package in ("runtime", "editor"):
        for path in (ROOT / package).rglob("*.py"):
            for name in re.findall(r"^class (\w+)", path.read_text(encoding="utf-8"), flags=re.MULTILINE):
                where[name].append(str(path.relative_to(ROOT)))
    assert {name: paths for name, paths in where.items() if len(paths) > 1} == {}


def test_the_modules_node_types_build_on_import_first():
    """The node types import these, and the registry imports the node types: each must import in a
    fresh interpreter on its own (no import cycle through runtime.nodes)."""
    modules = ["runtime.names", "runtime.budget", "runtime.history", "runtime.prompt", "runtime.summaries",
               "runtime.retrieval", "runtime.diagnostics", "runtime.events", "runtime.backends.base",
               "runtime.nodes.base", "runtime.nodes.running", "runtime.nodes.generate"]
    for module in modules:
        done = subprocess.run([sys.executable, "-c", f"import {module}"], check=False, cwd=ROOT,
                              capture_output=True, text=True)
        assert done.returncode == 0, f"{module}: {done.stderr[-500:]}"
