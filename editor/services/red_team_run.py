"""A red-team run from the Tests dock, off the UI thread.

"Red team" plays a suite's ``red_team`` settings (the shipped attack pack and the suite's own, its
secrets and benign lines; the defaults when the suite has no such section) against the open asset
as it is in the editor, unsaved edits included, through ``runtime.suites.redteam.run_red_team``
on a thread of its own with a backend of its own (one run at a time). The report is re-emitted from
the UI thread; each successful attack keeps its turn, which the dock opens in the Turn Inspector.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from editor.threads.thread_service import RequestRunService
from runtime.asset.model import Asset
from runtime.backends.base import Backend
from runtime.suites.file import load_suite
from runtime.suites.redteam import RedTeamReport, options_from_suite, run_red_team

BackendFactory = Callable[[], Backend]


@dataclass
class RedTeamRequest:
    """What one red-team run plays: a suite's settings against an asset (the document's graph)."""

    suite: Path
    asset: Asset  # as its file holds it, the suite's model put in
    asset_dir: str
    label: str  # how the panel names the asset
    stopped: bool = False


def _red_team(request: RedTeamRequest, make_backend: BackendFactory, cancel: threading.Event,
              report_attempt: Callable[[object], None]) -> RedTeamReport:
    """One run, off the UI thread: the suite as its file is now; each attempt reported as it ends."""
    loaded = load_suite(request.suite)
    options = options_from_suite(loaded)
    options.cancel = cancel
    options.on_attempt = report_attempt
    asset = request.asset
    if loaded.suite.model:
        asset = asset.model_copy(update={"default_model": loaded.suite.model})
    backend = make_backend()
    try:
        report = run_red_team(asset, request.asset_dir or None, backend, options)
    finally:
        backend.close()
    report.asset = request.label
    return report


class RedTeamRun(RequestRunService):
    """The window's red-team runs (one at a time). Lives on the UI thread; all its signals are
    emitted there: ``started`` (RedTeamRequest), ``attempted``, then ``finished`` (RedTeamRequest,
    RedTeamReport) or ``failed`` (RedTeamRequest, why)."""

    attempted = Signal(object)  # runtime.suites.redteam.Attempt, as each attack's turn ends

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__("parley-red-team", parent)

    def start(self, request: RedTeamRequest, make_backend: BackendFactory) -> bool:
        """Run on the worker thread; False when one is going on or the window closed."""
        cancel = self._begin(request)
        if cancel is None:
            return False
        job = self._new_job(lambda: _red_team(request, make_backend, cancel, job.report))
        job.yielded.connect(lambda attempt: None if self.closed else self.attempted.emit(attempt))
        return self._launch(job)

    def _failure_text(self, exc: Exception) -> str:
        return str(exc) if hasattr(exc, "problems") else super()._failure_text(exc)
