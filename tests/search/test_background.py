"""The store's background: the unrelated queries, their shipped vectors, the measures."""

from __future__ import annotations

import statistics

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
