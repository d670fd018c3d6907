"""``parley estimate ASSET``: the RAM and VRAM an agent needs, per node and per model."""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Collection
from pathlib import Path
from typing import Any

from runtime.asset.estimate import Estimate, ModelResolver, estimate_asset
from runtime.models.context_settings import FLASH_ATTN, FLASH_ATTN_MODES, KV_TYPE, kv_type_refusal
from runtime.models.folder import ModelFileError, resolve_model, unusable_path
from runtime.models.memory import (
    GPU_PRESETS_GB,
    KV_TYPES,
    MIB,
    EstimateError,
    Settings,
    flash_attn_assumed,
    gpu_memory_bytes,
)
from runtime.names import without_surrogates
from runtime.nodes.base import ModelParams, context_zero_text
from runtime.problems import InputError, Problem
from runtime.session.session import open_graph

MAX_GPU_MEMORY_GB = 100_000  # 100 TB: beyond any machine, so a larger number is a typo
MAX_GPU_LAYERS = 100_000  # more than any model has; every number above a model's layer count means all


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "estimate",
        help="RAM and VRAM an agent needs (weights, KV caches, compute buffers) and whether it fits a GPU",
        description="Size every model-backed node's context and every model's weights the way llama.cpp allocates them.",
    )
    p.add_argument("asset", metavar="ASSET")
    p.add_argument("--model", metavar="GGUF", help="use this model file for every model-backed node")
    p.add_argument("--models-dir", metavar="DIR", help="folder to find model file names in (default: the models folder)")
    p.add_argument("--gpu-layers", type=int, default=-1, metavar="N",
                   help="layers offloaded to the GPU, the output layer counting as one (-1: all, the default; 0: none)")
    p.add_argument("--kv-type", choices=KV_TYPES, default=KV_TYPE,
                   help=f"KV cache type (default {KV_TYPE}; q8_0 and q4_0 need --flash-attn on or auto)")
    p.add_argument("--flash-attn", choices=FLASH_ATTN_MODES, default=None,
                   help=f"flash attention as the contexts would be created (default {FLASH_ATTN}, the runtime's: "
                        "replays are exact at any thread count only with it off; auto is sized as on)")
    p.add_argument("--gpu-memory", type=float, default=8.0, metavar="GB",
                   help=f"GPU memory to check against, e.g. {', '.join(map(str, GPU_PRESETS_GB))} (0: no GPU); default 8")
    p.add_argument("--no-flash-attn", action="store_true", help="the same as --flash-attn off (kept for older scripts)")
    p.add_argument("--context", action="append", default=[], metavar="NODE=N", help="what if NODE's context were N tokens (repeatable)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    flags = _flag_problems(args)
    if flags:
        for message in flags:
            print(f"parley estimate: error: {message}", file=sys.stderr)
        return 2
    try:
        # as it runs: a behaviour's nodes are sized, and named by --context, by namespaced id (guard/warn)
        asset = open_graph(args.asset)
        settings = Settings(
            gpu_memory=gpu_memory_bytes(args.gpu_memory),
            gpu_layers=args.gpu_layers,
            kv_type=args.kv_type,
            flash_attn=_flash_attn(args),
        )
        overrides = _context_overrides(args.context, args.asset)
    except InputError as e:
        for problem in e.problems:
            print(problem if problem.file else f"{args.asset}: {problem}", file=sys.stderr)
        return 2
    asset_dir = Path(args.asset).resolve().parent
    resolver = _resolver(asset_dir, args.models_dir, args.model)
    missing = [n for n in overrides if n not in asset.node_ids()]
    if missing:
        print(f"{args.asset}: error: no node named {', '.join(map(repr, missing))} (--context)", file=sys.stderr)
        return 2
    estimate = estimate_asset(asset, resolver, settings, context_overrides=overrides, asset_file=str(args.asset))
    if args.json:
        json.dump(estimate_json(estimate), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        own = {n.id for n in asset.nodes for use in n.model_uses() if use.context_size == 0 and n.id not in overrides}
        sys.stdout.write(without_surrogates(estimate_table(estimate, own)))  # a model file name that is not UTF-8
    for problem in estimate.problems:
        print(problem, file=sys.stderr)
    return 1 if estimate.problems else 0


def _max_context() -> int:
    """The largest context a node may have: the model field's own bound (one place for it)."""
    for rule in ModelParams.model_fields["context_size"].metadata:
        if hasattr(rule, "le"):
            return int(rule.le)
    return 1_048_576


def _flash_attn(args: argparse.Namespace) -> str:
    if args.flash_attn is not None:
        return args.flash_attn
    return "off" if args.no_flash_attn else FLASH_ATTN


def _flag_problems(args: argparse.Namespace) -> list[str]:
    """What is wrong with the flags' values, one message each (the asset is not read yet)."""
    problems: list[str] = []
    gb = args.gpu_memory
    if not math.isfinite(gb) or not 0 <= gb <= MAX_GPU_MEMORY_GB:
        problems.append(f"--gpu-memory {gb:g}: give the GPU's memory in GB, from 0 (no GPU) to {MAX_GPU_MEMORY_GB:,}")
    if not -1 <= args.gpu_layers <= MAX_GPU_LAYERS:
        problems.append(f"--gpu-layers {args.gpu_layers}: give -1 (all layers), 0 (none) or a number of layers "
                        f"up to {MAX_GPU_LAYERS:,}")
    if args.no_flash_attn and args.flash_attn not in (None, "off"):
        problems.append(f"--no-flash-attn contradicts --flash-attn {args.flash_attn}: give one of them")
    elif kv_type_refusal(args.kv_type, _flash_attn(args)):
        asked = ("--flash-attn off" if args.flash_attn else "--no-flash-attn" if args.no_flash_attn
                 else "the runtime's default")
        problems.append(f"--kv-type {args.kv_type} needs flash attention, which is off ({asked}): "
                        "llama.cpp quantizes the V cache only with it; add --flash-attn on (or auto), "
                        "or use --kv-type f16")
    for item in args.context:
        try:
            _context_override(item)
        except ValueError as exc:
            problems.append(str(exc))
    for flag, value in (("ASSET", args.asset), ("--model", args.model), ("--models-dir", args.models_dir)):
        unusable = unusable_path(value) if value is not None else ""
        if unusable:
            problems.append(f"{flag} {value!r} is not a path: {unusable}")
    return problems


def _context_override(item: str) -> tuple[str, int]:
    """``NODE=TOKENS`` as (node id, tokens). Raises ``ValueError`` with the message to show."""
    node, sep, value = item.partition("=")
    node, value = node.strip(), value.strip()
    largest = _max_context()
    if not sep or not node or not re.fullmatch(r"[0-9]+", value):
        raise ValueError(f"--context takes NODE=TOKENS (a node id, '=', a whole number of tokens), not {item!r}")
    if len(value) > len(str(largest)) or int(value) > largest:
        raise ValueError(f"--context {item!r}: a context holds 0 (the model's own size) to {largest:,} tokens")
    return node, int(value)


def _context_overrides(items: list[str], source: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        try:
            node, tokens = _context_override(item)
        except ValueError as exc:
            raise EstimateError([Problem("error", str(exc), file=source)]) from None
        out[node] = tokens
    return out


def _resolver(asset_dir: Path, models_dir: str | None, forced: str | None) -> ModelResolver:
    """Model names: a path relative to the asset, or a file name in the models folder
    (``--models-dir`` instead, when given).

    ``--model`` replaces every node's model; a path given there is relative to the
    working directory, as on any command line.
    """
    if forced:
        try:
            forced = str(resolve_model(forced, Path.cwd(), folder=models_dir))
        except ModelFileError:
            pass  # not a file here: each node says where it looked

    def resolve(name: str) -> Path:
        return resolve_model(forced or name, asset_dir, folder=models_dir)

    return resolve


def estimate_json(e: Estimate) -> dict[str, Any]:
    """The estimate as plain JSON (bytes everywhere)."""
    s = e.settings
    nodes = []
    for n in e.nodes:
        c = n.context
        nodes.append({
            "id": n.node_id,
            "model": str(n.model_path) if n.model_path else n.model,
            "n_ctx": c.n_ctx if c else None,
            "kv_cells": c.cells if c else None,
            "kv_bytes": n.kv_bytes,
            "kv_vram_bytes": (c.kv_vram + c.recurrent_vram) if c else 0,
            "recurrent_bytes": (c.recurrent_ram + c.recurrent_vram) if c else 0,
            "compute_bytes": n.compute_bytes,
            "compute_vram_bytes": c.compute_vram if c else 0,
            "output_bytes": c.output_ram if c else 0,
            "ram_bytes": n.ram_bytes,
            "vram_bytes": n.vram_bytes,
        })
    models = [{
        "path": str(m.path),
        "name": m.name,
        "quantization": m.quantization,
        "parameters": m.parameters,
        "nodes": list(m.node_ids),
        "weights_bytes": {"cpu": m.weights.ram, "gpu": m.weights.vram, "total": m.weights.total},
    } for m in e.models]
    return {
        "settings": {
            "gpu_memory_bytes": s.gpu_memory,
            "gpu_layers": s.gpu_layers,
            "kv_type": s.kv_type,
            "flash_attn": s.effective_flash_attn,  # what the contexts would use
            "flash_attn_setting": s.flash_attn,  # as asked: off, on or auto
            "snapshot_budget_bytes": s.snapshot_budget,
            "n_batch": s.n_batch,
            "n_ubatch": s.n_ubatch,
        },
        "nodes": nodes,
        "models": models,
        "totals": {
            "ram_bytes": e.ram_bytes,
            "vram_bytes": e.vram_bytes,
            "snapshot_ram_bytes": e.snapshot_ram,  # at most, on top of ram_bytes
            "headroom_bytes": e.headroom if s.gpu_memory else None,
            "verdict": e.verdict,
            "agents_that_fit": e.agents_that_fit() if s.gpu_memory else None,
        },
        "problems": [str(p) for p in e.problems],
    }


def _mib(n: int) -> str:
    return f"{n / MIB:,.1f}"


def snapshot_mib(n: int) -> str:
    """A budget in MiB as the designer set it: 256, not 256.0."""
    return f"{n / MIB:,.1f}".removesuffix(".0")


def estimate_table(e: Estimate, own_context: Collection[str] = ()) -> str:
    """The estimate as a table; nodes in ``own_context`` have Context Size 0, said beside their n_ctx."""
    s = e.settings
    rows = [("node", "model", "n_ctx", "KV MiB", "compute MiB", "RAM MiB", "VRAM MiB")]
    for n in e.nodes:
        c = n.context
        model = n.model_path.name if n.model_path else f"{n.model} (unreadable)"
        n_ctx = "-" if c is None else context_zero_text(c.n_ctx) if n.node_id in own_context else str(c.n_ctx)
        rows.append((n.node_id, model, n_ctx, _mib(n.kv_bytes), _mib(n.compute_bytes), _mib(n.ram_bytes), _mib(n.vram_bytes)))
    for m in e.models:
        rows.append((f"weights ({len(m.node_ids)} node{'s' if len(m.node_ids) != 1 else ''})", m.path.name, "", "", "", _mib(m.weights.ram), _mib(m.weights.vram)))
    rows.append(("total", "", "", "", "", _mib(e.ram_bytes), _mib(e.vram_bytes)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for i, r in enumerate(rows):
        cells = [r[j].ljust(widths[j]) if j < 2 else r[j].rjust(widths[j]) for j in range(len(r))]
        lines.append("  ".join(cells).rstrip())
        if i == 0 or i == len(rows) - 2:
            lines.append("  ".join("-" * w for w in widths))
    layers = "all" if s.gpu_layers < 0 else str(s.gpu_layers)
    lines.append("")
    lines.append(f"KV cache {s.kv_type}, GPU layers {layers}, batch {s.n_ubatch}")
    lines.append(flash_attn_assumed(s))
    lines.append(f"cache snapshots: up to {snapshot_mib(e.snapshot_ram)} MiB of RAM on top of the total "
                 "(all nodes together; taken only when a rewind or a trim cuts cached cells)")
    if s.gpu_memory:
        gb = s.gpu_memory / (1 << 30)
        fit = e.agents_that_fit()
        lines.append(f"GPU {gb:g} GB: {e.verdict}, headroom {_mib(e.headroom)} MiB; "
                     f"agents of this graph that fit: {'unlimited' if fit is None else fit}")
    else:
        lines.append("no GPU: everything in RAM")
    return "\n".join(lines) + "\n"
