"""The values mnemex hands out: frozen dataclasses, one word per concept."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from mnemex.text import format_time


@dataclass(frozen=True, slots=True)
class Memory:
    """One stored memory, in full."""

    id: str
    namespace: str
    kind: str
    content: str
    tags: tuple[str, ...]
    source: str | None
    confidence: float
    pinned: bool
    created_at: datetime
    updated_at: datetime
    content_hash: str
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "namespace": self.namespace,
            "kind": self.kind,
            "content": self.content,
            "tags": list(self.tags),
            "source": self.source,
            "confidence": self.confidence,
            "pinned": self.pinned,
            "created_at": format_time(self.created_at),
            "updated_at": format_time(self.updated_at),
            "content_hash": self.content_hash,
            "metadata": self.metadata,
        }


@dataclass(frozen=True, slots=True)
class Hit:
    """One search result: enough to decide whether to ``get`` the memory."""

    id: str
    score: float
    snippet: str
    kind: str
    tags: tuple[str, ...]
    created_at: datetime
    explain: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": self.id,
            "score": round(self.score, 6),
            "snippet": self.snippet,
            "kind": self.kind,
            "tags": list(self.tags),
            "created_at": format_time(self.created_at),
        }
        if self.explain is not None:
            data["explain"] = self.explain
        return data


@dataclass(frozen=True, slots=True)
class Relation:
    """One relation; ``score`` is set when it comes from a search, in [0, 1), higher is better."""

    id: str
    namespace: str
    subject: str
    predicate: str
    object: str
    confidence: float
    source_memory: str | None
    created_at: datetime
    updated_at: datetime
    score: float | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": self.id,
            "namespace": self.namespace,
            "subject": self.subject,
            "predicate": self.predicate,
            "object": self.object,
            "confidence": self.confidence,
            "source_memory": self.source_memory,
            "created_at": format_time(self.created_at),
            "updated_at": format_time(self.updated_at),
        }
        if self.score is not None:
            data["score"] = round(self.score, 6)
        return data


@dataclass(frozen=True, slots=True)
class SearchResult:
    """Hits best first, plus how they were found.

    ``mode_used`` is the mode that produced the hits (``lexical``, ``vector``
    or ``hybrid``): a hybrid search whose query could not be embedded answers
    lexically and says why in ``notes``.
    """

    query: str
    hits: tuple[Hit, ...]
    mode_used: str
    namespace: str
    took_ms: float
    fusion: str | None = None
    notes: tuple[str, ...] = ()
    relations: tuple[Relation, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "namespace": self.namespace,
            "mode_used": self.mode_used,
            "fusion": self.fusion,
            "notes": list(self.notes),
            "took_ms": round(self.took_ms, 3),
            "hits": [h.to_dict() for h in self.hits],
            "relations": [r.to_dict() for r in self.relations],
        }


@dataclass(frozen=True, slots=True)
class TimelineEntry:
    """A memory at a glance: when, what kind, tags and a 100-character summary."""

    id: str
    created_at: datetime
    kind: str
    tags: tuple[str, ...]
    summary: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "created_at": format_time(self.created_at),
            "kind": self.kind,
            "tags": list(self.tags),
            "summary": self.summary,
        }


@dataclass(frozen=True, slots=True)
class GetResult:
    """Memories in the order their ids were asked for; ``missing`` lists unknown ids."""

    memories: tuple[Memory, ...]
    missing: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"memories": [m.to_dict() for m in self.memories], "missing": list(self.missing)}


@dataclass(frozen=True, slots=True)
class ForgetResult:
    """Ids deleted, and ids that did not exist in the namespace."""

    forgotten: tuple[str, ...]
    missing: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"forgotten": list(self.forgotten), "missing": list(self.missing)}


@dataclass(frozen=True, slots=True)
class Stats:
    """What is in the store."""

    path: str
    namespace: str
    memories: int
    total_memories: int
    namespaces: dict[str, int]
    kinds: dict[str, int]
    oldest: datetime | None
    newest: datetime | None
    size_bytes: int
    schema_version: int
    tokenizer: str
    embedder: str | None = None
    vectors: int = 0
    pending_vectors: int = 0
    other_models: dict[str, int] = field(default_factory=dict)
    relations: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "namespace": self.namespace,
            "memories": self.memories,
            "total_memories": self.total_memories,
            "namespaces": self.namespaces,
            "kinds": self.kinds,
            "oldest": format_time(self.oldest) if self.oldest else None,
            "newest": format_time(self.newest) if self.newest else None,
            "size_bytes": self.size_bytes,
            "schema_version": self.schema_version,
            "tokenizer": self.tokenizer,
            "embedder": self.embedder,
            "vectors": self.vectors,
            "pending_vectors": self.pending_vectors,
            "other_models": self.other_models,
            "relations": self.relations,
        }


@dataclass(frozen=True, slots=True)
class LineError:
    """A JSONL line that could not be imported."""

    line: int
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"line": self.line, "message": self.message}


@dataclass(frozen=True, slots=True)
class ImportReport:
    """What an import did: rows added, lines skipped as duplicates, lines rejected."""

    imported: int
    skipped: int
    errors: tuple[LineError, ...]
    ids: tuple[str, ...] = ()
    relations: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "imported": self.imported,
            "skipped": self.skipped,
            "relations": self.relations,
            "errors": [e.to_dict() for e in self.errors],
        }


@dataclass(frozen=True, slots=True)
class Recalled:
    """A memory in a recall block: the line as rendered and what it was made from."""

    id: str
    kind: str
    content: str
    confidence: float
    created_at: datetime
    score: float
    line: str
    tokens: int
    cut: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "content": self.content,
            "confidence": self.confidence,
            "created_at": format_time(self.created_at),
            "score": round(self.score, 6),
            "line": self.line,
            "tokens": self.tokens,
            "cut": self.cut,
        }


@dataclass(frozen=True, slots=True)
class RecallResult:
    """The ``## Relevant Memories`` block for a task, and the memories in it.

    ``tokens`` is the block's size by the counter used (never above
    ``budget_tokens``); ``skipped`` counts ranked memories left out because
    they did not fit.
    """

    task: str
    markdown: str
    memories: tuple[Recalled, ...]
    tokens: int
    budget_tokens: int
    max_memories: int
    skipped: int
    mode_used: str
    token_counter: str
    notes: tuple[str, ...] = ()

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(m.id for m in self.memories)

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "markdown": self.markdown,
            "ids": list(self.ids),
            "memories": [m.to_dict() for m in self.memories],
            "tokens": self.tokens,
            "budget_tokens": self.budget_tokens,
            "max_memories": self.max_memories,
            "skipped": self.skipped,
            "mode_used": self.mode_used,
            "token_counter": self.token_counter,
            "notes": list(self.notes),
        }


@dataclass(frozen=True, slots=True)
class Added:
    """The outcome of one write: the id to use, and whether it merged into an existing memory.

    When ``deduplicated`` is true, ``id`` is the existing memory's id and
    ``similarity`` / ``by`` say how closely the new text repeated it
    (``exact``, ``text`` or ``cosine``).
    """

    id: str
    deduplicated: bool = False
    similarity: float | None = None
    by: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"id": self.id, "deduplicated": self.deduplicated}
        if self.deduplicated:
            data["similarity"] = round(self.similarity or 0.0, 4)
            data["by"] = self.by
        return data


@dataclass(frozen=True, slots=True)
class DuplicatePair:
    """A memory found to repeat an older one."""

    keep: str
    duplicate: str
    similarity: float
    by: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "keep": self.keep,
            "duplicate": self.duplicate,
            "similarity": round(self.similarity, 4),
            "by": self.by,
        }


@dataclass(frozen=True, slots=True)
class DedupReport:
    """What a dedup pass found and, unless ``dry_run``, merged."""

    namespace: str
    checked: int
    pairs: tuple[DuplicatePair, ...]
    dry_run: bool
    moved_to: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "checked": self.checked,
            "duplicates": len(self.pairs),
            "dry_run": self.dry_run,
            "moved_to": self.moved_to,
            "pairs": [p.to_dict() for p in self.pairs],
        }
