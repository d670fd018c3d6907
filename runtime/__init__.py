"""Parley's runtime: runs a workflow asset turn by turn, with no Qt.

Packages by concept, each importing only the floors below it (the import-linter ``layers``
contract in pyproject.toml): ``cli``; ``schemas``; ``suites``; ``agent`` (where a turn runs);
``asset`` (the model, file format, validation, estimate); ``nodes`` (the node types and the one
plugin surface; ``NodeRun`` is all a node touches of the agent); ``prompting`` (budget, trimming,
prompts, templates); ``dialogue`` and ``backends``; ``models``; ``files``; and the leaves
``diagnostics``, ``events``, ``problems``, ``resources`` and ``names``.
"""
