"""The Problems dock: validation errors and warnings; a click jumps to the node and field."""
