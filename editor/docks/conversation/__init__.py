"""The Conversation dock: talk to the graph on the sample model."""
