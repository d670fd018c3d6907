"""Retrieve: finds the knowledge entries that best match a line and puts them in a slot.

Ranking (BM25, or embeddings when an embedding model is set) and loading knowledge files are
``runtime.nodes.retrieve.index``; the index is built once per node and kept across turns.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field

from runtime.diagnostics import NodeInput, PromptMessage, RetrievedEntry
from runtime.nodes.base import END, OPTIONAL_SLOT_PATTERN, SLOT_PATTERN, NodeBase, Strict, field_help
from runtime.nodes.checks import NodeChecks
from runtime.nodes.retrieve.index import knowledge_index
from runtime.nodes.running import NodeRun


class KnowledgeEntry(Strict):
    id: str = Field("", description="Optional id shown in diagnostics.")
    text: str = Field(min_length=1, description="The fact, as the model should read it.")

    @classmethod
    def new_record(cls, number: int) -> dict[str, Any]:
        return {"id": f"fact_{number}", "text": "A new fact."}


class Retrieve(NodeBase):
    type: Literal["Retrieve"] = "Retrieve"
    entries: list[KnowledgeEntry] = Field(default_factory=list, **field_help("Knowledge written in the asset.", "Knowledge"))
    source_file: str = Field("", **field_help("A .jsonl (one {\"text\": ...} per line) or .txt (one entry per paragraph) file beside the asset.", "Knowledge"))
    query: str = Field("", pattern=OPTIONAL_SLOT_PATTERN, **field_help("Slot used as the search query. Empty uses the player's line.", "Knowledge"))
    top_k: int = Field(3, ge=1, le=100, **field_help("How many entries to retrieve.", "Knowledge"))
    slot: str = Field("knowledge", pattern=SLOT_PATTERN, **field_help("Where the entries go; templates read them as {{#knowledge}}{{text}}{{/knowledge}}.", "Knowledge"))
    embedding_model: str = Field("", **field_help("An embedding GGUF to rank by similarity. Empty ranks with BM25.", "Knowledge"))
    default_exit: str = Field(END, **field_help("Node that runs next. Empty ends the turn.", "Exits"))

    def exits(self) -> dict[str, str]:
        return {"default_exit": self.default_exit}

    def run(self, run: NodeRun) -> str:
        # kept across turns: the entries are embedded (or indexed) once, not every turn
        cache = run.cache()
        index = knowledge_index(self, run.asset_dir, run.backend, run.source, cache.get("index"))
        cache["index"] = index
        query = run.line(self.query, "query")
        if index.warning:
            run.diag.warnings.append(index.warning)
        found = index.rank(query, self.top_k)
        run.turn.slots[self.slot] = [f.as_slot() for f in found]
        run.diag.input = NodeInput(prompt=[PromptMessage(role="user", content=query)])
        run.diag.retrieved = [RetrievedEntry(**f.as_slot()) for f in found]
        run.diag.output = "\n".join(f.entry.text for f in found)
        return "default_exit"

    CHECK_READS_FILES: ClassVar[bool] = True  # the knowledge file may appear or go between edits

    def check(self, checks: NodeChecks) -> None:
        if not self.entries and not self.source_file:
            checks.warning("no knowledge: add entries or a source file", "entries")
        if self.source_file and checks.asset_dir is not None:
            path = Path(checks.asset_dir) / self.source_file
            if not path.is_file():
                checks.error(f"knowledge file not found: {path}", "source_file")
            elif path.suffix not in (".jsonl", ".txt"):
                checks.error("knowledge files are .jsonl or .txt", "source_file")
