"""The values mnemex hands out: frozen dataclasses, one word per concept.

The values of search and recall, and :class:`Memory`, are defined here; those of
the other operations (writes, reads by id, relations, stats, imports, dedup,
workspaces) in :mod:`mnemex.results`: a process that only searches (the prompt
hook) does not pay for creating their classes.
"""

from __future__ import annotations

from dataclasses import field
from datetime import datetime
from typing import Any

from mnemex.records import dataclass
from mnemex.text import json_fields


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
        return json_fields(self, "workspace path start_line end_line heading label")


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
        return json_fields(
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
        return json_fields(
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
        return json_fields(
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
    # What the relevance floor decided (mnemex.search.pipeline.floor_decision): whether the
    # query passed its gate, the best scores and the cut-offs; None when no floor applied.
    floor: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        names = "query namespace mode_used fusion stale notes took_ms hits relations"
        return json_fields(self, names, took_ms=round(self.took_ms, 3))


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
    tags: tuple[str, ...] = ()  # the memory's tags (not in to_dict: the block does not show them)

    def to_dict(self) -> dict[str, Any]:
        names = "id kind content confidence created_at score line tokens cut"
        return json_fields(self, names, score=round(self.score, 6))


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
    floor: dict[str, Any] | None = None  # as SearchResult.floor

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(m.id for m in self.memories)

    def to_dict(self) -> dict[str, Any]:
        return json_fields(
            self,
            "task markdown ids memories tokens budget_tokens max_memories skipped mode_used "
            "token_counter stale notes",
        )
