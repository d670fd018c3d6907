"""A deterministic in-process backend, for exact prompt, budget and cache arithmetic in tests.

- A token is a whitespace-separated word: ``count_tokens`` is ``len(text.split())``.
- A message renders as 4 header tokens, its words, then 4 end tokens, so a prompt's
  exact length is the budget's arithmetic (tokens plus 8 per message) and tests can
  check numbers by hand.
- Each node's session keeps the tokens its KV cache holds and reuses the longest common
  prefix with the next prompt, so ``reused`` and ``evaluated`` are real.
- Replies come from ``reply(key, request)`` when given; otherwise they are built from
  the request so they are the same every run. ``choices`` and ``json_schema`` are honoured.
"""

from __future__ import annotations

import json
import re
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable
from typing import Any

from runtime.backends.base import (
    Backend,
    ChatMessage,
    GenerationRequest,
    GenerationResult,
    NodeSession,
    Reproducibility,
    TokenCallback,
)
from runtime.problems import BackendError

ReplyFunction = Callable[[str, GenerationRequest], str]
EMBEDDING_SIZE = 64


def render_tokens(messages: list[ChatMessage]) -> list[str]:
    """The prompt as this backend's "chat template" renders it, one string per token."""
    tokens: list[str] = []
    for m in messages:
        tokens += ["<|start|>", m.role, m.name or "-", "<|sep|>"]
        tokens += m.content.split()
        tokens += ["<|end|>", "<|nl|>", "<|pad|>", "<|pad|>"]
    return tokens


def _hint_words(request: GenerationRequest) -> list[str]:
    for m in reversed(request.messages):
        if m.role == "user":
            return re.findall(r"\w+", m.content.lower())
    return []


def _mentioned(options: list[Any], hint: list[str]) -> Any | None:
    text = " ".join(hint)
    for option in options:
        if isinstance(option, str) and option.lower().replace("_", " ") in text:
            return option
        if isinstance(option, str) and option.lower() in hint:
            return option
    return None


def example_for_schema(schema: Any, hint: list[str]) -> Any:
    """A value valid for the (simple) JSON Schema, chosen from words the user wrote where it can.
    A schema this cannot read (not an object, an empty enum, a type that is not a name) gives None
    rather than an error: the reply is made up, not checked."""
    if not isinstance(schema, dict):
        return None
    if "const" in schema:
        return schema["const"]
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        found = _mentioned(enum, hint)
        return found if found is not None else enum[0]
    for key in ("oneOf", "anyOf"):
        options = schema.get(key)
        branches = [b for b in options if isinstance(b, dict)] if isinstance(options, list) else []
        if branches:
            for branch in branches:
                properties = branch.get("properties")
                values = properties.values() if isinstance(properties, dict) else ()
                consts = [p.get("const") for p in values if isinstance(p, dict)]
                if _mentioned([c for c in consts if c is not None], hint) is not None:
                    return example_for_schema(branch, hint)
            return example_for_schema(branches[0], hint)
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = kind[0] if kind else "object"
    if kind == "object":
        properties = schema.get("properties")
        if not isinstance(properties, dict):
            return {}
        return {name: example_for_schema(sub, hint) for name, sub in properties.items()}
    if kind == "string":
        return hint[-1] if hint else "something"
    if kind == "integer":
        return len(hint)
    if kind == "number":
        return float(len(hint))
    if kind == "boolean":
        return True
    if kind == "array":
        return []
    return None


def default_reply(key: str, request: GenerationRequest) -> str:
    """Short, deterministic and different per node and per line."""
    if request.choices:
        found = _mentioned(request.choices, _hint_words(request))
        return found if found is not None else request.choices[-1]
    if request.json_schema is not None:
        return json.dumps(example_for_schema(request.json_schema, _hint_words(request)))
    last = next((m.content for m in reversed(request.messages) if m.role in ("user", "tool")), "")
    return f"{key} heard: " + " ".join(last.split()[-8:])


CALLS_KEPT = 2_000  # requests a scripted backend remembers (``calls``)

class ScriptedSession(NodeSession):
    def __init__(self, backend: ScriptedBackend, key: str, model: str, n_ctx: int) -> None:
        super().__init__(key, n_ctx)
        self._backend = backend
        self.model = model
        self.cache: list[str] | None = None  # None: released (the next call is cold)

    def release(self) -> None:
        self.cache = None

    def generate(self, request: GenerationRequest, on_token: TokenCallback | None = None,
                 cancel: threading.Event | None = None) -> GenerationResult:
        started = time.perf_counter()
        prompt = render_tokens(request.messages)
        if len(prompt) >= self._n_ctx:
            raise BackendError(
                f"node {self.key!r}: the prompt ({len(prompt)} tokens) does not fit its context of {self._n_ctx} tokens"
            )
        cold = self.cache is None
        cached = self.cache or []
        common = 0
        for a, b in zip(cached, prompt):
            if a != b:
                break
            common += 1
        # Like llama.cpp: at least one prompt token is read again, to get the next token's logits.
        reused = min(common, len(prompt) - 1)
        self.cache = prompt[:]
        prompt_ms = (time.perf_counter() - started) * 1000

        text = self._backend.reply_for(self.key, request)
        self._backend.check_constraints(self.key, request, text)
        words = text.split()
        room = min(request.max_tokens, self._n_ctx - len(prompt))
        finish: str = "stop"
        if len(words) > room:
            words, finish = words[:room], "length"
        produced: list[str] = []
        cancelled = False
        for word in words:
            if cancel is not None and cancel.is_set():
                cancelled, finish = True, "cancelled"
                break
            produced.append(word)
            if on_token is not None:
                on_token(word if len(produced) == 1 else " " + word)
        self.cache += produced
        self._backend.calls.append((self.key, request))
        return GenerationResult(
            text=" ".join(produced),
            prompt_tokens=len(prompt),
            reused=reused,
            evaluated=len(prompt) - reused,
            generated=len(produced),
            cold=cold,
            cancelled=cancelled,
            finish_reason=finish,  # type: ignore[arg-type]
            prompt_ms=prompt_ms,
            generate_ms=(time.perf_counter() - started) * 1000 - prompt_ms,
        )


class ScriptedBackend(Backend):
    """Deterministic backend. ``reply(key, request)`` writes replies (``key`` is the node id)."""

    label = "scripted (deterministic test replies)"

    def reproducibility(self) -> Reproducibility:
        return Reproducibility(True, True, "scripted replies are the same every time")

    def __init__(self, reply: ReplyFunction | None = None, context_size: int = 4096) -> None:
        self._reply = reply or default_reply
        self._context_size = context_size
        self._sessions: dict[str, ScriptedSession] = {}
        # the latest requests, in order (what tests look at); bounded, or `parley serve --backend scripted`
        # kept every request it was ever sent
        self.calls: deque[tuple[str, GenerationRequest]] = deque(maxlen=CALLS_KEPT)

    def count_tokens(self, model: str, text: str) -> int:
        return len(text.split())

    def model_context_size(self, model: str) -> int:
        return self._context_size

    def session(self, key: str, model: str, context_size: int) -> ScriptedSession:
        n_ctx = context_size or self._context_size
        existing = self._sessions.get(key)
        if existing is None or existing.model != model or existing.n_ctx != n_ctx:
            existing = self._sessions[key] = ScriptedSession(self, key, model, n_ctx)
        return existing

    def embed(self, model: str, texts: list[str]) -> list[list[float]]:
        """Bag-of-words vectors hashed into a fixed size: similar words, similar vectors."""
        vectors = []
        for text in texts:
            vector = [0.0] * EMBEDDING_SIZE
            for word in re.findall(r"\w+", text.lower()):
                vector[zlib.crc32(word.encode()) % EMBEDDING_SIZE] += 1.0
            vectors.append(vector)
        return vectors

    def sessions(self) -> dict[str, ScriptedSession]:
        return dict(self._sessions)

    def release(self, key: str) -> None:
        """Forget one node's session (a deleted NPC's): its next call, if any, starts cold. Kept, they
        grew ``parley serve --backend scripted`` by about 59 KB every create, turn and delete."""
        self._sessions.pop(key, None)

    def release_all(self) -> None:
        for s in self._sessions.values():
            s.release()

    def close(self) -> None:
        self._sessions.clear()

    def reply_for(self, key: str, request: GenerationRequest) -> str:
        return self._reply(key, request)

    def check_constraints(self, key: str, request: GenerationRequest, text: str) -> None:
        """A constrained request's output obeys its constraint, as a grammar would make it."""
        if request.choices is not None and text not in request.choices:
            raise BackendError(f"node {key!r}: scripted reply {text!r} is not one of the choices {request.choices}")
        if request.json_schema is not None:
            try:
                json.loads(text)
            except json.JSONDecodeError:
                raise BackendError(f"node {key!r}: scripted reply is not JSON, but the request asked for JSON") from None
