"""The store's background: the unrelated queries, their shipped vectors, the measures."""

from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mnemex.embed import embed_checked
from mnemex.embed.local import LocalEmbedder
from mnemex.search import background
from mnemex.search.background import Background, cached, measure, queries, shipped


def test_the_unrelated_queries_are_many_and_varied() -> None:
    found = queries()
    assert len(found) == 100 and len(set(found)) == 100
    assert any(not q.isascii() for q in found)  # a few in other scripts


@pytest.mark.model
def test_the_shipped_vectors_are_the_local_models() -> None:
    vectors = shipped("all-minilm-l6-v2")
    assert vectors is not None and vectors.shape == (100, 384)
    fresh = embed_checked(LocalEmbedder(), queries())
    assert np.min(np.sum(fresh * vectors, axis=1)) > 0.999
    assert background.vectors("all-minilm-l6-v2", LocalEmbedder()) is vectors


def test_the_level_is_the_median_best_and_the_memory_a_high_pair() -> None:
    pairs = [i / 100 for i in range(100)]
    assert measure([0.1, 0.3, 0.2, -1.0], pairs) == Background(0.2, 0.95)
    assert measure([-1.0], pairs) is None and measure([0.2], []) is None


cosines = st.floats(min_value=-1.0, max_value=1.0, allow_nan=False)


@given(st.lists(cosines, max_size=50), st.lists(cosines, max_size=300))
def test_the_measures_are_a_sorts_median_and_quantile(
    best: list[float], pairs: list[float]
) -> None:
    found = [b for b in best if b > -1.0]
    expected = None
    if found and pairs:
        ordered = sorted(pairs)
        at = min(len(ordered) - 1, int(background.PAIR_QUANTILE * len(ordered)))
        expected = Background(statistics.median(found), ordered[at])
    assert measure(best, pairs) == expected


def test_the_background_is_measured_again_once_the_vectors_move_by_a_tenth() -> None:
    kept: dict[object, object] = {}
    calls: list[int] = []

    def best() -> list[float]:
        calls.append(1)
        return [0.1 * len(calls)]

    first = cached(kept, "ns", 100, best, lambda: [0.0])
    assert first == Background(0.1, 0.0)
    assert cached(kept, "ns", 110, best, lambda: [0.0]) == first and len(calls) == 1
    assert cached(kept, "ns", 111, best, lambda: [0.0]) == Background(0.2, 0.0)
    assert cached(kept, "other", 0, best, lambda: [0.0]) is None  # nothing to measure
    for n in range(background.KEPT + 5):  # bounded: filters by time make keys of their own
        cached(kept, ("ns", n), 10, best, lambda: [0.0])
    assert len(kept) <= background.KEPT


def test_a_saved_background_is_read_by_the_next_session_while_it_is_fresh(tmp_path: Path) -> None:
    path = tmp_path / "m.db.model.background"
    saved = background.Saved(path, {"lineage": "a", "model": "m", "dim": 3})
    calls: list[int] = []

    def best() -> list[float]:
        calls.append(1)
        return [len(calls) / 10]

    first = cached({}, "ns", 100, best, lambda: [0.0], lambda: saved)
    assert first == Background(0.1, 0.0) and path.exists()
    assert cached({}, "ns", 105, best, lambda: [0.0], lambda: saved) == first  # a new session
    assert len(calls) == 1
    other = background.Saved(path, {"lineage": "b", "model": "m", "dim": 3})  # another store's
    assert cached({}, "ns", 100, best, lambda: [0.0], lambda: other) == Background(0.2, 0.0)
    assert cached({}, "ns", 100, best, lambda: [0.0], lambda: saved) == Background(0.3, 0.0)
    assert cached({}, "ns", 120, best, lambda: [0.0], lambda: saved) == Background(0.4, 0.0)
    assert cached({}, "ns", 121, best, lambda: [0.0], lambda: saved) == Background(0.4, 0.0)
    path.write_text("{not json")  # damaged: measured again, and written whole
    assert cached({}, "ns", 121, best, lambda: [0.0], lambda: saved) == Background(0.5, 0.0)
    assert saved.read() == {"'ns'": (121, Background(0.5, 0.0))}
    assert cached({}, "none", 0, best, lambda: [0.0], lambda: saved) is None  # nothing kept
    assert list(saved.read()) == ["'ns'"] and len(calls) == 5
    path.write_text(
        '{"stamp": {"lineage": "a", "model": "m", "dim": 3}, "backgrounds": '
        '[["\'ns\'", 121, "high", 0.0]]}'
    )  # a level that is no number
    assert saved.read() == {} and not list(tmp_path.glob("*.tmp"))


@pytest.mark.model
def test_a_store_keeps_its_background_beside_the_vector_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mnemex
    from mnemex.engine.sqlite.vectors import backgrounds_path, snapshot_path

    path = tmp_path / "m.db"
    with mnemex.open(path, embedder="local") as store:
        store.add_many([f"the billing webhook retries {i} times" for i in range(40)])
        first = store.search("how often do billing webhooks retry", mode="hybrid")
        model = store.embedder.model_id  # type: ignore[union-attr]
    saved = backgrounds_path(snapshot_path(path, model))
    assert first.floor is not None and first.floor["level"] is not None and saved.exists()
    measured: list[int] = []
    monkeypatch.setattr(background, "measure", lambda *a: measured.append(1))
    with mnemex.open(path, embedder="local") as store:  # a new session, as a new process
        again = store.search("how often do billing webhooks retry", mode="hybrid")
        assert not measured  # read from the file
        assert again.floor == first.floor and again.hits == first.hits
        store.session.drop_ann(model)  # what reindex does
    assert not saved.exists()
