"""pydantic's validation errors as problems a user can act on: each says where (the file, and a node
and field, a line, or words before the message) and what is wrong.

Every file the runtime reads (assets, dialog histories, suites, backend profiles) and the editor's
forms turn errors into problems here. A format passes how it names a place (``place``) and the
words it gives some kinds of error (``message``, usually ``error_message`` with a ``Wording``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from runtime.problems import Problem

UNKNOWN_KEY = "unknown key"
MISSING_FIELD = "required field is missing"

# An error's type -> what to say instead of pydantic's message: text, or a function of the error.
Wording = Mapping[str, "str | Callable[[ErrorDetails], str]"]


@dataclass(frozen=True)
class Place:
    """Where an error is, as a format names it: a node and field, a line, or ``words`` that the
    message follows (``words: message``) for formats that say where in the message itself."""

    node_id: str = ""
    field: str = ""
    line: int = 0
    words: str = ""


def validator_says(err: ErrorDetails) -> str:
    """pydantic's message for ``err``, without the "Value error, " it puts before what a validator raised."""
    return err["msg"].removeprefix("Value error, ")


def error_message(err: ErrorDetails, wording: Wording, otherwise: Callable[[ErrorDetails], str] = validator_says
                  ) -> str:
    """What ``wording`` says for ``err``'s type, else ``otherwise(err)``."""
    said = wording.get(err["type"])
    if said is None:
        return otherwise(err)
    return said if isinstance(said, str) else said(err)


def located_problems(exc: ValidationError, source: str, place: Callable[[ErrorDetails], Place],
                     message: Callable[[ErrorDetails], str] = validator_says) -> list[Problem]:
    """One error problem per error of ``exc``, in pydantic's order: in file ``source``, at
    ``place(err)``, saying ``message(err)``."""
    problems = []
    for err in exc.errors(include_url=False):
        where, said = place(err), message(err)
        problems.append(Problem("error", f"{where.words}: {said}" if where.words else said, source,
                                node_id=where.node_id, field=where.field, line=where.line))
    return problems
