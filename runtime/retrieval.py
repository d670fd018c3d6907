"""Retrieve nodes: knowledge entries (from the asset and a file beside it), ranked for a query.

Ranking sits behind ``Ranker`` so a backend can offer a better one: BM25 (rank_bm25)
by default; when a node sets ``embedding_model`` and the backend has an
``embed(model, texts) -> list[list[float]]`` method, entries are ranked by cosine
similarity of embeddings instead.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from rank_bm25 import BM25Okapi

from runtime.asset import Retrieve
from runtime.problems import InputError, Problem

_WORD = re.compile(r"\w+", re.UNICODE)
# Words too common to say what an entry is about; without this, "the" matches every entry.
STOP_WORDS = frozenset(
    ["a", "an", "and", "are", "as", "at", "be", "but", "by", "did", "do", "does", "for", "from", "had", "has", "have", "he", "her", "his", "how", "i", "in", "is", "it", "its", "me", "my", "of", "on", "or", "our", "she", "so", "than", "that", "the", "their", "them", "then", "there", "they", "this", "to", "was", "we", "were", "what", "when", "where", "which", "who", "why", "will", "with", "you", "your"]
)


@dataclass(frozen=True)
class Knowledge:
    id: str
    text: str


@dataclass(frozen=True)
class Found:
    entry: Knowledge
    score: float

    def as_slot(self) -> dict[str, Any]:
        """How templates read it: {{#knowledge}}{{text}}{{/knowledge}}."""
        return {"id": self.entry.id, "text": self.entry.text, "score": round(self.score, 4)}


class Ranker(Protocol):
    def rank(self, query: str, entries: Sequence[Knowledge], top_k: int) -> list[Found]:
        """The best ``top_k`` entries for ``query``, best first; only entries that match at all."""


def words(text: str) -> list[str]:
    """The words BM25 ranks by: lower case, without stop words."""
    return [w for w in (m.lower() for m in _WORD.findall(text)) if w not in STOP_WORDS]


class BM25Ranker:
    def rank(self, query: str, entries: Sequence[Knowledge], top_k: int) -> list[Found]:
        terms = words(query)
        if not entries or not terms:
            return []
        corpus = [words(e.text) or [""] for e in entries]
        scores = BM25Okapi(corpus).get_scores(terms)
        # A term in most entries gets a tiny (epsilon) weight; a term in no entry scores 0.
        matched = [
            Found(entry, float(score)) for entry, score, doc in zip(entries, scores, corpus)
            if score > 0 and set(terms) & set(doc)
        ]
        matched.sort(key=lambda f: -f.score)  # stable: ties keep the entries' order
        return matched[:top_k]


class EmbeddingRanker:
    """Ranks by cosine similarity of embeddings from ``embed(model, texts)``."""

    def __init__(self, embed, model: str) -> None:
        self._embed = embed
        self._model = model
        self._cache: dict[str, list[float]] = {}

    def _vectors(self, texts: list[str]) -> list[list[float]]:
        missing = [t for t in dict.fromkeys(texts) if t not in self._cache]
        if missing:
            for text, vector in zip(missing, self._embed(self._model, missing)):
                self._cache[text] = list(vector)
        return [self._cache[t] for t in texts]

    def rank(self, query: str, entries: Sequence[Knowledge], top_k: int) -> list[Found]:
        if not entries or not query.strip():
            return []
        query_vector, *vectors = self._vectors([query] + [e.text for e in entries])
        found = [Found(e, _cosine(query_vector, v)) for e, v in zip(entries, vectors)]
        found = [f for f in found if f.score > 0]
        found.sort(key=lambda f: -f.score)
        return found[:top_k]


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0


def ranker_for(node: Retrieve, backend: object) -> tuple[Ranker, str]:
    """The ranker a node uses, and a warning when it wanted embeddings it cannot have."""
    if node.embedding_model:
        embed = getattr(backend, "embed", None)
        if callable(embed):
            return EmbeddingRanker(embed, node.embedding_model), ""
        return BM25Ranker(), "this backend cannot embed text; ranking with BM25 instead of embedding_model"
    return BM25Ranker(), ""


def load_knowledge(node: Retrieve, asset_dir: str | os.PathLike[str] | None, source: str = "") -> list[Knowledge]:
    """The node's entries, then its source file's. Raises ``InputError`` naming the file and line."""
    entries = [Knowledge(e.id or f"{node.id}[{i}]", e.text) for i, e in enumerate(node.entries)]
    if not node.source_file:
        return entries

    def fail(message: str, file: str = source, line: int = 0) -> InputError:
        return InputError([Problem("error", message, file, node_id=node.id, field="source_file" if not line else "", line=line)])

    if asset_dir is None:
        raise fail("source_file is relative to the asset's folder, but the asset was not loaded from a file; save it first")
    path = Path(asset_dir) / node.source_file
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except OSError as exc:
        raise fail(f"cannot read the knowledge file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise fail(f"the knowledge file {path} is not UTF-8 text (byte {exc.start})") from None

    if path.suffix == ".jsonl":
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except (json.JSONDecodeError, RecursionError) as exc:
                raise fail(f"malformed JSON: {getattr(exc, 'msg', 'nested too deeply')}", str(path), number) from None
            if not isinstance(record, dict) or not isinstance(record.get("text"), str) or not record["text"].strip():
                raise fail('each line is an object with a non-empty "text" string', str(path), number)
            entry_id = record.get("id", "")
            entries.append(Knowledge(str(entry_id) if entry_id else f"{path.name}:{number}", record["text"]))
    elif path.suffix == ".txt":
        paragraphs = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
        entries += [Knowledge(f"{path.name}#{i + 1}", p) for i, p in enumerate(paragraphs)]
    else:
        raise fail(f"knowledge files are .jsonl or .txt, not {path.suffix or 'a file without extension'}")
    return entries
