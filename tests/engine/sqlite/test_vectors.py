"""Vectors and hybrid search, with a deterministic fake embedder.

The tests that hold on SQLite alone; those run on both engines are in
``tests/engine/test_vectors.py``.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

import mnemex
from mnemex import EmbeddingError, IndexMismatch
from mnemex.storage.blobs import floats
from mnemex.store import Store
from tests.conftest import FakeEmbedder

DOCS = [
    "PostgreSQL connection pool exhausted during the nightly billing run",
    "The frontend build uses Vite and takes forty seconds",
    "Redis evicts login sessions under memory pressure",
    "Invoices render to PDF in a background worker",
    "The billing service retries Stripe webhooks three times",
]


def vectors(store: Store) -> list[tuple[int, str, int]]:
    return store.session.conn.execute(
        "SELECT seq, model, dim FROM embeddings ORDER BY seq"
    ).fetchall()


def test_add_embeds_and_stamps_the_model(vector_store: Store, fake_embedder: FakeEmbedder) -> None:
    vector_store.add_many(DOCS)
    rows = vectors(vector_store)
    assert len(rows) == len(DOCS)
    assert {(model, dim) for _, model, dim in rows} == {("fake:bow-64", 64)}
    stats = vector_store.stats()
    assert (stats.embedder, stats.vectors, stats.pending_vectors) == ("fake:bow-64", 5, 0)
    assert fake_embedder.texts == len(DOCS)
    vector_store.add_many(["a memory of another team", "one more"], namespace="other", embed=False)
    vector_store.add("a third one", namespace="other")
    scoped = vector_store.stats()  # the namespace's memories only
    assert (scoped.memories, scoped.vectors, scoped.pending_vectors) == (5, 5, 0)
    other = vector_store.stats(namespace="other")
    assert (other.memories, other.vectors, other.pending_vectors) == (3, 1, 2)
    every = vector_store.stats(namespace=mnemex.ALL)
    assert (every.memories, every.vectors, every.pending_vectors) == (8, 6, 2)


def test_modes(vector_store: Store) -> None:
    ids = vector_store.add_many(DOCS)
    lexical = vector_store.search("billing Stripe webhooks", mode="lexical")
    vector = vector_store.search("billing Stripe webhooks", mode="vector")
    hybrid = vector_store.search("billing Stripe webhooks")
    assert (lexical.mode_used, vector.mode_used, hybrid.mode_used) == (
        "lexical",
        "vector",
        "hybrid",
    )
    assert hybrid.fusion is not None and hybrid.fusion.startswith("adaptive(")
    for result in (lexical, vector, hybrid):
        assert result.hits[0].id == ids[4]
        assert all(0.0 <= h.score <= 1.0 for h in result.hits)
    # The vector arm finds memories with no word in common with the query's rarest terms.
    assert len(vector.hits) == len(DOCS)


def test_hybrid_is_the_default_with_an_embedder(vector_store: Store, store: Store) -> None:
    vector_store.add("anything at all")
    store.add("anything at all")
    assert vector_store.search("anything").mode_used == "hybrid"
    assert store.search("anything").mode_used == "lexical"
    assert store.search("anything", mode="hybrid").mode_used == "lexical"
    assert "no embedder" in store.search("anything", mode="hybrid").notes[0]


def test_weighted_fusion_and_weights(vector_store: Store) -> None:
    ids = vector_store.add_many(DOCS)
    result = vector_store.search("billing webhooks", fusion="weighted", weights=(0.5, 0.5))
    assert result.fusion == "weighted(0.5 vector, 0.5 text)"
    assert result.hits[0].id == ids[4]
    with pytest.raises(mnemex.InvalidInput, match="weights"):
        vector_store.search("x", fusion="weighted", weights=(-1, 1))
    with pytest.raises(mnemex.InvalidInput, match="mode"):
        vector_store.search("x", mode="semantic")


def test_explain(vector_store: Store) -> None:
    ids = vector_store.add_many(DOCS)
    result = vector_store.search("billing Stripe webhooks", explain=True, limit=3, fusion="rrf")
    top = result.hits[0]
    assert top.id == ids[4]
    assert top.explain is not None
    assert top.explain["lexical"]["rank"] == 1 and top.explain["lexical"]["bm25"] > 0
    assert top.explain["vector"]["rank"] == 1 and 0 < top.explain["vector"]["cosine"] <= 1
    assert top.explain["fusion"] == "rrf(k=60)"
    assert top.explain["final"] == pytest.approx(top.score, abs=1e-6)
    assert top.explain["fused"] * 0.8 == pytest.approx(top.score, abs=1e-6)  # confidence 0.8
    assert top.explain["stages"]
    assert "explain" in top.to_dict()
    assert vector_store.search("billing").hits[0].explain is None


def test_identical_content_is_embedded_once(
    vector_store: Store, fake_embedder: FakeEmbedder
) -> None:
    vector_store.add("the same words")
    vector_store.add("the same words", namespace="elsewhere")
    vector_store.add_many(["twice in a batch", "twice in a batch"])
    assert fake_embedder.texts == 2
    assert len(vectors(vector_store)) == 4


def test_update_reembeds_only_changed_content(
    vector_store: Store, fake_embedder: FakeEmbedder
) -> None:
    ident = vector_store.add("redis cache for sessions")
    vector_store.update(ident, confidence=0.9, tags=["x"])
    assert fake_embedder.texts == 1
    vector_store.update(ident, content="memcached cache for sessions")
    assert fake_embedder.texts == 2
    assert vector_store.search("memcached", mode="vector").hits[0].id == ident
    (row,) = vector_store.session.conn.execute("SELECT content_hash FROM embeddings").fetchall()
    assert row[0] == vector_store.get(ident).memories[0].content_hash


def test_forget_removes_vectors_from_search(vector_store: Store) -> None:
    ids = vector_store.add_many(DOCS)
    assert ids[0] in {h.id for h in vector_store.search("PostgreSQL pool", mode="vector").hits}
    vector_store.forget(ids[0])
    assert ids[0] not in {h.id for h in vector_store.search("PostgreSQL pool", mode="vector").hits}
    assert len(vectors(vector_store)) == len(DOCS) - 1


def test_embedding_failure_keeps_the_memory_pending(
    vector_store: Store, fake_embedder: FakeEmbedder
) -> None:
    fake_embedder.fail = True
    ident = vector_store.add("stored even though the embedder is down")
    assert vector_store.get(ident).memories
    assert "embedder is down" in (vector_store.last_embedding_error or "")
    assert vector_store.stats().pending_vectors == 1
    result = vector_store.search("embedder down")
    assert [h.id for h in result.hits] == [ident]  # found lexically meanwhile
    assert result.mode_used == "lexical"
    assert "could not be embedded" in result.notes[0]
    fake_embedder.fail = False
    result = vector_store.search("embedder down")
    assert result.mode_used == "hybrid"
    assert any("1 of 1 memories have no vector" in n for n in result.notes)
    vector_store.add("the next write catches up")
    assert vector_store.stats().pending_vectors == 0
    assert vector_store.last_embedding_error is None


def test_embed_catches_up(make_store, fake_embedder: FakeEmbedder) -> None:  # type: ignore[no-untyped-def]
    store = make_store("late.db", embedder=fake_embedder)
    store.add_many(DOCS, embed=False)
    assert store.stats().pending_vectors == len(DOCS)
    seen: list[int] = []
    report = store.embed(progress=seen.append)
    assert (report.embedded, report.pending) == (len(DOCS), 0)
    assert sum(seen) == len(DOCS)
    assert store.embed().embedded == 0  # nothing left to do


def test_no_embedder_embed_is_a_clear_error(store: Store) -> None:
    with pytest.raises(EmbeddingError, match="no embedder is configured"):
        store.embed()


class Broken(FakeEmbedder):
    def __init__(self, how: str) -> None:
        super().__init__()
        self.how = how

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = super().embed(texts)
        if self.how == "nan":
            out[0, 0] = np.nan
        elif self.how == "inf":
            out[-1, 3] = np.inf
        elif self.how == "count":
            out = out[:-1]
        elif self.how == "dim":
            out = np.hstack([out, out])
        elif self.how == "zero":
            out[0] = 0
        return out


@pytest.mark.parametrize(
    ("how", "message"),
    [
        ("nan", "NaN"),
        ("inf", "infinite"),
        ("count", "vectors for"),
        ("dim", "128-dimensional"),
        ("zero", "all-zero"),
    ],
)
def test_bad_provider_output_is_refused(make_store, how: str, message: str) -> None:  # type: ignore[no-untyped-def]
    store = make_store(f"{how}.db", embedder=Broken(how))
    ident = store.add("a memory the provider mangles")
    assert message in (store.last_embedding_error or "")
    assert store.get(ident).memories  # stored anyway
    assert vectors(store) == []  # no partial write of vectors
    result = store.search("mangles")
    assert result.mode_used == "lexical"
    assert [h.id for h in result.hits] == [ident]


class Other(FakeEmbedder):
    model_id = "fake:other-32"
    dim = 32


def test_switching_models_never_mixes_vectors(tmp_path, fake_embedder: FakeEmbedder) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "switch.db"
    with mnemex.open(path, embedder=fake_embedder) as first:
        first.add_many(DOCS)
    with mnemex.open(path, embedder=Other()) as second:
        # Another model asked for: the store keeps its own (which this process lacks)
        # until reindex switches it, and says so.
        result = second.search("billing webhooks")
        assert result.mode_used == "lexical"
        assert any(
            "indexed with fake:bow-64, not fake:other-32" in note and "run `mnemex reindex`" in note
            for note in result.notes
        )
        assert all(h.explain is None for h in result.hits)
        stats = second.stats()
        assert stats.embedder == "fake:bow-64"
        assert (stats.vectors, stats.pending_vectors, stats.other_models) == (len(DOCS), 0, {})
        second.add("a memory written before the switch")
        assert "run `mnemex reindex`" in (second.last_embedding_error or "")
        report = second.reindex(prune=True)
        assert report is not None and report.embedded == len(DOCS) + 1
        assert second.stats().other_models == {}
        assert second.stats().embedder == "fake:other-32"
        assert second.search("billing webhooks", mode="vector").hits
    with mnemex.open(path, embedder=Other()) as third:  # the switch is recorded
        assert third.search("billing webhooks").mode_used == "hybrid"


class SameIdOtherDim(FakeEmbedder):
    dim = 32

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return super().embed(texts)[:, :32]


def test_dimension_mismatch(tmp_path, fake_embedder: FakeEmbedder) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "dims.db"
    with mnemex.open(path, embedder=fake_embedder) as first:
        first.add_many(DOCS)
    with mnemex.open(path, embedder=SameIdOtherDim()) as second:
        result = second.search("billing webhooks")
        assert result.mode_used == "lexical"
        assert any("reindex --force" in note for note in result.notes)
        with pytest.raises(IndexMismatch, match="reindex --force"):
            second.embed()
        second.add("new memory with the new dimension")
        assert "reindex --force" in (second.last_embedding_error or "")
        report = second.reindex(force=True)
        assert report is not None and report.embedded == len(DOCS) + 1
        assert second.search("billing webhooks").mode_used == "hybrid"


def test_corrupt_vector_blob_is_skipped_and_reported(vector_store: Store) -> None:
    ids = vector_store.add_many(DOCS)
    raw = sqlite3.connect(vector_store.path)
    raw.execute(
        "UPDATE embeddings SET vector = x'00ff' WHERE seq = (SELECT min(seq) FROM embeddings)"
    )
    nan = np.full(64, np.nan, dtype=np.float32).tobytes()
    raw.execute(
        "UPDATE embeddings SET vector = ? WHERE seq = (SELECT max(seq) FROM embeddings)", (nan,)
    )
    raw.commit()
    raw.close()
    with mnemex.open(vector_store.path, embedder=FakeEmbedder()) as reopened:
        result = reopened.search("billing", mode="vector", limit=10)
        found = {h.id for h in result.hits}
        assert ids[0] not in found and ids[4] not in found
        assert any("unreadable" in note for note in result.notes)
        reopened.reindex(force=True)
        assert len(reopened.search("billing", mode="vector", limit=10).hits) == len(DOCS)


def test_other_connections_stay_in_step(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "shared.db"
    with (
        mnemex.open(path, embedder=FakeEmbedder()) as reader,
        mnemex.open(path, embedder=FakeEmbedder()) as writer,
    ):
        first = writer.add("kubernetes cluster upgrade")
        assert [h.id for h in reader.search("kubernetes", mode="vector").hits] == [first]
        second = writer.add("kubernetes node pool resized", kind="decision")
        assert {h.id for h in reader.search("kubernetes", mode="vector").hits} == {first, second}
        writer.update(second, kind="fact")
        assert reader.search("kubernetes", mode="vector", kinds=["decision"]).hits == ()
        assert [h.id for h in reader.search("kubernetes", mode="vector", kinds=["fact"]).hits] == [
            second
        ]
        writer.forget(first)
        assert [h.id for h in reader.search("kubernetes", mode="vector").hits] == [second]


def test_vector_filters_return_the_best_within(vector_store: Store) -> None:
    base = datetime(2025, 1, 1, tzinfo=UTC)
    vector_store.add_many(
        [{"content": f"deploy pipeline step {i}", "namespace": "x"} for i in range(50)],
    )
    inside = vector_store.add(
        "deploy note in a narrow filter", kind="gotcha", tags=["ops"], created_at=base
    )
    other_ns = vector_store.add("deploy pipeline step", namespace="other")
    assert [
        h.id for h in vector_store.search("deploy pipeline", mode="vector", kinds=["gotcha"]).hits
    ] == [inside]
    assert [
        h.id for h in vector_store.search("deploy pipeline", mode="vector", tags=["ops"]).hits
    ] == [inside]
    assert [
        h.id
        for h in vector_store.search("deploy", mode="vector", until=base + timedelta(days=1)).hits
    ] == [inside]
    assert other_ns not in {
        h.id for h in vector_store.search("deploy pipeline", mode="vector", limit=100).hits
    }
    assert [
        h.id for h in vector_store.search("deploy pipeline", mode="vector", namespace="other").hits
    ] == [other_ns]


class Slow(FakeEmbedder):
    def __init__(self) -> None:
        super().__init__()
        self.slow = threading.Event()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if self.slow.is_set():
            time.sleep(1.0)
        return super().embed(texts)


def test_query_embedding_timeout_answers_lexically(make_store) -> None:  # type: ignore[no-untyped-def]
    slow = Slow()
    store = make_store("slow.db", embedder=slow, query_timeout=0.2)
    ident = store.add("timeouts should not lose results")
    slow.slow.set()
    started = time.monotonic()
    result = store.search("timeouts results")
    assert time.monotonic() - started < 0.9
    assert result.mode_used == "lexical"
    assert [h.id for h in result.hits] == [ident]
    assert "took over 0.2 s" in result.notes[0]


def test_empty_and_stop_word_queries(vector_store: Store) -> None:
    ident = vector_store.add("The Who played here")
    assert vector_store.search("").hits == ()
    assert vector_store.search("   ").hits == ()
    assert vector_store.search("!!! ???").mode_used in ("hybrid", "lexical")
    assert ident in {h.id for h in vector_store.search("the who").hits}


class Sleepy(FakeEmbedder):
    """Takes 0.3 s per batch of texts (not per query)."""

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if len(texts) > 1:
            time.sleep(0.3)
        return super().embed(texts)


def test_searches_are_not_blocked_while_embedding(make_store) -> None:  # type: ignore[no-untyped-def]
    store = make_store("busy.db", embedder=Sleepy())
    store.add_many([f"background memory number {i}" for i in range(1000)], embed=False)
    worker = threading.Thread(target=store.embed)
    worker.start()
    time.sleep(0.1)
    slowest = 0.0
    while worker.is_alive():
        started = time.monotonic()
        store.search("background memory", mode="lexical")
        slowest = max(slowest, time.monotonic() - started)
        time.sleep(0.02)
    worker.join()
    assert store.stats().pending_vectors == 0
    assert slowest < 0.25  # a search never waited for a whole 0.3 s batch


def _vector_ids(store: Store, query: str, limit: int = 50) -> list[str]:
    return [h.id for h in store.search(query, mode="vector", limit=limit).hits]


def test_vector_snapshot_is_reused_and_kept_in_step(
    tmp_path: Path, fake_embedder: FakeEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new process maps the snapshot instead of reading every vector from SQLite, then
    applies what changed since (new vectors, forgotten memories, changed kinds)."""
    from mnemex.engine.sqlite import vectors as index

    monkeypatch.setattr(index, "SNAPSHOT_MIN_ROWS", 3)
    db = tmp_path / "snap.db"
    docs = [f"{doc} (note {i})" for i in range(4) for doc in DOCS]
    with mnemex.open(db, embedder=fake_embedder) as first:
        ids = first.add_many(docs)
        first.add("a memory of another team about billing", namespace="other")
        before = _vector_ids(first, "billing webhooks")
    snapshot = index.snapshot_path(db, fake_embedder.model_id)
    assert snapshot.exists() and snapshot.name == "snap.db.fake_bow-64.vectors"
    with mnemex.open(db, embedder=fake_embedder) as second:
        assert _vector_ids(second, "billing webhooks") == before
        assert second.session.vectors(fake_embedder.dim).from_snapshot == len(docs) + 1
        second.forget(ids[:5])
        second.update(ids[5], kind="decision")
        (new,) = second.add_many(["billing webhooks retried by the new billing queue"])
        expected = _vector_ids(second, "billing webhooks")
        decisions = [h.id for h in second.search("billing", mode="vector", kinds="decision").hits]
    assert new in expected and not set(ids[:5]) & set(expected)
    assert decisions == [ids[5]]
    stamp = snapshot.stat().st_mtime_ns
    with mnemex.open(db, embedder=fake_embedder) as third:  # the snapshot, then the log
        assert _vector_ids(third, "billing webhooks") == expected
        assert [h.id for h in third.search("billing", mode="vector", kinds="decision").hits] == [
            ids[5]
        ]
        assert third.session.vectors(fake_embedder.dim).from_snapshot > 0
    assert snapshot.stat().st_mtime_ns == stamp  # one vector read since: not written again
    with mnemex.open(db, embedder=fake_embedder, namespace="other") as other:
        assert len(_vector_ids(other, "billing")) == 1


def test_vectors_written_since_the_snapshot_are_appended_in_its_mapping(
    tmp_path: Path, fake_embedder: FakeEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The snapshot's arrays have room for as many rows as a process reads before it
    writes the snapshot again: a new process appends the vectors written since into the
    mapping, without a copy of every row; past the room it copies them, as before, and
    writes a new snapshot."""
    import mmap

    from mnemex.engine.sqlite import vectors as index

    def mapped(array: np.ndarray) -> bool:
        while array.base is not None and not isinstance(array.base, mmap.mmap):
            array = array.base  # type: ignore[assignment]
        return isinstance(array.base, mmap.mmap)

    monkeypatch.setattr(index, "SNAPSHOT_MIN_ROWS", 4)
    db = tmp_path / "room.db"
    docs = [f"{doc} (note {i})" for i in range(2) for doc in DOCS]
    with mnemex.open(db, embedder=fake_embedder) as first:
        first.add_many(docs)
        _vector_ids(first, "billing")  # loads every row from SQLite: writes the snapshot
    snapshot = index.snapshot_path(db, fake_embedder.model_id)
    for added, room_left in ((3, True), (2, False)):  # 3 rows since the snapshot, then 5
        with mnemex.open(db, embedder=fake_embedder) as writer:
            new = writer.add_many([f"billing webhooks of queue {added}-{i}" for i in range(added)])
        stamp = snapshot.stat().st_mtime_ns
        with mnemex.open(db, embedder=fake_embedder) as reader:
            found = _vector_ids(reader, "billing webhooks of queue", limit=len(docs) + 5)
            vectors_index = reader.session.vectors(fake_embedder.dim)
            assert set(new) <= set(found)
            assert vectors_index.from_snapshot == vectors_index.size
            assert mapped(vectors_index._matrix) == room_left
            assert mapped(vectors_index._valid) == room_left
        assert (snapshot.stat().st_mtime_ns == stamp) == room_left  # written at 4 rows read
    with mnemex.open(db, embedder=fake_embedder) as last:  # the same answers from SQLite alone
        snapshot.unlink()
        assert _vector_ids(last, "billing webhooks of queue", limit=len(docs) + 5) == found


@pytest.mark.parametrize("damage", ["foreign", "truncated", "garbage", "ahead"])
def test_a_stale_or_broken_vector_snapshot_is_never_used(
    tmp_path: Path, fake_embedder: FakeEmbedder, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    from mnemex.engine.sqlite import vectors as index

    monkeypatch.setattr(index, "SNAPSHOT_MIN_ROWS", 1)
    db = tmp_path / "snap.db"
    snapshot = index.snapshot_path(db, fake_embedder.model_id)
    with mnemex.open(db, embedder=fake_embedder) as store:
        store.add_many(DOCS)
        _vector_ids(store, "billing")
    saved = snapshot.read_bytes()
    if damage in ("foreign", "ahead"):  # another store at the same path
        for path in tmp_path.glob("snap.db*"):
            if path != snapshot:
                path.unlink()
        with mnemex.open(db, embedder=fake_embedder) as store:
            store.add_many(
                ["Kafka consumers lag behind on Mondays"] * (1 if damage == "ahead" else 9)
            )
            if damage == "ahead":  # same lineage, but fewer vectors than the snapshot saw
                store.session.conn.execute(
                    "UPDATE meta SET value = ? WHERE key = 'created_at'",
                    (
                        json.loads(saved[16 : 16 + int.from_bytes(saved[8:16], "little")])[
                            "lineage"
                        ],
                    ),
                )
        snapshot.write_bytes(saved)
    elif damage == "truncated":
        snapshot.write_bytes(saved[: len(saved) - 100])
    else:
        snapshot.write_bytes(b"MNXVEC01" + b"\xff" * 64)
    with mnemex.open(db, embedder=fake_embedder) as store:
        hits = store.search("billing Kafka consumers", mode="vector", limit=20).hits
        got = {h.id for h in hits}
        assert got == {m.id for m in store.iter_memories()}
        assert store.session.vectors(fake_embedder.dim).from_snapshot == 0


class SlowEmbedder(FakeEmbedder):
    """The fake embedder, slow enough that the lexical arm runs while it embeds."""

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        time.sleep(0.05)
        return super().embed(texts)


def test_lexical_arm_while_the_query_is_embedded_gives_the_same_results(
    tmp_path: Path, fake_embedder: FakeEmbedder
) -> None:
    db = tmp_path / "overlap.db"
    with mnemex.open(db, embedder=fake_embedder) as store:
        store.add_many([f"{doc} ({i})" for i in range(3) for doc in DOCS])
        queries = ["billing webhooks", "login sessions memory", "frontend build Vite"]
        fast = [store.search(q, explain=True) for q in queries]
    slow = SlowEmbedder()
    with mnemex.open(db, embedder=slow) as store:
        for query, expected in zip(queries, fast, strict=True):
            got = store.search(query, explain=True)
            assert got.mode_used == "hybrid"
            assert [(h.id, round(h.score, 6)) for h in got.hits] == [
                (h.id, round(h.score, 6)) for h in expected.hits
            ]
        slow.fail = True
        failed = store.search("billing webhooks")
        assert failed.mode_used == "lexical" and failed.hits
        assert any("could not be embedded" in note for note in failed.notes)


def test_a_snapshot_left_half_written_is_removed_by_the_next_writer(
    tmp_path: Path, fake_embedder: FakeEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from mnemex.engine.sqlite import vectors as index

    monkeypatch.setattr(index, "SNAPSHOT_MIN_ROWS", 1)
    db = tmp_path / "snap.db"
    snapshot = index.snapshot_path(db, fake_embedder.model_id)
    old = snapshot.with_name(f"{snapshot.name}.999999.tmp")
    recent = snapshot.with_name(f"{snapshot.name}.999998.tmp")
    for path in (old, recent):
        path.write_bytes(b"half a snapshot")
    os.utime(old, (1, 1))
    with mnemex.open(db, embedder=fake_embedder) as store:
        store.add_many(DOCS)
        _vector_ids(store, "billing")
    assert snapshot.exists() and not old.exists()
    assert recent.exists()  # may be another process's, still being written


def test_a_memory_s_rows_are_found_by_seq_after_edits_and_forgets(
    vector_store: Store, fake_embedder: FakeEmbedder
) -> None:
    """The rows of a memory found through the rows sorted by seq are those a pass over
    every row finds, once edits (new rows at the end, the old ones dropped) and forgets
    have left the rows out of seq order; each memory's cosine is its own vector's."""
    ids = vector_store.add_many([f"{doc} note {i}" for i, doc in enumerate(DOCS * 4)])
    vector_store.update(ids[1], content="memcached holds the sessions now")
    vector_store.update(ids[7], content="the invoices moved to a queue")
    vector_store.forget(ids[3])
    vector_store.search("sessions", mode="vector")  # brings the index up to date
    index = vector_store.session.vectors(fake_embedder.dim)
    n = index._n
    seqs = [*sorted({int(s) for s in index._seq[:n]}), 10_000]  # the last has no vector
    for wanted in (seqs, seqs[:3], [seqs[5], seqs[1]], []):
        expected = np.flatnonzero(np.isin(index._seq[:n], wanted) & index._valid[:n])
        assert index._rows_of(wanted).tolist() == expected.tolist()
    query = fake_embedder.embed(["memcached sessions"])[0]
    conn = vector_store.session.conn
    stored = {
        seq: floats([blob], fake_embedder.dim)[0]
        for seq, blob in conn.execute("SELECT seq, vector FROM embeddings")
    }
    cosines = index.cosines_of(seqs, query)
    assert set(cosines) == set(stored)
    for seq, cosine in cosines.items():
        assert cosine == pytest.approx(float(stored[seq] @ query), abs=1e-6)


def test_a_filter_s_rows_are_kept_until_the_index_changes(
    vector_store: Store, fake_embedder: FakeEmbedder
) -> None:
    from mnemex.index.retrieval import Filters

    vector_store.add_many(DOCS)
    index = vector_store.session.vectors(fake_embedder.dim)
    mine = Filters("default")
    first = index.mask_for(mine)
    assert first is not None and index.mask_for(mine) is first
    with pytest.raises(ValueError):
        first[0] = False  # shared by the searches that ask again: never changed in place
    assert index.mask_for(Filters("other")) is None
    assert index.mask_for(mine) is not first  # another filter was asked in between
    again = index.mask_for(mine)
    new = vector_store.add("a sixth memory about invoices")  # the index changes
    grown = index.mask_for(mine)
    assert grown is not again and int(grown.sum()) == len(DOCS) + 1
    vector_store.forget(new)
    assert int(index.mask_for(mine).sum()) == len(DOCS)
    tagged = Filters("default", tags=("x",))
    assert index.mask_for(tagged) is not index.mask_for(tagged)  # tags: read each time


def test_a_search_says_how_many_memories_wait_for_their_vectors(
    tmp_path: Path, fake_embedder: FakeEmbedder
) -> None:
    with mnemex.open(tmp_path / "pending.db", embedder=fake_embedder) as store:
        store.add_many(DOCS)
        store.add("billing webhooks retried by a worker", embed=False)
        store.add("Stripe webhooks and billing again", embed=False)
        result = store.search("billing webhooks")
        assert result.mode_used == "hybrid"
        assert (
            f"2 of {len(DOCS) + 2} memories have no vector for {fake_embedder.model_id} yet: "
            "run `mnemex embed` (or `mnemex reindex`)"
        ) in result.notes
        store.embed()
        assert not any("no vector" in note for note in store.search("billing webhooks").notes)
