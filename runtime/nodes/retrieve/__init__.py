"""The Retrieve node (``node``) and its knowledge index (``index``)."""
