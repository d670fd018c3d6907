"""The import-linter contracts in pyproject.toml: the runtime never imports Qt, NodeGraphQt or the
editor, each runtime package imports only the floors below it, and so does each folder of the editor."""

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
    # runtime is Qt-free; the runtime's floors (deferred and TYPE_CHECKING imports count); the editor's
    # floors; docks independent; nothing but the window imports a dock; the docks import neither
    # source of the SessionView
    assert "Contracts: 6 kept, 0 broken" in out.stdout


def test_runtime_imports_without_qt():
    code = "import sys, runtime.asset.file, runtime.asset.validation, runtime.cli; assert not any(m.startswith(('PySide6', 'Qt', 'NodeGraphQt')) for m in sys.modules)"
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
