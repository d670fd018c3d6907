"""The node-type registry: the one table of every node type an asset can hold.

Each built-in type is one module here (its pydantic model, exits, how it runs, its validation
rules and estimator contribution all live on the model class). ``NODE_TYPES`` lists them, then
the types other packages add through the ``parley.node_types`` entry point.

A plugin package declares, in its ``pyproject.toml``::

    [project.entry-points."parley.node_types"]
    mood = "parley_mood:NODE_TYPE"

where ``NODE_TYPE`` is a ``NodeType`` whose model derives from ``runtime.nodes.NodeBase``. Its
``editor`` names the editor's description of the type (``"parley_mood.view:VIEW"``, an
``editor.node_types.NodeView``), so the runtime never imports the editor. Plugins are loaded when
this package is first imported; what is built from the table (the asset model's union of node
types) follows every type registered later (``when_registered``).

This package is also the one surface a plugin imports from: everything a node type needs (the
model's base and parameter blocks, ``NodeRun`` and ``NodeChecks``, the errors, templates, the
diagnostics records, the messages and requests of a model call, the budget arithmetic) is
exported here (``__all__``). See docs/node-types.md.
"""

from __future__ import annotations

import logging
import re
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata

from runtime.backends.base import ChatMessage, GenerationRequest, GenerationResult
from runtime.diagnostics import NodeDiagnostics, NodeInput, NodeTimings, NodeTokens, PromptMessage
from runtime.dialogue.history import DialogHistory, Reply, Summary, Turn
from runtime.events import Speak, Token
from runtime.nodes.base import (
    END,
    ID_PATTERN,
    OPTIONAL_SLOT_PATTERN,
    SLOT_PATTERN,
    TOKENS_PER_MESSAGE,
    FieldError,
    ModelParams,
    ModelUse,
    NodeBase,
    SamplingParams,
    Strict,
    VariableValue,
    field_help,
    is_valid_id,
)
from runtime.nodes.checks import NodeChecks
from runtime.nodes.classify_attributes import Attribute, ClassifyAttributes
from runtime.nodes.classify_intent import ClassifyIntent, Intent
from runtime.nodes.exit import Exit
from runtime.nodes.generate import Generate, GenerateAndSpeak, GeneratingNode
from runtime.nodes.guard import Guard, GuardPolicy, GuardRequest, GuardVerdict
from runtime.nodes.retrieve.node import KnowledgeEntry, Retrieve
from runtime.nodes.running import NodeRun, TurnCancelled, TurnError
from runtime.nodes.subgraph import Subgraph
from runtime.nodes.summarize.node import Summarize
from runtime.nodes.tool_call import Tool, ToolCall
from runtime.patterns import PatternError, compile_pattern
from runtime.patterns import search as search_pattern
from runtime.prompting.budget import PromptBudget, TokenCounter, message_tokens, messages_tokens
from runtime.prompting.prompt import message_parts, slot_text, template_values
from runtime.prompting.templates import TemplateError, render_template

log = logging.getLogger("parley.runtime")

ENTRY_POINT_GROUP = "parley.node_types"
MAX_PROBLEM_CHARS = 2000  # of a plugin's own error message, quoted in its problem
MAX_TYPE_NAME_CHARS = 64  # a node type's name: a word in files, menus and the palette
TYPE_NAME = re.compile(rf"[A-Za-z_][A-Za-z0-9_]{{0,{MAX_TYPE_NAME_CHARS - 1}}}")


@dataclass(frozen=True)
class NodeType:
    """One node type: its model class, and where the editor finds its description."""

    model: type[NodeBase]
    editor: str = ""  # "module:attribute" of its editor.node_types.NodeView ('' for the built-in types)
    package: str = ""  # the distribution that added it ('' for the built-in types)

    @property
    def name(self) -> str:
        return self.model.model_fields["type"].default


def _builtin(model: type[NodeBase]) -> NodeType:
    return NodeType(model)


# The table: the built-in types, then the plugins' (the editor orders its palette by category).
NODE_TYPES: dict[str, NodeType] = {
    t.name: t
    for t in map(_builtin, (Generate, GenerateAndSpeak, ToolCall, Summarize, ClassifyIntent, ClassifyAttributes,
                            Guard, Retrieve, Subgraph, Exit))
}
# Why a plugin could not be added (its entry point, then the reason); shown by `parley validate`
# and the editor's Problems dock rather than stopping either.
PLUGIN_PROBLEMS: list[str] = []
# Told of every type registered after it subscribed (the asset model rebuilds its union of types).
_SUBSCRIBERS: list[Callable[[NodeType], None]] = []
# Entry points (name, value) tried so far, and those that wait for a module to finish importing
# (-> the problem reported meanwhile): load_plugins tries each once, and a waiting one again.
_TRIED: set[tuple[str, str]] = set()
_WAITING: dict[tuple[str, str], str] = {}


def node_type(name: str) -> NodeType:
    """The registered type called ``name``. Raises KeyError."""
    return NODE_TYPES[name]


def node_model(name: str) -> type[NodeBase]:
    """The model class of the registered type called ``name``. Raises KeyError."""
    return NODE_TYPES[name].model


def node_models() -> tuple[type[NodeBase], ...]:
    return tuple(t.model for t in NODE_TYPES.values())


def when_registered(callback: Callable[[NodeType], None]) -> None:
    """Call ``callback`` with every type registered from now on (what is built from the table, such
    as the asset model's union of node types, is rebuilt by it)."""
    _SUBSCRIBERS.append(callback)


def register(entry: NodeType) -> None:
    """Add a node type to the table (and to everything built from it). Raises TypeError or
    ValueError, saying why, for a model that is not a node type or a name that is not a plain
    identifier (asset files, the palette and the properties dock all key on it)."""
    model = entry.model
    if not (isinstance(model, type) and issubclass(model, NodeBase)) or "type" not in model.model_fields:
        raise TypeError("a node type's model derives from runtime.nodes.NodeBase and has a Literal 'type' field")
    name = entry.name
    if not isinstance(name, str) or not TYPE_NAME.fullmatch(name):
        shown = repr(name)[:MAX_TYPE_NAME_CHARS + 2] if isinstance(name, str) else f"a {type(name).__name__}"
        raise ValueError(f"the type name {shown} is not a plain identifier: its 'type' field's default is a name of "
                         f"letters, digits and '_' (up to {MAX_TYPE_NAME_CHARS}), not starting with a digit")
    if entry.name in NODE_TYPES:
        raise ValueError(f"node type {entry.name!r} is already registered")
    if entry.package:
        _answer_even_when_failing(model)
    NODE_TYPES[entry.name] = entry
    for callback in _SUBSCRIBERS:
        callback(entry)


# What a plugin type's descriptive methods answer when its own code raises: these are asked by the
# canvas, the properties dock, validation's walks and the estimate, which must go on. The failure is
# a plugin problem (once per type and method). run, check, check_in_graph and exits are not here:
# a turn fails on them and validation reports them on the node.
_FALLBACKS: dict[str, Callable[[], object]] = {
    "uses_model": lambda: False, "history_budget": lambda: None, "field_limits": dict, "speaks": lambda: False,
}


def _answer_even_when_failing(model: type[NodeBase]) -> None:
    for method, fallback in _FALLBACKS.items():
        original = getattr(model, method)
        if getattr(original, "_answers_when_failing", False):
            continue

        def guarded(self, *args, _original=original, _fallback=fallback, _method=method):
            try:
                return _original(self, *args)
            except Exception as exc:  # noqa: BLE001 - a plugin's failure is a problem on its type, never a crash
                problem = f"node type {self.type_name!r}: {_method}() failed: {failure_text(exc)}"
                if problem not in PLUGIN_PROBLEMS:
                    PLUGIN_PROBLEMS.append(problem)
                    log.warning("%s", problem)
                return _fallback()

        guarded._answers_when_failing = True  # type: ignore[attr-defined]
        guarded.__doc__ = original.__doc__
        setattr(model, method, guarded)


def _still_importing(exc: BaseException) -> str:
    """The module a failed plugin import stopped at because it is itself still being imported
    (a plugin that imports, say, ``runtime.asset.model`` while that module is loading the
    registry), or ''."""
    if isinstance(exc, ImportError):
        module = sys.modules.get(exc.name or "")
    elif isinstance(exc, AttributeError):
        module = getattr(exc, "obj", None)
    else:
        return ""
    spec = getattr(module, "__spec__", None)
    return spec.name if spec is not None and getattr(spec, "_initializing", False) else ""


def load_plugins() -> None:
    """Add the types of the ``parley.node_types`` entry points not tried yet. Runs when this package
    is first imported; a module built on the table (the asset model) calls it again once it is
    complete, which adds a plugin that had to wait for that module to finish importing."""
    for point in metadata.entry_points(group=ENTRY_POINT_GROUP):
        key = (point.name, point.value)
        if key in _TRIED and key not in _WAITING:
            continue
        _TRIED.add(key)
        earlier = _WAITING.pop(key, "")
        if earlier in PLUGIN_PROBLEMS:
            PLUGIN_PROBLEMS.remove(earlier)
        package = point.dist.name if point.dist is not None else ""
        try:
            loaded = point.load()
            if not isinstance(loaded, NodeType):
                raise TypeError(f"{point.value} is a {type(loaded).__name__}, not a runtime.nodes.NodeType")
            register(NodeType(loaded.model, loaded.editor, loaded.package or package))
        # A broken plugin must not stop the app or the CLI: SystemExit and the rest are its problem.
        # Only a KeyboardInterrupt on the main thread goes on (after it is recorded): it is how
        # Ctrl+C stops the program, and a plugin cannot be told from the user pressing it.
        except BaseException as exc:
            waiting = _still_importing(exc)
            reason = (f"it imports {waiting} at import time, while that module is still being imported "
                      "(import it inside the function that needs it)" if waiting else failure_text(exc))
            problem = f"node type plugin {point.name!r} ({point.value}) was not added: {reason}"
            PLUGIN_PROBLEMS.append(problem)
            if waiting:  # tried again when that module calls load_plugins; reported until then
                _WAITING[key] = problem
            else:
                log.warning("%s", problem)
            if isinstance(exc, KeyboardInterrupt) and threading.current_thread() is threading.main_thread():
                raise


def failure_text(exc: BaseException) -> str:
    """What a node type's code raised, in words (SystemExit's code, an exception's message, at most
    ``MAX_PROBLEM_CHARS``): how a plugin that fails to load, run or check is reported."""
    if isinstance(exc, SystemExit):
        return f"SystemExit({exc.code!r}): it tried to exit the program, which a node type must never do"
    if isinstance(exc, KeyboardInterrupt):
        return "KeyboardInterrupt: interrupted"
    try:
        text = f"{type(exc).__name__}: {exc}"
    except Exception:  # noqa: BLE001 - a plugin's exception whose message itself fails
        text = type(exc).__name__
    return text if len(text) <= MAX_PROBLEM_CHARS else text[:MAX_PROBLEM_CHARS] + "\u2026"


def checked_exits(node: NodeBase) -> dict[str, str]:
    """``node.exits()``, or TypeError when a node type answers something that is not port names to
    node ids (whatever ``exits()`` itself raises passes through)."""
    exits = node.exits()
    if not isinstance(exits, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in exits.items()):
        raise TypeError(f"it gave a {type(exits).__name__}, not a dict of port -> node id")
    return exits


def shown_exits(node: NodeBase) -> dict[str, str]:
    """``checked_exits`` for a view or a walk that must go on: no exits when a plugin's ``exits()``
    fails. Validation reports that failure on the node; a turn that reaches it fails naming it."""
    try:
        return checked_exits(node)
    except Exception:  # noqa: BLE001 - a plugin's failure is a problem on its node, never a crash
        return {}


def shown_exit_label(node: NodeBase, port: str) -> str:
    """``node.exit_label(port)``, or the port itself when a plugin's ``exit_label`` fails."""
    try:
        label = node.exit_label(port)
    except Exception:  # noqa: BLE001 - as shown_exits
        return port
    return label if isinstance(label, str) else port


load_plugins()

__all__ = [  # noqa: RUF022 - grouped by what a plugin needs them for
    # the registry
    "ENTRY_POINT_GROUP", "MAX_PROBLEM_CHARS", "MAX_TYPE_NAME_CHARS", "NODE_TYPES", "PLUGIN_PROBLEMS", "NodeType",
    "failure_text", "load_plugins", "node_model", "node_models", "node_type", "register", "checked_exits", "shown_exit_label",
    "shown_exits", "when_registered",
    # a node type's model: its base, parameter blocks and names
    "END", "ID_PATTERN", "OPTIONAL_SLOT_PATTERN", "SLOT_PATTERN", "FieldError", "ModelParams", "ModelUse", "NodeBase",
    "SamplingParams", "Strict", "VariableValue", "field_help", "is_valid_id",
    # running and checking a node
    "NodeChecks", "NodeRun", "TurnCancelled", "TurnError",
    # what a run reads and writes: the history, a model call, events, diagnostics
    "ChatMessage", "DialogHistory", "GenerationRequest", "GenerationResult", "NodeDiagnostics", "NodeInput",
    "NodeTimings", "NodeTokens", "PromptMessage", "Reply", "Speak", "Summary", "Token", "Turn",
    # designer-written regular expressions, searched within limits
    "PatternError", "compile_pattern", "search_pattern",
    # templates and the token budget
    "TOKENS_PER_MESSAGE", "PromptBudget", "TemplateError", "TokenCounter", "message_parts", "message_tokens",
    "messages_tokens", "render_template", "slot_text", "template_values",
    # the built-in types
    "Attribute", "ClassifyAttributes", "ClassifyIntent", "Exit", "Generate", "GenerateAndSpeak", "GeneratingNode",
    "Guard", "GuardPolicy", "GuardRequest", "GuardVerdict", "Intent", "KnowledgeEntry", "Retrieve", "Subgraph", "Summarize", "Tool", "ToolCall",
]
