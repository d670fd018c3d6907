"""NodeGraphQt's ``Qt`` module served lazily from PySide6 (issue 23: Qt.py took 0.33 s of each launch)."""

from __future__ import annotations

import sys

from PySide6 import QtCore, QtGui, QtWidgets

from editor import qt_for_nodegraph


def test_it_hands_out_pyside6s_own_classes_in_qt5s_places():
    qt = qt_for_nodegraph.module()
    assert qt.QtWidgets.QGraphicsItem is QtWidgets.QGraphicsItem
    assert qt.QtCore.Signal is QtCore.Signal
    assert qt.QtWidgets.QAction is QtGui.QAction and qt.QtWidgets.QUndoStack is QtGui.QUndoStack
    assert qt.QtCore.QRegExp is QtCore.QRegularExpression
    assert qt.QtCompat.QHeaderView.setSectionResizeMode is QtWidgets.QHeaderView.setSectionResizeMode
    assert qt.IsPySide6 and not qt.IsPySide2 and not qt.IsPyQt5


def test_nodegraphqt_imports_it():
    from NodeGraphQt.qgraphics import node_base

    assert "QtSubmodule" in type(sys.modules["Qt"].QtWidgets).__name__
    assert node_base.QtWidgets.QGraphicsItem is QtWidgets.QGraphicsItem


def test_it_stands_aside_for_another_binding_or_an_imported_qt_py(monkeypatch):
    monkeypatch.setitem(sys.modules, "Qt", sys.modules["Qt"])  # put back as it was afterwards
    monkeypatch.setenv("QT_PREFERRED_BINDING", "PyQt6")
    del sys.modules["Qt"]
    assert not qt_for_nodegraph.install()
    assert "Qt" not in sys.modules
    monkeypatch.setenv("QT_PREFERRED_BINDING", "PySide6")
    sys.modules["Qt"] = real = object()
    assert not qt_for_nodegraph.install() and sys.modules["Qt"] is real
