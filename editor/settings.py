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


def forget_recent_files(paths: list[str]) -> list[str]:
    """Take ``paths`` off the recent files (the start page's Forget Missing Files); returns the rest."""
    gone = set(paths)
    files = [p for p in recent_files() if p not in gone]
    settings = app_settings()
    settings.setValue("recent_files", files)
    settings.sync()
    return files


def clear_recent_files() -> None:
    settings = app_settings()
    settings.remove("recent_files")
    settings.sync()


# --- the embedded backend's cache snapshots ---------------------------------------------------

SNAPSHOT_BUDGET_KEY = "backend/snapshot_budget_mib"
# More than any machine this runs on has: a larger number is a typo, not a budget.
MAX_SNAPSHOT_BUDGET_MIB = 1 << 20


def default_snapshot_budget_mib() -> int:
    """The embedded backend's own budget (``runtime.models.context_settings.SNAPSHOT_BUDGET_MIB``); 0
    when llama.cpp's bindings are not installed, as there is then no embedded backend to take snapshots.
    Whether they are is asked without loading them (the window asks as it starts; loading takes 0.1 s)."""
    import importlib.util

    from runtime.models.context_settings import SNAPSHOT_BUDGET_MIB

    try:
        installed = importlib.util.find_spec("llama_cpp") is not None
    except (ImportError, ValueError):  # pragma: no cover - depends on the install
        installed = False
    return int(SNAPSHOT_BUDGET_MIB) if installed else 0


def snapshot_budget_mib() -> int:
    """The RAM, in MiB, the embedded backend's cache snapshots may take together (0: no snapshots), as
    the designer set it, else the backend's default. A value in the settings file that is not a whole
    number from 0 to MAX_SNAPSHOT_BUDGET_MIB is ignored with a warning naming the file and the key."""
    store = app_settings()
    value = store.value(SNAPSHOT_BUDGET_KEY)
    if value is None or value == "":
        return default_snapshot_budget_mib()
    try:
        mib = int(str(value).strip())
    except ValueError:
        mib = -1
    if not 0 <= mib <= MAX_SNAPSHOT_BUDGET_MIB:
        default = default_snapshot_budget_mib()
        logging.getLogger("parley.editor").warning(
            "%s: %s is %r, not a number of MiB from 0 to %d; using %d MiB (set it again under Backend \u2192 "
            "Cache snapshot budget)", store.fileName(), SNAPSHOT_BUDGET_KEY, value, MAX_SNAPSHOT_BUDGET_MIB, default)
        return default
    return mib


def set_snapshot_budget_mib(mib: int) -> None:
    if not 0 <= int(mib) <= MAX_SNAPSHOT_BUDGET_MIB:
        raise ValueError(f"a cache snapshot budget is 0 to {MAX_SNAPSHOT_BUDGET_MIB} MiB, not {mib}")
    store = app_settings()
    store.setValue(SNAPSHOT_BUDGET_KEY, int(mib))
    store.sync()
