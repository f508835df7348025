"""Relations: their own table and FTS5 index, ranked by BM25 against the query (seed 002)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mnemex
from mnemex import InvalidInput, UnknownMemory
from mnemex.relations import (
    MAX_ENTITY_CHARS,
    Relation,
    count_in,
    forget_in,
    neighbors_in,
    relate_in,
    search_in,
)
from mnemex.storage import connect, migrations
from mnemex.storage.migrations import LATEST, TOKENIZER
from mnemex.store import Store
from tests.pg_fixtures import both_engines

NS = "default"

TEAM = [
    ("Jared", "likes", "pizza"),
    ("Jared", "works_on", "engram"),
    ("Jared", "prefers", "dark mode"),
    ("Jared", "lives_in", "Denver"),
    ("Maria", "works_on", "billing service"),
    ("Maria", "manages", "Jared"),
    ("engram", "written_in", "Rust"),
    ("billing service", "uses", "PostgreSQL"),
]


def search(store: Store, text: str, namespace: str | None = NS, limit: int = 10) -> list[Relation]:
    with store.session.connection() as conn:
        return search_in(store.session, conn, text, namespace, limit)


def triples(found: list[Relation]) -> list[tuple[str, str, str]]:
    return [(r.subject, r.predicate, r.object) for r in found]


@pytest.fixture
def team(store: Store) -> Store:
    for subject, predicate, obj in TEAM:
        relate_in(store.session, NS, subject, predicate, obj)
    return store


# -- writing ----------------------------------------------------------------------


@both_engines
def test_relate_stores_a_relation(store: Store) -> None:
    now = datetime(2025, 11, 27, 10, 0, tzinfo=UTC)
    rel = relate_in(store.session, NS, " Jared ", "works_on", "engram", 0.9, now=now)
    assert (rel.subject, rel.predicate, rel.object, rel.confidence) == (
        "Jared",
        "works_on",
        "engram",
        0.9,
    )
    assert len(rel.id) == 16 and rel.namespace == NS and rel.source_memory is None
    assert rel.created_at == rel.updated_at == now and rel.score is None
    assert rel.to_dict() == {
        "id": rel.id,
        "namespace": NS,
        "subject": "Jared",
        "predicate": "works_on",
        "object": "engram",
        "confidence": 0.9,
        "source_memory": None,
        "created_at": "2025-11-27T10:00:00.000Z",
        "updated_at": "2025-11-27T10:00:00.000Z",
    }
    assert relate_in(store.session, NS, "a", "b", "c").confidence == 0.8
    assert count_in(store.session, NS) == 2


@both_engines
def test_relating_the_same_triple_again_updates_it(store: Store) -> None:
    first_time = datetime(2025, 1, 1, tzinfo=UTC)
    first = relate_in(store.session, NS, "Jared", "works_on", "engram", 0.6, now=first_time)
    later = first_time + timedelta(days=3)
    # Same triple: names compared ignoring case, predicates in one snake_case spelling.
    again = relate_in(store.session, NS, "JARED", "worksOn", "Engram", 0.9, now=later)
    assert again.id == first.id
    assert (again.subject, again.predicate, again.object) == ("Jared", "works_on", "engram")
    assert again.confidence == 0.9
    assert again.created_at == first_time and again.updated_at == later
    weaker = relate_in(store.session, NS, "jared", "works on", "engram", 0.1, now=later)
    assert weaker.id == first.id and weaker.confidence == 0.9
    assert relate_in(store.session, NS, "jared", "Works-On", "engram").id == first.id
    assert count_in(store.session, NS) == 1
    assert [r.id for r in search(store, "engram")] == [first.id]


@both_engines
def test_source_memory_must_exist_and_is_cleared_when_the_memory_goes(store: Store) -> None:
    memory = store.add("Jared has been working on engram since March")
    rel = relate_in(store.session, NS, "Jared", "works_on", "engram", source_memory=memory)
    assert rel.source_memory == memory
    with pytest.raises(UnknownMemory):
        relate_in(store.session, NS, "Jared", "likes", "pizza", source_memory="0000000000000000")
    with pytest.raises(UnknownMemory):
        relate_in(store.session, "elsewhere", "Jared", "likes", "pizza", source_memory=memory)
    assert count_in(store.session, None) == 1  # nothing written by the refused calls
    store.forget(memory)
    (kept,) = neighbors_in(store.session, "Jared", NS)
    assert kept.id == rel.id and kept.source_memory is None


@both_engines
def test_forget_relations(team: Store) -> None:
    (pizza,) = search(team, "pizza")
    result = forget_in(team.session, [pizza.id, "0000000000000000", pizza.id], NS)
    assert result.forgotten == (pizza.id,) and result.missing == ("0000000000000000",)
    assert search(team, "pizza") == []
    assert count_in(team.session, NS) == len(TEAM) - 1
    with pytest.raises(InvalidInput, match="no relation ids"):
        forget_in(team.session, [], NS)


# -- ranking ----------------------------------------------------------------------


@both_engines
def test_seed_002_works_on_outranks_likes(store: Store) -> None:
    """The seed's example: a LIKE match gave both relations the constant 0.5."""
    relate_in(store.session, NS, "Jared", "likes", "pizza")
    relate_in(store.session, NS, "Jared", "works_on", "engram")
    found = search(store, "what projects does Jared work on")
    assert triples(found) == [("Jared", "works_on", "engram"), ("Jared", "likes", "pizza")]
    assert found[0].score is not None and found[1].score is not None
    assert found[0].score > found[1].score > 0.0


@both_engines
def test_relations_ranked_by_relevance(team: Store) -> None:
    found = search(team, "what projects does Jared work on")
    assert triples(found[:2]) == [
        ("Jared", "works_on", "engram"),
        ("Maria", "works_on", "billing service"),
    ]
    scores = [r.score for r in found]
    assert all(s is not None and 0.0 < s <= 1.0 for s in scores)
    assert scores == sorted(scores, reverse=True)  # type: ignore[type-var]
    assert len(set(scores)) > 1
    # Only relations naming Jared or work match; the rest are left out.
    assert all("Jared" in (r.subject, r.object) or r.predicate == "works_on" for r in found)
    assert len(found) == 6

    (rust,) = search(team, "which language is engram written in?", limit=1)
    assert triples([rust]) == [("engram", "written_in", "Rust")]
    assert triples(search(team, "postgresql")) == [("billing service", "uses", "PostgreSQL")]


@both_engines
def test_score_is_bm25_times_confidence(store: Store) -> None:
    relate_in(store.session, NS, "Ann", "knows", "Bob", 0.9)
    relate_in(store.session, NS, "Bob", "knows", "Ann", 0.3)
    relate_in(store.session, NS, "Carl", "likes", "tea", 0.5)
    strong, weak = search(store, "who knows Ann")
    assert (strong.subject, weak.subject) == ("Ann", "Bob")
    assert strong.score is not None and weak.score is not None
    assert strong.score / weak.score == pytest.approx(3.0)


@both_engines
def test_top_results_are_exact_when_confidences_differ(store: Store) -> None:
    """A limit smaller than the matches gives the first results of the full ranking.

    Rows dense in query terms but of low confidence come first by ``bm25 · confidence``,
    yet their normalized BM25 saturates, so sparser rows of full confidence score higher.
    """
    for i in range(100):
        relate_in(store.session, NS, f"team {i}", "owns", f"repo {i}")
    for i in range(12):
        relate_in(store.session, NS, f"fly {i}", "deploys_to", "fly fly fly", 0.3)
        relate_in(
            store.session,
            NS,
            f"the old billing service {i} in the cluster",
            "runs_on",
            "fly",
            1.0,
        )
    everything = search(store, "deploys to fly", limit=1000)
    assert len(everything) == 24
    assert [r.predicate for r in everything] == ["runs_on"] * 12 + ["deploys_to"] * 12
    for limit in (1, 2, 5, 13):
        top = search(store, "deploys to fly", limit=limit)
        assert [r.id for r in top] == [r.id for r in everything[:limit]]


@both_engines
def test_predicates_are_searchable_as_words(team: Store) -> None:
    assert ("Jared", "lives_in", "Denver") in triples(search(team, "lives in"))
    assert ("Jared", "lives_in", "Denver") in triples(search(team, "where does Jared live"))
    relate_in(team.session, NS, "Ana", "isMemberOf", "platform-team")
    assert triples(search(team, "member of platform team")) == [
        ("Ana", "is_member_of", "platform-team")
    ]


@both_engines
def test_nothing_matches_nothing_returned(team: Store) -> None:
    assert search(team, "quantum chromodynamics") == []
    assert search(team, "") == []
    assert search(team, "the of and") == []  # stop words present in no relation
    assert search(team, "pizza", "empty-namespace", 5) == []


@both_engines
def test_cjk_relations(store: Store) -> None:
    relate_in(store.session, NS, "张伟", "喜欢", "咖啡")
    relate_in(store.session, NS, "李娜", "在", "北京工作")
    assert triples(search(store, "谁喜欢咖啡")) == [("张伟", "喜欢", "咖啡")]
    assert triples(search(store, "北京")) == [("李娜", "在", "北京工作")]
    assert triples(neighbors_in(store.session, "张伟", NS)) == [("张伟", "喜欢", "咖啡")]
    relate_in(store.session, NS, "민수", "좋아한다", "사과")
    assert triples(search(store, "민수는 사과를 좋아해?")) == [("민수", "좋아한다", "사과")]


# -- neighbors and namespaces -----------------------------------------------------


@both_engines
def test_neighbors_in_both_directions_ignoring_case(team: Store) -> None:
    relate_in(team.session, NS, "Jared", "mentors", "Ana", 0.95)
    found = neighbors_in(team.session, "jARED", NS)
    assert found[0].predicate == "mentors"  # most confident first
    assert {(r.subject, r.predicate, r.object) for r in found} == {
        ("Jared", "likes", "pizza"),
        ("Jared", "works_on", "engram"),
        ("Jared", "prefers", "dark mode"),
        ("Jared", "lives_in", "Denver"),
        ("Maria", "manages", "Jared"),
        ("Jared", "mentors", "Ana"),
    }
    # Equal confidence: the newest first.
    assert triples(neighbors_in(team.session, "  BILLING   service ", NS)) == [
        ("billing service", "uses", "PostgreSQL"),
        ("Maria", "works_on", "billing service"),
    ]
    assert len(neighbors_in(team.session, "jared", NS, limit=2)) == 2
    assert neighbors_in(team.session, "Jar", NS) == []  # whole names only
    relate_in(team.session, NS, "Straße", "near", "river")
    assert [r.subject for r in neighbors_in(team.session, "STRASSE", NS)] == ["Straße"]


@both_engines
def test_namespaces_are_isolated(store: Store) -> None:
    mine = relate_in(store.session, "alice", "Jared", "works_on", "engram")
    theirs = relate_in(store.session, "bob", "Jared", "works_on", "engram")
    assert mine.id != theirs.id
    assert [r.id for r in search(store, "engram", "alice")] == [mine.id]
    assert [r.id for r in search(store, "engram", "bob")] == [theirs.id]
    assert {r.id for r in search(store, "engram", None)} == {mine.id, theirs.id}
    assert [r.id for r in neighbors_in(store.session, "jared", "bob")] == [theirs.id]
    assert forget_in(store.session, [mine.id], "bob").missing == (mine.id,)
    assert (count_in(store.session, "alice"), count_in(store.session, None)) == (1, 2)


# -- index sync -------------------------------------------------------------------


def index_matches_table(conn: sqlite3.Connection) -> None:
    """The FTS index holds exactly what a rebuild from the relations table would."""
    conn.execute("DROP TABLE IF EXISTS temp.rel_check")
    conn.execute("DROP TABLE IF EXISTS temp.rel_check_v")
    conn.execute("DROP TABLE IF EXISTS temp.rel_index_v")
    conn.execute(
        f"CREATE VIRTUAL TABLE temp.rel_check USING fts5(subject, predicate, object, "
        f"tokenize='{TOKENIZER}')"
    )
    conn.execute("CREATE VIRTUAL TABLE temp.rel_check_v USING fts5vocab(temp, rel_check, instance)")
    conn.execute(
        "CREATE VIRTUAL TABLE temp.rel_index_v USING fts5vocab(main, relations_fts, instance)"
    )
    conn.execute(
        "INSERT INTO temp.rel_check (rowid, subject, predicate, object) "
        "SELECT seq, subject, predicate, object FROM relations_fts_source"
    )
    columns = "term, doc, col, offset"
    for left, right in (("rel_index_v", "rel_check_v"), ("rel_check_v", "rel_index_v")):
        extra = conn.execute(
            f"SELECT count(*) FROM (SELECT {columns} FROM temp.{left} "
            f"EXCEPT SELECT {columns} FROM temp.{right})"
        ).fetchone()[0]
        assert extra == 0, f"{left} has {extra} postings {right} lacks"


def matching(conn: sqlite3.Connection, word: str) -> int:
    return int(
        conn.execute(
            "SELECT count(*) FROM relations_fts WHERE relations_fts MATCH ?", (f'"{word}"',)
        ).fetchone()[0]
    )


def test_index_follows_inserts_updates_and_deletes(team: Store) -> None:
    conn = team.session.conn
    index_matches_table(conn)
    assert matching(conn, "jared") == 5 and matching(conn, "work") == 2
    relate_in(team.session, NS, "Jared", "works_on", "engram", 1.0)  # an upsert changes no text
    assert matching(conn, "jared") == 5
    conn.execute(
        "UPDATE relations SET subject = 'Jordan', subject_key = 'jordan' "
        "WHERE subject_key = 'jared' AND predicate = 'likes'"
    )
    assert (matching(conn, "jared"), matching(conn, "jordan")) == (4, 1)
    assert triples(search(team, "jordan")) == [("Jordan", "likes", "pizza")]
    conn.execute("UPDATE relations SET predicate = 'loves', fts_predicate = NULL WHERE seq = 2")
    assert matching(conn, "work") == 1 and matching(conn, "love") == 1
    forget_in(team.session, [r.id for r in neighbors_in(team.session, "Maria", NS)], NS)
    assert matching(conn, "maria") == 0 and matching(conn, "manag") == 0
    conn.execute("DELETE FROM relations WHERE object_key = 'rust'")
    assert matching(conn, "rust") == 0
    table = conn.execute("SELECT count(*) FROM relations").fetchone()[0]
    assert table == len(TEAM) - 3
    assert conn.execute("SELECT count(*) FROM relations_fts").fetchone()[0] == table
    index_matches_table(conn)
    assert team.check()["ok"]


@pytest.mark.postgres
def test_postgres_index_follows_writes_and_deletes(pg_url: str) -> None:
    """The relations' postings and statistics equal a rebuild after every kind of write
    (check() compares them), and BM25 uses every namespace's statistics, as FTS5 does."""
    with mnemex.open(pg_url) as store:
        for subject, predicate, obj in TEAM:
            store.relate(subject, predicate, obj)
        store.relate("Jared", "works_on", "engram", confidence=1.0)  # an upsert: same terms
        other = store.relate("Jared", "works_on", "engram", namespace="other")
        assert store.check()["ok"]
        with store.session.connection() as conn:
            docs = conn.execute("SELECT sum(docs) FROM relation_namespace_stats").fetchone()[0]
            jared = conn.execute(
                "SELECT sum(docs) FROM relation_term_stats WHERE term = 'jare'"
            ).fetchone()[0]
        assert (docs, jared) == (len(TEAM) + 1, 6)
        store.forget_relations([r.id for r in store.neighbors("Maria")])
        with store.session.connection() as conn:
            conn.execute("DELETE FROM relations WHERE object_key = 'rust'")
        assert store.check()["ok"]
        assert search(store, "maria manages") == [] and search(store, "rust") == []
        assert [r.id for r in search(store, "engram", "other")] == [other.id]
        with store.session.connection() as conn:
            conn.execute("DELETE FROM relations")
            left = conn.execute(
                "SELECT (SELECT count(*) FROM relation_postings), "
                "(SELECT coalesce(sum(docs), 0) FROM relation_term_stats)"
            ).fetchone()
        assert tuple(left) == (0, 0) and store.check()["ok"]


# -- bad input --------------------------------------------------------------------


@both_engines
@pytest.mark.parametrize(
    ("subject", "predicate", "obj", "confidence", "message"),
    [
        ("", "likes", "pizza", 0.8, "subject is empty"),
        ("Jared", " ", "pizza", 0.8, "predicate is empty"),
        ("Jared", "likes", "   ", 0.8, "object is empty"),
        ("Jared", "_-_", "pizza", 0.8, "predicate is empty"),
        ("x" * 1_000_000, "likes", "pizza", 0.8, f"longer than {MAX_ENTITY_CHARS}"),
        ("Jared", "p" * 100_000, "pizza", 0.8, "longer than 64"),
        ("Jared", "likes", "y" * (MAX_ENTITY_CHARS + 1), 0.8, "object 'yyyy"),
        ("Jared", "likes", "pizza", 2, "between 0 and 1"),
        ("Jared", "likes", "pizza", -0.1, "between 0 and 1"),
        ("Jared", "likes", "pizza", float("nan"), "between 0 and 1"),
        ("Jared", "likes", "pizza", True, "must be a number"),
        (None, "likes", "pizza", 0.8, "subject must be text"),
        ("Jared", 3, "pizza", 0.8, "predicate must be text"),
        ("Ja\x00red", "likes", "pizza", 0.8, "not valid"),
        ("Jared", "lik\x07es", "pizza", 0.8, "control characters"),
    ],
)
def test_bad_relations_are_refused(
    store: Store, subject: object, predicate: object, obj: object, confidence: object, message: str
) -> None:
    with pytest.raises(InvalidInput, match=message) as caught:
        relate_in(store.session, NS, subject, predicate, obj, confidence)  # type: ignore[arg-type]
    assert len(str(caught.value)) < 300
    assert count_in(store.session, None) == 0


@both_engines
def test_bad_namespace_and_limits(team: Store) -> None:
    with pytest.raises(InvalidInput, match="namespace"):
        relate_in(team.session, "", "a", "b", "c")
    for limit in (0, -1, 10_000, True):
        with pytest.raises(InvalidInput, match="limit"):
            search(team, "jared", limit=limit)
        with pytest.raises(InvalidInput, match="limit"):
            neighbors_in(team.session, "jared", NS, limit=limit)
    with pytest.raises(InvalidInput, match="entity is empty"):
        neighbors_in(team.session, " ", NS)


@both_engines
@pytest.mark.parametrize(
    "text",
    [
        '"AND OR NEAR(',
        "NEAR(jared engram, 2)",
        "jared*",
        "subject:jared",
        "^jared",
        "-jared +pizza",
        "works_on OR",
        "((((",
        '"""',
        "\x00\x01 jared",
        "jared \ud800 pizza",
        "   ",
        "jared " * 5_000,
        "ジャレッド",
    ],
)
def test_any_query_text_is_safe(team: Store, text: str) -> None:
    found = search(team, text)
    assert all(r.score is not None and 0.0 < r.score <= 1.0 for r in found)


@pytest.fixture(scope="module")
def prop_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    store = mnemex.open(tmp_path_factory.mktemp("relations") / "prop.db", embedder=None)
    for subject, predicate, obj in [*TEAM, ("张伟", "喜欢", "咖啡"), ("NEAR", "AND", "OR")]:
        relate_in(store.session, NS, subject, predicate, obj)
    yield store
    store.close()


_SYNTAX = st.text(alphabet="\"()*:^-+{}[]/\\.,;!?'`~@#$%&|<>= \t\nANDORNOTNEARjared_", max_size=30)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(max_size=60), _SYNTAX))
def test_search_never_raises(prop_store: Store, text: str) -> None:
    found = search(prop_store, text)
    assert all(r.score is not None and 0.0 < r.score <= 1.0 for r in found)


# -- migration --------------------------------------------------------------------


def test_a_version_2_store_gains_relations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "v2.db"
    monkeypatch.setattr(migrations, "MIGRATIONS", migrations.MIGRATIONS[:2])
    monkeypatch.setattr(migrations, "LATEST", 2)
    conn = connect(path, busy_timeout=5.0)
    assert migrations.migrate(conn) == 2
    conn.execute(
        "INSERT INTO memories (id, namespace, kind, content, created_at, updated_at, "
        "content_hash) VALUES ('0000000000000001', ?, 'fact', 'Jared works on engram', "
        "'2025-01-01T00:00:00.000Z', '2025-01-01T00:00:00.000Z', 'x')",
        (NS,),
    )
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert "relations" not in names and "memories_fts" in names
    conn.close()
    monkeypatch.undo()

    with mnemex.open(path, embedder=None) as store:
        conn = store.session.conn
        assert conn.execute("PRAGMA user_version").fetchone()[0] == LATEST >= 3
        versions = [r[0] for r in conn.execute("SELECT version FROM schema_migrations")]
        assert versions == list(range(1, LATEST + 1))
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        assert {
            "relations",
            "relations_fts",
            "relations_fts_source",
            "relations_after_insert",
            "relations_after_delete",
            "relations_after_update_text",
            "memories_after_delete_relations",
        } <= names
        assert [h.id for h in store.search("engram").hits] == ["0000000000000001"]
        relate_in(
            store.session, NS, "Jared", "works_on", "engram", source_memory="0000000000000001"
        )
        assert triples(search(store, "engram")) == [("Jared", "works_on", "engram")]
        index_matches_table(conn)
        assert store.check()["ok"]


# -- through the store, the CLI and JSONL -------------------------------------------


@both_engines
def test_store_relate_neighbors_and_forget(store: Store) -> None:
    memory = store.add("Jared has been working on engram since March")
    rel = store.relate("Jared", "works on", "engram", confidence=0.9, source_memory=memory)
    assert (rel.predicate, rel.source_memory, rel.namespace) == ("works_on", memory, NS)
    again = store.relate("jared", "worksOn", "Engram", confidence=0.5)
    assert again.id == rel.id and again.confidence == 0.9
    store.relate("Maria", "manages", "Jared")
    assert triples(store.neighbors("JARED")) == [
        ("Jared", "works_on", "engram"),
        ("Maria", "manages", "Jared"),
    ]
    assert store.stats().relations == 2
    gone = store.forget_relations([rel.id, "0000000000000000"])
    assert gone.forgotten == (rel.id,) and gone.missing == ("0000000000000000",)
    assert triples(store.neighbors("Jared")) == [("Maria", "manages", "Jared")]
    with pytest.raises(UnknownMemory):
        store.relate("Jared", "likes", "tea", source_memory="0000000000000000")
    assert store.check()["ok"]


@both_engines
def test_search_returns_relations_apart_from_memories(store: Store) -> None:
    store.add("Jared has been working on the engram search engine since March")
    store.add("Lunch on Friday was pizza again")
    for subject, predicate, obj in TEAM:
        store.relate(subject, predicate, obj)
    result = store.search("what does Jared work on?")
    assert all(not hasattr(h, "subject") for h in result.hits)
    assert triples(list(result.relations))[0] == ("Jared", "works_on", "engram")
    scores = [r.score for r in result.relations]
    assert scores == sorted(scores, reverse=True) and len(set(scores)) > 1  # never a constant
    assert len(result.relations) <= store.settings.search_relations
    data = result.to_dict()
    assert data["relations"][0]["predicate"] == "works_on" and "score" in data["relations"][0]
    assert store.search("what does Jared work on?", relations=0).relations == ()
    assert len(store.search("Jared", relations=2).relations) == 2
    assert store.search("weather forecast for tomorrow").relations == ()
    with pytest.raises(InvalidInput):
        store.search("Jared", relations=-1)


@both_engines
def test_relations_in_search_stay_in_their_namespace(make_store) -> None:  # type: ignore[no-untyped-def]
    mine = make_store("shared.db", namespace="mine")
    other = make_store("shared.db", namespace="other")
    other.relate("Jared", "works_on", "engram")
    assert mine.search("Jared engram").relations == ()
    assert mine.neighbors("Jared") == []
    mine.relate("Jared", "likes", "pizza")
    assert triples(list(mine.search("Jared").relations)) == [("Jared", "likes", "pizza")]
    both = mine.search("Jared", namespace=mnemex.ALL).relations
    assert {r.namespace for r in both} == {"mine", "other"}


@both_engines
def test_relations_round_trip_through_jsonl(make_store) -> None:  # type: ignore[no-untyped-def]
    from mnemex.transfer import export_lines, import_jsonl

    source = make_store("source.db")
    memory = source.add("Jared works on engram")
    source.relate("Jared", "works_on", "engram", confidence=0.9, source_memory=memory)
    source.relate("张伟", "喜欢", "咖啡")
    lines = list(export_lines(source))
    assert len(lines) == 3
    target = make_store("target.db")
    report = import_jsonl(target, lines)
    assert (report.imported, report.relations, report.errors) == (1, 2, ())
    assert [r.to_dict() for r in target.iter_relations()] == [
        r.to_dict() for r in source.iter_relations()
    ]
    assert triples(list(target.search("咖啡").relations)) == [("张伟", "喜欢", "咖啡")]
    assert target.check()["ok"]


@both_engines
def test_bad_relation_lines_are_reported_and_strict_imports_nothing(store: Store) -> None:
    from mnemex.transfer import import_jsonl

    lines = [
        '{"content": "Jared works on engram", "id": "m1"}',
        '{"type": "relation", "subject": "Jared", "predicate": "works_on", "object": "engram", "source_memory": "m1"}',
        '{"type": "relation", "subject": "", "predicate": "likes", "object": "tea"}',
        '{"type": "relation", "subject": "A", "predicate": "b", "object": "C", "source_memory": "nope"}',
        '{"type": "relation", "subject": "A", "predicate": "b", "object": "C", "colour": "red"}',
        '{"type": "widget", "content": "x"}',
    ]
    with pytest.raises(InvalidInput, match="4 bad line"):
        import_jsonl(store, lines, strict=True)
    assert store.count() == 0 and store.stats().relations == 0
    report = import_jsonl(store, lines)
    assert [e.line for e in report.errors] == [3, 4, 5, 6]
    assert "neither in the file nor" in report.errors[1].message
    assert (report.imported, report.relations) == (1, 1)
    assert store.neighbors("jared")[0].source_memory == "m1"


@both_engines
def test_cli_relate_neighbors_search_forget(store_place) -> None:  # type: ignore[no-untyped-def]
    import json

    from click.testing import CliRunner

    from mnemex.cli import cli

    runner, db = CliRunner(), str(store_place("cli.db"))

    def run(*args: str, code: int = 0) -> str:
        result = runner.invoke(cli, ["--db", db, *args])
        assert result.exit_code == code, result.output
        return result.stdout if code == 0 else result.output

    rel = run("relate", "Jared", "works_on", "engram", "--confidence", "0.9").strip()
    run("relate", "Jared", "likes", "pizza")
    assert "Jared -[works_on]-> engram" in run("neighbors", "jared")
    found = json.loads(run("neighbors", "jared", "--json"))["relations"]
    assert [r["predicate"] for r in found] == ["works_on", "likes"]
    out = json.loads(run("search", "what is Jared working on", "--json"))
    assert out["hits"] == [] and out["relations"][0]["id"] == rel
    assert "Jared -[works_on]-> engram" in run("search", "Jared engram")
    assert json.loads(run("search", "Jared", "--relations", "0", "--json"))["relations"] == []
    assert "relations   2" in run("stats")
    assert "forgot 1 relation" in run("forget", "--relations", rel)
    assert "no relation with id" in run("forget", "--relations", rel, code=1)
    assert "object is empty" in run("relate", "Jared", "likes", " ", code=1)
