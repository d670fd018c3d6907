"""The Parley Studio editor (PySide6 and NodeGraphQt)."""

# Before PySide6: pydantic loads its names lazily, and the first ``from pydantic import Field`` after
# PySide6's import hook is installed fails ("cannot import name 'import_string' from partially
# initialized module"): the hook reads each new module's source and so asks pydantic, half-imported,
# for ``__wrapped__``. Which editor module imported pydantic first decided whether the window opened.
import pydantic.fields  # noqa: F401

from editor.qt_for_nodegraph import install as _serve_qt_for_nodegraph

# Before any editor module imports NodeGraphQt: its `import Qt` then costs nothing (0.33 s with Qt.py).
_serve_qt_for_nodegraph()
