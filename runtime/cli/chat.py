"""``parley chat ASSET``: talk to an agent in the terminal, or run a script of player lines.

Interactive when no ``--script`` is given (replies stream as they are written; an
empty line or end of input ends the chat). With ``--script FILE`` every non-empty
line of FILE is one player line and each reply is printed. ``--diagnostics OUT.jsonl``
appends one turn-diagnostics object per turn; ``--history-in``/``--history-out`` load
and save the dialog history (with the agent state that shapes future prompts). ``--history-out``
is replaced at the end only if no other process wrote it since the chat began (else the
conversation goes to ``NAME.1.json`` beside it) and only if it could be read back (at most
``MAX_HISTORY_BYTES``; else the file is kept): either way the exit code is 1.

``--from-turn N`` (with ``--history-in``) rewinds the loaded conversation to before turn N (turns
count from 1) exactly as it was then, and goes on from there: with the lines of ``--script``, or,
without one, by replaying the history's own player lines from turn N with the asset as it is now,
saying per turn whether the reply changed. The turns it replaces stay in the saved history as a branch.
"""

from __future__ import annotations

import argparse
import io
import itertools
import os
import sys
from pathlib import Path
from typing import Any, TextIO

from runtime.agent import Agent, TurnError
from runtime.asset.file import load_asset
from runtime.backends.base import Backend
from runtime.dialogue.dialog_file import (
    HistoryConflict,
    HistoryError,
    file_stamp,
    load_history,
    save_history,
    unknown_node_problems,
)
from runtime.events import Event, Token
from runtime.models.folder import unusable_path
from runtime.names import without_surrogates
from runtime.problems import BackendError, InputError
from runtime.session.failures import failure_of
from runtime.session.session import Session


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("chat", help="talk to an agent, or run a script of player lines through it")
    p.add_argument("asset", metavar="ASSET", help="the workflow asset (.json)")
    p.add_argument("--model", metavar="GGUF", help="model file for every node without its own model_name "
                   "(replaces the asset's default_model)")
    p.add_argument("--script", metavar="FILE", help="one player line per line; replies are printed")
    p.add_argument("--diagnostics", metavar="OUT.jsonl", help="append one diagnostics object per turn")
    p.add_argument("--history-in", metavar="FILE", help="start from this dialog history")
    p.add_argument("--history-out", metavar="FILE", help="save the dialog history here at the end")
    p.add_argument("--from-turn", metavar="N", type=int, help="with --history-in: go back to before turn N "
                   "(from 1) and go on from there with --script, or replay the history's lines from turn N")
    p.add_argument("--instructions", default="", help="this-turn instructions for every turn ({{instructions}})")
    p.add_argument("--backend", default="embedded", metavar="NAME|URL",
                   help="where the model runs: embedded (this computer, the default), a backend profile's name "
                   "(parley backends list), a server's address (http://HOST:PORT; llama+ or openai+ before it "
                   "says which kind), or scripted (deterministic test replies)")
    p.set_defaults(func=run)


def make_backend(args: argparse.Namespace) -> Backend:
    """The backend ``args`` ask for. Raises ``BackendError`` (or ``InputError`` for a broken profiles
    file) when it cannot be made."""
    from runtime.backends.profiles import backend_factory

    try:
        # Model names resolve against the asset's folder, then the models folder (PARLEY_MODELS_DIR).
        return backend_factory(args.backend, Path(args.asset).parent)()
    except ImportError as exc:
        raise BackendError(
            f"the llama.cpp backend is not available ({exc}); install llama-cpp-python, "
            "or use --backend scripted for deterministic test replies"
        ) from None


def run(args: argparse.Namespace, stdin: TextIO | None = None, stdout: TextIO | None = None) -> int:
    stdin = stdin or sys.stdin
    out = _TextOnly(stdout or sys.stdout)
    err = sys.stderr
    # Flags are checked before any file is read or written: a typo never costs a history.
    bad_flags = _flag_problems(args)
    if bad_flags:
        for message in bad_flags:
            print(message, file=err)
        return 2
    instructions = without_surrogates(args.instructions)
    # What --history-out is now: at the end it is replaced only if no one else wrote it meanwhile.
    out_stamp = file_stamp(args.history_out) if args.history_out else None
    try:
        asset = load_asset(args.asset)
        if args.model:
            asset = asset.model_copy(update={"default_model": args.model})
        saved = load_history(args.history_in) if args.history_in else None
        if saved is not None:
            unknown = unknown_node_problems(saved, set(asset.node_ids()), args.history_in)
            if unknown:
                raise HistoryError(unknown)
        lines = _script_lines(args.script) if args.script else None
        backend = make_backend(args)
    except (InputError, BackendError) as exc:
        print(exc, file=err)
        _history_not_saved(args, err)
        return 1
    from_turn = getattr(args, "from_turn", None)
    if from_turn is not None and (saved is None or not 1 <= from_turn <= len(saved.history.turns) + 1):
        have = "no --history-in" if saved is None else f"the history has {len(saved.history.turns)} turns"
        print(f"--from-turn {from_turn}: {have}; give --history-in and a turn from 1 to the number of turns + 1",
              file=err)
        backend.close()
        return 2

    agent = Session(asset, backend, Path(args.asset).parent).agent
    code = 0
    recorded: list[tuple[str, str]] = []
    # --history-out replaces its file with the agent's dialog: only once the agent holds the
    # history it was asked to start from (else a refused --history-in would be overwritten with nothing).
    loaded = saved is None
    try:
        if saved is not None:
            agent.import_dialog(saved, args.history_in)
            loaded = True
        if from_turn is not None:
            recorded = agent.recorded_lines(from_turn - 1)
            agent.rewind(from_turn - 1)
            if lines is None:
                lines = [line for line, _ in recorded]  # replay with the asset as it is now
            else:
                recorded = []
        interactive = lines is None
        if interactive:
            _read_bad_bytes_as_replacement(stdin)
        for number, line in enumerate(lines if lines is not None else _prompted_lines(stdin, out)):
            streamed: list[str] = []
            try:
                result = agent.run_turn(
                    line, instructions, on_event=_streamer(interactive, out, streamed),
                    tool_result=_tool_answerer(interactive, stdin, out),
                )
            except (TurnError, BackendError, InputError) as exc:
                failure = failure_of(exc)
                print(f"\n{args.asset}: turn failed ({failure.code}): {failure.message}", file=err)
                code = 1
                if interactive:
                    continue
                break
            if interactive:
                out.write("\n" if streamed else f"{result.reply}\n")
            elif recorded:
                same = "unchanged" if result.reply == recorded[number][1] else "CHANGED" + _numerics_note(backend)
                out.write(f"> {line}\n{result.reply}\n[turn {result.turn + 1}: reply {same}]\n")
            else:
                out.write(f"> {line}\n{result.reply}\n")
            out.flush()
            if args.diagnostics and result.diagnostics is not None:
                try:
                    with open(args.diagnostics, "a", encoding="utf-8") as fh:
                        fh.write(without_surrogates(result.diagnostics.to_json_line()))
                except OSError as exc:
                    print(f"{args.diagnostics}: error: cannot write the diagnostics: {exc.strerror or exc}", file=err)
                    code = 1
                    break
    except InputError as exc:
        print(exc, file=err)
        code = 1
    finally:
        if args.history_out and loaded:
            if not _save_history_out(agent, args.history_out, out_stamp, err):
                code = 1
        elif args.history_out:
            _history_not_saved(args, err)
        backend.close()
    return code


def _numerics_note(backend: Backend) -> str:
    """After "CHANGED": said when the backend does not promise exact replays, so a changed reply
    may be numerics rather than the graph (nothing when it does)."""
    try:
        promise = backend.reproducibility()
    except Exception as exc:  # noqa: BLE001 - a plugin's or a server's answer: the turn itself ran
        return f" (not a sure sign: {backend.label} could not say whether it repeats itself: {exc})"
    return "" if promise.exact else f" (not a sure sign: {promise.note})"


def _save_history_out(agent: Agent, path: str, stamp, err: TextIO) -> bool:
    """Save the dialog to ``path`` unless another process wrote it since this chat began (then to a
    new file beside it, so neither is lost), or it would be too large to read back (then nowhere;
    the file is kept). Says what happened on ``err``; False when the history is not in ``path``."""
    saved = agent.export_dialog()
    try:
        save_history(saved, path, expected=stamp)
        return True
    except HistoryConflict as exc:
        print(exc, file=err)
        beside = _free_name_beside(path)
        try:
            save_history(saved, beside, expected=None)
            print(f"{path}: this conversation is saved to {beside} instead", file=err)
        except (HistoryError, OSError) as again:
            print(f"{beside}: error: cannot save the history there either: "
                  f"{getattr(again, 'strerror', None) or again}", file=err)
    except HistoryError as exc:
        print(exc, file=err)
    except OSError as exc:
        print(f"{path}: error: cannot save the history: {exc.strerror or exc}", file=err)
    return False


def _free_name_beside(path: str) -> str:
    """``NAME.1.json`` (or .2, ...) beside ``NAME.json``: a file name not taken."""
    target = Path(path)
    for number in itertools.count(1):
        candidate = target.with_name(f"{target.stem}.{number}{target.suffix}")
        if not candidate.exists():
            return str(candidate)
    raise AssertionError("unreachable")


def _flag_problems(args: argparse.Namespace) -> list[str]:
    """What is wrong with the flags themselves, one message each; checked before touching any file."""
    problems: list[str] = []
    for flag, path in (("ASSET", args.asset), ("--script", args.script), ("--history-in", args.history_in),
                       ("--history-out", args.history_out), ("--diagnostics", args.diagnostics)):
        unusable = unusable_path(path) if path is not None else ""
        if unusable:
            problems.append(f"{flag} {path!r} is not a path: {unusable}")
    if problems:
        return problems
    from_turn = getattr(args, "from_turn", None)
    if from_turn is not None:
        if not args.history_in:
            problems.append(f"--from-turn {from_turn}: give --history-in, the history to go back in")
        elif from_turn < 1:
            problems.append(f"--from-turn {from_turn}: turns count from 1")
    for flag, path, replaced in (("--history-out", args.history_out, True), ("--diagnostics", args.diagnostics, False)):
        if path is not None:
            problem = _output_problem(path, replaced)
            if problem:
                problems.append(f"{flag} {path}: {problem}")
    if args.history_out is not None and args.diagnostics is not None and _same_file(args.history_out, args.diagnostics):
        problems.append("--history-out and --diagnostics name the same file; give each its own")
    return problems


def _output_problem(path: str, replaced: bool) -> str:
    """Why ``path`` cannot be written (``replaced``: a whole new file goes there; else lines are
    appended), or ''."""
    if not path.strip():
        return "no file name given"
    try:
        target = Path(path)
        folder = target.parent
        if target.is_dir():
            return "is a folder; give a file name in it"
        if not folder.exists():
            return f"the folder {folder} does not exist; create it first or give another path"
        if not folder.is_dir():
            return f"{folder} is not a folder"
        if target.exists() and replaced and not target.is_file():
            return "is not a regular file; give the path of a file to write"
        writable = os.access(target, os.W_OK) if target.exists() and not replaced else os.access(folder, os.W_OK)
        if not writable:
            return f"cannot write {'to it' if target.exists() and not replaced else f'in the folder {folder}'} (permission denied)"
    except (OSError, ValueError) as exc:  # a name too long, a NUL byte in it
        return f"not a usable path ({getattr(exc, 'strerror', None) or exc})"
    return ""


def _same_file(a: str, b: str) -> bool:
    try:
        return Path(a).resolve() == Path(b).resolve()
    except (OSError, ValueError, RuntimeError):
        return False


def _history_not_saved(args: argparse.Namespace, err: TextIO) -> None:
    if args.history_out and args.history_in:
        print(f"{args.history_out}: not written: the history from --history-in was not loaded, and saving "
              "would replace the file with an empty history", file=err)


class _TextOnly(io.TextIOBase):
    """Writes to ``stream``, lone surrogates (bytes typed that were not UTF-8) as U+FFFD, so a
    terminal that takes only UTF-8 never fails the chat."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self.stream = stream

    def write(self, text: str) -> int:
        return self.stream.write(without_surrogates(text))

    def flush(self) -> None:
        self.stream.flush()


def _read_bad_bytes_as_replacement(stdin: TextIO) -> None:
    """A byte that is not UTF-8, typed into the terminal, reads as U+FFFD instead of stopping the chat."""
    reconfigure = getattr(stdin, "reconfigure", None)
    if reconfigure is not None:
        try:
            reconfigure(errors="replace")
        except (ValueError, OSError, io.UnsupportedOperation):
            pass


def _script_lines(path: str) -> list[str]:
    from runtime.problems import Problem

    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError([Problem("error", f"cannot read the script: {getattr(exc, 'strerror', None) or exc}", path)]) from None
    return [line.strip() for line in text.splitlines() if line.strip()]


def _prompted_lines(stdin: TextIO, out: TextIO):
    while True:
        out.write("you> ")
        out.flush()
        try:
            line = stdin.readline()
        except UnicodeDecodeError:  # a stream that could not be told to replace bad bytes
            out.write("(that line was not UTF-8 text; type it again)\n")
            continue
        if not line or not line.strip():
            return
        yield without_surrogates(line.strip())


def _streamer(interactive: bool, out: TextIO, streamed: list[str]):
    """Interactive chats show the reply as it is written."""

    def on_event(event: Event) -> None:
        if interactive and isinstance(event, Token):
            streamed.append(event.text)
            out.write(event.text)
            out.flush()

    return on_event


def _tool_answerer(interactive: bool, stdin: TextIO, out: TextIO):
    if not interactive:
        return None  # a tool without mock_result fails the turn with a clear error

    def answer(node_id: str, tool: str, arguments: dict[str, Any]) -> str:
        out.write(f"\n[{node_id} calls {tool}({arguments})] result> ")
        out.flush()
        try:
            return without_surrogates(stdin.readline().strip())
        except UnicodeDecodeError:
            return "\ufffd"

    return answer
