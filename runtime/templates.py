"""Mustache templates (chevron), rendered for prompts rather than for HTML.

Two differences from plain ``chevron.render``: ``{{name}}`` is not HTML-escaped (a
player's ``<`` or ``&`` reaches the model as typed), and partials (``{{> name}}``)
are refused instead of being read from the working folder.
"""

from __future__ import annotations

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
    except (IndexError, ValueError, TypeError) as exc:
        # chevron's tokenizer trips over some broken delimiter tags without a ChevronError.
        raise _problem(f"bad Mustache template: {exc or 'malformed tag'}", node_id, field, source) from None
    for tag, key in tokens:
        if tag == "partial":
            raise _problem(f"partials ({{{{> {key}}}}}) are not supported in templates", node_id, field, source)
    return tokens


def render_template(
    template: str, values: dict[str, Any], node_id: str = "", field: str = "template", source: str = ""
) -> str:
    """Render ``template`` with ``values``. Missing names render as empty text."""
    if not template:
        return ""
    tokens = [("no escape", key) if tag == "variable" else (tag, key) for tag, key in check_template(template, node_id, field, source)]
    try:
        return chevron.render(tokens, values, partials_path=None)
    except (ChevronError, IndexError, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise _problem(f"cannot render the template: {exc}", node_id, field, source) from None
