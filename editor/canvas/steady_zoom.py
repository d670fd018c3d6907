"""The canvas keeps its zoom and its centre when it is resized.

NodeGraphQt shows a fixed scene rectangle fitted into the view, so a canvas made shorter by a
bottom dock (the Talk and Test workspaces) showed the same rectangle smaller: 1.00x became 0.62x,
then 0.56x, with text about 6 px high. Here the rectangle follows the view's new size instead, so
the nodes stay the size they were and the scene point at the canvas's centre stays there, as a
window that is resized by hand would expect.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QEvent, QObject, QRectF, QSize
from PySide6.QtGui import QResizeEvent

if TYPE_CHECKING:
    from editor.canvas import Canvas

FIT_MARGIN = 2  # QGraphicsView.fitInView fits into the viewport less this on every side


class SteadyZoom(QObject):
    """Filters the canvas view's resizes: before NodeGraphQt fits its scene rectangle to the new
    size, the rectangle is made the one the new size shows at the current scale, around the same
    centre."""

    def __init__(self, canvas: Canvas) -> None:
        super().__init__(canvas.viewer)
        self.viewer = canvas.viewer
        self.viewer.installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.viewer and event.type() == QEvent.Type.Resize:
            self._keep(event)  # type: ignore[arg-type]
        return False

    def _keep(self, event: QResizeEvent) -> None:
        viewer = self.viewer
        new, last = event.size(), viewer._last_size
        scale = viewer.transform().m11()
        if new.isEmpty() or last.isEmpty() or scale <= 0:
            return  # NodeGraphQt puts a zero size back itself
        # the viewport is laid out after this filter: its new size is the view's less the frame
        frame = event.oldSize() - viewer.viewport().size() if event.oldSize().isValid() else QSize(0, 0)
        width = max(1, new.width() - frame.width() - 2 * FIT_MARGIN) / scale
        height = max(1, new.height() - frame.height() - 2 * FIT_MARGIN) / scale
        # NodeViewer.resizeEvent then zooms in by 1.001 ** (the larger ratio of the sizes): undone here
        undone = 1.001 ** max(new.width() / last.width(), new.height() / last.height())
        width, height = width * undone, height * undone
        centre = viewer._scene_range.center()
        viewer._scene_range = QRectF(centre.x() - width / 2, centre.y() - height / 2, width, height)


def install_steady_zoom(window) -> SteadyZoom:
    """``window``'s canvas keeps its zoom and centre through resizes (a workspace switch, a dock
    opened or closed, the window resized)."""
    return SteadyZoom(window.canvas)
