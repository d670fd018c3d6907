"""The embedded llama.cpp backend (through llama-cpp-python's low-level API).

Why not ``llama_cpp.Llama``: each instance loads the weights again and owns one
KV cache. Here one :class:`_LoadedModel` (``_internals.LlamaModel``) per model file
serves every node that uses it, and each node has its own ``LlamaContext`` (its own
KV cache and ``n_ctx``). Before a call, the node's new prompt tokens are compared
with the tokens its cache holds; the longest common prefix is kept and only the
rest is evaluated.

Threading: every use of a model's contexts holds that model's lock, so a context
is never used from two threads at once. llama.cpp's log goes to the Python logger
``llama_cpp`` through ``llama_log_set`` (never by redirecting stdout/stderr).

Many conversations on one model (``parley serve``'s NPCs, each agent naming its caches
"SESSION/NODE"): ``kv_budget_mib`` bounds what all node contexts take together. A cold
node that needs a context beyond it *parks* the least recently used idle ones: their cache
is saved as a llama_state_seq snapshot in RAM and their context freed, or handed straight
to the new node when it is of the same model and size. A parked node's next call restores
its snapshot instead of reading its conversation again, and goes on bit for bit. Only
contexts whose model lock this thread holds or takes without waiting are parked: one in use on
another thread is waited for, never touched. Parked snapshots have a RAM cap of their own,
``park_mib`` (``ParkedCaches``): past it the least recently parked are spilled to files, read back
on their node's next call as they were written; a snapshot the disk refuses is dropped, and its
node reads its conversation again.
"""

from __future__ import annotations

import codecs
import ctypes
import hashlib
import json
import logging
import os
import shutil
import tempfile
import threading
import time
import zlib
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import llama_cpp
from llama_cpp import _internals as internals
from llama_cpp.llama_chat_format import Jinja2ChatFormatter
from llama_cpp.llama_grammar import LlamaGrammar

from runtime.backends.base import (
    REPEAT_LAST_N,
    Backend,
    ChatMessage,
    GenerationRequest,
    GenerationResult,
    LoadProgress,
    NodeSession,
    Reproducibility,
    TokenCallback,
)
from runtime.backends.grammars import choices_grammar
from runtime.backends.llama_build import checked_extra_buffers, model_params
from runtime.backends.placeholders import content_marks, split_at_marks
from runtime.models.context_settings import (
    FLASH_ATTN,
    KV_TYPE,
    N_BATCH,
    SNAPSHOT_BUDGET_MIB,
    ContextParams,
    FlashAttention,
    KVType,
    context_params,
)
from runtime.models.folder import resolve_model
from runtime.models.gguf import GGUFError, GGUFInfo, read_gguf
from runtime.models.journal import EMPTY, Chunk, DecodeJournal
from runtime.models.memory import MIB, EstimateError, Settings, context_cost, model_shape
from runtime.names import utf8
from runtime.problems import BackendError

log = logging.getLogger(__name__)
llama_log = logging.getLogger("llama_cpp")

# Prompts longer than this are evaluated with llama.cpp's abort callback installed, so a
# cancel stops them mid-batch. It is off for short prompts and for generation because the
# Python callback runs once per graph node (~25 ms per decode here): shorter prompts take
# well under 200 ms anyway.
ABORTABLE_PROMPT_TOKENS = 48
# Reproducible at full reuse. llama.cpp's CPU kernels give a token slightly different numbers in
# another batch layout (read alone or in a chunk; with flash attention also in chunks of another
# size or with another thread count), which at a temperature above 0 can change a reply. So a node's
# cache is always built the way the conversation's own path built it: the agent hands each call the
# decode journal its node had at that point of the path (``GenerationRequest.journal``), the session
# keeps what its cache shares with that journal, rebuilds the rest chunk by chunk as first read,
# reuses the longest common prefix with the new prompt, and reads the rest in ``n_batch`` chunks.
# A regenerated, rewound, edited or replayed turn, or a cold process, reads the same chunks on the
# same cells and says the same. Rebuilding what a trim or a summary cut away is what snapshots
# (``TurnSnapshots``) save.
#
# Snapshots of a node's cache are taken before a cut that throws away cells read by earlier calls
# (a rewind, a trim, a new summary), when at least this many cells go:
SNAPSHOT_MIN_TOKENS = 32
# A prompt chunk the next prompt parts from within its first this many tokens is not kept in part.
PARTIAL_CHUNK_TOKENS = 32
# A node waiting for room in the KV budget, while every context in the way is in use on another
# thread, looks again this often (each call's end wakes it sooner) and for the turn's Stop.
KV_WAIT_SECONDS = 0.25
# RAM the caches parked under a KV budget may take together (``ParkedCaches``); past it the least
# recently parked go to disk. About five 2048-token contexts of the sample model, or a hundred short
# conversations' caches (~23 KB a token); ``parley serve --park-budget`` sets it.
PARK_BUDGET_MIB = 512


# --- llama.cpp log -> Python logging ---------------------------------------------------

# ggml_log_level in the llama.cpp this wraps (llama_cpp/_logger.py still has the older order)
_LEVELS = {0: logging.CRITICAL, 1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR}
_log_state = threading.local()
_recent_errors: deque[str] = deque(maxlen=8)  # the last llama.cpp warnings/errors, quoted in BackendErrors
_log_lock = threading.Lock()
_log_installed = False


@llama_cpp.llama_log_callback
def _forward_llama_log(level: int, text: bytes, _user_data: ctypes.c_void_p) -> None:
    # llama.cpp sends lines in pieces (level 5 = continue the previous one); join them per thread.
    try:
        piece = text.decode("utf-8", errors="replace")
        state = _log_state.__dict__
        if level != 5:
            state["level"] = _LEVELS.get(level, logging.DEBUG)
        py_level = state.get("level", logging.DEBUG)
        buffer = state.get("buffer", "") + piece
        if not buffer.endswith("\n"):
            state["buffer"] = buffer
            return
        state["buffer"] = ""
        line = buffer.rstrip()
        if not line:
            return
        if py_level >= logging.WARNING:
            _recent_errors.append(line)
        if llama_log.isEnabledFor(py_level):
            llama_log.log(py_level, "%s", line)
    except Exception:  # noqa: BLE001, S110 - a callback from C must never raise
        pass


def install_log_forwarding() -> None:
    """Route llama.cpp's (and ggml's) log into the ``llama_cpp`` Python logger. Idempotent."""
    global _log_installed
    with _log_lock:
        if _log_installed:
            return
        llama_cpp.llama_log_set(_forward_llama_log, ctypes.c_void_p(0))
        llama_cpp.llama_backend_init()
        _log_installed = True


def _last_llama_error() -> str:
    return _recent_errors[-1] if _recent_errors else ""


# --- contexts -----------------------------------------------------------------------------

_GGML_KV_TYPES = {"f16": llama_cpp.GGML_TYPE_F16, "q8_0": llama_cpp.GGML_TYPE_Q8_0, "q4_0": llama_cpp.GGML_TYPE_Q4_0}
_FLASH_ATTN_TYPES = {
    "auto": llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO,
    "on": llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED,
    "off": llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED,
}


def llama_context_params(
    params: ContextParams, n_threads: int, n_threads_batch: int
) -> llama_cpp.llama_context_params:
    """llama.cpp's context parameters for ``params`` (everything else at llama.cpp's defaults)."""
    out = llama_cpp.llama_context_default_params()
    out.n_ctx = params.n_ctx
    out.n_batch = params.n_batch
    out.n_ubatch = params.n_ubatch
    out.n_seq_max = params.n_seq_max
    out.n_outputs_max = params.n_outputs_max
    out.type_k = out.type_v = _GGML_KV_TYPES[params.kv_type]
    out.flash_attn_type = _FLASH_ATTN_TYPES[params.flash_attn]
    out.n_threads = n_threads
    out.n_threads_batch = n_threads_batch
    return out


def context_mib(info: GGUFInfo, params: ContextParams) -> float:
    """KV cache, compute and output buffers of a context, in MiB, from the estimator (for messages)."""
    cost = context_cost(model_shape(info), params.n_ctx, Settings.for_context(params, gpu_memory=0))
    return cost.ram_bytes / MIB


# --- grammars -----------------------------------------------------------------------------


def json_schema_grammar(schema: dict[str, Any]) -> str:
    """A GBNF grammar for JSON valid for ``schema`` (llama-cpp-python's converter)."""
    try:
        return LlamaGrammar.from_json_schema(json.dumps(schema))._grammar
    except Exception as e:  # noqa: BLE001 - the converter raises assertions and KeyErrors on schemas it cannot express
        raise BackendError(f"the JSON schema cannot be turned into a grammar ({type(e).__name__}: {e})") from None


# --- loaded models --------------------------------------------------------------------------


class _LoadReport:
    """llama.cpp's model-loading progress callback, passed on to ``progress`` in increasing
    order, and aborting the load once ``cancel`` is set."""

    def __init__(self, progress: LoadProgress | None, cancel: threading.Event | None) -> None:
        self.progress = progress
        self.cancel = cancel
        self.last = -1.0
        # The C function pointer: llama.cpp calls it during llama_model_load_from_file, so it
        # must stay alive for the whole load (this object holds it).
        self.callback = llama_cpp.llama_progress_callback(self._called)

    def _called(self, fraction: float, _user_data: ctypes.c_void_p) -> bool:
        if self.cancel is not None and self.cancel.is_set():
            return False  # llama.cpp stops loading and frees what it allocated
        self.report(fraction)
        return True

    def report(self, fraction: float) -> None:
        fraction = min(max(float(fraction), 0.0), 1.0)
        if fraction < self.last or self.progress is None:
            return  # several buffers can restart llama.cpp's count; the designer sees it only grow
        self.last = fraction
        try:
            self.progress(fraction)
        except Exception:  # a callback from C must never raise (ctypes would abort the load)
            log.exception("a model-loading progress callback failed")

    def finish(self) -> None:
        if self.last < 1.0:
            self.report(1.0)


class _LoadedModel:
    """One model file's weights, tokenizer and chat template, shared by every node that uses it."""

    def __init__(
        self,
        path: Path,
        info: GGUFInfo,
        progress: LoadProgress | None = None,
        cancel: threading.Event | None = None,
        extra_buffers: bool = True,
    ) -> None:
        self.path = path
        self.info = info
        self.extra_buffers = extra_buffers  # llama.cpp's repacked (and AMX) weight buffers: see llama_build
        self.lock = threading.RLock()
        params = model_params(extra_buffers)
        report = _LoadReport(progress, cancel)
        params.progress_callback = report.callback
        try:
            # verbose=True only means "do not redirect stdout/stderr"; the log goes through our callback
            self.model = internals.LlamaModel(path_model=str(path), params=params, verbose=True)
        except (ValueError, OSError) as e:
            if cancel is not None and cancel.is_set():
                raise BackendError(f"{path}: loading this model was cancelled") from None
            detail = _last_llama_error() or str(e)
            raise BackendError(f"{path}: llama.cpp could not load this model ({detail})") from None
        finally:
            # llama.cpp calls it only during the load; LlamaModel keeps ``params``, so clear the pointer
            params.progress_callback = llama_cpp.llama_progress_callback(0)
        report.finish()
        self.n_ctx_train = self.model.n_ctx_train()
        self.n_vocab = self.model.n_vocab()
        self.metadata = self.model.metadata()
        self._formatter: Jinja2ChatFormatter | None = None
        self._template_error = ""
        self.embedding_context: internals.LlamaContext | None = None

    @property
    def name(self) -> str:
        return self.path.name

    def token_text(self, token: int) -> str:
        return self.model.token_get_text(token) if token >= 0 else ""

    def formatter(self) -> Jinja2ChatFormatter:
        if self._formatter is None:
            template = self.metadata.get("tokenizer.chat_template") or self.info.chat_template
            if not template:
                raise BackendError(
                    f"{self.name} has no chat template in its GGUF metadata (tokenizer.chat_template); "
                    "use an instruction-tuned (chat) model"
                )
            try:
                self._formatter = Jinja2ChatFormatter(
                    template=template,
                    eos_token=self.token_text(self.model.token_eos()),
                    bos_token=self.token_text(self.model.token_bos()),
                    add_generation_prompt=True,
                )
            except Exception as e:  # noqa: BLE001 - jinja2 syntax errors in the model's template
                raise BackendError(f"{self.name}: its chat template is not valid Jinja ({e})") from None
        return self._formatter

    def prompt_parts(self, messages: Sequence[ChatMessage]) -> list[tuple[str, bool]]:
        """The rendered prompt as ``(text, is_markup)`` pieces: the template's own markup, and
        each message's content exactly as given, in order.

        Contents are data: a player who types ``<|im_end|>`` must not produce a control
        token. So the template is rendered with a unique placeholder in place of each
        content, and the text is split there; only the markup may hold control tokens.
        """
        nonce, marks = content_marks(len(messages))
        payload = []
        for m, mark in zip(messages, marks):
            entry: dict[str, Any] = {"role": m.role, "content": mark}
            if m.name:
                entry["name"] = m.name
            payload.append(entry)
        try:
            text = self.formatter()(messages=payload).prompt
        except BackendError:
            raise
        except Exception as e:  # noqa: BLE001 - a template's Jinja can raise anything; the user hears which model
            roles = ", ".join(dict.fromkeys(m.role for m in messages))
            raise BackendError(
                f"{self.name}: the model's chat template failed to render the prompt "
                f"(roles: {roles}): {type(e).__name__}: {e}"
            ) from None
        return split_at_marks(text, messages, marks, nonce, f"{self.name}: the model's chat template",
                              "use a model")

    def render(self, messages: Sequence[ChatMessage]) -> str:
        """The prompt exactly as the model reads it."""
        return "".join(text for text, _ in self.prompt_parts(messages))

    def prompt_tokens(self, messages: Sequence[ChatMessage]) -> list[int]:
        """The prompt's tokens: control tokens parsed in the template's markup only, never in contents."""
        # Pieces are tokenized apart, so no token spans a markup/content boundary. Chat templates
        # end their markup at a newline or a control token, where BPE pre-tokenizers (SmolLM2,
        # Llama 3, Qwen) split anyway, so ordinary prompts get the same tokens as the whole
        # string would. SentencePiece vocabularies that add a leading space (Llama 2, Mistral
        # v0.1) get that space at the start of each piece.
        return self.prompt_tokens_and_edges(messages)[0]

    def prompt_tokens_and_edges(self, messages: Sequence[ChatMessage]) -> tuple[list[int], list[int]]:
        """The prompt's tokens, and where its reading should end a chunk: after the first message's
        content (the system prompt), and before the last message's content."""
        tokens, edges, _ = self._tokens_edges_end(messages)
        return tokens, edges

    def read_ahead_tokens(self, messages: Sequence[ChatMessage]) -> tuple[list[int], list[int]]:
        """As ``prompt_tokens_and_edges``, up to the end of the last message's content: what a
        prompt that goes on from that content (a turn's line that grew, the markup after it) shares."""
        tokens, edges, end = self._tokens_edges_end(messages)
        return tokens[:end], [e for e in edges if e < end]

    def _tokens_edges_end(self, messages: Sequence[ChatMessage]) -> tuple[list[int], list[int], int]:
        tokens: list[int] = []
        head = last = end = 0
        for text, is_markup in self.prompt_parts(messages):
            if not is_markup:
                last = len(tokens)
            tokens += self.tokenize(text, special=is_markup)
            if not is_markup:
                end = len(tokens)
                head = head or end
        return tokens, sorted({head, last} - {0}), end

    def tokenize(self, text: str, special: bool) -> list[int]:
        if not text:
            return []
        # Same as llama-cpp-python's chat completion: the template adds BOS itself if the model wants it.
        # utf8: a lone surrogate (a typed byte that was not UTF-8) is read as U+FFFD, not an error.
        return self.model.tokenize(utf8(text), add_bos=False, special=special)

    def close(self) -> None:
        if self.embedding_context is not None:
            self.embedding_context.close()
            self.embedding_context = None
        self.model.close()


# --- node sessions --------------------------------------------------------------------------


class LlamaNodeSession(NodeSession):
    """One node's context over a loaded model. ``tokens`` is exactly what its KV cache holds."""

    def __init__(self, backend: LlamaBackend, key: str, model: _LoadedModel, n_ctx: int) -> None:
        super().__init__(key, n_ctx)
        self._backend = backend
        self.model = model
        self._context: internals.LlamaContext | None = None
        self._batch: internals.LlamaBatch | None = None
        self.journal: DecodeJournal = EMPTY  # exactly how the cells its KV cache holds were read
        self.read_start = 0  # where the last call began reading (cells before it were read by earlier calls)
        self.last_used = time.monotonic()
        self.contexts_created = 0
        self._piece_buffer = ctypes.create_string_buffer(64)
        try:
            self.mib = context_mib(model.info, backend.context_params(n_ctx))  # what it takes of the KV budget
        except EstimateError:
            self.mib = 0.0  # a file the estimator cannot size; LlamaBackend.session refuses it under a budget

    @property
    def is_cold(self) -> bool:
        return self._context is None

    @property
    def tokens(self) -> list[int]:
        """The tokens the KV cache holds."""
        return self.journal.tokens()

    # lifecycle

    def _ensure_context(self, cancel: threading.Event | None = None) -> internals.LlamaContext | None:
        """The node's context: created, or handed over by a session parked to make room, within the
        backend's KV budget. None when ``cancel`` was set while waiting for room."""
        if self._context is not None:
            return self._context
        backend = self._backend
        if backend.kv_budget_mib is None:
            return self._create_context()
        # One admission at a time: two threads that each found room would together overrun the budget.
        with backend.kv_room:
            waited = False
            while not backend.make_room(self):
                if cancel is not None and cancel.is_set():
                    return None
                if not waited:
                    log.info("node %s waits for room in the KV budget (%g MiB): the contexts in the way are in use",
                             self.key, backend.kv_budget_mib)
                    waited = True
                backend.kv_room.wait(KV_WAIT_SECONDS)
            return self._context if self._context is not None else self._create_context()

    def _create_context(self) -> internals.LlamaContext:
        params = self._backend.context_params(self._n_ctx)
        c_params = llama_context_params(params, self._backend.n_threads, self._backend.n_threads_batch)
        try:
            context = internals.LlamaContext(model=self.model.model, params=c_params, verbose=True)
        except ValueError:
            detail = _last_llama_error()
            raise BackendError(
                f"not enough memory to create the {self._n_ctx}-token context of node {self.key!r} "
                f"on {self.model.name} (its KV cache and buffers need about "
                f"{context_mib(self.model.info, params):.0f} MiB)"
                + (f": {detail}" if detail else "")
                + ". Lower the node's Context Size, or free other nodes' caches."
            ) from None
        self._context = context
        self._batch = internals.LlamaBatch(n_tokens=params.n_batch, embd=0, n_seq_max=params.n_seq_max, verbose=True)
        self.journal = EMPTY
        self.read_start = 0
        self.contexts_created += 1
        log.debug("created context for node %s (n_ctx %d)", self.key, self._n_ctx)
        return context

    def release(self) -> None:
        with self.model.lock:
            self._free()
        self._backend.snapshots.forget(self.key)
        self._backend.unpark(self.key)
        self._backend.room_changed()

    def park(self, hand_over: bool) -> tuple[internals.LlamaContext, internals.LlamaBatch] | None:
        """Save the cache to the backend's parked store and give up the context: freed, or returned
        (cleared) for another session of the same model and size (``hand_over``), which saves the
        allocation. The caller holds this model's lock."""
        context, batch = self._context, self._batch
        assert context is not None and batch is not None
        if self.journal.length:
            size = llama_cpp.llama_state_seq_get_size(context.ctx, 0)
            data = (ctypes.c_uint8 * size)()
            if llama_cpp.llama_state_seq_get_data(context.ctx, data, size, 0) == size:
                self._backend.store_parked(ParkedCache(Snapshot(self.key, self.journal, data), self.read_start))
                log.debug("parked node %s (%d cells, %.1f MiB) to make room in the KV budget", self.key,
                          self.journal.length, size / MIB)
            else:  # its next call reads the conversation again, the same way
                log.warning("node %s: its cache could not be saved; its next call reads its prompt again", self.key)
        if not hand_over:
            self._free()
            return None
        self._context = self._batch = None
        self.journal = EMPTY
        self.read_start = 0
        context.kv_cache_clear()
        return context, batch

    def adopt(self, context: internals.LlamaContext, batch: internals.LlamaBatch) -> None:
        """Take over a parked session's cleared context (same model, same size)."""
        self._context, self._batch = context, batch
        self.journal = EMPTY
        self.read_start = 0
        log.debug("node %s took over a parked context", self.key)

    def _unpark(self, context: internals.LlamaContext) -> bool:
        """Restore the cache this node had when it was parked, if it was. The caller holds the model lock."""
        parked = self._backend.take_parked(self.key)
        if parked is None:
            return False
        if not self._restore(context, parked.snapshot):
            return False
        self.read_start = parked.read_start
        self._backend.count_restore()
        log.debug("restored node %s's parked cache (%d cells)", self.key, self.journal.length)
        return True

    def _free(self) -> None:
        if self._batch is not None:
            self._batch.close()
            self._batch = None
        if self._context is not None:
            self._context.close()
            self._context = None
            log.debug("freed context of node %s", self.key)
        self.journal = EMPTY
        self.read_start = 0

    # prompts

    def prompt_tokens(self, messages: Sequence[ChatMessage]) -> list[int]:
        return self.model.prompt_tokens(messages)

    # generation

    def generate(self, request: GenerationRequest, on_token: TokenCallback | None = None,
                 cancel: threading.Event | None = None) -> GenerationResult:
        # Everything that can fail on bad input happens before the cache is touched.
        prompt, edges = self.model.prompt_tokens_and_edges(request.messages)
        if not prompt:
            raise BackendError(f"node {self.key!r}: the prompt is empty")
        grammar = None
        if request.choices is not None:
            grammar = choices_grammar(request.choices)
        elif request.json_schema is not None:
            grammar = json_schema_grammar(request.json_schema)
        if len(prompt) >= self._n_ctx:
            raise BackendError(
                f"node {self.key!r}: the prompt is {len(prompt)} tokens but the context holds {self._n_ctx}; "
                "raise the node's Context Size or shorten its system prompt"
            )
        max_tokens = request.max_tokens
        if request.choices:
            # A label cut off by max_tokens would not be one of the labels. Under the grammar every
            # token adds at least one byte of some label, so the longest label in bytes bounds it.
            max_tokens = max(max_tokens, max(len(c.encode("utf-8")) for c in request.choices) + 1)

        try:
            with self.model.lock:
                self._backend._busy(+1)
                try:
                    return self._generate_locked(request, prompt, edges, grammar, max_tokens, on_token, cancel)
                finally:
                    self._backend._busy(-1)
        finally:
            # a node waiting for room in the KV budget may park this context now that its lock is free
            self._backend.room_changed()

    def read_ahead(self, journal: DecodeJournal, messages: list[ChatMessage],
                   cancel: threading.Event | None = None) -> DecodeJournal | None:
        prompt, edges = self.model.read_ahead_tokens(messages)
        if not prompt or len(prompt) >= self._n_ctx or journal.tokens()[: len(prompt)] == prompt:
            return journal  # nothing to read (or it would not fit: the call itself says so)
        try:
            with self.model.lock:
                self._backend._busy(+1)
                try:
                    cold = self._context is None
                    context = self._ensure_context(cancel)
                    if context is None:
                        return journal
                    if cold:
                        self._unpark(context)
                    self._hold(context, self.reading(journal, prompt, edges), cancel)
                    self.last_used = time.monotonic()
                    return self.journal
                finally:
                    self._backend._busy(-1)
        finally:
            self._backend.room_changed()

    def _generate_locked(
        self,
        request: GenerationRequest,
        prompt: list[int],
        edges: list[int],
        grammar: str | None,
        max_tokens: int,
        on_token: TokenCallback | None,
        cancel: threading.Event | None,
    ) -> GenerationResult:
        self.calls += 1
        self.last_used = time.monotonic()
        cold = self._context is None
        context = self._ensure_context(cancel)
        if context is None:
            return GenerationResult(text="", prompt_tokens=len(prompt), reused=0, evaluated=0, generated=0, cold=cold,
                                    cancelled=True, finish_reason="cancelled", journal=self.journal)
        sampler = self._sampler(request, grammar)
        try:
            t0 = time.perf_counter()
            # A parked cache comes back as it was (timed with the reading: it stands in for it), so
            # this is no read from scratch.
            if cold and self._unpark(context):
                cold = False
            wanted = self.reading(request.journal, prompt, edges)
            reused, evaluated, cancelled = self._hold(context, wanted, cancel)
            t1 = time.perf_counter()
            if cancelled:
                return GenerationResult(
                    text="", prompt_tokens=len(prompt), reused=reused, evaluated=evaluated, generated=0,
                    cold=cold, cancelled=True, finish_reason="cancelled", prompt_ms=(t1 - t0) * 1000,
                    journal=self.journal,
                )
            text, generated, finish = self._sample_loop(context, sampler, request, max_tokens, on_token, cancel)
            t2 = time.perf_counter()
        finally:
            sampler.close()
            self.last_used = time.monotonic()
        return GenerationResult(
            text=text,
            prompt_tokens=len(prompt),
            reused=reused,
            evaluated=evaluated,
            generated=generated,
            cold=cold,
            cancelled=finish == "cancelled",
            finish_reason=finish,
            prompt_ms=(t1 - t0) * 1000,
            generate_ms=(t2 - t1) * 1000,
            journal=self.journal,
        )

    def reading(self, journal: DecodeJournal | None, prompt: list[int], edges: Sequence[int] = ()) -> DecodeJournal:
        """What the cache holds once ``prompt`` is read: the journal the node had at this point of its
        conversation (``journal``, else the cache's own), cut to its longest common prefix with the
        prompt, then the rest of the prompt in ``n_batch`` chunks that also end at ``edges``. The last
        prompt token is always read: sampling needs its logits."""
        before = journal if journal is not None else self.journal
        if before.largest_token >= self.model.n_vocab or before.extent > self._n_ctx:
            # another model's journal (a history loaded into a changed graph): nothing of it can be rebuilt here
            log.info("node %s: its decode journal does not fit %s; the prompt is read afresh", self.key, self.model.name)
            before = EMPTY
        held = before.tokens()
        n = 0
        limit = min(len(held), len(prompt) - 1)
        while n < limit and held[n] == prompt[n]:
            n += 1
        n = self._whole_chunks(before, n)
        n_batch = self._backend.context_params(self._n_ctx).n_batch
        # The first message (the system prompt) ends a chunk of its own, so a new conversation with
        # the same system prompt finds it in the cache whatever the last conversation said. The last
        # message's content starts one, so the next prompt, which parts from this one there (a
        # classifier's new line, a context line that moved), keeps whole chunks: a turn gone back to
        # then needs no chunk read again that it only partly keeps.
        edges = [e for e in edges if n < e < len(prompt)]
        chunks = []
        at = n
        while at < len(prompt):
            end = min(at + n_batch, len(prompt), *(e for e in edges if e > at))
            chunks.append(Chunk(tuple(prompt[at:end]), end - at))
            at = end
        return before.cut(n).then(chunks)

    @staticmethod
    def _whole_chunks(journal: DecodeJournal, n: int) -> int:
        """``n``, or the start of the prompt chunk it cuts through when it would keep only a few of
        its cells: a cache that lacks that chunk (a turn gone back to) would read it whole again to
        keep them, where reading those few afresh costs nothing (two lines that start alike)."""
        at = 0
        for c in journal.chunks:
            if at + c.kept > n:
                return at if not c.singles and n - at <= PARTIAL_CHUNK_TOKENS else n
            at += c.kept
        return n

    def _hold(self, context: internals.LlamaContext, wanted: DecodeJournal, cancel: threading.Event | None
              ) -> tuple[int, int, bool]:
        """Make the cache hold ``wanted``, bit for bit as its chunks were first read; its last chunk is
        read again in any case (for the logits). Returns (cells kept, tokens read, cancelled)."""
        last_start = wanted.starts()[-1]
        keep = min(wanted.shared(self.journal), last_start)
        snapshots = self._backend.snapshots
        found = snapshots.best(self.key, wanted)
        if found is not None and min(wanted.shared(found.journal), last_start) > keep:
            if self._restore(context, found):
                snapshots.restored += 1
            keep = min(wanted.shared(self.journal), last_start)
        cut, chunks = wanted.rebuild_from(keep)
        if cut < self.read_start and self.journal.length - cut >= SNAPSHOT_MIN_TOKENS:
            snapshots.save(self.key, self.journal, context)  # cells read by earlier calls are about to go
        self._cut(context, cut)
        self.read_start = cut
        abortable = cancel is not None and wanted.length - cut > ABORTABLE_PROMPT_TOKENS
        if abortable:
            callback = _abort_callback_for(cancel)
            llama_cpp.llama_set_abort_callback(context.ctx, callback, None)
        evaluated = 0
        try:
            for chunk in chunks:
                pieces = [[t] for t in chunk.tokens] if chunk.singles else [list(chunk.tokens)]
                for piece in pieces:
                    if cancel is not None and cancel.is_set():
                        return cut, evaluated, True
                    if self._decode(context, piece, chunk.singles) == 2:
                        return cut, evaluated, True
                    evaluated += len(piece)
                if chunk.kept < len(chunk.tokens) and not chunk.singles:
                    self._cut(context, self.journal.length - len(chunk.tokens) + chunk.kept)
        finally:
            if abortable:
                llama_cpp.llama_set_abort_callback(context.ctx, llama_cpp.ggml_abort_callback(0), None)
        return cut, evaluated, False

    def _cut(self, context: internals.LlamaContext, n: int) -> None:
        if n < self.journal.length:
            if not context.kv_cache_seq_rm(0, n, -1):
                context.kv_cache_clear()
                n = 0
            self.journal = self.journal.cut(n)

    def _restore(self, context: internals.LlamaContext, snapshot: Snapshot) -> bool:
        context.kv_cache_clear()
        self.journal = EMPTY
        data = snapshot.data
        if llama_cpp.llama_state_seq_set_data(context.ctx, data, len(data), 0) == 0:
            context.kv_cache_clear()  # refused (another build's format): rebuilt from the journal instead
            log.warning("node %s: a cache snapshot could not be restored", self.key)
            return False
        self.journal = snapshot.journal
        return True

    def _decode(self, context: internals.LlamaContext, chunk: Sequence[int], singles: bool = False) -> int:
        assert self._batch is not None
        self._batch.set_batch(chunk, self.journal.length, False)
        rc = llama_cpp.llama_decode(context.ctx, self._batch.batch)
        if rc == 0:
            self._read(chunk, singles)
        else:
            # llama.cpp removes the failed or aborted batch from memory; drop anything past what we know it holds
            context.kv_cache_seq_rm(0, self.journal.length, -1)
            if rc != 2:  # 2 = aborted by our callback
                detail = _last_llama_error()
                raise BackendError(
                    f"node {self.key!r}: llama.cpp could not evaluate the prompt (code {rc})"
                    + (f": {detail}" if detail else "")
                )
        return rc

    def _read(self, chunk: Sequence[int], singles: bool) -> None:
        chunks = self.journal.chunks
        if singles and chunks and chunks[-1].singles and chunks[-1].kept == len(chunks[-1].tokens):
            last = chunks[-1]  # one more token read alone: the same run of singles
            tokens = last.tokens + tuple(chunk)
            self.journal = DecodeJournal(chunks[:-1] + (Chunk(tokens, len(tokens), True),))
        else:
            self.journal = self.journal.then_read(chunk, singles)

    def _sampler(self, request: GenerationRequest, grammar: str | None) -> internals.LlamaSampler:
        sampler = internals.LlamaSampler()
        if grammar is not None:
            handle = llama_cpp.llama_sampler_init_grammar(self.model.model.vocab, grammar.encode("utf-8"), b"root")
            if not handle:
                sampler.close()
                raise BackendError(f"llama.cpp rejected the output grammar: {_last_llama_error() or grammar[:200]}")
            llama_cpp.llama_sampler_chain_add(sampler.sampler, handle)
        if request.repeat_penalty != 1.0:
            # First, as llama.cpp's own chain has it, so greedy decoding is penalized too. This build's
            # llama_sampler_init_penalties still takes n_vocab first (internals.add_penalties passes it).
            sampler.add_penalties(self.model.n_vocab, REPEAT_LAST_N, request.repeat_penalty, 0.0, 0.0)
        if request.temperature <= 0:
            sampler.add_greedy()
        else:
            sampler.add_top_k(40)
            sampler.add_top_p(request.top_p, 1)
            if request.min_p > 0:
                sampler.add_min_p(request.min_p, 1)
            sampler.add_temp(request.temperature)
            seed = request.seed if request.seed >= 0 else llama_cpp.LLAMA_DEFAULT_SEED
            sampler.add_dist(seed & 0xFFFFFFFF)
        return sampler

    def _sample_loop(
        self,
        context: internals.LlamaContext,
        sampler: internals.LlamaSampler,
        request: GenerationRequest,
        max_tokens: int,
        on_token: TokenCallback | None,
        cancel: threading.Event | None,
    ) -> tuple[str, int, str]:
        vocab = self.model.model.vocab
        # whole UTF-8 characters out of token pieces (a character may span tokens)
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        text = ""
        emitted = 0  # characters of ``text`` already sent to on_token
        stops = [s for s in request.stop if s]
        hold = max((len(s) for s in stops), default=1) - 1
        choices = request.choices or []
        generated = 0
        finish = "length"
        while generated < max_tokens:
            if cancel is not None and cancel.is_set():
                finish = "cancelled"
                break
            token = sampler.sample(context, -1)
            if llama_cpp.llama_vocab_is_eog(vocab, token):
                finish = "stop"
                break
            generated += 1
            text += decoder.decode(self._piece(token))
            cut = _first_stop(text, stops)
            if cut is not None:
                text = text[:cut]
                finish = "stop"
                break
            done = bool(choices) and text in choices and not any(c != text and c.startswith(text) for c in choices)
            if on_token is not None:
                safe = len(text) if done or not stops else max(emitted, len(text) - hold)
                if safe > emitted:
                    on_token(text[emitted:safe])
                    emitted = safe
            if done:
                finish = "stop"
                break
            if generated >= max_tokens or self.journal.length + 1 >= self._n_ctx:
                break  # the sampled token is not decoded: the cache holds only what ``journal`` says
            self._decode(context, [token], singles=True)
        text += decoder.decode(b"", final=True)
        if on_token is not None and len(text) > emitted:
            on_token(text[emitted:])
        return text, generated, finish

    def _piece(self, token: int) -> bytes:
        n = llama_cpp.llama_token_to_piece(self.model.model.vocab, token, self._piece_buffer, len(self._piece_buffer), 0, False)
        if n < 0:  # longer than the buffer: llama.cpp says how long
            self._piece_buffer = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self.model.model.vocab, token, self._piece_buffer, -n, 0, False)
        return self._piece_buffer.raw[:n]


def _first_stop(text: str, stops: Sequence[str]) -> int | None:
    cuts = [i for i in (text.find(s) for s in stops) if i >= 0]
    return min(cuts) if cuts else None


def _abort_callback_for(cancel: threading.Event) -> Any:
    @llama_cpp.ggml_abort_callback
    def should_abort(_data: ctypes.c_void_p) -> bool:
        return cancel.is_set()

    _ABORT_CALLBACKS.append(should_abort)  # keep the C function pointer alive while llama.cpp may call it
    return should_abort


_ABORT_CALLBACKS: deque[Any] = deque(maxlen=64)


# --- snapshots ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Snapshot:
    key: str  # the node
    journal: DecodeJournal  # what its cache held
    data: Any  # llama_state_seq_get_data's bytes (a ctypes array)


@dataclass(frozen=True)
class ParkedCache:
    """A node's cache saved when its context was taken to make room in the KV budget; its next
    call restores it. One per node, kept until then or until the node is released."""

    snapshot: Snapshot
    read_start: int  # the node's ``read_start`` then: the snapshot policy goes on as if nothing happened


@dataclass(frozen=True)
class KVStats:
    """What the node contexts of a ``LlamaBackend`` take (``kv_stats``)."""

    live_contexts: int  # node contexts that exist now
    live_mib: float  # their KV caches and buffers, as the estimator sizes them (``context_mib``)
    budget_mib: float | None  # what they may take together (None: no limit)
    parked: int  # nodes whose cache waits in RAM for their next call
    parked_mib: float  # those snapshots' bytes (apart from the TurnSnapshots budget)
    parks: int  # caches parked so far
    restores: int  # parked caches restored so far
    handovers: int  # parked contexts given straight to another node (no allocation)
    park_budget_mib: float = 0.0  # what parked snapshots may take in RAM (``park_mib``)
    spilled: int = 0  # parked nodes whose snapshot waits on disk, past the RAM cap
    spilled_mib: float = 0.0  # those files' bytes
    spills: int = 0  # snapshots written to disk so far
    spill_failures: int = 0  # snapshots dropped because the disk refused them (read again on their next call)


class TurnSnapshots:
    """Copies of node caches taken before a cut threw away cells earlier calls read, so a rewind
    across a trim or a new summary restores them instead of reading the conversation again. All
    nodes' snapshots together stay within ``budget`` bytes, the least recently used dropped first."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self._kept: OrderedDict[int, Snapshot] = OrderedDict()
        self._lock = threading.Lock()
        self._next = 0
        self.taken = 0
        self.restored = 0

    def set_budget(self, budget: int) -> None:
        with self._lock:
            self.budget = max(int(budget), 0)
            self._evict(0)

    @property
    def bytes(self) -> int:
        with self._lock:
            return sum(len(s.data) for s in self._kept.values())

    def __len__(self) -> int:
        return len(self._kept)

    def save(self, key: str, journal: DecodeJournal, context: internals.LlamaContext) -> None:
        with self._lock:
            for s in self._kept.values():
                if s.key == key and journal.shared(s.journal) == journal.length:
                    return  # one already holds all of it
        size = llama_cpp.llama_state_seq_get_size(context.ctx, 0)
        if size > self.budget:
            return
        data = (ctypes.c_uint8 * size)()
        if llama_cpp.llama_state_seq_get_data(context.ctx, data, size, 0) != size:
            return
        with self._lock:
            self._evict(size)
            self._kept[self._next] = Snapshot(key, journal, data)
            self._next += 1
            self.taken += 1

    def best(self, key: str, wanted: DecodeJournal) -> Snapshot | None:
        """The snapshot of ``key`` that shares the most cells with ``wanted`` (None if none shares any)."""
        with self._lock:
            scored = [(wanted.shared(s.journal), i) for i, s in self._kept.items() if s.key == key]
            if not scored:
                return None
            shared, index = max(scored)
            if shared == 0:
                return None
            self._kept.move_to_end(index)
            return self._kept[index]

    def forget(self, key: str | None = None) -> None:
        with self._lock:
            for i in [i for i, s in self._kept.items() if key is None or s.key == key]:
                del self._kept[i]

    def _evict(self, room: int) -> None:
        total = sum(len(s.data) for s in self._kept.values())
        while self._kept and total + room > self.budget:
            _, dropped = self._kept.popitem(last=False)
            total -= len(dropped.data)


@dataclass(frozen=True)
class SpilledCache:
    """A parked cache whose bytes wait in a file (``ParkedCaches``); the journal stays in RAM."""

    journal: DecodeJournal
    read_start: int
    path: Path
    size: int
    crc: int  # zlib.crc32 of the bytes: a file changed meanwhile is read again, never restored


class ParkedCaches:
    """The caches parked to make room in the KV budget, one per node, until its next call takes it.

    Their bytes stay in RAM up to ``budget`` bytes; past it the least recently parked are written
    to a file each (llama_state_seq data as is) in a folder made under ``parent`` at the first
    spill (the system's temporary folder when None) and removed by ``close``. ``take`` reads a
    spilled one back and deletes its file; ``forget`` deletes it unread. A snapshot the disk
    refuses (full, no permission) is dropped: its node reads its conversation again, as if never
    parked. File writes and reads run outside the lock, so other nodes' calls never wait on a disk."""

    def __init__(self, budget: int, parent: str | os.PathLike[str] | None = None) -> None:
        self.budget = budget
        self.parent = Path(parent) if parent is not None else None
        self._lock = threading.Lock()
        self._in_ram: OrderedDict[str, ParkedCache] = OrderedDict()  # oldest parked first
        self._ram_bytes = 0
        self._writing: dict[str, ParkedCache] = {}  # being written: still RAM, still takeable
        self._on_disk: dict[str, SpilledCache] = {}
        self._folder: Path | None = None
        self._files = 0  # numbers each file, so a file being removed never has a new one's name
        self._warned = False
        self.spills = self.failures = 0

    # what is parked

    def put(self, parked: ParkedCache) -> None:
        """Keep ``parked`` (in place of any earlier one of its node), spilling the least recently
        parked to disk while the RAM ones exceed the budget."""
        key = parked.snapshot.key
        with self._lock:
            stale = self._pop(key)
            self._in_ram[key] = parked
            self._ram_bytes += len(parked.snapshot.data)
            spilling = []
            while self._in_ram and self._ram_bytes > self.budget:
                old_key, old = self._in_ram.popitem(last=False)
                self._ram_bytes -= len(old.snapshot.data)
                self._writing[old_key] = old
                spilling.append(old)
        _remove(stale)
        for old in spilling:
            self._spill(old)

    def take(self, key: str) -> ParkedCache | None:
        """``key``'s parked cache, once (read back from disk if it was spilled); None when it has none,
        or its file cannot be read back whole."""
        with self._lock:
            parked = self._in_ram.pop(key, None)
            if parked is not None:
                self._ram_bytes -= len(parked.snapshot.data)
                return parked
            parked = self._writing.pop(key, None)  # its writer sees it gone and deletes the file
            if parked is not None:
                return parked
            spilled = self._on_disk.pop(key, None)
        if spilled is None:
            return None
        data = (ctypes.c_uint8 * spilled.size)()
        try:
            with open(spilled.path, "rb") as f:
                n = f.readinto(data)
                whole = n == spilled.size and not f.read(1) and zlib.crc32(data) == spilled.crc
        except OSError as e:
            whole = False
            log.warning("node %s: its parked cache could not be read back from %s (%s); its next call reads its "
                        "prompt again", key, spilled.path, e.strerror or e)
        else:
            if not whole:
                log.warning("node %s: its parked cache in %s changed on disk; its next call reads its prompt again",
                            key, spilled.path)
        _remove(spilled)
        return ParkedCache(Snapshot(key, spilled.journal, data), spilled.read_start) if whole else None

    def forget(self, key: str | None = None) -> None:
        """Drop ``key``'s parked cache, its file too (None: every node's)."""
        with self._lock:
            keys = [key] if key is not None else [*self._in_ram, *self._writing, *self._on_disk]
            stale = [self._pop(k) for k in keys]
        for spilled in stale:
            _remove(spilled)

    def items(self) -> list[tuple[str, ParkedCache]]:
        """The parked caches held in RAM, as (node, cache), the least recently parked first."""
        with self._lock:
            return [*self._in_ram.items(), *self._writing.items()]

    def counts(self) -> tuple[int, int, int, int]:
        """(in RAM, their bytes, on disk, their bytes)."""
        with self._lock:
            ram = len(self._in_ram) + len(self._writing)
            ram_bytes = self._ram_bytes + sum(len(p.snapshot.data) for p in self._writing.values())
            return ram, ram_bytes, len(self._on_disk), sum(s.size for s in self._on_disk.values())

    def __contains__(self, key: str) -> bool:
        with self._lock:
            return key in self._in_ram or key in self._writing or key in self._on_disk

    def close(self) -> None:
        """Forget every parked cache and remove the spill folder."""
        self.forget()
        with self._lock:
            folder, self._folder = self._folder, None
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)

    # the disk

    def _pop(self, key: str) -> SpilledCache | None:
        """Drop ``key`` from RAM; its spilled record, whose file the caller removes outside the lock."""
        parked = self._in_ram.pop(key, None)
        if parked is not None:
            self._ram_bytes -= len(parked.snapshot.data)
        self._writing.pop(key, None)
        return self._on_disk.pop(key, None)

    def _spill(self, parked: ParkedCache) -> None:
        key = parked.snapshot.key
        data = parked.snapshot.data
        path: Path | None = None
        try:
            folder = self._spill_folder()
            with self._lock:
                self._files += 1
                path = folder / f"{_file_name(key)}-{self._files}.kv"
            with open(path, "xb") as f:
                f.write(memoryview(data).cast("B"))
        except OSError as e:
            with self._lock:
                dropped = self._writing.get(key) is parked
                if dropped:
                    del self._writing[key]
                    self.failures += 1
                warn, self._warned = not self._warned, True
            if path is not None:
                _unlink(path)
            if dropped:
                (log.warning if warn else log.debug)(
                    "node %s: its parked cache could not be written to %s (%s), so it was dropped; its next call "
                    "reads its prompt again%s", key, path or self.parent or "the temporary folder", e.strerror or e,
                    " (further such drops are logged at debug level)" if warn else "")
            return
        spilled = SpilledCache(parked.snapshot.journal, parked.read_start, path, len(data), zlib.crc32(data))
        with self._lock:
            kept = self._writing.get(key) is parked
            if kept:
                del self._writing[key]
                self._on_disk[key] = spilled
                self.spills += 1
        if not kept:  # taken or forgotten while it was written
            _unlink(path)
        else:
            log.debug("node %s: its parked cache (%.1f MiB) went to %s, past the parked caches' RAM cap", key,
                      len(data) / MIB, path)

    def _spill_folder(self) -> Path:
        with self._lock:
            if self._folder is None:
                parent = self.parent
                if parent is not None:
                    parent.mkdir(parents=True, exist_ok=True)
                self._folder = Path(tempfile.mkdtemp(prefix="parked-", dir=parent))
            return self._folder


def _file_name(key: str) -> str:
    """A file name for node ``key`` ("SESSION/NODE", any characters): readable, safe on every file
    system, and unique per key (the hash)."""
    readable = "".join(c if c.isascii() and (c.isalnum() or c in "-_") else "_" for c in key)[:48]
    return f"{readable}-{hashlib.sha256(key.encode('utf-8', 'surrogatepass')).hexdigest()[:16]}"


def _remove(spilled: SpilledCache | None) -> None:
    if spilled is not None:
        _unlink(spilled.path)


def _unlink(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError as e:  # the folder is removed on close anyway
        log.debug("could not remove %s: %s", path, e)


# --- the backend ----------------------------------------------------------------------------


class LlamaBackend(Backend):
    """GGUF models in-process: weights loaded once per file, one context per node.

    ``asset_dir`` resolves model names relative to the asset. ``idle_release_seconds``
    frees every node's KV cache once no call has run for that long (None: never).
    ``snapshot_mib`` is the RAM all nodes' cache snapshots may take (``TurnSnapshots``).
    ``kv_budget_mib`` is what all node contexts may take together (None: no limit); past it the
    least recently used idle ones are parked (see the module's docstring and ``kv_stats``).
    ``park_mib`` is the RAM those parked caches may take; past it the least recently parked are
    written to files in a folder made under ``park_dir`` (the system's temporary folder when None)
    and read back on their node's next call. ``close`` removes that folder.
    """

    def __init__(
        self,
        asset_dir: str | os.PathLike[str] | None = None,
        *,
        idle_release_seconds: float | None = None,
        n_threads: int | None = None,
        n_threads_batch: int | None = None,
        n_batch: int = N_BATCH,
        kv_type: KVType = KV_TYPE,
        flash_attn: FlashAttention = FLASH_ATTN,
        snapshot_mib: float = SNAPSHOT_BUDGET_MIB,
        kv_budget_mib: float | None = None,
        park_mib: float = PARK_BUDGET_MIB,
        park_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        if kv_budget_mib is not None and not kv_budget_mib > 0:  # NaN too
            raise BackendError(f"the KV budget must be a positive number of MiB (or none), not {kv_budget_mib!r}")
        if not park_mib >= 0:  # NaN too
            raise BackendError(f"the parked caches' RAM cap must be 0 or more MiB, not {park_mib!r}")
        install_log_forwarding()
        self.snapshots = TurnSnapshots(int(snapshot_mib * MIB))
        cpus = os.cpu_count() or 1
        self.asset_dir = Path(asset_dir) if asset_dir is not None else None
        # Same defaults as llama_cpp.Llama: half the logical CPUs to generate, all of them for prompts.
        self.n_threads = n_threads or max(cpus // 2, 1)
        self.n_threads_batch = n_threads_batch or cpus
        self.n_batch = n_batch
        self.kv_type = kv_type
        self.flash_attn = flash_attn
        try:
            context_params(1, n_batch, kv_type=kv_type, flash_attn=flash_attn)  # unknown values fail here, not per node
        except ValueError as e:
            raise BackendError(str(e)) from None
        self._models: dict[Path, _LoadedModel] = {}
        self._sessions: dict[str, LlamaNodeSession] = {}
        self._lock = threading.Lock()  # guards the dicts; model locks guard the contexts
        # One per model file, held while it loads: a file loads once, and other files meanwhile
        self._load_locks: dict[Path, threading.Lock] = {}
        self._active = 0
        self._last_call = time.monotonic()
        self.model_loads = 0
        self.idle_release_seconds = idle_release_seconds
        self.kv_budget_mib = kv_budget_mib
        # Held while a node makes room in the KV budget and creates its context; calls that end and
        # releases notify it. Never held while blocking on a model lock (those are only tried).
        self.kv_room = threading.Condition(threading.Lock())
        self._parked = ParkedCaches(int(park_mib * MIB), park_dir)
        self._parks = self._restores = self._handovers = 0
        self._stop = threading.Event()
        self._idle_thread: threading.Thread | None = None
        if idle_release_seconds is not None:
            self._idle_thread = threading.Thread(target=self._watch_idle, name="llama-idle-release", daemon=True)
            self._idle_thread.start()

    def reproducibility(self) -> Reproducibility:
        across = self.flash_attn == "off"
        threads = ("at any thread count" if across else
                   f"at {self.n_threads}/{self.n_threads_batch} threads only (flash attention {self.flash_attn} "
                   "makes the numbers depend on the thread count)")
        return Reproducibility(True, across, "embedded llama.cpp rebuilds each node's cache as its conversation "
                               f"first read it, so a replay with the same seed is exact, {threads}")

    def context_params(self, n_ctx: int) -> ContextParams:
        """How this backend creates an ``n_ctx``-token node context (the estimator sizes the same)."""
        return context_params(n_ctx, self.n_batch, kv_type=self.kv_type, flash_attn=self.flash_attn)

    # models

    def set_asset_dir(self, asset_dir: str | os.PathLike[str] | None) -> None:
        self.asset_dir = Path(asset_dir) if asset_dir else None

    def model_path(self, model: str) -> Path:
        return resolve_model(model, self.asset_dir)

    def load_model(
        self, model: str, progress: LoadProgress | None = None, cancel: threading.Event | None = None
    ) -> None:
        """Load ``model``'s weights now (the first turn then starts at once). ``progress`` hears
        llama.cpp's progress, ending at 1.0 (at once when the file is already loaded). A set
        ``cancel`` aborts the load with a BackendError and nothing stays loaded; calling
        again loads afresh. A caller that waits for another thread's load of the same file
        hears only the final 1.0."""
        self._model(model, progress, cancel)

    def _model(
        self, model: str, progress: LoadProgress | None = None, cancel: threading.Event | None = None
    ) -> _LoadedModel:
        path = self.model_path(model)
        with self._lock:
            loaded = self._models.get(path)
            load_lock = self._load_locks.setdefault(path, threading.Lock())
        if loaded is None:
            with load_lock:
                with self._lock:
                    loaded = self._models.get(path)  # another thread may have loaded it meanwhile
                if loaded is None:
                    return self._load(path, progress, cancel)
        if progress is not None:
            progress(1.0)
        return loaded

    def _load(self, path: Path, progress: LoadProgress | None, cancel: threading.Event | None) -> _LoadedModel:
        try:
            info = read_gguf(path)  # missing, unreadable, not GGUF: checked before llama.cpp sees the file
        except GGUFError as e:
            raise BackendError(str(e)) from None
        # The first load of a llama.cpp build on a host is checked in a child process first: a build
        # that crashes there is a message, not this process gone (runtime.backends.llama_build).
        extra_buffers = checked_extra_buffers(path, self.n_threads_batch)
        started = time.perf_counter()
        loaded = _LoadedModel(path, info, progress, cancel, extra_buffers)
        with self._lock:
            self._models[path] = loaded
            self.model_loads += 1
        log.info("loaded %s in %.2f s (%d-token trained context; extra weight buffers %s)", path,
                 time.perf_counter() - started, loaded.n_ctx_train, "on" if extra_buffers else "off")
        return loaded

    def loaded_models(self) -> list[Path]:
        with self._lock:
            return list(self._models)

    def count_tokens(self, model: str, text: str) -> int:
        return len(self._model(model).tokenize(text, special=False))

    def token_text(self, model: str, token: int) -> str:
        """A token's text as the model writes it (``#id`` for an id its vocabulary lacks)."""
        loaded = self._model(model)
        if not 0 <= token < loaded.n_vocab:
            return f"#{token}"
        try:
            return loaded.model.detokenize([token], special=True).decode("utf-8", errors="replace")
        except (AssertionError, OSError, ValueError):  # a piece longer than llama-cpp-python's buffer
            return f"#{token}"

    def tokenize(self, model: str, text: str) -> list[int]:
        return self._model(model).tokenize(text, special=False)

    def render_prompt(self, model: str, messages: Sequence[ChatMessage]) -> str:
        """The prompt exactly as the model reads it (its chat template applied)."""
        return self._model(model).render(messages)

    def count_prompt_tokens(self, model: str, messages: Sequence[ChatMessage]) -> int:
        """The exact length of the rendered prompt, in tokens."""
        return len(self._model(model).prompt_tokens(messages))

    def model_context_size(self, model: str) -> int:
        return self._model(model).n_ctx_train

    # sessions

    def session(self, key: str, model: str, context_size: int) -> LlamaNodeSession:
        loaded = self._model(model)
        if context_size < 0:
            raise BackendError(f"node {key!r}: Context Size must be 0 (the model's own) or positive, not {context_size}")
        if context_size > loaded.n_ctx_train:
            raise BackendError(
                f"node {key!r}: Context Size {context_size} is larger than {loaded.name} supports "
                f"({loaded.n_ctx_train} tokens); lower it, or set 0 to use the model's own size"
            )
        n_ctx = context_size or loaded.n_ctx_train
        with self._lock:
            existing = self._sessions.get(key)
            if existing is not None and existing.model is loaded and existing.n_ctx == n_ctx:
                return existing
        created = LlamaNodeSession(self, key, loaded, n_ctx)
        self._check_budget(created)
        if existing is not None:
            existing.release()
        with self._lock:
            self._sessions[key] = created
        return created

    def sessions(self) -> dict[str, LlamaNodeSession]:
        with self._lock:
            return dict(self._sessions)

    def release(self, key: str) -> None:
        """Free one node's KV cache, parked or spilled too (rebuilt on its next call)."""
        with self._lock:
            s = self._sessions.get(key)
        if s is not None:
            s.release()
        else:
            self.unpark(key)

    def release_all(self) -> None:
        for s in self.sessions().values():
            s.release()

    # the KV budget

    def kv_stats(self) -> KVStats:
        live = [s for s in self.sessions().values() if not s.is_cold]
        with self._lock:
            parks, restores, handovers = self._parks, self._restores, self._handovers
        parked, parked_bytes, spilled, spilled_bytes = self._parked.counts()
        return KVStats(len(live), sum(s.mib for s in live), self.kv_budget_mib, parked, parked_bytes / MIB, parks,
                       restores, handovers, self._parked.budget / MIB, spilled, spilled_bytes / MIB,
                       self._parked.spills, self._parked.failures)

    def _check_budget(self, session: LlamaNodeSession) -> None:
        budget = self.kv_budget_mib
        if budget is None:
            return
        if not session.mib:
            raise BackendError(f"node {session.key!r}: {session.model.name} cannot be sized for the KV budget "
                               f"({budget:g} MiB); run it on a backend without one")
        if session.mib > budget:
            raise BackendError(
                f"node {session.key!r}: its {session.n_ctx}-token context on {session.model.name} needs about "
                f"{session.mib:.0f} MiB, more than the whole KV budget of {budget:g} MiB; raise the budget "
                "or lower the node's Context Size"
            )

    def make_room(self, session: LlamaNodeSession) -> bool:
        """Park the least recently used idle contexts until ``session``'s fits the KV budget, handing
        it the first one of its model and size. True when it has a context or room for one; False
        when what is in the way is in use on other threads. The caller holds ``kv_room`` and
        ``session``'s model lock."""
        assert self.kv_budget_mib is not None
        self._check_budget(session)
        live = [s for s in self.sessions().values() if not s.is_cold and s is not session]
        used = sum(s.mib for s in live)
        for victim in sorted(live, key=lambda s: s.last_used):
            if used + session.mib <= self.kv_budget_mib:
                return True
            # A lock this thread holds (the same model) is taken again; another thread's means the
            # context is in use there, so it is left alone rather than waited for (no lock order).
            if not victim.model.lock.acquire(blocking=False):
                continue
            try:
                if victim.is_cold:  # released meanwhile
                    used -= victim.mib
                    continue
                same = victim.model is session.model and victim.n_ctx == session.n_ctx
                handed = victim.park(hand_over=same)
            finally:
                victim.model.lock.release()
            used -= victim.mib
            with self._lock:
                self._parks += 1
            if handed is not None:
                session.adopt(*handed)
                with self._lock:
                    self._handovers += 1
                return True
        return used + session.mib <= self.kv_budget_mib

    def store_parked(self, parked: ParkedCache) -> None:
        """Keep a node's parked cache until its next call (in RAM, or on disk past ``park_mib``)."""
        self._parked.put(parked)

    def take_parked(self, key: str) -> ParkedCache | None:
        """A parked node's cache, once (its context holds it from then on)."""
        return self._parked.take(key)

    def count_restore(self) -> None:
        with self._lock:
            self._restores += 1

    def unpark(self, key: str) -> None:
        """Forget a node's parked cache, its spilled file too (it is released)."""
        self._parked.forget(key)

    def room_changed(self) -> None:
        """Wake the nodes waiting for room in the KV budget (a call ended, a context was freed)."""
        if self.kv_budget_mib is None:
            return
        with self.kv_room:
            self.kv_room.notify_all()

    def close(self) -> None:
        self._stop.set()
        if self._idle_thread is not None:
            self._idle_thread.join()
            self._idle_thread = None
        self.release_all()
        with self._lock:
            models = list(self._models.values())
            self._models.clear()
            self._sessions.clear()
        self._parked.close()
        for m in models:
            with m.lock:
                m.close()

    # idle release

    def _busy(self, delta: int) -> None:
        with self._lock:
            self._active += delta
            self._last_call = time.monotonic()

    def idle_seconds(self) -> float:
        with self._lock:
            return 0.0 if self._active else time.monotonic() - self._last_call

    def _watch_idle(self) -> None:
        assert self.idle_release_seconds is not None
        period = min(max(self.idle_release_seconds / 4, 0.05), 5.0)
        while not self._stop.wait(period):
            if self.idle_seconds() >= self.idle_release_seconds:
                warm = [s for s in self.sessions().values() if not s.is_cold]
                if warm:
                    log.info("agent idle for %.0f s: freeing %d KV caches", self.idle_seconds(), len(warm))
                    for s in warm:
                        s.release()

    # embeddings

    def embed(self, model: str, texts: Sequence[str]) -> list[list[float]]:
        """One unit-length vector per text, from the model's pooled embeddings (mean pooling
        when the model declares none). Texts longer than the embedding context are cut."""
        loaded = self._model(model)
        with loaded.lock:
            context = self._embedding_context(loaded)
            n_batch = context.n_ctx()
            n_embd = loaded.model.n_embd()
            batch = internals.LlamaBatch(n_tokens=n_batch, embd=0, n_seq_max=1, verbose=True)
            vectors: list[list[float]] = []
            try:
                for text in texts:
                    tokens = loaded.tokenize(text, special=False)[:n_batch] or [loaded.model.token_bos()]
                    context.kv_cache_clear()
                    batch.reset()
                    batch.add_sequence(tokens, 0, True)
                    rc = llama_cpp.llama_decode(context.ctx, batch.batch)
                    if rc != 0:
                        raise BackendError(f"{loaded.name}: llama.cpp could not embed a text (code {rc})")
                    pointer = llama_cpp.llama_get_embeddings_seq(context.ctx, 0)
                    if not pointer:
                        raise BackendError(f"{loaded.name} gave no pooled embedding; is it an embedding model?")
                    vector = [float(v) for v in pointer[:n_embd]]
                    norm = sum(v * v for v in vector) ** 0.5 or 1.0
                    vectors.append([v / norm for v in vector])
            finally:
                context.kv_cache_clear()
                batch.close()
        return vectors

    def _embedding_context(self, loaded: _LoadedModel) -> internals.LlamaContext:
        if loaded.embedding_context is None:
            params = internals.LlamaContext.default_params()
            n_ctx = min(loaded.n_ctx_train, 2048)
            params.n_ctx = n_ctx
            params.n_batch = n_ctx
            params.n_ubatch = n_ctx  # non-causal models need the whole text in one micro-batch
            params.n_seq_max = 1
            params.n_threads = self.n_threads
            params.n_threads_batch = self.n_threads_batch
            params.embeddings = True
            declared = loaded.info.arch_key("pooling_type")
            if declared is None or int(declared) == llama_cpp.LLAMA_POOLING_TYPE_NONE:
                params.pooling_type = llama_cpp.LLAMA_POOLING_TYPE_MEAN
            try:
                loaded.embedding_context = internals.LlamaContext(model=loaded.model, params=params, verbose=True)
            except ValueError:
                raise BackendError(
                    f"not enough memory to create an embedding context for {loaded.name}: {_last_llama_error()}"
                ) from None
        return loaded.embedding_context
