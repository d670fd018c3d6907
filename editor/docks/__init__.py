"""The docks around the canvas: one package per panel, named for what the designer sees, each with its ``dock.py``."""
