"""The names an asset and a history file share: node ids, slot and variable names, variable values.

A leaf module (it imports nothing of the runtime), so the history and the node types can both use it.
"""

from __future__ import annotations

ID_PATTERN = r"^[A-Za-z_][A-Za-z0-9_\-]*$"
SLOT_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
OPTIONAL_SLOT_PATTERN = r"^([A-Za-z_][A-Za-z0-9_]*)?$"

VariableValue = bool | int | float | str
