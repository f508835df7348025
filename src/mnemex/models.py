"""The values mnemex hands out: frozen dataclasses, one word per concept."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from mnemex.text import format_time


def _plain(value: Any) -> Any:
    """A field as JSON: times formatted, tuples as lists, values of this module as dicts."""
    if isinstance(value, datetime):
        return format_time(value)
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value.to_dict() if hasattr(value, "to_dict") else value


def _dump(obj: Any, names: str, *, optional: str = "", **given: Any) -> dict[str, Any]:
    """The attributes ``names`` of ``obj`` in that order as JSON (``given`` replaces a
    value), then those of ``optional`` that are not ``None``."""
    data = {n: given[n] if n in given else _plain(getattr(obj, n)) for n in names.split()}
    for name in optional.split():
        if getattr(obj, name) is not None:
            data[name] = given[name] if name in given else _plain(getattr(obj, name))
    return data


@dataclass(frozen=True, slots=True)
class Location:
    """Where a chunk of a workspace file lives: ``path:start_line-end_line``.

    ``path`` is relative to the workspace folder ``workspace``; lines are
    1-based and inclusive; ``heading`` is the path of markdown headings in
    force at the chunk's first line.
    """

    workspace: str
    path: str
    start_line: int
    end_line: int
    heading: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.path}:{self.start_line}-{self.end_line}"

    def to_dict(self) -> dict[str, Any]:
        return _dump(self, "workspace path start_line end_line heading label")


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
    location: Location | None = None  # for a chunk of a workspace file

    def to_dict(self) -> dict[str, Any]:
        return _dump(
            self,
            "id namespace kind content tags source confidence pinned created_at updated_at "
            "content_hash metadata",
            optional="location",
        )


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
    location: Location | None = None  # for a chunk of a workspace file
    namespace: str = ""

    def to_dict(self) -> dict[str, Any]:
        return _dump(
            self,
            "id namespace score snippet kind tags created_at",
            optional="location explain",
            score=round(self.score, 6),
        )


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
        return _dump(
            self,
            "id namespace subject predicate object confidence source_memory created_at updated_at",
            optional="score",
            score=None if self.score is None else round(self.score, 6),
        )


@dataclass(frozen=True, slots=True)
class SearchResult:
    """Hits best first, plus how they were found.

    ``mode_used`` is the mode that produced the hits (``lexical``, ``vector``
    or ``hybrid``): a hybrid search whose query could not be embedded answers
    lexically and says why in ``notes``. ``stale`` is true when a markdown
    workspace the search reads changed and could not be synced first: the
    hits may miss or misquote its latest text (``notes`` says what to run).
    """

    query: str
    hits: tuple[Hit, ...]
    mode_used: str
    namespace: str
    took_ms: float
    fusion: str | None = None
    notes: tuple[str, ...] = ()
    stale: bool = False
    fusion_version: str | None = None  # the fusion formula's version (mnemex.search.fusion)
    relations: tuple[Relation, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        names = "query namespace mode_used fusion stale notes took_ms hits relations"
        return _dump(self, names, took_ms=round(self.took_ms, 3))


@dataclass(frozen=True, slots=True)
class TimelineEntry:
    """A memory at a glance: when, what kind, tags and a 100-character summary."""

    id: str
    created_at: datetime
    kind: str
    tags: tuple[str, ...]
    summary: str
    namespace: str = ""

    def to_dict(self) -> dict[str, Any]:
        return _dump(self, "id namespace created_at kind tags summary")


@dataclass(frozen=True, slots=True)
class GetResult:
    """Memories in the order their ids were asked for; ``missing`` lists unknown ids."""

    memories: tuple[Memory, ...]
    missing: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return _dump(self, "memories missing")


@dataclass(frozen=True, slots=True)
class ForgetResult:
    """Ids deleted, and ids that did not exist in the namespace."""

    forgotten: tuple[str, ...]
    missing: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return _dump(self, "forgotten missing")


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
        return _dump(
            self,
            "path namespace memories total_memories namespaces kinds oldest newest size_bytes "
            "schema_version tokenizer embedder vectors pending_vectors other_models relations",
        )


@dataclass(frozen=True, slots=True)
class LineError:
    """A JSONL line that could not be imported."""

    line: int
    message: str

    def to_dict(self) -> dict[str, Any]:
        return _dump(self, "line message")


@dataclass(frozen=True, slots=True)
class ImportReport:
    """What an import did: rows added, lines skipped as duplicates, lines rejected."""

    imported: int
    skipped: int
    errors: tuple[LineError, ...]
    ids: tuple[str, ...] = ()
    relations: int = 0

    def to_dict(self) -> dict[str, Any]:
        return _dump(self, "imported skipped relations errors")


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
        names = "id kind content confidence created_at score line tokens cut"
        return _dump(self, names, score=round(self.score, 6))


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
    stale: bool = False  # as SearchResult.stale

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(m.id for m in self.memories)

    def to_dict(self) -> dict[str, Any]:
        return _dump(
            self,
            "task markdown ids memories tokens budget_tokens max_memories skipped mode_used "
            "token_counter stale notes",
        )


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
        return _dump(self, "keep duplicate similarity by", similarity=round(self.similarity, 4))


@dataclass(frozen=True, slots=True)
class DedupReport:
    """What a dedup pass found and, unless ``dry_run``, merged."""

    namespace: str
    checked: int
    pairs: tuple[DuplicatePair, ...]
    dry_run: bool
    moved_to: str

    def to_dict(self) -> dict[str, Any]:
        names = "namespace checked duplicates dry_run moved_to pairs"
        return _dump(self, names, duplicates=len(self.pairs))


@dataclass(frozen=True, slots=True)
class FileProblem:
    """A workspace file that could not be indexed (or a folder that could not be listed)."""

    path: str
    message: str

    def to_dict(self) -> dict[str, Any]:
        return _dump(self, "path message")


@dataclass(frozen=True, slots=True)
class SyncReport:
    """What a sync of a markdown workspace did.

    File counts: ``added``, ``changed`` (new text), ``renamed`` (same text at a
    new path: its chunks moved, nothing re-embedded), ``deleted``, and
    ``unchanged`` (skipped by size and mtime, or read and found to hash the
    same). ``complete`` is false when a time limit stopped the sync with
    ``remaining`` files still to read. ``files`` and ``chunks`` are the totals
    indexed afterwards; ``pending_vectors`` the chunks still without a vector
    for the configured model.
    """

    workspace: str
    namespace: str
    files: int
    chunks: int
    added: int = 0
    changed: int = 0
    renamed: int = 0
    deleted: int = 0
    unchanged: int = 0
    chunks_added: int = 0
    chunks_removed: int = 0
    embedded: int = 0
    reused: int = 0
    pending_vectors: int = 0
    problems: tuple[FileProblem, ...] = ()
    complete: bool = True
    remaining: int = 0
    took_ms: float = 0.0
    embedding_error: str | None = None

    @property
    def touched(self) -> int:
        """Files whose index entry changed."""
        return self.added + self.changed + self.renamed + self.deleted

    def to_dict(self) -> dict[str, Any]:
        return _dump(
            self,
            "workspace namespace files chunks added changed renamed deleted unchanged "
            "chunks_added chunks_removed embedded reused pending_vectors problems complete "
            "remaining took_ms embedding_error",
            took_ms=round(self.took_ms, 3),
        )


@dataclass(frozen=True, slots=True)
class WorkspaceStatus:
    """A markdown workspace as the store holds it, and whether that matches the disk.

    ``files``, ``chunks`` and ``pending_vectors`` are counted from the index
    (``pending_vectors`` is ``None`` without an embedder); ``changed`` is the
    number of files added, edited or deleted on disk since the last sync,
    found by comparing sizes and mtimes now (``None`` when the folder cannot
    be read). ``last_sync`` is the report of the last sync that wrote.
    """

    workspace: str
    namespace: str
    globs: tuple[str, ...]
    ignore: tuple[str, ...]
    exists: bool
    files: int
    chunks: int
    problems: tuple[FileProblem, ...]
    pending_vectors: int | None
    embedder: str | None
    synced_at: datetime | None
    changed: int | None
    last_sync: dict[str, Any] = field(default_factory=dict)

    @property
    def in_sync(self) -> bool:
        return self.exists and self.changed == 0

    def to_dict(self) -> dict[str, Any]:
        return _dump(
            self,
            "workspace namespace globs ignore exists files chunks problems pending_vectors "
            "embedder synced_at changed in_sync last_sync",
        )


@dataclass(frozen=True, slots=True)
class Appended:
    """A memory written through to a workspace's daily file, and the chunks that now hold it.

    ``location`` is the appended entry's place in the file; ``ids`` are the
    chunks whose lines include it (usually one).
    """

    location: Location
    ids: tuple[str, ...]
    sync: SyncReport

    @property
    def id(self) -> str | None:
        return self.ids[0] if self.ids else None

    def to_dict(self) -> dict[str, Any]:
        return _dump(self, "id ids location sync")
