"""JSONL import and export through the API."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime

import pytest

import mnemex
from mnemex import InvalidInput
from mnemex.store import Store
from mnemex.transfer import export_jsonl, export_lines, import_jsonl
from tests.pg_fixtures import both_engines


@both_engines
def test_roundtrip_keeps_every_field(make_store) -> None:  # type: ignore[no-untyped-def]
    source: Store = make_store("a.db")
    source.add(
        "fact one",
        kind="fact",
        tags=["x", "y"],
        source="user:a",
        confidence=0.95,
        pinned=True,
        created_at=datetime(2024, 3, 1, 12, 30, tzinfo=UTC),
        metadata={"k": [1, 2], "ü": "ñ"},
    )
    source.add("数据库 memory", namespace="other")
    source.add("plain")
    buffer = io.StringIO()
    assert export_jsonl(source, buffer, namespace=mnemex.ALL) == 3
    target: Store = make_store("b.db")
    report = import_jsonl(target, buffer.getvalue().splitlines(), keep_namespaces=True)
    assert report.imported == 3 and not report.errors
    before = sorted(json.loads(line)["id"] for line in export_lines(source, namespace=mnemex.ALL))
    after_lines = sorted(export_lines(target, namespace=mnemex.ALL))
    assert sorted(json.loads(line)["id"] for line in after_lines) == before
    assert sorted(export_lines(source, namespace=mnemex.ALL)) == after_lines
    assert target.check()["ok"]


@both_engines
def test_import_goes_to_the_current_namespace_by_default(make_store) -> None:  # type: ignore[no-untyped-def]
    store: Store = make_store()
    lines = [json.dumps({"content": "from elsewhere", "namespace": "theirs"})]
    import_jsonl(store, lines)
    assert store.count() == 1
    assert store.count(namespace="theirs") == 0


@both_engines
def test_a_line_of_the_reserved_namespace_says_how_to_import_it(store: Store) -> None:
    """A store written before '*' was reserved exports lines in it: kept, they are refused
    with the way to import them; not kept, they land in the store's namespace."""
    lines = [
        json.dumps({"content": "written under the old rules", "namespace": "*"}),
        json.dumps(
            {
                "type": "relation",
                "subject": "a",
                "predicate": "b",
                "object": "c",
                "namespace": " * ",
            }
        ),
        json.dumps({"content": "an ordinary line", "namespace": "ops"}),
    ]
    report = import_jsonl(store, lines, keep_namespaces=True)
    assert report.imported == 1 and [e.line for e in report.errors] == [1, 2]
    assert all("without --keep-namespaces" in e.message for e in report.errors)
    assert import_jsonl(store, lines[:1]).imported == 1
    assert store.count() == 1 and store.count(namespace="ops") == 1


@both_engines
def test_bad_lines_are_reported_and_good_ones_kept(store: Store) -> None:
    lines: list[bytes] = [
        b'{"content": "good one"}',
        b'\xff\xfe{"content": "bad utf8"}',
        b'{"content": "good two", "tags": "a,b"}',
        b'{"content": 5}',
        b'{"content": "x", "confidence": 2}',
        b"   ",
        b'{"content": "good three"}',
    ]
    report = import_jsonl(store, lines)
    assert report.imported == 3
    assert [(e.line, e.message.split(" ")[0]) for e in report.errors] == [
        (2, "not"),
        (4, "content"),
        (5, "confidence"),
    ]
    assert store.get(report.ids[1]).memories[0].tags == ("a", "b")


@both_engines
def test_strict_imports_nothing_on_a_bad_line(store: Store) -> None:
    lines = [json.dumps({"content": f"line {i}"}) for i in range(5000)] + ["oops"]
    with pytest.raises(InvalidInput, match="line 5001"):
        import_jsonl(store, lines, strict=True)
    assert store.count() == 0
    report = import_jsonl(store, lines[:-1], strict=True)
    assert report.imported == 5000


@both_engines
def test_non_strict_imports_in_batches(store: Store) -> None:
    seen: list[int] = []
    lines = [json.dumps({"content": f"memory {i}"}) for i in range(4500)]
    report = import_jsonl(store, lines, progress=seen.append)
    assert report.imported == 4500
    assert seen == [2000, 2000, 500]


@both_engines
def test_existing_ids(store: Store) -> None:
    store.add("original", id="same")
    lines = [json.dumps({"id": "same", "content": "replacement"}), json.dumps({"content": "new"})]
    report = import_jsonl(store, lines)
    assert (report.imported, report.skipped) == (1, 1)
    assert store.get("same").memories[0].content == "original"
    with pytest.raises(InvalidInput, match="already exists"):
        import_jsonl(store, lines, skip_existing=False, strict=True)


@both_engines
def test_export_then_import_into_another_namespace_of_the_same_store(store: Store) -> None:
    """Ids are the store's: a plain import into another namespace skips every memory and
    says whose ids they are; with new_ids it imports them, relations following their
    source memory to its new id."""
    kept = store.add("Invoices render with WeasyPrint, slowly")
    store.add("Deploys need FLY_API_TOKEN set")
    store.relate("billing", "uses", "weasyprint", source_memory=kept)
    lines = list(export_lines(store))

    plain = import_jsonl(store, lines, namespace="copy")
    assert (plain.imported, plain.skipped_in) == (0, {"default": 2})
    assert "new-ids" in plain.errors[0].message  # the relation's source is default's memory

    report = import_jsonl(store, lines, namespace="copy", new_ids=True)
    assert (report.imported, report.relations, report.errors) == (2, 1, ())
    assert store.count(namespace="copy") == 2 and store.count() == 2
    relation = store.neighbors("billing", namespace="copy")[0]
    source = store.get(relation.source_memory or "", namespace="copy").memories[0]
    assert source.content == "Invoices render with WeasyPrint, slowly" and source.id != kept
