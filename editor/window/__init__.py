"""The main window, its menus and the workspace presets: what puts the docks and the canvas together."""
