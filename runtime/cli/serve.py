"""``parley serve``: run agents for a game over HTTP (see docs/serving.md)."""

from __future__ import annotations

import argparse
import logging
import math
import os
import signal
import sys
from pathlib import Path

from runtime.problems import BackendError, InputError

MIB_PER_GB = 1024
DEFAULT_KV_SHARE = 0.25  # of the machine's memory, for all NPCs' KV caches when --kv-budget is not given


def register(sub: argparse._SubParsersAction) -> None:
    from runtime.serve.crash_reports import STATE_ENV
    from runtime.serve.npcs import Limits
    from runtime.serve.server import TOKEN_ENV

    d = Limits()
    p = sub.add_parser("serve", help="run agents as a local server for a game (HTTP + Server-Sent Events)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this computer "
                   "only; any other needs a token)")
    p.add_argument("--port", type=int, default=8765, help="port (0: any free one; the address is printed)")
    p.add_argument("--backend", default="embedded", metavar="NAME|URL",
                   help="where the models run: embedded (default), a backend profile's name, a server's address "
                   "(llama+http://... or openai+http://...), or scripted (deterministic test replies)")
    p.add_argument("--assets", action="append", metavar="DIR", default=[],
                   help="a folder of workflow assets the server may load (repeat for more); nothing else is loaded")
    p.add_argument("--kv-budget", type=float, metavar="GB", help="embedded backend: the KV cache memory all NPCs' "
                   "contexts may take (default: a quarter of this machine's memory); the least recently used are "
                   "parked in RAM snapshots and restored on their next turn")
    p.add_argument("--park-budget", type=float, metavar="GB", help="embedded backend: the RAM "
                   "those parked snapshots may take (default 0.5); past it the least recently parked go to files in "
                   "the state folder and are read back on their NPC's next turn")
    p.add_argument("--threads", type=int, metavar="N", help="embedded backend: CPU threads that generate (default: "
                   "half the CPUs this process may use, and never all of them)")
    p.add_argument("--threads-batch", type=int, metavar="N", help="embedded backend: CPU threads that read prompts "
                   "(default: one fewer than the CPUs this process may use, leaving the game a core; llama.cpp's "
                   "threads wait for each other, so one the game holds slows every prompt)")
    p.add_argument("--exit-with-parent", action="store_true",
                   help="end when standard input reaches its end or the parent process ends (a game that starts "
                   "the server gives it a pipe as stdin: however the game ends, the server ends with it)")
    p.add_argument("--token-env", default=TOKEN_ENV, metavar="VAR",
                   help=f"environment variable holding the token every request must carry (default {TOKEN_ENV})")
    p.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN",
                   help="a web page's origin (scheme://host[:port]) whose scripts may call the server from a browser: "
                   "its preflights are answered and its requests allowed, with the token as ever (repeatable; "
                   "every other origin is treated as before)")
    p.add_argument("--max-body", type=int, default=d.max_body, metavar="BYTES", help="largest request body")
    p.add_argument("--max-line", type=int, default=d.max_line, metavar="CHARS", help="longest player line")
    p.add_argument("--max-sessions", type=int, default=d.max_sessions, metavar="N", help="most sessions at once")
    p.add_argument("--max-stream-events", type=int, default=d.max_stream_events, metavar="N",
                   help="most events one turn may stream")
    p.add_argument("--tool-timeout", type=float, default=d.tool_timeout, metavar="SECONDS",
                   help="how long a turn waits for the client's tool result")
    p.add_argument("--workers", type=int, default=8, metavar="N", help="turns run at once (others wait)")
    p.add_argument("--state-dir", type=Path, metavar="DIR",
                   help="where the server keeps its crash report while it runs; the next server on the same folder "
                   f"tells a crash in its log and in /v1/health (default: ${STATE_ENV}, else 'serve' in the user's "
                   "data folder)")
    p.add_argument("--log-format", choices=["text", "json"], default="text",
                   help="the log on standard error: plain lines, or one JSON object a line with the session and "
                   "turn each is about (for a log system)")
    p.add_argument("--store", default="", metavar="none|sqlite:PATH|postgresql://...",
                   help="where sessions are kept so a restart or a crash loses none: each finished turn is saved "
                   "before the game hears of it, and the next server serves every session again (default: "
                   "sessions.sqlite3 in the state folder; none: nothing is kept; postgresql://USER:PASSWORD@HOST"
                   ":PORT/DB: one store for several replicas, each reading a session as it is asked for)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from runtime.serve.logs import configure
    from runtime.serve.npcs import MAX_TOOL_TIMEOUT_S, Limits
    from runtime.serve.server import (
        ServeConfig,
        ServeConfigError,
        Stopped,
        check_config,
        serve_forever,
        token_from,
    )

    configure(args.log_format)
    for name in ("max_body", "max_line", "max_sessions", "max_stream_events", "workers", "threads", "threads_batch"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            print(f"parley serve: --{name.replace('_', '-')} must be at least 1", file=sys.stderr)
            return 2
    if args.kv_budget is not None and not 0 < args.kv_budget < math.inf:
        print("parley serve: --kv-budget must be positive", file=sys.stderr)
        return 2
    if not 0 < args.tool_timeout <= MAX_TOOL_TIMEOUT_S:  # NaN fails this too
        print(f"parley serve: --tool-timeout {args.tool_timeout:g}: seconds above 0 and at most "
              f"{MAX_TOOL_TIMEOUT_S:g} (a day)", file=sys.stderr)
        return 2
    limits = Limits(args.max_body, args.max_line, args.max_sessions, args.max_stream_events, args.tool_timeout)
    config = ServeConfig(args.host, args.port, [Path(a) for a in args.assets], token_from(args.token_env), limits,
                         args.workers, token_env=args.token_env, exit_with_parent=args.exit_with_parent,
                         cors_origins=list(args.cors_origin))
    try:
        check_config(config)
        backend = _backend(args, config.asset_dirs[0])
    except (ServeConfigError, BackendError, InputError) as exc:
        print(f"parley serve: {exc}", file=sys.stderr)
        return 2
    from runtime.crashes import CrashWatch
    from runtime.serve.crash_reports import WATCH_NAME, state_dir, tell_earlier_crashes
    from runtime.serve.store import StoreError, open_store

    folder = state_dir(args.state_dir)
    try:
        store = open_store(args.store, folder)
    except StoreError as exc:
        print(f"parley serve: {exc}", file=sys.stderr)
        backend.close()
        return 2
    logging.getLogger("parley.serve").info("sessions are kept in %s", store.label)
    previous_crash = tell_earlier_crashes(folder)
    watch = CrashWatch(folder, WATCH_NAME)
    if watch.start():
        logging.getLogger("parley.serve").info("crash reports go to %s (the next start tells one)", watch.file)
    # uvicorn ends on SIGTERM by raising it again once it has shut down, which would end the process
    # before the ``finally`` below: then the next start would take this clean exit for a crash.
    default_sigterm = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    stopped = Stopped()
    code = 1  # the exit code, should a turn outlive the shutdown (the process then ends at once)
    try:
        serve_forever(config, backend, crash_watch=watch, previous_crash=previous_crash, store=store, stopped=stopped)
        code = 0
    except OSError as exc:
        print(f"parley serve: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
        raise
    finally:
        signal.signal(signal.SIGTERM, default_sigterm)
        if stopped.turns_ended:
            backend.close()  # never under a turn still running in it
        watch.stop()
        store.close()
        if not stopped.turns_ended:
            logging.shutdown()
            os._exit(code)  # that turn's thread is inside the model: ending the interpreter around it could crash
    return 0


def _exit_on_sigterm(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def _backend(args: argparse.Namespace, asset_dir: Path):
    from runtime.backends.profiles import backend_factory

    if args.backend.strip() != "embedded":
        given = [f"--{name.replace('_', '-')}" for name in ("kv_budget", "park_budget", "threads", "threads_batch")
                 if getattr(args, name) is not None]
        if given:
            raise BackendError(f"{', '.join(given)}: settings of the embedded backend; a server backend has its own "
                               "(set them where it runs)")
        return backend_factory(args.backend, asset_dir)()
    from runtime.backends.llama import LlamaBackend
    from runtime.serve.server import serve_threads

    threads, threads_batch = serve_threads(args.threads, args.threads_batch)
    logging.getLogger("parley.serve").info("llama.cpp threads: %d to generate, %d to read prompts", threads,
                                           threads_batch)
    kv_budget = args.kv_budget * MIB_PER_GB if args.kv_budget is not None else default_kv_budget_mib()
    if args.kv_budget is None and kv_budget is not None:
        logging.getLogger("parley.serve").info(
            "KV cache budget: %.1f GB, a quarter of this machine's memory (--kv-budget sets another)",
            kv_budget / MIB_PER_GB)
    park_mib, park_dir = _parking(args)
    return LlamaBackend(asset_dir, kv_budget_mib=kv_budget, n_threads=threads, n_threads_batch=threads_batch,
                        park_mib=park_mib, park_dir=park_dir)


def default_kv_budget_mib(share: float = DEFAULT_KV_SHARE) -> float | None:
    """The KV budget when ``--kv-budget`` is not given: ``share`` of this machine's memory, in MiB
    (None where the machine does not say how much it has). With no budget, every session kept its
    contexts for its whole life: about 61 MB each on the sample model, so 1,000 sessions (the default
    cap) would want 61 GB."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None
    return total / (1024 * 1024) * share if total > 0 else None


def _parking(args: argparse.Namespace) -> tuple[float, Path]:
    """``--park-budget`` in MiB, and the folder parked snapshots past it go to: ``parked`` in the state
    folder, on the disk chosen for the server's state (the system's temporary folder may be RAM)."""
    from runtime.backends.llama import PARK_BUDGET_MIB
    from runtime.serve.crash_reports import state_dir

    if args.park_budget is not None and not args.park_budget >= 0:  # NaN too
        raise BackendError(f"--park-budget must be 0 or more GB, not {args.park_budget:g}")
    park_mib = PARK_BUDGET_MIB if args.park_budget is None else args.park_budget * MIB_PER_GB
    return park_mib, state_dir(args.state_dir) / "parked"
