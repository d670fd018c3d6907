"""The VRAM Estimator dock: what the graph needs in RAM and VRAM."""
