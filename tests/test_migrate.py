"""Moving a store between engines (``mnemex migrate``) and comparing two stores: real
SQLite files, the real PostgreSQL server of tests/pg_fixtures.py, the CLI as a process."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

import mnemex
from mnemex import migration
from mnemex.config import load_settings
from mnemex.engine import holds_store, place_name
from mnemex.engine.copy import SQLITE
from mnemex.errors import IndexMismatch, InvalidInput, StoreError
from mnemex.migration import compare, migrate, store_place
from mnemex.store import Store
from tests.conftest import PYTHON, FakeEmbedder, python_env

LONG = " ".join(f"word{i} about deploys and tokens" for i in range(12))  # several windows


class Windowed(FakeEmbedder):
    """The fake embedder with a window of 12 words, 8 apart: long texts get several vectors."""

    model_id = "fake:bow-64-windows"

    def windows(self, text: str) -> list[str]:
        words = text.split()
        return [" ".join(words[s : s + 12]) for s in range(0, max(len(words) - 4, 1), 8)]


class Other(FakeEmbedder):
    model_id = "fake:other-32"
    dim = 32


def build(path: Path, workspace: Path) -> None:
    """A store with every kind of row: memories of two namespaces with every field set,
    vectors of two models (several windows for a long text), relations, a workspace."""
    (workspace / "memory").mkdir(parents=True)
    (workspace / "MEMORY.md").write_text(
        "# Ledgerly\n\nDeploys go to Fly.io with FLY_API_TOKEN.\n\n## Billing\n\n"
        "Billing runs on PostgreSQL 16.\n",
        encoding="utf-8",
    )
    (workspace / "memory" / "2026-01-02.md").write_text(
        "# Day\n\nFixed the flaky billing test.\n", encoding="utf-8"
    )
    (workspace / "memory" / "bad.md").write_bytes(b"\xff\xfe not text")
    with mnemex.open(path, embedder=Other()) as store:
        store.add("an early note about deploy tokens", id="old-1")
    with mnemex.open(path, embedder=Windowed()) as store:
        store.reindex()  # vectors of a second model beside the first
        first = store.add(
            "Deploys need FLY_API_TOKEN set",
            kind="gotcha",
            tags=["deploy", "ci"],
            source="chat:42",
            confidence=0.9,
            pinned=True,
            created_at="2025-03-04T05:06:07.089Z",
            metadata={"b": [1, 2.5, {"x": None}], "a": "é"},
        )
        store.update(first, confidence=0.95)
        store.add(LONG, id="long-1", kind="fact")
        store.add_many(
            [{"id": f"bulk-{i}", "content": f"bulk memory {i} on billing"} for i in range(30)]
        )
        store.add("the other team's note on billing", namespace="team", tags=["x"])
        store.relate("Jared", "works_on", "engram", source_memory=first, confidence=0.7)
        store.relate("billing", "runs_on", "postgres", namespace="team")
        store.sync(workspace)


QUERIES = ("deploy token", "billing postgres", "flaky test", "word3 deploys")


def hits(store: Store) -> list[list[tuple[str, str]]]:
    """Every query's hits (id, namespace) in each mode, across namespaces."""
    return [
        [(h.id, h.namespace) for h in store.search(q, mode=mode, namespace=mnemex.ALL).hits]
        for q in QUERIES
        for mode in ("lexical", "vector", "hybrid")
    ]


def everything(store: Store) -> tuple[Any, ...]:
    memories = sorted(store.iter_memories(namespace=mnemex.ALL), key=lambda m: m.id)
    got = store.get([m.id for m in memories if m.namespace == "default"]).memories
    relations = sorted(store.iter_relations(namespace=mnemex.ALL), key=lambda r: r.id)
    return tuple(memories), got, tuple(relations)


def unchanged(store: Store, workspace: Path) -> None:
    report = store.sync(workspace)
    assert (report.added, report.changed, report.deleted, report.renamed) == (0, 0, 0, 0)
    assert (report.chunks_added, report.chunks_removed, report.embedded) == (0, 0, 0)


@pytest.mark.postgres
def test_sqlite_to_postgres_and_back_is_identical(tmp_path: Path, pg_url: str) -> None:
    workspace = tmp_path / "ws"
    build(tmp_path / "a.db", workspace)
    there = migrate(tmp_path / "a.db", pg_url)
    assert there.ok and there.check is not None and there.check.identical, there.to_dict()
    assert there.memories == 36 and there.relations == 2 and there.files == 3
    assert there.vectors > 36 + 5  # two models for one memory, windows of the long text
    back = migrate(pg_url, f"sqlite:{tmp_path / 'c.db'}")
    assert back.ok and back.check is not None and back.check.identical, back.to_dict()
    start = compare(tmp_path / "a.db", tmp_path / "c.db")
    assert start.identical and start.digests["source"] == start.digests["target"]
    assert start.digests == there.check.digests == back.check.digests
    assert start.namespaces["default"]["vectors"] == [there.vectors - 1] * 2  # 1: team
    stores = [mnemex.open(p, embedder=Windowed()) for p in (tmp_path / "a.db", pg_url)]
    stores.append(mnemex.open(tmp_path / "c.db", embedder=Windowed()))
    try:
        a, pg, c = stores
        assert everything(a) == everything(pg) == everything(c)
        assert hits(a) == hits(pg) == hits(c)
        assert a.stats(namespace=mnemex.ALL).vectors == pg.stats(namespace=mnemex.ALL).vectors
        assert pg.check()["ok"] and c.check()["ok"]
        for store in (pg, c):
            assert store.embedder is not None and store.embedder.model_id == Windowed.model_id
            unchanged(store, workspace)
    finally:
        for store in stores:
            store.close()


@pytest.mark.postgres
def test_postgres_bm25_statistics_equal_a_rebuild(tmp_path: Path, pg_url: str) -> None:
    build(tmp_path / "a.db", tmp_path / "ws")
    migrate(tmp_path / "a.db", pg_url)
    from mnemex.engine.postgres import check, connect

    with connect(pg_url) as conn:
        assert check(conn) == []
        stats = conn.execute("SELECT sum(vectors) FROM vector_stats").fetchone()[0]
        rows = conn.execute("SELECT count(*) FROM embeddings").fetchone()[0]
        indexes = conn.execute(
            "SELECT count(*) FROM pg_indexes WHERE indexname LIKE 'embeddings_hnsw_%'"
        ).fetchone()[0]
    assert stats == rows and indexes == 2  # a HNSW index per model, built after the copy


@pytest.mark.postgres
def test_database_to_database(tmp_path: Path, pg_url: str, pg_databases: Any) -> None:
    build(tmp_path / "a.db", tmp_path / "ws")
    migrate(tmp_path / "a.db", pg_url)
    other = pg_databases.fresh("migrate-target")
    report = migrate(pg_url, other)
    assert report.ok and report.check is not None and report.check.identical
    assert compare(tmp_path / "a.db", other).identical


def test_file_to_file(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    build(tmp_path / "a.db", workspace)
    (tmp_path / "sub").mkdir()
    report = migrate(tmp_path / "a.db", tmp_path / "sub" / ".." / "b.db")
    assert report.ok and report.conflict_count == 0 and report.skipped == 0
    assert report.check is not None and report.check.identical
    with (
        mnemex.open(tmp_path / "a.db", embedder=Windowed()) as a,
        mnemex.open(tmp_path / "b.db", embedder=Windowed()) as b,
    ):
        assert everything(a) == everything(b)
        assert hits(a) == hits(b)
        assert b.check()["ok"]
        unchanged(b, workspace)
        b.forget(["bulk-3"])
    assert not compare(tmp_path / "a.db", tmp_path / "b.db").identical


def test_check_only_lists_the_differences(tmp_path: Path) -> None:
    build(tmp_path / "a.db", tmp_path / "ws")
    migrate(tmp_path / "a.db", tmp_path / "b.db")
    with mnemex.open(tmp_path / "b.db", embedder=Windowed()) as b:
        b.update("bulk-1", tags=["changed"])
        b.forget(["bulk-2"])
        b.add("only here", id="new-1")
        b.relate("a", "b", "c")
    found = compare(tmp_path / "a.db", tmp_path / "b.db")
    assert not found.identical
    assert (found.missing, found.extra, found.different) == (1, 2, 1)
    problems = {(d.what, d.key): d.problem for d in found.differences}
    assert problems[("memory", "bulk-2")] == "missing from the target"
    assert problems[("memory", "new-1")] == "only in the target"
    assert problems[("memory", "bulk-1")] == "differs: tags, updated_at"
    assert found.namespaces["default"]["memories"] == [35, 35]
    assert found.digests["source"] != found.digests["target"]
    run = cli("migrate", "--from", str(tmp_path / "a.db"), "--to", str(tmp_path / "b.db"),
              "--check-only")  # fmt: skip
    assert run.returncode == 1, run.stderr
    assert "memory bulk-2: missing from the target" in run.stdout
    assert "1 missing from the target, 2 only in the target, 1 different" in run.stdout


def test_a_nonempty_target_is_refused_unless_asked(tmp_path: Path) -> None:
    build(tmp_path / "a.db", tmp_path / "ws")
    with mnemex.open(tmp_path / "b.db", embedder=Windowed()) as b:
        b.add("Deploys need FLY_API_TOKEN set", id="bulk-0")  # an id the source has
        b.add("a memory of the target's own", id="own-1")
    with pytest.raises(StoreError, match="is not empty: --resume"):
        migrate(tmp_path / "a.db", tmp_path / "b.db")
    with pytest.raises(StoreError, match="does not hold an interrupted migrate"):
        migrate(tmp_path / "a.db", tmp_path / "b.db", resume=True)
    report = migrate(tmp_path / "a.db", tmp_path / "b.db", into_nonempty=True)
    assert report.conflict_count == 1 and not report.ok
    assert report.conflicts[0].key == "bulk-0"
    assert report.conflicts[0].problem.startswith("the target's differs: content")
    assert report.memories == 35
    assert report.check is not None and (report.check.extra, report.check.different) == (1, 1)


@pytest.mark.parametrize(
    "engine_to", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_resume_after_an_interruption(
    tmp_path: Path, engine_to: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    build(tmp_path / "a.db", tmp_path / "ws")
    target = tmp_path / "b.db" if engine_to == "sqlite" else request.getfixturevalue("pg_url")
    monkeypatch.setattr(migration, "BATCH", 10)

    def stop(phase: str, done: int, total: int) -> None:
        if done >= 20:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        migrate(tmp_path / "a.db", target, progress=stop)
    with pytest.raises(StoreError, match="not empty"):
        migrate(tmp_path / "a.db", target)
    report = migrate(tmp_path / "a.db", target, resume=True)
    assert report.ok, report.to_dict()
    assert (report.skipped, report.memories) == (20, 16)
    assert report.check is not None and report.check.identical
    with pytest.raises(StoreError, match="does not hold an interrupted migrate"):
        migrate(tmp_path / "a.db", target, resume=True)  # done: the marker is gone


def test_vectors_of_another_model_are_refused(tmp_path: Path) -> None:
    build(tmp_path / "a.db", tmp_path / "ws")
    with mnemex.open(tmp_path / "b.db", embedder=FakeEmbedder()) as b:
        b.add("the target's own memory")
    with pytest.raises(IndexMismatch, match="--no-vectors"):
        migrate(tmp_path / "a.db", tmp_path / "b.db", into_nonempty=True)
    report = migrate(tmp_path / "a.db", tmp_path / "b.db", into_nonempty=True, vectors=False)
    assert report.ok and report.vectors == 0 and report.memories == 36
    assert report.check is not None and report.check.covered and not report.check.vectors
    assert "vectors" not in report.check.namespaces["default"]
    with mnemex.open(tmp_path / "b.db", embedder=FakeEmbedder()) as b:
        assert b.stats().pending_vectors == 35  # `mnemex embed` gives them vectors
        b.embed()
        assert b.stats().pending_vectors == 0


@pytest.mark.postgres
def test_repeated_texts_are_reported_on_postgres(tmp_path: Path, pg_url: str) -> None:
    with mnemex.open(tmp_path / "a.db") as a:
        a.add_many([{"id": "one", "content": "same text"}, {"id": "two", "content": "same text"}])
    report = migrate(tmp_path / "a.db", pg_url)
    assert not report.ok and report.memories == 1
    assert report.conflicts[0].key == "two" and "memory one" in report.conflicts[0].problem
    assert report.check is not None and report.check.missing == 1


class Wide(FakeEmbedder):
    model_id = "fake:wide-2001"
    dim = 2001


@pytest.mark.postgres
def test_vectors_too_wide_for_postgres_are_refused(tmp_path: Path, pg_url: str) -> None:
    with mnemex.open(tmp_path / "a.db", embedder=Wide()) as a:
        a.add("a memory with a very wide vector")
    with pytest.raises(IndexMismatch, match="PostgreSQL indexes at most 2000"):
        migrate(tmp_path / "a.db", pg_url)
    report = migrate(tmp_path / "a.db", pg_url, vectors=False)
    assert report.ok and report.memories == 1 and report.vectors == 0


@pytest.mark.postgres
def test_an_empty_database_is_no_source_and_stays_empty(tmp_path: Path, pg_url: str) -> None:
    from mnemex.engine.postgres import connect, schema_version

    with pytest.raises(StoreError, match="no mnemex store in the database at postgresql://"):
        migrate(pg_url, tmp_path / "b.db")
    with connect(pg_url) as conn:
        assert schema_version(conn) == 0  # nothing created in the source
    assert not (tmp_path / "b.db").exists()
    with mnemex.open(tmp_path / "a.db", embedder=None) as a:
        a.add("one memory")
    assert holds_store(load_settings(str(tmp_path / "a.db")))
    assert migrate(tmp_path / "a.db", pg_url).ok and holds_store(load_settings(pg_url))
    secret = load_settings("postgresql://me:s3cret@db.example/team")
    assert place_name(secret) == "postgresql://me:***@db.example/team"


def test_bad_places(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no store at"):
        migrate(tmp_path / "missing.db", tmp_path / "b.db")
    (tmp_path / "text.db").write_text("not a store")
    with pytest.raises(StoreError, match="not a mnemex store"):
        migrate(tmp_path / "text.db", tmp_path / "b.db")
    with pytest.raises(InvalidInput, match="unknown kind of store 'mysql'"):
        store_place("mysql://db/x")
    assert store_place("sqlite:///tmp/x.db") == "/tmp/x.db"
    assert store_place("sqlite:rel.db") == "rel.db"
    with mnemex.open(tmp_path / "a.db") as a:
        a.add("one")
    with pytest.raises(InvalidInput, match="the same store"):
        migrate(tmp_path / "a.db", f"sqlite:{tmp_path / 'a.db'}")
    with pytest.raises(StoreError, match="no folder"):
        migrate(tmp_path / "a.db", tmp_path / "nowhere" / "b.db")
    with pytest.raises(StoreError, match="cannot connect to PostgreSQL"):
        migrate(tmp_path / "a.db", "postgresql://nobody@127.0.0.1:1/none?connect_timeout=2")
    assert not (tmp_path / "b.db").exists()
    assert SQLITE.by_id == "m.id"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTHON, "-m", "mnemex", *args],
        capture_output=True,
        text=True,
        env=python_env(),
        timeout=120,
    )


@pytest.mark.postgres
def test_cli_as_a_process(tmp_path: Path, pg_url: str) -> None:
    build(tmp_path / "a.db", tmp_path / "ws")
    run = cli("migrate", "--from", f"sqlite:{tmp_path / 'a.db'}", "--to", pg_url, "--json")
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["ok"] and report["memories"] == 36 and report["check"]["identical"]
    assert report["check"]["namespaces"]["team"]["memories"] == [1, 1]
    assert "***" in report["target"] and "secret" not in run.stdout
    check = cli("migrate", "--from", pg_url, "--to", str(tmp_path / "a.db"), "--check-only",
                "--json")  # fmt: skip
    assert check.returncode == 0, check.stderr
    assert json.loads(check.stdout)["identical"] is True
    again = cli("migrate", "--from", str(tmp_path / "a.db"), "--to", pg_url)
    assert again.returncode == 1 and "is not empty" in again.stderr
    missing = cli("migrate", "--from", str(tmp_path / "none.db"), "--to", pg_url)
    assert missing.returncode == 1 and missing.stderr.startswith("error: no store at")
    down = cli("migrate", "--from", str(tmp_path / "a.db"), "--to",
               "postgresql://nobody@127.0.0.1:1/none?connect_timeout=2")  # fmt: skip
    assert down.returncode == 1 and "cannot connect to PostgreSQL" in down.stderr
