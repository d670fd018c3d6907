"""The dialogue: the history types (``history``), the conversation tree of branches (``tree``) and
the dialog file format (``dialog_file``)."""
