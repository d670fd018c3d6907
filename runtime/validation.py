"""Graph-level checks of an asset: the problems a single field cannot see.

Field types and ranges are checked by the model on load (``runtime.asset_file``);
this module checks how nodes fit together and warns about the pitfalls the spec
names. It runs on every edit in the editor, so it stays cheap: no model is loaded,
and token counts come from the caller's counter (a real tokenizer when one is
loaded, an estimate otherwise).
"""

from __future__ import annotations

import os
from pathlib import Path

from runtime.asset import END, Asset, ModelParams
from runtime.asset_file import load_asset
from runtime.gguf_metadata import GGUFInfo, read_gguf
from runtime.models import ModelFileError, resolve_model
from runtime.nodes import PLUGIN_PROBLEMS, NodeChecks
from runtime.nodes.checks import ModelContext, TokenCounter, estimate_tokens
from runtime.problems import AssetError, InputError, Problem

__all__ = ["ModelContext", "ModelFiles", "TokenCounter", "check_file", "estimate_tokens", "validate_asset"]


_LOOKUP_ERRORS = (InputError, ModelFileError, OSError, ValueError)


class ModelFiles:
    """The model files an asset names, looked up on this machine: their trained context size (from the
    GGUF header, cached) and why a file cannot be used. Lookups never raise."""

    def __init__(self, asset_dir: str | os.PathLike[str] | None = None) -> None:
        self.asset_dir = asset_dir
        # One lookup per model name for this object's life (one validation): nodes share models.
        self._found: dict[str, GGUFInfo | Exception] = {}

    def _info(self, name: str) -> GGUFInfo:
        if name not in self._found:
            try:
                self._found[name] = read_gguf(resolve_model(name, self.asset_dir))
            except _LOOKUP_ERRORS as exc:
                self._found[name] = exc
        found = self._found[name]
        if isinstance(found, Exception):
            raise found
        return found

    def context(self, name: str) -> int | None:
        try:
            return self._info(name).context_length or None
        except _LOOKUP_ERRORS:
            return None

    def problem(self, name: str) -> str | None:
        try:
            self._info(name)
        except _LOOKUP_ERRORS as exc:
            return " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        return None


def validate_asset(
    asset: Asset,
    source: str = "",
    asset_dir: str | os.PathLike[str] | None = None,
    count_tokens: TokenCounter | None = None,
    model_context: ModelContext | None = None,
    models: ModelFiles | None = None,
) -> list[Problem]:
    """Every graph-level error and warning, in node order. With ``models``, model files are looked up
    (a missing or unreadable one is a warning) and their context sizes feed the budget checks."""
    if model_context is None and models is not None:
        model_context = models.context
    problems: list[Problem] = [Problem("warning", p, source) for p in PLUGIN_PROBLEMS]
    checks = NodeChecks(asset, problems, source, asset_dir, count_tokens, model_context)

    def error(message: str, node_id: str = "", field: str = "") -> None:
        problems.append(Problem("error", message, source, node_id, field))

    def warning(message: str, node_id: str = "", field: str = "") -> None:
        problems.append(Problem("warning", message, source, node_id, field))

    seen: set[str] = set()
    for node_id in asset.node_ids():
        if node_id in seen:
            error("two nodes share this id; ids must be unique", node_id, "id")
        seen.add(node_id)
    by_id = checks.by_id

    if not asset.nodes:
        error("the asset has no nodes; add one and make it the start node", field="nodes")
    if not asset.start_node:
        if asset.nodes:
            error("no start node is set", field="start_node")
    elif asset.start_node not in by_id:
        error(f"start node {asset.start_node!r} is not a node of this asset", field="start_node")

    for node in asset.nodes:
        for port, target in node.exits().items():
            if target != END and target not in by_id:
                error(f"exit names no node: {target!r}", node.id, node.exit_field(port))
        if node.uses_model() and not asset.model_for(node):
            warning("no model: set the node's model_name or the agent's default_model", node.id, "model_name")
        node.check(checks.about(node))

    if asset.start_node in by_id:
        checks.reachable = _check_reachability(asset, checks, error, warning)

    if models is not None:
        reported: set[str] = set()
        for node in asset.nodes:
            name = asset.model_for(node) if node.uses_model() else ""
            if name and name not in reported:
                reported.add(name)
                trouble = models.problem(name)
                if trouble:
                    own = isinstance(node, ModelParams) and bool(node.model_name)
                    warning(trouble, node.id if own else "", "model_name" if own else "default_model")
    for node in asset.nodes:
        node.check_in_graph(checks.about(node))
    return problems


def _check_reachability(asset: Asset, checks: NodeChecks, error, warning) -> set[str]:
    """Warn about nodes no turn reaches and fail loops no turn leaves; returns the reachable ids.
    Two walks, each visiting every node and exit once: forward from the start node, and back
    from the nodes that can end the turn."""
    by_id = checks.by_id
    stack = [asset.start_node]
    seen = {asset.start_node}
    while stack:
        for nxt in checks.successors(stack.pop()):
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)

    for node in asset.nodes:
        if node.id not in seen:
            warning("unreachable: no path from the start node leads here", node.id)

    # Nodes that can reach END: those with an END exit (or one that names no node, reported
    # above), then everything that leads to them.
    ends = [n.id for n in asset.nodes if any(t == END or t not in by_id for t in n.exits().values())]
    can_end = checks.leading_to(ends)
    for node_id in sorted(n for n in seen if n not in can_end):
        error("every path from this node loops back without reaching END: the turn can never finish", node_id)
    return seen


def check_file(path: str | os.PathLike[str], **kwargs) -> list[Problem]:
    """Load and validate one asset file: every problem, load errors included."""
    try:
        asset = load_asset(path)
    except AssetError as exc:
        return exc.problems
    kwargs.setdefault("models", ModelFiles(Path(path).parent))
    return validate_asset(asset, str(path), asset_dir=Path(path).parent, **kwargs)
