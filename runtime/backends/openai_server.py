"""Any OpenAI-compatible server (vLLM, llama.cpp's server, llama-cpp-python's server, others) as a
backend, through ``/v1/chat/completions`` with streaming.

What such servers differ in, and what this does about it:

- **The model's name.** ``model`` in the profile, else the only model ``/v1/models`` lists.
- **Context size.** ``context_size`` in the profile, else ``max_model_len`` from ``/v1/models``
  (vLLM), else llama.cpp's ``/props``; otherwise a clear error asking for it in the profile.
- **Token counts for budgets.** The server's own tokenizer where it offers one: vLLM's and
  llama.cpp's ``/tokenize``, llama-cpp-python's ``/extras/tokenize/count``. A server with none
  gets an estimate (4 bytes a token), said in the backend's label and in a warning.
- **Structured output** (classifiers, tool calls, the judge): ``response_format`` with a
  ``json_schema`` (OpenAI, vLLM, llama.cpp), else ``json_object`` with a ``schema``
  (llama-cpp-python); a choice of labels is sent as a JSON schema of one string from the labels.
  A server that accepts neither fails that node with an error saying so; plain replies still work.
- **Prompt reuse.** The server's prefix cache, reported from ``usage.prompt_tokens_details.cached_tokens``
  where the server gives it (vLLM with ``--enable-prompt-tokens-details``); 0 otherwise.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from pathlib import PurePath
from typing import Any, Literal

from runtime.backends.base import (
    Backend,
    ChatMessage,
    GenerationRequest,
    GenerationResult,
    NodeSession,
    TokenCallback,
)
from runtime.backends.http import Cancelled, ServerConnection, ServerRefused, ServerUnavailable
from runtime.problems import BackendError

StructuredOutput = Literal["auto", "json_schema", "json_object", "none"]
BYTES_PER_TOKEN_ESTIMATE = 4


class OpenAIBackend(Backend):
    """Model calls go to ``url`` (with or without its ``/v1``). ``model`` names the served model;
    ``context_size`` says how long its context is when the server does not say."""

    kind = "OpenAI-compatible"

    def __init__(self, url: str, name: str = "", *, api_key: str = "", timeout: float = 120.0, model: str = "",
                 context_size: int = 0, structured_output: StructuredOutput = "auto") -> None:
        root = url.strip().rstrip("/")
        root = root.removesuffix("/v1")
        self.root = ServerConnection(root, name or root, api_key=api_key, timeout=timeout)
        self.api = ServerConnection(root + "/v1", self.root.name, api_key=api_key, timeout=timeout,
                                    shown_url=self.root.url)
        self.wanted_model = model
        self.wanted_context = context_size
        self.structured: StructuredOutput = structured_output
        self._model: str | None = None
        self._context: int | None = None
        self._trained: int | None = None
        self._counter: str | None = None  # which tokenize route works ("" = none: estimate)
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}
        self.warnings: list[str] = []

    # --- what the server is ------------------------------------------------------------------

    def served_model(self) -> str:
        with self._lock:
            if self._model is None:
                self._model, self._context = self._discover()
            return self._model

    def _discover(self) -> tuple[str, int | None]:
        listing = self.api.get_json("/models")
        entries = listing.get("data") if isinstance(listing, dict) else None
        if not isinstance(entries, list):
            raise BackendError(f"{self.root.label}: /v1/models did not list models; is this an OpenAI-compatible "
                               "server?")
        ids = [str(e.get("id")) for e in entries if isinstance(e, dict) and e.get("id")]
        if self.wanted_model:
            if ids and self.wanted_model not in ids:
                raise BackendError(f"{self.root.label} does not serve the model {self.wanted_model!r} that the "
                                   f"profile names; it serves {', '.join(map(repr, ids))}")
            name = self.wanted_model
        elif len(ids) == 1:
            name = ids[0]
        else:
            raise BackendError(f"{self.root.label} serves {len(ids)} models ({', '.join(map(repr, ids)) or 'none'}); "
                               "name one as the profile's model")
        entry = next((e for e in entries if isinstance(e, dict) and e.get("id") == name), {})
        self._trained = (entry.get("meta") or {}).get("n_ctx_train")  # llama.cpp's: slots may be smaller
        context = entry.get("max_model_len")  # vLLM's: what it serves
        return name, int(context) if isinstance(context, int) and context > 0 else None

    def model_context_size(self, model: str) -> int:
        if self.wanted_context:
            return self.wanted_context
        self.served_model()
        if self._context:
            return self._context
        try:  # llama.cpp's server also answers /props with the slots' size
            props = self.root.get_json("/props")
            self._context = int(props["default_generation_settings"]["n_ctx"])
            return self._context
        except (BackendError, KeyError, TypeError, ValueError):
            pass
        if isinstance(self._trained, int) and self._trained > 0:
            self._context = self._trained
            return self._context
        raise BackendError(f"{self.root.label} does not say how long its model's context is; set context_size "
                           "in the backend profile")

    @property
    def label(self) -> str:
        try:
            model = self.served_model()
        except BackendError:
            model = "not reachable"
        estimate = " · token counts estimated" if self._counter == "" else ""
        return f"{self.root.label} · {self.kind} · {PurePath(model).name or model}{estimate}"

    def load_model(self, model: str, progress=None, cancel=None) -> None:
        self.served_model()
        if progress is not None:
            progress(1.0)

    # --- tokens --------------------------------------------------------------------------------

    def count_tokens(self, model: str, text: str) -> int:
        if not text:
            return 0
        cached = self._counts.get(text)
        if cached is not None:
            return cached
        count = self._count(text)
        if len(self._counts) > 20_000:
            self._counts.pop(next(iter(self._counts)))
        self._counts[text] = count
        return count

    def _count(self, text: str) -> int:
        routes = [self._counter] if self._counter is not None else ["vllm", "llama.cpp", "llama-cpp-python"]
        for route in routes:
            if route == "":
                return -(-len(text.encode("utf-8")) // BYTES_PER_TOKEN_ESTIMATE)
            try:
                count = self._count_by(route, text)
            except ServerRefused:
                if self._counter is not None:
                    raise
                continue
            self._counter = route
            return count
        self._counter = ""
        self.warnings.append(f"{self.root.label} offers no tokenizer; prompt budgets use an estimate of "
                             f"{BYTES_PER_TOKEN_ESTIMATE} bytes a token")
        return self._count(text)

    def _count_by(self, route: str, text: str) -> int:
        model = self.served_model()
        if route == "vllm":
            answer = self.root.post_json("/tokenize", {"model": model, "prompt": text, "add_special_tokens": False})
            if isinstance(answer, dict) and isinstance(answer.get("count"), int):
                return answer["count"]
        elif route == "llama.cpp":
            answer = self.root.post_json("/tokenize", {"content": text, "add_special": False, "parse_special": False})
            if isinstance(answer, dict) and isinstance(answer.get("tokens"), list):
                return len(answer["tokens"])
        else:
            answer = self.root.post_json("/extras/tokenize/count", {"input": text, "model": model})
            if isinstance(answer, dict) and isinstance(answer.get("count"), int):
                return answer["count"]
        raise ServerRefused(f"{self.root.label}: {route} tokenize answered in another shape", 0, "")

    # --- sessions ------------------------------------------------------------------------------

    def session(self, key: str, model: str, context_size: int) -> OpenAISession:
        if context_size < 0:
            raise BackendError(f"node {key!r}: Context Size must be 0 (the model's own) or positive, not {context_size}")
        self.served_model()  # the server is there, and serves the profile's model
        limit = self.model_context_size(model)
        if context_size > limit:
            raise BackendError(f"node {key!r}: Context Size {context_size} is larger than {self.root.label}'s model "
                               f"takes ({limit} tokens); lower it, or set 0 to use the model's own")
        return OpenAISession(self, key, context_size or limit)

    def close(self) -> None:
        self.root.close()
        self.api.close()


class OpenAISession(NodeSession):
    """A node's calls; the server's prefix cache (if any) does the reuse."""

    def __init__(self, backend: OpenAIBackend, key: str, n_ctx: int) -> None:
        super().__init__(key, n_ctx)
        self.backend = backend

    def release(self) -> None:
        """Nothing to free here: the server manages its own cache."""

    def generate(self, request: GenerationRequest, on_token: TokenCallback | None = None,
                 cancel: threading.Event | None = None) -> GenerationResult:
        backend = self.backend
        body: dict[str, Any] = {
            "model": backend.served_model(),
            "messages": _messages_json(request.messages),
            "max_tokens": request.max_tokens,
            "temperature": max(request.temperature, 0.0),
            "top_p": request.top_p,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.seed >= 0:
            body["seed"] = request.seed
        stops = [s for s in request.stop if s]
        if stops:
            body["stop"] = stops[:4]  # OpenAI's limit
        schema = None
        if request.choices is not None:
            schema = {"type": "string", "enum": list(dict.fromkeys(request.choices))}
            longest = max(len(json.dumps(c)) for c in request.choices) + 4
            body["max_tokens"] = max(body["max_tokens"], longest)
        elif request.json_schema is not None:
            schema = request.json_schema
        cold = self.calls == 0
        self.calls += 1
        started = time.perf_counter()
        if schema is None:
            return self._run(body, None, request, on_token, cancel, cold, started)
        modes = [backend.structured] if backend.structured != "auto" else ["json_schema", "json_object"]
        if modes == ["none"]:
            raise self._cannot_constrain(request, "the backend profile says it has no structured output")
        refusal = ""
        for mode in modes:
            constrained = dict(body)
            if mode == "json_schema":
                constrained["response_format"] = {"type": "json_schema",
                                                  "json_schema": {"name": "output", "schema": schema, "strict": True}}
            else:
                constrained["response_format"] = {"type": "json_object", "schema": schema}
            try:
                result = self._run(constrained, schema, request, on_token, cancel, cold, started)
            except ServerRefused as exc:
                # llama-cpp-python answers 500 for a request it cannot parse
                about_format = exc.status in (400, 422) or "response_format" in exc.detail
                if not about_format or len(modes) == 1:
                    raise
                refusal = exc.detail
                continue
            if backend.structured == "auto":
                backend.structured = mode  # type: ignore[assignment]  # remembered: the next call goes straight there
            return result
        raise self._cannot_constrain(request, f"it refused response_format json_schema and json_object ({refusal})")

    def _cannot_constrain(self, request: GenerationRequest, why: str) -> BackendError:
        need = "one of its labels" if request.choices is not None else "JSON for a schema"
        return BackendError(f"node {self.key!r} needs its output constrained to {need}, and "
                            f"{self.backend.root.label} cannot do it: {why}. Use a llama.cpp server, vLLM or the "
                            "embedded backend for this agent")

    def _run(self, body: dict[str, Any], schema: Any, request: GenerationRequest, on_token: TokenCallback | None,
             cancel: threading.Event | None, cold: bool, started: float) -> GenerationResult:
        backend = self.backend
        label = backend.root.label
        text, finish, usage = "", None, None
        first_token = None
        stream_tokens = on_token if schema is None or request.json_schema is not None else None
        try:
            for event in backend.api.stream("/chat/completions", body, cancel):
                if not isinstance(event, dict):
                    raise BackendError(f"{label}: /v1/chat/completions sent an event that is not an object")
                if event.get("usage"):
                    usage = event["usage"]
                for choice in event.get("choices") or []:
                    delta = choice.get("delta") or {}
                    piece = delta.get("content") or ""
                    if not isinstance(piece, str):
                        raise BackendError(f"{label}: /v1/chat/completions sent content that is not text")
                    if piece:
                        first_token = first_token or time.perf_counter()
                        text += piece
                        if stream_tokens is not None:
                            stream_tokens(piece)
                    if choice.get("finish_reason"):
                        finish = choice["finish_reason"]
        except Cancelled:
            return GenerationResult(text=text, prompt_tokens=0, reused=0, evaluated=0, generated=0, cold=cold,
                                    cancelled=True, finish_reason="cancelled",
                                    prompt_ms=(time.perf_counter() - started) * 1000)
        if finish is None:
            raise ServerUnavailable(f"{label}: the answer from /v1/chat/completions ended before the reply was "
                               "complete (no finish_reason)")
        if request.choices is not None:
            text = _choice(text, request.choices, label)
            if on_token is not None:
                on_token(text)
        ended = time.perf_counter()
        prompt_tokens = reused = generated = 0
        if isinstance(usage, dict):
            prompt_tokens = int(usage.get("prompt_tokens") or 0)
            generated = int(usage.get("completion_tokens") or 0)
            details = usage.get("prompt_tokens_details") or {}
            reused = int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0
        if not prompt_tokens:  # the server did not say: count as the budget does
            prompt_tokens = sum(backend.count_tokens("", m.content) for m in request.messages)
        if not generated and text:
            generated = backend.count_tokens("", text)
        split = first_token or ended
        return GenerationResult(
            text=text, prompt_tokens=prompt_tokens, reused=min(reused, prompt_tokens),
            evaluated=max(prompt_tokens - reused, 0), generated=generated, cold=cold,
            finish_reason="length" if finish == "length" else "stop",
            prompt_ms=(split - started) * 1000, generate_ms=(ended - split) * 1000,
        )


def _choice(text: str, choices: Sequence[str], label: str) -> str:
    """The label out of a JSON string answer (some servers answer the bare label)."""
    stripped = text.strip()
    try:
        value = json.loads(stripped)
    except ValueError:
        value = stripped
    if isinstance(value, str) and value in choices:
        return value
    raise BackendError(f"{label} answered {text[:200]!r}, which is not one of the labels "
                       f"{', '.join(map(repr, choices))}; its structured output did not hold")


def _messages_json(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """OpenAI's shape: a tool call is an assistant message with ``tool_calls``, and its result a
    ``tool`` message answering that call's id."""
    out: list[dict[str, Any]] = []
    pending: dict[str, str] = {}
    for i, m in enumerate(messages):
        if m.role == "assistant" and m.name:
            call_id = f"call_{i}"
            pending[m.name] = call_id
            try:
                arguments = json.loads(m.content).get("arguments", {})
            except (ValueError, AttributeError):
                arguments = {}
            out.append({"role": "assistant", "content": m.content, "tool_calls": [{
                "id": call_id, "type": "function",
                "function": {"name": m.name, "arguments": json.dumps(arguments, ensure_ascii=False)},
            }]})
        elif m.role == "tool":
            out.append({"role": "tool", "content": m.content, "tool_call_id": pending.pop(m.name, f"call_{i}"),
                        "name": m.name})
        else:
            out.append({"role": m.role, "content": m.content})
    return out
