"""``parley estimate ASSET``: the RAM and VRAM an agent needs, per node and per model."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from runtime.asset_file import load_asset
from runtime.estimator import (
    GPU_PRESETS_GB,
    KV_TYPES,
    MIB,
    Estimate,
    EstimateError,
    ModelResolver,
    Settings,
    estimate_asset,
    gpu_memory_bytes,
)
from runtime.problems import InputError, Problem


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
    p.add_argument("--kv-type", choices=KV_TYPES, default="f16", help="KV cache type (quantized types use flash attention)")
    p.add_argument("--gpu-memory", type=float, default=8.0, metavar="GB",
                   help=f"GPU memory to check against, e.g. {', '.join(map(str, GPU_PRESETS_GB))} (0: no GPU); default 8")
    p.add_argument("--no-flash-attn", action="store_true", help="size contexts without flash attention")
    p.add_argument("--context", action="append", default=[], metavar="NODE=N", help="what if NODE's context were N tokens (repeatable)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        asset = load_asset(args.asset)
        settings = Settings(
            gpu_memory=gpu_memory_bytes(args.gpu_memory),
            gpu_layers=args.gpu_layers,
            kv_type=args.kv_type,
            flash_attn=not args.no_flash_attn,
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
        sys.stdout.write(estimate_table(estimate))
    for problem in estimate.problems:
        print(problem, file=sys.stderr)
    return 1 if estimate.problems else 0


def _context_overrides(items: list[str], source: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        node, sep, value = item.partition("=")
        if not sep or not value.strip().isdigit():
            raise EstimateError([Problem("error", f"--context takes NODE=TOKENS, not {item!r}", file=source)])
        out[node.strip()] = int(value)
    return out


def _resolver(asset_dir: Path, models_dir: str | None, forced: str | None) -> ModelResolver:
    """Model names: a path relative to the asset, or a file name in the models folder.

    ``--model`` replaces every node's model; a path given there is relative to the
    working directory, as on any command line.
    """
    if forced and Path(forced).expanduser().is_file():
        forced = str(Path(forced).expanduser().resolve())

    def resolve(name: str) -> Path:
        name = forced or name
        if models_dir is None:
            try:
                from runtime.models import resolve_model
            except ImportError:  # runtime.models is optional for this command
                pass
            else:
                return resolve_model(name, asset_dir)
        path = Path(name).expanduser()
        candidates = [path] if path.is_absolute() else [asset_dir / path]
        if models_dir is not None and not path.is_absolute():
            candidates.append(Path(models_dir) / path)
        for c in candidates:
            if c.is_file():
                return c
        looked = ", ".join(str(c) for c in candidates)
        raise FileNotFoundError(f"model file {name!r} not found (looked in {looked})")

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
            "flash_attn": s.effective_flash_attn,
            "n_batch": s.n_batch,
            "n_ubatch": s.n_ubatch,
        },
        "nodes": nodes,
        "models": models,
        "totals": {
            "ram_bytes": e.ram_bytes,
            "vram_bytes": e.vram_bytes,
            "headroom_bytes": e.headroom if s.gpu_memory else None,
            "verdict": e.verdict,
            "agents_that_fit": e.agents_that_fit() if s.gpu_memory else None,
        },
        "problems": [str(p) for p in e.problems],
    }


def _mib(n: int) -> str:
    return f"{n / MIB:,.1f}"


def estimate_table(e: Estimate) -> str:
    s = e.settings
    rows = [("node", "model", "n_ctx", "KV MiB", "compute MiB", "RAM MiB", "VRAM MiB")]
    for n in e.nodes:
        c = n.context
        model = n.model_path.name if n.model_path else f"{n.model} (unreadable)"
        rows.append((n.node_id, model, str(c.n_ctx) if c else "-", _mib(n.kv_bytes), _mib(n.compute_bytes), _mib(n.ram_bytes), _mib(n.vram_bytes)))
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
    fa = "on" if s.effective_flash_attn else "off"
    layers = "all" if s.gpu_layers < 0 else str(s.gpu_layers)
    lines.append("")
    lines.append(f"KV cache {s.kv_type}, flash attention {fa}, GPU layers {layers}, batch {s.n_ubatch}")
    if s.gpu_memory:
        gb = s.gpu_memory / (1 << 30)
        fit = e.agents_that_fit()
        lines.append(f"GPU {gb:g} GB: {e.verdict}, headroom {_mib(e.headroom)} MiB; "
                     f"agents of this graph that fit: {'unlimited' if fit is None else fit}")
    else:
        lines.append("no GPU: everything in RAM")
    return "\n".join(lines) + "\n"
