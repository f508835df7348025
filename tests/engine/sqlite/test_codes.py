"""The 8-bit first pass of exact search (faiss): the exact top k, from codes kept beside
the snapshot, on small stores with the size threshold lowered."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import faiss  # noqa: F401  (the ann extra: make test installs it)
import numpy as np
import pytest

import mnemex
from mnemex.engine.sqlite import codes
from mnemex.engine.sqlite.vectors import VectorIndex, exact_cosines, snapshot_path
from mnemex.index.retrieval import Filters
from mnemex.storage.blobs import floats
from tests.conftest import FakeEmbedder


class NoiseEmbedder:
    """Unit vectors drawn from a text's hash; texts ``"<n> ..."`` share group n's
    direction, so a query finds many near rows (the first pass must look past them)."""

    model_id = "test:noise-48"
    dim = 48

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            group = text.split()[0]
            base = np.random.default_rng(int(hashlib.md5(group.encode()).hexdigest()[:8], 16))
            own = np.random.default_rng(int(hashlib.md5(text.encode()).hexdigest()[:8], 16))
            vector = base.standard_normal(self.dim) + 0.3 * own.standard_normal(self.dim)
            out[row] = vector / np.linalg.norm(vector)
        return out


def texts(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [f"{rng.integers(40)} memory {i} {rng.integers(1000)}" for i in range(n)]


def tops(index: VectorIndex, queries: np.ndarray, mask: np.ndarray | None, k: int) -> list:
    return [[(h.seq, h.cosine) for h in index.top(q, mask, k)] for q in queries]


@pytest.fixture
def lowered(monkeypatch):  # type: ignore[no-untyped-def]
    """Codes past 0 rows (the threshold is 50,000)."""
    monkeypatch.setattr(codes, "CODES_MIN_ROWS", 0)


@pytest.fixture
def noise_store(tmp_path: Path):  # type: ignore[no-untyped-def]
    path = tmp_path / "codes.db"
    with mnemex.open(path, embedder=NoiseEmbedder(), ann="off") as store:
        store.add_many(texts(3000), embed=False)
        store.add_many(texts(500, seed=1), embed=False, namespace="other")
        store.embed()
        store.session.vectors(48).refresh()
    return path


@pytest.mark.parametrize("k", [1, 10, 60])
def test_the_codes_give_the_exact_top_k(noise_store: Path, monkeypatch, k: int) -> None:  # type: ignore[no-untyped-def]
    queries = NoiseEmbedder().embed([f"{g} query {g}" for g in range(40)])
    with mnemex.open(noise_store, embedder=NoiseEmbedder(), ann="off") as store:
        index = store.session.vectors(48)
        for filters in (Filters(namespace=None), Filters(namespace="default")):
            mask = index.mask_for(filters)
            monkeypatch.setattr(codes, "CODES_MIN_ROWS", 10**9)
            exact = tops(index, queries, mask, k)
            monkeypatch.setattr(codes, "CODES_MIN_ROWS", 0)
            assert tops(index, queries, mask, k) == exact
            assert index.codes is not None and index.codes.size == index._n


def test_ties_are_broken_as_the_exact_scan_breaks_them(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # Bag-of-words vectors: many rows share one cosine; the k-th place goes by seq.
    words = "red green blue cyan".split()
    with mnemex.open(tmp_path / "ties.db", embedder=FakeEmbedder(), ann="off") as store:
        store.add_many([f"{words[i % 4]} {words[i % 3]} note" for i in range(2000)], embed=False)
        store.embed()
        index = store.session.vectors(64)
        mask = index.mask_for(Filters(namespace=None))
        queries = FakeEmbedder().embed(["red note", "blue green", "cyan"])
        queries /= np.linalg.norm(queries, axis=1, keepdims=True)
        monkeypatch.setattr(codes, "CODES_MIN_ROWS", 10**9)
        exact = tops(index, queries, mask, 10)
        monkeypatch.setattr(codes, "CODES_MIN_ROWS", 0)
        assert tops(index, queries, mask, 10) == exact


def test_best_cosines_are_the_full_passes_to_the_last_bit(noise_store: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    queries = NoiseEmbedder().embed([f"{g} background {g}" for g in range(0, 80, 2)])
    with mnemex.open(noise_store, embedder=NoiseEmbedder(), ann="off") as store:
        index = store.session.vectors(48)
        mask = index.mask_for(Filters(namespace=None))
        half = mask.copy()
        half[::2] = False
        monkeypatch.setattr(codes, "CODES_FIRST_POOL", 2)  # most queries must look further
        monkeypatch.setattr(codes, "CODES_MIN_ROWS", 10**9)
        full = [index.best_cosines(m, queries) for m in (mask, half)]
        monkeypatch.setattr(codes, "CODES_MIN_ROWS", 0)
        by_codes = [index.best_cosines(m, queries) for m in (mask, half)]
    assert all(np.array_equal(a, b) for a, b in zip(full, by_codes, strict=True))


def test_a_new_process_reads_the_codes_saved_beside_the_snapshot(
    lowered: None, noise_store: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    saved = codes.codes_path(snapshot_path(noise_store, NoiseEmbedder.model_id))
    assert saved.exists()  # written with the snapshot
    made = []
    original = codes.VectorCodes.encode
    monkeypatch.setattr(
        codes.VectorCodes, "encode", lambda self, v: made.append(len(v)) or original(self, v)
    )
    query = NoiseEmbedder().embed(["7 query"])[0]
    with mnemex.open(noise_store, embedder=NoiseEmbedder(), ann="off") as store:
        hits = store.session.vectors(48).top(
            query, store.session.vectors(48).mask_for(Filters(namespace=None)), 5
        )
    assert hits and made == []  # read, not encoded from the float32 rows


def test_an_old_store_without_codes_and_a_stale_codes_file_still_search_exactly(
    lowered: None, noise_store: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    saved = codes.codes_path(snapshot_path(noise_store, NoiseEmbedder.model_id))
    stale = saved.read_bytes()
    saved.unlink()  # a store written before the codes: its float32 snapshot alone
    query = NoiseEmbedder().embed(["3 query"])[0]

    def search() -> list[tuple[int, float]]:
        with mnemex.open(noise_store, embedder=NoiseEmbedder(), ann="off") as store:
            index = store.session.vectors(48)
            return [
                (h.seq, h.cosine)
                for h in index.top(query, index.mask_for(Filters(namespace=None)), 10)
            ]

    first = search()
    assert saved.exists()  # made from the matrix on the first scan, and kept
    with mnemex.open(noise_store, embedder=NoiseEmbedder(), ann="off") as store:
        store.add_many([f"3 query fresh {i}" for i in range(1200)], embed=True)
        store.session.vectors(48).refresh()  # a new snapshot (and codes) of 4,700 rows
    saved.write_bytes(stale)  # codes of the older 3,500 rows: not these rows'
    after = search()
    monkeypatch.setattr(codes, "CODES_MIN_ROWS", 10**9)
    assert after == search() and after != first


def test_with_a_graph_the_background_pass_reads_the_codes_a_chunk_at_a_time(
    lowered: None, noise_store: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(codes, "READ_CHUNK", 700)  # 5 chunks of the file, then the tail
    monkeypatch.setattr(codes, "CODES_FIRST_POOL", 2)
    queries = NoiseEmbedder().embed([f"{g} background {g}" for g in range(0, 80, 2)])
    with mnemex.open(noise_store, embedder=NoiseEmbedder(), ann="on") as store:
        store.add_many([f"5 later {i}" for i in range(30)], embed=True)  # after the file
        store.session.update_ann(store.embedder)  # type: ignore[arg-type]
    with mnemex.open(noise_store, embedder=NoiseEmbedder(), ann="on") as store:
        index = store.session.vectors(48)
        index.refresh()
        assert index.ann is not None and index._n == 3530
        mask = index.mask_for(Filters(namespace=None))
        assert isinstance(index._background_codes(), codes.StreamedCodes)
        streamed = index.best_cosines(mask, queries)
        assert index.codes is None  # none held
        monkeypatch.setattr(codes, "CODES_MIN_ROWS", 10**9)
        assert np.array_equal(streamed, index.best_cosines(mask, queries))


def brute_force(path: Path, queries: np.ndarray, k: int) -> list:
    """The exact top ``k`` (seq, cosine) of each query, computed from SQLite's rows."""
    import sqlite3

    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT seq, vector FROM embeddings ORDER BY id").fetchall()
    seqs = np.array([r[0] for r in rows])
    matrix = floats([r[1] for r in rows], queries.shape[1])
    found = []
    for q in queries:
        exact = exact_cosines(matrix, q)
        order = np.lexsort((seqs, -exact))[:k]
        found.append([(int(seqs[i]), float(exact[i])) for i in order])
    return found


def test_a_large_store_keeps_its_vectors_in_sqlite_alone(lowered: None, noise_store: Path) -> None:
    snapshot = snapshot_path(noise_store, NoiseEmbedder.model_id)
    assert snapshot.stat().st_size < 3500 * 48  # the rows' fields, no float32 matrix
    queries = NoiseEmbedder().embed([f"{g} query {g}" for g in range(0, 40, 3)])
    with mnemex.open(noise_store, embedder=NoiseEmbedder(), ann="off") as store:
        index = store.session.vectors(48)
        mask = index.mask_for(Filters(namespace=None))
        assert index.from_snapshot == index._stored == 3500
        assert index.memory_bytes() < 3500 * 48  # the vectors are not held
        assert tops(index, queries, mask, 10) == brute_force(noise_store, queries, 10)
        seq = int(index._seq[17])
        vector = store.session.conn.execute(
            "SELECT vector FROM embeddings WHERE seq = ?", (seq,)
        ).fetchone()[0]
        assert len(vector) == 2 * 48  # float16
        assert index.vectors_of([seq])[seq].tobytes() == floats([vector], 48).tobytes()


def test_rows_added_and_forgotten_after_a_snapshot_without_vectors(
    lowered: None, noise_store: Path
) -> None:
    queries = NoiseEmbedder().embed([f"{g} query {g}" for g in range(0, 40, 3)])
    with mnemex.open(noise_store, embedder=NoiseEmbedder(), ann="off") as store:
        index = store.session.vectors(48)
        index.refresh()
        ids = [m.id for m in store.iter_memories(namespace="default")][:2000]
        store.add_many([f"{i % 40} later memory {i}" for i in range(600)])
        store.forget(ids)  # more than a quarter of the rows: the index compacts
        mask = index.mask_for(Filters(namespace=None))
        assert index._n == 2100 and index._stored < 2100
        assert tops(index, queries, mask, 10) == brute_force(noise_store, queries, 10)
    with mnemex.open(noise_store, embedder=NoiseEmbedder(), ann="off") as store:
        index = store.session.vectors(48)
        mask = index.mask_for(Filters(namespace=None))
        assert tops(index, queries, mask, 10) == brute_force(noise_store, queries, 10)


def test_without_faiss_a_snapshot_without_vectors_is_not_read(
    lowered: None, noise_store: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(codes, "available", lambda: False)
    queries = NoiseEmbedder().embed(["4 query", "9 query"])
    with mnemex.open(noise_store, embedder=NoiseEmbedder(), ann="off") as store:
        index = store.session.vectors(48)
        mask = index.mask_for(Filters(namespace=None))
        assert index.from_snapshot == 0 and index._stored == 0  # read from SQLite
        assert tops(index, queries, mask, 10) == brute_force(noise_store, queries, 10)


def test_below_the_threshold_a_snapshot_without_vectors_is_not_read(
    lowered: None, noise_store: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(codes, "CODES_MIN_ROWS", 10**9)  # the float32 scan, as a small store
    queries = NoiseEmbedder().embed(["2 query", "8 query"])
    with mnemex.open(noise_store, embedder=NoiseEmbedder(), ann="off") as store:
        index = store.session.vectors(48)
        mask = index.mask_for(Filters(namespace=None))
        assert index.from_snapshot == 0 and index._stored == 0 and index.codes is None
        assert tops(index, queries, mask, 10) == brute_force(noise_store, queries, 10)
        assert index.codes is None  # scanned in float32


def test_new_rows_are_appended_to_the_codes_file_and_a_foreign_file_is_written_whole(
    lowered: None, noise_store: Path
) -> None:
    saved = codes.codes_path(snapshot_path(noise_store, NoiseEmbedder.model_id))
    queries = NoiseEmbedder().embed([f"{g} query {g}" for g in range(0, 40, 3)])
    inode, size = saved.stat().st_ino, saved.stat().st_size
    with mnemex.open(noise_store, embedder=NoiseEmbedder(), ann="off") as store:
        index = store.session.vectors(48)
        index.refresh()
        store.add_many([f"{i % 40} appended memory {i}" for i in range(1200)])
        index.refresh()  # past SNAPSHOT_MIN_ROWS new rows: the snapshot and codes are saved
        assert index._n == 4700
        whole = saved.with_name("whole.codes")
        assert index.codes is not None and index._snapshot_head is not None
        index.codes.write(whole, index._snapshot_head)
    # The same file, grown by the new rows' codes, byte for byte what a whole write gives.
    assert saved.stat().st_ino == inode and saved.stat().st_size == size + 1200 * 48
    assert saved.read_bytes() == whole.read_bytes()
    with mnemex.open(noise_store, embedder=NoiseEmbedder(), ann="off") as store:
        index = store.session.vectors(48)
        assert tops(index, queries, index.mask_for(Filters(namespace=None)), 10) == brute_force(
            noise_store, queries, 10
        )
        assert index.codes is not None and index.codes.size == 4700  # read, not made
        # Another process wrote a file of its own since this one read it: not appended to.
        before = index._snapshot_head
        assert before is not None
        saved.write_bytes(whole.read_bytes().replace(b'"n": 4700', b'"n": 4699', 1))
        assert not index.codes.append(saved, before, before)
        store.add_many([f"{i % 40} third memory {i}" for i in range(1100)])
        index.refresh()
    assert saved.stat().st_size == codes.HEADER_ROOM + 5800 * 48  # written whole
    with mnemex.open(noise_store, embedder=NoiseEmbedder(), ann="off") as store:
        index = store.session.vectors(48)
        assert tops(index, queries, index.mask_for(Filters(namespace=None)), 10) == brute_force(
            noise_store, queries, 10
        )
