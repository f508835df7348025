"""What the MCP tools return: compact, typed values an agent reads as JSON.

Each tool's result is one of the ``*Output`` models below; the SDK publishes
its JSON schema as the tool's ``outputSchema`` and sends the value both as
structured content and, for clients that read only text, as the same JSON
without whitespace. Results are cut for an agent's context window: times to
the second, scores to three decimals, search snippets to ``SNIPPET_CHARS``,
empty optional fields left out, and no field that only repeats the server's
namespace or a content hash.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, TypeVar

from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel

from mnemex import models, results
from mnemex.text import clip

M = TypeVar("M", bound=BaseModel)
SNIPPET_CHARS = 300  # about 75 tokens: a search hit stays within 50-100 tokens


def when(moment: datetime) -> str:
    """UTC ISO 8601 to the second: ``2026-09-01T09:14:00Z``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Hit(BaseModel):
    """A search hit: enough to decide whether to read the memory with memory_get."""

    id: str
    score: float
    snippet: str
    kind: str
    tags: list[str]
    created_at: str
    location: str | None = None  # path:start-end of a markdown workspace chunk


class Relation(BaseModel):
    """``subject -[predicate]-> object``, with how sure it is and where it came from."""

    id: str
    subject: str
    predicate: str
    object: str
    confidence: float
    source_memory: str | None = None
    score: float | None = None


class SearchOutput(BaseModel):
    hits: list[Hit]
    relations: list[Relation]
    mode_used: str
    notes: list[str] | None = None
    stale: bool | None = None  # true: workspace files changed and could not be synced


class Entry(BaseModel):
    """A memory at a glance: when, what kind, tags and a 100-character summary."""

    id: str
    created_at: str
    kind: str
    tags: list[str]
    summary: str


class TimelineOutput(BaseModel):
    entries: list[Entry]


class Memory(BaseModel):
    """One memory in full."""

    id: str
    kind: str
    content: str
    tags: list[str]
    source: str | None = None
    confidence: float
    pinned: bool
    created_at: str
    updated_at: str
    metadata: dict[str, Any] | None = None
    location: str | None = None


class GetOutput(BaseModel):
    memories: list[Memory]
    missing: list[str]


class RecallOutput(BaseModel):
    markdown: str
    ids: list[str]
    tokens: int
    budget_tokens: int
    mode_used: str
    notes: list[str] | None = None
    stale: bool | None = None


class AddOutput(BaseModel):
    id: str
    deduplicated: bool
    similarity: float | None = None
    by: str | None = None
    warning: str | None = None


class UpdateOutput(BaseModel):
    id: str
    tags: list[str]
    confidence: float
    pinned: bool
    updated_at: str


class ForgetOutput(BaseModel):
    forgotten: list[str]
    missing: list[str]


class RelateOutput(BaseModel):
    relation: Relation


class StatsOutput(BaseModel):
    namespace: str
    memories: int
    kinds: dict[str, int]
    oldest: str | None = None
    newest: str | None = None
    embedder: str | None = None
    vectors: int
    pending_vectors: int
    relations: int


def tool_result(value: BaseModel) -> CallToolResult:
    """The structured value, and the same JSON as text for clients that read only text."""
    data = value.model_dump(mode="json", exclude_none=True)
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)


def _pick(model: type[M], source: Any, **given: Any) -> M:
    """``model`` filled from the same-named attributes of ``source``; ``given`` replaces them."""
    names = [name for name in model.model_fields if name not in given]
    return model(**{name: getattr(source, name) for name in names}, **given)


def _label(location: models.Location | None) -> str | None:
    return None if location is None else location.label


def search_output(result: models.SearchResult) -> SearchOutput:
    hits = [
        _pick(
            Hit,
            h,
            score=round(h.score, 3),
            snippet=clip(" ".join(h.snippet.split()), SNIPPET_CHARS),
            created_at=when(h.created_at),
            location=_label(h.location),
        )
        for h in result.hits
    ]
    relations = [relation(r) for r in result.relations]
    return _pick(SearchOutput, result, hits=hits, relations=relations, **_notes(result))


def _notes(result: models.SearchResult | models.RecallResult) -> dict[str, Any]:
    return {"notes": list(result.notes) or None, "stale": result.stale or None}


def relation(found: models.Relation) -> Relation:
    return _pick(Relation, found, score=None if found.score is None else round(found.score, 3))


def timeline_output(entries: list[results.TimelineEntry]) -> TimelineOutput:
    return TimelineOutput(entries=[_pick(Entry, e, created_at=when(e.created_at)) for e in entries])


def get_output(result: results.GetResult) -> GetOutput:
    memories = [
        _pick(
            Memory,
            m,
            created_at=when(m.created_at),
            updated_at=when(m.updated_at),
            metadata=m.metadata or None,
            location=_label(m.location),
        )
        for m in result.memories
    ]
    return GetOutput(memories=memories, missing=list(result.missing))


def recall_output(result: models.RecallResult) -> RecallOutput:
    return _pick(RecallOutput, result, **_notes(result))


def add_output(added: results.Added, warning: str | None) -> AddOutput:
    similarity = None if added.similarity is None else round(added.similarity, 3)
    return _pick(AddOutput, added, similarity=similarity, warning=warning)


def update_output(memory: models.Memory) -> UpdateOutput:
    return _pick(UpdateOutput, memory, updated_at=when(memory.updated_at))


def stats_output(stats: results.Stats) -> StatsOutput:
    oldest, newest = stats.oldest, stats.newest
    return _pick(
        StatsOutput,
        stats,
        oldest=None if oldest is None else when(oldest),
        newest=None if newest is None else when(newest),
    )
