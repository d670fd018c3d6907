"""Writing a file so that it is never half written: a temporary file beside it, flushed, then
renamed over it (``atomic_write_text``); temporary files a killed save left are cleaned up."""

from __future__ import annotations

import os
import re
import secrets
import stat
import time
from pathlib import Path

from runtime.names import utf8

# A temporary file of an atomic write: ".NAME.XXXXXXXX.tmp" beside NAME (tempfile.mkstemp's names
# from earlier versions have the same shape). One older than this was left by a killed save.
_STALE_TEMP_SECONDS = 60


def _temp_pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"\.{re.escape(name)}\.[a-z0-9_]{{8}}\.tmp")


def remove_stale_temp_files(path: str | os.PathLike[str]) -> None:
    """Remove the temporary files that saves of ``path`` killed midway left beside it (only ours,
    by their name, and only those a minute old, so a save running elsewhere is left alone)."""
    target = Path(os.path.realpath(path))
    pattern = _temp_pattern(target.name)
    now = time.time()
    try:
        with os.scandir(target.parent) as entries:
            stale = [entry.path for entry in entries if pattern.fullmatch(entry.name)
                     and entry.is_file(follow_symlinks=False)
                     and now - entry.stat(follow_symlinks=False).st_mtime > _STALE_TEMP_SECONDS]
    except OSError:
        return
    for name in stale:
        try:
            os.unlink(name)
        except OSError:
            pass


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` as UTF-8 through a temporary file beside it and a rename.

    A symlink stays a link: the file it points to is replaced. A file keeps its permission bits;
    a new one gets the usual ones (0666 less the umask). Lone surrogates, which UTF-8 cannot hold,
    are written as U+FFFD. Temporary files that killed saves left are removed (see
    ``remove_stale_temp_files``)."""
    target = Path(os.path.realpath(path))
    remove_stale_temp_files(target)
    data = utf8(text)
    try:
        mode: int | None = stat.S_IMODE(os.stat(target).st_mode)
    except OSError:
        mode = None
    fd, tmp = _create_temp_file(target)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if mode is not None and hasattr(os, "fchmod"):
                os.fchmod(fh.fileno(), mode)
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _create_temp_file(target: Path) -> tuple[int, str]:
    """A new, empty temporary file beside ``target``, opened for writing; its mode is 0666 less the
    umask, as any new file's (``tempfile.mkstemp`` makes 0600 files)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    for _ in range(100):
        tmp = str(target.parent / f".{target.name}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary file name beside {target}")
