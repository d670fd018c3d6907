"""Subgraph: runs another asset file, a "behaviour", as one step of this graph.

The node names the behaviour's file (``behaviour``, relative to this asset's folder) and where each
of the behaviour's exits leads here (``exits``: port -> node id, '' ends the turn). The behaviour's
ports are its Exit nodes, in file order, then ``next`` when one of its exits ends the turn
(``runtime.asset.behaviours.behaviour_ports``).

An agent never runs the node as the file holds it: ``runtime.asset.behaviours.expand`` adds the
behaviour's nodes under ids namespaced by this node (``guard/classify``) and gives this node one
exit, ``enter``, to the behaviour's start node; the behaviour's Exit nodes lead on to ``exits``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, PrivateAttr

from runtime.nodes.base import NodeBase, Strict, field_help
from runtime.nodes.checks import NodeChecks
from runtime.nodes.running import NodeRun, TurnError

ENTER_PORT = "enter"  # the one exit of a Subgraph node in an expanded asset: into its behaviour
END_PORT = "next"  # the port the behaviour's END exits become


class Subgraph(NodeBase):
    # ``exits`` is the name in files; the attribute is ``exit_targets``, since ``exits()`` is the
    # method every node type answers.
    model_config = ConfigDict(**Strict.model_config, serialize_by_alias=True)

    type: Literal["Subgraph"] = "Subgraph"
    behaviour: str = Field("", **field_help(
        "The behaviour this node runs: an asset file, relative to this asset's folder "
        "(behaviours/guard_threats.json). Its nodes run here as guard/classify, ... and share this "
        "agent's history, variables and slots."))
    exit_targets: dict[str, str] = Field(default_factory=dict, alias="exits", **field_help(
        "Where each of the behaviour's exits leads: its Exit nodes, then 'next' for its exits that end "
        "the turn. Empty ends the turn.", "Exits"))

    # Set by ``runtime.asset.behaviours.expand`` on the copy an agent runs: its behaviour's start
    # node, and the folder of the behaviour's file (its nodes' relative paths are read from there).
    _entry: str = PrivateAttr("")
    _folder: str = PrivateAttr("")

    @property
    def expanded(self) -> bool:
        """Whether this is the node of an expanded asset (its behaviour's nodes are in the graph)."""
        return bool(self._entry)

    @property
    def behaviour_folder(self) -> str:
        """In an expanded asset, the folder of the behaviour's file ('' otherwise)."""
        return self._folder

    def entered(self, entry: str, folder: str) -> Subgraph:
        """A copy that runs through to ``entry`` (its behaviour's namespaced start node), its behaviour
        read from ``folder``."""
        copy = self.model_copy()
        copy._entry, copy._folder = entry, folder
        return copy

    def exits(self) -> dict[str, str]:
        """The behaviour's ports -> node ids, in the order stored (the editor keeps the behaviour's
        port order); in an expanded asset, ``enter`` -> the behaviour's start node."""
        if self._entry:
            return {ENTER_PORT: self._entry}
        return dict(self.exit_targets)

    def exit_field(self, port: str) -> str:
        if self._entry and port == ENTER_PORT:
            return "behaviour"
        if port not in self.exit_targets:
            raise KeyError(port)
        return f"exits.{port}"

    def exit_label(self, port: str) -> str:
        return port

    def run(self, run: NodeRun) -> str:
        if not self._entry:
            raise TurnError("the Subgraph node runs only in an agent that loaded its behaviour "
                            "(runtime.asset.behaviours.expand)", self.id, "behaviour")
        run.diag.output = self.behaviour
        return ENTER_PORT

    def check(self, checks: NodeChecks) -> None:
        # The file itself (missing, a cycle, its problems, its ports) is checked by
        # runtime.asset.validation, which reads it on every validation.
        if not self.behaviour.strip():
            checks.error("no behaviour: choose the asset file this node runs", "behaviour")
