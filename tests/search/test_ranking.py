"""Ranking stages after fusion: threshold, decay, confidence, MMR (pure and through a store)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemex.search.rank import (
    apply_confidence,
    apply_decay,
    decay,
    decay_factor,
    evergreen_source,
    jaccard,
    mmr,
    passes,
    ranked,
    thread_best,
    thread_context,
    word_set,
)
from mnemex.store import Store
from tests.conftest import FakeEmbedder
from tests.pg_fixtures import both_engines

NOW = datetime(2026, 6, 1, tzinfo=UTC)


# -- decay and confidence arithmetic ----------------------------------------------------


@pytest.mark.parametrize(
    ("age", "factor"),
    [(0, 1.0), (30, 0.5), (60, 0.25), (15, 2**-0.5), (-5, 1.0), (300, 2**-10)],
)
def test_decay_factor(age: float, factor: float) -> None:
    assert decay_factor(age, 30) == pytest.approx(factor)


def test_decay_and_confidence_multiply() -> None:
    scores = {"a": 0.8, "b": 0.8, "c": 0.5}
    decayed = apply_decay(scores, {"a": 30.0, "b": None, "c": 0.0}, 30)
    assert decayed == pytest.approx({"a": 0.4, "b": 0.8, "c": 0.5})
    weighted = apply_confidence(decayed, {"a": 0.5, "b": 1.0})
    assert weighted == pytest.approx({"a": 0.2, "b": 0.8, "c": 0.5})  # c: unknown -> 1.0


def test_half_life_must_be_positive() -> None:
    with pytest.raises(ValueError):
        decay_factor(1, 0)


@pytest.mark.parametrize(
    ("source", "evergreen"),
    [
        ("MEMORY.md", True),
        ("/ws/memory.md", True),
        ("memory/projects.md", True),
        ("memory/2025-11-27.md", False),
        ("memory/2025-11-27-standup.md", False),
        ("notes/ideas.md", False),
        ("chat", False),
        (None, False),
        ("memory\\people.md", True),
        ("MEMORY.md#L10-20", True),
    ],
)
def test_evergreen_sources(source: str | None, evergreen: bool) -> None:
    assert evergreen_source(source) is evergreen


# -- threshold ------------------------------------------------------------------------


def test_a_hit_passes_when_any_arm_that_found_it_vouches() -> None:
    assert passes(0.3, None, 0.2, 0.5)  # lexical only: judged by its own score
    assert passes(None, 0.6, 0.2, 0.5)
    assert passes(0.3, 0.1, 0.2, 0.5)  # a weak cosine never erases a lexical hit
    assert not passes(0.1, 0.1, 0.2, 0.5)
    assert not passes(None, None, 0.0, -1.0)


# -- MMR ------------------------------------------------------------------------------


def test_mmr_demotes_a_near_duplicate() -> None:
    texts = {
        1: "postgres connection pool size is twenty",
        2: "the postgres connection pool size is twenty",
        3: "invoices render with embedded fonts",
    }
    words = {k: word_set(v) for k, v in texts.items()}
    scores = {1: 0.9, 2: 0.88, 3: 0.7}
    order = [1, 2, 3]
    picked = mmr(order, scores, lambda a, b: jaccard(words[a], words[b]), 2, 0.7)
    assert picked == [1, 3]
    assert mmr(order, scores, lambda a, b: jaccard(words[a], words[b]), 3, 1.0) == order


def test_jaccard_and_word_sets() -> None:
    assert jaccard(frozenset(), frozenset()) == 0.0
    assert jaccard(word_set("a b c"), word_set("b c d")) == pytest.approx(0.5)
    assert word_set("数据库 PostgreSQL") == frozenset({"数", "据", "库", "postgresql"})


@settings(max_examples=200, deadline=None)
@given(
    scores=st.lists(st.floats(0.0, 1.0), min_size=0, max_size=30),
    k=st.integers(0, 35),
    lam=st.floats(0.0, 1.0),
    seed=st.integers(0, 10_000),
)
def test_mmr_returns_k_distinct_candidates_deterministically(
    scores: list[float], k: int, lam: float, seed: int
) -> None:
    keys = list(range(len(scores)))
    by_key = dict(zip(keys, scores, strict=True))

    def similarity(a: int, b: int) -> float:
        return ((a * 7919 + b * 7919 + seed) % 101) / 100

    picked = mmr(keys, by_key, similarity, k, lam)
    assert len(picked) == min(k, len(keys))
    assert len(set(picked)) == len(picked) and set(picked) <= set(keys)
    assert picked == mmr(keys, by_key, similarity, k, lam)  # order-stable


@given(st.lists(st.floats(0.0, 1.0), max_size=20))
def test_mmr_with_lambda_one_keeps_the_ranking(scores: list[float]) -> None:
    keys = list(range(len(scores)))
    by_key = dict(zip(keys, scores, strict=True))
    order = ranked(by_key, keys)
    assert mmr(order, by_key, lambda a, b: 1.0, len(keys), 1.0) == order


def test_mmr_rejects_a_bad_lambda() -> None:
    with pytest.raises(ValueError):
        mmr([1], {1: 1.0}, lambda a, b: 0.0, 1, 1.5)


# -- through a store ----------------------------------------------------------------------


def _aged(store: Store) -> dict[str, str]:
    ids = store.add_many(
        [
            {
                "content": "the deploy checklist for the billing service",
                "created_at": NOW - timedelta(days=90),
            },
            {
                "content": "the deploy checklist for the billing service, revised",
                "created_at": NOW - timedelta(days=1),
            },
            {
                "content": "the deploy checklist for the billing service, original",
                "created_at": NOW - timedelta(days=120),
                "pinned": True,
            },
            {
                "content": "deploy checklist: billing service",
                "created_at": NOW - timedelta(days=2),
                "confidence": 0.2,
            },
        ]
    )
    return dict(zip(["old", "new", "pinned", "unsure"], ids, strict=True))


def test_decay_ranks_old_memories_lower_but_not_pinned_ones(store: Store) -> None:
    ids = _aged(store)
    plain = store.search("deploy checklist billing", decay=False, confidence=False, now=NOW)
    decayed = store.search("deploy checklist billing", decay=True, explain=True, now=NOW)
    assert len(plain.hits) == len(decayed.hits) == 4  # decay reorders, never drops
    rank = [h.id for h in decayed.hits]
    assert rank.index(ids["new"]) < rank.index(ids["old"])
    assert rank.index(ids["pinned"]) < rank.index(ids["old"])
    for hit in decayed.hits:
        assert hit.explain is not None
        stages = {s["stage"]: s for s in hit.explain["stages"]}
        expected = hit.explain["fused"]
        if hit.id == ids["pinned"]:
            assert stages["decay"] == {"stage": "decay", "exempt": "pinned"}
        else:
            age = stages["decay"]["age_days"]
            assert stages["decay"]["factor"] == pytest.approx(0.5 ** (age / 30), abs=1e-6)
            expected *= 0.5 ** (age / 30)
        expected *= stages["confidence"]["factor"]
        assert hit.score == pytest.approx(expected, rel=1e-4)
        assert hit.explain["final"] == pytest.approx(hit.score, abs=1e-6)


def test_confidence_weighting_switches_per_call(store: Store) -> None:
    ids = _aged(store)
    weighted = store.search("deploy checklist billing", now=NOW)
    unweighted = store.search("deploy checklist billing", confidence=False, now=NOW)
    score = {h.id: h.score for h in weighted.hits}
    raw = {h.id: h.score for h in unweighted.hits}
    assert score[ids["unsure"]] == pytest.approx(0.2 * raw[ids["unsure"]])
    assert score[ids["old"]] == pytest.approx(0.8 * raw[ids["old"]])


def test_decay_from_settings(make_store) -> None:  # type: ignore[no-untyped-def]
    store = make_store(decay=True, half_life_days=10.0)
    ids = _aged(store)
    result = store.search("deploy checklist billing", explain=True, now=NOW)
    old = next(h for h in result.hits if h.id == ids["old"])
    assert old.explain is not None
    decay = next(s for s in old.explain["stages"] if s["stage"] == "decay")
    assert decay["factor"] == pytest.approx(0.5**9, rel=1e-3)


def test_mmr_in_lexical_mode_spreads_the_top_hits(store: Store) -> None:
    store.add_many(
        [
            "postgres connection pool size is twenty for the api",
            "postgres connection pool size is twenty for the api servers",
            "postgres connection pool size is twenty for api",
            "postgres vacuum runs nightly; connection limits are set per role",
        ]
    )
    plain = store.search("postgres connection pool", limit=2)
    diverse = store.search("postgres connection pool", limit=2, mmr=True, explain=True)
    assert "vacuum" not in " ".join(h.snippet for h in plain.hits)
    assert "vacuum" in " ".join(h.snippet for h in diverse.hits)
    assert len(diverse.hits) == 2
    stage = next(s for s in diverse.hits[0].explain["stages"] if s["stage"] == "mmr")  # type: ignore[index]
    assert stage["similarity"] == "jaccard" and stage["pick"] == 1


def test_mmr_uses_cosine_when_vectors_exist(make_store, fake_embedder: FakeEmbedder) -> None:  # type: ignore[no-untyped-def]
    store = make_store(embedder=fake_embedder)
    store.add_many(["alpha beta gamma", "alpha beta gamma delta", "alpha epsilon zeta"])
    result = store.search("alpha beta", mmr=True, explain=True, limit=3)
    assert len(result.hits) == 3
    stages = [s for h in result.hits for s in h.explain["stages"] if s["stage"] == "mmr"]  # type: ignore[index]
    assert {s["similarity"] for s in stages} == {"cosine"}
    jaccard_result = store.search("alpha beta", mmr=True, explain=True, limit=3, mode="lexical")
    stages = [s for h in jaccard_result.hits for s in h.explain["stages"] if s["stage"] == "mmr"]  # type: ignore[index]
    assert {s["similarity"] for s in stages} == {"jaccard"}


def test_a_vector_threshold_never_erases_lexical_hits(
    make_store,  # type: ignore[no-untyped-def]
    fake_embedder: FakeEmbedder,
) -> None:
    store = make_store(embedder=fake_embedder, min_vector_score=0.999, fusion="rrf")
    store.add_many(["zebra crossing rules", "unrelated words here", "more unrelated text"])
    for mode in ("lexical", "hybrid"):
        result = store.search("zebra", mode=mode)
        assert [h.snippet for h in result.hits][:1] == ["**zebra** crossing rules"], mode
    assert store.search("zebra", mode="vector").hits == ()
    assert len(store.search("zebra", mode="vector", threshold=False).hits) == 3


def test_a_text_threshold_applies_in_text_units(make_store) -> None:  # type: ignore[no-untyped-def]
    store = make_store(min_text_score=0.99)
    store.add("zebra crossing rules")
    assert store.search("zebra").hits == ()
    assert len(store.search("zebra", threshold=False).hits) == 1


def test_bad_ranking_settings_are_rejected(make_store) -> None:  # type: ignore[no-untyped-def]
    from mnemex.errors import InvalidInput

    for bad in (
        {"mmr_lambda": 1.5},
        {"half_life_days": 0.0},
        {"mmr_similarity": "euclid"},
        {"min_text_score": 2.0},
        {"decay": "sometimes"},
    ):
        with pytest.raises(InvalidInput):
            make_store(**bad)


def test_boolean_settings_from_the_environment(
    make_store,  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MNEMEX_DECAY", "on")
    monkeypatch.setenv("MNEMEX_MMR", "false")
    store = make_store()
    assert store.settings.decay is True and store.settings.mmr is False
    assert math.isclose(store.settings.half_life_days, 30.0)


def test_the_decay_stage_says_what_it_did_to_each() -> None:
    now = datetime(2026, 1, 31, tzinfo=UTC)
    made = {
        1: (datetime(2026, 1, 1, tzinfo=UTC), False, None),
        2: (datetime(2025, 1, 1, tzinfo=UTC), True, None),
        3: (datetime(2025, 1, 1, tzinfo=UTC), False, "notes/MEMORY.md"),
    }
    scores, trace = decay({1: 1.0, 2: 1.0, 3: 0.5}, made, now, 30.0)
    assert scores == {1: 0.5, 2: 1.0, 3: 0.5}
    assert trace == {
        1: {"stage": "decay", "age_days": 30.0, "factor": 0.5},
        2: {"stage": "decay", "exempt": "pinned"},
        3: {"stage": "decay", "exempt": "evergreen"},
    }


# -- thread ---------------------------------------------------------------------------


def test_a_memory_borrows_the_better_score_of_its_thread_neighbours() -> None:
    scores = {1: 0.8, 2: 0.2, 3: 0.5, 4: 0.4, 9: 0.3}
    neighbours = {2: (1, 3), 3: (2, None), 4: (None, 7), 9: (8, 10)}
    out, trace = thread_context(scores, neighbours, 0.3)
    assert out[2] == pytest.approx(0.2 + 0.3 * 0.8)  # the better of 1 and 3, before the stage
    assert out[3] == pytest.approx(0.5 + 0.3 * 0.2)
    assert out[4] == 0.4 and out[9] == 0.3  # a neighbour that is no candidate lends nothing
    assert out[1] == 0.8  # no neighbours known: unchanged
    assert trace == {
        2: {"stage": "thread", "weight": 0.3, "neighbour": 0.8},
        3: {"stage": "thread", "weight": 0.3, "neighbour": 0.2},
    }
    assert thread_context({1: 0.5, 2: -0.2}, {1: (2, None)}, 0.3)[0] == {1: 0.5, 2: -0.2}


def test_a_memory_moves_toward_the_best_score_of_its_thread() -> None:
    before = {1: 0.9, 2: 0.3, 3: 0.6, 4: 0.5, 5: 0.2}
    after = {**before, 2: 0.5}  # what the neighbours lent: 2 has gained already
    threads = {1: ("a", "s1"), 2: ("a", "s1"), 3: ("a", "s2"), 4: ("b", "s1")}
    out, trace = thread_best(before, after, threads, 0.3)
    assert out[2] == pytest.approx((0.5 + 0.3 * 0.9) / 1.3)  # the best before the stage
    assert out[1] == pytest.approx(0.9)  # its thread's best: unchanged
    assert out[3] == pytest.approx(0.6) and out[4] == pytest.approx(0.5)  # alone in its thread
    assert out[5] == 0.2  # in no thread
    assert trace == {2: {"stage": "thread_best", "weight": 0.3, "best": 0.9}}
    # the order within a thread is kept; a lower memory in a strong thread can pass a
    # higher one in a weak thread
    assert out[2] < out[1]
    weak = thread_best(
        {7: 0.45, 8: 0.1, 9: 0.4},
        {7: 0.45, 8: 0.1, 9: 0.4},
        {7: ("a", "x"), 8: ("a", "y"), 9: ("a", "y")},
        0.3,
    )[0]
    assert weak[7] == pytest.approx(0.45) and weak[9] == pytest.approx(0.4)


def _turns(store: Store, namespace: str = "default") -> dict[str, str]:
    """A chat session: the answer says "yes" to a question it does not repeat."""
    ids = store.add_many(
        [
            {"content": "did you book the ferry to Alcatraz island", "source": "chat-7"},
            {"content": "yes, the ferry leaves at nine", "source": "chat-7"},
            {"content": "ferry schedules change in winter"},
        ],
        namespace=namespace,
    )
    return dict(zip(["question", "answer", "other"], ids, strict=True))


@both_engines
def test_a_turn_rises_with_the_turn_before_it(make_store) -> None:  # type: ignore[no-untyped-def]
    alone = make_store("alone.db", thread_context=0.0, thread_best=0.0)
    ids = _turns(alone)
    plain = [h.id for h in alone.search("ferry to Alcatraz", explain=True).hits]
    assert plain.index(ids["other"]) < plain.index(ids["answer"])
    threaded = make_store("threaded.db", thread_context=0.3, thread_best=0.0)
    ids = _turns(threaded)
    hits = threaded.search("ferry to Alcatraz", explain=True).hits
    assert [h.id for h in hits] == [ids["question"], ids["answer"], ids["other"]]
    stages = {h.id: [s["stage"] for s in (h.explain or {})["stages"]] for h in hits}
    assert "thread" in stages[ids["answer"]] and "thread" not in stages[ids["other"]]


@both_engines
def test_a_thread_stays_in_its_namespace(make_store) -> None:  # type: ignore[no-untyped-def]
    store = make_store(thread_context=0.3)
    store.add("did you book the ferry to Alcatraz island", source="chat-7", namespace="a")
    store.add("ferry tickets to Alcatraz island are sold out", source="chat-7", namespace="b")
    answer = store.add("yes, the ferry leaves at nine", source="chat-7", namespace="b")
    store.add("ferry schedules change in winter", namespace="b")
    hits = store.search("ferry to Alcatraz", namespace="b", explain=True).hits
    lent = {h.id: s for h in hits for s in (h.explain or {})["stages"] if s["stage"] == "thread"}
    question_b = hits[0]
    assert lent[answer]["neighbour"] == pytest.approx((question_b.explain or {})["fused"])


@both_engines
def test_a_turn_rises_with_its_session(make_store) -> None:  # type: ignore[no-untyped-def]
    """A turn of the session where the question's subject came up passes a turn that
    matches as well in a session about something else."""
    turns = [
        ("we read a novel at the lake every evening", "trip"),
        ("the novel we took along was a long thriller about pirates", "trip"),
        ("the kids swam every morning", "trip"),
        ("my sister bought a novel", "home"),
        ("the dog sleeps all day", "home"),
    ]
    for weight in (0.0, 0.3):
        store = make_store(f"best-{weight}.db", thread_context=0.0, thread_best=weight)
        ids = store.add_many([{"content": c, "source": s} for c, s in turns])
        hits = store.search("a novel at the lake", explain=True, limit=6).hits
        order = [h.id for h in hits]
        assert order[0] == ids[0]
        if weight == 0:
            assert order.index(ids[3]) < order.index(ids[1])
        else:
            assert order.index(ids[1]) < order.index(ids[3])
            stages = {h.id: [s["stage"] for s in (h.explain or {})["stages"]] for h in hits}
            assert "thread_best" in stages[ids[1]] and "thread_best" not in stages[ids[3]]


def test_workspace_chunks_are_in_no_thread(make_store, tmp_path) -> None:  # type: ignore[no-untyped-def]
    store = make_store(thread_context=0.3)
    root = tmp_path / "ws"
    (root / "memory").mkdir(parents=True)
    filler = "".join(f"Line {i} of the day's notes, about nothing much.\n" for i in range(40))
    (root / "memory" / "notes.md").write_text(
        f"# Ferry\n\nThe ferry to Alcatraz island leaves at nine.\n{filler}\n"
        f"# Lunch\n\nSandwiches by the ferry pier.\n{filler}",
        encoding="utf-8",
    )
    store.sync(root)
    hits = store.search("ferry to Alcatraz", explain=True).hits
    assert len(hits) == 2
    assert all(s["stage"] != "thread" for h in hits for s in (h.explain or {})["stages"])


def test_thread_context_must_be_between_zero_and_one(make_store) -> None:  # type: ignore[no-untyped-def]
    from mnemex.errors import InvalidInput

    with pytest.raises(InvalidInput, match="thread_context must be between 0 and 1"):
        make_store(thread_context=1.5)
    with pytest.raises(InvalidInput, match="thread_best must be between 0 and 1"):
        make_store(thread_best=-0.1)
