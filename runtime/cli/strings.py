"""``parley strings export ASSET -o TABLE.csv`` and ``parley strings import ASSET TABLE.csv -o OUT.json``:
an asset's authored texts as a string table for translators and voice actors, and their translation
back into a copy of the asset (``runtime.asset.strings``, docs/localisation.md).

Exit 0 when the file is written, 1 when the asset or the table is refused (every problem printed,
naming the file, row and column; nothing is written)."""

from __future__ import annotations

import argparse
import sys

from runtime.asset.file import load_asset, save_asset
from runtime.asset.strings import read_string_table, save_string_table, translate
from runtime.models.folder import unusable_path
from runtime.names import without_surrogates
from runtime.nodes.subgraph import Subgraph
from runtime.problems import InputError, Problem


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("strings", help="export an asset's texts as a CSV string table, and import its translation")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    export = actions.add_parser(
        "export", help="write the asset's system prompts, templates, canned lines, descriptions and notes as CSV",
        description="Write every authored text of ASSET as a CSV string table (id, source, translation, context) "
                    "for translators and voice actors.")
    export.add_argument("asset", metavar="ASSET")
    export.add_argument("-o", "--output", required=True, metavar="TABLE.csv", help="the table to write")
    export.set_defaults(func=run_export)
    imported = actions.add_parser(
        "import", help="write a translated copy of the asset from a filled-in string table",
        description="Write a copy of ASSET with each row's translation in place of its text (an empty translation "
                    "keeps the text). Any bad row refuses the whole table and nothing is written.")
    imported.add_argument("asset", metavar="ASSET")
    imported.add_argument("table", metavar="TABLE.csv")
    imported.add_argument("-o", "--output", required=True, metavar="OUT.json",
                          help="the translated asset to write (ASSET itself only when named here)")
    imported.add_argument("--language", metavar="TAG", default=None,
                          help="the translated agent's language, a BCP 47 tag (de, pt-BR): its replies are asked for "
                               "in it")
    imported.set_defaults(func=run_import)


def run_export(args: argparse.Namespace) -> int:
    try:
        _check_paths(args.asset, args.output)
        asset = load_asset(args.asset)
        written = save_string_table(asset, args.output)
    except InputError as exc:
        return _refused(exc.problems)
    except OSError as exc:
        return _refused([Problem("error", f"cannot write the table: {exc.strerror or exc}", args.output)])
    _say(f"Wrote {args.output}: {written} text{'s' if written != 1 else ''} of {args.asset}")
    behaviours = sorted({n.behaviour for n in asset.nodes if isinstance(n, Subgraph)})
    if behaviours:  # the files its Subgraph nodes run, relative to its folder
        _say(f"Its behaviours have tables of their own (parley strings export each): {', '.join(behaviours)}")
    return 0


def run_import(args: argparse.Namespace) -> int:
    try:
        _check_paths(args.asset, args.table, args.output)
        asset = load_asset(args.asset)
        rows = read_string_table(args.table)
        translation = translate(asset, rows, args.table, args.language)
        save_asset(translation.asset, args.output)
    except InputError as exc:
        return _refused(exc.problems)
    except OSError as exc:
        return _refused([Problem("error", f"cannot write the translated asset: {exc.strerror or exc}", args.output)])
    kept = len(translation.untranslated)
    _say(f"Wrote {args.output}: {len(translation.translated)} text{'s' if len(translation.translated) != 1 else ''} "
         f"translated, {kept} kept as in {args.asset}"
         + (f" ({', '.join(translation.untranslated[:5])}{', ...' if kept > 5 else ''})" if kept else ""))
    return 0


def _check_paths(*paths: str) -> None:
    for path in paths:
        unusable = unusable_path(path)
        if unusable:
            raise InputError([Problem("error", f"not a path: {unusable}", repr(path))])


def _refused(problems: list[Problem]) -> int:
    for problem in problems:
        print(without_surrogates(str(problem)), file=sys.stderr)
    print("Nothing was written.", file=sys.stderr)
    return 1


def _say(text: str) -> None:
    print(without_surrogates(text))
