"""Autosave to a recovery file, and recovery files offered back after a crash.

While a document has unsaved changes it is written every ``interval_ms`` to a
recovery file of its own (the asset plus where it came from). Saving or closing
normally deletes the file, so a recovery file that is still there when Parley
Studio starts was left by a crash.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject, QTimer

from editor.document import Document
from runtime.asset import Asset
from runtime.asset_file import asset_from_dict, asset_to_dict, atomic_write_text
from runtime.problems import AssetError

SUFFIX = ".recovery.json"


@dataclass
class Recovery:
    """A recovery file left behind: what it holds and where the asset came from."""

    file: Path
    original_path: str
    saved_at: float
    asset: Asset


class Autosave(QObject):
    """Writes the document's unsaved state to its recovery file on a timer."""

    def __init__(self, document: Document, directory: Path, interval_ms: int = 30_000,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.document = document
        self.file = directory / f"{os.getpid()}-{uuid.uuid4().hex[:8]}{SUFFIX}"
        self._written_index = -1
        self.timer = QTimer(self)
        self.timer.setInterval(interval_ms)
        self.timer.timeout.connect(self.save_now)
        self.timer.start()
        document.undo_stack.cleanChanged.connect(self._clean_changed)

    def save_now(self) -> bool:
        """Write the recovery file if there are unsaved changes not yet written."""
        doc = self.document
        if not doc.modified:
            return False
        if doc.undo_stack.index() == self._written_index and self.file.exists():
            return False
        record = {"original_path": doc.path, "saved_at": time.time(), "asset": asset_to_dict(doc.asset)}
        atomic_write_text(self.file, json.dumps(record, ensure_ascii=False))
        self._written_index = doc.undo_stack.index()
        return True

    def discard(self) -> None:
        self._written_index = -1
        try:
            self.file.unlink()
        except FileNotFoundError:
            pass

    def _clean_changed(self, clean: bool) -> None:
        if clean:
            self.discard()

    def stop(self) -> None:
        self.timer.stop()
        self.discard()


def left_behind(directory: Path) -> list[Recovery]:
    """Recovery files of sessions that are no longer running, newest first."""
    found: list[Recovery] = []
    for file in directory.glob(f"*{SUFFIX}"):
        pid = file.name.split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and _running(int(pid)):
            continue
        if pid.isdigit() and int(pid) == os.getpid():
            continue
        try:
            record = json.loads(file.read_text(encoding="utf-8"))
            asset = asset_from_dict(record["asset"], str(file))
        except (OSError, ValueError, KeyError, TypeError, AssetError):
            continue  # unreadable: leave it for a person to look at, never delete it silently
        found.append(Recovery(file, str(record.get("original_path") or ""), float(record.get("saved_at", 0)), asset))
    return sorted(found, key=lambda r: r.saved_at, reverse=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
