"""What a run found: each turn's and case's outcome, coverage (how often each node ran and each
exit was taken), the report over every case, and that report as JSON and as JUnit XML."""

from __future__ import annotations

import json
import os
import re
import stat
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runtime.agent import TurnResult
from runtime.asset.model import Asset
from runtime.files.reading import file_kind
from runtime.files.writing import atomic_write_text
from runtime.names import NAMESPACE_SEP
from runtime.nodes.subgraph import END_PORT, Subgraph
from runtime.session.record import HoldsRecord, TurnRecord
from runtime.suites.checks import Check


@dataclass
class TurnOutcome(HoldsRecord):
    """A scripted turn of a case: the turn's record (None when it failed: ``error`` says why) and the
    checks it was held to."""

    number: int  # from 1
    line: str
    checks: list[Check] = field(default_factory=list)
    record: TurnRecord | None = None
    error: str = ""

    @property
    def passed(self) -> bool:
        return not self.error and all(c.passed for c in self.checks)

    @property
    def result(self) -> TurnResult | None:
        """The turn as the runtime's result, for the Turn Inspector (None once its details are dropped)."""
        record = self.record
        return record.result() if record is not None and (record.diagnostics or record.prompts) else None

    def drop_details(self) -> None:
        """Forget the turn's diagnostics and prompts (most of its memory); its line, reply and path stay."""
        if self.record is not None:
            self.record = self.record.without_details()


@dataclass
class CaseResult:
    suite: str
    case: str
    repeat: int = 0
    turns: list[TurnOutcome] = field(default_factory=list)
    conversation: list[tuple[int, Check]] = field(default_factory=list)  # (turn from 1, check)
    error: str = ""
    seconds: float = 0.0
    model_seconds: float = 0.0  # the model's own prompt reading and generating
    visits: Counter = field(default_factory=Counter)  # node id -> times run
    exits: Counter = field(default_factory=Counter)  # (node id, port) -> times taken
    bypassed: Counter = field(default_factory=Counter)  # node id -> times reached bypassed (not run)
    server: str = ""  # what ran the conversation: a fleet's server name, else the backend's label
    moved: list[str] = field(default_factory=list)  # in a fleet run: why it was run again on another server

    @property
    def passed(self) -> bool:
        return not self.error and all(t.passed for t in self.turns) and all(c.passed for _, c in self.conversation)

    @property
    def failures(self) -> list[str]:
        out = [self.error] if self.error else []
        for t in self.turns:
            if t.error:
                out.append(f"turn {t.number}: {t.error}")
            out += [f"turn {t.number}: {c.kind}: {c.message}" for c in t.checks if not c.passed]
        out += [f"after turn {n}: {c.kind}: {c.message}" for n, c in self.conversation if not c.passed]
        return out


def behaviour_ports_taken(path: list[str], ports: Mapping[str, Collection[str]]) -> Counter:
    """(Subgraph node id, port) -> how often a turn that ran ``path`` (namespaced ids: ``guard/refuse``)
    left that node's behaviour through the port: the Exit node it left from, or ``next`` when a node's
    exit ended the behaviour. ``ports``: each Subgraph node's ports, by its id (others are not counted)."""
    taken: Counter = Counter()
    for here, after in zip(path, [*path[1:], ""]):
        namespace = here
        while NAMESPACE_SEP in namespace:
            namespace = namespace.rsplit(NAMESPACE_SEP, 1)[0]
            if after.startswith(namespace + NAMESPACE_SEP):
                break  # still inside this behaviour, so inside the ones around it too
            if namespace in ports:
                rest = here[len(namespace) + 1:]
                taken[(namespace, rest if rest in ports[namespace] else END_PORT)] += 1
    return taken


@dataclass
class Coverage:
    """How often each node ran and each exit was taken, over every case run on one asset. A bypassed
    node a turn reaches is counted in ``bypassed``, not ``visits``: it did not run, so it is not
    covered (its exit, which the turn took, is)."""

    asset: Asset
    visits: Counter = field(default_factory=Counter)
    exits: Counter = field(default_factory=Counter)
    bypassed: Counter = field(default_factory=Counter)

    def add(self, result: CaseResult) -> None:
        self.visits.update(result.visits)
        self.exits.update(result.exits)
        self.bypassed.update(result.bypassed)
        # A Subgraph node's ports are taken inside its behaviour (a run counts its one way in,
        # ``enter``): a port is taken when a turn leaves the behaviour through it.
        ports = {n.id: set(n.exit_targets) for n in self.asset.nodes if isinstance(n, Subgraph)}
        if ports:
            for turn in result.turns:
                self.exits.update(behaviour_ports_taken(turn.path, ports))

    @property
    def all_exits(self) -> list[tuple[str, str]]:
        return [(n.id, port) for n in self.asset.nodes for port in n.exits()]

    @property
    def never_taken(self) -> list[tuple[str, str]]:
        return [e for e in self.all_exits if not self.exits.get(e)]

    @property
    def never_visited(self) -> list[str]:
        """Nodes no turn reached (neither ran nor passed bypassed)."""
        return [n.id for n in self.asset.nodes if not self.visits.get(n.id) and not self.bypassed.get(n.id)]

    @property
    def only_bypassed(self) -> list[str]:
        """Nodes turns reached but never ran: bypassed every time."""
        return [n.id for n in self.asset.nodes if not self.visits.get(n.id) and self.bypassed.get(n.id)]

    @property
    def percent(self) -> float:
        """Nodes run and exits taken, out of all nodes and exits (a bypassed node has not run)."""
        total = len(self.asset.nodes) + len(self.all_exits)
        covered = total - len(self.never_visited) - len(self.only_bypassed) - len(self.never_taken)
        return 100.0 * covered / total if total else 100.0


@dataclass
class Report:
    results: list[CaseResult] = field(default_factory=list)
    coverage: dict[str, Coverage] = field(default_factory=dict)  # asset file -> coverage
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    def pass_rates(self) -> dict[str, tuple[int, int]]:
        """suite::case -> (passed runs, runs)."""
        rates: dict[str, list[int]] = {}
        for r in self.results:
            rates.setdefault(f"{r.suite}::{r.case}", []).append(int(r.passed))
        return {k: (sum(v), len(v)) for k, v in rates.items()}

    def flaky(self) -> list[str]:
        return [k for k, (ok, n) in self.pass_rates().items() if 0 < ok < n]

    def coverage_percent(self) -> float:
        if not self.coverage:
            return 100.0
        return min(c.percent for c in self.coverage.values())


# --- as files ---------------------------------------------------------------------------------


def wilson_interval(passed: int, runs: int) -> tuple[float, float]:
    """The 95 % Wilson score interval of a pass rate (statsmodels); (0, 1) for no runs."""
    if runs <= 0:
        return 0.0, 1.0
    from statsmodels.stats.proportion import proportion_confint

    low, high = proportion_confint(passed, runs, alpha=0.05, method="wilson")
    return max(0.0, float(low)), min(1.0, float(high))


def report_json(report: Report) -> dict[str, Any]:
    return {
        "passed": report.passed,
        "in_progress": False,
        "seconds": round(report.seconds, 2),
        "cases": [{
            "suite": r.suite, "case": r.case, "repeat": r.repeat, "passed": r.passed, "error": r.error,
            "seconds": round(r.seconds, 3), "model_seconds": round(r.model_seconds, 3),
            "server": r.server, "moved": r.moved,
            "turns": [{"turn": t.number, "say": t.line, "reply": t.reply, "path": t.path, "passed": t.passed,
                       "error": t.error, "checks": [vars(c) for c in t.checks]} for t in r.turns],
            "conversation": [{"after_turn": n, **vars(c)} for n, c in r.conversation],
        } for r in report.results],
        "pass_rates": {k: {"passed": ok, "runs": n} for k, (ok, n) in report.pass_rates().items()},
        "flaky": report.flaky(),
        "coverage": {path: {
            "percent": round(c.percent, 1),
            "nodes": {n.id: c.visits.get(n.id, 0) for n in c.asset.nodes},
            "exits": {f"{node}.{port}": c.exits.get((node, port), 0) for node, port in c.all_exits},
            "never_taken": [f"{node}.{port}" for node, port in c.never_taken],
            "bypassed": {n.id: c.bypassed[n.id] for n in c.asset.nodes if c.bypassed.get(n.id)},
        } for path, c in report.coverage.items()},
    }


IN_PROGRESS = "the run has not finished: it is still going on, or it was killed before it could write its report"


def in_progress_json() -> dict[str, Any]:
    """The JSON report written before a run starts: a run killed midway leaves it, never the
    previous run's success."""
    return {"passed": False, "in_progress": True, "error": IN_PROGRESS, "cases": []}


def report_json_text(data: dict[str, Any]) -> str:
    # ensure_ascii: a reply may hold a lone surrogate, which UTF-8 cannot write
    return json.dumps(data, indent=2) + "\n"


# Characters XML 1.0 cannot hold at all, even escaped (C0 controls but tab, newline and return; lone
# surrogates; U+FFFE and U+FFFF). A case name or a server's error text may hold them.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_safe(text: str) -> str:
    """``text`` with each character XML 1.0 cannot hold written as its escape (``\\x1b``, ``\\ud800``)."""
    return _NOT_XML.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}", text)


def _junit_text(root: ET.Element) -> str:
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def report_junit(report: Report) -> str:
    """The report as JUnit XML (built with ElementTree, which escapes; see ``xml_safe``)."""
    by_suite: dict[str, list[CaseResult]] = {}
    for r in report.results:
        by_suite.setdefault(r.suite, []).append(r)
    root = ET.Element("testsuites", tests=str(len(report.results)),
                      failures=str(sum(not r.passed for r in report.results)), time=f"{report.seconds:.2f}")
    for suite, results in by_suite.items():
        failures = sum(not r.passed for r in results)
        element = ET.SubElement(root, "testsuite", name=xml_safe(suite), tests=str(len(results)),
                                failures=str(failures))
        repeated = any(x.repeat for x in results)
        for r in results:
            name = r.case + (f" (run {r.repeat + 1})" if repeated else "")
            case = ET.SubElement(element, "testcase", classname=xml_safe(suite), name=xml_safe(name),
                                 time=f"{r.seconds:.2f}")
            if not r.passed:
                failure = ET.SubElement(case, "failure", message=xml_safe(r.failures[0] if r.failures else "failed"))
                failure.text = xml_safe("\n".join(r.failures))
    return _junit_text(root)


def in_progress_junit() -> str:
    """The JUnit report written before a run starts: one erroring test case that says the run has
    not finished, so a run killed midway never leaves the previous run's success behind."""
    root = ET.Element("testsuites", tests="1", failures="0", errors="1")
    suite = ET.SubElement(root, "testsuite", name="parley test", tests="1", failures="0", errors="1")
    case = ET.SubElement(suite, "testcase", classname="parley test", name="the run")
    ET.SubElement(case, "error", message=IN_PROGRESS)
    return _junit_text(root)


def report_target_problem(path: str | os.PathLike[str]) -> str:
    """Why a report cannot be written at ``path``, or "": its folder is missing, or it is a folder,
    a device or a pipe (an atomic write would replace the device node with a file)."""
    target = Path(path)
    try:
        info = os.stat(target)
    except FileNotFoundError:
        return "" if target.resolve().parent.is_dir() else "its folder does not exist"
    except (OSError, ValueError) as exc:
        return str(exc.strerror if isinstance(exc, OSError) and exc.strerror else exc)
    if not stat.S_ISREG(info.st_mode):
        return f"it is {file_kind(info.st_mode)}, not a file"
    return ""


def write_report(path: str | os.PathLike[str], text: str) -> None:
    """Write a report atomically (never half written). Raises ``OSError`` saying why it cannot."""
    refused = report_target_problem(path)
    if refused:
        raise OSError(refused)
    atomic_write_text(path, text)
