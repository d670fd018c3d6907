"""One piece of work on a thread of its own, its signals on the UI thread (napari's ``create_worker``).

``ThreadJob(work)`` runs ``work()`` on a fresh ``QThread`` once ``start`` is called. ``work`` is a
function, or a generator function whose every yielded value is a step of progress. The job lives on
the thread that made it (the UI thread) and emits every signal from there, so widgets and
pytest-qt's ``waitSignal`` only ever see UI-thread signals:

- ``started``: the work began;
- ``yielded(value)``: a value the generator yielded, or that the work passed to ``report`` (from any thread);
- ``returned(value)`` or ``errored(exception)``: how it ended (a cancelled generator returns None);
- ``finished``: always, last.

``returned``, ``errored`` and ``finished`` come once the thread has stopped; the job keeps ``result``
and ``error`` for whoever reads them at ``finished``. Cancelling is cooperative: ``quit`` sets the
``cancel`` event, which the work checks (pass ``job.cancel`` into it, or give the job the event the
work already holds); a generator is closed at its next ``yield``. ``wait`` joins the thread.

Closing never destroys a running thread (Qt aborts the process then) and never hangs: a job whose
thread has not ended within its wait (a call that no cancel reaches, say inside llama.cpp) is left
to end by itself, kept alive in ``threads_left_running`` until it does, and the app leaves with
``os._exit`` if one is still running at exit (``editor.app``). When the application quits, every
job still running is cancelled and waited for.
"""

from __future__ import annotations

import inspect
import logging
import threading
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QCoreApplication, QObject, QThread, Signal

log = logging.getLogger("parley.editor")

# How long closing a window waits for each thread. Every request to a server and every llama.cpp
# generation ends within a fraction of a second of its cancel; this bounds what nothing cancels.
SHUTDOWN_WAIT_MS = 5_000

# Threads that outlived their window's wait, with the objects whose code they run: never destroyed while they run.
_left: list[tuple[QThread, QObject | None]] = []
# The jobs started and not finished yet (tests wait for them; quitting the app cancels them).
_running: list[ThreadJob] = []


def threads_left_running() -> list[QThread]:
    """The threads a closed window had to leave running and that still run (forgets the others)."""
    running = []
    for thread, owner in list(_left):
        try:
            alive = thread.isRunning()
        except RuntimeError:  # deleted once it finished
            alive = False
        if alive:
            running.append(thread)
        else:
            _left.remove((thread, owner))
    return running


def leave_running(thread: QThread, owner: QObject | None) -> None:
    """Keep ``thread`` (and ``owner``, whose code it runs) alive until it ends by itself: out of its
    window's ownership, or deleting the window deletes the thread and Qt aborts."""
    thread.setParent(None)
    if owner is not None:
        owner.setParent(None)
    _left.append((thread, owner))


def running_jobs() -> list[ThreadJob]:
    """The jobs started whose ``finished`` has not been emitted yet."""
    return list(_running)


def wait_for_jobs(timeout_ms: int = SHUTDOWN_WAIT_MS) -> bool:
    """Cancel every running job and wait for its thread; whether all stopped in time (tests)."""
    stopped = True
    for job in running_jobs():
        job.quit()
        stopped = job.wait(timeout_ms) and stopped
    return stopped


class _JobThread(QThread):
    """Runs the work; its signals reach the job (on the UI thread) through queued connections."""

    began = Signal()
    stepped = Signal(object)
    ended = Signal()

    def __init__(self, job: ThreadJob, work: Callable[[], Any]) -> None:
        super().__init__(job)
        self.job = job
        self.work = work

    def run(self) -> None:
        job = self.job
        threading.current_thread().name = job.name  # in logs and tracebacks as in Qt
        self.began.emit()
        try:
            value = self.work()
            if inspect.isgenerator(value):
                value = self._drain(value)
            job.result = value
        except Exception as exc:  # noqa: BLE001 - handed to the UI thread as ``errored``
            job.error = exc
        finally:
            self.ended.emit()

    def _drain(self, steps) -> Any:
        cancel = self.job.cancel
        try:
            while not cancel.is_set():
                self.stepped.emit(next(steps))
        except StopIteration as stop:
            return stop.value
        steps.close()  # cancelled: runs the generator's finally blocks now
        return None


class ThreadJob(QObject):
    """A function or generator run once on a thread of its own; see the module."""

    started = Signal()
    yielded = Signal(object)
    returned = Signal(object)
    errored = Signal(object)  # the exception
    finished = Signal()

    def __init__(self, work: Callable[[], Any], *, name: str = "parley-job",
                 cancel: threading.Event | None = None, exit_wait_ms: int | None = SHUTDOWN_WAIT_MS,
                 parent: QObject | None = None) -> None:
        """``exit_wait_ms``: how long quitting the application waits for the job (None: until it ends,
        for work that must not be abandoned half done, such as writing a file)."""
        super().__init__(parent)
        self.name = name
        self.cancel = cancel if cancel is not None else threading.Event()
        self.exit_wait_ms = exit_wait_ms
        self.result: Any = None
        self.error: BaseException | None = None
        self.running = False  # started, and ``finished`` not emitted yet
        self._left_behind = False  # ``stop`` gave up waiting: the thread ends by itself, unheard
        self._thread = _JobThread(self, work)
        self._thread.setObjectName(name)
        # Queued (the thread emits them from its own thread): these slots run on the UI thread.
        self._thread.began.connect(self.started)
        self._thread.stepped.connect(self.yielded)
        self._thread.ended.connect(self._end)

    def start(self) -> ThreadJob:
        if not self.running and not self._thread.isFinished():
            self.running = True
            _running.append(self)
            app = QCoreApplication.instance()
            if app is not None:
                app.aboutToQuit.connect(self._app_quitting)
            self._thread.start()
        return self

    def report(self, value: object) -> None:
        """Emit ``yielded(value)`` on the UI thread; for work that reports through a callback."""
        self._thread.stepped.emit(value)

    def quit(self) -> None:
        """Ask the work to stop soon (sets ``cancel``); ``finished`` still follows."""
        self.cancel.set()

    def is_running(self) -> bool:
        """Whether the thread still runs (``finished`` may still be on its way once it does not)."""
        return self._thread.isRunning()

    def wait(self, timeout_ms: int | None = None) -> bool:
        """Wait for the thread up to ``timeout_ms`` (None: until it ends); whether it has ended.
        Ask ``quit`` first, or this waits for the work to finish of itself."""
        if not self.running:
            return True
        thread = self._thread
        if timeout_ms is None:
            return thread.wait()
        return thread.wait(timeout_ms)

    def stop(self, timeout_ms: int | None = SHUTDOWN_WAIT_MS) -> bool:
        """``quit`` and ``wait`` (teardown). A thread still running then is left to end by itself (see
        the module) and nothing more is emitted; one that stopped may still emit its ending, which its
        owner, closed, ignores. Whether it stopped in time."""
        self.quit()
        if self.wait(timeout_ms):
            self._forget()  # stopped: its ending may still be emitted, but nothing waits for it
            return True
        log.error("the %s thread did not stop within %d ms; it is left to end by itself", self.name, timeout_ms)
        self._left_behind = True
        self._forget()
        leave_running(self._thread, self)
        return False

    def _app_quitting(self) -> None:
        if self.running:
            self.stop(self.exit_wait_ms)

    def _forget(self) -> None:
        if self not in _running:
            return
        _running.remove(self)
        app = QCoreApplication.instance()
        if app is not None:
            app.aboutToQuit.disconnect(self._app_quitting)

    def _end(self) -> None:
        if self._left_behind:
            return  # whoever waited has moved on
        self._thread.wait()  # its last act was to say so: this returns at once
        self.running = False
        self._forget()
        if self.error is not None:
            self.errored.emit(self.error)
        else:
            self.returned.emit(self.result)
        self.finished.emit()
