"""Vectors kept as float16 BLOBs, and stores of float32 BLOBs (schema 9) brought to them."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

import mnemex
from mnemex.engine.sqlite import vectors
from mnemex.engine.sqlite.vectors import snapshot_path
from mnemex.models import Hit
from mnemex.storage import migrations
from mnemex.storage.blobs import floats, half_blob, is_vector, stored
from tests.conftest import FakeEmbedder

TEXTS = [f"note {i} about {topic}" for i in range(40) for topic in ("billing", "redis", "vite")]


def scores(hits: list[Hit]) -> list[float]:
    return [h.score for h in hits]


def blob_widths(path: Path) -> set[int]:
    with sqlite3.connect(path) as conn:
        return {int(n) for (n,) in conn.execute("SELECT DISTINCT length(vector) FROM embeddings")}


def test_a_vector_is_stored_in_half_the_bytes_and_read_back_within_rounding(
    tmp_path: Path, fake_embedder: FakeEmbedder
) -> None:
    path = tmp_path / "half.db"
    with mnemex.open(path, embedder=fake_embedder) as store:
        store.add_many(TEXTS)
        index = store.session.vectors(fake_embedder.dim)
        index.refresh()
        exact = fake_embedder.embed(TEXTS)
        exact /= np.linalg.norm(exact, axis=1, keepdims=True)
        held = index.vectors_of([int(s) for s in index._seq[: index._n]])
        got = np.stack([held[s] for s in sorted(held)])
    assert blob_widths(path) == {2 * fake_embedder.dim}
    assert np.abs(got - exact).max() <= 2.0**-11  # each value rounded to float16
    assert np.array_equal(got, exact.astype(np.float16).astype(np.float32))


def test_blobs_of_either_width_are_read_and_others_refused() -> None:
    rows = np.random.default_rng(1).normal(size=(3, 8)).astype(np.float32)
    halves = [r.data for r in stored(rows)]
    singles = [r.tobytes() for r in rows]
    assert np.array_equal(floats(halves, 8), rows.astype(np.float16).astype(np.float32))
    assert np.array_equal(floats(singles, 8), rows)
    mixed = floats([halves[0], singles[1]], 8)
    assert np.array_equal(mixed[1], rows[1]) and not is_vector(b"\0" * 12, 8)
    with pytest.raises(ValueError, match="not one of 8 values"):
        floats([halves[0], b"\0" * 12], 8)
    assert half_blob(singles[0], 8) == bytes(halves[0])
    assert half_blob(bytes(halves[0]), 8) == bytes(halves[0])  # already float16: as it is
    assert half_blob(None, 8) is None and half_blob(b"\0" * 12, 8) == b"\0" * 12


def _store_of_schema_9(
    path: Path, embedder: FakeEmbedder, monkeypatch: pytest.MonkeyPatch
) -> list[Hit]:
    """A store as mnemex wrote it before migration 10: float32 vectors, and a snapshot of
    its vector index; the hits of a vector search of it."""
    monkeypatch.setattr(vectors, "SNAPSHOT_MIN_ROWS", 10)  # a snapshot of these few rows
    saved = migrations.MIGRATIONS, migrations.LATEST
    migrations.MIGRATIONS = tuple(m for m in saved[0] if m[0] < 10)  # type: ignore[misc]
    migrations.LATEST = 9  # type: ignore[misc]
    try:
        with mnemex.open(path, embedder=embedder) as store:
            store.add_many(TEXTS)
            conn = store.session.conn
            rows = conn.execute(
                "SELECT e.id, m.content FROM embeddings AS e JOIN memories AS m USING (seq)"
            ).fetchall()
            exact = embedder.embed([text for _, text in rows])
            exact /= np.linalg.norm(exact, axis=1, keepdims=True)
            assert not np.array_equal(exact, exact.astype(np.float16).astype(np.float32))
            with conn:
                conn.executemany(
                    "UPDATE embeddings SET vector = ? WHERE id = ?",
                    [(v.tobytes(), i) for (i, _), v in zip(rows, exact, strict=True)],
                )
            hits = store.search("redis note", mode="vector", limit=10).hits
    finally:
        migrations.MIGRATIONS, migrations.LATEST = saved  # type: ignore[misc]
    assert blob_widths(path) == {4 * embedder.dim}
    assert snapshot_path(path, embedder.model_id).exists()
    return hits


def test_a_store_of_float32_vectors_is_migrated_to_float16_and_searches_alike(
    tmp_path: Path, fake_embedder: FakeEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "old.db"
    hits = _store_of_schema_9(path, fake_embedder, monkeypatch)
    with mnemex.open(path, embedder=fake_embedder) as store:
        assert store.stats().schema_version == migrations.LATEST
        assert blob_widths(path) == {2 * fake_embedder.dim}
        found = store.search("redis note", mode="vector", limit=10).hits
        index = store.session.vectors(fake_embedder.dim)
        assert index.from_snapshot == 0  # the snapshot held the float32 values: read again
        assert scores(found) == pytest.approx(scores(hits), abs=1e-3)  # ties may swap
        assert store.check()["ok"]
    with mnemex.open(path, embedder=fake_embedder) as store:
        again = store.search("redis note", mode="vector", limit=10).hits
        assert [(h.id, h.score) for h in again] == [(h.id, h.score) for h in found]
        assert store.session.vectors(fake_embedder.dim).from_snapshot == len(TEXTS)


def test_a_float32_row_written_beside_float16_ones_is_read_and_reused(
    tmp_path: Path, fake_embedder: FakeEmbedder
) -> None:
    """A row of the older width (copied in by hand, say) still counts, and its text's
    vector is reused from it rather than embedded again."""
    path = tmp_path / "mixed.db"
    with mnemex.open(path, embedder=fake_embedder) as store:
        store.add_many(TEXTS[:10])
        conn = store.session.conn
        eid, blob = conn.execute("SELECT id, vector FROM embeddings ORDER BY id").fetchone()
        with conn:
            conn.execute(
                "UPDATE embeddings SET vector = ? WHERE id = ?",
                (floats([blob], fake_embedder.dim).tobytes(), eid),
            )
        calls = fake_embedder.calls
        store.add(TEXTS[0], namespace="other")  # the same text: its vector is reused
        assert fake_embedder.calls == calls
        assert store.search(TEXTS[0], mode="vector", namespace="other").hits
        index = store.session.vectors(fake_embedder.dim)
        assert index.corrupt == 0 and index.size == 11


def test_the_migration_gives_back_the_pages_float32_vectors_took(
    tmp_path: Path, fake_embedder: FakeEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "old.db"
    _store_of_schema_9(path, fake_embedder, monkeypatch)
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        before = conn.execute("PRAGMA page_count").fetchone()[0]
        table = conn.execute("SELECT sum(length(vector)) FROM embeddings").fetchone()[0]
    with mnemex.open(path, embedder=fake_embedder) as store:
        conn = store.session.conn
        assert conn.execute("PRAGMA freelist_count").fetchone()[0] == 0
        after = conn.execute("PRAGMA page_count").fetchone()[0]
        size = conn.execute("PRAGMA page_size").fetchone()[0]
        assert (before - after) * size >= table / 4  # half the vectors' bytes, less pages' slack
        assert store.search("redis note", mode="vector").hits
