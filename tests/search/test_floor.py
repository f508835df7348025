"""The relevance floor and raw-expression membership."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from mnemex.search.floor import Floor, floor_for, relevant_hit, relevant_query
from mnemex.store import Store
from tests.pg_fixtures import both_engines

FLOOR = Floor(query_cosine=0.4, agree_cosine=0.3, agree_text=0.3, hit_cosine=0.2, hit_text=0.15)


def test_floor_is_calibrated_per_model() -> None:
    assert floor_for("all-MiniLM-L6-v2-int8:8199be6f") is not None
    assert floor_for("sentence-transformers/all-MiniLM-L6-v2") is not None
    assert floor_for("text-embedding-3-small") is None and floor_for(None) is None


def test_a_query_is_answered_when_one_arm_is_sure_or_both_agree() -> None:
    assert relevant_query(FLOOR, [1, 2], {}, {1: 0.1, 2: 0.45})  # the vector arm is sure
    assert relevant_query(FLOOR, [1], {1: 0.35}, {1: 0.31})  # both arms agree
    assert not relevant_query(FLOOR, [1], {1: 0.9}, {1: 0.25})  # words alone are not enough
    assert not relevant_query(FLOOR, [1, 2], {1: 0.2}, {1: 0.35, 2: 0.1})
    assert not relevant_query(FLOOR, [], {}, {})


def test_the_gate_reads_token_windows_of_the_candidates_it_would_let_through() -> None:
    asked: list[list[int]] = []

    def tokens(found: dict[int, float]) -> Callable[[list[int]], dict[int, float]]:
        def token_cosines(seqs: list[int]) -> dict[int, float]:
            asked.append(seqs)
            return {s: c for s, c in found.items() if s in seqs}

        return token_cosines

    cosines = {1: 0.1, 2: 0.45, 3: 0.5}
    # 2 and 3 pass on their best windows, a sentence's; their token windows do not.
    assert not relevant_query(FLOOR, [1, 2, 3], {}, cosines, tokens({2: 0.2, 3: 0.35}))
    assert asked == [[2, 3]]  # only the candidates the best windows let through
    # 3 has no sentence windows: its best window is a token window.
    assert relevant_query(FLOOR, [1, 2, 3], {}, cosines, tokens({2: 0.2}))
    # Both arms still vouch on the token window's cosine.
    assert relevant_query(FLOOR, [2], {2: 0.35}, {2: 0.45}, tokens({2: 0.31}))
    asked.clear()
    assert not relevant_query(FLOOR, [1], {}, cosines, tokens({}))
    assert asked == []  # nothing passes: nothing asked


@pytest.mark.parametrize(
    ("text", "cosine", "kept"),
    [
        (None, 0.25, True),
        (0.2, None, True),
        (0.1, 0.1, False),
        (None, -0.3, False),
        (None, None, False),
    ],
)
def test_a_hit_stays_when_an_arm_finds_it_relevant(
    text: float | None, cosine: float | None, kept: bool
) -> None:
    assert relevant_hit(FLOOR, text, cosine) is kept


@both_engines
def test_raw_expression_decides_membership_in_hybrid(vector_store: Store) -> None:
    vector_store.add_many(
        [
            "Stripe webhooks retry for three days",
            "Billing webhooks from Stripe must be idempotent",
            "Invoices are numbered per tenant",
            "The payment provider sends events we must deduplicate",
        ]
    )
    plain = vector_store.search("billing webhooks", 10)
    assert plain.mode_used == "hybrid" and len(plain.hits) > 1
    raw = vector_store.search('"billing" AND "webhooks"', 10, raw=True)
    assert raw.mode_used == "hybrid"
    assert [h.snippet for h in raw.hits] and all(
        "billing" in h.snippet.lower() and "webhooks" in h.snippet.lower() for h in raw.hits
    )
    assert len(raw.hits) == 1


def test_a_search_that_finds_nothing_says_so(store: Store) -> None:
    store.add("Invoices are numbered per tenant")
    result = store.search("kubernetes autoscaling")
    assert result.hits == () and result.notes
