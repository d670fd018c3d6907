"""A conversation with an agent, as every door (the editor, ``parley serve``, suites, ``parley chat``,
bundles and the doctor) runs it: here, why a turn did not finish (``failures``)."""
