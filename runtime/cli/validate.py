"""``parley validate ASSET...``: every problem as ``file:node_id.field: message``."""

from __future__ import annotations

import argparse
import sys

from runtime.validation import check_file


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("validate", help="check assets; exit 1 on errors, 0 on warnings only")
    p.add_argument("assets", nargs="+", metavar="ASSET")
    p.add_argument("--quiet", action="store_true", help="print errors only")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    errors = 0
    for path in args.assets:
        problems = check_file(path)
        for problem in problems:
            if problem.severity == "error":
                errors += 1
            elif args.quiet:
                continue
            print(problem, file=sys.stdout)
        if not problems and not args.quiet:
            print(f"{path}: ok")
    return 1 if errors else 0
