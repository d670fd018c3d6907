"""The editor's description of each node type: one ``NodeView`` per type, in one table.

A ``NodeView`` is everything the editor shows of a type: its label, palette category, colour,
help text, the summary painted on the node, and its properties layout (the order of the field
groups). The palette, the canvas, Tab search and the properties dock read it from here and
nowhere else; what a type stores and does is its runtime module (``runtime.nodes``).

Plugin types (the ``parley.node_types`` entry point) name their ``NodeView`` in
``NodeType.editor``; a plugin without one gets ``fallback_view``, built from its model.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import textwrap
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from runtime.asset.model import (
    Asset,
    ClassifyAttributes,
    ClassifyIntent,
    GeneratingNode,
    NodeBase,
    Retrieve,
    Summarize,
    ToolCall,
)
from runtime.nodes import MAX_PROBLEM_CHARS, NODE_TYPES, PLUGIN_PROBLEMS, node_type
from runtime.nodes.base import replies_checked
from runtime.nodes.guard import Guard
from runtime.prompting.templates import TemplateError, check_template

log = logging.getLogger("parley.editor")

Colour = tuple[int, int, int]
SummaryLines = Callable[[NodeBase, Asset], list[str]]
# A type's own handling of a Properties edit: (document, node id, field, value) -> the undo command
# to push (a MacroCommand without parts: nothing to change), or None for the plain one-field edit.
FieldEdit = Callable[[Any, str, str, Any], Any]

# Palette categories, in palette order, with their colours. A plugin may name another category.
CATEGORY_COLOURS: dict[str, Colour] = {
    "Reply": (38, 98, 140),
    "Tools": (150, 95, 30),
    "Classify": (104, 66, 140),
    "Memory": (34, 118, 100),
    "Flow": (70, 84, 112),
}
PLUGIN_CATEGORY = "Plugins"
PLUGIN_COLOUR: Colour = (92, 96, 104)
# Properties dock sections, in order; a group a view does not list comes after these.
GROUP_ORDER = ("General", "Prompt", "Guard", "Policies", "Model", "Sampling", "History", "Tools", "Intents",
               "Attributes", "Knowledge", "Folding", "Exits", "Serving", "Game", "Layout")


def _no_summary(_node: NodeBase, _asset: Asset) -> list[str]:
    return []


@dataclass(frozen=True)
class NodeView:
    """How the editor shows one node type."""

    type: str
    label: str
    category: str
    help: str
    summary: SummaryLines = _no_summary  # the key settings painted on the node, a few short lines
    colour: Colour | None = None  # None: the category's colour
    groups: tuple[str, ...] = GROUP_ORDER  # properties dock sections, in order
    hidden_fields: tuple[str, ...] = field(default=())  # fields the properties dock leaves out
    id_stem: str = ""  # what a new node's id starts with ('' : the type name in lower case)
    edit: FieldEdit | None = None  # a Properties edit that changes more than its field (see FieldEdit)

    @property
    def new_id(self) -> str:
        return self.id_stem or self.type.lower()

    @property
    def fill(self) -> Colour:
        return self.colour or CATEGORY_COLOURS.get(self.category, PLUGIN_COLOUR)


# --- summary lines of the built-in types ----------------------------------------------------------
# What a designer needs at a glance: what the node says or decides, in their words, in at most
# SUMMARY_LINES lines of at most SUMMARY_WIDTH characters (the canvas paints them large enough to
# read at the zoom a file opens at). Settings at their usual value are left out.

SUMMARY_WIDTH = 32
SUMMARY_LINES = 3
ELLIPSIS = "\u2026"


def _short(text: str, limit: int = SUMMARY_WIDTH) -> str:
    return text if len(text) <= limit else text[: limit - 1] + ELLIPSIS


# More text than a summary can show is cut to this many characters before it is wrapped: a 50 MB
# system prompt was split into words and wrapped whole on every repaint of its node.
SUMMARY_TEXT_LIMIT = 4 * SUMMARY_LINES * SUMMARY_WIDTH


def _cut(text: str) -> tuple[str, bool]:
    """``text`` cut to ``SUMMARY_TEXT_LIMIT`` characters, and whether it was."""
    return (text, False) if len(text) <= SUMMARY_TEXT_LIMIT else (text[:SUMMARY_TEXT_LIMIT], True)


def _wrap(text: str, lines: int) -> list[str]:
    """``text`` on at most ``lines`` lines, broken between words, cut with an ellipsis."""
    if lines <= 0:
        return []
    text, cut = _cut(text)
    wrapped = textwrap.wrap(" ".join(text.split()), SUMMARY_WIDTH, max_lines=lines, placeholder=ELLIPSIS)
    if cut and wrapped and not wrapped[-1].endswith(ELLIPSIS):  # the rest was cut off before wrapping
        wrapped[-1] = _short(wrapped[-1] + " " + ELLIPSIS)
    if wrapped and wrapped[-1].endswith(ELLIPSIS):  # "nosy.\u2026" reads as "nosy\u2026"
        wrapped[-1] = re.sub(r"[\s.,;:!?]+" + ELLIPSIS + "$", ELLIPSIS, wrapped[-1])
    return wrapped


def _fill(head: list[str], text: str, tail: list[str]) -> list[str]:
    """``head``, then ``text`` wrapped into the lines ``head`` and ``tail`` leave, then ``tail``."""
    return head + _wrap(text, SUMMARY_LINES - len(head) - len(tail)) + tail


def model_label(node: NodeBase, asset: Asset) -> str:
    """The node's model when it is not the agent's default ('' when it is)."""
    model = asset.model_for(node)
    if not model:
        return "no model set"
    return "" if model == asset.default_model else _short(f"model: {os.path.basename(model)}")


# "You are Brann, the gate guard. Give directions." -> Brann, "Give directions."
_PLAYS = re.compile(r"You are ((?:[A-Z][\w'-]*)(?: [A-Z][\w'-]*){0,2})(?:,[^.!?]*)?[.!?]\s+(?=\S)")


def _gist(prompt: str) -> str:
    """What a prompt tells the model, quoted. A first sentence that names the character ("You are
    Brann, ...") becomes "as Brann:": every reply node of one character starts with it, and what
    tells them apart comes after it."""
    prompt, cut = _cut(prompt)
    text = " ".join(prompt.split()) + (" " + ELLIPSIS if cut else "")
    plays = _PLAYS.match(text)
    if plays:
        return f"as {plays.group(1)}: \u201c{text[plays.end():]}\u201d"
    return f"\u201c{text}\u201d"


def _template_names(template: str) -> list[str]:
    """The values a template reads ({{vars.time}} -> time, {{#knowledge}} -> knowledge), in order."""
    try:
        tokens = check_template(template)
    except TemplateError:
        return []
    names: list[str] = []
    depth = 0
    for tag, key in tokens:
        if tag == "end":
            depth -= 1
        elif depth == 0 and tag in ("variable", "no escape", "section", "inverted section"):
            name = key.split(".", 1)[1] if key.startswith(("vars.", "slots.")) else key
            if name not in names and name != "input":
                names.append(name)
        if tag in ("section", "inverted section"):
            depth += 1
    return names


def _uses(reads: list[str]) -> str:
    return f"uses: {', '.join(reads)}" if reads else ""


def _history(node: GeneratingNode) -> str:
    return {"none": "no history", "last_n": f"last {node.history_window} entries",
            "summarized": f"summary + last {node.history_window}", "full": ""}[node.history_mode]


def _settings(*parts: str) -> list[str]:
    """Settings worth a mention, joined on one line (two when they need it)."""
    return _wrap(" \u00b7 ".join(p for p in parts if p), 2)


def _generating(node: GeneratingNode, asset: Asset) -> list[str]:
    reads = ([node.input] if node.input else []) + _template_names(node.template)
    hidden = "hidden step" if node.history_role == "none" else ""
    tail = _settings(_uses(reads), _history(node), hidden, model_label(node, asset))
    if node.system_prompt.strip():
        said = _gist(node.system_prompt)
    elif node.template.strip():
        said = f"template: {node.template}"
    else:
        said = "no system prompt"
    return _fill([], said, tail)


def _tool_call(node: ToolCall, asset: Asset) -> list[str]:
    calls = _wrap(f"calls: {', '.join(t.name for t in node.tools)}" if node.tools else "no tools", 2)
    forgets = "call not replayed" if node.disposition == "omit" else ""
    tail = _settings(_uses(_template_names(node.template)), forgets, model_label(node, asset))
    tail = tail[: SUMMARY_LINES - len(calls)]
    return _fill(calls, _gist(node.system_prompt) if node.system_prompt.strip() else "", tail)


def _classify_intent(node: ClassifyIntent, asset: Asset) -> list[str]:
    tail = _settings(f"reads: {node.input}" if node.input else "", model_label(node, asset))
    if not node.intents:
        return _fill([], "no intents: always fallback", tail)
    choices = " / ".join([i.name for i in node.intents] + ["fallback"])
    return _fill([], f"decides: {choices}", tail)


def _classify_attributes(node: ClassifyAttributes, asset: Asset) -> list[str]:
    tail = _settings(f"reads: {node.input}" if node.input else "", model_label(node, asset))
    if not node.attributes:
        return _fill([], "fills nothing yet", tail)
    room = SUMMARY_LINES - len(tail)
    detailed = "fills: " + ", ".join(f"{a.name} ({'/'.join(a.values)})" for a in node.attributes)
    if len(textwrap.wrap(detailed, SUMMARY_WIDTH)) > room:
        detailed = "fills: " + ", ".join(a.name for a in node.attributes)
    return _fill([], detailed, tail)


def _guard(node: Guard, asset: Asset) -> list[str]:
    checked = f"checks: {node.input}" if node.input else "checks the player's line"
    replies = replies_checked({n.id: n for n in asset.nodes}).get(node.id, [])
    if len(replies) > 1:  # the speaking nodes wired into a reply guard are checked too
        checked = "checks replies: " + ", ".join(replies)
    checks = [name for name, on in (("patterns", node.check_patterns), (f"plugin {node.check_plugin}", node.check_plugin),
                                     ("model", node.check_model)) if on]
    usual = checks == ["patterns"]  # the default: left out
    tail = [] if usual else _settings(f"by {', '.join(checks)}" if checks else "no check on",
                                      model_label(node, asset) if node.check_model else "")
    rules = "rules: " + " / ".join(p.name for p in node.policies) if node.policies else "no policies: every line passes"
    if len(replies) > 1:  # the replies first, on the lines the rules leave
        return _fill([], checked, [_short(rules), *tail[:1]][:SUMMARY_LINES - 1])
    return _fill([checked], rules, tail[:1])


def _retrieve(node: Retrieve, asset: Asset) -> list[str]:
    facts = f"finds {node.top_k} fact{'s' if node.top_k != 1 else ''}"
    if node.source_file:
        found = [f"{facts} in", _short(os.path.basename(node.source_file))]
        if len(" ".join(found)) <= SUMMARY_WIDTH:
            found = [" ".join(found)]
        if node.entries:
            found.append(f"and {len(node.entries)} written here")
    else:
        found = [f"{facts} in {len(node.entries)} written here" if node.entries else "no knowledge yet"]
    tail = _settings(f"query: {node.query}" if node.query else "",
                     "by meaning" if node.embedding_model else "",
                     f"into: {node.slot}" if node.slot != "knowledge" else "")
    return (found + tail)[:SUMMARY_LINES]


def _summarize(node: Summarize, asset: Asset) -> list[str]:
    every = [f"~{node.trigger_tokens} tokens" if node.trigger_tokens else "",
             f"{node.trigger_turns} turns" if node.trigger_turns else ""]
    keep = node.keep_recent_turns
    kept = {0: "keeps no turn word for word", 1: "keeps last turn word for word"}.get(
        keep, f"keeps last {keep} turns word for word")
    model = model_label(node, asset)
    return [f"folds every {' or '.join(e for e in every if e)}", kept,
            model or f"summary up to {node.max_summary_tokens} tokens"]


def _subgraph(node: NodeBase, asset: Asset) -> list[str]:
    from editor.canvas.subgraphs import subgraph_summary  # the file reading lives there

    return subgraph_summary(node, asset)


def _exit(node: NodeBase, asset: Asset) -> list[str]:
    from editor.canvas.subgraphs import exit_summary

    return exit_summary(node, asset)


def _edit_subgraph(document: Any, node_id: str, field: str, value: Any) -> Any:
    from editor.canvas.subgraphs import edit_subgraph_field

    return edit_subgraph_field(document, node_id, field, value)


def _edit_keeping_marks(document: Any, node_id: str, field: str, value: Any) -> Any:
    from editor.model.game_events import edit_keeping_marks  # a game event on a renamed port follows it

    return edit_keeping_marks(document, node_id, field, value)


def _fitted(lines: SummaryLines) -> SummaryLines:
    """``lines``, held to SUMMARY_LINES lines of SUMMARY_WIDTH characters whatever the node holds."""
    return lambda node, asset: [_short(line) for line in lines(node, asset)[:SUMMARY_LINES]]


# The built-in types, in palette order within each category.
BUILTIN_VIEWS: dict[str, NodeView] = {view.type: view for view in (
    NodeView("GenerateAndSpeak", "Generate and Speak", "Reply",
             "Generates the character's reply to the player.", _fitted(_generating), id_stem="reply"),  # type: ignore[arg-type]
    NodeView("Generate", "Generate", "Reply",
             "Generates text with a model; the output goes to a slot or the next node, not to the player.",
             _fitted(_generating)),  # type: ignore[arg-type]
    NodeView("ToolCall", "Tool Call", "Tools",
             "Lets the model call one of the declared tools, constrained to its JSON schema.",
             _fitted(_tool_call)),  # type: ignore[arg-type]
    NodeView("ClassifyIntent", "Classify Intent (LLM)", "Classify",
             "Picks one of the listed intents for the player's line and branches on it.",
             _fitted(_classify_intent), edit=_edit_keeping_marks),  # type: ignore[arg-type]
    NodeView("ClassifyAttributes", "Classify Attributes (LLM)", "Classify",
             "Fills attribute slots, each with one of its allowed values.",
             _fitted(_classify_attributes)),  # type: ignore[arg-type]
    NodeView("Guard", "Guard (rules)", "Classify",
             "Checks the player's line, or a reply before it is spoken, against named rules (patterns, a plugin, "
             "the model) and branches on the first rule broken; a line that breaks none passes.",
             _fitted(_guard), colour=(140, 56, 76), edit=_edit_keeping_marks),  # type: ignore[arg-type]
    NodeView("Retrieve", "Retrieve", "Memory",
             "Finds the knowledge entries that best match the line and puts them in a slot.",
             _fitted(_retrieve)),  # type: ignore[arg-type]
    NodeView("Summarize", "Summarize", "Memory",
             "Folds older turns into a rolling summary so long conversations keep their thread.",
             _fitted(_summarize)),  # type: ignore[arg-type]
    NodeView("Subgraph", "Subgraph (Behaviour)", "Flow",
             "Runs a behaviour (another asset file) as one step of this graph; its exits are the behaviour's "
             "Exit nodes, and next for its exits that end the turn. Double-click to open the behaviour.",
             _fitted(_subgraph), hidden_fields=("exit_targets",), id_stem="behaviour", edit=_edit_subgraph),
    NodeView("Exit", "Exit (of a behaviour)", "Flow",
             "A named exit of a behaviour: its id is a port on every Subgraph node that runs this file. In an "
             "asset run directly it ends the turn.", _fitted(_exit), colour=(120, 48, 48),  # the END terminal's
             id_stem="exit"),
)}


# --- the table -----------------------------------------------------------------------------------


def fallback_view(type_name: str) -> NodeView:
    """A plain description for a plugin type that names none (or one that cannot be loaded)."""
    model = node_type(type_name).model
    doc = (model.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")
    return NodeView(type_name, type_name, PLUGIN_CATEGORY, doc or f"A {type_name} node (from a plugin).")


@cache
def view_of(type_name: str) -> NodeView:
    """The editor's description of a registered node type. Raises KeyError for an unknown type."""
    if type_name in BUILTIN_VIEWS:
        return BUILTIN_VIEWS[type_name]
    entry = node_type(type_name)
    if not entry.editor:
        return fallback_view(type_name)
    module, _, attribute = entry.editor.partition(":")
    try:
        view = getattr(importlib.import_module(module), attribute)
        if not isinstance(view, NodeView):
            raise TypeError(f"{entry.editor} is a {type(view).__name__}, not an editor.node_types.NodeView")
        if view.type != type_name or not all(isinstance(v, str) for v in (view.label, view.category, view.help)):
            raise TypeError(f"{entry.editor} describes {view.type!r}, or its label, category or help is not text")
    # A broken plugin view must not stop the editor (SystemExit included); Ctrl+C on the main
    # thread goes on, as in runtime.nodes.load_plugins.
    except BaseException as exc:
        problem = (f"node type {type_name!r}: its editor description {entry.editor} could not be loaded, so it is "
                   f"shown plainly ({type(exc).__name__}: {str(exc)[:MAX_PROBLEM_CHARS]})")
        log.warning("%s", problem)
        if problem not in PLUGIN_PROBLEMS:
            PLUGIN_PROBLEMS.append(problem)
        if isinstance(exc, KeyboardInterrupt) and threading.current_thread() is threading.main_thread():
            raise
        return fallback_view(type_name)
    return view


def all_views() -> list[NodeView]:
    """Every registered type's view, in palette order: by category (the built-in categories first),
    then in the order the types were registered."""
    views = [view_of(name) for name in NODE_TYPES]
    categories = list(CATEGORY_COLOURS) + sorted({v.category for v in views} - set(CATEGORY_COLOURS))
    builtin_order = list(BUILTIN_VIEWS)
    return sorted(views, key=lambda v: (categories.index(v.category),
                                        builtin_order.index(v.type) if v.type in builtin_order else len(builtin_order)))


def categories() -> dict[str, list[NodeView]]:
    """Palette categories in order, each with its types' views."""
    out: dict[str, list[NodeView]] = {}
    for view in all_views():
        out.setdefault(view.category, []).append(view)
    return out


def category_colour(category: str) -> Colour:
    return CATEGORY_COLOURS.get(category, PLUGIN_COLOUR)
