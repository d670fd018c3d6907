"""Conversation test suites: scripted conversations with expectations checked against each turn of the graph.

A suite is a YAML file (schema: resources/schemas/test-suite.schema.json) naming an asset and holding
cases. A case is a list of player lines, each with what the turn must do:

- **path**: the nodes visited (``path`` exactly, ``visits``/``not_visits``), the exit a node took
  (``exits: {classify: "intent:greet"}``), the intent chosen, slots written, the tool called and its
  arguments (a partial match, or a JSON Schema);
- **reply**: ``contains``, ``not_contains``, ``regex``, ``max_words``, ``mentions_one_of``;
- **budget**: prompt tokens at most N, no trim this turn, a summary written this turn;
- **judge**: a rubric a model grades pass/fail with a reason (grammar-constrained to that answer);

and conversation-level expectations checked at a given turn (a fact from turn 2 recalled at turn 12).

Turns count from 1 in suites and reports. A case that cannot run (bad asset, a failed turn) fails with
the reason; it never stops the other cases. Every node visit and exit taken is counted (coverage).

The modules, each using only those before it: ``file`` (the suite file: models, schema, loading,
finding, adding a case), ``checks`` (a turn against its expectations, the judge, and
the case that expects what a conversation did), ``report`` (the
outcomes, coverage, JSON and JUnit) and ``run`` (running cases and suites, on one backend or a fleet);
``html_report`` draws a run (and a comparison of variants) as one self-contained page;
``simulate`` plays a suite's personas (a model as the player, at random or steered by coverage) and
saves the lines that reached new coverage as cases.

A suite file cannot hang or crash the program: ``file`` bounds what one may hold (``MAX_SUITE_BYTES``,
``MAX_SUITE_CASES``, ``MAX_SUITE_NESTING``; no YAML aliases) and ``checks``
matches a reply's regex within ``runtime.patterns``' limits.
"""
