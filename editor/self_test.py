"""``parley-studio --self-test``: check that an installed app can run an agent.

Opens the example chat agent (``resources/examples/chat.json``), runs one turn on the
sample model (fetching it into the models folder first when it is missing), prints the
reply and a summary of the turn's diagnostics, and returns 0. Any failure prints what
failed and what to do, and returns 1. No window is opened: this exercises exactly the
parts a frozen build can lose (resources, llama.cpp's libraries, the model folder).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TextIO

from runtime.diagnostics import TurnDiagnostics

SELF_TEST_ASSET = "chat.json"
SELF_TEST_LINE = "Hello! Who are you, and what is this place?"


def run_self_test(out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run the self-test; 0 when a turn ran and gave a reply, 1 otherwise."""
    _use_parent_console()
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        return _self_test(out)
    except SelfTestFailure as failure:
        print(f"self-test FAILED: {failure}", file=err)
    except Exception as exc:  # noqa: BLE001 - a self-test reports every failure instead of a traceback
        import traceback

        traceback.print_exc(file=err)
        print(f"self-test FAILED: unexpected {type(exc).__name__}: {exc}", file=err)
    return 1


class SelfTestFailure(Exception):
    """A step of the self-test failed; the message says which and why."""


def _self_test(out: TextIO) -> int:
    from runtime.agent import TurnError
    from runtime.asset.file import load_asset
    from runtime.models.folder import SAMPLE_MODEL, ModelFileError, ensure_sample_model, resolve_model
    from runtime.problems import BackendError, InputError
    from runtime.resources import examples_dir
    from runtime.session.failures import failure_of
    from runtime.session.session import Session

    def say(message: str) -> None:
        print(message, file=out, flush=True)

    kind = "frozen app" if getattr(sys, "frozen", False) else "source checkout"
    say(f"Parley Studio self-test ({kind}, Python {sys.version.split()[0]})")

    asset_path = examples_dir() / SELF_TEST_ASSET
    try:
        asset = load_asset(asset_path)
    except InputError as exc:
        raise SelfTestFailure(f"cannot open the example agent {asset_path}:\n{exc}") from None
    say(f"asset: {asset_path} ({asset.name})")

    try:
        model = resolve_model(asset.default_model, asset_path.parent)
    except ModelFileError:
        if Path(asset.default_model).name != SAMPLE_MODEL.file_name:
            raise
        say("The sample model is not in the models folder yet; fetching it (first run).")
        try:
            model = ensure_sample_model(progress=say)
        except ModelFileError as exc:
            raise SelfTestFailure(str(exc)) from None
    say(f"model: {model}")

    try:
        from runtime.backends.llama import LlamaBackend
    except (ImportError, OSError, RuntimeError) as exc:
        # A frozen build that lost llama.cpp's shared libraries fails here.
        raise SelfTestFailure(f"llama.cpp cannot be loaded: {exc}") from None

    backend = LlamaBackend(asset_dir=asset_path.parent)
    started = time.perf_counter()
    try:
        result = Session(asset, backend, asset_path.parent).turn(SELF_TEST_LINE)
    except (TurnError, BackendError, InputError) as exc:
        raise SelfTestFailure(f"the turn failed ({failure_of(exc).code}): {failure_of(exc).message}") from None
    finally:
        backend.close()
    seconds = time.perf_counter() - started

    say(f"player: {SELF_TEST_LINE}")
    say(f"reply: {result.reply}")
    if result.diagnostics is None:
        raise SelfTestFailure(f"{asset_path}: the turn produced no diagnostics (enable_diagnostics is off)")
    for line in diagnostics_summary(result.diagnostics):
        say(line)
    if not result.reply.strip():
        raise SelfTestFailure("the model gave an empty reply")
    say(f"self-test passed in {seconds:.1f} s")
    return 0


def diagnostics_summary(diagnostics: TurnDiagnostics) -> list[str]:
    """A few lines a person can read: the path, each node's tokens and times, the warnings."""
    path = " -> ".join(diagnostics.path) or "(none)"
    warnings = len(diagnostics.warnings)
    lines = [f"diagnostics: turn {diagnostics.turn}, path {path}, {diagnostics.total_ms:.0f} ms, {warnings} warning(s)"]
    for node in diagnostics.nodes:
        t = node.tokens
        budget = f", budget {t.budget}" if t.budget is not None else ""
        lines.append(
            f"  {node.node} ({node.type}): prompt {t.prompt} tokens ({t.reused} reused, {t.evaluated} read{budget}), "
            f"{t.generated} generated; {node.timings.prompt_ms:.0f} ms reading, "
            f"{node.timings.generate_ms:.0f} ms generating; exit {node.exit or '-'}"
        )
    lines.extend(f"  warning: {w}" for w in diagnostics.warnings)
    return lines


def _use_parent_console() -> None:
    """On Windows the app is a GUI program without standard output; write to the console
    that started it, if any (output redirected to a file or pipe is already there)."""
    if sys.platform != "win32" or sys.stdout is not None:
        return
    import ctypes

    attach_parent_process = -1
    if ctypes.windll.kernel32.AttachConsole(attach_parent_process):
        sys.stdout = open("CONOUT$", "w", encoding="utf-8", errors="replace")  # noqa: SIM115 - lives as long as the process
        sys.stderr = sys.stdout
