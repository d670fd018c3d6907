"""A conversation with an agent, as every door (the editor, ``parley serve``, suites, ``parley chat``,
bundles and the doctor) runs it:

- ``session``: ``Session``, the only place an agent is made, and ``graph_of``/``open_graph``, the
  graph an asset runs (its behaviours expanded);
- ``record``: ``TurnRecord``, a finished turn in one JSON form for the wire and for files;
- ``failures``: why a turn did not finish, one table for every door;
- ``tools``: scripted and recorded answers to tool calls."""
