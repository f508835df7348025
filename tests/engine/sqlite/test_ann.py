"""The optional HNSW index (faiss), on a small store with ann forced on."""

from __future__ import annotations

import faiss  # the ann extra: make test installs it
import numpy as np

import mnemex
from mnemex.engine.sqlite import ann
from mnemex.engine.sqlite.vectors import VectorIndex
from tests.conftest import FakeEmbedder

WORDS = (
    "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho "
    "sigma tau upsilon phi chi psi omega"
).split()


def corpus(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=6)) + f" item{i}" for i in range(n)]


def test_hnsw_index_is_built_saved_and_used(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "ann.db"
    with mnemex.open(path, embedder=FakeEmbedder(), ann="on") as store:
        ids = store.add_many(corpus(6000), embed=False)
        store.embed()
        sidecar = ann.sidecar(path, "fake:bow-64")
        assert sidecar.exists()
        index = store.session.vectors(64)
        assert index.ann is not None and index.ann.size == 6000
        # A fresh process view: loads the file, not a rebuild.
    with (
        mnemex.open(path, embedder=FakeEmbedder(), ann="on") as store,
        mnemex.open(path, embedder=FakeEmbedder(), ann="off") as exact,
    ):
        queries = corpus(30, seed=1)
        overlap = []
        for q in queries:
            approx_ids = [h.id for h in store.search(q, 10, mode="vector").hits]
            exact_ids = [h.id for h in exact.search(q, 10, mode="vector").hits]
            overlap.append(len(set(approx_ids) & set(exact_ids)) / 10)
        assert store.session.vectors(64).ann is not None
        assert exact.session.vectors(64).ann is None
        assert np.mean(overlap) >= 0.9
        # New vectors after the build are searchable; forgotten ones are not returned.
        new = store.add("omega omega omega brand new memory", embed=True)
        store.forget(ids[:3000])
        hits = store.search("omega omega omega brand new memory", 10, mode="vector").hits
        assert hits[0].id == new
        assert not {h.id for h in store.search("alpha beta", 50, mode="vector").hits} & set(
            ids[:3000]
        )
        # Half the graph is dead now: the next embed rebuilds it.
        store.embed()
        assert store.session.vectors(64).ann is not None
        assert store.session.vectors(64).ann.size == 3001


def test_selective_filters_fall_back_to_exact(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with mnemex.open(tmp_path / "f.db", embedder=FakeEmbedder(), ann="on") as store:
        store.add_many(corpus(6000), embed=False)
        rare = store.add("alpha beta gamma rare kind", kind="rare", embed=False)
        store.embed()
        assert [
            h.id for h in store.search("alpha beta", 5, mode="vector", kinds=["rare"]).hits
        ] == [rare]


def test_auto_waits_for_the_threshold(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "auto.db"
    with mnemex.open(path, embedder=FakeEmbedder(), ann="auto", ann_threshold=10_000) as store:
        store.add_many(corpus(500))
        store.embed()
        assert not ann.sidecar(path, "fake:bow-64").exists()


def test_a_namespace_gets_all_k_places_from_the_graph(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Rows of other namespaces are skipped inside the graph search, not after it: a
    namespace holding half the graph still gets its k best, as exact search finds them."""
    path = tmp_path / "ns.db"
    with mnemex.open(path, embedder=FakeEmbedder(), ann="on") as store:
        mine = set(store.add_many(corpus(6000, seed=2), namespace="a", embed=False))
        store.add_many(corpus(6000, seed=3), namespace="b", embed=False)
        store.embed()
        assert store.session.vectors(64).ann is not None
    with (
        mnemex.open(path, embedder=FakeEmbedder(), ann="on") as store,
        mnemex.open(path, embedder=FakeEmbedder(), ann="off") as exact,
    ):
        answered = []
        graph_search = VectorIndex._search_ann

        def recorded(self, *args):  # type: ignore[no-untyped-def]
            found = graph_search(self, *args)
            answered.append(found is not None)
            return found

        monkeypatch.setattr(VectorIndex, "_search_ann", recorded)
        overlap = []
        for q in corpus(20, seed=4):
            found = [h.id for h in store.search(q, 20, mode="vector", namespace="a").hits]
            truth = [h.id for h in exact.search(q, 20, mode="vector", namespace="a").hits]
            assert len(found) == 20 and set(found) <= mine
            overlap.append(len(set(found) & set(truth)) / 20)
        assert len(answered) == 20 and all(answered)  # the graph answered every query
        assert np.mean(overlap) >= 0.9


def test_rows_dropped_since_the_build_are_skipped_after_the_graph_search(  # type: ignore[no-untyped-def]
    tmp_path, monkeypatch
) -> None:
    """A few forgotten memories (still in the graph) are left out of the graph's answers,
    not by a set of every other id inside the search (50 ms for a million ids); the hits
    are still the best of what remains."""
    path = tmp_path / "dropped.db"
    with mnemex.open(path, embedder=FakeEmbedder(), ann="on") as store:
        ids = store.add_many(corpus(6000, seed=5), embed=False)
        store.embed()
    with (
        mnemex.open(path, embedder=FakeEmbedder(), ann="on") as store,
        mnemex.open(path, embedder=FakeEmbedder(), ann="off") as exact,
    ):
        gone = set(ids[::50])
        store.forget(sorted(gone))
        sets = []
        monkeypatch.setattr(
            faiss, "IDSelectorBatch", lambda *a: sets.append(a) or faiss.IDSelectorAll()
        )
        overlap = []
        for q in corpus(20, seed=6):
            found = [h.id for h in store.search(q, 10, mode="vector").hits]
            truth = [h.id for h in exact.search(q, 10, mode="vector").hits]
            assert len(found) == 10 and not set(found) & gone
            overlap.append(len(set(found) & set(truth)) / 10)
        assert store.session.vectors(64).ann is not None
        assert sets == []
        assert np.mean(overlap) >= 0.9


def test_the_graph_keeps_8_bit_codes_past_a_few_vectors(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Trained on the vectors it is built from, the graph stores each as 8-bit codes; a
    graph of too few vectors to train on keeps float32, and both take later vectors."""
    rng = np.random.default_rng(7)
    vectors = rng.normal(size=(3000, 64)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    ids = np.arange(1, 3001, dtype=np.int64)
    kinds = {}
    for label, count in (("small", ann.SQ8_MIN_VECTORS - 1), ("large", 2000)):
        graph = ann.HnswIndex(tmp_path / f"{label}.hnsw", 64)
        graph.build(vectors[:count], ids[:count])
        graph.add(vectors[count:], ids[count:])
        graph.save()
        loaded = ann.HnswIndex.load(tmp_path / f"{label}.hnsw", 64)
        assert loaded is not None and loaded.size == 3000
        kinds[label] = type(faiss.downcast_index(loaded.index.index)).__name__
        found, _ = loaded.search(vectors[2500], 5)
        assert found[0] == ids[2500]
    assert kinds == {"small": "IndexHNSWFlat", "large": "IndexHNSWSQ"}
    saved = (tmp_path / "small.hnsw").stat().st_size - (tmp_path / "large.hnsw").stat().st_size
    assert saved >= 0.9 * 3000 * 64 * 3  # a byte a dimension instead of four


def test_a_loaded_graph_gets_only_the_vectors_written_since_it_was_saved(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "ann.db"
    with mnemex.open(path, embedder=FakeEmbedder(), ann="on") as store:
        store.add_many(corpus(3000), embed=False)
        store.embed()
        built = store.session.vectors(64).ann
        assert built is not None and built.size == 3000
    with mnemex.open(path, embedder=FakeEmbedder(), ann="off") as writer:
        new = [writer.add(f"omega omega psi fresh memory {i}", embed=True) for i in range(3)]
        writer.session.vectors(64).refresh()
    with mnemex.open(path, embedder=FakeEmbedder(), ann="on") as store:
        index = store.session.vectors(64)
        index.refresh()
        assert index.from_snapshot == 3003
        assert index.ann is not None and index.ann.size == 3003  # the 3 new rows, once
        vectors, eids = index._rows_after(index.ann.max_id - 3)
        assert vectors.shape == (3, 64) and (eids > index.ann.max_id - 3).all()
        hits = store.search("omega omega psi fresh memory 1", 3, mode="vector").hits
        assert new[1] in {h.id for h in hits}
