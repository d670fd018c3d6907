"""The editor's plugin surface: ``NodeView``, how a node type shows in the editor (label, category,
colour, help, summary). A plugin's view imports it from here (``editor.node_types``, the name plugins
have always used); it is drawn by the canvas and lives there (``editor.canvas.node_types``)."""

from editor.canvas.node_types import NodeView

__all__ = ["NodeView"]
