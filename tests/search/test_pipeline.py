"""The search pipeline's stages, each run on its own over a real store."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from mnemex import config
from mnemex.engine.sqlite.retrieval import Engine
from mnemex.eval.runner import Spec, run_queries
from mnemex.index.retrieval import Filters
from mnemex.request import Ranking, Request
from mnemex.search import fusion
from mnemex.search.pipeline import (
    QUERY_VECTORS_KEPT,
    build_hits,
    complete_scores,
    fuse,
    kept_query_vectors,
    plan_arms,
    rank_candidates,
    retrieve_arms,
    run_search,
)
from mnemex.store import Store
from tests.conftest import FakeEmbedder

DEPLOYS = [
    "deploy the service with the blue green script",
    "the deploy script needs a fresh token",
    "rotate the token every month",
    "green tea is served at the deploy review",
    "blue whales are the largest animals",
    "a script for the monthly review",
]


def engine_of(store: Store) -> Engine:
    """The pipeline's view of a store (as ``Store.search`` builds it)."""
    return Engine(
        store.session.conn,
        store.session.lexicon,
        store.settings,
        store.embedder,
        store.session.vectors,
    )


def request(
    query: str, mode: str = "hybrid", fusion_name: str = "weighted", **kw: object
) -> Request:
    fields: dict[str, object] = {
        "query": query,
        "limit": 3,
        "filters": Filters(namespace="default"),
        "mode": mode,
        "fusion": fusion_name,
        "rrf_k": 60,
        "vector_weight": 0.5,
        "text_weight": 0.5,
        "ranking": Ranking(stages={"confidence": True}),
    }
    fields.update(kw)
    return Request(**fields)  # type: ignore[arg-type]


@pytest.fixture
def hybrid(make_store: Callable[..., Store], fake_embedder: FakeEmbedder) -> Store:
    store = make_store("hybrid.db", embedder=fake_embedder)
    store.add_many(DEPLOYS)
    store.embed()
    return store


def test_the_registry_names_the_fusions_config_accepts() -> None:
    assert set(fusion.FORMULAS) == set(config.FUSIONS)
    assert config.DEFAULT_FUSION in fusion.FORMULAS
    versions = [f.version for f in fusion.FORMULAS.values()]
    assert all(versions) and len(set(versions)) == len(versions)


def test_plan_decides_the_mode_once(store: Store, hybrid: Store) -> None:
    store.add_many(DEPLOYS)
    planned = plan_arms(engine_of(store), request("deploy script"))
    assert planned.mode == "lexical" and planned.pending is None
    assert planned.notes == ("no embedder is configured: answered from the lexical arm",)
    assert planned.lexical.match == '"deploy" OR "script"' and planned.pool == 12
    # Nothing to embed: lexical, without a note.
    planned = plan_arms(engine_of(hybrid), request("   ", mode="vector"))
    assert (planned.mode, planned.pending, planned.notes) == ("lexical", None, ())
    planned = plan_arms(engine_of(hybrid), request("deploy script"))
    assert planned.mode == "hybrid" and planned.pending is not None
    planned.pending.result()


@pytest.mark.parametrize("name", sorted(config.FUSIONS))
def test_each_stage_returns_what_the_next_reads(hybrid: Store, name: str) -> None:
    engine = engine_of(hybrid)
    asked = request("blue deploy script", fusion_name=name, explain=True)
    with hybrid.session.connection():
        planned = plan_arms(engine, asked)
        arms = retrieve_arms(engine, asked, planned)
        assert arms.mode == "hybrid" and arms.query_vector is not None
        lexical = {c.seq for c in arms.lexical_hits}
        vector = {h.seq for h in arms.vector_hits}
        assert lexical and vector and lexical != vector
        scores = complete_scores(engine, asked, arms)
        formula = fusion.FORMULAS[name]
        if formula.complete:  # every candidate scored in both arms (0 text: no query term)
            assert set(scores.cosine) == lexical | vector
            assert lexical <= set(scores.text) <= lexical | vector
        else:  # each arm's own scores, as retrieved
            assert set(scores.text) == lexical and set(scores.cosine) == vector
        fused = fuse(asked, arms, scores)
        assert fused.version == formula.version and fused.label and fused.label.startswith(name)
        assert fused.order == fusion.ranked(fused.scores) and set(fused.order) == lexical | vector
        ranked = rank_candidates(engine, asked, arms, scores, fused)
        assert ranked.candidates == len(fused.order) and ranked.order
        assert all(
            [s["stage"] for s in ranked.stages[seq]] == ["threshold", "confidence"]
            for seq in ranked.order
        )
        hits = build_hits(engine, asked, arms, scores, fused, ranked)
    assert len(hits) == asked.limit
    assert [h.score for h in hits] == [ranked.scores[seq] for seq in ranked.order[:3]]
    for hit in hits:
        assert hit.explain is not None and hit.explain["fusion"] == fused.label
        assert [s["stage"] for s in hit.explain["stages"]][-1] == "top_k"
    # The stages in order are the search.
    result = run_search(engine, asked)
    assert [h.id for h in result.hits] == [h.id for h in hits]
    assert (result.fusion, result.fusion_version) == (fused.label, formula.version)
    assert [h.explain for h in result.hits] == [h.explain for h in hits]


def test_a_text_searched_again_is_not_embedded_again_while_vectors_are_kept(
    hybrid: Store,
) -> None:
    """Within kept_query_vectors the session keeps the newest query vectors: searching a
    text again reuses its vector, and finds the same; a text out of the kept ones is
    embedded again. Outside it, every search embeds its query."""
    embedder = hybrid.embedder
    assert isinstance(embedder, FakeEmbedder)
    with kept_query_vectors(hybrid.session):
        first = hybrid.search("blue deploy script")
        calls = embedder.calls
        again = hybrid.search("blue deploy script", limit=3)
        assert embedder.calls == calls
        assert [(h.id, h.score) for h in again.hits] == [(h.id, h.score) for h in first.hits[:3]]
        assert again.mode_used == "hybrid"
        for i in range(QUERY_VECTORS_KEPT):
            hybrid.search(f"deploy script number {i}")
        assert embedder.calls == calls + QUERY_VECTORS_KEPT
        hybrid.search("blue deploy script")  # pushed out by the newer texts
        assert embedder.calls == calls + QUERY_VECTORS_KEPT + 1
    assert hybrid.session.queries is None
    hybrid.search("blue deploy script")
    assert embedder.calls == calls + QUERY_VECTORS_KEPT + 2


def test_a_failed_embedding_is_not_kept(hybrid: Store) -> None:
    embedder = hybrid.embedder
    assert isinstance(embedder, FakeEmbedder)
    with kept_query_vectors(hybrid.session):
        embedder.fail = True
        assert hybrid.search("deploy script").mode_used == "lexical"
        embedder.fail = False
        assert hybrid.search("deploy script").mode_used == "hybrid"
    hybrid.search("deploy script")  # kept no more: the embedder is asked, and is down
    embedder.fail = True
    assert hybrid.search("deploy script").mode_used == "lexical"


def test_a_single_arm_keeps_its_own_scores(hybrid: Store) -> None:
    engine = engine_of(hybrid)
    for mode in ("lexical", "vector"):
        asked = request("deploy script", mode=mode)
        with hybrid.session.connection():
            arms = retrieve_arms(engine, asked, plan_arms(engine, asked))
            scores = complete_scores(engine, asked, arms)
            fused = fuse(asked, arms, scores)
        assert arms.mode == mode and (fused.label, fused.version) == (None, None)
        if mode == "lexical":
            assert fused.scores == scores.text and not arms.vector_hits
            assert fused.order == [c.seq for c in arms.lexical_hits]
        else:
            assert fused.order == [h.seq for h in arms.vector_hits] and not arms.lexical_hits
            assert fused.scores == {s: max(0.0, c) for s, c in scores.cosine.items()}
        result = hybrid.search("deploy script", mode=mode)
        assert result.mode_used == mode and result.fusion_version is None


def test_an_embedder_that_fails_leaves_the_lexical_arm(hybrid: Store) -> None:
    assert isinstance(hybrid.embedder, FakeEmbedder)
    hybrid.embedder.fail = True
    engine = engine_of(hybrid)
    asked = request("deploy script")
    with hybrid.session.connection():
        planned = plan_arms(engine, asked)
        arms = retrieve_arms(engine, asked, planned)
    assert planned.mode == "hybrid" and arms.mode == "lexical"
    assert arms.query_vector is None and not arms.vector_hits and arms.lexical_hits
    assert len(arms.notes) == 1 and "could not be embedded" in arms.notes[0]
    result = hybrid.search("deploy script")
    assert result.mode_used == "lexical" and result.fusion is None and result.hits


def test_the_floor_and_thresholds_say_why_nothing_is_left(hybrid: Store) -> None:
    engine = engine_of(hybrid)
    strict = Ranking(min_text_score=2.0, min_vector_score=2.0)
    asked = request("deploy script", ranking=strict)
    with hybrid.session.connection():
        arms = retrieve_arms(engine, asked, plan_arms(engine, asked))
        scores = complete_scores(engine, asked, arms)
        fused = fuse(asked, arms, scores)
        ranked = rank_candidates(engine, asked, arms, scores, fused)
        assert build_hits(engine, asked, arms, scores, fused, ranked) == ()
    assert ranked.order == [] and ranked.candidates == len(fused.order) > 0
    result = run_search(engine, dataclasses.replace(asked, limit=5))
    assert result.hits == () and result.notes == ("no memory matches the query: no hits",)


def test_eval_reports_the_fusion_version_its_searches_used(hybrid: Store) -> None:
    for name, formula in fusion.FORMULAS.items():
        spec = Spec(mode="hybrid", fusion=name)
        _, _, modes, fusions = run_queries(hybrid, [("q", "deploy script", None)], 5, spec, False)
        assert modes == {"hybrid": 1} and fusions == {formula.version}
        assert spec.describe(hybrid, fusions)["fusion"].endswith(f") {formula.version}")
    lexical = Spec(mode="lexical")
    _, _, modes, fusions = run_queries(hybrid, [("q", "deploy script", None)], 5, lexical, False)
    assert modes == {"lexical": 1} and fusions == set()
    assert "fusion" not in lexical.describe(hybrid, fusions)


def test_the_floor_decision_and_each_hits_scores_are_reported(hybrid: Store) -> None:
    from mnemex.search.background import Background
    from mnemex.search.floor import CALIBRATED, FLOOR_VERSION
    from mnemex.search.pipeline import Scores, floor_decision

    found = hybrid.search("deploy script token", explain=True)
    assert found.floor is None  # the fake embedder has no calibrated floor
    for hit in found.hits:
        assert hit.explain is not None
        scores, lexical = hit.explain["scores"], hit.explain["lexical"]
        assert scores["cosine"] is not None  # hybrid: every candidate's cosine is fetched
        if lexical is not None:  # the lexical arm found it: the score it found it with
            assert scores["text"] == lexical["score"]
    assert any(h.explain and h.explain["lexical"] for h in found.hits)
    floor = next(iter(CALIBRATED.values()))
    scores = Scores({1: 0.2, 2: 0.5}, {1: 0.31, 2: -0.1})
    decided = floor_decision(floor, Background(0.12, 0.08), False, 3, [], scores)
    assert decided == {
        "version": FLOOR_VERSION,
        "passed": False,
        "candidates": 3,
        "kept": 0,
        "level": 0.12,
        "memory": 0.08,
        "best_cosine": 0.31,
        "best_text": 0.5,
        **dataclasses.asdict(floor),
    }
    unread = floor_decision(floor, None, True, 2, [1], Scores({1: 0.2}, {}))
    assert unread["level"] is None and unread["best_cosine"] is None and unread["kept"] == 1
