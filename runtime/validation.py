"""Graph-level checks of an asset: the problems a single field cannot see.

Field types and ranges are checked by the model on load (``runtime.asset_file``);
this module checks how nodes fit together and warns about the pitfalls the spec
names. It runs on every edit in the editor, so it stays cheap: no model is loaded,
and token counts come from the caller's counter (a real tokenizer when one is
loaded, an estimate otherwise).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from runtime.asset import (
    END,
    PLAYER_FACING_TYPES,
    TOKENS_PER_MESSAGE,
    Asset,
    ClassifyAttributes,
    ClassifyIntent,
    GeneratingNode,
    NodeBase,
    Retrieve,
    Summarize,
    ToolCall,
)
from runtime.asset_file import load_asset
from runtime.budget import PromptBudget
from runtime.gguf_metadata import GGUFInfo, read_gguf
from runtime.models import ModelFileError, resolve_model
from runtime.problems import AssetError, InputError, Problem

TokenCounter = Callable[[str], int]
# Below this much room for the transcript a fold can hold little more than a shortened line.
SUMMARY_MIN_TRANSCRIPT_TOKENS = 64
ModelContext = Callable[[str], int | None]


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


def estimate_tokens(text: str) -> int:
    """A tokenizer-free estimate (about four characters a token for English)."""
    return (len(text) + 3) // 4


def node_budget(node: GeneratingNode, model_context: int | None) -> int | None:
    """The node's prompt budget (``PromptBudget.limit``); None while the context size is unknown
    or leaves no room for the prompt (reported separately)."""
    if not (node.context_size or model_context):
        return None
    try:
        return PromptBudget.for_node(node, model_context or 0).limit
    except ValueError:
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
    count = count_tokens or estimate_tokens
    if model_context is None and models is not None:
        model_context = models.context
    problems: list[Problem] = []

    def error(message: str, node_id: str = "", field: str = "") -> None:
        problems.append(Problem("error", message, source, node_id, field))

    def warning(message: str, node_id: str = "", field: str = "") -> None:
        problems.append(Problem("warning", message, source, node_id, field))

    ids = asset.node_ids()
    seen: set[str] = set()
    for node_id in ids:
        if node_id in seen:
            error("two nodes share this id; ids must be unique", node_id, "id")
        seen.add(node_id)
    by_id = {n.id: n for n in asset.nodes}

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
                error(f"exit names no node: {target!r}", node.id, _exit_field(node, port))
        _check_node(node, asset, asset_dir, error, warning)

    if asset.start_node in by_id:
        _check_reachability(asset, by_id, error, warning)

    def context_of(node: NodeBase) -> int | None:
        return model_context(asset.model_for(node)) if model_context else None

    if models is not None:
        reported: set[str] = set()
        for node in asset.nodes:
            name = asset.model_for(node) if node.uses_model() else ""
            if name and name not in reported:
                reported.add(name)
                trouble = models.problem(name)
                if trouble:
                    own = bool(getattr(node, "model_name", ""))
                    warning(trouble, node.id if own else "", "model_name" if own else "default_model")
    has_summarizer = any(isinstance(n, Summarize) for n in asset.nodes)
    for node in asset.nodes:
        if isinstance(node, GeneratingNode) and node.history_mode == "summarized" and not has_summarizer:
            warning(
                "history_mode is 'summarized' but no Summarize node writes a summary: this node sees only "
                "its last history_window entries. Add a Summarize node after the reply, or use 'last_n'.",
                node.id, "history_mode",
            )
    consumers = [n for n in asset.nodes if isinstance(n, GeneratingNode) and n.history_mode != "none"]
    for node in asset.nodes:
        if isinstance(node, GeneratingNode):
            model_size = context_of(node)
            if not node.context_size and model_size and node.max_tokens >= model_size:
                error(
                    f"max_tokens ({node.max_tokens}) must be less than the model's context size ({model_size}); "
                    "lower it or set context_size",
                    node.id, "max_tokens",
                )
            budget = node_budget(node, model_size)
            if budget is not None and node.system_prompt:
                fixed = count(node.system_prompt) + TOKENS_PER_MESSAGE
                if fixed >= budget:
                    warning(
                        f"the system prompt alone (about {fixed} tokens) fills the prompt budget of {budget} tokens; "
                        "the model will see no history. Shorten it, raise context_size or lower max_tokens.",
                        node.id, "system_prompt",
                    )
        if isinstance(node, Summarize):
            context = node.context_size or context_of(node)
            if context:
                fixed = count(node.system_prompt) + count(node.template) + 2 * TOKENS_PER_MESSAGE
                room = context - node.max_summary_tokens - fixed
                if room < SUMMARY_MIN_TRANSCRIPT_TOKENS:
                    warning(
                        f"the summarizer's own system prompt and template (about {fixed} tokens) leave "
                        f"{max(room, 0)} tokens for the transcript in context_size {context} minus "
                        f"max_summary_tokens {node.max_summary_tokens}; it cannot fold. Raise context_size, "
                        "lower max_summary_tokens or shorten the prompt.",
                        node.id, "context_size",
                    )
        if isinstance(node, Summarize) and node.trigger_tokens:
            for consumer in consumers:
                budget = node_budget(consumer, context_of(consumer))
                if budget is not None and node.trigger_tokens >= budget:
                    warning(
                        f"trigger_tokens ({node.trigger_tokens}) is at or above the prompt budget of "
                        f"{consumer.id!r} ({budget}); turns will be trimmed before they are summarized. "
                        "Set it to 60-70 % of that node's room for history.",
                        node.id, "trigger_tokens",
                    )
    return problems


def _exit_field(node: NodeBase, port: str) -> str:
    if port.startswith("intent:") and isinstance(node, ClassifyIntent):
        name = port.split(":", 1)[1]
        index = next(i for i, intent in enumerate(node.intents) if intent.name == name)
        return f"intents.{index}.exit"
    return port


def _check_node(node: NodeBase, asset: Asset, asset_dir, error, warning) -> None:
    if node.uses_model() and not asset.model_for(node):
        warning("no model: set the node's model_name or the agent's default_model", node.id, "model_name")
    if isinstance(node, ToolCall) and not node.tools:
        error("a Tool Call node needs at least one tool", node.id, "tools")
    if isinstance(node, ClassifyIntent) and not node.intents:
        warning("no intents: every line takes the fallback exit", node.id, "intents")
    if isinstance(node, ClassifyAttributes) and not node.attributes:
        warning("no attributes to classify", node.id, "attributes")
    if isinstance(node, Retrieve):
        if not node.entries and not node.source_file:
            warning("no knowledge: add entries or a source file", node.id, "entries")
        if node.source_file and asset_dir is not None:
            path = Path(asset_dir) / node.source_file
            if not path.is_file():
                error(f"knowledge file not found: {path}", node.id, "source_file")
            elif path.suffix not in (".jsonl", ".txt"):
                error("knowledge files are .jsonl or .txt", node.id, "source_file")


def _check_reachability(asset: Asset, by_id: dict[str, NodeBase], error, warning) -> None:
    def successors(node_id: str) -> list[str]:
        return [t for t in by_id[node_id].exits().values() if t in by_id]

    reachable: list[str] = []
    stack = [asset.start_node]
    seen = {asset.start_node}
    while stack:
        current = stack.pop()
        reachable.append(current)
        for nxt in successors(current):
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)

    for node in asset.nodes:
        if node.id not in seen:
            warning("unreachable: no path from the start node leads here", node.id)

    # Nodes that can reach END: those with an END exit, then their predecessors.
    ends = {n.id for n in asset.nodes if any(t == END or t not in by_id for t in n.exits().values())}
    can_end = set(ends)
    changed = True
    while changed:
        changed = False
        for node in asset.nodes:
            if node.id not in can_end and any(t in can_end for t in node.exits().values()):
                can_end.add(node.id)
                changed = True
    for node_id in sorted(n for n in seen if n not in can_end):
        error("every path from this node loops back without reaching END: the turn can never finish", node_id)

    # A Summarize node that runs before a player-facing reply delays that reply.
    for node in asset.nodes:
        if isinstance(node, Summarize) and node.id in seen:
            after = set()
            stack = successors(node.id)
            while stack:
                current = stack.pop()
                if current in after:
                    continue
                after.add(current)
                stack.extend(successors(current))
            facing = sorted(n for n in after if by_id[n].type in PLAYER_FACING_TYPES and n != node.id)
            if facing:
                warning(
                    f"Summarize runs before the reply of {', '.join(facing)}: the player waits for the summary. "
                    "Place Summarize last, after the reply.",
                    node.id, "default_exit",
                )


def check_file(path: str | os.PathLike[str], **kwargs) -> list[Problem]:
    """Load and validate one asset file: every problem, load errors included."""
    try:
        asset = load_asset(path)
    except AssetError as exc:
        return exc.problems
    kwargs.setdefault("models", ModelFiles(Path(path).parent))
    return validate_asset(asset, str(path), asset_dir=Path(path).parent, **kwargs)
