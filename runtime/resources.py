"""Where the shipped resources (examples, schemas, default prompts, icons) live.

In a source checkout they sit in ``resources/`` beside the packages; in the frozen
app PyInstaller puts them under ``sys._MEIPASS/resources``.
"""

from __future__ import annotations

import sys
from functools import cache
from pathlib import Path


@cache
def resources_dir() -> Path:
    frozen = getattr(sys, "_MEIPASS", None)
    if frozen:
        return Path(frozen) / "resources"
    return Path(__file__).resolve().parent.parent / "resources"


def examples_dir() -> Path:
    return resources_dir() / "examples"


def schemas_dir() -> Path:
    return resources_dir() / "schemas"


@cache
def default_prompt(name: str) -> str:
    """The text of ``resources/prompts/<name>.txt`` (a built-in default prompt)."""
    return (resources_dir() / "prompts" / f"{name}.txt").read_text(encoding="utf-8")
