"""``parley doctor``: the reproducibility self-test of a backend and model."""
