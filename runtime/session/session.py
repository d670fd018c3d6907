"""A conversation with an agent on a backend, as every door runs it: the one place an agent is made.

From a file it finds the asset's folder (where behaviours, histories and models are looked up), and
the agent it makes expands the behaviours its Subgraph nodes run, so no reader can forget them. It
changes the asset or the backend between turns and keeps the conversation."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from runtime.agent import Agent, TurnResult
from runtime.asset.behaviours import expand
from runtime.asset.file import load_asset
from runtime.asset.model import Asset
from runtime.backends.base import Backend
from runtime.dialogue.tree import keep_nodes
from runtime.names import VariableValue

__all__ = ["Session", "graph_of", "open_graph"]


def graph_of(asset: Asset, folder: str | Path | None, source: str = "", *,
             files: Mapping[str, Asset] | None = None) -> Asset:
    """The graph ``asset`` runs: the behaviours its Subgraph nodes run read from ``folder`` (or only
    from ``files``) and added under namespaced ids (``guard/classify``), as its turns, diagnostics and
    checks name them. Every reader that needs the nodes a turn can reach asks here. Raises
    ``AssetError`` when a behaviour cannot be read."""
    return expand(asset, folder, source, files=files)


def open_graph(path: str | Path, *, model: str = "") -> Asset:
    """The graph the asset file at ``path`` runs (``model``: its default model instead of the file's).
    Raises ``AssetError`` naming the file, or the behaviour that cannot be read."""
    asset = load_asset(path)
    if model:
        asset = asset.model_copy(update={"default_model": model})
    return graph_of(asset, Path(path).parent, str(path))


class Session:
    """An agent on a backend, one turn at a time. ``agent`` is the conversation itself (history,
    variables, the tree of alternatives); ``folder`` is where the asset's relative files are."""

    def __init__(self, asset: Asset, backend: Backend, folder: str | Path | None = None, *, session_id: str = "",
                 variables: Mapping[str, VariableValue] | None = None) -> None:
        """Raises ``AssetError`` when a behaviour the asset runs cannot be read from ``folder``."""
        self.folder = str(folder) if folder else None
        self.agent = Agent(asset, backend, self.folder, session_id=session_id)
        for name, value in (variables or {}).items():
            self.agent.set_variable(name, value)

    @classmethod
    def open(cls, path: str | Path, backend: Backend, *, session_id: str = "",
             variables: Mapping[str, VariableValue] | None = None) -> Session:
        """A session on the asset file at ``path``, its folder the file's. Raises ``AssetError`` naming
        the file when it does not load."""
        return cls(load_asset(path), backend, Path(path).resolve().parent, session_id=session_id, variables=variables)

    @property
    def backend(self) -> Backend:
        return self.agent.backend

    def turn(self, line: str, instructions: str = "", **run: Any) -> TurnResult:
        """Run one turn (``Agent.run_turn``'s arguments: on_event, cancel, tool_result)."""
        return self.agent.run_turn(line, instructions, **run)

    def warm(self, line: str = "", cancel: threading.Event | None = None) -> dict[str, int]:
        """Read ahead between turns, while the player reads or types (``Agent.warm``)."""
        return self.agent.warm(line, cancel)

    def use_asset(self, asset: Asset, folder: str | Path | None, *, backend: Backend | None = None,
                  keep_conversation: bool = True) -> None:
        """Run the next turns on ``asset`` (an edited graph; on ``backend`` when given). The conversation
        stays, less what belonged to nodes it no longer has; variables changed in the conversation stay,
        the rest follow the asset. Raises ``AssetError`` (and changes nothing) when a behaviour it runs
        cannot be read."""
        old = self.agent
        folder = str(folder) if folder else None
        agent = Agent(asset, backend or old.backend, folder, session_id=old.session_id)
        if keep_conversation:
            # A deleted node's window starts and system prompts go, from every state of the tree
            # (filtering only the current state left the tree naming it, and the import refused it).
            # The agent's own ids: its behaviours' nodes (guard/classify) keep theirs.
            agent.import_dialog(keep_nodes(old.export_dialog(), agent.asset.node_ids()), foreign=False)
            changed = {k: v for k, v in old.variables.items() if old.asset.variables.get(k, object()) != v}
            agent.variables = {**agent.asset.variables, **changed}
        self.agent, self.folder = agent, folder

    def use_backend(self, backend: Backend) -> None:
        """Run the next turns on ``backend``, with the same conversation and variables. The old backend
        is the caller's to close."""
        old = self.agent
        agent = Agent(old.source_asset, backend, self.folder, session_id=old.session_id)
        agent.import_dialog(old.export_dialog(), foreign=False)
        agent.variables = dict(old.variables)
        self.agent = agent
