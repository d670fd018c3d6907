"""Problems found in an asset (or another input file), and the errors that carry them, as a user
sees them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Problem:
    """One problem: where it is (file, node, field, or line/column) and what to do."""

    severity: Severity
    message: str
    file: str = ""
    node_id: str = ""
    field: str = ""
    line: int = 0
    column: int = 0

    @property
    def where(self) -> str:
        if self.line:
            return f"{self.file}:{self.line}:{self.column}"
        place = ".".join(p for p in (self.node_id, self.field) if p)
        return ":".join(p for p in (self.file, place) if p)  # no file: no leading colon

    def __str__(self) -> str:
        return f"{self.where}: {self.severity}: {self.message}"


class InputError(Exception):
    """Bad input (an asset, history, model or template file): carries every problem found."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]


class AssetError(InputError):
    """The asset could not be loaded."""


class BackendError(Exception):
    """Running a model failed in a way a user can act on (a missing model file, a context too large,
    a server that cannot be reached). The conversation is left as it was before the call. It lives
    here, below the backends and the models folder, because both raise it."""
