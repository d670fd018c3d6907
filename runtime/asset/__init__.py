"""The workflow asset: the model of one agent's graph (``model``), its file format (``file``),
validation, the memory estimate of an asset (``estimate``), the clipboard and the auto layout."""
