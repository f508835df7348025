"""The memory row: validation into ROW_COLUMNS, chunks of rows, and a row read back."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from mnemex.config import DEFAULT_CONFIDENCE, DEFAULT_KIND
from mnemex.errors import InvalidInput
from mnemex.rows import (
    FIELDS,
    INPUT_KEYS,
    ROW_COLUMNS,
    check_items,
    memory,
    prepare,
    prepare_chunks,
)
from mnemex.storage import marks
from mnemex.store import Store
from mnemex.text import content_hash

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def test_input_keys_are_the_fields() -> None:
    assert {
        "id",
        "namespace",
        "kind",
        "content",
        "tags",
        "source",
        "confidence",
        "pinned",
        "created_at",
        "updated_at",
        "content_hash",
        "metadata",
    } == INPUT_KEYS
    assert ROW_COLUMNS.split(", ") == [*FIELDS.split(", "), "fts_content", "fts_tags"]


def test_a_text_gets_the_defaults() -> None:
    row = prepare("  the queue holds 17 jobs ", "team", NOW, False, 1000)
    assert len(row) == len(ROW_COLUMNS.split(", "))
    ident, ns, kind, content, tags, source, confidence, pinned, created, updated = row[:10]
    assert len(ident) == 16 and ns == "team" and kind == DEFAULT_KIND
    assert content == "the queue holds 17 jobs" and tags == "[]" and source is None
    assert (confidence, pinned) == (DEFAULT_CONFIDENCE, 0)
    assert created == updated == "2026-03-01T12:00:00.000Z"
    assert row[10] == content_hash(content) and row[11] == "{}"


def test_a_mapping_is_validated_field_by_field() -> None:
    item = {
        "id": "m-1",
        "content": "deploy on fridays",
        "kind": "decision",
        "tags": ["ops", "ops", "release"],
        "source": "chat",
        "confidence": 0.5,
        "pinned": True,
        "created_at": "2025-01-02",
        "metadata": {"by": "ana"},
        "namespace": "elsewhere",
        "content_hash": "ignored",
    }
    row = prepare(item, "team", NOW, False, 1000)
    assert row[:9] == (
        "m-1",
        "team",
        "decision",
        "deploy on fridays",
        '["ops", "release"]',
        "chat",
        0.5,
        1,
        "2025-01-02T00:00:00.000Z",
    )
    assert row[9] == row[8]  # updated_at follows an explicit created_at
    assert row[10] == content_hash("deploy on fridays") and row[11] == '{"by": "ana"}'
    assert prepare(item, "team", NOW, True, 1000)[1] == "elsewhere"


@pytest.mark.parametrize(
    ("item", "message"),
    [
        (42, "a memory must be text or a mapping, got int"),
        ({"content": "x", "colour": "red"}, "unknown field(s) colour; known: confidence"),
        ({"kind": "note"}, "a memory needs a 'content' field"),
        ({"content": "x", "pinned": "yes"}, "pinned must be true or false, got 'yes'"),
        ({"content": "x" * 20}, "content"),
    ],
)
def test_bad_items_raise_one_clear_error(item: object, message: str) -> None:
    with pytest.raises(InvalidInput, match=r"^" + message.replace("(", r"\(").replace(")", r"\)")):
        prepare(item, "team", NOW, False, 10)  # type: ignore[arg-type]


def test_chunks_of_rows_and_the_place_of_a_bad_item() -> None:
    items = [f"memory {i}" for i in range(5)]
    chunks = list(prepare_chunks(items, "team", False, 1000, 2))
    assert [len(c) for c in chunks] == [2, 2, 1]
    assert [r[3] for c in chunks for r in c] == items
    assert len({r[8] for c in chunks for r in c}) == 1  # one time for the whole batch
    with pytest.raises(InvalidInput, match=r"^item 1: a memory needs a 'content' field"):
        list(prepare_chunks(["fine", {"kind": "note"}], "team", False, 1000, 2))
    with pytest.raises(InvalidInput, match=r"^a memory needs a 'content' field"):
        list(prepare_chunks([{"kind": "note"}], "team", False, 1000, 2))


def test_check_items_wants_a_list() -> None:
    assert check_items(iter(["a", "b"])) == ["a", "b"]
    kept = ("a",)
    assert check_items(kept) is kept
    for one in ("text", {"content": "x"}, b"bytes", 3):
        with pytest.raises(InvalidInput, match="items must be a list of memories"):
            check_items(one)


def test_a_row_read_back_is_the_memory(store: Store) -> None:
    row = prepare(
        {"content": "we ship on tuesdays", "tags": ["release"], "metadata": {"n": 1}},
        "default",
        NOW,
        False,
        1000,
    )
    with store.session.transaction() as conn:
        conn.execute(f"INSERT INTO memories ({ROW_COLUMNS}) VALUES ({marks(len(row))})", row)
    with store.session.connection() as conn:
        stored = conn.execute(f"SELECT {FIELDS} FROM memories").fetchone()
    read = memory(stored)
    assert (read.id, read.content, read.tags, read.metadata) == (
        row[0],
        "we ship on tuesdays",
        ("release",),
        {"n": 1},
    )
    assert read.created_at == NOW and not read.pinned
    assert store.get(row[0]).memories[0] == read
