"""Problems found in an asset (or another input file), as a user sees them."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

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


def read_input_text(path: str | os.PathLike[str], error: type[InputError]) -> str:
    """A user's input file as text, or ``error`` naming the file and what is wrong with it."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise error([Problem("error", f"cannot read the file: {exc.strerror or exc}", str(path))]) from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise error([Problem("error", f"not UTF-8 text (byte {exc.start})", str(path))]) from None


def parse_input_json(text: str, source: str, error: type[InputError]) -> Any:
    """JSON text parsed, or ``error`` naming the line and column where it breaks."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error([Problem("error", f"malformed JSON: {exc.msg}", source, line=exc.lineno, column=exc.colno)]) from None
    except RecursionError:
        raise error([Problem("error", "malformed JSON: nested too deeply", source)]) from None
