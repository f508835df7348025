"""Write-time dedup and the dedup pass: merge, never delete."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from mnemex import dedup as dups
from mnemex.cli import cli
from mnemex.engine.sqlite import dedup as sqlite_dedup
from mnemex.engine.sqlite.fts import Lexicon
from mnemex.engine.sqlite.vectors import VectorIndex
from mnemex.results import DedupReport
from mnemex.rows import prepare
from mnemex.storage.blobs import floats
from mnemex.store import ALL, Store
from mnemex.text import content_hash
from tests.pg_fixtures import both_engines

from .conftest import FakeEmbedder

BASE = "We chose PostgreSQL for the billing service because of its JSONB support"


@both_engines
def test_a_repeat_merges_into_the_existing_memory(store: Store) -> None:
    first = store.remember(BASE, tags=["db"], confidence=0.7, created_at="2026-01-01")
    again = store.remember(
        "We chose PostgreSQL for the billing service because of JSONB support",
        tags=["billing"],
        confidence=0.95,
        source="chat",
        created_at="2026-02-01",
    )
    assert not first.deduplicated
    assert again.deduplicated and again.id == first.id and again.by == "text"
    assert again.similarity is not None and again.similarity > 0.7
    (memory,) = store.get(first.id).memories
    assert memory.content == BASE  # the existing text stays
    assert memory.tags == ("db", "billing")
    assert memory.confidence == 0.95
    (record,) = memory.metadata["duplicates"]
    assert record["at"] == "2026-02-01T00:00:00.000Z" and record["source"] == "chat"
    assert record["content"].endswith("because of JSONB support")
    assert store.count() == 1


@both_engines
def test_dedup_is_idempotent_and_never_deletes(store: Store) -> None:
    ids = {store.add(BASE) for _ in range(5)}
    assert len(ids) == 1 and store.count() == 1
    (memory,) = store.get(ids.pop()).memories
    assert [r["by"] for r in memory.metadata["duplicates"]] == ["exact"] * 4
    assert "content" not in memory.metadata["duplicates"][0]  # same text: not stored twice
    assert memory.confidence == 0.8


@both_engines
def test_different_facts_are_not_merged(store: Store) -> None:
    store.add("The deploy queue holds 17 jobs at peak")
    store.add("Alice owns the billing service")
    for text in (
        "The deploy queue holds 18 jobs at peak",  # a different number
        "Alice does not own the billing service",  # a negation
        "Bob owns the billing service",  # a different (rare) name
        "PostgreSQL",  # a word contained in nothing
        "The deploy queue",  # contained in a longer memory, far from a copy
    ):
        assert not store.remember(text).deduplicated, text
    assert store.count() == 7


def test_namespaces_and_explicit_ids_and_the_switch(make_store) -> None:  # type: ignore[no-untyped-def]
    store = make_store()
    store.add(BASE)
    assert not store.remember(BASE, namespace="other").deduplicated
    assert not store.remember(BASE, id="fixed-id").deduplicated
    assert not store.remember(BASE, dedup=False).deduplicated
    assert store.add_many([BASE, BASE])  # bulk writes never deduplicate
    assert store.count() == 5 and store.count(namespace="other") == 1
    off = make_store("off.db", dedup=False)
    off.add(BASE)
    assert not off.remember(BASE).deduplicated


@both_engines
def test_cosine_dedup_with_embeddings(make_store, fake_embedder: FakeEmbedder) -> None:  # type: ignore[no-untyped-def]
    store = make_store(embedder=fake_embedder, dedup_text=0.99, dedup_cosine=0.85)
    first = store.add("alpha beta gamma delta epsilon")
    same_words = store.remember("epsilon delta gamma beta alpha zeta")
    assert same_words.deduplicated and same_words.id == first and same_words.by == "cosine"
    assert not store.remember("zeta eta theta iota kappa").deduplicated
    embedded = fake_embedder.texts
    store.add("zeta eta theta iota kappa", dedup=False)  # vector reused, not re-embedded
    assert fake_embedder.texts == embedded
    assert store.stats().pending_vectors == 0


@both_engines
def test_the_dedup_pass(store: Store) -> None:
    ids = store.add_many(
        [
            {"content": BASE, "tags": ["a"]},
            "Invoices are emailed at 02:00 UTC",
            {"content": BASE.replace("its ", ""), "tags": ["b"], "confidence": 0.9},
            {"content": BASE + ".", "tags": ["a"]},  # PostgreSQL keeps one memory per text
        ]
    )
    dry = store.dedup(dry_run=True)
    assert dry.checked == 4 and dry.dry_run
    assert {(p.keep, p.duplicate) for p in dry.pairs} == {(ids[0], ids[2]), (ids[0], ids[3])}
    assert store.count() == 4  # a dry run changes nothing
    done = store.dedup()
    assert len(done.pairs) == 2 and done.moved_to == "default/duplicates"
    assert store.count() == 2 and store.count(namespace=ALL) == 4  # moved, not deleted
    (kept,) = store.get(ids[0]).memories
    assert kept.tags == ("a", "b") and kept.confidence == 0.9
    assert {r["id"] for r in kept.metadata["duplicates"]} == {ids[2], ids[3]}
    moved = store.get(ids[2], namespace="default/duplicates").memories[0]
    assert moved.metadata["duplicate_of"] == ids[0] and moved.content == BASE.replace("its ", "")
    assert [h.id for h in store.search("PostgreSQL JSONB").hits] == [ids[0]]
    assert store.dedup().pairs == ()  # nothing left to merge
    assert store.check()["ok"]


@both_engines
def test_dedup_pass_keeps_vectors_consistent(make_store, fake_embedder: FakeEmbedder) -> None:  # type: ignore[no-untyped-def]
    store = make_store(embedder=fake_embedder)
    ids = store.add_many([BASE, BASE + ".", "something else entirely"])
    store.search("warm the vector index", mode="vector")
    store.dedup()
    hits = store.search("PostgreSQL billing JSONB", mode="vector", limit=5).hits
    assert ids[1] not in [h.id for h in hits]  # moved out of the namespace: gone from its search


def test_cli_add_reports_dedup_and_the_dedup_command(tmp_path: Path) -> None:
    db = str(tmp_path / "c.db")
    runner = CliRunner()

    def run(*args: str) -> str:
        result = runner.invoke(cli, ["--db", db, *args], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.stdout

    first = json.loads(run("add", BASE, "--json"))
    assert first["deduplicated"] is False
    second = json.loads(run("add", BASE, "--json"))
    assert second == {**second, "id": first["id"], "deduplicated": True, "by": "exact"}
    third = json.loads(run("add", BASE, "--no-dedup", "--json"))
    assert third["id"] != first["id"]
    report = json.loads(run("dedup", "--dry-run", "--json"))
    assert report["duplicates"] == 1 and report["pairs"][0]["keep"] == first["id"]
    run("dedup")
    assert json.loads(run("stats", "--json"))["memories"] == 1


def test_remember_stores_a_prepared_row_or_merges_it(store: Store) -> None:
    lexicon = Lexicon(store.session.conn)
    row = prepare(BASE, "default", datetime(2026, 1, 1, tzinfo=UTC), False, 1000)
    match, seq, _ = sqlite_dedup.remember(
        store.session.connection, store.session.transaction, lexicon, store.settings, row
    )
    assert match is None and store.get(row[0]).memories[0].content == BASE
    again = prepare(BASE, "default", datetime(2026, 2, 1, tzinfo=UTC), False, 1000)
    lexicon.invalidate()
    match, seq, _ = sqlite_dedup.remember(
        store.session.connection, store.session.transaction, lexicon, store.settings, again
    )
    assert match is not None and (match.id, match.by, seq) == (row[0], "exact", 0)
    assert store.count() == 1 and store.get(again[0]).missing == (again[0],)


def test_the_dedup_pass_notes_each_merge(store: Store) -> None:
    store.add_many([BASE, "the queue holds 17 jobs", BASE])
    before = store.session.generation

    def run(dry_run: bool) -> DedupReport:
        return dups.dedup(store.session, "default", dry_run=dry_run)

    assert len(run(True).pairs) == 1 and store.session.generation == before
    report = run(False)
    assert (report.checked, len(report.pairs), store.session.generation) == (3, 1, before + 1)
    assert store.count() == 2 and store.count(namespace="default/duplicates") == 1


def test_new_vector_reuses_a_stored_vector(
    vector_store: Store, fake_embedder: FakeEmbedder
) -> None:
    vector_store.add("alpha beta gamma", namespace="other")
    calls = fake_embedder.calls
    vectors = sqlite_dedup.Vectors(
        fake_embedder,
        lambda embedder: None,
        lambda dim: VectorIndex(vector_store.session.conn, fake_embedder.model_id, dim),
    )

    def new(text: str, given: sqlite_dedup.Vectors = vectors) -> tuple[Any, Any]:
        return sqlite_dedup.new_vector(
            given, vector_store.session.connection, text, content_hash(text)
        )

    vector, index = new("alpha beta gamma")
    assert fake_embedder.calls == calls and index is not None
    with vector_store.session.connection() as conn:
        (stored,) = conn.execute("SELECT vector FROM embeddings").fetchone()
    assert vector is not None and vector.tobytes() == floats([stored], vector.shape[0]).tobytes()
    fake_embedder.fail = True
    assert new("delta") == (None, None)  # the write that follows reports the failure
    assert new("delta", sqlite_dedup.Vectors(None, vectors.check_dimension, vectors.index)) == (
        None,
        None,
    )
