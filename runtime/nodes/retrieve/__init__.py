"""Retrieve, the node type that finds the knowledge entries matching a line, in two modules:

- ``node``: the ``Retrieve`` node (its settings, the run that fills its slot, its checks);
- ``index``: its knowledge (entries from the asset and a file beside it), ranked for a query by
  BM25 or embeddings, and kept across turns.
"""
