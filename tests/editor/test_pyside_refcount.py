"""Catch a PySide6 that loses references to None (6.12.0 on Python 3.11).

That release drops a reference to None on every call returning None from
``QGraphicsItem.parentItem()``, ``QObject.parent()`` and ``setVisible``; NodeGraphQt
makes those calls by the thousand and the interpreter dies with
"Fatal Python error: none_dealloc". pyproject.toml pins PySide6 below 6.12 on 3.11;
this test fails first if a bump slips through.
"""

from __future__ import annotations

import sys

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QGraphicsRectItem, QGraphicsScene

CALLS = 20_000


def test_none_refcount_is_stable(qapp):
    scene = QGraphicsScene()
    item = QGraphicsRectItem(0, 0, 10, 10)
    scene.addItem(item)
    orphan = QObject()
    before = sys.getrefcount(None)
    for _ in range(CALLS):
        assert item.parentItem() is None
        assert orphan.parent() is None
        item.setVisible(True)
        item.setVisible(False)
    after = sys.getrefcount(None)
    # Other code may take a few references meanwhile; a leak loses one per call.
    assert after >= before - 100, f"None lost {before - after} references in {CALLS} calls: broken PySide6"
