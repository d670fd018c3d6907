"""``parley test SUITE...``: run conversation test suites and report per case and turn.

Exit 0 when every case passes (and coverage is at least ``--min-coverage``), 1 when a case fails,
2 on bad input (a suite or asset that cannot be read, bad flags, a shard that holds no case, a
report that cannot be written: checked before the run, and said after it if writing still fails;
the results printed are kept). A suite's personas are played by a model after its cases
(``runtime.suites.simulate``): ``--conversations K`` each, ``--guided`` steered by coverage, and
``--save-discoveries OUT.suite.yaml`` keeps the lines that reached new coverage as cases; a
simulated turn that fails exits 1. ``--red-team`` runs attack packs instead of the cases
(``runtime.cli.red_team``). ``--repeat K`` runs each case K times with other seeds and reports a
pass rate per case (flaky: some runs pass, some fail). ``--shard I/N`` runs only the cases of shard
I of N (stable: the same split on every machine). ``--jobs`` is lowered to the number of cases run
and, on the embedded backend (each job loads its own copy of the models), to as many jobs as the
available memory holds by the estimate; a line on stderr says so.

Reports are written atomically; before the run starts each says the run is in progress, so a run
killed midway never leaves the previous run's success behind. What the terminal is shown (case
names, replies, a server's error text) has its control characters escaped.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from runtime.problems import BackendError, InputError

if TYPE_CHECKING:
    from runtime.suites.file import LoadedSuite
    from runtime.suites.run import Server

# Threads a run may use whatever the backend (each a conversation, a connection to a server).
MAX_JOBS = 64

# What a terminal would act on rather than show: C0 and C1 controls (ANSI escapes start with ESC),
# DEL, bidirectional overrides (which reorder what follows) and lone surrogates (which UTF-8 cannot write).
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def printable(text: object) -> str:
    """``text`` as it is safe to print: each control character as its escape (``\\x1b``, ``\\n``)."""
    def escape(m: re.Match[str]) -> str:
        ch = m[0]
        return {"\n": "\\n", "\t": "\\t", "\r": "\\r"}.get(ch) or (
            f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")

    return _UNPRINTABLE.sub(escape, str(text))


def _say(text: object, file: TextIO) -> None:
    """Print ``text`` escaped; an ``InputError`` one problem a line."""
    lines = [str(p) for p in text.problems] if isinstance(text, InputError) else [str(text)]
    print("\n".join(printable(line) for line in lines), file=file)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("test", help="run conversation test suites (.suite.yaml)")
    p.add_argument("suites", nargs="+", metavar="SUITE", help="suite files")
    p.add_argument("--repeat", type=int, default=1, metavar="K", help="run each case K times (pass rate, flaky cases)")
    p.add_argument("--seed", type=int, default=None, metavar="S", help="added to every fixed seed (other replies)")
    p.add_argument("--jobs", type=int, default=1, metavar="N", help="cases run at once, each with its own model copy")
    p.add_argument("--shard", default=None, metavar="I/N", help="run only shard I (from 1) of N")
    p.add_argument("--junit", metavar="OUT.xml", help="write a JUnit XML report")
    p.add_argument("--json", metavar="OUT.json", help="write a JSON report")
    p.add_argument("--report", metavar="OUT.html", help="write an HTML report to look at: pass rates with intervals, "
                   "coverage drawn on the graph, each failure's turn, check and prompt (one self-contained page)")
    p.add_argument("--min-coverage", type=float, default=None, metavar="P",
                   help="fail when fewer than P %% of the nodes and exits were taken")
    p.add_argument("--backend", default="embedded", metavar="NAME|URL[,...]",
                   help="where the models run: embedded (this computer, the default), a backend profile's name, "
                   "a server's address (http://HOST:PORT), or scripted (deterministic test replies). Several, "
                   "separated by commas, make a fleet: conversations are spread over them, each staying on one "
                   "server, and one that fails has its conversations run again on another")
    p.add_argument("--conversations", type=int, default=None, metavar="K",
                   help="conversations per persona (replaces each persona's own number)")
    p.add_argument("--guided", action="store_true", help="steer the simulated players toward the nodes, exits "
                   "and intents not reached yet (default: each persona plays in character, at random)")
    p.add_argument("--candidates", type=int, default=None, metavar="N", help="with --guided: lines the player tries "
                   "per turn, each taken back (an exact rewind) when it reaches nothing new (default: 3; 1 only asks)")
    p.add_argument("--player-model", default=None, metavar="GGUF", help="the model that plays the personas "
                   "(default: the suite's player.model, else the sample model)")
    p.add_argument("--player-backend", default=None, metavar="NAME|URL", help="where the player's model runs, as "
                   "--backend names it (default: the suite's player.backend, else embedded)")
    p.add_argument("--save-discoveries", default=None, metavar="OUT.suite.yaml", help="add the simulated lines "
                   "that reached new coverage to this suite as scripted cases (made when missing)")
    p.add_argument("--variant", default=None, metavar="B.json", help="compare the suite's asset (A) with this "
                   "variant (B): the same cases, seeds and repeats on both; per-case pass rates, the paired "
                   "difference with its 95 %% interval, McNemar's exact test, the turns that differ and where "
                   "they first diverge (exit 1 when B passes significantly fewer)")
    from runtime.cli.red_team import register_flags

    register_flags(p)
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


def _available_memory() -> int | None:
    """Bytes of memory the system can give without swapping (Linux's MemAvailable), or None."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def _job_memory(loaded: list[LoadedSuite]) -> int:
    """The estimate of what one job of the embedded backend takes (its own copy of the models and
    their contexts): the largest over the suites' assets. 0 when no model could be estimated."""
    from runtime.asset.estimate import estimate_asset
    from runtime.models.folder import resolve_model

    largest = 0
    for suite in loaded:
        asset_dir = (suite.path.parent / suite.suite.asset).resolve().parent
        try:
            estimate = estimate_asset(suite.asset, lambda name, d=asset_dir: resolve_model(name, d))
        except Exception:  # noqa: BLE001, S112 - a model that cannot be sized fails its cases later, with the reason
            continue
        largest = max(largest, estimate.ram_bytes + estimate.vram_bytes)
    return largest


def _jobs(asked: int, cases: int, loaded: list[LoadedSuite], embedded: bool, err: TextIO) -> int:
    """``--jobs`` within its caps: ``MAX_JOBS``, the number of cases, and on the embedded backend the
    jobs the available memory holds by the estimate. Says on ``err`` why it lowered it."""
    jobs, why = min(asked, MAX_JOBS), f"at most {MAX_JOBS} jobs run at once"
    if cases < jobs:
        jobs, why = max(1, cases), f"{cases} case{'s' if cases != 1 else ''} to run"
    if embedded and jobs > 1:
        per_job, available = _job_memory(loaded), _available_memory()
        if per_job and available is not None and available // per_job < jobs:
            jobs = max(1, int(available // per_job))
            why = (f"each job loads its own copy of the models, about {per_job / 2**20:,.0f} MB by the estimate, "
                   f"and {available / 2**20:,.0f} MB of memory is available")
    if jobs < asked:
        print(f"--jobs {asked} lowered to {jobs}: {why}", file=err)
    return jobs


def _html_report():
    """``runtime.suites.html_report``, imported only when a run writes one (matplotlib takes a while to load)."""
    from runtime.suites import html_report

    return html_report


def run(args: argparse.Namespace) -> int:
    from runtime.suites.file import load_suite
    from runtime.suites.report import (
        in_progress_json,
        in_progress_junit,
        report_json,
        report_json_text,
        report_junit,
        report_target_problem,
        write_report,
    )
    from runtime.suites.run import run_suites, shard_of

    err, out = sys.stderr, sys.stdout
    flags = {"JUnit": "--junit", "JSON": "--json", "HTML": "--report"}
    targets = [(kind, target) for kind, target in (("JUnit", args.junit), ("JSON", args.json),
                                                   ("HTML", args.report)) if target]
    try:
        shard = _shard(args.shard)
        for name, value, low in (("--repeat", args.repeat, 1), ("--jobs", args.jobs, 1)):
            if value < low:
                raise ValueError(f"{name} must be at least {low}, not {value}")
        from runtime.suites.file import MAX_PERSONA_CONVERSATIONS

        if args.conversations is not None and not 1 <= args.conversations <= MAX_PERSONA_CONVERSATIONS:
            raise ValueError(f"--conversations must be from 1 to {MAX_PERSONA_CONVERSATIONS:,}, not {args.conversations}")
        if args.min_coverage is not None and not 0 <= args.min_coverage <= 100:
            raise ValueError(f"--min-coverage must be from 0 to 100, not {args.min_coverage}")
        for kind, target in targets:
            refused = report_target_problem(target)
            if refused:
                raise ValueError(f"cannot write the {kind} report {target}: {refused}")
        for i, (kind, target) in enumerate(targets):
            for other, again in targets[i + 1:]:
                if Path(target).resolve() == Path(again).resolve():
                    raise ValueError(f"{flags[kind]} and {flags[other]} name the same file, {again}")
        from runtime.cli.red_team import misused_flags

        if misused_flags(args):
            raise ValueError(misused_flags(args))
        if args.variant is not None:
            from runtime.cli.compare import refused_flags

            if refused_flags(args):
                raise ValueError(refused_flags(args))
    except ValueError as exc:
        _say(exc, err)
        return 2
    from runtime.suites.scenes import is_scene_suite

    scenes = [path for path in args.suites if is_scene_suite(path)]
    if scenes:
        if len(scenes) < len(args.suites):
            _say("scene suites and an agent's suites run apart: give one kind at a time", err)
            return 2
        try:
            servers = _servers(args.backend)
        except (BackendError, InputError) as exc:
            _say(exc, err)
            return 2
        from runtime.cli.scene_test import run_scene_suites

        return run_scene_suites(args, scenes, servers, out, err, _say)
    loaded, bad = [], False
    for path in args.suites:
        try:
            loaded.append(load_suite(path))
        except InputError as exc:
            _say(exc, err)
            bad = True
    if bad:
        return 2

    try:
        servers = _servers(args.backend)
    except (BackendError, InputError) as exc:
        _say(exc, err)
        return 2
    if args.variant is not None:
        from runtime.cli.compare import run_variant

        return run_variant(args, loaded[0], servers, out, err)
    if args.red_team:
        from runtime.cli.red_team import run_red_team_suites

        return run_red_team_suites(args, loaded, servers, out, err)

    # Personas are played in the first shard only: a guided player steers by all that was reached before
    playing = [s for s in loaded if s.suite.personas] if shard is None or shard[0] == 0 else []
    try:
        players = _players(args, playing)
    except (BackendError, InputError, ValueError) as exc:
        _say(exc, err)
        return 2
    all_cases = [s.case_id(c) for s in loaded for c in s.suite.cases]
    cases = [c for c in all_cases if shard is None or shard_of(c, shard[1]) == shard[0]]
    if not cases and not playing:
        assert shard is not None  # a suite holds at least one case or persona, and shard 1 plays the personas
        _say(f"--shard {args.shard} holds none of the {len(all_cases)} case{'s' if len(all_cases) != 1 else ''} "
             f"of these suites: nothing to run (use fewer shards)", err)
        return 2
    jobs = _jobs(args.jobs, len(cases) * args.repeat, loaded, args.backend.strip() in ("embedded", "llama"), err)

    # Before anything runs: each report says the run is in progress (and can be written at all).
    initial = {"JUnit": in_progress_junit, "JSON": lambda: report_json_text(in_progress_json()),
               "HTML": lambda: _html_report().in_progress_html()}
    for kind, target in targets:
        try:
            write_report(target, initial[kind]())
        except OSError as exc:
            _say(f"cannot write the {kind} report {target}: {exc.strerror or exc}", err)
            return 2

    def said(result) -> None:
        mark = "PASS" if result.passed else "FAIL"
        run_no = f" (run {result.repeat + 1})" if args.repeat > 1 else ""
        where = f" on {result.server}" if len(servers) > 1 and result.server else ""
        lines = [f"{mark} {result.suite}::{result.case}{run_no} [{result.seconds:.1f} s{where}]"]
        lines += [f"     moved: {line}" for line in result.moved]
        lines += [f"     {line}" for line in result.failures]
        print("\n".join(printable(line) for line in lines), file=out)  # one print: jobs do not interleave
        out.flush()

    prompts = _html_report().FailurePrompts(loaded) if args.report else None  # each failure's prompt, for the page
    try:
        report = run_suites(loaded, servers if len(servers) > 1 else servers[0].make_backend, jobs=jobs,
                            repeat=args.repeat, seed=args.seed, shard=shard, on_case=said, keep_turn_results=False,
                            on_turn=prompts.on_turn if prompts is not None else None)
    except BackendError as exc:
        _say(exc, err)
        return 2
    simulations = _simulate(args, playing, players, servers[0].make_backend, report, out)
    if simulations is None:
        return 2
    rates = report.pass_rates()
    passed = sum(r.passed for r in report.results)
    print(f"\n{passed} passed, {len(report.results) - passed} failed in {report.seconds:.1f} s", file=out)
    if args.repeat > 1:
        for case, (ok, n) in sorted(rates.items()):
            flag = "  FLAKY" if 0 < ok < n else ""
            _say(f"  {ok}/{n} {case}{flag}", out)
    for path, coverage in report.coverage.items():
        _say(f"coverage of {path}: {coverage.percent:.0f} % of nodes and exits", out)
        for node, port in coverage.never_taken:
            _say(f"  never taken: {node}.{port}", out)
        for node, times in coverage.bypassed.items():
            _say(f"  bypassed: {node}: turns passed it {times} time{'' if times == 1 else 's'} without running it", out)
    out.flush()
    simulated = {"simulation": [r.to_json() for r in simulations]} if simulations else {}
    final = {"JUnit": lambda: report_junit(report),
             "JSON": lambda: report_json_text({**report_json(report), **simulated}),
             "HTML": lambda: _html_report().report_html(report, prompts=prompts)}
    unwritten = False
    for kind, target in targets:
        try:
            write_report(target, final[kind]())
        except OSError as exc:
            _say(f"cannot write the {kind} report {target}: {exc.strerror or exc}; the results are only "
                 "in the output above", err)
            unwritten = True
    if unwritten:
        return 2
    if not report.passed or any(r.errors for r in simulations):
        return 1
    if args.min_coverage is not None and report.coverage_percent() < args.min_coverage:
        print(f"coverage {report.coverage_percent():.0f} % is below --min-coverage {args.min_coverage:g} %", file=err)
        return 1
    return 0


def _players(args: argparse.Namespace, playing: list[LoadedSuite]) -> dict[Path, tuple[str, str]]:
    """Each playing suite's player: (the backend's spec, the model), checked before anything runs."""
    from runtime.backends.profiles import backend_factory, load_profiles
    from runtime.models.folder import resolve_model
    from runtime.suites.report import report_target_problem
    from runtime.suites.simulate import MAX_GUIDED_CANDIDATES

    used = [name for name, value in (("--conversations", args.conversations), ("--guided", args.guided or None),
                                      ("--candidates", args.candidates),
                                      ("--player-model", args.player_model), ("--player-backend", args.player_backend),
                                      ("--save-discoveries", args.save_discoveries)) if value is not None]
    if args.candidates is not None and (not args.guided or not 1 <= args.candidates <= MAX_GUIDED_CANDIDATES):
        raise ValueError(f"--candidates {args.candidates}: " + ("give it with --guided (a player at random says one line "
                         "a turn)" if not args.guided else f"a guided player tries 1 to {MAX_GUIDED_CANDIDATES} lines "
                         "a turn"))
    if used and not playing:
        raise ValueError(f"{', '.join(used)}: none of these suites has personas (or this shard does not play them)")
    if args.save_discoveries:
        refused = report_target_problem(args.save_discoveries)
        assets = {(s.path.parent / s.suite.asset).resolve() for s in playing}
        if refused:
            raise ValueError(f"--save-discoveries {args.save_discoveries}: {refused}")
        if len(assets) > 1:
            raise ValueError(f"--save-discoveries {args.save_discoveries}: the personas talk to {len(assets)} assets; "
                             "a suite tests one (save each suite's discoveries in a run of its own)")
    players = {}
    for suite in playing:
        spec = (args.player_backend or suite.suite.player.backend or "embedded").strip()
        backend_factory(spec, None, load_profiles() if spec not in ("embedded", "llama", "scripted") else [])
        if args.player_model is not None:
            model, base = args.player_model, Path.cwd()
        else:
            model, base = suite.suite.player.model, suite.path.parent
        if model and spec in ("embedded", "llama"):
            beside = base / model
            model = str(beside.resolve()) if beside.is_file() else str(resolve_model(model))  # ModelNotFound says where
        players[suite.path] = (spec, model)
    return players


def _simulate(args: argparse.Namespace, playing: list[LoadedSuite], players: dict[Path, tuple[str, str]],
              make_backend, report, out: TextIO):
    """Play the personas of ``playing`` (after the cases, steering from what they reached), print each
    conversation and the coverage curve, add their coverage to ``report`` and save the discoveries.
    Returns the results, or None when the discoveries cannot be saved (said on stderr)."""
    from runtime.backends.profiles import backend_factory, load_profiles
    from runtime.suites.simulate import GUIDED_CANDIDATES, SimulatedPlayer, save_discoveries, simulate

    results = []
    for suite in playing:
        spec, model = players[suite.path]
        backend = make_backend()
        shared = spec in ("embedded", "llama") and args.backend.strip() in ("embedded", "llama")
        player_backend = backend if shared else backend_factory(
            spec, None, load_profiles() if spec not in ("embedded", "llama", "scripted") else [])()
        key = str(suite.path.parent / suite.suite.asset)

        def said(conv, suite=suite) -> None:
            mark = "FAIL" if conv.error else "PLAY"
            found = ", ".join(what for _kind, what in conv.new)
            lines = [f"{mark} {suite.name}::{conv.name} [{len(conv.turns)} turns, {conv.seconds:.1f} s]"
                     + (f" new: {found}" if found else "")]
            lines += [f"     {conv.error}"] if conv.error else []
            print("\n".join(printable(line) for line in lines), file=out)
            out.flush()

        try:
            result = simulate(suite, backend, SimulatedPlayer(player_backend, model), guided=args.guided,
                              candidates=args.candidates or GUIDED_CANDIDATES, conversations=args.conversations, seed=args.seed, baseline=report.coverage.get(key),
                              on_conversation=said)
        finally:
            backend.close()
            if player_backend is not backend:
                player_backend.close()
        for conv in result.conversations:
            report.coverage[key].add(conv.counts)
        curve = " -> ".join(f"{p:.0f}" for p in result.curve)
        _say(f"simulated players{' (guided)' if args.guided else ''} on {key}: coverage {curve} % "
             f"after each of {len(result.conversations)} conversations", out)
        results.append(result)
    if args.save_discoveries and results:
        names = []
        try:
            for suite, result in zip(playing, results):
                names += save_discoveries(args.save_discoveries, suite, result)
        except (InputError, OSError) as exc:
            _say(exc if isinstance(exc, InputError) else f"cannot write {args.save_discoveries}: {exc}", sys.stderr)
            return None
        _say(f"saved {len(names)} discover{'y' if len(names) == 1 else 'ies'} as cases in {args.save_discoveries}", out)
        for name in names:
            _say(f"  {name}", out)
    return results
