"""Exit: a named exit of a behaviour.

A behaviour (an asset run by a Subgraph node) ends where it reaches an Exit node: its id is the
name of a port on every Subgraph node that runs the behaviour, and the turn goes on where that
port leads. The node has no exits of its own. In an asset run directly, reaching it ends the turn,
as an END exit does.
"""

from __future__ import annotations

from typing import Literal

from pydantic import PrivateAttr

from runtime.nodes.base import NodeBase
from runtime.nodes.running import NodeRun, TurnError

EXIT_PORT = "default_exit"  # its one exit in an expanded asset (shown as "next")


class Exit(NodeBase):
    type: Literal["Exit"] = "Exit"

    # Set by ``runtime.asset.behaviours.expand`` on the copy an agent runs: where the turn goes on
    # (the Subgraph node's target for this port; END in an asset run directly). None: as in a file.
    _target: str | None = PrivateAttr(None)

    def leading_to(self, target: str) -> Exit:
        """A copy that goes on to ``target`` ('' ends the turn)."""
        copy = self.model_copy()
        copy._target = target
        return copy

    def exits(self) -> dict[str, str]:
        """None in a file (the node ends its graph); in an expanded asset, one exit to its target."""
        return {} if self._target is None else {EXIT_PORT: self._target}

    def exit_field(self, port: str) -> str:
        if port not in self.exits():
            raise KeyError(port)
        return "id"  # where it leads is set by the Subgraph node that runs its behaviour

    def run(self, run: NodeRun) -> str:
        if self._target is None:  # an agent runs expanded assets, where every Exit node has its target
            raise TurnError("the Exit node runs only in an expanded asset (runtime.asset.behaviours.expand)", self.id)
        return EXIT_PORT
