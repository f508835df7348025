"""A memory row: the columns of the memories table, and validating input into them."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, Final

from mnemex.config import DEFAULT_CONFIDENCE, DEFAULT_KIND
from mnemex.errors import InvalidInput
from mnemex.models import Memory
from mnemex.text import (
    clean_confidence,
    clean_content,
    clean_id,
    clean_label,
    clean_metadata,
    clean_name,
    clean_namespace,
    clean_tags,
    content_hash,
    format_time,
    new_id,
    parse_stored_time,
    parse_time,
    segment,
    tags_columns,
    utcnow,
)

UNSET: Final = object()  # a field update() leaves as it is (None is a value: "no source")

FIELDS: Final = (
    "id, namespace, kind, content, tags, source, confidence, pinned, "
    "created_at, updated_at, content_hash, metadata"
)
"""The columns a :class:`~mnemex.models.Memory` is read from, in :func:`memory`'s order."""
ROW_COLUMNS: Final = FIELDS + ", fts_content, fts_tags"
"""The columns of a row made by :func:`prepare`, in its order."""
INPUT_KEYS: Final = frozenset(FIELDS.split(", "))
"""The keys of an item :func:`prepare` takes: the fields, ``content_hash`` ignored."""


def check_items(items: object) -> Sequence[Mapping[str, Any] | str]:
    """The items of a bulk write as a sequence: a list of texts or mappings, not one item."""
    if isinstance(items, str | bytes | Mapping) or not isinstance(items, Iterable):
        raise InvalidInput(
            f"items must be a list of memories (text or mappings), got {type(items).__name__}; "
            "store one memory with add()"
        )
    return items if isinstance(items, Sequence) else list(items)


def prepare_chunks(
    items: Sequence[Mapping[str, Any] | str],
    ns: str,
    keep_namespaces: bool,
    max_bytes: int,
    size: int,
) -> Iterator[list[tuple[Any, ...]]]:
    """The rows of ``items`` (see :func:`prepare`), ``size`` at a time, validated as they
    are asked for; an invalid item's error names its place when there are several."""
    now = utcnow()
    now_text = format_time(now)
    chunk: list[tuple[Any, ...]] = []
    for index, item in enumerate(items):
        try:
            chunk.append(prepare(item, ns, now, keep_namespaces, max_bytes, now_text))
        except InvalidInput as exc:
            if len(items) > 1:
                exc.args = (f"item {index}: {exc}",)
            raise
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def prepare(
    item: Mapping[str, Any] | str,
    ns: str,
    now: datetime,
    keep_namespaces: bool,
    max_bytes: int,
    now_text: str | None = None,
) -> tuple[Any, ...]:
    """Validate one item (a text, or a mapping of :data:`INPUT_KEYS`) into a row of
    :data:`ROW_COLUMNS` in the namespace ``ns`` (or, with ``keep_namespaces``, its own)."""
    if isinstance(item, str):
        item = {"content": item}
    elif not isinstance(item, Mapping):
        raise InvalidInput(f"a memory must be text or a mapping, got {type(item).__name__}")
    if not INPUT_KEYS.issuperset(item):
        unknown = set(item) - INPUT_KEYS
        raise InvalidInput(
            f"unknown field(s) {', '.join(sorted(unknown))}; known: "
            f"{', '.join(sorted(INPUT_KEYS - {'content_hash'}))}"
        )
    if "content" not in item:
        raise InvalidInput("a memory needs a 'content' field")
    get = item.get
    content = clean_content(item["content"], max_bytes)
    kind = get("kind")
    kind = DEFAULT_KIND if kind is None else clean_label(kind, "kind", 40)
    tags_json, fts_tags = tags_columns(clean_tags(get("tags")))
    source = get("source")
    if source is not None:
        source = clean_source(source)
    confidence = get("confidence")
    confidence = DEFAULT_CONFIDENCE if confidence is None else clean_confidence(confidence)
    pinned = get("pinned") or False
    if not isinstance(pinned, bool | int):
        raise InvalidInput(f"pinned must be true or false, got {pinned!r}")
    created = get("created_at")
    updated = get("updated_at")
    now_text = now_text or format_time(now)
    if created is None:
        created_text = now_text
    else:
        created_text = format_time(parse_time(created, what="created_at"))
    if updated is not None:
        updated_text = format_time(parse_time(updated, what="updated_at"))
    else:
        updated_text = created_text if created is not None else now_text
    metadata = get("metadata")
    metadata = "{}" if metadata is None else clean_metadata(metadata, max_bytes)
    ident = get("id")
    ident = new_id() if ident is None else clean_id(ident)
    row_ns = ns
    if keep_namespaces and get("namespace") is not None:
        row_ns = clean_namespace(item["namespace"])
    return (
        ident,
        row_ns,
        kind,
        content,
        tags_json,
        source,
        confidence,
        int(bool(pinned)),
        created_text,
        updated_text,
        content_hash(content),
        metadata,
        segment(content),
        fts_tags,
    )


def clean_source(value: object) -> str:
    """A memory's ``source``: a name of up to 1,000 characters."""
    return clean_name(value, "source", 1000)


def memory(row: Sequence[Any]) -> Memory:
    """The :class:`~mnemex.models.Memory` of a row of :data:`FIELDS`."""
    return Memory(
        id=row[0],
        namespace=row[1],
        kind=row[2],
        content=row[3],
        tags=tuple(json.loads(row[4])),
        source=row[5],
        confidence=row[6],
        pinned=bool(row[7]),
        created_at=parse_stored_time(row[8]),
        updated_at=parse_stored_time(row[9]),
        content_hash=row[10],
        metadata=json.loads(row[11]),
    )
