"""The Raw JSON dock: a turn's diagnostics as the runtime wrote them."""
