"""``parley test SUITE --red-team``: play attack packs against each suite's asset (``runtime.suites.redteam``)
and print, per family and per marked game event, the attack success rate with its 95 % interval, the
benign lines' false-positive rate and the guards' p50/p95 latency.

The settings come from the suite's ``red_team:`` section, each replaced by its flag when given
(``--attacks`` adds packs). Exit 0 when every rate is within its threshold, 1 when one passes it,
2 on bad input (a pack, benign file or setting: named with file, family and line).
``--save-attacks OUT.suite.yaml`` keeps each successful attack as a case that fails while the attack
works; ``--bundles DIR`` writes each as a repro bundle ``parley replay`` repeats.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from runtime.problems import BackendError, InputError

if TYPE_CHECKING:
    from runtime.asset.model import Asset
    from runtime.suites.file import LoadedSuite
    from runtime.suites.redteam import RedTeamOptions, RedTeamReport
    from runtime.suites.run import Server


def register_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--red-team", action="store_true", help="a red-team run instead of the cases: attack lines "
                   "against the asset (the suite's red_team section and the shipped pack), benign lines through "
                   "its line guards; exit 1 when an attack success or false-positive rate passes its threshold")
    p.add_argument("--attacks", action="append", default=[], metavar="PACK.yaml", help="with --red-team: an attack "
                   "pack of your own, besides the shipped one (repeatable)")
    p.add_argument("--attempts", type=int, default=None, metavar="N", help="with --red-team: attempts per family "
                   "(its lines, then variations of them)")
    p.add_argument("--families", default=None, metavar="a,b", help="with --red-team: only these families")
    p.add_argument("--generate", type=int, default=None, metavar="K", help="with --red-team: K more lines per "
                   "family written by a simulated player from the family's persona")
    p.add_argument("--benign", default=None, metavar="FILE", help="with --red-team: benign player lines, one a line "
                   "(default: the suite's, else the shipped ones)")
    p.add_argument("--save-attacks", default=None, metavar="OUT.suite.yaml", help="with --red-team: add each "
                   "successful attack to this suite as a case that fails while the attack works")
    p.add_argument("--bundles", default=None, metavar="DIR", help="with --red-team: write each successful attack "
                   "as a repro bundle (parley replay) into DIR")


RED_TEAM_ONLY = ("--attacks", "--attempts", "--families", "--generate", "--benign", "--save-attacks", "--bundles")


def misused_flags(args: argparse.Namespace) -> str:
    """Why the red-team flags cannot be used as given ('' : they can)."""
    given = [flag for flag in RED_TEAM_ONLY if getattr(args, flag[2:].replace("-", "_")) not in (None, [])]
    if given and not args.red_team:
        return f"{', '.join(given)}: give them with --red-team"
    if args.red_team:
        clash = [flag for flag, value in (("--variant", args.variant), ("--save-discoveries", args.save_discoveries),
                                          ("--junit", args.junit), ("--shard", args.shard)) if value is not None]
        if clash:
            return f"--red-team runs no cases: {', '.join(clash)} cannot go with it"
        if args.attempts is not None and args.attempts < 1:
            return f"--attempts must be at least 1, not {args.attempts}"
        if args.generate is not None and args.generate < 0:
            return f"--generate must be at least 0, not {args.generate}"
    return ""


def options_for(loaded: LoadedSuite, args: argparse.Namespace) -> RedTeamOptions:
    """The suite's ``red_team`` settings (``options_from_suite``), each replaced by its flag given."""
    from runtime.suites.redteam import options_from_suite

    options = options_from_suite(loaded)
    options.packs += [Path(p) for p in args.attacks]
    if args.benign is not None:
        options.benign = args.benign
    if args.families:
        options.families = [f.strip() for f in args.families.split(",") if f.strip()]
    if args.attempts is not None:
        options.attempts = args.attempts
    if args.generate is not None:
        options.generate = args.generate
    options.seed += args.seed or 0
    return options


def file_asset(loaded: LoadedSuite) -> Asset:
    """The suite's asset as its file holds it (Subgraph nodes not expanded: what a bundle holds)."""
    from runtime.asset.file import load_asset

    asset = load_asset(loaded.path.parent / loaded.suite.asset)
    return asset.model_copy(update={"default_model": loaded.suite.model}) if loaded.suite.model else asset


def write_attack_bundles(report: RedTeamReport, asset: Asset, asset_dir: str | Path | None, folder: str | Path,
                         asset_source: str = "") -> list[Path]:
    """Write each successful attack of ``report`` as a repro bundle in ``folder``
    (``FAMILY-N.parley-bundle``) that ``parley replay`` repeats. Raises ``BundleError`` (a model file
    that cannot be found) or ``OSError``."""
    from runtime.bundle.file import BUNDLE_SUFFIX, make_bundle, write_bundle

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for attempt in report.successes:
        if attempt.dialog is None:
            continue
        bundle = make_bundle(asset, attempt.dialog, asset_dir=asset_dir, asset_source=asset_source)
        path = folder / f"{attempt.family}-{attempt.index + 1}{BUNDLE_SUFFIX}"
        write_bundle(bundle, path)
        written.append(path)
    return written


def _pc(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{100 * x:5.1f} %"


def _interval(rate: Any) -> str:
    low, high = rate.interval
    return f"[{_pc(low).strip()} \u2013 {_pc(high).strip()}]"


def _ms(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:.2f} ms"


def report_lines(report: RedTeamReport) -> list[str]:
    """The report as the terminal shows it: a table per family and per game event, FPR and latency."""
    lines = [f"red team on {report.asset}: {len(report.attempts)} attacks in {report.seconds:.1f} s"
             + (" (stopped)" if report.stopped else "")]
    width = max([len(f.name) for f in report.families] + [len(e.name) for e in report.events] + [10])
    lines.append(f"  {'family':<{width}}  {'success':>9}  {'rate':>7}  {'95 % interval':<19}  {'guard fired':>11}")
    for f in report.families:
        mark = "  FAIL" if f.success.attempts and f.success.rate > report.max_success else ""
        errors = f"  ({f.errors} turns failed)" if f.errors else ""
        lines.append(f"  {f.name:<{width}}  {f.success.successes:>4}/{f.success.attempts:<4}  {_pc(f.success.rate)}  "
                     f"{_interval(f.success):<19}  {_pc(f.guard_fired.rate):>11}{mark}{errors}")
    if report.events:
        lines.append(f"  {'game event':<{width}}  {'reached':>9}  {'rate':>7}  {'95 % interval':<19}  worst family")
        for e in report.events:
            worst = max(e.families.items(), key=lambda kv: (kv[1].successes, kv[0]), default=None)
            said = f"{worst[0]} {worst[1].successes}/{worst[1].attempts}" if worst and worst[1].successes else "-"
            lines.append(f"  {e.name:<{width}}  {e.overall.successes:>4}/{e.overall.attempts:<4}  "
                         f"{_pc(e.overall.rate)}  {_interval(e.overall):<19}  {said}")
    else:
        lines.append("  no game events are marked on this asset (Asset.game_events): only secrets and "
                     "character breaks count")
    if report.line_guards:
        mark = "  FAIL" if report.benign.attempts and report.benign.rate > report.max_false_positives else ""
        lines.append(f"  benign lines flagged: {report.benign.successes}/{report.benign.attempts} "
                     f"{_pc(report.benign.rate).strip()} {_interval(report.benign)} by {', '.join(report.line_guards)}"
                     f"{mark}")
        lines += [f"    flagged: \u201c{f.line}\u201d ({f.guard}: {f.policy or 'failed'}: {f.why})"
                  for f in report.flagged[:20]]
        if len(report.flagged) > 20:
            lines.append(f"    and {len(report.flagged) - 20} more (--json lists them all)")
    else:
        lines.append("  benign lines: no guard checks the player's line, so none is flagged")
    kinds = ", ".join(f"{kind} {_ms(v.p50)}/{_ms(v.p95)}" for kind, v in sorted(report.check_latency.items()))
    lines.append(f"  guard latency p50/p95: {_ms(report.latency.p50)}/{_ms(report.latency.p95)} over "
                 f"{report.latency.runs} runs" + (f" ({kinds})" if kinds else ""))
    return lines


def run_red_team_suites(args: argparse.Namespace, loaded: list[LoadedSuite], servers: list[Server],
                        out: TextIO, err: TextIO) -> int:
    """The red-team run of ``parley test`` (see the module's docstring)."""
    from runtime.cli.test import _html_report, _say
    from runtime.suites.redteam import run_red_team, save_attack_cases
    from runtime.suites.report import (
        Report,
        in_progress_json,
        report_json_text,
        report_target_problem,
        write_report,
    )

    if args.save_attacks:
        refused = report_target_problem(args.save_attacks)
        assets = {(s.path.parent / s.suite.asset).resolve() for s in loaded}
        if refused or len(assets) > 1:
            _say(f"--save-attacks {args.save_attacks}: " + (refused or f"the suites test {len(assets)} assets; a "
                                                              "suite tests one (save each in a run of its own)"), err)
            return 2
    if args.bundles and Path(args.bundles).exists() and not Path(args.bundles).is_dir():
        _say(f"--bundles {args.bundles}: not a folder", err)
        return 2
    try:
        assets = [file_asset(s) for s in loaded]
        options = [options_for(s, args) for s in loaded]
        from runtime.suites.redteam import load_benign, load_packs

        for option in options:  # the packs and benign lines checked before anything runs
            load_packs(option.packs, option.shipped_pack)
            load_benign(option.benign)
        players = _players(args, loaded, options)
    except (InputError, BackendError, ValueError) as exc:
        _say(exc, err)
        return 2
    targets = [(kind, target) for kind, target in (("JSON", args.json), ("HTML", args.report)) if target]
    for kind, target in targets:
        try:
            write_report(target, report_json_text(in_progress_json()) if kind == "JSON"
                         else _html_report().in_progress_html())
        except OSError as exc:
            _say(f"cannot write the {kind} report {target}: {exc.strerror or exc}", err)
            return 2
    reports = []
    for suite, asset, option, player in zip(loaded, assets, options, players):
        backend = servers[0].make_backend()
        def said(attempt, out=out) -> None:
            if attempt.success:  # as it happens: a long run on a model shows what got through early
                _say(f"  got through: {attempt.family} #{attempt.index + 1} ({', '.join(attempt.how)}): "
                     f"{attempt.line}", out)
                out.flush()

        try:
            option.player, option.on_attempt = player, said
            report = run_red_team(asset, suite.asset_folder, backend, option)
        except InputError as exc:
            _say(exc, err)
            return 2
        finally:
            backend.close()
            if player is not None and player.backend is not backend:
                player.backend.close()
        report.asset = f"{suite.name}: {suite.suite.asset}"
        for line in report_lines(report):
            _say(line, out)
        out.flush()
        reports.append(report)
        try:
            if args.save_attacks and report.successes:
                names = save_attack_cases(report, args.save_attacks, asset, suite.path.parent / suite.suite.asset,
                                          suite.asset_folder)
                _say(f"saved {len(names)} successful attack{'s' if len(names) != 1 else ''} as cases in "
                     f"{args.save_attacks}", out)
            if args.bundles and report.successes:
                written = write_attack_bundles(report, asset, suite.asset_folder, args.bundles,
                                               str(suite.path.parent / suite.suite.asset))
                _say(f"wrote {len(written)} repro bundle{'s' if len(written) != 1 else ''} into {args.bundles} "
                     "(parley replay BUNDLE repeats one)", out)
        except InputError as exc:
            _say(exc, err)
            return 2
        except OSError as exc:
            _say(f"cannot write the successful attacks: {exc.strerror or exc}", err)
            return 2
    final = {"JSON": lambda: report_json_text({"red_team": [r.to_json() for r in reports]}),
             "HTML": lambda: _html_report().report_html(Report(), red_team=reports, title="Parley red-team report")}
    for kind, target in targets:
        try:
            write_report(target, final[kind]())
        except OSError as exc:
            _say(f"cannot write the {kind} report {target}: {exc.strerror or exc}; the results are only in the "
                 "output above", err)
            return 2
    over = [line for r in reports for line in r.over_threshold()]
    for line in over:
        _say(f"over the threshold: {line}", err)
    return 1 if over else 0


def _players(args: argparse.Namespace, loaded: list[LoadedSuite], options: list[RedTeamOptions]) -> list[Any]:
    """A simulated player per suite that generates lines (None for the others), on the player's backend."""
    from runtime.backends.profiles import backend_factory, load_profiles
    from runtime.cli.test import _players as player_specs
    from runtime.suites.simulate import SimulatedPlayer

    generating = [s for s, o in zip(loaded, options) if o.generate]
    specs = player_specs(argparse.Namespace(**{**vars(args), "conversations": None, "guided": False,
                                               "candidates": None, "save_discoveries": None}), generating)
    out = []
    for suite in loaded:
        if suite.path not in specs:
            out.append(None)
            continue
        spec, model = specs[suite.path]
        make = backend_factory(spec, None, load_profiles() if spec not in ("embedded", "llama", "scripted") else [])
        out.append(SimulatedPlayer(make(), model))
    return out
