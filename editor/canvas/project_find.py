"""Find in Project (Ctrl+Shift+F): what Find Node does for one asset, across the project.

It searches the open asset (as it is now, saved or not), the behaviour files its Subgraph nodes run
(theirs too), and every other asset file in its folder and the folders below it (``FOLDER_DEPTH``
deep, ``MOST_FILES`` files at most), for nodes by what they say (``find_nodes``) and for backdrops
and notes by their titles and text. Each result names its file and its node or note; picking one
opens the file (in the window that has it open, else a new one: ``editor.window.edit_menu``) and
selects the node or note.
The files are read once when the popup opens, not on each key typed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QPoint, Signal
from PySide6.QtWidgets import QListWidgetItem, QWidget

from editor.canvas.node_find import ID_ROLE, SHOWN, NodeFind, find_nodes, match_snippet
from editor.canvas.subgraphs import files_used
from runtime.asset.file import load_asset
from runtime.asset.model import Asset
from runtime.problems import AssetError

FOLDER_DEPTH = 3  # folders below the asset's that are searched
MOST_FILES = 200  # asset files read at most: a folder of thousands of JSON files is not a project
LARGEST_FILE = 5_000_000  # bytes; a larger JSON file is data, not an asset someone edits
SKIPPED_FOLDERS = {"node_modules", "__pycache__", "venv", "build", "dist"}
THIS_ASSET = "this asset"


@dataclass(frozen=True)
class ProjectFile:
    """One asset the search reads: ``path`` None is the open asset (its unsaved state)."""

    path: Path | None
    label: str  # how results name it: "this asset", "behaviours/guard.json"
    role: str  # "this asset", "behaviour" or "asset"
    asset: Asset


@dataclass(frozen=True)
class ProjectMatch:
    file: ProjectFile
    kind: str  # "node", "backdrop" or "note"
    item_id: str  # the node's or the comment's id
    title: str
    field: str  # where it matched: "id", "title", "text", "system_prompt", ...
    snippet: str

    def name(self) -> str:
        """'guard.json \u203a classify (Classify the line)', 'this asset \u203a note "Ideas"'."""
        if self.kind == "node":
            what = self.title if self.title == self.item_id else f"{self.title} ({self.item_id})"
        else:
            what = f'{self.kind} "{self.title}"' if self.title else f"{self.kind} {self.item_id}"
        return f"{self.file.label} \u203a {what}"


# path -> ((modified time, size), the asset or None when the file is no asset): read again when it changes
_READ: dict[Path, tuple[tuple[int, int], Asset | None]] = {}


def _read(path: Path) -> Asset | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    stamp = (stat.st_mtime_ns, stat.st_size)
    seen = _READ.get(path)
    if seen is not None and seen[0] == stamp:
        return seen[1]
    asset = None
    if stat.st_size <= LARGEST_FILE:
        try:
            asset = load_asset(path)
        except (AssetError, OSError, ValueError):
            asset = None  # a scene, a settings file, a broken file: not searched
    if len(_READ) > 4 * MOST_FILES:
        _READ.clear()
    _READ[path] = (stamp, asset)
    return asset


def _folder_files(folder: Path) -> list[Path]:
    """The JSON files in ``folder`` and below (``FOLDER_DEPTH``), hidden folders and build output
    left out, by their path."""
    found: list[Path] = []
    for root, dirs, files in os.walk(folder):
        here = Path(root)
        depth = len(here.relative_to(folder).parts)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIPPED_FOLDERS
                         and depth < FOLDER_DEPTH)
        found += [here / f for f in sorted(files) if f.endswith(".json") and not f.startswith(".")]
        if len(found) >= MOST_FILES:
            break
    return found[:MOST_FILES]


def _label(path: Path, folder: Path | None) -> str:
    try:
        return path.relative_to(folder).as_posix() if folder is not None else path.name
    except ValueError:
        return str(path)  # a behaviour outside the asset's folder


def project_files(asset: Asset, asset_dir: Path | None, own_path: str = "") -> list[ProjectFile]:
    """What Find in Project searches: the open asset first, then the behaviours it runs, then the
    other assets in its folder (each file once; files that are not assets are left out)."""
    out = [ProjectFile(None, THIS_ASSET, THIS_ASSET, asset)]
    seen = {Path(own_path).resolve()} if own_path else set()
    folder = asset_dir.resolve() if asset_dir is not None and asset_dir.is_dir() else None
    behaviours = files_used(asset, asset_dir)
    candidates = [(p, "behaviour") for p in behaviours]
    if folder is not None:
        candidates += [(p, "asset") for p in _folder_files(folder)]
    for path, role in candidates:
        path = path.resolve()
        if path in seen:
            continue
        seen.add(path)
        found = _read(path)
        if found is not None and (found.nodes or found.comments):
            out.append(ProjectFile(path, _label(path, folder), role, found))
    return out


def find_in_files(files: list[ProjectFile], text: str) -> list[ProjectMatch]:
    """The nodes, backdrops and notes of ``files`` that say ``text`` (case ignored), file by file in
    ``files``' order; in each, the nodes as ``find_nodes`` orders them, then the comments. Empty text
    finds nothing."""
    needle = text.strip().lower()
    if not needle:
        return []
    out: list[ProjectMatch] = []
    for file in files:
        for match in find_nodes(file.asset, needle):
            out.append(ProjectMatch(file, "node", match.node_id, match.title, match.field, match.snippet))
        for comment in file.asset.comments:
            for field in ("title", "text", "id"):
                value = getattr(comment, field)
                at = value.lower().find(needle)
                if at >= 0:
                    out.append(ProjectMatch(file, comment.kind, comment.id, comment.title, field,
                                            match_snippet(value, at, len(needle))))
                    break
    return out


def find_in_project(asset: Asset, asset_dir: Path | None, text: str, own_path: str = "") -> list[ProjectMatch]:
    """``find_in_files`` over ``project_files``."""
    return find_in_files(project_files(asset, asset_dir, own_path), text)


class ProjectFind(NodeFind):
    """The popup; ``chosen_match`` carries the ``ProjectMatch`` picked."""

    chosen_match = Signal(object)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("projectFind")
        self.files: list[ProjectFile] = []
        self.found: list[ProjectMatch] = []
        self.line.setPlaceholderText("Find in this asset, its behaviours and the assets in its folder")
        self.nothing.setWordWrap(True)

    def popup_for(self, asset: Asset, asset_dir: Path | None, own_path: str, global_pos: QPoint,
                  width: int = 520) -> None:
        """Read the project of ``asset`` (saved as ``own_path``, in ``asset_dir``) and show the popup
        with its top centre at ``global_pos``."""
        self.files = project_files(asset, asset_dir, own_path)
        self.popup_at(asset, global_pos, width)

    def matches(self) -> list[str]:
        """The listed results as 'file \u203a node' names, in order."""
        return [self.found[self.list.item(i).data(ID_ROLE)].name() for i in range(self.list.count())]

    def searched(self) -> str:
        """What is searched, in words: 'this asset, 2 behaviours and 5 other assets'."""
        behaviours = sum(f.role == "behaviour" for f in self.files)
        others = sum(f.role == "asset" for f in self.files)
        parts = [THIS_ASSET]
        if behaviours:
            parts.append(f"{behaviours} behaviour{'s' if behaviours != 1 else ''}")
        if others:
            parts.append(f"{others} other asset{'s' if others != 1 else ''}")
        return ", ".join(parts[:-1]) + (" and " if len(parts) > 1 else "") + parts[-1]

    def _narrow(self, text: str) -> None:
        self.list.clear()
        self.found = find_in_files(self.files, text) if hasattr(self, "files") else []
        for index, match in enumerate(self.found[:SHOWN]):
            where = f"\n    {match.field}: {match.snippet}" if match.field not in ("id", "title") else ""
            item = QListWidgetItem(match.name() + where)
            item.setData(ID_ROLE, index)
            path = str(match.file.path) if match.file.path is not None else THIS_ASSET
            item.setToolTip(f"{path}\n{match.field}: {match.snippet}")
            self.list.addItem(item)
        if self.list.count():
            self.list.setCurrentRow(0)
        if not text.strip():
            self.nothing.setText(f"Type to search {self.searched() if hasattr(self, 'files') else THIS_ASSET}.")
        else:
            self.nothing.setText(f"Nothing in {self.searched()} says that.")
        self.nothing.setVisible(not self.found)
        self._fit_list()

    def _pick(self, item: QListWidgetItem | None) -> None:
        if item is not None:
            self.hide()
            self.chosen_match.emit(self.found[item.data(ID_ROLE)])

