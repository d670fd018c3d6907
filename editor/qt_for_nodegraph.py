"""NodeGraphQt's ``Qt`` module, served from PySide6 as each name is first asked for.

NodeGraphQt imports Qt through Qt.py (``from Qt import QtCore, QtGui, QtWidgets``). Qt.py imports
some thirty PySide6 modules and reads every class of each, which makes PySide6 build them all:
0.33 s of every launch, most of it for classes the editor never uses. With PySide6, Qt.py hands
out PySide6's own classes, so this module hands out the same objects, each when it is first asked
for, under the names NodeGraphQt uses (Qt 5's places of the classes Qt 6 moved, as Qt.py does).

``install`` puts it in ``sys.modules["Qt"]`` before NodeGraphQt is imported (``editor/__init__``),
unless Qt.py is already imported or another binding than PySide6 is preferred.
"""

from __future__ import annotations

import importlib
import os
import sys
import types

# Qt 5's places of classes Qt 6 moved (Qt.py's "misplaced members" for PySide6): module -> {name: (module, name)}.
MOVED: dict[str, dict[str, tuple[str, str]]] = {
    "QtWidgets": {name: ("QtGui", name) for name in (
        "QAction", "QActionGroup", "QShortcut", "QUndoCommand", "QUndoGroup", "QUndoStack")},
    "QtCore": {"QRegExp": ("QtCore", "QRegularExpression")},
    "QtGui": {"QRegExpValidator": ("QtGui", "QRegularExpressionValidator")},
}
SUBMODULES = ("QtCore", "QtGui", "QtWidgets", "QtSvg")


class QtSubmodule(types.ModuleType):
    """``Qt.QtCore`` and the like: PySide6's module of that name, one attribute at a time."""

    def __init__(self, name: str) -> None:
        super().__init__(f"Qt.{name}")
        self._qt_name = name

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        module, name = MOVED.get(self._qt_name, {}).get(attr, (self._qt_name, attr))
        value = getattr(importlib.import_module(f"PySide6.{module}"), name)
        setattr(self, attr, value)  # asked once
        return value


class QtCompat(types.ModuleType):
    """``Qt.QtCompat``: NodeGraphQt asks it for ``QHeaderView.setSectionResizeMode``, which Qt 6's
    own class has; any Qt class is looked up in QtWidgets, QtGui and QtCore in turn."""

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        for module in ("QtWidgets", "QtGui", "QtCore"):
            value = getattr(importlib.import_module(f"PySide6.{module}"), attr, None)
            if value is not None:
                setattr(self, attr, value)
                return value
        raise AttributeError(f"Qt.QtCompat has no {attr!r}")


def module() -> types.ModuleType:
    """A ``Qt`` module for PySide6 whose submodules read PySide6 lazily."""
    qt = types.ModuleType("Qt", __doc__)
    qt.__binding__ = "PySide6"
    qt.IsPySide6, qt.IsPyQt6, qt.IsPySide2, qt.IsPyQt5, qt.IsPySide, qt.IsPyQt4 = True, False, False, False, False, False
    for name in SUBMODULES:
        setattr(qt, name, QtSubmodule(name))
    qt.QtCompat = QtCompat("Qt.QtCompat")
    return qt


def install() -> bool:
    """Serve ``import Qt`` from here, unless Qt.py is imported already or the environment prefers
    another binding (``QT_PREFERRED_BINDING``, which Qt.py reads); whether it did."""
    preferred = [b for b in os.environ.get("QT_PREFERRED_BINDING", "").split(os.pathsep) if b]
    if "Qt" in sys.modules or os.environ.get("QT_PREFERRED_BINDING_JSON") or preferred[:1] not in ([], ["PySide6"]):
        return False
    qt = module()
    sys.modules["Qt"] = qt
    for name in (*SUBMODULES, "QtCompat"):
        sys.modules[f"Qt.{name}"] = getattr(qt, name)
    return True
