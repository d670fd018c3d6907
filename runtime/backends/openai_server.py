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
- **Sessions.** A call for a conversation with an id sends it as ``user`` (OpenAI's field for who
  asks) and ``X-Session-ID``, for a router with session affinity; calls of several conversations
  go out at once (nothing here is locked across a request).
- **Prompt reuse.** The server's prefix cache, reported from ``usage.prompt_tokens_details.cached_tokens``
  where the server gives it (vLLM with ``--enable-prompt-tokens-details``); 0 otherwise.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Sequence
from contextlib import closing
from pathlib import PurePath
from typing import Any, Literal

from runtime.backends.base import (
    Backend,
    ChatMessage,
    GenerationRequest,
    GenerationResult,
    Reproducibility,
    TokenCallback,
)
from runtime.backends.http import (
    Cancelled,
    ServerConnection,
    ServerRefused,
    ServerSession,
    ServerUnavailable,
    cancel_scope,
    current_session_key,
)
from runtime.backends.server_answers import (
    MAX_CONTEXT_TOKENS,
    MAX_MODEL_NAME_CHARS,
    MAX_TOKEN_BYTES,
    ChatChunk,
    ModelList,
    Props,
    TokenCount,
    TokenIds,
    Usage,
    clamped,
    read_answer,
)
from runtime.problems import BackendError

StructuredOutput = Literal["auto", "json_schema", "json_object", "none"]
BYTES_PER_TOKEN_ESTIMATE = 4
TOKEN_COUNT_CACHE_SIZE = 20_000  # texts whose token counts are kept
MODELS_LISTED = 10  # model names an error lists of those a server serves
# What a replay can promise here (``OpenAIBackend.reproducibility``): nothing this backend can ask for.
UNKNOWN_REPLAYS_NOTE = (
    "an OpenAI-compatible server does not say how it batches and caches prompts, so whether a replayed call "
    "reads the same numbers is not known, and the API has no request option that makes it exact: there is no "
    "exact alternative to offer (parley doctor measures what this server did, which promises nothing)")


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
        self._counts_lock = threading.Lock()  # several conversations count tokens at once
        self.warnings: list[str] = []

    # --- what the server is ------------------------------------------------------------------

    def served_model(self) -> str:
        with self._lock:
            if self._model is None:
                self._model, self._context = self._discover()
            return self._model

    def _discover(self) -> tuple[str, int | None]:
        entries = read_answer(ModelList, self.api.get_json("/models"), self.root, "/v1/models",
                              hint="is this an OpenAI-compatible server?").data
        ids = [e.id for e in entries if e.id]
        if self.wanted_model:
            if ids and self.wanted_model not in ids:
                raise BackendError(f"{self.root.label} does not serve the model {self.wanted_model!r} that the "
                                   f"profile names; it serves {self._listed(ids)}")
            name = self.wanted_model
        elif len(ids) == 1:
            name = ids[0]
        else:
            raise BackendError(f"{self.root.label} serves {len(ids)} models ({self._listed(ids) or 'none'}); "
                               "name one as the profile's model")
        entry = next((e for e in entries if e.id == name), None)
        if entry is None:
            return name, None
        self._trained = entry.meta.n_ctx_train if entry.meta is not None else None  # llama.cpp's: slots may be smaller
        return name, entry.max_model_len  # vLLM's: what it serves

    def _listed(self, ids: list[str]) -> str:
        """Model names as messages show them (the first :data:`MODELS_LISTED`, each quoted)."""
        shown = ", ".join(self.root.quoted(i, MAX_MODEL_NAME_CHARS) for i in ids[:MODELS_LISTED])
        return shown + (f" and {len(ids) - MODELS_LISTED} more" if len(ids) > MODELS_LISTED else "")

    def model_context_size(self, model: str) -> int:
        if self.wanted_context:
            return self.wanted_context
        self.served_model()
        if self._context:
            return self._context
        try:  # llama.cpp's server also answers /props with the slots' size
            props = self.root.get_json("/props")
        except BackendError:
            props = None
        if isinstance(props, dict) and "default_generation_settings" in props:  # a llama.cpp server's
            self._context = read_answer(Props, props, self.root, "/props").default_generation_settings.n_ctx
            return self._context
        if self._trained:
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
        shown = self.root.redacted(PurePath(model).name or model, MAX_MODEL_NAME_CHARS)  # the server's text
        return f"{self.root.label} · {self.kind} · {shown}{estimate}"

    def reproducibility(self) -> Reproducibility:
        return Reproducibility(False, False, UNKNOWN_REPLAYS_NOTE)

    def load_model(self, model: str, progress=None, cancel=None) -> None:
        self.served_model()
        if progress is not None:
            progress(1.0)

    # --- tokens --------------------------------------------------------------------------------

    def stopping(self, cancel: threading.Event) -> contextlib.AbstractContextManager[None]:
        return cancel_scope(cancel)  # Stop ends the token counts and template requests of a turn too

    def count_tokens(self, model: str, text: str) -> int:
        if not text:
            return 0
        with self._counts_lock:
            cached = self._counts.get(text)
        if cached is not None:
            return cached
        count = self._count(text)  # (not under the lock: the other conversations' counts go on meanwhile)
        with self._counts_lock:
            if len(self._counts) > TOKEN_COUNT_CACHE_SIZE:
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
        root, text_is = self.root, {"text": text}
        if route == "vllm":
            answer = self.root.post_json("/tokenize", {"model": model, "prompt": text, "add_special_tokens": False})
            if isinstance(answer, dict) and "count" in answer:
                return read_answer(TokenCount, answer, root, "/tokenize", context=text_is).count
        elif route == "llama.cpp":
            answer = self.root.post_json("/tokenize", {"content": text, "add_special": False, "parse_special": False})
            if isinstance(answer, dict) and "tokens" in answer:
                return len(read_answer(TokenIds, answer, root, "/tokenize", context=text_is).tokens)
        else:
            answer = self.root.post_json("/extras/tokenize/count", {"input": text, "model": model})
            if isinstance(answer, dict) and "count" in answer:
                return read_answer(TokenCount, answer, root, "/extras/tokenize/count", context=text_is).count
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


class OpenAISession(ServerSession):
    """A node's calls; the server's prefix cache (if any) does the reuse."""

    def __init__(self, backend: OpenAIBackend, key: str, n_ctx: int) -> None:
        super().__init__(key, n_ctx)
        self.backend = backend

    def release(self) -> None:
        """Nothing to free here: the server manages its own cache."""

    def _generate(self, request: GenerationRequest, on_token: TokenCallback | None,
                  cancel: threading.Event | None) -> GenerationResult:
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
        # Not OpenAI's own parameters (its frequency/presence penalties are additive, not llama.cpp's
        # multiplicative one), so sent only when the node uses them: vLLM reads min_p and
        # repetition_penalty, llama.cpp's and llama-cpp-python's servers min_p and repeat_penalty,
        # and each ignores the other's name. OpenAI's own API refuses them: there set min_p 0 and
        # repeat_penalty 1.
        if request.min_p > 0:
            body["min_p"] = request.min_p
        if request.repeat_penalty != 1.0:
            body["repetition_penalty"] = body["repeat_penalty"] = request.repeat_penalty
        session = current_session_key()
        if session:
            body["user"] = session
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
        limit, generated, size, cut = body["max_tokens"], 0, 0, False
        stream_tokens = on_token if schema is None or request.json_schema is not None else None
        try:
            with closing(backend.api.stream("/chat/completions", body, cancel)) as events:
                for answer in events:
                    event = read_answer(ChatChunk, answer, backend.root, "/v1/chat/completions")
                    if event.usage is not None:
                        usage = event.usage
                    for choice in event.choices or []:
                        piece = choice.delta.content if choice.delta is not None else None
                        if piece:
                            generated += 1  # a chunk carries a token (or more: then this counts fewer)
                            size += len(piece.encode("utf-8", errors="surrogatepass"))
                            if generated > limit or size > limit * MAX_TOKEN_BYTES:
                                cut = True  # a server that streams past max_tokens: the reply ends at the limit
                                break
                            first_token = first_token or time.perf_counter()
                            text += piece
                            if stream_tokens is not None:
                                stream_tokens(piece)
                        if choice.finish_reason:
                            finish = choice.finish_reason
                    if cut:
                        break
        except Cancelled:
            return GenerationResult(text=text, prompt_tokens=0, reused=0, evaluated=0, generated=0, cold=cold,
                                    cancelled=True, finish_reason="cancelled",
                                    prompt_ms=(time.perf_counter() - started) * 1000)
        warnings: list[str] = []
        if cut:
            finish = "length"
            warnings.append(f"{label} went on sending the reply past its {limit} tokens (max_tokens); "
                            "the reply was cut there")
        if finish is None:
            raise ServerUnavailable(f"{label}: the answer from /v1/chat/completions ended before the reply was "
                               "complete (no finish_reason)")
        if request.choices is not None:
            text = _choice(text, request.choices, label)
            if on_token is not None:
                on_token(text)
        ended = time.perf_counter()
        streamed = min(generated, limit)
        prompt_tokens, reused, generated = self._usage(usage or Usage(), limit, label, warnings)
        if cut:  # no usage came: what was streamed is what was generated
            generated = streamed
        if not prompt_tokens:  # the server did not say: count as the budget does
            prompt_tokens = sum(backend.count_tokens("", m.content) for m in request.messages)
        if not generated and text:
            generated = backend.count_tokens("", text)
        split = first_token or ended
        return GenerationResult(
            text=text, prompt_tokens=prompt_tokens, reused=min(reused, prompt_tokens),
            evaluated=max(prompt_tokens - reused, 0), generated=generated, cold=cold,
            finish_reason="length" if finish == "length" else "stop",
            prompt_ms=(split - started) * 1000, generate_ms=(ended - split) * 1000, warnings=warnings,
        )

    def _usage(self, usage: Usage, limit: int, label: str, warnings: list[str]) -> tuple[int, int, int]:
        """(prompt, cached, completion) tokens as the server counted them (0 where it did not say),
        each within what this call could have had."""
        # the profile's context may be smaller than the server's: only more than any context is absurd
        prompt = clamped(usage.prompt_tokens, MAX_CONTEXT_TOKENS, "usage.prompt_tokens", warnings, label) or 0
        details = usage.prompt_tokens_details
        cached = clamped(details.cached_tokens if details is not None else None, prompt or MAX_CONTEXT_TOKENS,
                         "usage.prompt_tokens_details.cached_tokens", warnings, label) or 0
        completion = clamped(usage.completion_tokens, limit, "usage.completion_tokens", warnings, label) or 0
        return prompt, cached, completion


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
