"""``parley test SUITE...``: run conversation test suites and report per case and turn.

Exit 0 when every case passes (and coverage is at least ``--min-coverage``), 1 when a case fails,
2 on bad input (a suite or asset that cannot be read, bad flags). ``--repeat K`` runs each case K
times with other seeds and reports a pass rate per case (flaky: some runs pass, some fail).
``--shard I/N`` runs only the cases of shard I of N (stable: the same split on every machine).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from runtime.problems import BackendError, InputError

if TYPE_CHECKING:
    from runtime.suites.run import Server


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("test", help="run conversation test suites (.suite.yaml)")
    p.add_argument("suites", nargs="+", metavar="SUITE", help="suite files")
    p.add_argument("--repeat", type=int, default=1, metavar="K", help="run each case K times (pass rate, flaky cases)")
    p.add_argument("--seed", type=int, default=None, metavar="S", help="added to every fixed seed (other replies)")
    p.add_argument("--jobs", type=int, default=1, metavar="N", help="cases run at once, each with its own model copy")
    p.add_argument("--shard", default=None, metavar="I/N", help="run only shard I (from 1) of N")
    p.add_argument("--junit", metavar="OUT.xml", help="write a JUnit XML report")
    p.add_argument("--json", metavar="OUT.json", help="write a JSON report")
    p.add_argument("--min-coverage", type=float, default=None, metavar="P",
                   help="fail when fewer than P %% of the nodes and exits were taken")
    p.add_argument("--backend", default="embedded", metavar="NAME|URL[,...]",
                   help="where the models run: embedded (this computer, the default), a backend profile's name, "
                   "a server's address (http://HOST:PORT), or scripted (deterministic test replies). Several, "
                   "separated by commas, make a fleet: conversations are spread over them, each staying on one "
                   "server, and one that fails has its conversations run again on another")
    p.set_defaults(func=run)


def _shard(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    try:
        index, count = (int(x) for x in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard {text!r}: write it as I/N, such as 2/4") from None
    if not 1 <= index <= count:
        raise ValueError(f"--shard {text!r}: I must be from 1 to N")
    return index - 1, count


def _servers(spec: str) -> list[Server]:
    """The backends ``--backend`` names (a comma-separated list is a fleet); checked before anything runs."""
    from runtime.backends.profiles import backend_factory, load_profiles
    from runtime.suites.run import Server

    names = [part.strip() for part in spec.split(",")]
    if any(not n for n in names):
        raise BackendError(f"--backend {spec!r}: an empty name between commas")
    if len(set(names)) != len(names):
        raise BackendError(f"--backend {spec!r}: a server is named twice")
    profiles = load_profiles() if any(n not in ("embedded", "llama", "scripted") for n in names) else []
    return [Server(name, backend_factory(name, None, profiles)) for name in names]


def run(args: argparse.Namespace) -> int:
    from runtime.suites.file import load_suite
    from runtime.suites.report import report_json, report_junit
    from runtime.suites.run import run_suites

    err, out = sys.stderr, sys.stdout
    try:
        shard = _shard(args.shard)
        for name, value, low in (("--repeat", args.repeat, 1), ("--jobs", args.jobs, 1)):
            if value < low:
                raise ValueError(f"{name} must be at least {low}, not {value}")
        if args.min_coverage is not None and not 0 <= args.min_coverage <= 100:
            raise ValueError(f"--min-coverage must be from 0 to 100, not {args.min_coverage}")
        for target in (args.junit, args.json):
            if target and not Path(target).resolve().parent.is_dir():
                raise ValueError(f"cannot write {target}: its folder does not exist")
    except ValueError as exc:
        print(exc, file=err)
        return 2
    loaded, bad = [], False
    for path in args.suites:
        try:
            loaded.append(load_suite(path))
        except InputError as exc:
            print(exc, file=err)
            bad = True
    if bad:
        return 2

    try:
        servers = _servers(args.backend)
    except (BackendError, InputError) as exc:
        print(exc, file=err)
        return 2

    def said(result) -> None:
        mark = "PASS" if result.passed else "FAIL"
        run_no = f" (run {result.repeat + 1})" if args.repeat > 1 else ""
        where = f" on {result.server}" if len(servers) > 1 and result.server else ""
        print(f"{mark} {result.suite}::{result.case}{run_no} [{result.seconds:.1f} s{where}]", file=out)
        for line in result.moved:
            print(f"     moved: {line}", file=out)
        for line in result.failures:
            print(f"     {line}", file=out)
        out.flush()

    try:
        report = run_suites(loaded, servers if len(servers) > 1 else servers[0].make_backend, jobs=args.jobs, repeat=args.repeat, seed=args.seed, shard=shard,
                            on_case=said)
    except BackendError as exc:
        print(exc, file=err)
        return 2
    rates = report.pass_rates()
    passed = sum(r.passed for r in report.results)
    print(f"\n{passed} passed, {len(report.results) - passed} failed in {report.seconds:.1f} s", file=out)
    if args.repeat > 1:
        for case, (ok, n) in sorted(rates.items()):
            flag = "  FLAKY" if 0 < ok < n else ""
            print(f"  {ok}/{n} {case}{flag}", file=out)
    for path, coverage in report.coverage.items():
        print(f"coverage of {path}: {coverage.percent:.0f} % of nodes and exits", file=out)
        for node, port in coverage.never_taken:
            print(f"  never taken: {node}.{port}", file=out)
    if args.json:
        # ensure_ascii: a reply may hold a lone surrogate, which UTF-8 cannot write
        Path(args.json).write_text(json.dumps(report_json(report), indent=2) + "\n", encoding="utf-8")
    if args.junit:
        Path(args.junit).write_text(report_junit(report), encoding="utf-8")
    if not report.passed:
        return 1
    if args.min_coverage is not None and report.coverage_percent() < args.min_coverage:
        print(f"coverage {report.coverage_percent():.0f} % is below --min-coverage {args.min_coverage:g} %", file=err)
        return 1
    return 0
