"""A long memory gets a vector per window of its text and is scored by its best window.

The tests that hold on SQLite alone; those run on both engines are in
``tests/engine/test_windows.py``.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

import mnemex
from mnemex.engine.sqlite.vectors import SNAPSHOT_MAGIC, snapshot_path
from mnemex.storage import migrations
from tests.conftest import FakeEmbedder
from tests.engine.test_windows import (
    FILLER,
    TAIL,
    WORDS,
    WindowedFake,
    cosines,
    fill,
    long_text,
    rows,
    seq_of,
)


def test_another_process_follows_windows_written_in_any_order(
    tmp_path: Path, windowed: WindowedFake
) -> None:
    path = tmp_path / "m.db"
    reader = mnemex.open(path, embedder=WindowedFake())
    writer = mnemex.open(path, embedder=windowed)
    try:
        long_id = fill(writer)
        assert reader.search(TAIL, mode="vector").hits[0].id == long_id
        writer.update(long_id, content="nothing of interest here at all")
        writer.add(long_text())
        hits = reader.search(TAIL, mode="vector").hits
        assert hits[0].id != long_id
        assert len({h.id for h in hits}) == len(hits)
        assert reader.session.vectors(windowed.dim).size == reader.count()
    finally:
        writer.close()
        reader.close()


def test_top_k_counts_memories_not_windows(make_store) -> None:  # type: ignore[no-untyped-def]
    """Many long memories, each with windows that all match: k memories come back, the
    best first, as an exhaustive best-window ranking gives them."""
    windowed = WindowedFake()
    store = make_store(embedder=windowed)
    texts = [
        f"{' '.join(FILLER)} topic{i} " + " ".join(FILLER[i % 3] for _ in range(i % 4))
        for i in range(30)
    ]
    store.add_many(texts)
    query = np.asarray(windowed.embed(["planning slides holiday"])[0], dtype=np.float32)
    query /= np.linalg.norm(query)
    index = store.session.vectors(windowed.dim)
    hits = index.top(query, index.mask_for(store_filters()), 5)
    assert len(hits) == 5 and len({h.seq for h in hits}) == 5
    exhaustive = index.cosines_of(range(1, 100), query)
    best = sorted(exhaustive.items(), key=lambda item: (-item[1], item[0]))[:5]
    assert [(h.seq, round(h.cosine, 6)) for h in hits] == [(s, round(c, 6)) for s, c in best]


def store_filters():  # type: ignore[no-untyped-def]
    from mnemex.index.retrieval import Filters

    return Filters(namespace=None)


def test_snapshot_of_the_old_format_is_rebuilt_not_misread(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with mnemex.open(path, embedder=WindowedFake()) as store:
        store.add_many(
            [f"{' '.join(FILLER)} number {i} {TAIL if i == 7 else ''}" for i in range(1_200)]
        )
        store.search(TAIL, mode="vector")  # loads the index and writes the snapshot
    snapshot = snapshot_path(path, WindowedFake.model_id)
    data = snapshot.read_bytes()
    assert data.startswith(SNAPSHOT_MAGIC) and SNAPSHOT_MAGIC == b"MNXVEC04"
    snapshot.write_bytes(b"MNXVEC03" + data[8:])  # as an older mnemex wrote it
    with mnemex.open(path, embedder=WindowedFake()) as store:
        hits = store.search(TAIL, mode="vector").hits
        index = store.session.vectors(WindowedFake.dim)
        assert index.from_snapshot == 0  # not read
        assert TAIL in store.get(hits[0].id).memories[0].content
        assert index.size == 1_200
    assert snapshot.read_bytes().startswith(SNAPSHOT_MAGIC)  # written anew
    with mnemex.open(path, embedder=WindowedFake()) as store:
        top = store.search(TAIL, mode="vector").hits[0]
        assert TAIL in store.get(top.id).memories[0].content
        assert store.session.vectors(WindowedFake.dim).from_snapshot > 1_200  # windows too


def _old_store(path: Path, texts: Sequence[str], embedder: FakeEmbedder) -> list[int]:
    """A store as mnemex wrote it before migration 7 (one vector a memory)."""
    saved = migrations.MIGRATIONS, migrations.LATEST
    old = tuple(m for m in migrations.MIGRATIONS if m[0] < 7)
    migrations.MIGRATIONS, migrations.LATEST = old, 6  # type: ignore[misc]
    try:
        with mnemex.open(path, embedder=None) as store:
            store.add_many(list(texts))
    finally:
        migrations.MIGRATIONS, migrations.LATEST = saved  # type: ignore[misc]
    conn = sqlite3.connect(path)
    with conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 6
        memories = conn.execute("SELECT seq, content, content_hash FROM memories").fetchall()
        vectors = embedder.embed([m[1] for m in memories])
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        conn.executemany(
            "INSERT INTO embeddings (seq, model, dim, content_hash, vector) VALUES (?, ?, ?, ?, ?)",
            [
                (seq, embedder.model_id, embedder.dim, digest, vector.astype(np.float32).tobytes())
                for (seq, _, digest), vector in zip(memories, vectors, strict=True)
            ],
        )
        conn.execute(
            "INSERT INTO meta (key, value) VALUES ('embedder', ?)",
            (
                json.dumps(
                    {"dim": embedder.dim, "model_id": embedder.model_id, "provider": "custom"}
                ),
            ),
        )
    ids = [r[0] for r in conn.execute("SELECT id FROM embeddings ORDER BY id")]
    conn.close()
    return ids


def test_a_store_made_before_windows_migrates_and_reindex_windows_the_long(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    texts = [*FILLER, "lions hunt at dawn near the river", long_text()]
    ids = _old_store(path, texts, WindowedFake())
    windowed = WindowedFake()
    with mnemex.open(path, embedder=windowed) as store:
        conn = store.session.conn
        assert conn.execute("PRAGMA user_version").fetchone()[0] == migrations.LATEST
        assert conn.execute("SELECT id, window FROM embeddings ORDER BY id").fetchall() == [
            (i, 0) for i in ids
        ]
        assert store.check()["ok"]
        hits = store.search("lions river dawn", mode="vector").hits
        assert store.get(hits[0].id).memories[0].content.startswith("lions")
        long_seq = seq_of(store, next(h.id for h in store.search(TAIL).hits))
        before = cosines(store, TAIL)
        store.reindex()
        assert set(windowed.cut) == {long_text()}  # the long one only
        expected = len(windowed.windows(long_text()))
        assert [w for _, w in rows(store, long_seq)] == list(range(expected))
        assert all(w == 0 for s, w in rows(store) if s != long_seq)
        long_id = conn.execute("SELECT id FROM memories WHERE seq = ?", (long_seq,)).fetchone()[0]
        assert cosines(store, TAIL)[long_id] > before[long_id]
        new = conn.execute("SELECT max(id) FROM embeddings").fetchone()[0]
        assert new > max(ids)  # ids go on from the old table's
        assert store.check()["ok"]
        assert store.stats().vectors == len(texts)


@pytest.mark.model
def test_the_local_model_finds_a_long_memory_by_its_tail(make_store) -> None:  # type: ignore[no-untyped-def]
    from mnemex.embed.local import WINDOW, LocalEmbedder

    model = LocalEmbedder()
    head = (
        "Notes from the weekly infrastructure review. The database cluster was upgraded "
        "and the replicas caught up within the hour. Backups are verified every night. "
    ) * 12
    tail = (
        "Separately, Maria adopted a grey kitten named Pepper from the animal shelter. The "
        "kitten sleeps on her desk, chases string and has already been to the vet for its shots."
    )
    text = head + tail
    assert len(model.windows(text)) > 1
    assert len(model._load_tokenizer().encode(text, add_special_tokens=False).ids) >= WINDOW
    others = [
        "The quarterly sales report is due on Friday.",
        "Deploys are frozen during the holiday week.",
        "The office coffee machine was repaired on Monday.",
        "Jon prefers tea over coffee in the mornings.",
    ]
    query = "who adopted a cat from the shelter?"
    found: dict[bool, bool] = {}
    for windows in (True, False):
        store = make_store(
            f"{windows}.db", embedder=model, embed_windows=windows, relevance_floor=False
        )
        store.add_many(others)
        long_id = store.add(text)
        ranked = [h.id for h in store.search(query, mode="vector").hits]
        found[windows] = ranked[:1] == [long_id]
    assert found[True]
    assert not found[False]  # with one vector, the tail is invisible


def test_the_hnsw_graph_returns_each_memory_once_at_its_best_window(tmp_path: Path) -> None:
    pytest.importorskip("faiss")  # the ann extra
    rng = np.random.default_rng(3)
    words = [f"w{i}" for i in range(300)]
    texts = [" ".join(rng.choice(words, size=30)) for _ in range(2_500)]
    per_text = len(WindowedFake().windows(texts[0]))
    assert per_text > 1
    path = tmp_path / "ann.db"
    with mnemex.open(path, embedder=WindowedFake(), ann="on") as store:
        store.add_many(texts, embed=False)
        store.embed()
        index = store.session.vectors(64)
        assert index.ann is not None and index.ann.size == 2_500 * per_text  # one per window
    with (
        mnemex.open(path, embedder=WindowedFake(), ann="on") as graph,
        mnemex.open(path, embedder=WindowedFake(), ann="off") as exact,
    ):
        overlap = []
        for text in texts[:20]:
            query = " ".join(text.split()[-WORDS:])  # a last window's words
            found = [h.id for h in graph.search(query, 10, mode="vector").hits]
            assert len(set(found)) == len(found) == 10
            truth = [h.id for h in exact.search(query, 10, mode="vector").hits]
            assert found[0] == truth[0]
            overlap.append(len(set(found) & set(truth)) / 10)
        assert graph.session.vectors(64).ann is not None
        assert np.mean(overlap) >= 0.9


@pytest.mark.postgres
@pytest.mark.parametrize("exact_max", [100_000, 10])
def test_postgres_top_k_counts_memories_not_windows(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, exact_max: int
) -> None:
    """pgvector returns each memory once, at its best window, the best k memories: by
    the exact scan, and through the HNSW index (``exact_max`` 10) as far as its recall
    goes."""
    from mnemex.engine.postgres import vectors as pg_vectors

    monkeypatch.setattr(pg_vectors, "EXACT_MAX", exact_max)
    windowed = WindowedFake()
    rng = np.random.default_rng(5)
    words = [f"w{i}" for i in range(200)]
    texts = [" ".join(rng.choice(words, size=40)) for _ in range(300)]
    with mnemex.open(pg_url, embedder=windowed) as store:
        store.add_many(texts)
        per_memory = len(rows(store)) / store.count()
        assert per_memory > 3
        query = np.asarray(windowed.embed([" ".join(texts[7].split()[-WORDS:])])[0])
        query /= np.linalg.norm(query)
        with store.session.connection() as conn:
            hits = pg_vectors.vector(conn, query, "default", windowed.model_id, 10)
            truth = conn.execute(
                "SELECT seq, max(1 - (vector::vector(64) <=> %s::vector(64))) AS c "
                "FROM embeddings GROUP BY seq ORDER BY c DESC, seq LIMIT 10",
                (pg_vectors.literal(query),),
            ).fetchall()
    assert len({h.seq for h in hits}) == len(hits) == 10
    assert hits[0].seq == truth[0][0]
    if exact_max > 300 * per_memory:
        assert [(h.seq, round(h.cosine, 5)) for h in hits] == [(s, round(c, 5)) for s, c in truth]
    else:
        assert len({h.seq for h in hits} & {s for s, _ in truth}) >= 8
