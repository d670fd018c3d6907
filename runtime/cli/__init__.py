"""The ``parley`` command line: ``parley validate``, ``parley chat``, ``parley estimate``, ``parley models``,
``parley test``, ``parley backends``, ``parley bundle``, ``parley replay``, ``parley doctor``, ``parley serve``,
``parley strings``.

Each subcommand lives in its own module with ``register(subparsers)``, which adds
its parser and sets ``func`` to a function taking the parsed arguments and
returning the exit code.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Modules that define a subcommand (each has register(subparsers)).
COMMANDS = [
    "runtime.cli.validate",
    "runtime.cli.estimate",
    "runtime.cli.models",
    "runtime.cli.chat",
    "runtime.cli.test",
    "runtime.cli.backends",
    "runtime.cli.bundle",  # bundle and replay
    "runtime.cli.doctor",
    "runtime.cli.serve",
    "runtime.cli.strings",  # strings export and import
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="parley", description="Parley Studio's runtime: validate, run and size agents.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        parser = build_parser()  # imports the subcommands, and through them loads the node type plugins
    except KeyboardInterrupt:  # Ctrl+C (or a plugin raising it) while starting: said, not a traceback
        print("parley: interrupted while starting", file=sys.stderr)
        return 130
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
