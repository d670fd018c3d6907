"""``parley serve``: run agents for a game over HTTP (see docs/serving.md)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path

from runtime.problems import BackendError, InputError

MIB_PER_GB = 1024


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
                   "contexts may take; the least recently used are parked in RAM snapshots and restored on their "
                   "next turn")
    p.add_argument("--park-budget", type=float, metavar="GB", help="embedded backend with --kv-budget: the RAM "
                   "those parked snapshots may take (default 0.5); past it the least recently parked go to files in "
                   "the state folder and are read back on their NPC's next turn")
    p.add_argument("--token-env", default=TOKEN_ENV, metavar="VAR",
                   help=f"environment variable holding the token every request must carry (default {TOKEN_ENV})")
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
    from runtime.serve.npcs import Limits
    from runtime.serve.server import ServeConfig, ServeConfigError, check_config, serve_forever, token_from

    configure(args.log_format)
    for name in ("max_body", "max_line", "max_sessions", "max_stream_events", "workers"):
        if getattr(args, name) < 1:
            print(f"parley serve: --{name.replace('_', '-')} must be at least 1", file=sys.stderr)
            return 2
    if args.tool_timeout <= 0 or (args.kv_budget is not None and args.kv_budget <= 0):
        print("parley serve: --tool-timeout and --kv-budget must be positive", file=sys.stderr)
        return 2
    limits = Limits(args.max_body, args.max_line, args.max_sessions, args.max_stream_events, args.tool_timeout)
    config = ServeConfig(args.host, args.port, [Path(a) for a in args.assets], token_from(args.token_env), limits,
                         args.workers, token_env=args.token_env)
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
    try:
        serve_forever(config, backend, crash_watch=watch, previous_crash=previous_crash, store=store)
    except OSError as exc:
        print(f"parley serve: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, default_sigterm)
        backend.close()
        watch.stop()
        store.close()
    return 0


def _exit_on_sigterm(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def _backend(args: argparse.Namespace, asset_dir: Path):
    from runtime.backends.profiles import backend_factory

    if args.kv_budget is not None or args.park_budget is not None:
        if args.backend != "embedded":
            flag = "--kv-budget" if args.kv_budget is not None else "--park-budget"
            raise BackendError(f"{flag} sizes the embedded backend's caches; a server backend manages its own")
        from runtime.backends.llama import LlamaBackend

        park_mib, park_dir = _parking(args)
        kv_budget = args.kv_budget * MIB_PER_GB if args.kv_budget is not None else None
        return LlamaBackend(asset_dir, kv_budget_mib=kv_budget, park_mib=park_mib, park_dir=park_dir)
    return backend_factory(args.backend, asset_dir)()


def _parking(args: argparse.Namespace) -> tuple[float, Path]:
    """``--park-budget`` in MiB, and the folder parked snapshots past it go to: ``parked`` in the state
    folder, on the disk chosen for the server's state (the system's temporary folder may be RAM)."""
    from runtime.backends.llama import PARK_BUDGET_MIB
    from runtime.serve.crash_reports import state_dir

    if args.park_budget is not None and not args.park_budget >= 0:  # NaN too
        raise BackendError(f"--park-budget must be 0 or more GB, not {args.park_budget:g}")
    park_mib = PARK_BUDGET_MIB if args.park_budget is None else args.park_budget * MIB_PER_GB
    return park_mib, state_dir(args.state_dir) / "parked"
