"""What a run found: each turn's and case's outcome, coverage (how often each node ran and each
exit was taken), the report over every case, and that report as JSON and as JUnit XML."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from runtime.agent import TurnResult
from runtime.asset.model import Asset
from runtime.suites.checks import Check


@dataclass
class TurnOutcome:
    number: int  # from 1
    line: str
    reply: str = ""
    path: list[str] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    result: TurnResult | None = None  # the runtime's result (diagnostics, prompt parts)
    error: str = ""

    @property
    def passed(self) -> bool:
        return not self.error and all(c.passed for c in self.checks)


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


@dataclass
class Coverage:
    """How often each node ran and each exit was taken, over every case run on one asset."""

    asset: Asset
    visits: Counter = field(default_factory=Counter)
    exits: Counter = field(default_factory=Counter)

    def add(self, result: CaseResult) -> None:
        self.visits.update(result.visits)
        self.exits.update(result.exits)

    @property
    def all_exits(self) -> list[tuple[str, str]]:
        return [(n.id, port) for n in self.asset.nodes for port in n.exits()]

    @property
    def never_taken(self) -> list[tuple[str, str]]:
        return [e for e in self.all_exits if not self.exits.get(e)]

    @property
    def never_visited(self) -> list[str]:
        return [n.id for n in self.asset.nodes if not self.visits.get(n.id)]

    @property
    def percent(self) -> float:
        """Nodes visited and exits taken, out of all nodes and exits."""
        total = len(self.asset.nodes) + len(self.all_exits)
        covered = total - len(self.never_visited) - len(self.never_taken)
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


def report_json(report: Report) -> dict[str, Any]:
    return {
        "passed": report.passed,
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
        } for path, c in report.coverage.items()},
    }


def report_junit(report: Report) -> str:
    from xml.sax.saxutils import quoteattr

    by_suite: dict[str, list[CaseResult]] = {}
    for r in report.results:
        by_suite.setdefault(r.suite, []).append(r)
    lines = ['<?xml version="1.0" encoding="UTF-8"?>',
             (f'<testsuites tests="{len(report.results)}" failures="{sum(not r.passed for r in report.results)}" '
              f'time="{report.seconds:.2f}">')]
    for suite, results in by_suite.items():
        failures = sum(not r.passed for r in results)
        lines.append(f'  <testsuite name={quoteattr(suite)} tests="{len(results)}" failures="{failures}">')
        for r in results:
            name = r.case + (f" (run {r.repeat + 1})" if any(x.repeat for x in results) else "")
            lines.append(f'    <testcase classname={quoteattr(suite)} name={quoteattr(name)} time="{r.seconds:.2f}">')
            if not r.passed:
                text = "\n".join(r.failures)
                lines.append(f"      <failure message={quoteattr(r.failures[0] if r.failures else 'failed')}>"
                             f"{_xml_text(text)}</failure>")
            lines.append("    </testcase>")
        lines.append("  </testsuite>")
    lines.append("</testsuites>")
    return "\n".join(lines) + "\n"


def _xml_text(text: str) -> str:
    from xml.sax.saxutils import escape

    return escape("".join(ch for ch in text if ch in "\t\n\r" or ord(ch) >= 32))
