"""``parley models list | fetch-sample | info GGUF | path``: the user's models folder from the command line."""

from __future__ import annotations

import argparse
import sys

from runtime.models.folder import (
    MODELS_DIR_ENV,
    ModelFileError,
    fetch_sample_model,
    format_parameters,
    list_models,
    model_info,
    models_dir,
    resolve_model,
)
from runtime.names import without_surrogates


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("models", help="list, inspect and fetch GGUF models")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    actions.add_parser("list", help="the models in the models folder with their metadata").set_defaults(func=run_list)
    actions.add_parser(
        "fetch-sample", help="download the sample model (SmolLM2-135M-Instruct, 94 MB) into the models folder"
    ).set_defaults(func=run_fetch)
    info = actions.add_parser("info", help="one model file's metadata")
    info.add_argument("model", metavar="GGUF", help="a path, or a file name in the models folder")
    info.set_defaults(func=run_info)
    actions.add_parser("path", help=f"print the models folder (set {MODELS_DIR_ENV} to change it)").set_defaults(
        func=run_path
    )


def run_list(args: argparse.Namespace) -> int:
    folder = models_dir()
    models = list_models(folder)
    if not models:
        _say(f"No models in {folder}. Run `parley models fetch-sample` to get the sample model.")
        return 0
    _say(f"Models in {folder}:")
    rows = [("FILE", "ARCH", "PARAMS", "QUANT", "CONTEXT", "SIZE")]
    for m in models:
        if m.problem:
            rows.append((m.file_name, "-", "-", "-", "-", f"{m.file_size / 2**20:.0f} MiB  ({m.problem})"))
        else:
            rows.append(
                (m.file_name, m.architecture, format_parameters(m.parameters), m.quantization,
                 str(m.context_length), f"{m.file_size / 2**20:.0f} MiB")
            )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        _say("  ".join(cell.ljust(w) for cell, w in zip(r, widths)) + "  " + r[-1])
    return 0


def run_fetch(args: argparse.Namespace) -> int:
    try:
        path = fetch_sample_model(progress=_say)
    except ModelFileError as e:
        _say(f"error: {e}", file=sys.stderr)
        return 1
    _say(path)
    return 0


def run_info(args: argparse.Namespace) -> int:
    try:
        path = resolve_model(args.model)
    except ModelFileError as e:
        _say(f"error: {e}", file=sys.stderr)
        return 1
    m = model_info(path)
    if m.problem:
        _say(f"{path}: error: {m.problem}", file=sys.stderr)
        return 1
    _say(f"file:            {m.path}")
    _say(f"size:            {m.file_size / 2**20:.1f} MiB")
    _say(f"name:            {m.name}")
    _say(f"architecture:    {m.architecture}")
    _say(f"parameters:      {format_parameters(m.parameters)} ({m.parameters:,})")
    _say(f"quantization:    {m.quantization}")
    _say(f"trained context: {m.context_length} tokens")
    _say(f"chat template:   {'yes' if m.has_chat_template else 'no (not usable for chat nodes)'}")
    return 0


def run_path(args: argparse.Namespace) -> int:
    _say(models_dir())
    return 0


def _say(text: object = "", file=None) -> None:
    """Print a line; a file name that is not UTF-8 (read as lone surrogates) shows U+FFFD instead of
    failing on a UTF-8 terminal."""
    print(without_surrogates(str(text)), file=file or sys.stdout)
