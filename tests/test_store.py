"""The store API on real SQLite files."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import mnemex
from mnemex import ALL, DuplicateId, InvalidInput, UnknownMemory
from mnemex.store import Store
from tests.pg_fixtures import both_engines


@both_engines
def test_add_get_roundtrip(store: Store) -> None:
    created = datetime(2025, 11, 27, 10, 0, tzinfo=UTC)
    ident = store.add(
        "  We chose PostgreSQL 16 for the billing service.  ",
        kind="Decision",
        tags=["DB", "billing", "db"],
        source="user:maria",
        confidence=0.95,
        pinned=True,
        created_at=created,
        metadata={"adr": 4},
    )
    got = store.get([ident])
    assert got.missing == ()
    (memory,) = got.memories
    assert memory.id == ident
    assert memory.content == "We chose PostgreSQL 16 for the billing service."
    assert memory.kind == "decision"
    assert memory.tags == ("db", "billing")
    assert memory.source == "user:maria"
    assert memory.confidence == 0.95
    assert memory.pinned is True
    assert memory.created_at == created
    assert memory.metadata == {"adr": 4}
    assert memory.namespace == "default"
    assert len(memory.content_hash) == 64


@both_engines
def test_defaults(store: Store) -> None:
    ident = store.add("plain observation")
    (memory,) = store.get(ident).memories
    assert memory.kind == "observation"
    assert memory.confidence == 0.8
    assert memory.pinned is False
    assert memory.tags == ()
    assert memory.metadata == {}


@both_engines
def test_ids_are_unique_and_time_ordered(store: Store) -> None:
    ids = store.add_many([f"memory {i}" for i in range(500)])
    assert len(set(ids)) == 500
    assert ids == sorted(ids)
    assert all(len(i) == 16 for i in ids)


@both_engines
def test_get_keeps_input_order_and_reports_unknown(store: Store) -> None:
    a = store.add("alpha")
    b = store.add("beta")
    c = store.add("gamma")
    result = store.get([c, "nope", a, b, a])
    assert [m.id for m in result.memories] == [c, a, b]
    assert result.missing == ("nope",)


@both_engines
def test_get_many_ids_uses_chunked_in_queries(store: Store) -> None:
    ids = store.add_many([f"item number {i}" for i in range(1200)])
    result = store.get(list(reversed(ids)))
    assert [m.id for m in result.memories] == list(reversed(ids))


@both_engines
def test_update_changes_fields_and_index(store: Store) -> None:
    ident = store.add("the cache uses redis", tags=["cache"])
    before = store.get(ident).memories[0]
    updated = store.update(ident, content="the cache uses memcached", tags=["cache", "infra"])
    assert updated.content == "the cache uses memcached"
    assert updated.tags == ("cache", "infra")
    assert updated.content_hash != before.content_hash
    assert updated.updated_at >= before.updated_at
    assert updated.created_at == before.created_at
    assert not store.search("redis").hits
    assert [h.id for h in store.search("memcached").hits] == [ident]
    assert [h.id for h in store.search("infra").hits] == [ident]
    assert store.check()["ok"]


@both_engines
def test_update_unknown_id_raises(store: Store) -> None:
    with pytest.raises(UnknownMemory, match="no memory with id 'missing'"):
        store.update("missing", content="x")


@both_engines
def test_update_other_namespace_is_unknown(store: Store) -> None:
    ident = store.add("secret plan", namespace="a")
    with pytest.raises(UnknownMemory):
        store.update(ident, content="changed", namespace="b")
    assert store.get(ident, namespace="a").memories[0].content == "secret plan"


@both_engines
def test_forget(store: Store) -> None:
    a = store.add("forget me")
    b = store.add("keep me")
    result = store.forget([a, "ghost"])
    assert result.forgotten == (a,)
    assert result.missing == ("ghost",)
    assert store.get([a, b]).missing == (a,)
    assert not store.search("forget").hits
    assert store.check()["ok"]


@both_engines
def test_namespaces_are_isolated(store: Store) -> None:
    a = store.add("the deploy key rotates monthly", namespace="team-a")
    b = store.add("the deploy key rotates weekly", namespace="team-b")
    assert [h.id for h in store.search("deploy key", namespace="team-a").hits] == [a]
    assert [h.id for h in store.search("deploy key", namespace="team-b").hits] == [b]
    assert not store.search("deploy key").hits  # default namespace is empty
    assert store.get([a, b], namespace="team-a").missing == (b,)
    assert store.forget(b, namespace="team-a").missing == (b,)
    assert {h.id for h in store.search("deploy key", namespace=ALL).hits} == {a, b}
    assert [e.id for e in store.timeline(namespace="team-b")] == [b]
    stats = store.stats(namespace="team-a")
    assert stats.memories == 1 and stats.total_memories == 2
    assert stats.namespaces == {"team-a": 1, "team-b": 1}


@both_engines
def test_store_level_namespace(make_store) -> None:  # type: ignore[no-untyped-def]
    s = make_store(namespace="agent-7")
    ident = s.add("scoped by default")
    assert s.get(ident).memories[0].namespace == "agent-7"
    assert s.get(ident, namespace="default").missing == (ident,)


@both_engines
def test_all_namespaces_is_refused_for_writes(store: Store) -> None:
    with pytest.raises(InvalidInput, match="one namespace"):
        store.add("x", namespace=ALL)  # type: ignore[arg-type]


@both_engines
def test_timeline_filters_and_order(store: Store) -> None:
    base = datetime(2025, 1, 1, tzinfo=UTC)
    ids = store.add_many(
        [
            {
                "content": f"event {i} " + "x" * 150,
                "created_at": base + timedelta(days=i),
                "kind": "decision" if i % 2 else "observation",
                "tags": ["even"] if i % 2 == 0 else [],
            }
            for i in range(10)
        ]
    )
    entries = store.timeline()
    assert [e.id for e in entries] == list(reversed(ids))
    assert all(len(e.summary) <= 100 for e in entries)
    assert entries[0].summary.endswith("…")
    window = store.timeline(base + timedelta(days=2), base + timedelta(days=5), oldest_first=True)
    assert [e.id for e in window] == ids[2:5]
    decisions = store.timeline(kinds=["decision"], limit=3)
    assert [e.id for e in decisions] == [ids[9], ids[7], ids[5]]
    tagged = store.timeline(tags=["even"])
    assert {e.id for e in tagged} == {ids[i] for i in range(0, 10, 2)}
    assert store.timeline("2025-01-09") == store.timeline(start=base + timedelta(days=8))


@both_engines
def test_timeline_around_a_memory(store: Store) -> None:
    base = datetime(2025, 1, 1, tzinfo=UTC)
    ids = store.add_many(
        [
            {
                "content": f"event {i}",
                # two memories share each day: ties are broken by insertion order
                "created_at": base + timedelta(days=i // 2),
                "kind": "decision" if i % 3 == 0 else "observation",
            }
            for i in range(12)
        ]
    )
    other = store.add("event elsewhere", namespace="other", created_at=base + timedelta(days=2))
    around = store.timeline(around=ids[5], before=2, after=3, oldest_first=True)
    assert [e.id for e in around] == ids[3:9]
    newest_first = store.timeline(around=ids[5], before=2, after=3)
    assert [e.id for e in newest_first] == list(reversed(ids[3:9]))
    assert [e.id for e in store.timeline(around=ids[0], before=5, after=1)] == [ids[1], ids[0]]
    assert [e.id for e in store.timeline(around=ids[11], before=0, after=0)] == [ids[11]]
    # filters apply to the neighbours; the anchor is always shown
    decisions = store.timeline(around=ids[5], kinds=["decision"], oldest_first=True)
    assert [e.id for e in decisions] == [ids[0], ids[3], ids[5], ids[6], ids[9]]
    # the anchor and its neighbours come from the store's namespace only
    assert other not in {e.id for e in store.timeline(around=ids[4], before=12, after=12)}
    with pytest.raises(UnknownMemory):
        store.timeline(around=other)
    assert [e.id for e in store.timeline(around=other, before=0, after=0, namespace="other")] == [
        other
    ]
    with pytest.raises(InvalidInput, match="before"):
        store.timeline(around=ids[0], before=-1)
    with pytest.raises(InvalidInput, match="after"):
        store.timeline(around=ids[0], after=True)


@both_engines
def test_search_result_shape(store: Store) -> None:
    ident = store.add(
        "The nightly reconciliation job compares Stripe payouts with invoices",
        kind="fact",
        tags=["billing"],
    )
    store.add("Unrelated note about the frontend build")
    result = store.search("reconciliation of stripe payouts")
    assert result.mode_used == "lexical"
    (hit,) = result.hits
    assert hit.id == ident
    assert 0.0 < hit.score <= 1.0
    assert "**reconciliation**" in hit.snippet and "**payouts**" in hit.snippet
    assert hit.kind == "fact" and hit.tags == ("billing",)
    assert len(hit.snippet) <= 700


@both_engines
def test_scores_are_ordered_and_distinct(store: Store) -> None:
    store.add_many(
        [
            "postgres vacuum settings for the invoices table",
            "postgres connection pool size",
            "invoices are rendered to PDF by a worker",
            "vacuum invoices postgres postgres tuning notes",
        ]
    )
    hits = store.search("postgres vacuum invoices").hits
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)
    assert len(set(scores)) == len(scores)
    assert all(0.0 < s < 1.0 for s in scores)


@both_engines
def test_search_filters(store: Store) -> None:
    base = datetime(2025, 6, 1, tzinfo=UTC)
    a = store.add(
        "redis eviction policy is allkeys-lru", kind="fact", tags=["redis", "ops"], created_at=base
    )
    b = store.add(
        "redis memory limit raised to 2GB",
        kind="decision",
        tags=["redis"],
        created_at=base + timedelta(days=10),
    )
    c = store.add("redis upgrade planned", kind="todo", created_at=base + timedelta(days=20))
    assert {h.id for h in store.search("redis").hits} == {a, b, c}
    assert [h.id for h in store.search("redis", kinds=["decision"]).hits] == [b]
    assert [h.id for h in store.search("redis", tags=["ops"]).hits] == [a]
    assert {h.id for h in store.search("redis", tags=["redis"]).hits} == {a, b}
    assert [h.id for h in store.search("redis", tags=["redis", "ops"]).hits] == [a]
    assert {h.id for h in store.search("redis", since=base + timedelta(days=5)).hits} == {b, c}
    assert [h.id for h in store.search("redis", until=base + timedelta(days=5)).hits] == [a]


@both_engines
def test_filtered_search_finds_best_within_filter(store: Store) -> None:
    # Many strong matches outside the filter must not crowd out the one inside.
    store.add_many([f"deploy pipeline deploy step {i}" for i in range(300)])
    inside = store.add("a single deploy note", kind="gotcha")
    assert [h.id for h in store.search("deploy", kinds=["gotcha"], limit=6).hits] == [inside]


@both_engines
def test_search_limit(store: Store) -> None:
    store.add_many([f"shared word number {i}" for i in range(30)])
    assert len(store.search("shared").hits) == 6  # default K
    assert len(store.search("shared", limit=25).hits) == 25
    with pytest.raises(InvalidInput, match="limit"):
        store.search("shared", limit=0)


@both_engines
def test_search_tags_are_searchable(store: Store) -> None:
    ident = store.add("rotate the signing secret every quarter", tags=["security"])
    assert [h.id for h in store.search("security").hits] == [ident]


@both_engines
def test_raw_fts5_syntax(store: Store) -> None:
    a = store.add("postgres primary failover drill")
    store.add("postgres backup schedule")
    assert [h.id for h in store.search('postgres AND "failover drill"', raw=True).hits] == [a]
    assert [h.id for h in store.search("NEAR(primary drill, 3)", raw=True).hits] == [a]
    with pytest.raises(mnemex.InvalidQuery, match="invalid FTS5 query"):
        store.search('unbalanced "quote AND (', raw=True)


# One corpus for the raw expressions below, searched on both engines.
RAW_CORPUS = (
    "postgres primary failover drill",
    "postgres backup schedule",
    "the drill of the primary failover",
    "running the nightly backup jobs",
    "primary one two three four five six seven eight nine ten eleven drill",
    "primary alpha beta gamma drill",
    "東京の天気は晴れ",
    'send an e-mail: "quoted" words (in brackets) and a star*',
)
RAW_TAGGED = "rotate the signing secret every quarter"  # tagged "security"


def raw_store(store: Store) -> dict[str, str]:
    """The corpus in the store: each memory's id to its text."""
    ids = store.add_many(list(RAW_CORPUS))
    ids.append(store.add(RAW_TAGGED, tags=["security"]))
    return dict(zip(ids, [*RAW_CORPUS, RAW_TAGGED], strict=True))


def raw_hits(store: Store, expression: str, **options: Any) -> set[str]:
    return {h.id for h in store.search(expression, 50, raw=True, **options).hits}


@both_engines
@pytest.mark.parametrize(
    ("expression", "found"),
    [
        ('"failover drill"', {0}),  # a phrase: the words side by side, in order
        ("failover drill", {0, 2}),  # the same words anywhere
        ('"drill failover"', set()),
        ("postgres NOT backup", {0}),
        ('drill NOT "primary failover"', {4, 5}),
        ("schedule OR nightly", {1, 3}),
        ("backup AND NOT", None),  # a syntax error
        ("back*", {1, 3}),
        ("runs*", {3}),  # stemmed as the index is: "running" is "run"
        ("nightl* failov*", set()),
        ("nightl* OR failov*", {0, 2, 3}),
        ("NEAR(primary drill)", {0, 2, 5}),  # within 10 tokens
        ("NEAR(primary drill, 11)", {0, 2, 4, 5}),
        ("NEAR(primary drill, 0)", set()),
        ("NEAR(failover drill, 0)", {0}),
        ("(schedule OR nightly) AND backup", {1, 3}),
        ("schedule OR (nightly AND postgres)", {1}),
        ("postgres OR drill NOT primary", {0, 1}),  # NOT binds tighter than OR
        ("^postgres", {0, 1}),
        ("^drill", set()),
        ("tags: security", {8}),
        ("content: security", set()),
        ("-content: secur*", {8}),
        ("{content tags}: security", {8}),
        ("security", {8}),
        ('"東 京"', {6}),  # CJK characters are terms of their own
        ("天 晴", {6}),
        ("東京", set()),  # ... a run of them written together is one term, as FTS5 cuts it
        ('"e-mail"', {7}),
        ('"(in brackets)"', {7}),
        ('"""quoted"""', {7}),
        ('"star*"', {7}),
        ("e-mail", None),  # '-' starts a column filter: no column "mail"
        ("postgres:failover", None),
        ('"."', set()),  # a phrase of no terms matches nothing...
        ('"." postgres', {0, 1}),  # ...and is dropped beside another
        ("*reads", set()),  # an FTS5 special query: no memory
    ],
)
def test_raw_expression_decides_the_hits(
    store: Store, expression: str, found: set[int] | None
) -> None:
    texts = raw_store(store)
    index = {text: i for i, text in enumerate([*RAW_CORPUS, RAW_TAGGED])}
    if found is None:
        with pytest.raises(mnemex.InvalidQuery, match="invalid FTS5 query"):
            store.search(expression, raw=True)
        return
    assert {index[texts[i]] for i in raw_hits(store, expression)} == found


@both_engines
@pytest.mark.parametrize(
    ("expression", "found"),
    [
        # "a NOT b": the rows matching a and not b; NOT binds tighter than AND, AND than
        # OR, each from the left; phrases side by side (an implicit AND) before all three.
        ("(postgres NOT (postgres NOT postgres))", {0, 1}),  # nothing is taken away
        ("postgres NOT (primary NOT backup)", {1}),
        ("drill NOT (primary NOT (failover NOT postgres))", {2}),
        ("primary NOT failover NOT alpha", {4}),  # (primary NOT failover) NOT alpha
        ("(primary NOT failover) OR (backup NOT postgres)", {3, 4, 5}),
        ("primary NOT (failover OR alpha)", {4}),
        ("primary NOT (failover AND postgres)", {2, 4, 5}),
        ("postgres OR primary NOT (drill NOT alpha)", {0, 1, 5}),
        ("primary drill NOT (failover NOT the)", {2, 4, 5}),
        ('drill NOT ("primary failover" NOT postgres)', {0, 4, 5}),
        ("prim* NOT (fail* NOT post*)", {0, 4, 5}),
        ("NEAR(primary drill) NOT (alpha NOT postgres)", {0, 2}),
        ("security NOT (rotate NOT tags: security)", {8}),
    ],
)
def test_raw_not_takes_away_what_its_right_side_matches(
    store: Store, expression: str, found: set[int]
) -> None:
    texts = raw_store(store)
    index = {text: i for i, text in enumerate([*RAW_CORPUS, RAW_TAGGED])}
    hits = raw_hits(store, expression, threshold=False)  # every match, weak ones too
    assert {index[texts[i]] for i in hits} == found


@both_engines
def test_raw_search_stays_in_its_namespace(store: Store) -> None:
    mine = store.add("postgres primary failover drill")
    theirs = store.add("postgres primary failover drill", namespace="other")
    assert raw_hits(store, '"failover drill"') == {mine}
    assert raw_hits(store, '"failover drill"', namespace="other") == {theirs}
    assert raw_hits(store, '"failover drill"', namespace=ALL) == {mine, theirs}
    assert raw_hits(store, "postgres", kinds=["decision"]) == set()


@both_engines
def test_raw_hits_rank_by_bm25(store: Store) -> None:
    rare = store.add("zebra crossing near the station")
    common = store.add("station station station platform")
    store.add_many([f"station number {i}" for i in range(8)])
    found = store.search("zebra OR station", 3, raw=True, explain=True).hits
    assert found[0].id == rare and common in {h.id for h in found}
    assert all(h.explain is not None and h.explain["lexical"]["bm25"] > 0 for h in found)


@both_engines
def test_raw_finds_the_same_memories_in_every_mode(vector_store: Store) -> None:
    """The expression decides what matches and BM25 ranks it, whatever the mode."""
    wanted = vector_store.add("Thumbnails are resized with Pillow 10 before upload")
    vector_store.add_many(["Invoices render with WeasyPrint", "Deploys need FLY_API_TOKEN"])
    for mode in (None, "auto", "lexical", "vector", "hybrid"):
        found = vector_store.search("pillow*", raw=True, mode=mode)
        assert [h.id for h in found.hits] == [wanted], mode
        assert found.mode_used == "lexical"
    assert (
        "answered by the lexical arm"
        in vector_store.search("pillow*", raw=True, mode="vector").notes[0]
    )


@pytest.mark.model
def test_raw_finds_a_prefix_in_the_default_mode_with_the_local_model(tmp_path: Path) -> None:
    with mnemex.open(tmp_path / "m.db", embedder="local") as store:
        wanted = store.add("Thumbnails are resized with Pillow 10 before upload")
        store.add_many(["Invoices render with WeasyPrint", "Deploys need FLY_API_TOKEN"])
        assert [h.id for h in store.search("pillow*", raw=True).hits] == [wanted]
        assert store.search("pillow*", raw=True, mode="lexical").hits[0].id == wanted


# Expressions over a small vocabulary: each engine must find the same memories.
_WORDS = ("postgres", "primary", "failover", "drill", "backup", "the", "nightly", "security")
_word = st.sampled_from(_WORDS) | st.sampled_from(_WORDS).map(lambda w: w[:4] + "*")
_phrase = st.lists(st.sampled_from(_WORDS), min_size=1, max_size=3).map(
    lambda ws: '"' + " ".join(ws) + '"'
)
_near = st.tuples(st.lists(_word, min_size=2, max_size=3), st.integers(0, 12)).map(
    lambda t: f"NEAR({' '.join(t[0])}, {t[1]})"
)
_columns = st.sampled_from(("tags", "content", "-tags", "{content tags}", "-{content}", "body"))
_leaf = (
    _word
    | _phrase
    | _near
    | _word.map(lambda w: "^" + w)
    | st.tuples(_word, _word).map(lambda t: f"{t[0]} + {t[1]}")
    | st.tuples(_columns, _word | _phrase | _near).map(lambda t: f"{t[0]}: {t[1]}")
)
_expression = st.recursive(
    _leaf,
    lambda inner: (
        st.tuples(inner, st.sampled_from(("AND", "OR", "NOT", "", "and")), inner).map(
            lambda t: f"({t[0]} {t[1]} {t[2]})" if t[1] else f"{t[0]} {t[2]}"
        )
        | st.tuples(_columns, inner).map(lambda t: f"{t[0]}: ({t[1]})")
    ),
    max_leaves=5,
)


@pytest.mark.postgres
def test_raw_expressions_find_the_same_memories_on_both_engines(
    tmp_path: Path, pg_url: str
) -> None:
    with mnemex.open(tmp_path / "raw.db") as lite, mnemex.open(pg_url) as pg:
        texts = [raw_store(lite), raw_store(pg)]

        def found(store: Store, text: dict[str, str], expression: str) -> object:
            try:
                return sorted(text[i] for i in raw_hits(store, expression))
            except mnemex.InvalidQuery as exc:
                return str(exc)

        @settings(max_examples=200, deadline=None)
        @given(_expression)
        @example("(postgres NOT (postgres NOT postgres))")
        def same(expression: str) -> None:
            assert found(lite, texts[0], expression) == found(pg, texts[1], expression)

        same()
        # Words and operators alone: the same BM25 as FTS5's bm25(), so the same order.
        for expression in ("postgres OR drill", "primary AND (failover OR drill) NOT backup"):
            ranked = [
                [(text[h.id], round(h.score, 9)) for h in s.search(expression, raw=True).hits]
                for s, text in zip((lite, pg), texts, strict=True)
            ]
            assert ranked[0] == ranked[1] and len(ranked[0]) > 1


@both_engines
def test_stop_words_only_match_when_needed(store: Store) -> None:
    ident = store.add("The Who played here")
    assert [h.id for h in store.search("the who").hits] == [ident]
    # Content words that match nothing fall back to the stop words.
    assert [h.id for h in store.search("who is zzyzx").hits] == [ident]


@both_engines
def test_duplicate_ids(store: Store) -> None:
    store.add("one", id="fixed")
    with pytest.raises(DuplicateId, match="already exists"):
        store.add("two", id="fixed")
    with pytest.raises(DuplicateId, match="more than once"):
        store.add_many([{"content": "a", "id": "x"}, {"content": "b", "id": "x"}])
    with pytest.raises(DuplicateId, match="already exists"):  # nothing of the batch stays
        store.add_many([{"content": "fresh", "id": "z"}, {"content": "two", "id": "fixed"}])
    assert store.count() == 1
    store.add("other", id="o")
    with pytest.raises(DuplicateId, match="already exists"):  # its text held by another id
        store.add("other", id="fixed")
    store.forget("o")
    ids = store.add_many(
        [{"content": "one again", "id": "fixed"}, {"content": "new", "id": "y"}],
        on_conflict="skip",
    )
    assert ids == ["fixed", "y"]
    assert store.get("fixed").memories[0].content == "one"


@both_engines
def test_a_batch_of_several_statements_is_one_write(store: Store) -> None:
    """PostgreSQL writes a large batch as several pipelined statements: their order, an id
    taken in the last, and all or nothing."""
    store.add("stored before the batch", id="old")
    texts = [f"batch note {n} on the topic of {n % 13} lanterns" for n in range(700)]
    ids = store.add_many(texts)
    assert len(set(ids)) == 700
    assert [m.content for m in store.get(ids).memories] == texts
    assert store.count() == 701
    assert store.search("batch note 655 lanterns", limit=1).hits[0].id == ids[655]
    with pytest.raises(DuplicateId, match="already exists"):
        store.add_many(
            [*(f"a later jotting {n}" for n in range(600)), {"content": "x", "id": "old"}]
        )
    assert store.count() == 701 and not store.search("jotting").hits
    assert store.check()["ok"]


@both_engines
def test_stats(store: Store) -> None:
    store.add("a", kind="fact")
    store.add("b", kind="fact")
    store.add("c", kind="todo")
    stats = store.stats()
    assert stats.memories == 3
    assert stats.kinds == {"fact": 2, "todo": 1}
    assert stats.schema_version >= 1
    assert stats.tokenizer.startswith("porter unicode61")
    assert stats.size_bytes > 0
    assert stats.oldest is not None and stats.newest is not None
    assert set(stats.to_dict()) >= {"memories", "namespaces", "kinds", "size_bytes"}


def test_reopen_keeps_everything(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "reopen.db"
    with mnemex.open(path) as s:
        ident = s.add("persisted across opens", tags=["x"])
    with mnemex.open(path) as s:
        assert s.get(ident).memories[0].tags == ("x",)
        assert [h.id for h in s.search("persisted").hits] == [ident]


def test_closed_store_errors(tmp_path) -> None:  # type: ignore[no-untyped-def]
    s = mnemex.open(tmp_path / "c.db")
    s.close()
    with pytest.raises(InvalidInput, match="closed"):
        s.add("x")


def test_connection_settings(store: Store) -> None:
    conn = store.session.conn
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 60_000


def test_sees_writes_of_other_connections(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "shared.db"
    with mnemex.open(path) as reader, mnemex.open(path) as writer:
        assert not reader.search("nebula").hits
        ident = writer.add("nebula project kickoff")
        assert [h.id for h in reader.search("nebula").hits] == [ident]
        other = sqlite3.connect(path)
        assert other.execute("SELECT count(*) FROM memories").fetchone()[0] == 1
        other.close()


def test_every_value_is_defined_in_one_module() -> None:
    import mnemex.models
    import mnemex.results

    in_results = {n for n, v in vars(mnemex.results).items() if hasattr(v, "to_dict")}
    in_models = {n for n, v in vars(mnemex.models).items() if hasattr(v, "to_dict")}
    assert len(in_results) == 17 and "Relation" in in_models
    assert not in_results & in_models
    for name in in_results:
        if name in mnemex.__all__:
            assert getattr(mnemex, name) is vars(mnemex.results)[name]
    assert mnemex.Relation is mnemex.models.Relation
    with pytest.raises(AttributeError, match="has no attribute 'Stats'"):
        mnemex.models.Stats  # type: ignore[attr-defined]  # noqa: B018
