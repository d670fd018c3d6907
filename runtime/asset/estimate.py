"""How much RAM and VRAM an asset needs: each model-backed node's context, and the weights of each
model file its nodes use (shared between nodes of one model). The formulas are
``runtime.models.memory``; this module applies them to an asset, so the editor can call
:func:`estimate_asset` on every edit."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from runtime.asset.model import Asset
from runtime.asset.validation import as_run
from runtime.models.gguf import GGUFError, read_gguf
from runtime.models.memory import (
    ContextCost,
    EstimateError,
    ModelShape,
    Settings,
    Verdict,
    WeightsCost,
    context_cost,
    model_shape,
    verdict,
    weights_cost,
)
from runtime.nodes import failure_text
from runtime.problems import BackendError, InputError, Problem

# per asset


@dataclass(frozen=True)
class NodeEstimate:
    node_id: str
    model: str  # the model name as the asset gives it
    model_path: Path | None
    context: ContextCost | None  # None when the model could not be read

    @property
    def kv_bytes(self) -> int:
        return self.context.kv_bytes if self.context else 0

    @property
    def compute_bytes(self) -> int:
        return self.context.compute_bytes if self.context else 0

    @property
    def ram_bytes(self) -> int:
        return self.context.ram_bytes if self.context else 0

    @property
    def vram_bytes(self) -> int:
        return self.context.vram_bytes if self.context else 0


@dataclass(frozen=True)
class ModelEstimate:
    path: Path
    name: str
    quantization: str
    parameters: int
    n_layer: int
    weights: WeightsCost
    node_ids: tuple[str, ...]

    @property
    def ram_bytes(self) -> int:
        return self.weights.ram

    @property
    def vram_bytes(self) -> int:
        return self.weights.vram


@dataclass(frozen=True)
class Estimate:
    """An asset's memory needs under one set of settings."""

    settings: Settings
    nodes: tuple[NodeEstimate, ...]
    models: tuple[ModelEstimate, ...]
    problems: tuple[Problem, ...] = field(default=())

    @property
    def ram_bytes(self) -> int:
        return sum(m.ram_bytes for m in self.models) + sum(n.ram_bytes for n in self.nodes)

    @property
    def vram_bytes(self) -> int:
        return sum(m.vram_bytes for m in self.models) + sum(n.vram_bytes for n in self.nodes)

    @property
    def weights_vram(self) -> int:
        return sum(m.vram_bytes for m in self.models)

    @property
    def agent_vram(self) -> int:
        """VRAM one more agent of this graph adds: its contexts, not the shared weights."""
        return sum(n.vram_bytes for n in self.nodes)

    @property
    def agent_ram(self) -> int:
        return sum(n.ram_bytes for n in self.nodes)

    @property
    def snapshot_ram(self) -> int:
        """RAM the backend's cache snapshots may take at most, all nodes together, on top of ``ram_bytes``:
        they are taken only before a rewind, a trim or a new summary cuts cached cells."""
        return self.settings.snapshot_budget

    @property
    def headroom(self) -> int:
        """GPU memory left after this agent (negative when it does not fit)."""
        return self.settings.gpu_memory - self.vram_bytes

    @property
    def verdict(self) -> Verdict:
        return verdict(self.settings, self.vram_bytes)

    def node(self, node_id: str) -> NodeEstimate:
        for n in self.nodes:
            if n.node_id == node_id:
                return n
        raise KeyError(node_id)

    def agents_that_fit(self, gpu_memory: int | None = None) -> int | None:
        """How many agents of this graph share the GPU (weights once, contexts per agent); None if unbounded."""
        budget = (self.settings.gpu_memory if gpu_memory is None else gpu_memory) * (1 - self.settings.reserve_fraction)
        room = budget - self.weights_vram
        if room < 0:
            return 0
        if self.agent_vram == 0:
            return None
        return int(room // self.agent_vram)


ModelResolver = Callable[[str], "str | os.PathLike[str]"]
DEFAULT_SETTINGS = Settings()  # frozen, so one default serves every call


def estimate_asset(
    asset: Asset,
    resolve_model: ModelResolver,
    settings: Settings = DEFAULT_SETTINGS,
    *,
    context_overrides: Mapping[str, int] | None = None,
    model_overrides: Mapping[str, str] | None = None,
    asset_file: str = "",
    asset_dir: str | os.PathLike[str] | None = None,
) -> Estimate:
    """Memory needs of ``asset``: one context per model-backed node, weights once per model file.

    The nodes of the behaviours its Subgraph nodes run are counted too, each under its namespaced
    id (``guard/classify``: a context of its own), read from ``asset_dir`` (by default the folder of
    ``asset_file``); a behaviour that cannot be read is a problem and counts as nothing.

    ``resolve_model`` turns a model name from the asset into a file path (raising
    an InputError or OSError when it cannot). ``context_overrides`` and
    ``model_overrides`` (node id -> value) are the what-ifs; a model override of
    ``""`` means "use the agent's default model". A node whose model cannot be read
    is reported in ``problems`` and counted as zero.
    """
    context_overrides = context_overrides or {}
    model_overrides = model_overrides or {}
    problems: list[Problem] = []
    if asset_dir is None and asset_file:
        asset_dir = Path(asset_file).parent
    asset, refused = as_run(asset, asset_dir, asset_file)
    problems.extend(refused)
    resolved: dict[str, tuple[Path, ModelShape] | None] = {}
    nodes: list[NodeEstimate] = []
    by_model: dict[Path, list[str]] = {}
    # One cost per model and context size: most nodes share both, and context_cost's own cache
    # hashes the whole ModelShape on every call (a third of an edit's time at 5,000 nodes).
    costs: dict[tuple[str, int], ContextCost | EstimateError] = {}
    for node in asset.nodes:
        try:
            uses = node.model_uses()  # each node type says which contexts it keeps
        except Exception as exc:  # noqa: BLE001 - a plugin's failure is a problem on its node, never a crash
            problems.append(Problem("error", f"model_uses() failed: {failure_text(exc)}", asset_file, node.id))
            continue
        for use in uses:
            name, field_name = asset.model_source(model_overrides.get(node.id, use.model_name), use.field)
            if name not in resolved:
                resolved[name] = _load(name, resolve_model, asset_file, node.id, field_name, problems)
            hit = resolved[name]
            if hit is None:
                nodes.append(NodeEstimate(node.id, name, None, None))
                continue
            path, shape = hit
            n_ctx = context_overrides.get(node.id, use.context_size)
            if (name, n_ctx) not in costs:
                try:
                    costs[name, n_ctx] = context_cost(shape, n_ctx, settings)
                except EstimateError as e:
                    costs[name, n_ctx] = e
            cost = costs[name, n_ctx]
            if isinstance(cost, EstimateError):
                problems.extend(replace(p, file=p.file or asset_file, node_id=node.id) for p in cost.problems)
                nodes.append(NodeEstimate(node.id, name, path, None))
                continue
            nodes.append(NodeEstimate(node.id, name, path, cost))
            by_model.setdefault(path, []).append(node.id)
    models = []
    for path, ids in by_model.items():
        info = read_gguf(path)
        shape = model_shape(info)
        models.append(ModelEstimate(
            path=path, name=info.name, quantization=info.quantization, parameters=info.parameters,
            n_layer=shape.n_layer, weights=weights_cost(shape, settings), node_ids=tuple(ids),
        ))
    return Estimate(settings=settings, nodes=tuple(nodes), models=tuple(models), problems=tuple(problems))


def _load(name: str, resolve_model: ModelResolver, asset_file: str, node_id: str, field_name: str,
          problems: list[Problem]) -> tuple[Path, ModelShape] | None:
    if not name:
        problems.append(Problem("error", "no model is set: give the agent a Default Model or the node a Model Name", file=asset_file, node_id=node_id, field=field_name))
        return None
    try:
        path = Path(resolve_model(name))
        info = read_gguf(path)
        return path, model_shape(info)
    except GGUFError as e:
        problems.extend(replace(p, node_id=node_id, field=field_name) for p in e.problems)
    except InputError as e:
        problems.extend(replace(p, file=p.file or asset_file, node_id=node_id, field=field_name) for p in e.problems)
    except (OSError, ValueError, BackendError) as e:  # the resolver's errors (ModelFileError is a BackendError)
        problems.append(Problem("error", str(e), file=asset_file, node_id=node_id, field=field_name))
    return None


# what-ifs a designer asks


def what_if_context(asset: Asset, resolve_model: ModelResolver, node_id: str, n_ctx: int, settings: Settings = DEFAULT_SETTINGS, **kw: object) -> Estimate:
    """The estimate with one node's context size changed."""
    asset.node(node_id)  # KeyError for an unknown node
    return estimate_asset(asset, resolve_model, settings, context_overrides={node_id: n_ctx}, **kw)  # type: ignore[arg-type]


def what_if_shared_model(asset: Asset, resolve_model: ModelResolver, node_id: str, settings: Settings = DEFAULT_SETTINGS, **kw: object) -> Estimate:
    """The estimate with one node (say, the summarizer) using the agent's default model."""
    asset.node(node_id)
    return estimate_asset(asset, resolve_model, settings, model_overrides={node_id: ""}, **kw)  # type: ignore[arg-type]
