"""An agent whose model is under an unknown user's home folder (``~nosuchuser/m.gguf``) opens, validates
and is estimated with the problem named, never a RuntimeError."""

from __future__ import annotations

from editor.docks.vram_estimator.dock import VramEstimatorDock
from runtime.asset.model import Asset, new_node


def test_the_editor_and_the_vram_dock_name_an_unknown_home_folder(window):
    """Defect 5: RuntimeError from expanduser in the editor and the VRAM dock."""
    asset = Asset(name="a", default_model="~nosuchuser/m.gguf", start_node="r",
                  nodes=[new_node("GenerateAndSpeak", "r")])
    window.set_asset(asset)
    dock = window.dock(VramEstimatorDock)
    dock.update_estimate()
    assert dock.estimate is not None
    assert any("nosuchuser" in p.message for p in dock.estimate.problems)
