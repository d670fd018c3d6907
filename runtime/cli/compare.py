"""``parley test SUITE --variant B.json``: the suite's cases on its asset (A) and on B, with the
same seeds and repeats, compared conversation by conversation (``runtime.suites.variants``).

Prints each conversation as it ends, then the per-case table (pass A, pass B, differing turns), the
paired difference B - A with its 95 % interval clustered by conversation, McNemar's exact test,
the differing turns, and each case's first divergence (run, turn, node, token), with both prompts
of the first. ``--json`` writes the comparison (``VariantReport.to_json``), ``--report`` the HTML
page with the variant deltas. The suite's personas play both arms too (``--conversations``,
``--player-model``, ``--player-backend`` as without ``--variant``; at random, never guided).
Exit 0 when B is not worse than A at p < 0.05, 1 when it is (fewer
conversations pass on B, McNemar p < 0.05), 2 on bad input.
"""

from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING, TextIO

from runtime.cli.test import _say, printable
from runtime.problems import BackendError, InputError

if TYPE_CHECKING:
    from runtime.suites.file import LoadedSuite
    from runtime.suites.run import Server
    from runtime.suites.variants import TurnDivergence, VariantReport

# Flags that mean nothing for a comparison, and why.
_NOT_WITH_VARIANT = {
    "shard": ("--shard", "a comparison pairs every conversation of A with its twin on B; run it whole"),
    "junit": ("--junit", "JUnit holds one run's cases; use --json or --report for the comparison"),
    "min_coverage": ("--min-coverage", "coverage is a run's, not a comparison's"),
    "guided": ("--guided", ("guided players steer by what each arm reached, so their lines would not pair; "
                            "the personas play both arms at random")),
    "candidates": ("--candidates", "it goes with --guided, which a comparison does not take"),
    "save_discoveries": ("--save-discoveries", "a comparison saves no discoveries; run the suite alone"),
}


def refused_flags(args: argparse.Namespace) -> str:
    """Why the flags given cannot go with ``--variant`` ("" when they can)."""
    if len(args.suites) != 1:
        return f"--variant compares one suite's asset with the variant; {len(args.suites)} suites were given"
    for name, (flag, why) in _NOT_WITH_VARIANT.items():
        if getattr(args, name, None) not in (None, False):
            return f"{flag} does not go with --variant: {why}"
    return ""


def run_variant(args: argparse.Namespace, loaded: LoadedSuite, servers: list[Server], out: TextIO,
                err: TextIO) -> int:
    """Compare, print and write the reports (their targets checked already by ``parley test``)."""
    from runtime.suites.report import report_json_text, write_report
    from runtime.suites.variants import compare_variants, variant_suite

    html_target = getattr(args, "report", None)
    json_target = args.json
    try:
        variant_suite(loaded, args.variant)  # a variant that cannot be read is said before anything runs
    except InputError as exc:
        _say(exc, err)
        return 2
    from runtime.cli.test import _players

    playing = [loaded] if loaded.suite.personas else []
    player_backend, player_model = None, ""
    try:
        players = _players(args, playing)
        if playing:
            from runtime.backends.profiles import backend_factory, load_profiles

            spec, player_model = players[loaded.path]
            if not (spec in ("embedded", "llama") and args.backend.strip() in ("embedded", "llama")):
                player_backend = backend_factory(spec, None, load_profiles() if spec not in (
                    "embedded", "llama", "scripted") else [])
    except (BackendError, InputError, ValueError) as exc:
        _say(exc, err)
        return 2
    initial: list[tuple[str, str, str]] = []
    if json_target:
        initial.append(("JSON", json_target, report_json_text({"in_progress": True, "variant": None})))
    html = _html() if html_target else None
    if html is not None:
        initial.append(("HTML", html_target, html.in_progress_html()))
    for kind, target, text in initial:
        try:
            write_report(target, text)
        except OSError as exc:
            _say(f"cannot write the {kind} report {target}: {exc.strerror or exc}", err)
            return 2

    def said(arm: str, result) -> None:
        mark = "PASS" if result.passed else "FAIL"
        run_no = f" (run {result.repeat + 1})" if args.repeat > 1 else ""
        lines = [f"{arm} {mark} {result.suite}::{result.case}{run_no} [{result.seconds:.1f} s]"]
        lines += [f"       {line}" for line in result.failures]
        print("\n".join(printable(line) for line in lines), file=out)
        out.flush()

    prompts = html.FailurePrompts([loaded]) if html is not None else None
    on_turn = (lambda arm, cid, outcome: prompts.on_turn(cid, outcome) if arm == "A" else None) if prompts else None
    backend = servers if len(servers) > 1 else servers[0].make_backend
    jobs = min(args.jobs, max(1, len(loaded.suite.cases) * args.repeat))
    try:
        report = compare_variants(loaded, args.variant, backend, repeat=args.repeat, jobs=jobs, seed=args.seed,
                                  on_case=said, on_turn=on_turn, conversations=args.conversations,
                                  player_backend=player_backend, player_model=player_model)
    except (BackendError, InputError) as exc:
        _say(exc, err)
        return 2
    print_report(report, out)
    finals: list[tuple[str, str, str]] = []
    if json_target:
        finals.append(("JSON", json_target, report_json_text({"in_progress": False, "variant": report.to_json()})))
    if html is not None:
        finals.append(("HTML", html_target, html.report_html(report.reports["A"], prompts=prompts, variant=report)))
    unwritten = False
    for kind, target, text in finals:
        try:
            write_report(target, text)
        except OSError as exc:
            _say(f"cannot write the {kind} report {target}: {exc.strerror or exc}; the results are only "
                 "in the output above", err)
            unwritten = True
    if unwritten:
        return 2
    a_only, b_only = report.discordant
    return 1 if report.significant and a_only > b_only else 0


def _html():
    """``runtime.suites.html_report``, imported only when a run writes one (matplotlib takes a while to load)."""
    from runtime.suites import html_report

    return html_report


def _points(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{100 * x:+.1f}"


def _percent(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{100 * x:.1f} %"


def print_report(report: VariantReport, out: TextIO, most: int = 20) -> None:
    """The comparison as text: the per-case table, the statistics, and where runs diverge (``most``
    divergences listed; the first with both prompts)."""
    lines = ["", f"A: {report.asset_a}", f"B: {report.asset_b}",
             (f"{report.conversations} paired conversation{'s' if report.conversations != 1 else ''} "
              f"in {report.seconds:.1f} s"), ""]
    width = max([len("case"), *(len(c.case) for c in report.cases)])
    lines.append(f"  {'case':<{width}}  {'pass A':>8}  {'pass B':>8}  {'differing turns':>15}")
    for c in report.cases:
        flag = "  B worse" if c.passed_b < c.passed_a else "  B better" if c.passed_b > c.passed_a else ""
        lines.append(f"  {c.case:<{width}}  {f'{c.passed_a}/{c.runs}':>8}  {f'{c.passed_b}/{c.runs}':>8}  "
                     f"{c.differing_turns:>15}{flag}")
    interval = ("no interval with one conversation" if math.isnan(report.ci_low) else
                f"95 % CI {_points(report.ci_low)} to {_points(report.ci_high)}, clustered by conversation")
    a_only, b_only = report.discordant
    verdict = ("B passes fewer than A" if a_only > b_only else "B passes more than A") if report.significant else (
        "no significant difference")
    lines += [
        "",
        f"pass rate: A {_percent(report.pass_rate_a)}, B {_percent(report.pass_rate_b)}",
        f"difference B - A: {_points(report.difference)} points ({interval})",
        f"McNemar exact: {a_only} passed on A only, {b_only} on B only: p = {report.mcnemar_p:.3g} ({verdict})",
        f"differing turns: {report.differing_turns}",
    ]
    diverged = [c.first_divergence for c in report.cases if c.first_divergence is not None]
    for d in diverged[:most]:
        lines.append(f"  first divergence of {d.case}: {_where(d)}")
    if len(diverged) > most:
        lines.append(f"  ... and {len(diverged) - most} more cases diverge (--json has them all)")
    if diverged:
        d = diverged[0]
        lines += ["", f"{d.case}, {_where(d)}:", f"  output on A: {d.text_a}", f"  output on B: {d.text_b}"]
        for arm, prompt in (("A", d.prompt_a), ("B", d.prompt_b)):
            lines.append(f"  prompt on {arm}:")
            lines += [f"    {line}" for line in (prompt or "(none)").split("\n")]
    print("\n".join(printable(line) for line in lines), file=out)
    out.flush()


def _where(d: TurnDivergence) -> str:
    run = f"run {d.run + 1}, " if d.run else ""
    node = f", node {d.node}" if d.node else ""
    what = {"prompt": f"prompt token {d.token_index}", "output": f"output token {d.token_index}",
            "path": "the nodes run differ", "turn": "one run stopped before this turn"}.get(d.part, d.part)
    return f"{run}turn {d.turn}{node}: {what}"
