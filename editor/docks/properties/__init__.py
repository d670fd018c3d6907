"""The Properties dock: typed editors for the selected node or, with nothing selected, the agent."""
