"""Problems found in an asset (or another input file), as a user sees them."""

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
        return f"{self.file}:{place}" if place else self.file

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
