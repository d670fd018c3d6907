"""Running cases and suites: each case from a fresh agent on a backend of its own thread, repeats,
shards, fleets of servers (a conversation that loses its server runs again on another), and the
coverage each run adds to the report."""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from runtime.backends.base import Backend
from runtime.backends.http import ServerUnavailable
from runtime.dialogue.dialog_file import load_history
from runtime.problems import BackendError, InputError
from runtime.session.failures import failure_of
from runtime.session.record import TurnRecord
from runtime.session.session import Session
from runtime.session.tools import case_answers
from runtime.suites.checks import Check, Judge, check_reply, check_turn, judge_check
from runtime.suites.file import Case, LoadedSuite
from runtime.suites.report import CaseResult, Coverage, Report, TurnOutcome


def run_case(loaded: LoadedSuite, case: Case, backend: Backend, judge: Judge | None = None, repeat: int = 0,
             seed: int | None = None, on_turn: Callable[[TurnOutcome], None] | None = None,
             cancel: threading.Event | None = None, lost_server_raises: bool = False,
             keep_turn_results: bool = True) -> CaseResult:
    """Run one case from a fresh agent. Never raises for a failing case: the reason is in the result.
    With ``lost_server_raises``, a server that cannot be reached (``ServerUnavailable``) is raised
    instead, so a fleet run can run the conversation again on another server. Without
    ``keep_turn_results``, each turn's runtime result (diagnostics and prompts, for the Turn
    Inspector; most of a result's memory) is dropped once checked and passed to ``on_turn``."""
    out = CaseResult(loaded.name, case.name, repeat)
    started = time.perf_counter()
    try:
        agent = Session(loaded.asset, backend, loaded.asset_folder).agent
        if case.history:
            agent.import_dialog(load_history(loaded.path.parent / case.history), case.history)
        for name, value in case.variables.items():
            agent.set_variable(name, value)
        agent.reroll_seeds(loaded.suite.seed + (seed or 0) + repeat)
        summaries = 0
        for number, script in enumerate(case.turns, 1):
            if cancel is not None and cancel.is_set():
                out.error = "stopped"
                break
            outcome = TurnOutcome(number, script.say)
            out.turns.append(outcome)
            try:
                # The case's tool_results are the game's answers in this case, over the tools' mocks.
                result = agent.run_turn(script.say, script.instructions, cancel=cancel,
                                        tool_result=case_answers(agent.asset.nodes, case.tool_results),
                                        mock_tools=not case.tool_results)
            except Exception as exc:  # a failed turn (a backend error, a bad template) fails the case, not the run
                if lost_server_raises and isinstance(exc, ServerUnavailable):
                    raise
                outcome.error = f"the turn failed: {failure_of(exc).message}"
                if on_turn is not None:
                    on_turn(outcome)
                break
            outcome.record = TurnRecord.of(script.say, result)
            for diag in result.diagnostics.nodes if result.diagnostics is not None else []:
                (out.bypassed if diag.bypassed else out.visits)[diag.node] += 1  # bypassed: reached, not run
                out.exits[(diag.node, diag.exit)] += 1
                out.model_seconds += (diag.timings.prompt_ms + diag.timings.generate_ms) / 1000
                summaries += diag.summary is not None
            outcome.checks = check_turn(script.expect, result, agent.history.turns[-1])
            if script.expect.judge:
                outcome.checks.append(judge_check(judge, script.expect.judge, script.say, result.reply))
            for check in (c for c in case.expect if c.at_turn == number):
                if check.reply is not None:
                    out.conversation += [(number, c) for c in check_reply(check.reply, result.reply)]
                if check.judge:
                    out.conversation.append((number, judge_check(judge, check.judge, script.say, result.reply)))
                if check.summary_written is not None:
                    out.conversation.append((number, Check("budget", (summaries > 0) == check.summary_written,
                                                           f"a summary exists by turn {number}: {summaries > 0}")))
            if on_turn is not None:
                on_turn(outcome)
            if not keep_turn_results:
                outcome.drop_details()
    except InputError as exc:
        out.error = str(exc)
    except ServerUnavailable as exc:
        if lost_server_raises:
            raise
        out.error = f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # noqa: BLE001 - the case cannot run at all (a broken history file, a failed backend)
        out.error = failure_of(exc).message
    out.seconds = time.perf_counter() - started
    return out


def shard_of(case_id: str, shards: int) -> int:
    """The shard (from 0) a case belongs to: stable across machines and runs."""
    return zlib.crc32(case_id.encode("utf-8")) % shards


BackendFactory = Callable[[], Backend]


@dataclass
class Server:
    """One place to run conversations in a fleet run: a name for reports and a maker of backends."""

    name: str
    make_backend: BackendFactory
    lost: str = ""  # why it was given up on, once it was


def run_suites(loaded: list[LoadedSuite], make_backend: BackendFactory | list[Server], *, jobs: int = 1,
               repeat: int = 1, seed: int | None = None, shard: tuple[int, int] | None = None, judge_model: str = "",
               on_case: Callable[[CaseResult], None] | None = None,
               on_turn: Callable[[str, TurnOutcome], None] | None = None,
               cancel: threading.Event | None = None, keep_turn_results: bool = True) -> Report:
    """Run every case (``repeat`` times each) on ``jobs`` threads, each with a backend of its own.

    ``make_backend`` may be a list of servers (a fleet): thread ``j`` runs its conversations on server
    ``j`` mod the number of servers, so a conversation stays on one server, its nodes on their slots.
    A server that cannot be reached mid-conversation is given up on, and the conversation runs again
    from its start on another server (its result says so in ``moved``); when no server is left, the
    cases left fail with the reason. Nothing is dropped: every case has a result.

    ``keep_turn_results=False`` keeps only what a report holds (the turn's runtime result, with its
    diagnostics and prompts, goes once checked): a long ``repeat`` run stays small."""
    servers = make_backend if isinstance(make_backend, list) else [Server("", make_backend)]
    fleet = isinstance(make_backend, list)
    work = [(s, c, k) for s in loaded for c in s.suite.cases for k in range(repeat)
            if shard is None or shard_of(s.case_id(c), shard[1]) == shard[0]]
    report = Report(coverage={str(s.path.parent / s.suite.asset): Coverage(s.asset) for s in loaded})
    jobs = max(1, min(jobs, len(work) or 1))
    made: list[Backend] = []
    lock = threading.Lock()
    started = time.perf_counter()
    results: list[CaseResult | None] = [None] * len(work)
    queue: list[tuple[int, list[str]]] = [(i, []) for i in range(len(work))]  # (work index, why it moved)
    bound = [servers[j % len(servers)] for j in range(jobs)]
    judge = judge_model or _judge_model(loaded)

    def rebind(j: int) -> Server | None:
        with lock:
            alive = [s for s in servers if not s.lost]
            if not alive:
                return None
            if bound[j].lost:
                bound[j] = min(alive, key=lambda s: sum(b is s for b in bound))
            return bound[j]

    def worker(j: int) -> None:
        backends: dict[int, tuple[Backend, Judge | None]] = {}
        while True:
            with lock:
                if not queue:
                    return
                index, moved = queue.pop(0)
            suite, case, k = work[index]
            server = rebind(j)
            if server is None:
                reasons = "; ".join(f"{s.name}: {s.lost}" for s in servers)
                results[index] = CaseResult(suite.name, case.name, k, error=f"no server left to run it ({reasons})",
                                            moved=moved)
                _done(results[index])
                continue
            try:
                if id(server) not in backends:
                    b = server.make_backend()
                    with lock:
                        made.append(b)
                    backends[id(server)] = (b, Judge(b, judge) if judge else None)
                b, jdg = backends[id(server)]
                result = run_case(suite, case, b, jdg, k, seed,
                                  (lambda t, cid=suite.case_id(case): on_turn(cid, t)) if on_turn else None, cancel,  # noqa: B008
                                  lost_server_raises=fleet, keep_turn_results=keep_turn_results)
                # The next case starts from a fresh conversation on the same caches: each node's journal
                # starts empty, so it reads as in a process of its own, and still finds the system prompt.
            except ServerUnavailable as exc:
                with lock:
                    server.lost = server.lost or str(exc)
                    why = f"{server.name} failed ({exc}); run again from the start on another server"
                    queue.insert(0, (index, [*moved, why]))
                continue
            except BackendError as exc:
                result = CaseResult(suite.name, case.name, k, error=f"no backend: {failure_of(exc).message}")
            made_here = backends.get(id(server))
            result.server = server.name or (made_here[0].label if made_here else "")
            result.moved = moved
            results[index] = result
            _done(result)

    def _done(result: CaseResult) -> None:
        if on_case is not None:
            on_case(result)

    try:
        if jobs <= 1:
            worker(0)
        else:
            with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="parley-test") as pool:
                for future in [pool.submit(worker, j) for j in range(jobs)]:
                    future.result()
    finally:
        for b in made:
            b.close()
    for (suite, _case, _k), result in zip(work, results):
        assert result is not None  # every item ends with a result: run, failed, or no server left
        report.results.append(result)
        report.coverage[str(suite.path.parent / suite.suite.asset)].add(result)
    report.seconds = time.perf_counter() - started
    return report


def _judge_model(loaded: list[LoadedSuite]) -> str:
    if not any(t.expect.judge or any(e.judge for e in c.expect) for s in loaded for c in s.suite.cases
               for t in c.turns):
        return ""
    named = next((s.suite.judge_model for s in loaded if s.suite.judge_model), "")
    if named:
        return named
    from runtime.models.folder import SAMPLE_MODEL

    return SAMPLE_MODEL.file_name
