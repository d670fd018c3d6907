"""Mustache templates (chevron), rendered for prompts rather than for HTML.

Three differences from plain ``chevron.render``: ``{{name}}`` is not HTML-escaped (a
player's ``<`` or ``&`` reaches the model as typed), partials (``{{> name}}``) are refused
instead of being read from the working folder, and a template reads values only.

Values only: what a template sees is plain data (text, numbers, true/false, lists and
records of them), looked up by record key and list index and nothing else. ``{{input.__class__}}``
or ``{{#input.format}}`` find nothing, so a template never reaches a Python object's attributes
or methods, and nothing in it is ever called.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import chevron
from chevron.tokenizer import ChevronError, tokenize

from runtime.problems import InputError, Problem


class TemplateError(InputError):
    """A template that cannot be rendered; the problem names the node and field."""


def _problem(message: str, node_id: str, field: str, source: str) -> TemplateError:
    return TemplateError([Problem("error", message, source, node_id=node_id, field=field)])


def check_template(template: str, node_id: str = "", field: str = "template", source: str = "") -> list[tuple[str, str]]:
    """The template's tokens; raises ``TemplateError`` for a malformed one."""
    try:
        tokens = list(tokenize(template))
    except ChevronError as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else "malformed tag"
        raise _problem(f"bad Mustache template: {first_line}", node_id, field, source) from None
    except (IndexError, ValueError, TypeError, KeyError, AttributeError) as exc:
        # chevron's tokenizer trips over some broken delimiter tags without a ChevronError.
        raise _problem(f"bad Mustache template: {exc or 'malformed tag'}", node_id, field, source) from None
    for tag, key in tokens:
        if tag == "partial":
            raise _problem(f"partials ({{{{> {key}}}}}) are not supported in templates", node_id, field, source)
    return tokens


def render_template(
    template: str, values: dict[str, Any], node_id: str = "", field: str = "template", source: str = ""
) -> str:
    """Render ``template`` with ``values`` (read as plain data: see the module's docstring).
    Missing names render as empty text."""
    if not template:
        return ""
    tokens = [("no escape", key) if tag == "variable" else (tag, key) for tag, key in check_template(template, node_id, field, source)]
    try:
        data = plain_values(values)
        return chevron.render(tokens, data, partials_path=None)
    except RecursionError:
        raise _problem("cannot render the template: its sections or values nest too deeply", node_id, field,
                       source) from None
    except (ChevronError, IndexError, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise _problem(f"cannot render the template: {exc}", node_id, field, source) from None


def template_fields(node: Any) -> list[str]:
    """The node's fields that are Mustache templates (marked ``mustache=True`` in their help)."""
    fields = getattr(type(node), "model_fields", {})
    return [name for name, info in fields.items()
            if isinstance(info.json_schema_extra, dict) and info.json_schema_extra.get("mustache") is True]


def template_problems(nodes: Iterable[Any], source: str = "") -> list[Problem]:
    """Every template field of ``nodes`` that cannot be rendered (malformed tags, partials), by node
    and field, so ``parley validate`` finds them before a turn does."""
    problems: list[Problem] = []
    for node in nodes:
        for name in template_fields(node):
            text = getattr(node, name, "")
            if isinstance(text, str) and text:
                try:
                    check_template(text, node.id, name, source)
                except TemplateError as exc:
                    problems.extend(exc.problems)
    return problems


# --- values only ------------------------------------------------------------------------------
# chevron looks a dotted name up as ``scope[part]``, and only when that raises TypeError or
# AttributeError does it try ``getattr(scope, part)``. Every value a template sees answers
# ``scope[part]`` itself (KeyError when there is no such key or index), so the getattr is never
# reached; and none of them is callable, so chevron's lambda sections never run.

MAX_VALUE_DEPTH = 64


class _NoKeys:
    """A scalar a template sees: ``scope[part]`` finds nothing (``{{input.format}}`` is empty)."""

    __slots__ = ()

    def __getitem__(self, key: Any) -> Any:
        raise KeyError(key)


class _Text(_NoKeys, str):
    __slots__ = ()


class _Whole(_NoKeys, int):
    __slots__ = ()


class _Truth(_NoKeys, int):
    """True or false (bool cannot be subclassed): renders and tests as the bool it stands for."""

    __slots__ = ()

    def __str__(self) -> str:
        return str(bool(self))

    __repr__ = __str__


class _Number(_NoKeys, float):
    __slots__ = ()


class _Record(dict):
    """Keys only (``{{vars.keys}}`` is a variable named keys, never the method)."""

    __slots__ = ()


class _List(list):
    """Items by index (``{{knowledge.0.text}}``), nothing else."""

    __slots__ = ()

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            try:
                key = int(key)
            except ValueError:
                raise KeyError(key) from None
        try:
            return super().__getitem__(key)
        except (IndexError, TypeError):
            raise KeyError(key) from None


def plain_values(value: Any, depth: int = 0) -> Any:
    """``value`` as plain data a template can read: text, numbers, true/false, lists and records.
    None reads as empty text; any other object as its text."""
    if depth > MAX_VALUE_DEPTH:
        raise ValueError(f"a value nests more than {MAX_VALUE_DEPTH} lists or records deep")
    if isinstance(value, bool):
        return _Truth(value)
    if isinstance(value, str):
        return _Text(value)
    if isinstance(value, int):
        return _Whole(value)
    if isinstance(value, float):
        return _Number(value)
    if value is None:
        return _Text("")
    if isinstance(value, Mapping):
        return _Record({str(k): plain_values(v, depth + 1) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return _List(plain_values(v, depth + 1) for v in value)
    return _Text(str(value))
