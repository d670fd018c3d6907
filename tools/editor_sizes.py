"""Prints every class over 500 lines and every function over 100 lines under editor/.

Run from the repository root: `python tools/editor_sizes.py [FOLDER]`. Exit 1 when something is over.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

CLASS_LIMIT = 500
FUNCTION_LIMIT = 100


def oversized(root: Path) -> list[tuple[str, str, int]]:
    """(kind, "file:line name", lines) for each class and function over its limit under root."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                kind, limit = "class", CLASS_LIMIT
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                kind, limit = "function", FUNCTION_LIMIT
            else:
                continue
            lines = node.end_lineno - node.lineno + 1
            if lines > limit:
                found.append((kind, f"{path}:{node.lineno} {node.name}", lines))
    return found


def main() -> int:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "editor")
    found = oversized(root)
    for kind, where, lines in sorted(found, key=lambda f: -f[2]):
        print(f"{kind:8} {lines:5} lines  {where}")
    print(f"{len(found)} over the limits (class {CLASS_LIMIT}, function {FUNCTION_LIMIT} lines)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
