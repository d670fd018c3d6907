"""Answers to a Tool Call node's calls that no one is asked for: scripted ones (a suite case's
``tool_results``) and recorded ones (a replayed turn's). A door that asks someone (the designer in the
editor, the player at ``parley chat``, a game through ``parley serve``) passes its own function."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from runtime.dialogue.history import ToolExchange, Turn
from runtime.nodes.base import NodeBase
from runtime.nodes.running import ToolResultFunction, TurnError
from runtime.problems import InputError, Problem


def scripted_answers(results: Mapping[str, str]) -> ToolResultFunction:
    """Answers each call of a tool with ``results[tool]``; a tool with no result fails the turn naming it."""

    def answer(node_id: str, tool: str, arguments: dict[str, Any]) -> str:
        if tool not in results:
            raise InputError([Problem("error", f"the model called {tool!r}, which has no mock_result; give the case "
                                      f"tool_results: {{{tool}: ...}}", node_id=node_id, field="tools")])
        return results[tool]

    return answer


def case_answers(nodes: Iterable[NodeBase], results: Mapping[str, str]) -> ToolResultFunction:
    """Answers each call with ``results[tool]`` when given (the game's answer in this case, over a
    tool's mock_result), else with the calling node's mock_result for the tool; a tool with neither
    fails the turn naming it. Run the turn with ``mock_tools=False`` so mocked tools are asked too."""
    mocks = {(node.id, tool.name): tool.mock_result for node in nodes for tool in getattr(node, "tools", [])
             if getattr(tool, "mock_result", None) is not None}
    scripted = scripted_answers(results)

    def answer(node_id: str, tool: str, arguments: dict[str, Any]) -> str:
        if tool not in results and (node_id, tool) in mocks:
            return mocks[node_id, tool]
        return scripted(node_id, tool, arguments)

    return answer


def recorded_answers(turn: Turn) -> ToolResultFunction:
    """Answers a tool call with the recorded result of the same node's call of the same tool, in order."""
    pending = [(e.node, e.tool, e.result) for e in turn.entries if isinstance(e, ToolExchange)]

    def answer(node_id: str, tool: str, arguments: dict[str, Any]) -> str:
        for i, (node, name, result) in enumerate(pending):
            if (node, name) == (node_id, tool):
                del pending[i]
                return result
        raise TurnError(f"the replay called {tool} with {arguments}, and the recorded turn has no result for that "
                        "call", node_id)

    return answer
