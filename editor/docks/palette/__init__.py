"""The Palette dock: node types by category, to drag onto the canvas."""
