"""llama.cpp's own server (``llama-server``) as a backend, with one slot per node.

The server keeps one KV cache per slot. Each node of a conversation is pinned to a slot of its
own (``id_slot``) and sends ``cache_prompt``, so the server keeps the longest common prefix of
that node's previous prompt, as the embedded backend keeps one context per node (but not read the
same way on a replay: ``LlamaServerBackend(cache_prompt=False)`` is the exact, slower choice). Start
the server with at least as many slots (``--parallel N``) as the agent has nodes that call the
model; with fewer, nodes share slots and re-read more (the Turn Inspector shows it).

Several conversations (``parley serve``'s NPCs on one backend) call at once: nothing here holds a
lock across a request, so their calls reach the server together and it batches them in its slots
(continuous batching). Once every slot is leased, a node without one sends ``id_slot`` -1 and the
server picks an idle slot itself. A call for a conversation with an id carries it as
``X-Session-ID`` and ``user`` (``runtime.backends.http.session_scope``), for a router with
session affinity in front of several servers.

Prompts are built here as the embedded backend builds them: the server's chat template
(``/apply-template``) renders the messages around placeholders, and the pieces are tokenized by
the server's tokenizer (``/tokenize``) with control tokens parsed in the template's markup only,
never in what a player typed. The token ids go to ``/completion``. Budgets count with the same
tokenizer. Classifiers and tool calls send a GBNF grammar or a JSON schema, which the server
enforces. Replies stream as server-sent events.
"""

from __future__ import annotations

import contextlib
import threading
import time
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

from runtime.backends.base import (
    REPEAT_LAST_N,
    Backend,
    ChatMessage,
    GenerationRequest,
    GenerationResult,
    Reproducibility,
    TokenCallback,
)
from runtime.backends.grammars import choices_grammar
from runtime.backends.http import (
    Cancelled,
    ServerConnection,
    ServerRefused,
    ServerSession,
    ServerUnavailable,
    cancel_scope,
    current_session_key,
)
from runtime.backends.placeholders import content_marks, split_at_marks
from runtime.backends.server_answers import (
    MAX_MODEL_NAME_CHARS,
    MAX_TOKEN_BYTES,
    AppliedTemplate,
    CompletionEvent,
    Props,
    Timings,
    TokenIds,
    clamped,
    read_answer,
)
from runtime.problems import BackendError

TOKEN_CACHE_SIZE = 20_000  # texts whose tokens are kept (history messages are tokenized every turn)
TOKEN_CACHE_TOKENS = 2_000_000  # token ids kept in all (8 MB); a longer text's ids are not kept

# What a replay can promise on llama.cpp's server (``LlamaServerBackend.reproducibility``).
CACHED_PROMPTS_NOTE = (
    "llama.cpp's server with cache_prompt reads only the part of a prompt its slot does not hold, so a "
    "regenerated or replayed turn reads its tokens in other batches than the first time, and its README says "
    "the logits are then \"not guaranteed to be bit-for-bit identical\" (tools/server/README.md, cache_prompt): "
    "a replayed reply may change with the same graph and seed. Turn cache_prompt off for exact replays")
WHOLE_PROMPTS_NOTE = (
    "llama.cpp's server without cache_prompt reads every prompt again from position 0 in its own batches, so "
    "a call made again at the same point reads the same way and a replay with the same seed is exact (parley "
    "doctor measured every replay case the same on llama.cpp's server with the sample model), at the server's own "
    "thread count and flash attention; each call reads its whole prompt")


@dataclass
class _Slot:
    index: int
    holder: tuple[int, str] | None = None  # (backend id, node key) leasing it
    last_user: tuple[int, str] | None = None  # who sent the last prompt (its cache holds that prompt)
    last_used: float = 0.0


@dataclass
class SlotPool:
    """The slots of one server, shared by every backend in this process that talks to it (a fleet
    run has several conversations on one server). A node leases a slot for its conversation.
    ``slots`` holds only the slots leased so far (0, 1, ... in order), so ``total`` costs nothing."""

    total: int
    slots: list[_Slot] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def lease(self, owner: tuple[int, str]) -> tuple[int, bool]:
        """The slot for ``owner``; True when it is shared (no free slot was left)."""
        with self.lock:
            for slot in self.slots:
                if slot.holder == owner:
                    return slot.index, False
            free = [s for s in self.slots if s.holder is None]
            # the slot this node used last, if free: its cache may still hold the node's prompt;
            # else a slot never used (its cache holds nothing of another node), else the oldest free
            slot = next((s for s in free if s.last_user == owner), None)
            if slot is None and len(self.slots) < self.total:
                slot = _Slot(len(self.slots))
                self.slots.append(slot)
            if slot is None and free:
                slot = min(free, key=lambda s: s.last_used)
            if slot is not None:
                slot.holder = owner
                return slot.index, False
            mine = [s for s in self.slots if s.holder is not None and s.holder[0] == owner[0]]
            slot = min(mine or self.slots, key=lambda s: s.last_used)
            return slot.index, True

    def used(self, index: int, owner: tuple[int, str]) -> bool:
        """Record that ``owner`` sent a prompt to slot ``index``; True when another node had used it last
        (or the slot was never leased here: what it holds is not known)."""
        with self.lock:
            if not 0 <= index < len(self.slots):
                return True
            slot = self.slots[index]
            other = slot.last_user is not None and slot.last_user != owner
            slot.last_user, slot.last_used = owner, time.monotonic()
            return other

    def release(self, backend_id: int, key: str | None = None) -> None:
        """Give back the slots of one backend (a conversation), or of one of its nodes."""
        with self.lock:
            for slot in self.slots:
                if slot.holder is not None and slot.holder[0] == backend_id and key in (None, slot.holder[1]):
                    slot.holder = None


_POOLS: dict[str, SlotPool] = {}
_POOLS_LOCK = threading.Lock()


def _pool(url: str, total: int) -> SlotPool:
    with _POOLS_LOCK:
        pool = _POOLS.get(url)
        if pool is None or pool.total != total:  # a restarted server may have other slots
            pool = _POOLS[url] = SlotPool(total)
        return pool


class LlamaServerBackend(Backend):
    """Every model call goes to the llama.cpp server at ``url``. The asset's model names are not
    used to pick a model: the server serves the one it was started with (``label`` names it).

    ``cache_prompt`` (llama.cpp's request option, on by default there and here) lets a slot keep the
    common prefix of its last prompt and read only the rest. Off, every request reads its whole
    prompt again from position 0: slower, and the way to exact replays (``reproducibility``)."""

    kind = "llama.cpp server"

    def __init__(self, url: str, name: str = "", *, api_key: str = "", timeout: float = 120.0,
                 cache_prompt: bool = True) -> None:
        self.server = ServerConnection(url, name, api_key=api_key, timeout=timeout)
        self.cache_prompt = cache_prompt
        self._props: Props | None = None
        self._props_lock = threading.Lock()
        self._tokens: OrderedDict[tuple[str, bool], array[int]] = OrderedDict()  # 4 bytes an id
        self._tokens_held = 0  # ids in self._tokens
        self._tokens_lock = threading.Lock()
        self._sessions: dict[str, ServerNodeSession] = {}
        self._lock = threading.Lock()

    # --- what the server is ------------------------------------------------------------------

    def props(self) -> Props:
        """The server's ``/props`` (read once): its slots, their context size and its model."""
        with self._props_lock:
            if self._props is None:
                self._props = read_answer(Props, self.server.get_json("/props"), self.server, "/props",
                                          hint="is this a llama.cpp server?")
            return self._props

    @property
    def slot_context(self) -> int:
        return self.props().default_generation_settings.n_ctx

    @property
    def total_slots(self) -> int:
        """The slots used: the server's, at most ``server_answers.MAX_SLOTS``."""
        return self.props().slots

    @property
    def served_model(self) -> str:
        """The served model's file name as messages show it (the server's text: escaped, cut short)."""
        name = PurePath(self.props().model_path or "").name
        return self.server.redacted(name, MAX_MODEL_NAME_CHARS) if name else "its model"

    @property
    def label(self) -> str:
        try:
            model = self.served_model
        except BackendError:
            model = "not reachable"
        return f"{self.server.label} · {self.kind} · {model}"

    def reproducibility(self) -> Reproducibility:
        if self.cache_prompt:
            return Reproducibility(False, False, CACHED_PROMPTS_NOTE)
        return Reproducibility(True, False, WHOLE_PROMPTS_NOTE)

    def load_model(self, model: str, progress=None, cancel=None) -> None:
        self.props()  # reachable, and really a llama.cpp server
        if progress is not None:
            progress(1.0)

    def model_context_size(self, model: str) -> int:
        return self.slot_context

    # --- tokens --------------------------------------------------------------------------------

    def tokenize(self, text: str, special: bool) -> list[int]:
        return list(self._token_ids(text, special))

    def _token_ids(self, text: str, special: bool) -> array[int]:
        if not text:
            return array("i")
        key = (text, special)
        with self._tokens_lock:
            cached = self._tokens.get(key)
            if cached is not None:
                self._tokens.move_to_end(key)
                return cached
        answer = self.server.post_json("/tokenize", {"content": text, "add_special": False,
                                                     "parse_special": special})
        tokens = array("i", read_answer(TokenIds, answer, self.server, "/tokenize",
                                        context={"text": text}).tokens)
        if len(tokens) <= TOKEN_CACHE_TOKENS:
            with self._tokens_lock:
                if key not in self._tokens:
                    self._tokens[key] = tokens
                    self._tokens_held += len(tokens)
                while len(self._tokens) > TOKEN_CACHE_SIZE or self._tokens_held > TOKEN_CACHE_TOKENS:
                    self._tokens_held -= len(self._tokens.popitem(last=False)[1])
        return tokens

    def stopping(self, cancel: threading.Event) -> contextlib.AbstractContextManager[None]:
        return cancel_scope(cancel)  # Stop ends the token counts and template requests of a turn too

    def count_tokens(self, model: str, text: str) -> int:
        return len(self._token_ids(text, special=False))

    def prompt_parts(self, messages: Sequence[ChatMessage]) -> list[tuple[str, bool]]:
        """The rendered prompt as ``(text, is_markup)`` pieces, by the server's chat template (the
        placeholder method of ``runtime.backends.llama``: contents are data, never control tokens)."""
        nonce, marks = content_marks(len(messages))
        payload = [_message_json(m, mark) for m, mark in zip(messages, marks)]
        try:
            answer = self.server.post_json("/apply-template", {"messages": payload})
        except ServerRefused as exc:
            roles = ", ".join(dict.fromkeys(m.role for m in messages))
            raise BackendError(f"{self.server.label}: the server's chat template could not render the prompt "
                               f"(roles: {roles}): {exc.detail}") from None
        text = read_answer(AppliedTemplate, answer, self.server, "/apply-template").prompt
        return split_at_marks(text, messages, marks, nonce, f"{self.server.label}: the server's chat template",
                              "serve a model")

    def prompt_tokens(self, messages: Sequence[ChatMessage]) -> list[int]:
        tokens: list[int] = []
        for text, is_markup in self.prompt_parts(messages):
            tokens += self._token_ids(text, special=is_markup)
        return tokens

    # --- sessions ------------------------------------------------------------------------------

    def model_warning(self, model: str) -> str:
        """What to tell a node whose asset names another model than the server serves ("" when the same)."""
        served = self.served_model
        wanted = PurePath(model.replace("\\", "/")).name if model else ""
        if not wanted or wanted == served:
            return ""
        return (f"the asset names the model {wanted}, but {self.server.label} serves {served}: the server's "
                "model answered")

    def session(self, key: str, model: str, context_size: int) -> ServerNodeSession:
        if context_size < 0:
            raise BackendError(f"node {key!r}: Context Size must be 0 (the model's own) or positive, not {context_size}")
        slot_ctx = self.slot_context
        if context_size > slot_ctx:
            raise BackendError(
                f"node {key!r}: Context Size {context_size} is larger than a slot of {self.server.label} "
                f"({slot_ctx} tokens); lower it, set 0 to use the slot's size, or start the server with a "
                "larger --ctx-size (llama-server divides it between its --parallel slots)"
            )
        n_ctx = context_size or slot_ctx
        with self._lock:
            existing = self._sessions.get(key)
            if existing is None or existing.n_ctx != n_ctx:
                existing = self._sessions[key] = ServerNodeSession(self, key, n_ctx)
            existing.model_warning = self.model_warning(model)
            return existing

    def slot_pool(self) -> SlotPool:
        return _pool(self.server.url, self.total_slots)

    def sessions(self) -> dict[str, ServerNodeSession]:
        with self._lock:
            return dict(self._sessions)

    def release(self, key: str) -> None:
        """Give back node ``key``'s slot and forget the node (``parley serve`` does this for each node of
        a conversation it deletes, so the slots go to the conversations still talking)."""
        with self._lock:
            session = self._sessions.pop(key, None)
        if session is not None:
            session.release()

    def release_all(self) -> None:
        """The next conversation starts fresh: give the slots back (their caches stay on the server
        and are overwritten by whoever leases them next)."""
        if self._props is not None:
            self.slot_pool().release(id(self))
        with self._lock:
            self._sessions.clear()

    def close(self) -> None:
        self.release_all()
        self.server.close()


class ServerNodeSession(ServerSession):
    """One node's slot on the server."""

    def __init__(self, backend: LlamaServerBackend, key: str, n_ctx: int) -> None:
        super().__init__(key, n_ctx)
        self.backend = backend
        self.model_warning = ""

    def release(self) -> None:
        self.backend.slot_pool().release(id(self.backend), self.key)

    def _generate(self, request: GenerationRequest, on_token: TokenCallback | None,
                  cancel: threading.Event | None) -> GenerationResult:
        backend = self.backend
        label = backend.server.label
        prompt = backend.prompt_tokens(request.messages)
        if not prompt:
            raise BackendError(f"node {self.key!r}: the prompt is empty")
        if len(prompt) >= self._n_ctx:
            raise BackendError(
                f"node {self.key!r}: the prompt is {len(prompt)} tokens but its slot on {label} holds "
                f"{self._n_ctx}; raise the node's Context Size (up to the slot's) or shorten its system prompt"
            )
        max_tokens = min(request.max_tokens, self._n_ctx - len(prompt))
        body: dict[str, Any] = {
            "prompt": prompt,
            "n_predict": max_tokens,
            "stream": True,
            "cache_prompt": backend.cache_prompt,
            "temperature": max(request.temperature, 0.0),
            "top_k": 40,
            "top_p": request.top_p,
            "min_p": request.min_p,
            "repeat_penalty": request.repeat_penalty,
            "repeat_last_n": REPEAT_LAST_N,
            # The embedded engine's chain, in its order ("penalties" is a no-op at 1.0).
            "samplers": ["penalties", "top_k", "top_p", "min_p", "temperature"],
            "seed": request.seed if request.seed >= 0 else -1,
            "stop": [s for s in request.stop if s],
        }
        if request.choices is not None:
            body["grammar"] = choices_grammar(request.choices)
            longest = max(len(c.encode("utf-8")) for c in request.choices) + 1
            body["n_predict"] = max(body["n_predict"], longest)
        elif request.json_schema is not None:
            body["json_schema"] = request.json_schema
        session = current_session_key()
        if session:
            body["user"] = session  # OpenAI's field for who asks; llama.cpp's server reads past it
        owner = (id(backend), self.key)
        pool = backend.slot_pool()
        slot, shared = pool.lease(owner)
        if shared:
            # No free slot (more nodes of the conversations run at once than slots): naming the
            # least recently used one would queue this call behind whichever call holds it while
            # other slots sit idle. id_slot -1 lets the server pick an idle slot itself: the one
            # whose cache is most like this prompt (--slot-prompt-similarity), else the least
            # recently used; the last event says which (``id_slot``).
            body["id_slot"] = -1
            cold = True
        else:
            body["id_slot"] = slot
            cold = pool.used(slot, owner) or self.calls == 0
        self.calls += 1
        limit = body["n_predict"]
        text, final, generated, size, cut = "", None, 0, 0, False
        picked: int | None = None  # the slot the server says it picked for a shared call
        started = time.perf_counter()
        try:
            with closing(backend.server.stream("/completion", body, cancel)) as events:
                for answer in events:
                    event = read_answer(CompletionEvent, answer, backend.server, "/completion")
                    piece = event.content
                    generated += event.token_count
                    size += len(piece.encode("utf-8", errors="surrogatepass"))
                    if generated > limit or size > limit * MAX_TOKEN_BYTES:
                        cut = True  # a server that streams past n_predict: the reply ends at the limit
                        break
                    if piece:
                        text += piece
                        if on_token is not None:
                            on_token(piece)
                    if event.stop:
                        final = event
                        picked = _slot_said(answer, pool.total) if shared else None
                        if picked is not None:
                            pool.used(picked, owner)  # its cache holds this node's prompt now
                        break
        except Cancelled:
            return GenerationResult(text=text, prompt_tokens=len(prompt), reused=0, evaluated=0, generated=0,
                                    cold=cold, cancelled=True, finish_reason="cancelled",
                                    prompt_ms=(time.perf_counter() - started) * 1000)
        except BackendError:
            if not shared:  # (a shared call's slot is the server's pick, not known)
                pool.used(slot, ("", ""))  # what the slot holds now is unknown
            raise
        warnings = [self.model_warning] if self.model_warning else []
        if shared:
            which = f"slot {picked}" if picked is not None else "a slot"
            warnings.append(f"no free slot on {label} ({pool.total} slots): the server picked {which} for this "
                            "node, which may re-read its prompt; start the server with a --parallel of at least "
                            "the number of nodes that call the model (in all the conversations run at once)")
        if cut:
            if not shared:
                pool.used(slot, ("", ""))
            warnings.append(f"{label} went on sending the reply past its {limit} tokens "
                            f"(max_tokens); the reply was cut there")
            ended = time.perf_counter()
            return GenerationResult(text=text, prompt_tokens=len(prompt), reused=0, evaluated=len(prompt),
                                    generated=min(generated, limit), cold=cold, finish_reason="length",
                                    prompt_ms=(ended - started) * 1000, warnings=warnings)
        if final is None:
            if not shared:
                pool.used(slot, ("", ""))
            raise ServerUnavailable(f"{label}: the answer from /completion ended before the reply was complete")
        timings = final.timings or Timings()
        if timings.cache_n is not None:
            reused = clamped(timings.cache_n, len(prompt), "timings.cache_n", warnings, label) or 0
        else:  # what the slot's cache holds now: the prompt's reused part, and the reply
            cached = clamped(final.tokens_cached, len(prompt) + limit, "tokens_cached", warnings, label) or 0
            reused = min(cached, len(prompt))
        evaluated = clamped(timings.prompt_n, len(prompt), "timings.prompt_n", warnings, label)
        generated = clamped(timings.predicted_n, limit, "timings.predicted_n", warnings, label) or 0
        finish = "length" if final.stop_type == "limit" or final.truncated else "stop"
        return GenerationResult(
            text=text, prompt_tokens=len(prompt), reused=reused,
            evaluated=max(len(prompt) - reused, 0) if evaluated is None else evaluated,
            generated=generated, cold=cold, finish_reason=finish,
            prompt_ms=max(timings.prompt_ms or 0.0, 0.0), generate_ms=max(timings.predicted_ms or 0.0, 0.0),
            warnings=warnings,
        )


def _slot_said(answer: Any, total: int) -> int | None:
    """The slot a llama.cpp server says it used (its last event's ``id_slot``), or None."""
    said = answer.get("id_slot") if isinstance(answer, dict) else None
    return said if isinstance(said, int) and not isinstance(said, bool) and 0 <= said < total else None


def _message_json(message: ChatMessage, content: str) -> dict[str, Any]:
    out: dict[str, Any] = {"role": message.role, "content": content}
    if message.name and message.role == "tool":
        out["name"] = message.name
    return out
