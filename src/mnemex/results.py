"""The values of the operations other than search and recall: writes, reads by id,
relations, stats, imports, dedup and markdown workspaces.

:mod:`mnemex.models` hands them out as its own; they are defined apart so that a
process that only searches (the prompt hook) does not create their classes.
"""

from __future__ import annotations

from dataclasses import field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from mnemex.records import dataclass
from mnemex.text import json_fields

if TYPE_CHECKING:
    from mnemex.models import Location, Memory


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
        return json_fields(self, "id namespace created_at kind tags summary")


@dataclass(frozen=True, slots=True)
class GetResult:
    """Memories in the order their ids were asked for; ``missing`` lists unknown ids."""

    memories: tuple[Memory, ...]
    missing: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return json_fields(self, "memories missing")


@dataclass(frozen=True, slots=True)
class ForgetResult:
    """Ids deleted, and ids that did not exist in the namespace."""

    forgotten: tuple[str, ...]
    missing: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return json_fields(self, "forgotten missing")


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
        return json_fields(
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
        return json_fields(self, "line message")


@dataclass(frozen=True, slots=True)
class ImportReport:
    """What an import did: rows added, lines skipped as duplicates, lines rejected."""

    imported: int
    skipped: int
    errors: tuple[LineError, ...]
    ids: tuple[str, ...] = ()
    relations: int = 0
    # Of the memories skipped, those whose id is a memory of another namespace, by namespace
    # (ids are the store's: `new_ids` imports them as new memories).
    skipped_in: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return json_fields(self, "imported skipped skipped_in relations errors")


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
        return json_fields(
            self, "keep duplicate similarity by", similarity=round(self.similarity, 4)
        )


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
        return json_fields(self, names, duplicates=len(self.pairs))


@dataclass(frozen=True, slots=True)
class FileProblem:
    """A workspace file that could not be indexed (or a folder that could not be listed)."""

    path: str
    message: str

    def to_dict(self) -> dict[str, Any]:
        return json_fields(self, "path message")


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
        return json_fields(
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
        return json_fields(
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
        return json_fields(self, "id ids location sync")


@dataclass(frozen=True, slots=True)
class Injected:
    """A memory the prompt hook weighed for a prompt: its score, and whether it went into
    the block (``reason`` says why not: ``own session``, ``did not fit``)."""

    id: str
    kind: str
    score: float
    injected: bool
    line: str = ""
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return json_fields(self, "id kind score injected line reason", score=round(self.score, 6))


@dataclass(frozen=True, slots=True)
class Injection:
    """One prompt the hooks answered: the block injected into it (``outcome``
    ``injected``), or why nothing was (``nothing``), and the scores that decided it.

    ``id`` numbers the entries in the order logged (:meth:`mnemex.Store.log_injection`);
    ``floor`` is the relevance floor's decision (:attr:`mnemex.models.SearchResult.floor`).
    """

    id: int
    created_at: datetime
    namespace: str
    agent: str
    session_id: str
    event: str
    prompt: str
    outcome: str
    block: str = ""
    tokens: int = 0
    budget_tokens: int = 0
    mode_used: str = ""
    notes: tuple[str, ...] = ()
    memories: tuple[Injected, ...] = ()
    floor: dict[str, Any] | None = None

    @property
    def injected(self) -> tuple[Injected, ...]:
        """The memories that went into the block, in its order."""
        return tuple(m for m in self.memories if m.injected)

    def to_dict(self) -> dict[str, Any]:
        return json_fields(
            self,
            "id created_at namespace agent session_id event prompt outcome block tokens "
            "budget_tokens mode_used notes memories floor",
        )


@dataclass(frozen=True, slots=True)
class InjectionSession:
    """An agent session in the injection log: its prompts, and how many got a block."""

    session_id: str
    agent: str
    namespace: str
    prompts: int
    injected: int
    first_at: datetime
    last_at: datetime

    def to_dict(self) -> dict[str, Any]:
        return json_fields(self, "session_id agent namespace prompts injected first_at last_at")


@dataclass(frozen=True, slots=True)
class Pending:
    """A memory to embed: its seq, its text and the text's hash."""

    seq: int
    content: str
    content_hash: str


@dataclass(slots=True)
class EmbedReport:
    """What an embedding pass did."""

    model: str
    embedded: int = 0  # texts run through the model
    reused: int = 0  # vectors copied from identical content
    pending: int = 0  # memories still without a vector for the model
    error: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "model": self.model,
            "embedded": self.embedded,
            "reused": self.reused,
            "pending": self.pending,
            "error": self.error,
        }
