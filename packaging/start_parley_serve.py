"""What the frozen ``parley-serve`` runs: ``parley serve`` with the same options.

``parley-serve --port 0 --assets DIR`` is ``parley serve --port 0 --assets DIR``. Only the
``serve`` subcommand is registered, so the executable carries none of the other tools' imports
(parley test's statistics, its YAML suites). ``freeze_support`` lets the executable be its own child
process: llama.cpp's self-check (runtime.backends.llama_build) decodes in one before the first
model load.
"""

import multiprocessing
import sys


def main(argv: list[str]) -> int:
    import argparse

    from runtime.cli import serve

    commands = argparse.ArgumentParser().add_subparsers()
    serve.register(commands)
    parser = commands.choices["serve"]
    parser.prog = "parley-serve"  # usage and errors name the executable that was run
    args = parser.parse_args(argv)  # exits 2 with the usage and the error on bad arguments
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:  # Ctrl+C: the server has shut down; as `parley` ends on it
        return 130


if __name__ == "__main__":
    multiprocessing.freeze_support()  # in the self-check's child: runs it, then exits
    sys.exit(main(sys.argv[1:]))
