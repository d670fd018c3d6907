"""Building a node's prompt: the token budget and trimming (``budget``), the prompt from the
history (``prompt``) and Mustache templates (``templates``)."""
