"""The budget bar: what a node's prompt spent its window on, drawn against the window."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPen
from PySide6.QtWidgets import QSizePolicy, QWidget

from runtime.prompting.budget import TRIM_TARGET_PERCENT

SEGMENT_COLOURS = {
    "system": QColor(86, 140, 200),
    "summary": QColor(170, 120, 210),
    "history": QColor(200, 160, 80),
    "current": QColor(90, 180, 110),
    "reserve": QColor(110, 110, 110),
}
SEGMENT_LABELS = {
    "system": "system",
    "summary": "summary",
    "history": "history",
    "current": "current turn",
    "reserve": "reserved for the answer",
}


@dataclass(frozen=True)
class BudgetShares:
    """Token counts per segment, the prompt budget (context minus max_tokens) and the context size."""

    segments: dict[str, int]
    budget: int
    context: int


class BudgetBar(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.shares: BudgetShares | None = None
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setMinimumHeight(58)

    def sizeHint(self) -> QSize:
        return QSize(400, 58)

    def set_shares(self, shares: BudgetShares | None) -> None:
        self.shares = shares
        self.setToolTip(self.describe())
        self.update()

    def describe(self) -> str:
        if self.shares is None:
            return ""
        s = self.shares
        used = sum(s.segments.values())
        parts = ", ".join(f"{SEGMENT_LABELS[k]} {v}" for k, v in s.segments.items())
        return (f"{parts}, reserved for the answer {s.context - s.budget}: prompt {used} of a budget of "
                f"{s.budget} tokens (window {s.context}); trimming stops at {TRIM_TARGET_PERCENT} % = "
                f"{s.budget * TRIM_TARGET_PERCENT // 100}")

    def paintEvent(self, _event) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        bar = QRectF(4, 4, self.width() - 8, 22)
        painter.setPen(QPen(QColor(90, 90, 90)))
        painter.setBrush(QColor(35, 35, 35))
        painter.drawRect(bar)
        if self.shares is None or self.shares.context <= 0:
            painter.setPen(QColor(150, 150, 150))
            painter.drawText(bar, Qt.AlignmentFlag.AlignCenter, "no model call")
            return
        s = self.shares
        scale = bar.width() / max(s.context, sum(s.segments.values()) + (s.context - s.budget))
        x = bar.left()
        painter.setPen(Qt.PenStyle.NoPen)
        for key, tokens in [*s.segments.items(), ("reserve", s.context - s.budget)]:
            if key == "reserve":
                x = bar.left() + s.budget * scale  # the reserve sits at the end of the window
            width = tokens * scale
            painter.setBrush(SEGMENT_COLOURS[key])
            painter.drawRect(QRectF(x, bar.top() + 1, max(width, 0.0), bar.height() - 2))
            x += width
        # The budget's edge (trimming starts past it) and the 75 % mark (trimming stops at it).
        for at, colour, dash in ((s.budget, QColor(240, 90, 90), Qt.PenStyle.SolidLine),
                                 (s.budget * TRIM_TARGET_PERCENT // 100, QColor(240, 200, 90), Qt.PenStyle.DashLine)):
            px = bar.left() + at * scale
            painter.setPen(QPen(colour, 2, dash))
            painter.drawLine(int(px), int(bar.top()) - 2, int(px), int(bar.bottom()) + 2)
        # Legend
        painter.setPen(QColor(200, 200, 200))
        font = painter.font()
        font.setPointSizeF(max(font.pointSizeF() - 1, 7))
        painter.setFont(font)
        x = bar.left()
        y = bar.bottom() + 6
        for key, tokens in [*s.segments.items(), ("reserve", s.context - s.budget)]:
            text = f"{SEGMENT_LABELS[key]} {tokens}"
            painter.setBrush(SEGMENT_COLOURS[key])
            painter.setPen(Qt.PenStyle.NoPen)
            painter.drawRect(QRectF(x, y + 3, 9, 9))
            painter.setPen(QColor(200, 200, 200))
            w = painter.fontMetrics().horizontalAdvance(text)
            painter.drawText(QRectF(x + 12, y, w + 4, 16), Qt.AlignmentFlag.AlignVCenter, text)
            x += w + 26
        used = sum(s.segments.values())
        summary = f"{used} / {s.budget} budget"
        w = painter.fontMetrics().horizontalAdvance(summary)
        if x + w < bar.right():
            painter.drawText(QRectF(bar.right() - w, y, w, 16), Qt.AlignmentFlag.AlignVCenter, summary)
