"""The base of the editor's background services: work off the UI thread, signals on the UI thread.

A ``ThreadService`` lives on the UI thread. Most run their work as ``ThreadJob``s
(``OneRunService``); the long-lived conversation owns a worker ``QObject`` with an event loop of its
own, moved to a thread of its own. The worker's signals reach the service through queued connections, and the
service re-emits them from the UI thread, so widgets (and pytest-qt's ``waitSignal``) only ever
see signals from the UI thread. ``shutdown`` cancels the work and waits for the thread, and runs
by itself when the application quits, so no thread outlives its window.

Closing never destroys a running thread (Qt aborts the process then) and never hangs: a thread
that has not ended within ``SHUTDOWN_WAIT_MS`` (a call that no cancel reaches, say inside llama.cpp)
is left to end by itself, kept alive in ``editor.threads.thread_job.threads_left_running`` until it does,
and the app leaves with ``os._exit`` if one is still running at exit (``editor.app``), after the
windows saved what they keep.

Subclasses: ``editor.session.local.LiveConversation`` (the runtime, one long-lived thread),
``editor.session.follow.ServerAttach``, and the
``OneRunService``s (a download, a test run, a self-test: one job at a time), among them the
``RequestRunService``s that answer a request (a variant comparison, a red-team run).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QCoreApplication, QObject, QThread, Signal

from editor.threads.thread_job import SHUTDOWN_WAIT_MS, ThreadJob, leave_running

log = logging.getLogger("parley.editor")


class ThreadService(QObject):
    """A UI-thread service whose work runs on its own thread."""

    def __init__(self, thread_name: str, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.thread_name = thread_name
        self.thread: QThread | None = None
        self._thread_worker: QObject | None = None
        self.closed = False
        app = QCoreApplication.instance()
        if app is not None:  # never leave a thread running into interpreter exit
            app.aboutToQuit.connect(self.shutdown)

    def _new_thread(self, worker: QObject) -> QThread:
        """A thread (not started yet) for ``worker``, which moves to it and is deleted when it ends."""
        thread = QThread(self)
        thread.setObjectName(self.thread_name)
        worker.moveToThread(thread)
        thread.finished.connect(worker.deleteLater)
        self.thread = thread
        self._thread_worker = worker
        return thread

    def _cancel_work(self) -> None:
        """Ask the running work to stop soon (shutdown calls it first)."""

    def _stop_jobs(self, timeout_ms: int) -> None:
        """Stop the service's thread jobs (``ThreadJob.stop``), each waited for up to ``timeout_ms``."""

    def _end_thread(self) -> None:
        """Make the running thread's event loop end once its work has stopped. By default the
        worker quits its own thread when its work is done."""

    def _after_shutdown(self) -> None:
        """Tidy up once the thread has stopped."""

    def shutdown(self, timeout_ms: int | None = None) -> None:
        """Cancel the work, end the thread and wait for it up to ``timeout_ms`` (None:
        ``SHUTDOWN_WAIT_MS``); the service takes no more work. A thread still running then is left
        to end by itself (see the module)."""
        if self.closed:
            return
        if timeout_ms is None:
            timeout_ms = SHUTDOWN_WAIT_MS
        self.closed = True
        self._cancel_work()
        self._stop_jobs(timeout_ms)
        thread = self.thread
        if thread is not None and thread.isRunning():
            self._end_thread()
            if not thread.wait(timeout_ms):
                log.error("the %s thread did not stop within %d ms; it is left to end by itself",
                          self.thread_name, timeout_ms)
                self._leave_running(thread)
        self._after_shutdown()

    def _leave_running(self, thread: QThread) -> None:
        leave_running(thread, self._thread_worker)


class OneRunService(ThreadService):
    """A service that runs one ``ThreadJob`` at a time (``SampleModelDownload``, ``SuiteRun``): ``job``,
    made by ``_new_job``; ``_cancel`` is its stop flag."""

    busy_changed = Signal(bool)

    def __init__(self, thread_name: str, parent: QObject | None = None) -> None:
        super().__init__(thread_name, parent)
        self.busy = False
        self._cancel = threading.Event()
        self.job: ThreadJob | None = None

    def _new_job(self, work: Callable[[], object]) -> ThreadJob:
        """The job (not started yet) that runs ``work``, which checks ``self._cancel``; the service
        is busy until ``_end``."""
        self.job = ThreadJob(work, name=self.thread_name, cancel=self._cancel, parent=self)
        self._set_busy(True)
        return self.job

    def _stop_jobs(self, timeout_ms: int) -> None:
        if self.job is not None:
            self.job.stop(timeout_ms)

    def _set_busy(self, busy: bool) -> None:
        if busy != self.busy:
            self.busy = busy
            self._busy_now(busy)
            self.busy_changed.emit(busy)

    def _busy_now(self, busy: bool) -> None:
        """What a subclass tracks as a job starts or ends (before ``busy_changed`` is emitted)."""

    def _end(self) -> None:
        """The job has ended (its thread has stopped: this is its ``returned`` or ``errored``); take
        the next one."""
        if self.job is not None:
            self.job.deleteLater()
            self.job = None
        self._set_busy(False)

    def _cancel_work(self) -> None:
        self._cancel.set()

    def _after_shutdown(self) -> None:
        self.job = None
        self._set_busy(False)


class RequestRunService(OneRunService):
    """A ``OneRunService`` whose run answers a request (a dataclass with a ``stopped`` flag, such as
    a variant comparison's or a red-team run's): ``started`` (request), then ``finished`` (request,
    report) or ``failed`` (request, why), all on the UI thread. A subclass's ``start`` calls
    ``_begin``, makes its job with ``_new_job`` and hands it to ``_launch``."""

    started = Signal(object)  # the request
    finished = Signal(object, object)  # the request, its report
    failed = Signal(object, str)  # the request, why

    def __init__(self, thread_name: str, parent: QObject | None = None) -> None:
        super().__init__(thread_name, parent)
        self.request: Any = None

    def _begin(self, request: Any) -> threading.Event | None:
        """The new run's stop flag, or None when one is going on or the window closed."""
        if self.busy or self.closed:
            return None
        self._cancel = threading.Event()
        self.request = request
        return self._cancel

    def _launch(self, job: ThreadJob) -> bool:
        job.returned.connect(self._on_finished)
        job.errored.connect(self._on_failed)
        self.started.emit(self.request)
        job.start()
        return True

    def stop(self) -> None:
        """Cancel the running turn; what was not run yet is skipped. ``finished`` (or ``failed``) follows."""
        if self.busy and self.request is not None:
            self.request.stopped = True
            self._cancel.set()

    def _on_finished(self, report: object) -> None:
        if self.closed:
            return
        self._end()
        self.finished.emit(self.request, report)

    def _on_failed(self, exc: Exception) -> None:
        if self.closed:
            return
        # a run that cannot go on: said in its panel, never a crash
        log.error("%s failed on %r", self.thread_name, self.request, exc_info=exc)
        self._end()
        self.failed.emit(self.request, self._failure_text(exc))

    def _failure_text(self, exc: Exception) -> str:
        return f"{type(exc).__name__}: {exc}"
