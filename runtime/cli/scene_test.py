"""``parley test`` for scene suites (``*.scene.suite.yaml``, which name a ``scene:``): each case's
rounds, per round what failed, the director's coverage, and ``--json``. The flags that belong to an
agent's suites (repeats, shards, variants, red-team, personas, JUnit and HTML reports) are refused
by name."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import TextIO

from runtime.problems import BackendError, InputError

# flag -> what it is when not given
AGENT_ONLY = {"--repeat": 1, "--shard": None, "--variant": None, "--red-team": False, "--junit": None,
              "--report": None, "--conversations": None, "--guided": False, "--save-discoveries": None,
              "--min-coverage": None, "--seed": None, "--jobs": 1}


def refused_flags(args: argparse.Namespace) -> str:
    given = [flag for flag, unset in AGENT_ONLY.items() if getattr(args, flag[2:].replace("-", "_"), unset) != unset]
    return f"{', '.join(given)}: not for scene suites (an agent's suites only)" if given else ""


def run_scene_suites(args: argparse.Namespace, paths: list[str], servers: list, out: TextIO, err: TextIO,
                     say) -> int:
    from runtime.suites.report import write_report
    from runtime.suites.scenes import load_scene_suite, run_scene_suite

    refused = refused_flags(args)
    if refused:
        say(refused, err)
        return 2
    loaded, bad = [], False
    for path in paths:
        try:
            loaded.append(load_scene_suite(path))
        except InputError as exc:
            say(exc, err)
            bad = True
    if bad:
        return 2
    backend = servers[0].make_backend()
    started, results = time.perf_counter(), []
    try:
        for suite in loaded:
            result = run_scene_suite(suite, backend)
            results.append(result)
            for case in result.cases:
                say(f"{'PASS' if case.passed else 'FAIL'} {case.case_id}", out)
                if case.error:
                    say(f"     {case.error}", out)
                for r in case.rounds:
                    for check in r.checks:
                        if not check.passed:
                            say(f"     round {r.index + 1}: {check.kind}: {check.message}", out)
    except BackendError as exc:
        say(exc, err)
        return 2
    finally:
        close = getattr(backend, "close", None)
        if close is not None:
            close()
    cases = [c for r in results for c in r.cases]
    passed = sum(c.passed for c in cases)
    say("", out)
    say(f"{passed} passed, {len(cases) - passed} failed in {time.perf_counter() - started:.1f} s", out)
    for suite, result in zip(loaded, results):
        say(f"coverage of {suite.suite.scene}:", out)
        for line in result.coverage_lines():
            say(f"  {line}", out)
    if args.json:
        report = {"scene_suites": [{
            "suite": str(Path(s.path)), "scene": s.suite.scene,
            "cases": [{"case": c.case, "passed": c.passed, "error": c.error,
                       "rounds": [{"speakers": r.round.speakers if r.round else [],
                                   "failures": [f"{k.kind}: {k.message}" for k in r.checks if not k.passed]}
                                  for r in c.rounds]} for c in result.cases],
            "rules_used": sorted(result.rules_used), "npcs_spoke": sorted(result.npcs_spoke)}
            for s, result in zip(loaded, results)]}
        try:
            write_report(args.json, json.dumps(report, indent=2, ensure_ascii=False) + "\n")
        except OSError as exc:
            say(f"cannot write the JSON report {args.json}: {exc.strerror or exc}", err)
            return 2
    return 0 if passed == len(cases) else 1
