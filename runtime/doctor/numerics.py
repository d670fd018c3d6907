"""Layout probes at llama.cpp's level: does a token get the same numbers when it is read another way?

Each probe loads the model once and, for each setting (flash attention, KV cache type), reads a
short built-in text in one context and hashes the logits of the last token read (the numbers a
sample is drawn from) after reading it:

- the same way twice (a replay that reads the same chunks relies on this);
- at 1 and at 2 threads, both as one chunk and as a single token over 272 cached cells (one query
  over more than 256 cells is where flash attention splits its work by thread);
- in other chunk sizes (24-token chunks against one chunk);
- alone, after the tokens before it, against as the last token of one chunk.

The embedded engine re-reads each node's cache in the chunks its conversation first read, so it
needs only the first to be exact on one machine, and the second to be exact at another thread count.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import llama_cpp
from llama_cpp import _internals as internals

from runtime.backends.llama import install_log_forwarding, llama_context_params
from runtime.backends.llama_build import checked_extra_buffers, model_params
from runtime.models.context_settings import FlashAttention, KVType, context_params
from runtime.problems import BackendError

N_CTX = 1024
CHUNK_TOKENS = 64  # the chunk read whole, in 24-token pieces, or with its last token alone
SPLIT_TOKENS = 24
# Flash attention splits one query's work into a part per thread once it attends to more than 256
# cells (measured on SmolLM2-135M: a token read after 256 cached cells differs at 1 and 2 threads,
# after 255 it does not); the probe reads this many first.
MANY_CELLS = 272
THREADS = (1, 2)

# The settings the probe compares: flash attention off (the default) and on, with each KV type (a
# quantized one without flash attention is refused, and costs nothing).
SETTINGS: tuple[tuple[FlashAttention, KVType], ...] = (
    ("off", "f16"), ("on", "f16"), ("on", "q8_0"), ("on", "q4_0"), ("off", "q8_0"), ("off", "q4_0"))

# The probe's text; the self-test's graph tells its reply node the first part (the inn).
INN = (
    'The Wayside Inn stands where the old north road meets the river track, a long low house of grey '
    'stone with a roof of dark slate and a yard where carters water their horses. Mira has kept it for '
    'eleven winters. She knows which travellers pay in coin and which in stories, which shutters stick in'
    ' the damp, and how many loaves the oven gives before the fire needs feeding again. In the evening '
    'the common room fills with farmers from Brackenford, a pedlar or two, and now and then a soldier '
    'walking home from the border forts with more scars than money. The stew is mutton and barley, the '
    'ale comes from the brewer across the bridge, and the best room looks over the water, where herons '
    'stand in the shallows at dawn.'
)
ROADS = (
    'Guests who ask about the road hear that the ford is safe in summer and deadly after rain, that the '
    "miller's dog bites, and that the ruined tower on the hill is best left alone after dark, whatever "
    'the children say about the treasure in its cellar. Mira keeps a ledger of every guest in a careful '
    'hand: the name they gave, the name she suspects, what they ate, what they broke and what they paid. '
    'Her cousin Tamsin helps in the kitchen on market days and sings while she scrubs the pots, badly but'
    ' with great feeling. The inn has three cats, none of them named, all of them convinced they own the '
    'hearth. In the spring the road floods and nobody comes for a fortnight, and Mira mends the linen, '
    'counts the barrels and writes letters to a sister in the city who never writes back. In the autumn '
    'the drovers come through with their herds, and the yard is loud from dawn to dusk with cattle, dogs '
    'and men arguing about prices. A traveller who arrives late and wet will be given a seat by the fire,'
    ' a bowl of stew and more questions than they would like.'
)
TEXT = f"{INN} {ROADS}"


class SelfTestCancelled(Exception):
    """The self-test was stopped before it finished."""


@dataclass(frozen=True)
class NumericsProbe:
    """What one setting did to the numbers. ``None``: not measured (the setting is not allowed)."""

    flash_attn: FlashAttention
    kv_type: KVType
    allowed: bool
    repeatable: bool | None = None  # the same reading twice gave the same numbers
    thread_invariant: bool | None = None  # 1 and 2 threads gave the same numbers
    split_invariant: bool | None = None  # 24-token chunks gave what one chunk gave
    alone_invariant: bool | None = None  # the last token read alone gave what it gave in its chunk
    seconds: float = 0.0
    note: str = ""  # why it is not allowed, or what failed

    @property
    def name(self) -> str:
        return f"flash attention {self.flash_attn}, {self.kv_type} KV cache"

    @property
    def verdict(self) -> str:
        """``yes`` (exact at any thread count), ``same threads`` (exact at one thread count), ``no``,
        or ``not allowed``."""
        if not self.allowed:
            return "not allowed"
        if not self.repeatable:
            return "no"
        return "yes" if self.thread_invariant else "same threads"

    @property
    def reason(self) -> str:
        if not self.allowed:
            return self.note
        if not self.repeatable:
            return "the same tokens read the same way twice gave other numbers: no replay can be exact"
        threads = ("the same numbers at 1 and 2 threads" if self.thread_invariant else
                   "other numbers at 1 than at 2 threads (one query over more than 256 cached cells)")
        layout = []
        if not self.split_invariant:
            layout.append("chunks of another size")
        if not self.alone_invariant:
            layout.append("a token read alone")
        if layout:
            return (f"{threads}; {' and '.join(layout)} give other numbers, which the engine avoids by "
                    "re-reading each chunk as it was first read")
        return f"{threads} and in any chunk layout"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "name": self.name, "verdict": self.verdict, "reason": self.reason}


def probe_tokens(model: internals.LlamaModel) -> list[int]:
    """The probe's text as tokens: just over ``MANY_CELLS`` of them."""
    tokens = model.tokenize(TEXT.encode("utf-8"), add_bos=False, special=False)
    while len(tokens) <= MANY_CELLS:
        tokens += tokens
    return tokens[: MANY_CELLS + 1]


def probe_numerics(model_path: str | os.PathLike[str],
                   settings: Sequence[tuple[FlashAttention, KVType]] = SETTINGS,
                   cancel: threading.Event | None = None) -> list[NumericsProbe]:
    """Probe each of ``settings`` on the model at ``model_path`` (loaded once). Raises BackendError when
    the model cannot be loaded, ``SelfTestCancelled`` once ``cancel`` is set (between settings)."""
    install_log_forwarding()
    path = Path(model_path)
    try:
        params = model_params(checked_extra_buffers(path, max(THREADS)))
        model = internals.LlamaModel(path_model=str(path), params=params, verbose=True)
    except (ValueError, OSError) as exc:
        raise BackendError(f"{path}: llama.cpp could not load this model for the numerics probe ({exc})") from None
    try:
        tokens = probe_tokens(model)
        probes = []
        for fa, kv in settings:
            if cancel is not None and cancel.is_set():
                raise SelfTestCancelled("the self-test was stopped")
            probes.append(_probe(model, tokens, fa, kv, cancel))
        return probes
    finally:
        model.close()


def _probe(model: internals.LlamaModel, tokens: list[int], flash_attn: FlashAttention, kv_type: KVType,
           cancel: threading.Event | None = None) -> NumericsProbe:
    try:
        params = context_params(N_CTX, kv_type=kv_type, flash_attn=flash_attn)
    except ValueError as exc:
        return NumericsProbe(flash_attn, kv_type, allowed=False, note=str(exc))
    started = time.perf_counter()
    # Everything is read at the fewer threads but the two reads compared with the more: on a loaded
    # machine a read on more threads than the cores free waits at every step for the slowest one.
    fewer, more = THREADS
    reader = _Reader(model, llama_context_params(params, fewer, fewer), params.n_batch, cancel)
    try:
        few, many = tokens[:CHUNK_TOKENS], tokens[: MANY_CELLS + 1]
        whole = reader.read(few, [CHUNK_TOKENS])
        # One query over many cells, at each thread count, on the same cached cells:
        reader.read(many[:MANY_CELLS], [MANY_CELLS - CHUNK_TOKENS], keep=CHUNK_TOKENS)
        generated = [reader.read(many, [1], keep=MANY_CELLS)]
        reader.threads(more)
        generated.append(reader.read(many, [1], keep=MANY_CELLS))
        more_threads = reader.read(few, [CHUNK_TOKENS])
        reader.threads(fewer)
        again = reader.read(few, [CHUNK_TOKENS])
        alone = reader.read(few, [1], keep=CHUNK_TOKENS - 1)
        split = reader.read(few, [SPLIT_TOKENS] * (CHUNK_TOKENS // SPLIT_TOKENS) + [CHUNK_TOKENS % SPLIT_TOKENS])
    except BackendError as exc:
        return NumericsProbe(flash_attn, kv_type, allowed=True, repeatable=False,
                             seconds=time.perf_counter() - started, note=str(exc))
    finally:
        reader.close()
    return NumericsProbe(
        flash_attn, kv_type, allowed=True,
        repeatable=whole == again,
        thread_invariant=more_threads == whole and len(set(generated)) == 1,
        split_invariant=split == whole,
        alone_invariant=alone == whole,
        seconds=time.perf_counter() - started,
    )


class _Reader:
    """One context that reads a token list in given chunk sizes and hashes the last token's logits."""

    def __init__(self, model: internals.LlamaModel, params: llama_cpp.llama_context_params, n_batch: int,
                 cancel: threading.Event | None = None) -> None:
        self.n_vocab = model.n_vocab()
        self.cancel = cancel
        try:
            self.context = internals.LlamaContext(model=model, params=params, verbose=True)
        except ValueError as exc:
            raise BackendError(f"llama.cpp could not create a probe context ({exc})") from None
        self.batch = internals.LlamaBatch(n_tokens=n_batch, embd=0, n_seq_max=1, verbose=True)
        self.held = 0

    def threads(self, n: int) -> None:
        llama_cpp.llama_set_n_threads(self.context.ctx, n, n)

    def read(self, tokens: Sequence[int], chunks: Sequence[int], keep: int = 0) -> str:
        """Keep the first ``keep`` cells, read ``tokens`` from there in ``chunks`` (sizes, the last
        ones up to the end), and return the hash of the last token's logits."""
        if keep < self.held:
            self.context.kv_cache_seq_rm(0, keep, -1)
        self.held = keep
        for size in [c for c in chunks if c]:
            if self.cancel is not None and self.cancel.is_set():
                raise SelfTestCancelled("the self-test was stopped")
            piece = list(tokens[self.held : self.held + size])
            self.batch.set_batch(piece, self.held, False)
            code = llama_cpp.llama_decode(self.context.ctx, self.batch.batch)
            if code != 0:
                raise BackendError(f"llama.cpp could not read a probe chunk (code {code})")
            self.held += len(piece)
        if self.held != len(tokens):
            raise AssertionError(f"probe layout {list(chunks)} read {self.held} of {len(tokens)} tokens")
        logits = llama_cpp.llama_get_logits_ith(self.context.ctx, -1)
        return hashlib.sha256(ctypes.string_at(logits, self.n_vocab * 4)).hexdigest()

    def close(self) -> None:
        self.batch.close()
        self.context.close()

