"""A node's decode journal: the chunks that built what its KV cache holds, in order.

llama.cpp's CPU kernels give a token slightly different numbers in a different batch layout
(read alone or in a chunk, and with flash attention in chunks of another size), so a cache is
only reproducible if it is rebuilt the way it was first built. A journal records that way:
each chunk's tokens exactly as one ``llama_decode`` call read them, and how many of its cells
the cache still holds. Generated tokens, decoded one at a time, are one ``singles`` chunk.

Chunks are contiguous: a chunk starts where the kept cells of the one before it end. Cutting
the cache back keeps a prefix of the journal (the chunk it cuts through keeps fewer cells).
Two journals hold the same numbers up to :meth:`DecodeJournal.shared`; past it a cache must be
rebuilt chunk by chunk (a whole chunk at once, as it was first read, then cut to its kept cells).

Journals are immutable and share their chunks, so every turn of a conversation tree can keep
the journal its nodes had after it for the price of the chunks it added.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

# A journal in a file holds at most this many tokens per node (a context is far smaller).
MAX_JOURNAL_TOKENS = 1 << 20


@dataclass(frozen=True)
class Chunk:
    """Tokens read by one ``llama_decode`` call (``singles``: each token by a call of its own), of
    which the first ``kept`` cells are still held."""

    tokens: tuple[int, ...]
    kept: int
    singles: bool = False

    def __post_init__(self) -> None:
        if not 0 < self.kept <= len(self.tokens):
            raise ValueError(f"a chunk of {len(self.tokens)} tokens cannot keep {self.kept}")

    @property
    def held(self) -> tuple[int, ...]:
        return self.tokens[: self.kept]


@dataclass(frozen=True)
class DecodeJournal:
    chunks: tuple[Chunk, ...] = ()

    @cached_property
    def length(self) -> int:
        """Cells the cache holds."""
        return sum(c.kept for c in self.chunks)

    @cached_property
    def largest_token(self) -> int:
        """The largest token id in it (-1 when empty): a journal from a model with a larger vocabulary
        holds ids this model cannot read."""
        return max((max(c.tokens) for c in self.chunks), default=-1)

    @cached_property
    def extent(self) -> int:
        """How many cells a cache needs to rebuild it (whole chunks are read, then cut)."""
        return max((at + len(c.tokens) for at, c in zip(self.starts(), self.chunks)), default=0)

    def tokens(self) -> list[int]:
        """The tokens the cache holds, in order."""
        out: list[int] = []
        for c in self.chunks:
            out.extend(c.held)
        return out

    def starts(self) -> list[int]:
        """Where each chunk starts."""
        out, at = [], 0
        for c in self.chunks:
            out.append(at)
            at += c.kept
        return out

    def cut(self, n: int) -> DecodeJournal:
        """The journal of the cache cut back to its first ``n`` cells."""
        if n >= self.length:
            return self
        kept: list[Chunk] = []
        at = 0
        for c in self.chunks:
            if at >= n:
                break
            if at + c.kept <= n:
                kept.append(c)
            elif c.singles:  # each cell was read alone: the rest of the run is simply not there
                kept.append(Chunk(c.tokens[: n - at], n - at, True))
            else:  # the chunk was read whole: remember all of it, to read it again the same way
                kept.append(Chunk(c.tokens, n - at))
            at += c.kept
        return DecodeJournal(tuple(kept))

    def then(self, chunks: Iterable[Chunk]) -> DecodeJournal:
        """This journal with ``chunks`` read after it."""
        added = tuple(chunks)
        return DecodeJournal(self.chunks + added) if added else self

    def then_read(self, tokens: Sequence[int], singles: bool = False) -> DecodeJournal:
        return self.then([Chunk(tuple(tokens), len(tokens), singles)]) if tokens else self

    def shared(self, other: DecodeJournal) -> int:
        """How many leading cells both journals compute identically (a cache holding ``other`` may
        keep them to hold this one)."""
        at = 0
        for mine, theirs in zip(self.chunks, other.chunks):
            if mine.singles != theirs.singles:
                return at
            if mine.singles:
                n = common_prefix(mine.held, theirs.held)
                at += n
                if n < mine.kept or mine.kept != theirs.kept:
                    return at
                continue
            if mine.tokens != theirs.tokens:
                return at
            if theirs.kept < mine.kept:
                return at  # the missing cells need the whole chunk read again from its start
            at += mine.kept
            if theirs.kept != mine.kept:
                return at
        return at

    def rebuild_from(self, n: int) -> tuple[int, list[Chunk]]:
        """How to make a cache that holds this journal's first ``n`` cells hold all of it: the
        position to cut back to (at most ``n``), and the chunks to read from there, whole."""
        at = 0
        for index, c in enumerate(self.chunks):
            end = at + c.kept
            if n < end:
                if c.singles:
                    rest = Chunk(c.tokens[n - at : c.kept], c.kept - (n - at), True)
                    return n, [rest, *self.chunks[index + 1 :]]
                return at, list(self.chunks[index:])
            at = end
        return self.length, []

    # --- files ----------------------------------------------------------------------------------

    def change_from(self, before: DecodeJournal) -> dict[str, Any]:
        """This journal as a change of ``before``: cut it to ``keep`` cells, then read ``chunks``."""
        keep = 0
        index = 0
        for mine, theirs in zip(self.chunks, before.chunks):
            if mine != theirs:
                break
            keep += mine.kept
            index += 1
        rest = list(self.chunks[index:])
        if rest and index < len(before.chunks):
            theirs = before.chunks[index]
            mine = rest[0]
            shorter = mine.singles == theirs.singles and mine.kept < theirs.kept
            if shorter and (mine.tokens == theirs.tokens or (mine.singles and theirs.held[: mine.kept] == mine.held)):
                keep += mine.kept  # the same chunk, cut shorter
                rest.pop(0)
        return {"keep": keep, "chunks": [chunk_json(c) for c in rest]}

    def __len__(self) -> int:
        return self.length


EMPTY = DecodeJournal()


def apply_change(before: DecodeJournal, change_keep: int, chunks: Sequence[Chunk]) -> DecodeJournal:
    """The inverse of :meth:`DecodeJournal.change_from`."""
    return before.cut(change_keep).then(chunks)


def chunk_json(c: Chunk) -> dict[str, Any]:
    out: dict[str, Any] = {"tokens": list(c.tokens)}
    if c.kept != len(c.tokens):
        out["kept"] = c.kept
    if c.singles:
        out["singles"] = True
    return out


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens ``a`` and ``b`` share."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n
