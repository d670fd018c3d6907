"""``parley validate ASSET...``: every problem as ``file:node_id.field: message``. A scene
(``*.scene.json``) is checked with each of its NPCs' assets."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from runtime.asset.file import load_asset
from runtime.asset.validation import ModelFiles, validate_asset
from runtime.models.folder import unusable_path
from runtime.names import without_surrogates
from runtime.problems import AssetError, InputError, Problem
from runtime.prompting.templates import template_problems
from runtime.scene.model import SCENE_SUFFIX, SceneError, load_scene
from runtime.session.session import graph_of


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("validate", help="check assets and scenes; exit 1 on errors, 0 on warnings only")
    p.add_argument("assets", nargs="+", metavar="ASSET")
    p.add_argument("--quiet", action="store_true", help="print errors only")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    errors = 0
    for path in args.assets:
        problems = _problems(path)
        for problem in problems:
            if problem.severity == "error":
                errors += 1
            elif args.quiet:
                continue
            # A lone surrogate from a "\ud800" in the file prints as U+FFFD, never a UnicodeEncodeError.
            print(without_surrogates(str(problem)), file=sys.stdout)
        if not problems and not args.quiet:
            print(without_surrogates(f"{path}: ok"))
    return 1 if errors else 0


def _problems(path: str) -> list[Problem]:
    """``runtime.asset.validation.check_file``'s problems, and every template that cannot be rendered."""
    unusable = unusable_path(path)
    if unusable:
        return [Problem("error", f"not a path: {unusable}", repr(path))]
    if path.endswith(SCENE_SUFFIX):
        return _scene_problems(path)
    try:
        asset = load_asset(path)
    except AssetError as exc:
        return exc.problems
    folder = Path(path).parent
    problems = validate_asset(asset, str(path), asset_dir=folder, models=ModelFiles(folder))
    try:  # a behaviour's templates too, under its nodes' namespaced ids
        nodes = graph_of(asset, folder, str(path)).nodes
    except InputError:  # its problems are in validate_asset's already
        nodes = asset.nodes
    # Until validate_asset checks templates itself; the check keeps a problem from being listed twice.
    return problems + [p for p in template_problems(nodes, str(path)) if p not in problems]


def _scene_problems(path: str) -> list[Problem]:
    """A scene's problems, then each NPC's asset's (an asset that does not load is named by its NPC)."""
    try:
        scene = load_scene(path)
    except SceneError as exc:
        return exc.problems
    problems: list[Problem] = []
    for index, npc in enumerate(scene.npcs):
        asset = Path(path).parent / npc.asset
        if not asset.is_file():
            problems.append(Problem("error", f"NPC {npc.id!r}: no asset {npc.asset} (a path relative to the scene)",
                                    path, field=f"npcs.{index}.asset"))
            continue
        problems += _problems(str(asset))
    return problems
