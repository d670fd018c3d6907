"""The Summarize node (``node``) and the rolling summary it folds (``folding``)."""
