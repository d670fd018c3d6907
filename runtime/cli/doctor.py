"""``parley doctor``: the reproducibility self-test of a backend and model.

Prints which settings are reproducible (flash attention, KV type, thread count; a llama.cpp server's
``cache_prompt``) with a one-line reason each, then the replay cases on the chosen settings, PASS or
FAIL with what differed. Exit 0 when the chosen settings' cases all pass, 1 when one fails, 2 when
the self-test cannot start (bad flags, a model that cannot be found, a server that does not answer).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO

from runtime.asset.file import load_asset
from runtime.models.context_settings import FLASH_ATTN, FLASH_ATTN_MODES, KV_TYPE, KV_TYPES
from runtime.models.folder import default_model_name
from runtime.names import without_surrogates
from runtime.problems import BackendError, InputError

MAX_THREADS = 1024


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "doctor",
        help="the reproducibility self-test: which settings repeat a conversation bit for bit, and the replay cases",
        description="Probe which settings give the same numbers when a conversation is replayed (flash attention, "
                    "KV type, thread count, a llama.cpp server's cache_prompt), then run the replay cases "
                    "(regenerate, rewind, edit, replay, a cold import, 1 against 2 threads) on the chosen backend "
                    "and model through an agent.",
    )
    p.add_argument("asset", nargs="?", metavar="ASSET", help="take the model from this asset (its default model)")
    p.add_argument("--model", metavar="NAME", help="the model file (a path, or a name in the models folder); "
                                                   "default: the asset's, else the sample model")
    p.add_argument("--server", metavar="NAME|URL", help="test a server instead: a backend profile's name or an "
                                                        "address (http://HOST:PORT)")
    p.add_argument("--cache-prompt", choices=("on", "off"), default=None,
                   help="on a llama.cpp server, which cache_prompt the exit code is for (both are tested; default on)")
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="threads to generate and to read prompts with (default: the embedded backend's)")
    p.add_argument("--flash-attn", choices=FLASH_ATTN_MODES, default=FLASH_ATTN,
                   help=f"flash attention (default {FLASH_ATTN})")
    p.add_argument("--kv-type", choices=KV_TYPES, default=KV_TYPE,
                   help=f"KV cache type (default {KV_TYPE}; q8_0 and q4_0 need --flash-attn on or auto)")
    p.add_argument("--json", action="store_true", help="print the report as JSON instead of a table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    problems = _flag_problems(args)
    if problems:
        for message in problems:
            print(f"parley doctor: error: {message}", file=err)
        return 2
    from runtime.doctor.self_test import SelfTestCancelled, embedded_report, server_report

    def progress(text: str) -> None:
        print(f"doctor: {without_surrogates(text)}", file=err, flush=True)

    try:
        if args.server:
            report = server_report(_server_maker(args.server), progress=progress,
                                   cache_prompt=None if args.cache_prompt is None else args.cache_prompt == "on")
        else:
            model, asset_dir = _model(args)
            report = embedded_report(model, asset_dir=asset_dir, threads=args.threads, flash_attn=args.flash_attn,
                                     kv_type=args.kv_type, progress=progress)
    except InputError as exc:
        for problem in exc.problems:
            print(problem if problem.file else f"{args.asset}: {problem}", file=err)
        return 2
    except BackendError as exc:
        print(f"parley doctor: error: {exc}", file=err)
        return 2
    except SelfTestCancelled:
        return 130
    if args.json:
        out.write(report.to_json())
    else:
        out.write(without_surrogates(report_text(report)))
    return 0 if report.passed else 1


def _flag_problems(args: argparse.Namespace) -> list[str]:
    problems = []
    if args.threads is not None and not 1 <= args.threads <= MAX_THREADS:
        problems.append(f"--threads {args.threads}: give a number of threads from 1 to {MAX_THREADS}")
    if args.server:
        given = [flag for flag, value, default in (("--threads", args.threads, None),
                                                   ("--flash-attn", args.flash_attn, FLASH_ATTN),
                                                   ("--kv-type", args.kv_type, KV_TYPE),
                                                   ("--model", args.model, None)) if value != default]
        if given:
            problems.append(f"{', '.join(given)}: a server's settings and model are its own (set them when it "
                            "starts); leave them out with --server")
        if args.server.strip().lower() in ("embedded", "llama", "scripted"):
            problems.append(f"--server {args.server}: give a server's address or a backend profile's name "
                            "(the embedded engine is tested without --server)")
    elif args.cache_prompt is not None:
        problems.append("--cache-prompt is a llama.cpp server's option: give --server too")
    from runtime.models.context_settings import kv_type_refusal

    if not args.server and kv_type_refusal(args.kv_type, args.flash_attn):
        problems.append(f"--kv-type {args.kv_type} with --flash-attn {args.flash_attn}: "
                        f"{kv_type_refusal(args.kv_type, args.flash_attn)}")
    return problems


def _model(args: argparse.Namespace) -> tuple[str, str | None]:
    """The model to test and the folder relative names are found in."""
    asset_dir = None
    model = args.model or ""
    if args.asset:
        asset = load_asset(args.asset)
        asset_dir = str(Path(args.asset).resolve().parent)
        model = model or asset.default_model or next((n.model_name for n in asset.nodes
                                                      if getattr(n, "model_name", "")), "")
        if not model:
            raise BackendError(f"{args.asset}: the asset names no model (Default Model); give --model")
    return model or default_model_name() or "", asset_dir


def _server_maker(spec: str):
    from runtime.backends.profiles import backend_factory

    return backend_factory(spec)


def report_text(report) -> str:
    """The report as the terminal shows it."""
    from runtime.doctor.self_test import VERDICT_TEXT

    lines = [f"Reproducibility self-test: {report.backend}", f"model: {report.model}"]
    lines += [f"llama.cpp: {report.build}", ""] if report.build else [""]
    width = max(len(s.setting) for s in report.settings) + 2
    verdict_width = max(len("reproducible"), *(len(VERDICT_TEXT[s.reproducible]) for s in report.settings)) + 2
    lines.append(f"  {'setting'.ljust(width)}{'reproducible'.ljust(verdict_width)}why")
    for s in report.settings:
        mark = "*" if s.chosen else " "
        lines.append(f"{mark} {s.setting.ljust(width)}{VERDICT_TEXT[s.reproducible].ljust(verdict_width)}{s.reason}")
    lines.append("(* chosen; \"at one thread count\": a replay is exact only at the thread count it was first run at)")
    for run in report.runs:
        lines += ["", f"Replay cases on {run.configuration}{' (chosen)' if run.chosen else ''}, {run.seconds:.1f} s:"]
        name_width = max(len(c.name) for c in run.cases) + 2
        for c in run.cases:
            detail = f"  {c.detail}" if c.detail else ""
            lines.append(f"  {c.status}  {c.name.ljust(name_width)}{c.seconds:5.1f} s{detail}")
    lines += ["", f"The backend says: {report.promise.note}."]
    if report.alternative:
        lines.append(f"Exact alternative: {report.alternative}.")
    chosen = [c for r in report.chosen for c in r.cases if c.passed is not None]
    passed = sum(1 for c in chosen if c.passed)
    verdict = "reproducible" if report.passed else "NOT reproducible"
    lines.append(f"Result: the chosen settings are {verdict} ({passed} of {len(chosen)} cases passed) "
                 f"in {report.seconds:.1f} s")
    return "\n".join(lines) + "\n"
