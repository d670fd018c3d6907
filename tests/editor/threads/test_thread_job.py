"""The editor's one thread job: results, errors and steps reach the UI thread; cancel and teardown."""

from __future__ import annotations

import threading

from PySide6.QtCore import QThread

from editor.threads.thread_job import ThreadJob, running_jobs, threads_left_running, wait_for_jobs


def _ui_thread_of(qtbot, signal):
    """Record the thread each emission of ``signal`` ran on."""
    seen: list[QThread] = []
    signal.connect(lambda *args: seen.append(QThread.currentThread()))
    return seen


def test_the_value_returned_reaches_returned_then_finished_on_the_ui_thread(qtbot):
    order: list[str] = []
    job = ThreadJob(lambda: threading.current_thread().name)
    threads = _ui_thread_of(qtbot, job.returned)
    job.started.connect(lambda: order.append("started"))
    job.returned.connect(lambda value: order.append(f"returned {value != threading.current_thread().name}"))
    job.finished.connect(lambda: order.append("finished"))
    with qtbot.waitSignal(job.finished, timeout=5000):
        job.start()
    assert order == ["started", "returned True", "finished"]  # the work ran on another thread
    assert threads == [QThread.currentThread()]
    assert not job.is_running() and job.error is None
    assert running_jobs() == []


def test_an_exception_reaches_errored_on_the_ui_thread_and_finished_still_fires(qtbot):
    def fail():
        raise ValueError("no such file")

    job = ThreadJob(fail)
    threads = _ui_thread_of(qtbot, job.errored)
    errors: list[BaseException] = []
    returned: list[object] = []
    job.errored.connect(errors.append)
    job.returned.connect(returned.append)
    with qtbot.waitSignal(job.finished, timeout=5000):
        job.start()
    assert [type(e) for e in errors] == [ValueError] and str(errors[0]) == "no such file"
    assert returned == [] and job.error is errors[0]
    assert threads == [QThread.currentThread()]


def test_a_generator_s_steps_reach_yielded_and_its_return_value_returned(qtbot):
    def count():
        yield from range(3)
        return "done"

    job = ThreadJob(count)
    steps: list[object] = []
    threads = _ui_thread_of(qtbot, job.yielded)
    job.yielded.connect(steps.append)
    with qtbot.waitSignal(job.returned, timeout=5000) as returned:
        job.start()
    assert steps == [0, 1, 2] and returned.args == ["done"]
    assert threads == [QThread.currentThread()] * 3


def test_report_is_a_step_from_work_that_takes_a_callback(qtbot):
    job = ThreadJob(lambda: [job.report(f"{n} MB") for n in (10, 20)] and "path")
    steps: list[object] = []
    job.yielded.connect(steps.append)
    with qtbot.waitSignal(job.finished, timeout=5000):
        job.start()
    assert steps == ["10 MB", "20 MB"] and job.result == "path"


def test_cancel_stops_a_generator_at_its_next_yield_and_runs_its_finally(qtbot):
    may_go_on = threading.Event()
    closed = threading.Event()

    def endless():
        try:
            n = 0
            while True:
                yield n
                may_go_on.wait(5)
                n += 1
        finally:
            closed.set()

    job = ThreadJob(endless)
    steps: list[object] = []
    job.yielded.connect(steps.append)
    with qtbot.waitSignal(job.yielded, timeout=5000):
        job.start()
    with qtbot.waitSignal(job.finished, timeout=5000):
        job.quit()
        may_go_on.set()
    assert closed.is_set() and job.result is None and job.error is None
    assert steps and steps == list(range(len(steps)))


def test_work_that_checks_cancel_ends_when_quit_and_finished_fires(qtbot):
    cancel = threading.Event()
    job = ThreadJob(lambda: "stopped" if cancel.wait(5) else "ran out", cancel=cancel)
    with qtbot.waitSignal(job.started, timeout=5000):
        job.start()
    with qtbot.waitSignal(job.finished, timeout=5000):
        job.quit()
    assert job.result == "stopped"


def test_stop_waits_for_the_thread_and_nothing_is_left_running(qtbot):
    job = ThreadJob(lambda: job.cancel.wait(5))
    with qtbot.waitSignal(job.started, timeout=5000):
        job.start()
    assert job.is_running() and running_jobs() == [job]
    assert job.stop()
    assert not job._thread.isRunning()
    assert running_jobs() == [] and threads_left_running() == []
    with qtbot.waitSignal(job.finished, timeout=5000):
        pass  # its ending, queued before the wait returned, still reaches the UI thread


def test_a_thread_no_cancel_reaches_is_left_to_end_by_itself_and_is_not_heard_from(qtbot):
    release = threading.Event()
    job = ThreadJob(lambda: release.wait(5), name="parley-stuck")
    heard: list[object] = []
    job.finished.connect(lambda: heard.append("finished"))
    with qtbot.waitSignal(job.started, timeout=5000):
        job.start()
    assert not job.stop(50)
    assert [t.objectName() for t in threads_left_running()] == ["parley-stuck"]
    assert running_jobs() == []
    release.set()
    qtbot.waitUntil(lambda: not threads_left_running(), timeout=5000)
    assert heard == []


def test_wait_for_jobs_cancels_and_joins_every_job(qtbot):
    jobs = [ThreadJob(lambda c=c: c.wait(5), cancel=c) for c in (threading.Event(), threading.Event())]
    for job in jobs:
        with qtbot.waitSignal(job.started, timeout=5000):
            job.start()
    assert wait_for_jobs(5000)
    assert all(not job._thread.isRunning() for job in jobs)
    qtbot.waitUntil(lambda: running_jobs() == [], timeout=5000)


def test_a_job_runs_once(qtbot):
    runs: list[int] = []
    job = ThreadJob(lambda: runs.append(1))
    with qtbot.waitSignal(job.finished, timeout=5000):
        job.start()
        job.start()
    job.start()  # finished: starting again does nothing
    assert runs == [1] and not job.is_running()
