"""A console's output drawn as a PNG, for the README's pictures of samples that run where nothing is
drawn: the Unity package's sample under Mono, the Godot addon's in the headless engine. Drawn with
Qt (offscreen), which the editor already needs; the caption says where the output came from."""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import QRect, Qt
from PySide6.QtGui import QColor, QFont, QFontMetrics, QImage, QPainter
from PySide6.QtWidgets import QApplication

WIDTH = 800
PAD = 16


def console_png(lines: list[str], caption: str, path: Path) -> None:
    """Draws ``lines`` in a monospace font under ``caption`` and saves it at ``path``."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    _ = QApplication.instance() or QApplication([])  # fonts need one; pytest-qt's qapp takes it as its own
    mono = QFont("DejaVu Sans Mono", 11)
    title = QFont("DejaVu Sans", 11, QFont.Weight.Bold)
    metrics, title_metrics = QFontMetrics(mono), QFontMetrics(title)
    wrapped = [QRect(0, 0, WIDTH - 2 * PAD, 10_000) for _ in lines]
    heights = [metrics.boundingRect(r, Qt.TextFlag.TextWordWrap, line or " ").height()
               for r, line in zip(wrapped, lines)]
    caption_height = title_metrics.boundingRect(QRect(0, 0, WIDTH - 2 * PAD, 10_000), Qt.TextFlag.TextWordWrap,
                                                caption).height()
    height = PAD * 3 + caption_height + sum(heights) + 4 * len(lines)
    image = QImage(WIDTH, height, QImage.Format.Format_RGB32)
    image.fill(QColor("#1d2026"))
    painter = QPainter(image)
    try:
        painter.setFont(title)
        painter.setPen(QColor("#8ab4f8"))
        painter.drawText(QRect(PAD, PAD, WIDTH - 2 * PAD, caption_height), Qt.TextFlag.TextWordWrap, caption)
        painter.setFont(mono)
        y = PAD * 2 + caption_height
        for line, h in zip(lines, heights):
            painter.setPen(QColor("#e6e6e6"))
            painter.drawText(QRect(PAD, y, WIDTH - 2 * PAD, h), Qt.TextFlag.TextWordWrap, line)
            y += h + 4
    finally:
        painter.end()
    assert image.save(str(path)), f"could not write {path}"
