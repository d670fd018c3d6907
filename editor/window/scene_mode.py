"""The window with a scene open (``*.scene.json``): the conversation is the scene's, the canvas one NPC's graph.

A scene holds no graph of its own: each NPC runs its own agent asset. So the canvas, Properties and
the undo history show one NPC's asset at a time, opened from its file like any asset (the Conversation
dock's "Canvas shows" picks which; saving saves that asset), while the Conversation dock and the Turn
Inspector show the scene, which runs on a thread of its own (``editor.session.scene``). Edits to the
NPC on the canvas apply to its next turn in the scene. Opening an asset (or File > New) leaves the scene."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from editor import settings as app_settings
from editor.docks.turn_inspector.dock import TurnInspectorDock
from editor.session.scene import SceneConversation
from runtime.asset.model import Asset
from runtime.scene.model import SCENE_SUFFIX, SceneAsset, SceneError, load_scene

if TYPE_CHECKING:
    from editor.window.main_window import MainWindow


def is_scene_file(path: str) -> bool:
    return path.lower().endswith(SCENE_SUFFIX)


class SceneMode:
    """The window's scene, if one is open: which file, which NPC the canvas shows."""

    def __init__(self, window: MainWindow, scene: SceneConversation) -> None:
        self.window = window
        self.scene = scene
        self.path = ""  # the scene file ("" when the window shows a plain asset)
        self.asset: SceneAsset | None = None
        self.npc = ""  # the NPC whose graph the canvas shows
        self.as_example = False  # opened from the examples: its NPCs' assets open as unsaved copies
        scene.canvas_graph = self.canvas_graph
        scene.backend_maker = window._backend_maker

    @property
    def active(self) -> bool:
        return bool(self.path)

    def open(self, path: str, as_example: bool = False) -> bool:
        """Open the scene at ``path``: the conversation is the scene's, the canvas its first NPC's graph
        there. A scene file that cannot be read is refused, its problems in the Problems dock."""
        window = self.window
        if not window.maybe_save():
            return False
        try:
            asset = load_scene(path)
        except SceneError as exc:
            window.load_problems = list(exc.problems)
            window._show_problems()
            window.problems_dock.raise_()
            window.statusBar().showMessage(f"Could not open the scene {path}: see Problems", 8000)
            return False
        self.path, self.asset, self.as_example, self.npc = str(Path(path).resolve()), asset, as_example, ""
        first = next((npc.id for npc in asset.npcs if npc.present), asset.npcs[0].id)
        if not self.show_npc(first, ask=False) or not self.scene.open(self.path):
            self.leave()
            return False
        if not as_example:
            app_settings.add_recent_file(path)
            window.files.fill_recent_menu()
        dock = window.conversation_dock
        dock.show()
        dock.raise_()
        window.statusBar().showMessage(f"Opened the scene {Path(path).name}: the canvas shows one NPC's graph at a "
                                       "time (Conversation dock \u25b8 Canvas shows)", 8000)
        return True

    def show_npc(self, npc: str, ask: bool = True) -> bool:
        """Show ``npc``'s graph on the canvas (with ``ask``, asking first about unsaved edits to the one shown)."""
        if self.asset is None:
            return False
        if npc == self.npc:
            return True
        entry = self.asset.npc(npc)
        path = Path(self.path).parent / entry.asset
        window = self.window
        if not window.files.open_path(str(path), as_example=self.as_example, remember=False, keep_scene=True,
                                     ask=ask):
            panel = window.conversation_dock.scene_panel
            if panel is not None:
                panel.set_canvas_npc(self.npc)  # the picker goes back to the graph still shown
            return False
        self.npc = npc
        panel = window.conversation_dock.scene_panel
        if panel is not None:
            panel.set_canvas_npc(npc)
        self.scene.note_canvas_graph(npc, window.document.asset)
        window._update_title()
        return True

    def leave(self) -> None:
        """Show a plain asset again: the scene closes (its conversation with it)."""
        if not self.active and self.asset is None:
            return
        self.path, self.asset, self.npc = "", None, ""
        self.scene.close_scene()
        self.window._update_title()

    def canvas_graph(self) -> tuple[str, Asset, str] | None:
        """The NPC on the canvas, its graph as edited and its folder (what the scene's next round runs)."""
        if not self.active or not self.npc:
            return None
        doc = self.window.document
        return self.npc, doc.asset, str(doc.asset_dir) if doc.asset_dir else ""

    def title_prefix(self) -> str:
        """The window title's start: the scene and the NPC shown ("" without a scene)."""
        if not self.active or self.asset is None:
            return ""
        name = self.asset.npc(self.npc).name if self.npc else ""
        return f"{Path(self.path).name}: {name} \u2014 "

    def draws_inspected_path(self) -> bool:
        """Whether the Turn Inspector's turn may be marked on the canvas: not a scene's, or the turn of
        the NPC whose graph the canvas shows."""
        inspector = self.window.docks.get("TurnInspectorDock")  # (none yet while the window builds it)
        npc = inspector.shown_scene_npc() if isinstance(inspector, TurnInspectorDock) else ""
        return not npc or (self.active and npc == self.npc)
