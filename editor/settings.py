"""Where Parley Studio keeps its settings and recovery files.

``PARLEY_STUDIO_SETTINGS`` (an .ini path) and ``PARLEY_STUDIO_RECOVERY`` (a folder)
move them elsewhere; tests point both at a temporary folder so they never touch
a designer's own settings.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from PySide6.QtCore import QSettings, QStandardPaths

SETTINGS_ENV = "PARLEY_STUDIO_SETTINGS"
RECOVERY_ENV = "PARLEY_STUDIO_RECOVERY"
MAX_RECENT = 10


def app_settings() -> QSettings:
    path = os.environ.get(SETTINGS_ENV)
    if path:
        return QSettings(path, QSettings.Format.IniFormat)
    return QSettings(QSettings.Format.IniFormat, QSettings.Scope.UserScope, "Parley", "Parley Studio")


def recovery_dir() -> Path:
    """The recovery folder, created when it can be. Never raises: a folder that cannot be made
    (``PARLEY_STUDIO_RECOVERY`` names a file, or a place that cannot be written) is returned as it
    is; autosave then says why it cannot write there, and the editor starts all the same."""
    path = os.environ.get(RECOVERY_ENV)
    if path:
        folder = Path(path)
    else:
        base = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.AppLocalDataLocation)
        folder = Path(base or Path.home() / ".parley-studio") / "recovery"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        logging.getLogger("parley.editor").warning(
            "the recovery folder %s cannot be used (%s); autosave is off until it can be: set %s to a "
            "folder you can write", folder, exc.strerror or exc, RECOVERY_ENV)
    return folder


def recent_files() -> list[str]:
    value = app_settings().value("recent_files", [])
    if isinstance(value, str):
        value = [value]
    return [str(v) for v in (value or []) if v]


def add_recent_file(path: str) -> list[str]:
    path = str(Path(path).resolve())
    files = [path] + [p for p in recent_files() if p != path]
    files = files[:MAX_RECENT]
    settings = app_settings()
    settings.setValue("recent_files", files)
    settings.sync()
    return files


def clear_recent_files() -> None:
    settings = app_settings()
    settings.remove("recent_files")
    settings.sync()
