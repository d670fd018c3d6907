"""A Retrieve node's knowledge index: its entries (from the asset and a file beside it), ranked for a query.

Ranking sits behind ``Ranker`` so a backend can offer a better one: BM25 (rank_bm25)
by default; when a node sets ``embedding_model`` and the backend has an
``embed(model, texts) -> list[list[float]]`` method, entries are ranked by cosine
similarity of embeddings instead.

A ranker keeps what it computed for the entries (the BM25 index, the entries'
embeddings), so an agent keeps one :class:`KnowledgeIndex` per Retrieve node and
each turn costs only the query. :func:`knowledge_fingerprint` says when it is stale.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from runtime.files.reading import input_file_problem
from runtime.problems import InputError, Problem

if TYPE_CHECKING:  # pragma: no cover
    from rank_bm25 import BM25Okapi

    from runtime.nodes.retrieve.node import Retrieve

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


def __getattr__(name: str) -> Any:
    """``BM25Okapi``, imported when first asked for: rank_bm25 imports numpy (0.07 s), and loading
    any asset imports this module (the editor, as it starts)."""
    if name == "BM25Okapi":
        from rank_bm25 import BM25Okapi

        globals()["BM25Okapi"] = BM25Okapi
        return BM25Okapi
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _bm25_index_type() -> type[BM25Okapi]:
    return globals().get("BM25Okapi") or __getattr__("BM25Okapi")


class BM25Ranker:
    def __init__(self) -> None:
        # the index of the last entries ranked: a node ranks the same entries every turn
        self._indexed: tuple[Knowledge, ...] = ()
        self._corpus: list[list[str]] = []
        self._index: BM25Okapi | None = None

    def rank(self, query: str, entries: Sequence[Knowledge], top_k: int) -> list[Found]:
        terms = words(query)
        if not entries or not terms:
            return []
        if self._index is None or tuple(entries) != self._indexed:
            self._indexed = tuple(entries)
            self._corpus = [words(e.text) or [""] for e in entries]
            self._index = _bm25_index_type()(self._corpus)
        corpus = self._corpus
        scores = self._index.get_scores(terms)
        # A term in most entries gets a tiny (epsilon) weight; a term in no entry scores 0.
        matched = [
            Found(entry, float(score)) for entry, score, doc in zip(entries, scores, corpus)
            if score > 0 and set(terms) & set(doc)
        ]
        matched.sort(key=lambda f: -f.score)  # stable: ties keep the entries' order
        return matched[:top_k]


Embed = Callable[[str, Sequence[str]], Sequence[Sequence[float]]]


class EmbeddingRanker:
    """Ranks by cosine similarity of embeddings from ``embed(model, texts)``.

    Entry texts are embedded once and kept; each call embeds only the query (in the
    same ``embed`` call as any entry not seen before).
    """

    def __init__(self, embed: Embed, model: str) -> None:
        self._embed = embed
        self._model = model
        self._entry_vectors: dict[str, list[float]] = {}

    def rank(self, query: str, entries: Sequence[Knowledge], top_k: int) -> list[Found]:
        if not entries or not query.strip():
            return []
        texts = list(dict.fromkeys(e.text for e in entries))
        missing = [t for t in texts if t not in self._entry_vectors]
        query_vector, *new = (list(v) for v in self._embed(self._model, [query, *missing]))
        self._entry_vectors.update(zip(missing, new))
        if len(self._entry_vectors) > len(texts):  # entries were edited away: forget their vectors
            self._entry_vectors = {t: self._entry_vectors[t] for t in texts}
        vectors = [self._entry_vectors[e.text] for e in entries]
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


def knowledge_fingerprint(node: Retrieve, asset_dir: str | os.PathLike[str] | None) -> tuple[object, ...]:
    """Everything a node's knowledge and ranking depend on: equal fingerprints, same entries and ranker."""
    stamp: tuple[int, int] | None = None
    if node.source_file and asset_dir is not None:
        try:
            st = (Path(asset_dir) / node.source_file).stat()
            stamp = (st.st_mtime_ns, st.st_size)
        except OSError:
            stamp = None  # load_knowledge reports it
    entries = tuple((e.id, e.text) for e in node.entries)
    return (node.embedding_model, entries, node.source_file, str(asset_dir), stamp)


@dataclass
class KnowledgeIndex:
    """A Retrieve node's entries and the ranker that has already seen them."""

    fingerprint: tuple[object, ...]
    entries: list[Knowledge]
    embedding_model: str
    ranker: Ranker
    warning: str

    def rank(self, query: str, top_k: int) -> list[Found]:
        return self.ranker.rank(query, self.entries, top_k)


def knowledge_index(
    node: Retrieve, asset_dir: str | os.PathLike[str] | None, backend: object, source: str = "",
    previous: KnowledgeIndex | None = None,
) -> KnowledgeIndex:
    """``previous`` while the node's entries, file and embedding model are unchanged; else a new
    index (whose ranker is still the previous one when only the entries changed: the
    entries it has already embedded are not embedded again)."""
    fingerprint = knowledge_fingerprint(node, asset_dir)
    if previous is not None and previous.fingerprint == fingerprint:
        return previous
    entries = load_knowledge(node, asset_dir, source)
    if previous is not None and previous.embedding_model == node.embedding_model:
        return KnowledgeIndex(fingerprint, entries, node.embedding_model, previous.ranker, previous.warning)
    ranker, warning = ranker_for(node, backend)
    return KnowledgeIndex(fingerprint, entries, node.embedding_model, ranker, warning)


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
    refused = input_file_problem(path)
    if refused:  # a device or pipe could be read forever or block
        raise fail(f"cannot read the knowledge file {path}: {refused}")
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
