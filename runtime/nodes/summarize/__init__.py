"""Summarize, the node type that keeps long conversations coherent, in two modules:

- ``node``: the ``Summarize`` node (its settings, when it folds, what it records and checks);
- ``folding``: the rolling summary itself (which turns to fold, the fold prompt, shortening a turn
  too long for the summarizer's context).
"""
