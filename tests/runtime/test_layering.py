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
    assert "Contracts: 1 kept, 0 broken" in out.stdout


def test_runtime_imports_without_qt():
    code = "import sys, runtime.asset_file, runtime.validation, runtime.cli; assert not any(m.startswith(('PySide6', 'Qt', 'NodeGraphQt')) for m in sys.modules)"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)
