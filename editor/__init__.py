"""The Parley Studio editor (PySide6 and NodeGraphQt)."""

from editor.qt_for_nodegraph import install as _serve_qt_for_nodegraph

# Before any editor module imports NodeGraphQt: its `import Qt` then costs nothing (0.33 s with Qt.py).
_serve_qt_for_nodegraph()
