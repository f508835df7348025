"""Fusion formulas: pure functions and their properties."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mnemex.search.fusion import MARGIN_DEPTH, adaptive_weight, margin, ranked, rrf, weighted

_RANKING = st.lists(st.integers(0, 50), unique=True, max_size=30)


def test_rrf_values() -> None:
    scores = rrf([[1, 2], [2, 3]], k=60)
    assert scores[2] == 1.0 * (1 / 62 + 1 / 61) / (2 / 61)
    assert ranked(scores)[0] == 2
    assert rrf([[7]], k=60) == {7: 1.0}
    assert rrf([]) == {}


@given(_RANKING, _RANKING)
def test_rrf_is_order_independent(a: list[int], b: list[int]) -> None:
    assert rrf([a, b]) == rrf([b, a])


@given(_RANKING, _RANKING)
def test_found_by_both_outranks_found_by_one_at_the_same_rank(a: list[int], b: list[int]) -> None:
    scores = rrf([a, b])
    for rank, key in enumerate(a):
        if key in b and b.index(key) <= rank:
            for other in set(a) ^ set(b):
                if (other in a and a.index(other) >= rank) or (
                    other in b and b.index(other) >= rank
                ):
                    assert scores[key] > scores[other]


@given(_RANKING, _RANKING)
def test_rrf_scores_are_in_unit_interval(a: list[int], b: list[int]) -> None:
    assert all(0.0 < s <= 1.0 for s in rrf([a, b]).values())


def test_weighted() -> None:
    text = {1: 0.8, 2: 0.2}
    vector = {2: 0.9, 3: -0.4}
    scores = weighted(text, vector, 0.7, 0.3)
    assert scores[1] == 0.3 * 0.8
    assert abs(scores[2] - (0.7 * 0.9 + 0.3 * 0.2)) < 1e-12
    assert scores[3] == 0.0  # negative cosines count as 0
    assert weighted(text, vector, 7, 3) == scores  # weights are normalized


@given(
    st.dictionaries(st.integers(0, 20), st.floats(0, 1)),
    st.dictionaries(st.integers(0, 20), st.floats(-1, 1)),
    st.floats(0.01, 10),
    st.floats(0.01, 10),
)
def test_weighted_stays_in_unit_interval(text, vector, wv, wt) -> None:  # type: ignore[no-untyped-def]
    assert all(0.0 <= s <= 1.0 + 1e-12 for s in weighted(text, vector, wv, wt).values())


def test_ranked_breaks_ties_by_key() -> None:
    assert ranked({3: 0.5, 1: 0.5, 2: 0.9}) == [2, 1, 3]


def test_margin_is_how_far_the_best_stands_above_the_top() -> None:
    assert margin([0.9, 0.3, 0.3]) == pytest.approx(0.9 - 0.5)
    assert margin([0.5, 0.5, 0.5]) == 0.0
    assert margin([0.7]) == 0.0 and margin([]) == 0.0
    assert margin([1.0] + [0.0] * 100) == pytest.approx(1.0 - 1.0 / MARGIN_DEPTH)


def test_adaptive_weight_leans_towards_the_surer_arm() -> None:
    flat, sharp = [0.5] * 20, [0.9] + [0.2] * 19
    assert adaptive_weight(flat, sharp, 0.5, 0.5) == pytest.approx(0.75)  # vector is sure
    assert adaptive_weight(sharp, flat, 0.5, 0.5) == pytest.approx(0.25)  # text is sure
    assert adaptive_weight(flat, flat, 0.3, 0.7) == pytest.approx(0.3)  # neither: as configured
    assert adaptive_weight([], sharp, 1, 1) == pytest.approx(
        0.75
    )  # a lexical arm that found nothing


@given(
    st.lists(st.floats(0, 1), max_size=30).map(lambda v: sorted(v, reverse=True)),
    st.lists(st.floats(0, 1), max_size=30).map(lambda v: sorted(v, reverse=True)),
    st.floats(0.01, 1),
    st.floats(0.01, 1),
)
def test_adaptive_weight_is_a_weight(text, vector, wv, wt) -> None:  # type: ignore[no-untyped-def]
    w = adaptive_weight(text, vector, wv, wt)
    assert 0.0 <= w <= 1.0
    base = wv / (wv + wt)
    assert min(base, 0.5 * base) - 1e-9 <= w <= max(base, 0.5 * base + 0.5) + 1e-9
