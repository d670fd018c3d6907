"""Running conversation test suites from the editor, on a thread of their own.

``SuiteRun`` lives on the UI thread; each run is a ``ThreadJob`` that calls
``runtime.suites.run.run_suites`` and reports every finished turn and case as it happens. The
service re-emits those reports from the UI thread, so the Tests dock (and pytest-qt) only ever
sees signals from the UI thread. Stop cancels the running turn and skips the cases not run yet;
closing the window does the same and waits for the thread. The run has a backend (a model copy,
or its own connection to the server the designer picked) of its own, so the test conversation in
the Conversation dock is untouched by it. Runs use the backend picked for the window
(``backend_factory``, set by the window from its ``BackendChoice``).

Each finished case is kept (``runtime.suites.kept``: its current run and, when it passed, as its
last passing run, in the user's data folder) on the run's thread, before the dock hears of it; the
Tests dock then compares a failed turn with the same turn of the last passing run (``TurnComparison``).

``SuiteReading`` (``SuiteRun.reading``) reads the suite files beside an asset on a thread of its
own too: a large suite takes seconds to parse, and the UI must not wait for it.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, QTimer, Signal

from editor.threads.thread_service import OneRunService, ThreadService
from runtime.asset.model import Asset
from runtime.backends.base import Backend
from runtime.suites.file import SUITE_SUFFIXES, LoadedSuite, suites_beside
from runtime.suites.kept import AssetChange, KeptRuns, kept_run
from runtime.suites.report import CaseResult, Report
from runtime.suites.run import run_suites

if TYPE_CHECKING:
    from editor.session.record import InspectedTurn

log = logging.getLogger("parley.editor")

BackendFactory = Callable[[], Backend]
# asset folder -> a maker of the backends a run uses (the window's backend choice)
BackendFactoryFor = Callable[[str], BackendFactory]


@dataclass
class TurnComparison:
    """A test turn beside the same turn of its case's last passing run, as the Turn Inspector opens it."""

    against: InspectedTurn | None  # the passing run's turn (None: no passing run kept, or it had no prompts)
    against_label: str  # how the pickers name it
    focus: str = ""  # the node whose expectation failed ("": the replying node)
    changes: list[AssetChange] = field(default_factory=list)  # the asset edits since that run
    why_none: str = ""  # when ``against`` is None: why
    headers: tuple[str, str] = ("Was (passing run)", "Now")  # the edit list's two value columns
    no_changes: str = ""  # what the edit list says when there are none ("": no edits since the passing run)
    note_heading: str = "expected"  # what the note above the turn's path is headed


def _run(loaded: list[LoadedSuite], make_backend: BackendFactory, cancel: threading.Event, kept: KeptRuns | None,
         report: Callable[[tuple], None]) -> Report:
    """One ``run_suites`` call, off the UI thread: each finished turn reported as ("turn", suite::case,
    TurnOutcome), each finished case kept, then reported as ("case", CaseResult)."""

    def case_done(result: CaseResult) -> None:
        suite = next((s for s in loaded if s.name == result.suite), None)
        if kept is not None and suite is not None and result.error != "stopped":
            try:
                kept.keep(kept_run(suite.path, result, suite.asset))
            except OSError:  # the run still counts; only its comparison later is lost
                log.warning("could not keep the run of %s in %s", result.case, kept.folder, exc_info=True)
        report(("case", result))

    return run_suites(loaded, make_backend, on_case=case_done,
                      on_turn=lambda case_id, outcome: report(("turn", case_id, outcome)), cancel=cancel)


def _read(asset_path: str, cancel: threading.Event, edited: Asset | None = None) -> object:
    """The suites beside the asset (checked against ``edited``, the asset as the editor holds it, when
    given), or the error that kept them from being read (never raised: reading suites must never take
    the editor down)."""
    try:
        return suites_beside(asset_path, cancel=cancel, edited=edited)
    except OSError as exc:
        return exc
    except Exception as exc:
        log.exception("reading the suites beside %s failed", asset_path)
        return exc


def _has_suite_files(asset_path: str) -> bool:
    """Whether the asset's folder holds a file named like a suite (or cannot be listed: the read
    then says why)."""
    try:
        return any(entry.name.endswith(SUITE_SUFFIXES) for entry in os.scandir(os.path.dirname(asset_path) or "."))
    except OSError:
        return True


class SuiteReading(OneRunService):
    """Reads the suites beside an asset off the UI thread (one read at a time); ``listed`` is
    emitted on the UI thread. A read asked for while one goes on runs after it, and only its
    result is given: the files as they are now."""

    listed = Signal(str, object)  # asset path, list[runtime.suites.file.SuiteBeside] or an OSError

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__("parley-suite-reading", parent)
        self._next: tuple[str, Asset | None] | None = None

    def read(self, asset_path: str, edited: Asset | None = None) -> None:
        """Read the suites beside ``asset_path``; with ``edited`` (a copy the reading may keep: the asset
        with unsaved edits), check them against it instead of the file."""
        if self.closed:
            return
        if self.busy:
            self._next = (asset_path, edited)
            return
        if not _has_suite_files(asset_path):
            # Nothing to parse: no thread. (A reading thread started as a window opened was seen
            # to hang Qt now and then when several windows opened one after another.)
            QTimer.singleShot(0, lambda: None if self.closed else self.listed.emit(asset_path, []))
            return
        self._start(asset_path, edited)

    def _start(self, asset_path: str, edited: Asset | None = None) -> None:
        self._cancel = cancel = threading.Event()
        job = self._new_job(lambda: _read(asset_path, cancel, edited))
        job.returned.connect(lambda found: self._on_done(asset_path, found))
        job.start()

    def _on_done(self, asset_path: str, found: object) -> None:
        if self.closed:
            return
        self._end()
        following, self._next = self._next, None
        if following is not None:
            self._start(*following)  # asked for since this read began: the newer files win
            return
        self.listed.emit(asset_path, found)


class SuiteRun(OneRunService):
    """The window's test runs (one at a time). Lives on the UI thread; all its signals are emitted there."""

    started = Signal(int)  # how many cases will run
    turn_done = Signal(str, object)  # suite::case, TurnOutcome (as each turn finishes)
    case_done = Signal(object)  # CaseResult (as each case finishes)
    finished = Signal(object)  # Report (the whole run, with coverage); also after Stop
    failed = Signal(str)  # the run could not go on at all (not a failing case)

    def __init__(self, parent: QObject | None = None, make_backend: BackendFactory | None = None,
                 kept: KeptRuns | None = None) -> None:
        super().__init__("parley-test-run", parent)
        self.kept = kept if kept is not None else KeptRuns()  # each case's current and last passing run
        self.make_backend = make_backend  # a fixed maker (tests); else ``backend_factory``'s, else embedded
        self.backend_factory: BackendFactoryFor | None = None
        self.stopping = False
        self.reading = SuiteReading(self)  # the suite files beside an asset, read off the UI thread

    def shutdown(self, timeout_ms: int | None = None) -> None:
        """Stop the run, any reading of suite files and the other services made its children (a
        variant comparison), and wait for their threads."""
        for service in self.findChildren(ThreadService):
            service.shutdown(timeout_ms)
        super().shutdown(timeout_ms)

    def start(self, loaded: list[LoadedSuite], asset_dir: str = "") -> bool:
        """Run every case of ``loaded`` (narrow a suite's cases first to run fewer). False when a
        run is going on or the window closed. Model names resolve next to ``asset_dir``."""
        if self.busy or self.closed or not loaded:
            return False
        self._cancel = threading.Event()
        self.stopping = False
        make_backend, cancel, kept = self._maker(asset_dir), self._cancel, self.kept
        job = self._new_job(lambda: _run(loaded, make_backend, cancel, kept, job.report))
        job.yielded.connect(self._on_step)
        job.returned.connect(self._on_finished)
        job.errored.connect(self._on_failed)
        self.started.emit(sum(len(s.suite.cases) for s in loaded))
        job.start()
        return True

    def _maker(self, asset_dir: str) -> BackendFactory:
        if self.make_backend is not None:
            return self.make_backend
        if self.backend_factory is not None:
            return self.backend_factory(asset_dir)
        return _llama_backend(asset_dir)

    def stop(self) -> None:
        """Cancel the running turn; the cases not run yet end as stopped. ``finished`` follows."""
        if self.busy:
            self.stopping = True
            self._cancel.set()

    # After shutdown the window is gone: what the ending thread still reports goes nowhere.

    def _on_step(self, step: tuple) -> None:
        if self.closed:
            return
        if step[0] == "turn":
            self.turn_done.emit(step[1], step[2])
        else:
            self.case_done.emit(step[1])

    def _on_finished(self, report: Report) -> None:
        if self.closed:
            return
        self._end()
        self.finished.emit(report)

    def _on_failed(self, exc: Exception) -> None:
        if self.closed:
            return
        # a failing case is in the report; this is the run itself failing
        log.error("the test run failed", exc_info=exc)
        self._end()
        self.failed.emit(f"{type(exc).__name__}: {exc}")


def _llama_backend(asset_dir: str) -> BackendFactory:
    def make() -> Backend:
        from runtime.backends.llama import LlamaBackend

        return LlamaBackend(asset_dir or None)

    return make


MAX_EXAMPLE_CANDIDATES = 64  # asset files looked at in the folder an untitled asset was opened from
MAX_EXAMPLE_BYTES = 256 * 1024  # a bigger file is no example (the shipped ones are a few KB)


def example_source(folder: str | os.PathLike[str], asset: Asset) -> str:
    """The asset file in ``folder`` that ``asset`` is an unchanged copy of ("" when none is): the example
    an untitled document was opened from, so the suites that ship beside it still test it. Only files
    whose name matches the asset's (a cheap look at ``"name"``) are loaded and compared."""
    import json

    from runtime.asset.file import load_asset_for_editing
    from runtime.problems import AssetError

    try:
        candidates = sorted(p for p in Path(folder).glob("*.json") if not p.name.endswith(".scene.json"))
    except OSError:
        return ""
    for path in candidates[:MAX_EXAMPLE_CANDIDATES]:
        try:
            if path.stat().st_size > MAX_EXAMPLE_BYTES:
                continue
            raw = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(raw, dict) or raw.get("name", asset.name) != asset.name:
                continue
            if load_asset_for_editing(path).asset == asset:
                return str(path.resolve())
        except (OSError, ValueError, AssetError):
            continue
    return ""
