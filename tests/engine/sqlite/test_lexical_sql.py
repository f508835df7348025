"""The SQL and FTS5 expressions the lexical arm builds, pinned for representative queries."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from mnemex import ALL as ALL_NAMESPACES
from mnemex.engine.sqlite.fts import exact_sql, lexical_sql, retrieve, shaped_sql
from mnemex.errors import InvalidInput
from mnemex.index.retrieval import Filters, plan, plan_raw
from mnemex.store import Store

BM25 = "bm25(memories_fts, 1.0, 1.0)"
EXACT = (
    f"SELECT memories_fts.rowid, -{BM25} AS s "
    "FROM memories_fts{join} "
    "WHERE memories_fts MATCH ?{where} "
    "ORDER BY s DESC, memories_fts.rowid LIMIT ?"
)
SHAPED = (
    "WITH e (seq, b) AS MATERIALIZED ( "
    f"SELECT rowid, {BM25} FROM memories_fts WHERE memories_fts MATCH ? ) "
    "SELECT x.seq, e.b - x.b AS s FROM ( "
    f"SELECT memories_fts.rowid AS seq, {BM25} AS b "
    "FROM memories_fts{join} "
    "WHERE memories_fts MATCH ?{where} "
    ") AS x JOIN e ON e.seq = x.seq "
    "ORDER BY s DESC, x.seq LIMIT ?"
)
JOIN = " CROSS JOIN memories AS m ON m.seq = memories_fts.rowid"  # for conditions on memories
ALL = Filters(None)
FILLER = [f"common word filler {i}" for i in range(50)]


def flat(sql: str) -> str:
    return " ".join(sql.split())


@pytest.fixture
def filled(store: Store) -> Store:
    store.add_many(
        [
            "Retrieval by title",
            "Titles of articles",
            "B. F. Skinner on vitamin A and T cells",
            "東京タワーの夜景",
            "the cat sat on the mat with a hat",
            *FILLER,
        ]
    )
    return store


@pytest.mark.parametrize(
    ("query", "match"),
    [
        # A repeated term is searched as often as the query says it.
        (
            "retrieval of titles: titles and the title retrieval",
            '"retrieval" OR "retrieval" OR "titles" OR "titles" OR "titles"',
        ),
        # Initials and a capital letter are terms; "say" is in no memory, so not searched.
        (
            "What did B. F. Skinner say about vitamin A?",
            '"b" OR "f" OR "skinner" OR "vitamin" OR "a"',
        ),
        # CJK: adjacent pairs, each a phrase.
        ("東京タワー", '"東 京" OR "京 タ" OR "タ ワ" OR "ワ ー"'),
        # FTS5 syntax is text: no operator, column filter, prefix or NEAR survives.
        ('foo AND "bar" OR (baz*) NEAR/2 -x: title^', '"2" OR "title"'),
        ('"unbalanced quote', '""'),
    ],
)
def test_the_match_expression_and_its_sql(filled: Store, query: str, match: str) -> None:
    lexical = plan(filled.session.lexicon, query)
    if match == '""':  # nothing stored matches: no SQL runs at all
        assert lexical.empty
        assert retrieve(filled.session.conn, lexical, ALL, 10, 100).candidates == []
        return
    assert lexical.match == match
    sql, params = lexical_sql(lexical, ALL, 10, 100)
    assert flat(sql) == EXACT.format(join="", where="")
    assert params == [match, 10]


def test_a_long_query_is_shaped_on_its_rare_terms(filled: Store) -> None:
    query = "common filler word title articles retrieval cat mat hat skinner vitamin cells"
    lexical = plan(filled.session.lexicon, query)
    rare = (
        '"articles" OR "retrieval" OR "cat" OR "mat" OR "hat" OR "skinner" OR "vitamin" '
        'OR "cells" OR "title"'
    )
    sql, params = lexical_sql(lexical, ALL, pool=10, budget=3)
    assert flat(sql) == SHAPED.format(join="", where="")
    assert params == [rare, f'({rare}) AND ({rare} OR "common" OR "filler" OR "word")', 10]
    # Within the budget (or with budget 0, exact), the same plan is one OR of every term.
    for budget in (0, 10_000):
        sql, params = lexical_sql(lexical, ALL, pool=10, budget=budget)
        assert flat(sql) == EXACT.format(join="", where="") and params == [lexical.match, 10]
    # The SQL built is the SQL run: a shaped search scores as the exact one does.
    shaped = retrieve(filled.session.conn, lexical, ALL, 3, 3)
    exact = {c.seq: c.raw for c in retrieve(filled.session.conn, lexical, ALL, 100, 0).candidates}
    assert shaped.shaped and len(shaped.candidates) == 3
    assert [c.raw for c in shaped.candidates] == pytest.approx(sorted(exact.values())[::-1][:3])
    assert all(c.raw == pytest.approx(exact[c.seq]) for c in shaped.candidates)


def test_filters_become_conditions_on_the_memories(filled: Store) -> None:
    since = datetime(2026, 1, 2, tzinfo=UTC)
    filters = Filters("work", kinds=("note", "fact"), tags=("a", "b"), since=since)
    sql, params = exact_sql('"title"', filters, 5)
    where = (
        " AND m.namespace = ? AND m.kind IN (?,?)"
        " AND m.seq IN (SELECT seq FROM memory_tags WHERE tag = ?)"
        " AND m.seq IN (SELECT seq FROM memory_tags WHERE tag = ?)"
        " AND m.created_at >= ?"
    )
    assert flat(sql) == flat(EXACT.format(join=JOIN, where=where))
    assert params[:6] == ['"title"', "work", "note", "fact", "a", "b"]
    assert params[6].startswith("2026-01-02") and params[7] == 5
    sql, params = shaped_sql('"a"', '"b"', Filters("work"), 7)
    assert flat(sql) == SHAPED.format(join=JOIN, where=" AND m.namespace = ?")
    assert params == ['"a"', '("a") AND ("a" OR "b")', "work", 7]


def test_filters_of_checks_what_a_caller_gave() -> None:
    given = Filters.of("work", ["note", "note", "fact"], "b", "2026-01-02", None)
    since = datetime(2026, 1, 2, tzinfo=UTC)
    assert given == Filters("work", kinds=("note", "fact"), tags=("b",), since=since)
    assert Filters.of(None, None, None, None, None) == Filters(None)
    with pytest.raises(InvalidInput, match="until"):
        Filters.of("work", None, None, None, "not a time")


def test_a_raw_expression_is_used_as_is(filled: Store) -> None:
    lexical = plan_raw(filled.session.lexicon, "titl* NOT articles")
    sql, params = lexical_sql(lexical, ALL, 10, 3)
    assert flat(sql) == EXACT.format(join="", where="") and params == ["titl* NOT articles", 10]


def test_surface_of_reads_the_term_rows_first(filled: Store) -> None:
    """How a memory writes a term: the term's rows are read first, then their memories (the
    other way round, a memory at a time, costs seconds in a large namespace)."""
    from mnemex.engine.sqlite.fts import surface_of

    session = filled.session
    conn = session.conn
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    try:
        assert surface_of(conn, session.lexicon, "skinner", "default") == "skinner"
        assert surface_of(conn, session.lexicon, "absent", "default") is None
    finally:
        conn.set_trace_callback(None)
    sql = next(s for s in statements if "mnemex_vocab_i" in s and "LIMIT 1" in s)
    plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}")]
    assert plan[0].startswith("SCAN v VIRTUAL TABLE"), plan
    assert "INTEGER PRIMARY KEY" in plan[1], plan


def test_snippets_are_those_the_index_cuts(filled: Store) -> None:
    """Cut from the hits' own copy, a snippet is the one ``snippet()`` gives over the
    whole index: for words, stems, phrases, prefixes, CJK text and tags."""
    from mnemex.engine.sqlite.fts import snippets
    from mnemex.storage import marks
    from mnemex.text import unsegment

    filled.add("a long note " + "padding words here " * 40 + "then the cat again", tags=["cat"])
    conn = filled.session.conn
    seqs = [r[0] for r in conn.execute("SELECT seq FROM memories ORDER BY seq")]
    for match in ('"cat"', '"titles" OR "vitamin"', '"the cat"', '"fill"*', '"東 京"', '"padding"'):
        sql = (
            "SELECT rowid, snippet(memories_fts, 0, '[', ']', '…', 8) FROM memories_fts "
            f"WHERE memories_fts MATCH ? AND rowid IN ({marks(len(seqs))})"
        )
        expected = {s: unsegment(t) for s, t in conn.execute(sql, [match, *seqs]) if t}
        assert expected, match
        got = snippets(conn, match, seqs, start="[", end="]", tokens=8)
        assert got == expected, match
    assert snippets(conn, '"cat"', seqs[:1], start="[", end="]", tokens=8) == {}


def _lexical_statements(store: Store, query: str, **options: object) -> list[str]:
    conn = store.session.conn
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    try:
        store.search(query, 5, mode="lexical", **options)
    finally:
        conn.set_trace_callback(None)
    return [s for s in statements if "ORDER BY s DESC" in s]


def test_the_memories_are_joined_only_for_a_condition_on_them(filled: Store) -> None:
    """A search of the one namespace a store holds reads the index alone (each row of it is
    a memory); a condition beyond the namespace, or a second namespace, joins the memories."""
    joined = "CROSS JOIN memories"
    (alone,) = _lexical_statements(filled, "cat title")
    assert joined not in alone and "m.namespace" not in alone
    (kinds,) = _lexical_statements(filled, "cat title", kinds=["note"])
    assert joined in kinds and "m.kind IN" in kinds
    everywhere = [hit.id for hit in filled.search("cat title", 5, mode="lexical").hits]
    filled.add("a cat in another namespace", namespace="elsewhere")
    assert [hit.id for hit in filled.search("cat title", 5, mode="lexical").hits] == everywhere
    (all_of_them,) = _lexical_statements(filled, "cat title", namespace=ALL_NAMESPACES)
    assert joined not in all_of_them


def test_a_namespace_another_writer_joins_meanwhile_keeps_the_join(
    filled: Store, make_store: Callable[..., Store]
) -> None:
    """Whether the namespace searched holds every row is read in the search's snapshot, not
    taken from the plan: a memory of another namespace committed between the two is not
    let through."""
    from mnemex.request import Request
    from mnemex.search.pipeline import retriever

    request = Request("cat", 10, Filters("default"), "lexical", "rrf", 60, 0.5, 0.5)
    conn = filled.session.conn
    engine = retriever(filled.session, conn, None)
    planned = engine.plan(request, "cat")
    assert planned.scope is None  # the namespace holds every row when planned
    other = make_store()  # the same file, another connection
    other.add("the cat of another namespace", namespace="elsewhere")
    with engine.snapshot():
        found = engine.lexical(request, planned, 10).candidates
    namespaces = {
        conn.execute("SELECT namespace FROM memories WHERE seq = ?", (c.seq,)).fetchone()[0]
        for c in found
    }
    assert found and namespaces == {"default"}


def test_the_terms_one_edit_away_are_those_the_letter_s_terms_give(filled: Store) -> None:
    """Read narrowly (the terms sharing two letters, or the first and third, and those of
    each second letter the index holds), a misspelling's candidates one edit away are the
    ones the whole first letter's terms give, for every kind of edit at every place."""
    import functools

    from mnemex.engine.sqlite.fts import similar_terms
    from mnemex.search.spelling import length_range, near

    filled.add_many(
        ["retrieval retrial retreat retrieve retirees return rhetoric ratrieval tretrieval"]
    )
    lexicon = filled.session.lexicon
    edited: set[str] = set()
    for word in ("retriev", "titl", "skinner", "retreat", "vitamin"):  # index terms: stems
        for i in range(1, len(word) + 1):
            for letter in "aeinrstvx":
                edited.add(word[:i] + letter + word[i:])  # a letter added
                edited.add(word[:i] + letter + word[i + 1 :])  # changed
            edited.add(word[:i] + word[i + 1 :])  # dropped
            edited.add(word[: i - 1] + word[i : i + 1] + word[i - 1] + word[i + 1 :])  # swapped
    checked = 0
    for term in sorted(w for w in edited if 3 <= len(w) <= 9):
        keep = functools.partial(near, term)
        whole = similar_terms(lexicon, term, length_range(term), 2, None, keep)
        narrow = similar_terms(lexicon, term, length_range(term), 1, None, keep)
        assert sorted(narrow) == sorted(whole), term
        checked += bool(whole)
    assert checked > 50
