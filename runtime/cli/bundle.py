"""``parley bundle ASSET HISTORY -o OUT.parley-bundle`` and ``parley replay BUNDLE``: repro bundles.

``parley bundle`` writes one file holding the asset, the model files' hashes, the llama.cpp build, the
engine settings that decide the numbers and the whole conversation with each node's decode journal
(``runtime.bundle.file``). The settings are those the history was made with: ``parley chat``'s and
the editor's defaults unless the flags say otherwise.

``parley replay BUNDLE`` replays every exact turn of the bundle's conversation in a fresh engine and
compares it byte for byte (``runtime.bundle.replay``). Exit 0 when every turn is identical, 1 when one
differs or fails (the first is named by turn, node and token), 2 on bad input: a bundle that cannot
be read (each problem by field), a model not found or with another SHA-256 (unless ``--force``).

The bundle holds every behaviour file the asset's Subgraph nodes run, and a replay expands the graph
from those, never from the disk. ``parley unpack BUNDLE FOLDER`` writes the asset, its behaviours and
the conversation into FOLDER (and nowhere else), to open them in the editor.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TextIO

from runtime.cli.test import printable
from runtime.models.context_settings import FLASH_ATTN_MODES, KV_TYPES
from runtime.models.folder import unusable_path
from runtime.problems import BackendError, InputError


def register(sub: argparse._SubParsersAction) -> None:
    b = sub.add_parser("bundle", help="write a repro bundle: the asset, model hashes, settings and the conversation",
                       description="Write one file that `parley replay` repeats byte for byte elsewhere.")
    b.add_argument("asset", metavar="ASSET", help="the workflow asset (.json) the history was made on")
    b.add_argument("history", metavar="HISTORY", help="the dialog history (parley chat --history-out, or the "
                   "Conversation dock's Export)")
    b.add_argument("-o", "--output", required=True, metavar="OUT.parley-bundle", help="the bundle to write")
    b.add_argument("--model", metavar="GGUF", help="the model every node without its own model_name used "
                   "(as parley chat --model)")
    b.add_argument("--threads", type=int, metavar="N", help="threads that generated (default: as parley chat)")
    b.add_argument("--threads-batch", type=int, metavar="N", help="threads that read prompts (default: as parley chat)")
    b.add_argument("--batch", type=int, metavar="N", help="tokens per prompt chunk (default: as parley chat)")
    b.add_argument("--kv-type", choices=KV_TYPES, help="KV cache type (default: f16)")
    b.add_argument("--flash-attn", choices=FLASH_ATTN_MODES, help="flash attention (default: off)")
    b.set_defaults(func=run_bundle)

    r = sub.add_parser("replay", help="replay a repro bundle and say whether every turn is byte-identical",
                       description="Replay every turn of a bundle's conversation in a fresh engine with its "
                       "settings. Exit 0 when all are identical, 1 naming the first turn, node and token that "
                       "differ, 2 on bad input.")
    r.add_argument("bundle", metavar="BUNDLE", help="the .parley-bundle file")
    r.add_argument("--model", action="append", default=[], metavar="PATH",
                   help="the model file to use (the bundle's only model, or the one with this file name); "
                   "default: the name the asset gives, then the models folder")
    r.add_argument("--force", action="store_true", help="replay on a model file whose SHA-256 differs")
    r.add_argument("--stop-at-first", action="store_true", help="stop at the first turn that differs")
    r.add_argument("--json", action="store_true", help="print the report as JSON")
    r.set_defaults(func=run_replay)

    u = sub.add_parser("unpack", help="write a repro bundle's asset, behaviours and conversation into a folder",
                       description="Write the bundle's asset (its file's name), the behaviour files it runs (at "
                       "their paths) and the conversation (<asset>.dialog.json) into FOLDER and nowhere else. "
                       "A file there already is never overwritten. Exit 2 on a bundle or folder it refuses.")
    u.add_argument("bundle", metavar="BUNDLE", help="the .parley-bundle file")
    u.add_argument("folder", metavar="FOLDER", help="the folder to write into (it must exist)")
    u.set_defaults(func=run_unpack)


def _problem_lines(exc: Exception) -> str:
    if isinstance(exc, InputError):
        return "\n".join(printable(p) for p in exc.problems)
    return printable(exc)


def _path_problems(flags: list[tuple[str, str | None]]) -> list[str]:
    return [f"{flag} {path!r} is not a path: {unusable}" for flag, path in flags
            if path is not None and (unusable := unusable_path(path))]


def run_bundle(args: argparse.Namespace, stdout: TextIO | None = None) -> int:
    out, err = stdout or sys.stdout, sys.stderr
    bad = _path_problems([("ASSET", args.asset), ("HISTORY", args.history), ("-o", args.output),
                          ("--model", args.model)])
    for flag, value in (("--threads", args.threads), ("--threads-batch", args.threads_batch), ("--batch", args.batch)):
        if value is not None and value < 1:
            bad.append(f"{flag} {value}: give a whole number from 1")
    target = Path(args.output)
    if not bad and target.is_dir():
        bad.append(f"-o {args.output}: is a folder; give a file name in it")
    elif not bad and not target.parent.is_dir():
        bad.append(f"-o {args.output}: the folder {target.parent} does not exist")
    if bad:
        print("\n".join(bad), file=err)
        return 2
    from runtime.asset.file import load_asset
    from runtime.bundle.file import make_bundle, write_bundle
    from runtime.dialogue.dialog_file import load_history

    try:
        asset = load_asset(args.asset)
        if args.model:
            asset = asset.model_copy(update={"default_model": args.model})
        saved = load_history(args.history)
    except InputError as exc:
        print(_problem_lines(exc), file=err)
        return 2
    asset_dir = Path(args.asset).parent
    try:
        from runtime.backends.llama import LlamaBackend

        settings = {name: value for name, value in (
            ("n_threads", args.threads), ("n_threads_batch", args.threads_batch), ("n_batch", args.batch),
            ("kv_type", args.kv_type), ("flash_attn", args.flash_attn)) if value is not None}
        backend = LlamaBackend(asset_dir, **settings)
    except (ImportError, BackendError) as exc:
        print(f"parley bundle: {printable(exc)}", file=err)
        return 2
    try:
        bundle = make_bundle(asset, saved, backend, asset_dir, asset_source=args.asset)
        size = write_bundle(bundle, target)
    except InputError as exc:
        print(_problem_lines(exc), file=err)
        return 2
    except OSError as exc:
        print(f"{args.output}: error: cannot write the bundle: {exc.strerror or exc}", file=err)
        return 2
    finally:
        backend.close()
    models = ", ".join(f"{m.file} (SHA-256 {m.sha256[:12]}\u2026)" for m in bundle.models) or "no model"
    print(printable(f"wrote {args.output} ({size:,} bytes): {len(saved.tree or [])} turns on {models}; "
                    f"{bundle.settings.text}"), file=out)
    return 0


def run_replay(args: argparse.Namespace, stdout: TextIO | None = None) -> int:
    out, err = stdout or sys.stdout, sys.stderr
    bad = _path_problems([("BUNDLE", args.bundle), *(("--model", m) for m in args.model)])
    if bad:
        print("\n".join(bad), file=err)
        return 2
    from runtime.bundle.file import load_bundle

    try:
        bundle = load_bundle(args.bundle)
    except InputError as exc:
        print(_problem_lines(exc), file=err)
        return 2
    try:
        from runtime.bundle.replay import replay_bundle
    except ImportError as exc:
        print(f"parley replay: the llama.cpp backend is not available ({exc}); install llama-cpp-python", file=err)
        return 2

    def said(turn) -> None:
        if not args.json:
            print(printable(turn.describe()), file=out, flush=True)

    if not args.json:
        models = ", ".join(f"{m.file} (SHA-256 {m.sha256[:12]}\u2026)" for m in bundle.models) or "no model"
        print(printable(f"replaying {args.bundle}: {len(bundle.conversation.tree or [])} turns on {models}, "
                        f"llama-cpp-python {bundle.llama.version}, {bundle.settings.text}"), file=out, flush=True)
    try:
        report = replay_bundle(bundle, args.model, force=args.force, stop_at_first=args.stop_at_first, on_turn=said)
    except InputError as exc:
        print(_problem_lines(exc), file=err)
        return 2
    except BackendError as exc:
        print(f"parley replay: {printable(exc)}", file=err)
        return 2
    if args.json:
        print(json.dumps(report.to_dict(), ensure_ascii=False, indent=2), file=out)
        return 0 if report.identical else 1
    for note in report.notes:
        print(printable(f"note: {note}"), file=out)
    first = report.first_difference
    replayed = len(report.turns) - report.count("skipped")
    if first is None:
        skipped = report.count("skipped")
        print(f"byte-identical: {replayed} of {replayed} turns replayed"
              + (f" ({skipped} skipped)" if skipped else ""), file=out)
        return 0
    different = report.count("different") + report.count("failed")
    print(printable(f"first difference: {first.describe()}"), file=out)
    print(f"{different} of {replayed} turns replayed differ" + (" (stopped at the first)" if report.stopped_early
                                                                else ""), file=out)
    return 1


def run_unpack(args: argparse.Namespace, stdout: TextIO | None = None) -> int:
    out, err = stdout or sys.stdout, sys.stderr
    bad = _path_problems([("BUNDLE", args.bundle), ("FOLDER", args.folder)])
    if bad:
        print("\n".join(bad), file=err)
        return 2
    from runtime.bundle.file import load_bundle, unpack_bundle

    try:
        written = unpack_bundle(load_bundle(args.bundle), args.folder)
    except InputError as exc:
        print(_problem_lines(exc), file=err)
        return 2
    except OSError as exc:
        print(f"{args.folder}: error: cannot write: {exc.strerror or exc}", file=err)
        return 2
    for path in written:
        print(printable(f"wrote {path}"), file=out)
    return 0
