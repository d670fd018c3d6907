"""Assets, scripted replies and player lines shared by the runtime's conversation tests."""

from __future__ import annotations

import random
import zlib
from typing import Any

from runtime.asset.model import Asset, new_node
from runtime.backends.base import GenerationRequest
from runtime.backends.scripted import ScriptedBackend, default_reply
from runtime.diagnostics import NodeDiagnostics, TurnDiagnostics

MODEL = "test-model.gguf"


def asset(*nodes, start: str = "", **fields: Any) -> Asset:
    built = [new_node(type_name, node_id, **params) for type_name, node_id, params in nodes]
    return Asset(default_model=MODEL, start_node=start or built[0].id, nodes=built, **fields)


def words(n: int, tag: str) -> str:
    """``n`` distinct, countable words (the scripted backend counts a word as a token)."""
    return " ".join(f"{tag}{i}" for i in range(n))


def player_lines(count: int, seed: int = 1, low: int = 10, high: int = 60) -> list[str]:
    rng = random.Random(seed)
    return [words(rng.randint(low, high), f"p{t}w") for t in range(count)]


def sized_replies(sizes: dict[str, int] | None = None, default: int = 40):
    """A reply function writing ``sizes[node]`` words, tagged by the node and the line it answers
    (so replies are unique and the same on every run); constrained requests get the scripted
    backend's own answers."""

    def reply(key: str, request: GenerationRequest) -> str:
        if request.choices or request.json_schema is not None:
            return default_reply(key, request)
        last = next((m.content for m in reversed(request.messages) if m.role == "user"), "")
        tag = zlib.crc32(f"{key}/{last}".encode()) % 1_000_000
        return words((sizes or {}).get(key, default), f"{key}{tag}r")

    return reply


def backend(sizes: dict[str, int] | None = None, default: int = 40, context_size: int = 4096) -> ScriptedBackend:
    return ScriptedBackend(sized_replies(sizes, default), context_size=context_size)


def node_diag(diagnostics: TurnDiagnostics, node_id: str) -> NodeDiagnostics:
    return next(n for n in diagnostics.nodes if n.node == node_id)


def prompt_of(diagnostics: TurnDiagnostics, node_id: str) -> list[tuple[str, str, str]]:
    return [(m.role, m.content, m.name) for m in node_diag(diagnostics, node_id).input.prompt]
