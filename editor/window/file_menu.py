"""The File menu's asset files: open (with Open Recent and Examples), save, save as, the question
about unsaved changes, and what a crash left behind."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtWidgets import QFileDialog, QMenu, QMessageBox

from editor import settings as app_settings
from editor.services.recovery import offer_left_behind, tell_lone_crashes, what_crashed
from editor.window.scene_mode import is_scene_file
from editor.window.start_page import empty_agent
from runtime.asset.file import load_asset_for_editing, save_asset
from runtime.problems import AssetError
from runtime.resources import examples_dir

if TYPE_CHECKING:
    from editor.window.main_window import MainWindow

FILE_FILTER = "Parley assets (*.json);;All files (*)"
OPEN_FILTER = "Parley assets and scenes (*.json);;Scenes (*.scene.json);;All files (*)"


class FileMenu:
    """The asset files of ``window``: it shows what is opened (``set_asset``) and its problems."""

    def __init__(self, window: MainWindow) -> None:
        self.window = window
        self.document = window.document
        self.recent_menu: QMenu | None = None
        self.examples_menu: QMenu | None = None

    def add_recent_and_examples(self, file_menu: QMenu) -> None:
        """File > Open Recent (filled as it opens) and File > Examples."""
        self.recent_menu = file_menu.addMenu("Open &Recent")
        self.examples_menu = file_menu.addMenu("&Examples")
        for path in sorted(examples_dir().glob("*.json")):
            action = self.examples_menu.addAction(path.stem.replace("_", " ").capitalize())
            action.setData(str(path))
            action.triggered.connect(lambda _c=False, p=str(path): self.window.open_path(p, as_example=True))
        scenes = sorted((examples_dir() / "scenes").glob("*.scene.json"))
        if scenes:
            self.examples_menu.addSection("Scenes")
        for path in scenes:
            title = path.name.removesuffix(".scene.json").replace("_", " ").capitalize()
            action = self.examples_menu.addAction(f"{title} (scene)")
            action.setData(str(path))
            action.triggered.connect(lambda _c=False, p=str(path): self.window.open_path(p, as_example=True))
        self.recent_menu.aboutToShow.connect(self.fill_recent_menu)
        self.fill_recent_menu()

    def fill_recent_menu(self) -> None:
        self.recent_menu.clear()
        files = app_settings.recent_files()
        for path in files:
            there = Path(path).is_file()
            action = self.recent_menu.addAction(path if there else f"{path} (not found)")
            action.setEnabled(there)  # moved or deleted: the start page can forget it
            action.triggered.connect(lambda _c=False, p=path: self.window.open_path(p))
        if files:
            self.recent_menu.addSeparator()
            self.recent_menu.addAction("Clear", lambda: (app_settings.clear_recent_files(), self.fill_recent_menu()))
        self.recent_menu.setEnabled(bool(files))

    def _remember_recent(self, path: str) -> None:
        app_settings.add_recent_file(path)
        self.fill_recent_menu()

    def maybe_save(self) -> bool:
        """Ask what to do with unsaved changes; False means the person cancelled."""
        if not self.document.modified:
            return True
        name = Path(self.document.path).name if self.document.path else "Untitled"
        answer = QMessageBox.question(
            self.window, "Unsaved changes", f"Save the changes to {name} before closing it?",
            QMessageBox.StandardButton.Save | QMessageBox.StandardButton.Discard | QMessageBox.StandardButton.Cancel,
            QMessageBox.StandardButton.Save,
        )
        if answer == QMessageBox.StandardButton.Save:
            return self.save()
        return answer == QMessageBox.StandardButton.Discard

    def new_asset(self) -> bool:
        """File > New: an agent with one reply node (``empty_agent``), never an error; False if cancelled."""
        if not self.maybe_save():
            return False
        self.window.scene_mode.leave()
        self.window.set_asset(empty_agent())
        return True

    def open_dialog(self) -> None:
        start = str(Path(self.document.path).parent) if self.document.path else ""
        path, _ = QFileDialog.getOpenFileName(self.window, "Open asset or scene", start, OPEN_FILTER)
        if path:
            self.open_path(path)

    def open_path(self, path: str, as_example: bool = False, *, remember: bool = True, keep_scene: bool = False,
                  ask: bool = True) -> bool:
        """Open an asset, or a scene (``*.scene.json``: ``SceneMode.open``). A file the model refuses values of
        opens repaired (``load_asset_for_editing``), with each repair in the Problems dock and the document
        marked modified, so the file changes only when the designer saves. A file that cannot be read as an
        asset at all is refused: its errors go to the Problems dock and the current asset stays.

        ``keep_scene``: an NPC's asset of the open scene (the scene stays open); ``remember``: put it in the
        recent files; ``ask``: ask about unsaved changes first (False: the caller just did)."""
        window = self.window
        if is_scene_file(path) and not keep_scene:
            return window.scene_mode.open(path, as_example)
        if ask and not self.maybe_save():
            return False
        started = time.perf_counter()
        try:
            opened = load_asset_for_editing(path)
        except AssetError as exc:
            window.load_problems = list(exc.problems)
            window._show_problems()
            window.problems_dock.raise_()
            window.statusBar().showMessage(f"Could not open {path}: see Problems", 8000)
            return False
        if not keep_scene:
            window.scene_mode.leave()
        # An example opens as a new, unsaved asset, so saving never overwrites the shipped file.
        # An example keeps its folder: its behaviours and files are found there until it is saved elsewhere.
        window.set_asset(opened.asset, "" if as_example else str(Path(path).resolve()),
                         modified=bool(opened.problems), folder=str(Path(path).resolve().parent))
        if not as_example and remember:
            self._remember_recent(path)
        if opened.problems:
            window.load_problems = list(opened.problems)
            window._show_problems()
            window.problems_dock.raise_()
            count = len(opened.problems)
            window.statusBar().showMessage(
                f"Opened {path} with {count} value{'s' if count != 1 else ''} changed to open it: see Problems. "
                "The file is unchanged until you save.", 15_000)
            return True
        window.statusBar().showMessage(f"Opened {path} in {1000 * (time.perf_counter() - started):.0f} ms", 5000)
        return True

    def save(self) -> bool:
        if not self.document.path:
            return self.save_as()
        return self.save_to(self.document.path)

    def save_as(self) -> bool:
        suggested = self.document.path or f"{self.document.asset.name.lower().replace(' ', '_')}.json"
        path, _ = QFileDialog.getSaveFileName(self.window, "Save asset", suggested, FILE_FILTER)
        if not path:
            return False
        if not path.endswith(".json"):
            path += ".json"
        return self.save_to(path)

    def save_to(self, path: str) -> bool:
        window = self.window
        try:
            save_asset(self.document.asset, path)
        except OSError as exc:
            QMessageBox.critical(window, "Save failed", f"Could not save {path}:\n{exc.strerror or exc}\n"
                                 "Nothing was lost: the asset is still open. Choose another place with Save As.")
            return False
        self.document.set_path(str(Path(path).resolve()))
        self.document.undo_stack.setClean()
        window.load_problems = []  # the file now holds what the editor shows
        window.autosave.save_now()  # the asset needs no keeping now; the conversation may
        self._remember_recent(path)
        window._after_edit()
        window._update_title()
        window.statusBar().showMessage(f"Saved {path}", 4000)
        return True

    def offer_recovery(self) -> bool:
        """Offer back what a crash left (every recovery file, in one question, saying what crashed); True
        if one was opened: its graph, and its conversation continued in the Conversation dock with the
        line that was being said back in the box."""
        window = self.window
        folder = app_settings.recovery_dir()
        told = tell_lone_crashes(folder)
        if told:
            window.statusBar().showMessage(told, 15_000)
        found = offer_left_behind(window, folder)
        if found is None:
            return False
        window.scene_mode.leave()
        window.set_asset(found.asset, found.original_path, modified=found.modified, folder=found.folder)
        found.forget()
        if found.conversation is not None or found.line:
            window.conversation_dock.continue_from(found.conversation, found.line, what_crashed(found))
        window.autosave.save_now()
        return True
