"""NodeGraphQt's ``Qt`` module, served from PySide6 as each name is first asked for.

NodeGraphQt imports Qt through Qt.py (``from Qt import QtCore, QtGui, QtWidgets``). Qt.py imports
some thirty PySide6 modules and reads every class of each, which makes PySide6 build them all:
0.33 s of every launch, most of it for classes the editor never uses. With PySide6, Qt.py hands
out PySide6's own classes, so this module hands out the same objects, each when it is first asked
for, under the names NodeGraphQt uses (Qt 5's places of the classes Qt 6 moved, as Qt.py does).

``install`` puts it in ``sys.modules["Qt"]`` before NodeGraphQt is imported (``editor/__init__``),
unless Qt.py is already imported or another binding than PySide6 is preferred. It also gives
NodeGraphQt Python's own ``distutils.version`` (``stdlib_distutils_version``).
"""

from __future__ import annotations

import importlib
import os
import sys
import types
import warnings

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
    qt.IsPySide6 = True
    qt.IsPyQt6 = qt.IsPySide2 = qt.IsPyQt5 = qt.IsPySide = qt.IsPyQt4 = False
    for name in SUBMODULES:
        setattr(qt, name, QtSubmodule(name))
    qt.QtCompat = QtCompat("Qt.QtCompat")
    return qt


def stdlib_distutils_version() -> bool:
    """Import Python's own ``distutils.version``, where there is one (before 3.12), for NodeGraphQt's
    ``from distutils.version import LooseVersion`` (it compares Qt versions). With setuptools
    installed, ``import distutils`` goes through setuptools' hook, which imports setuptools (0.1 s of
    every launch: packaging, jaraco, email); Python's own takes 2 ms. The hook stays in place for
    anything else; whether Python's own was imported."""
    if "distutils" in sys.modules or sys.version_info >= (3, 12):
        return False
    hooks = [f for f in sys.meta_path if type(f).__module__ == "_distutils_hack"]
    for hook in hooks:
        sys.meta_path.remove(hook)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # distutils' own notice of its removal
            import distutils.version  # noqa: F401
    except ImportError:
        return False
    finally:
        sys.meta_path[0:0] = hooks
    return True


def install() -> bool:
    """Serve ``import Qt`` from here, unless Qt.py is imported already or the environment prefers
    another binding (``QT_PREFERRED_BINDING``, which Qt.py reads); whether it did."""
    preferred = [b for b in os.environ.get("QT_PREFERRED_BINDING", "").split(os.pathsep) if b]
    if "Qt" in sys.modules or os.environ.get("QT_PREFERRED_BINDING_JSON") or preferred[:1] not in ([], ["PySide6"]):
        return False
    stdlib_distutils_version()
    qt = module()
    sys.modules["Qt"] = qt
    for name in (*SUBMODULES, "QtCompat"):
        sys.modules[f"Qt.{name}"] = getattr(qt, name)
    return True
