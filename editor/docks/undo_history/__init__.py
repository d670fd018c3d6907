"""The Undo History dock: every edit of the graph, to step back to."""
