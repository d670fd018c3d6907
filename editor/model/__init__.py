"""The asset document (the single source of truth) and its undo commands."""
