"""``parley serve``'s crash reports: the state folder they go to, and the crashes earlier servers
left there, told once as the next server starts (in its log, and in ``GET /v1/health``)."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from runtime.crashes import Crash, describe_when, left_behind
from runtime.serve.protocol import PreviousCrash

STATE_ENV = "PARLEY_SERVE_STATE"
WATCH_NAME = "parley-serve"  # its crash files are parley-serve-PID.crash

log = logging.getLogger("parley.serve")


def state_dir(given: Path | None = None) -> Path:
    """Where a server keeps what must outlive it: ``--state-dir``, else ``$PARLEY_SERVE_STATE``, else
    ``serve`` in the user's data folder (beside the models folder). Not created here."""
    if given is not None:
        return given
    named = os.environ.get(STATE_ENV, "").strip()
    if named:
        return Path(named).expanduser()
    import platformdirs

    from runtime.models.folder import APP_NAME

    return platformdirs.user_data_path(APP_NAME, appauthor=False) / "serve"


def tell_earlier_crashes(folder: Path) -> PreviousCrash | None:
    """Log each crash report that earlier servers left in ``folder`` (at ERROR: the signal, where it
    struck, what ran and every thread's stack), then forget it, so the next start does not tell it
    again. Returns the latest, as ``GET /v1/health`` tells it (None: no server crashed)."""
    crashes = left_behind(folder, WATCH_NAME)
    for crash in reversed(crashes):  # oldest first, as they happened
        log.error("the parley serve before this one (pid %d, %s) %s. Its report, from %s:\n%s", crash.pid,
                  describe_when(crash.when), crash.summary(), crash.file,
                  crash.text.rstrip() or "(empty: it was killed, or its machine stopped)")
        crash.forget()
    return told(crashes[0]) if crashes else None


def told(crash: Crash) -> PreviousCrash:
    """A crash as ``GET /v1/health`` tells it."""
    return PreviousCrash(summary=crash.summary(), signal=crash.signal, where=crash.where,
                         running=crash.note.splitlines(), pid=crash.pid,
                         when=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(crash.when)))
