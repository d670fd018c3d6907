"""The Tests dock: the conversation test suites beside the asset, run from the editor, pass or fail per turn."""
