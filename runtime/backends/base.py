"""The backend interface: what the runtime needs from a model engine.

The runtime builds prompts as lists of ``ChatMessage``; a backend counts tokens
with the model's own tokenizer, renders the model's chat template, keeps one KV
cache per node (a ``NodeSession``), reuses the longest common prefix of what that
cache holds, and generates with streaming and cancellation.

Four backends implement it: ``runtime.backends.scripted`` (deterministic, for
exact prompt and trimming arithmetic in tests), ``runtime.backends.llama``
(llama.cpp through llama-cpp-python), ``runtime.backends.llama_server`` (llama.cpp's
server) and ``runtime.backends.openai_server`` (any OpenAI-compatible server).
"""

from __future__ import annotations

import contextlib
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from runtime.models.journal import DecodeJournal

Role = Literal["system", "user", "assistant", "tool"]

# How many recent tokens a repeat penalty looks back over (llama.cpp's own default), on every backend.
REPEAT_LAST_N = 64


@dataclass(frozen=True)
class ChatMessage:
    role: Role
    content: str
    # For role "tool": the tool's name. For an assistant tool call: the tool called.
    name: str = ""


@dataclass
class GenerationRequest:
    messages: list[ChatMessage]
    max_tokens: int
    temperature: float = 0.7
    top_p: float = 0.95
    min_p: float = 0.05  # 0: off; only with a temperature above 0
    repeat_penalty: float = 1.0  # 1.0: off; over the last REPEAT_LAST_N tokens
    seed: int = -1
    # Constraints (the llama backend turns them into a grammar):
    choices: list[str] | None = None  # the output is exactly one of these strings
    json_schema: dict[str, Any] | None = None  # the output is JSON valid for this schema
    stop: list[str] = field(default_factory=list)
    # What the node's cache held at this point of its conversation (None: whatever it holds now). A
    # backend that keeps its own cache rebuilds exactly this before reading, so a call made again at
    # the same point (a regenerated, rewound or replayed turn, a cold process) reads the same way.
    journal: DecodeJournal | None = None
    # The conversation the call belongs to (``Agent.session_id``; "" in the editor): a server backend
    # sends it as ``X-Session-ID`` and the ``user`` field, so a router with session affinity keeps a
    # conversation on the server that caches its prompts.
    session_id: str = ""


@dataclass
class GenerationResult:
    text: str
    prompt_tokens: int  # the rendered prompt's exact length in tokens
    reused: int  # prompt tokens kept from the node's KV cache
    evaluated: int  # prompt tokens the model had to read
    generated: int  # tokens generated
    cold: bool = False  # the node's context had to be (re)created for this call
    cancelled: bool = False
    finish_reason: Literal["stop", "length", "cancelled"] = "stop"
    prompt_ms: float = 0.0
    generate_ms: float = 0.0
    warnings: list[str] = field(default_factory=list)  # for the node's diagnostics (a remote model that differs, ...)
    journal: DecodeJournal | None = None  # what the node's cache holds after the call (None: not tracked)


TokenCallback = Callable[[str], None]
# Model loading: called with fractions from 0.0 to 1.0, in increasing order, the last one 1.0.
LoadProgress = Callable[[float], None]


class NodeSession(ABC):
    """One node's context (its KV cache) over a loaded model. Never used from two threads at once.
    ``key`` is the node's id; ``n_ctx`` is how many tokens the context holds."""

    def __init__(self, key: str, n_ctx: int) -> None:
        self.key = key
        self._n_ctx = n_ctx
        self.calls = 0  # generate calls so far (a remote session's first one is cold)

    @abstractmethod
    def generate(
        self,
        request: GenerationRequest,
        on_token: TokenCallback | None = None,
        cancel: threading.Event | None = None,
    ) -> GenerationResult: ...

    def read_ahead(self, journal: DecodeJournal, messages: list[ChatMessage],
                   cancel: threading.Event | None = None) -> DecodeJournal | None:
        """Read ``messages`` into the cache, up to the end of the last one's content, before the call
        whose prompt goes on from them (no output): the cache first rebuilt to ``journal``, as for a
        call. Returns the journal after (as far as it got, if ``cancel`` was set), or None where there
        is no cache to read ahead into (a server's, a scripted backend)."""
        return None

    @property
    def n_ctx(self) -> int:
        return self._n_ctx

    @abstractmethod
    def release(self) -> None:
        """Free the KV cache; the next call rebuilds it (and reports ``cold``)."""


@dataclass(frozen=True)
class Reproducibility:
    """What a backend promises when a call is made again at the same point of a conversation (a
    regenerated, rewound, edited or replayed turn, a cold process) with the same seed."""

    exact: bool  # the same numbers, so the same reply, bit for bit
    across_threads: bool  # ... also at another thread count
    note: str  # in the designer's words, for the Turn Inspector, replays and ``parley doctor``


class CallCancelled(Exception):
    """A backend call stopped because the turn's cancel event was set (the agent makes it a
    ``TurnCancelled``)."""


class Backend(ABC):
    #: What runs the model calls, as the Conversation dock and diagnostics name it.
    label: str = "embedded (llama.cpp on this computer)"

    def reproducibility(self) -> Reproducibility:
        """Whether a reply that changed on a replay can be numerics rather than the graph."""
        return Reproducibility(False, False, f"{self.label} does not say whether it repeats itself: a replayed "
                               "reply may change with the same graph and seed")

    def stopping(self, cancel: threading.Event) -> contextlib.AbstractContextManager[None]:
        """A context the agent runs a whole turn in, so every call made inside it (token counts
        as well as generation) stops with ``CallCancelled`` once ``cancel`` is set. The embedded
        backend checks ``cancel`` as it generates, and needs nothing here."""
        return contextlib.nullcontext()

    @abstractmethod
    def count_tokens(self, model: str, text: str) -> int:
        """Tokens in ``text`` by the model's own tokenizer (no special tokens added)."""

    @abstractmethod
    def model_context_size(self, model: str) -> int:
        """The context length the model was trained with."""

    @abstractmethod
    def session(self, key: str, model: str, context_size: int) -> NodeSession:
        """The session for ``key`` (a node id), created on first use. ``context_size`` 0 means the model's own."""

    def load_model(
        self, model: str, progress: LoadProgress | None = None, cancel: threading.Event | None = None
    ) -> None:
        """Load ``model``'s weights now, before the first turn needs them (once per model file).
        ``progress`` hears how far the load is; setting ``cancel`` stops it with a BackendError.
        Backends without weights to load only check the model and report 1.0."""
        self.model_context_size(model)
        if progress is not None:
            progress(1.0)

    def set_asset_dir(self, asset_dir: str | os.PathLike[str] | None) -> None:
        """Resolve relative model names next to this folder (the open asset's) from now on.
        Backends that take model names as they are ignore it."""

    def model_path(self, model: str) -> Path | None:
        """The file ``model`` resolves to, or None for backends without model files. Raises
        ``BackendError`` (a ``ModelNotFound`` for a missing file)."""
        return None

    def loaded_models(self) -> list[Path]:
        """The model files whose weights are loaded now (loading them again costs nothing)."""
        return []

    def release_all(self) -> None:
        """Free every node's KV cache (kept loaded weights)."""

    def close(self) -> None:
        """Free everything."""
