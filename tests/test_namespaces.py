"""A namespace ranks exactly as it would alone in its own store.

Property: the same memories of namespace ``x``, written in the same order,
give identical hits and scores (to the last bit) whether or not other
namespaces share the store, in lexical, vector and hybrid modes with the
default settings (adaptive fusion, relevance floor), shaped or exact.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import sqlite3
import subprocess
import sys
from pathlib import Path
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mnemex
from mnemex.engine.sqlite import fts
from mnemex.engine.sqlite.fts import _varints
from mnemex.index.retrieval import plan
from mnemex.store import Store
from tests.conftest import FakeEmbedder

WORDS = (
    "alpha beta gamma delta epsilon zeta theta kappa lambda sigma omega river stone "
    "garden paris tuesday music guitar painting camping dog cat the of and"
).split()


class CalibratedFake(FakeEmbedder):
    """The fake vectors under the name of the model with a calibrated relevance floor,
    so the floor takes part as it does by default."""

    model_id = "fake:all-minilm-l6-v2"


def _text(rnd: random.Random) -> str:
    vocabulary = WORDS[: rnd.randint(4, len(WORDS))]
    return " ".join(rnd.choice(vocabulary) for _ in range(rnd.randint(1, 25)))


def _open(path: Path, budget: int) -> Store:
    store = mnemex.open(path, embedder=CalibratedFake())
    store.settings = dataclasses.replace(store.settings, lexical_budget=budget)
    return store


def _build(tmp: Path, seed: int, others: int, budget: int) -> tuple[Store, Store, list[str]]:
    rnd = random.Random(seed)
    mine = [_text(rnd) for _ in range(rnd.randint(5, 60))]
    alone = _open(tmp / f"alone-{seed}-{others}-{budget}.db", budget)
    shared = _open(tmp / f"shared-{seed}-{others}-{budget}.db", budget)
    for i, text in enumerate(mine):
        alone.add(text, namespace="x", id=f"x{i}", dedup=False)
        for _ in range(rnd.randint(0, others)):  # other namespaces' rows in between
            shared.add(_text(rnd), namespace=rnd.choice(["y", "z"]), dedup=False)
        shared.add(text, namespace="x", id=f"x{i}", dedup=False)
    queries = [_text(rnd)[:60] for _ in range(8)] + ["river", "the of", "omega omega stone"]
    return alone, shared, queries


def _hits(store: Store, query: str, mode: str) -> list[tuple[str, float]]:
    result = store.search(query, namespace="x", limit=10, mode=mode)
    return [(hit.id, hit.score) for hit in result.hits]


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    seed=st.integers(0, 10_000),
    others=st.integers(1, 6),
    budget=st.sampled_from([2_000, 15, 0]),
    plain=st.booleans(),
)
def test_a_namespace_ranks_as_it_would_alone(
    tmp_path: Path, seed: int, others: int, budget: int, plain: bool
) -> None:
    """``plain``: the namespace's postings read and scored in plain floats, as a process
    that has not imported numpy does (the hybrid mode then scores the lexical arm's
    tuples with numpy)."""
    folder = tmp_path / ("plain" if plain else "numpy")  # the fixture outlives an example
    folder.mkdir(exist_ok=True)
    alone, shared, queries = _build(folder, seed, others, budget)

    def scoring() -> contextlib.ExitStack:
        patched = contextlib.ExitStack()
        if plain:
            patched.enter_context(mock.patch.object(fts, "_numpy_loaded", lambda: False))
            patched.enter_context(mock.patch.object(fts, "_plain_left", [10**9]))
        return patched

    try:
        assert alone.count(namespace="x") == shared.count(namespace="x")
        assert shared.count(namespace=mnemex.ALL) > alone.count(namespace="x")
        for query in queries:
            for mode in ("lexical", "vector", "hybrid"):
                with scoring():
                    got = _hits(shared, query, mode)
                assert got == _hits(alone, query, mode), (query, mode)
    finally:
        alone.close()
        shared.close()


def test_a_new_process_searches_one_namespace_without_numpy(tmp_path: Path) -> None:
    """A lexical search of one namespace among others, in a new process, scores in plain
    floats: numpy (tens of milliseconds to import) is not loaded, until the process has
    made ``PLAIN_SEARCHES`` of them."""
    path = tmp_path / "two.db"
    with mnemex.open(path, embedder="none") as store:
        rnd = random.Random(3)
        for _ in range(200):
            store.add(_text(rnd), namespace=rnd.choice("ab"), dedup=False)
    script = (
        "import sys, mnemex\n"
        f"s = mnemex.open({str(path)!r}, embedder='none', namespace='a')\n"
        "hits = s.search('river stone garden', mode='lexical').hits\n"
        "assert s.session.lexicon.scope('a') is not None\n"
        "print(len(hits), 'numpy' in sys.modules)\n"
        f"for _ in range({fts.PLAIN_SEARCHES} - 1): s.search('river stone', mode='lexical')\n"
        "print('numpy' in sys.modules)\n"
        "s.search('omega', mode='lexical')\n"
        "print('numpy' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    count, *loaded = done.stdout.split()
    assert int(count) > 0
    assert loaded == ["False", "False", "True"]


def test_a_new_process_reads_a_search_of_few_rows_without_numpy(tmp_path: Path) -> None:
    """Terms of more rows each than a few thousand, but together fewer than
    ``PLAIN_POSTINGS``, are read and scored in plain floats; a search of more imports numpy."""
    path = tmp_path / "many.db"
    per_term = fts.PLAIN_POSTINGS // 3
    with mnemex.open(path, embedder="none") as store:
        store.add_many(
            [{"content": f"river stone {i}", "namespace": "a"} for i in range(per_term)]
            + [
                {"content": f"garden {i}", "namespace": "a"}
                for i in range(fts.PLAIN_POSTINGS - per_term + 1)
            ]
            + [{"content": f"river {i}", "namespace": "b"} for i in range(50)],
            keep_namespaces=True,
        )
    script = (
        "import sys, mnemex\n"
        f"s = mnemex.open({str(path)!r}, embedder='none', namespace='a')\n"
        "assert s.search('river stone', mode='lexical').hits\n"
        "print('numpy' in sys.modules)\n"
        "assert s.search('river garden', mode='lexical').hits\n"
        "print('numpy' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["False", "True"]


def test_edits_forgets_and_moves_keep_the_namespace_exact(tmp_path: Path) -> None:
    """After updates, forgets and rows written to other namespaces afterwards, the
    namespace still ranks as a fresh store holding what it now holds."""
    alone, shared, queries = _build(tmp_path, 7, 4, 2_000)
    try:
        for store in (alone, shared):
            store.update("x3", content="river stone river garden", namespace="x")
            store.forget(["x1", "x5"], namespace="x")
        rnd = random.Random(3)
        for _ in range(30):
            shared.add(_text(rnd), namespace="y", dedup=False)
        fresh = _open(tmp_path / "fresh.db", 2_000)
        for memory in alone.iter_memories(namespace="x"):
            fresh.add(memory.content, namespace="x", id=memory.id, dedup=False)
        for query in queries:
            for mode in ("lexical", "hybrid"):
                expected = _hits(fresh, query, mode)
                assert _hits(shared, query, mode) == expected, (query, mode)
                assert _hits(alone, query, mode) == expected, (query, mode)
        fresh.close()
    finally:
        alone.close()
        shared.close()


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(seed=st.integers(0, 10_000), plain=st.booleans())
def test_a_namespace_read_again_after_writes_ranks_as_a_fresh_read(
    tmp_path: Path, seed: int, plain: bool
) -> None:
    """A process that searches a namespace, then writes, then searches it again reads only
    the rows added since (the others are kept), or all of them again after an edit or a
    forget: either way the same hits, scores and postings as a new connection that reads
    them all."""
    rnd = random.Random(seed)
    path = tmp_path / f"{seed}-{plain}.db"
    path.unlink(missing_ok=True)
    store = _open(path, rnd.choice([2_000, 15]))
    for _ in range(40):
        store.add(_text(rnd), namespace=rnd.choice("xxy"), dedup=False)
    queries = [_text(rnd)[:60] for _ in range(4)] + ["river stone", "omega"]
    patched = contextlib.ExitStack()
    joined = patched.enter_context(
        mock.patch.object(fts, "_joined_postings", wraps=fts._joined_postings)
    )
    if plain:
        patched.enter_context(mock.patch.object(fts, "_numpy_loaded", lambda: False))
        patched.enter_context(mock.patch.object(fts, "_plain_left", [10**9]))
    try:
        with patched:
            for step in range(12):
                for query in queries:
                    _hits(store, query, "lexical")  # cached as the namespace is now
                action = rnd.random()
                if action < 0.6:  # the common case: rows added
                    for _ in range(rnd.randint(1, 4)):
                        store.add(_text(rnd), namespace=rnd.choice("xy"), dedup=False)
                elif action < 0.8:
                    mine = [m.id for m in store.iter_memories(namespace="x")]
                    store.update(rnd.choice(mine), content=_text(rnd), namespace="x")
                else:
                    mine = [m.id for m in store.iter_memories(namespace="x")]
                    store.forget([rnd.choice(mine)], namespace="x")
                fresh = _open(path, store.settings.lexical_budget)
                try:
                    lexicon, scope = store.session.lexicon, store.session.lexicon.scope("x")
                    assert scope is not None
                    for query in queries:
                        assert _hits(store, query, "lexical") == _hits(fresh, query, "lexical")
                    terms = [t for q in queries for t in plan(lexicon, q).terms]
                    kept = lexicon.postings(terms, scope)
                    read = fresh.session.lexicon.postings(terms, scope)
                    for a, b in zip(kept, read, strict=True):
                        assert list(a.seqs) == list(b.seqs), step
                        assert list(a.freqs) == list(b.freqs), step
                        assert list(a.lengths) == list(b.lengths), step
                finally:
                    fresh.close()
            assert joined.call_count > 0  # rows added to rows kept
    finally:
        store.close()


def _stats_from_index(conn: sqlite3.Connection) -> dict[str, tuple[int, int]]:
    truth: dict[str, list[int]] = {}
    for namespace, size in conn.execute(
        "SELECT m.namespace, d.sz FROM memories AS m JOIN memories_fts_docsize AS d ON d.id = m.seq"
    ):
        entry = truth.setdefault(namespace, [0, 0])
        entry[0] += 1
        entry[1] += sum(_varints(size))
    return {ns: (docs, tokens) for ns, (docs, tokens) in truth.items()}


def test_namespace_stats_follow_every_write(tmp_path: Path) -> None:
    """Inserts, text and tag edits, forgets, a move between namespaces (dedup) and a
    rebuild of the index all leave namespace_stats equal to what the index holds."""
    store = mnemex.open(tmp_path / "stats.db", embedder="none")
    rnd = random.Random(5)
    ids = [
        store.add(_text(rnd) * rnd.randint(1, 40), namespace=rnd.choice("abc"), dedup=False)
        for _ in range(120)
    ]
    store.add("w " * 17_000, namespace="a", dedup=False)  # a 3-byte length varint
    conn = store.session.conn

    def stats() -> dict[str, tuple[int, int]]:
        return {
            ns: (docs, tokens)
            for ns, docs, tokens in conn.execute(
                "SELECT namespace, docs, tokens FROM namespace_stats WHERE docs > 0"
            )
        }

    assert stats() == _stats_from_index(conn)
    mine = [m.id for m in store.iter_memories(namespace="a")]
    store.update(mine[0], content="new text " * 300, tags=["t1", "t2"], namespace="a")
    store.forget(mine[1:4], namespace="a")
    conn.execute("UPDATE memories SET namespace = 'd' WHERE id = ?", (mine[4],))
    assert stats() == _stats_from_index(conn)
    conn.execute("DELETE FROM memories WHERE namespace = 'b'")
    assert stats() == _stats_from_index(conn)
    store.reindex()
    assert stats() == _stats_from_index(conn)
    assert len(ids) == 120
    store.close()


def test_a_store_from_before_the_statistics_is_backfilled(tmp_path: Path) -> None:
    """Opening a store of schema 4 adds the table, filled from the index."""
    path = tmp_path / "old.db"
    store = mnemex.open(path, embedder="none")
    rnd = random.Random(9)
    for _ in range(50):
        store.add(_text(rnd), namespace=rnd.choice("pq"), dedup=False)
    expected = _stats_from_index(store.session.conn)
    store.close()
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE namespace_stats")
    conn.execute("DELETE FROM schema_migrations WHERE version >= 5")
    conn.execute("PRAGMA user_version = 4")
    conn.commit()
    conn.close()
    with mnemex.open(path, embedder="none") as reopened:
        got = {
            ns: (docs, tokens)
            for ns, docs, tokens in reopened.session.conn.execute(
                "SELECT namespace, docs, tokens FROM namespace_stats"
            )
        }
        assert got == expected
        reopened.add("after the upgrade", namespace="p", dedup=False)
        assert got["p"][0] + 1 == reopened.count(namespace="p")


def test_every_length_of_a_row_record_is_counted(tmp_path: Path) -> None:
    """Content of 1- to 3-byte token counts beside tags of 1- and 2-byte ones are counted
    as the FTS5 index counts them, whatever the varints' lengths."""
    store = mnemex.open(tmp_path / "lengths.db", embedder="none")
    for content in (1, 100, 200, 17_000):
        for tags in (0, 1, 5, 64):  # 16 tokens a tag: up to 1,024
            store.add(
                "w " * content,
                tags=[" ".join([f"t{i}"] * 16) for i in range(tags)],
                namespace=f"c{content}-t{tags}",
                dedup=False,
            )
    conn = store.session.conn
    stats = {
        ns: (docs, tokens)
        for ns, docs, tokens in conn.execute("SELECT namespace, docs, tokens FROM namespace_stats")
    }
    assert stats == _stats_from_index(conn)
    assert stats["c17000-t64"] == (1, 17_000 + 64 * 16)
    store.close()


def test_a_new_connection_parses_a_small_schema(tmp_path: Path) -> None:
    """Every new process parses the whole schema before its first statement: the row's
    token count is decoded once, in a view, not in each trigger (80 kB of SQL before)."""
    with mnemex.open(tmp_path / "small.db", embedder="none") as store:
        store.add("one memory", dedup=False)
        size = store.session.conn.execute("SELECT sum(length(sql)) FROM sqlite_master").fetchone()
    assert size[0] < 20_000


def test_a_store_with_the_long_triggers_is_upgraded(tmp_path: Path) -> None:
    """A store of schema 10 (the decoding in each trigger) gets the view and the short
    triggers, its statistics still kept by every write."""
    from mnemex.storage import migrations

    path = tmp_path / "ten.db"
    with mnemex.open(path, embedder="none") as store:
        store.add("before the upgrade", namespace="p", dedup=False)
    conn = sqlite3.connect(path)
    conn.execute("DROP VIEW memories_fts_tokens")
    for statement in migrations._fts_triggers(migrations._STATS_ADD, migrations._STATS_REMOVE):
        name = statement.split()[2]
        conn.execute(f"DROP TRIGGER {name}")
        conn.execute(statement)
    conn.execute("DELETE FROM schema_migrations WHERE version > 10")
    conn.execute("PRAGMA user_version = 10")
    conn.commit()
    assert conn.execute("SELECT sum(length(sql)) FROM sqlite_master").fetchone()[0] > 60_000
    conn.close()
    with mnemex.open(path, embedder="none") as store:
        conn = store.session.conn
        assert conn.execute("SELECT sum(length(sql)) FROM sqlite_master").fetchone()[0] < 20_000
        store.add("after the upgrade " * 300, namespace="p", dedup=False)
        store.forget([m.id for m in store.iter_memories(namespace="p")][:1], namespace="p")
        got = {
            ns: (docs, tokens)
            for ns, docs, tokens in conn.execute(
                "SELECT namespace, docs, tokens FROM namespace_stats WHERE docs > 0"
            )
        }
        assert got == _stats_from_index(conn)


def test_damaged_statistics_are_found_and_recounted(tmp_path: Path) -> None:
    """Statistics edited by hand are reported by `check` and counted anew by `reindex`;
    the searches then rank as before the damage."""
    store = mnemex.open(tmp_path / "damaged.db", embedder="none")
    rnd = random.Random(11)
    for _ in range(60):
        store.add(_text(rnd), namespace=rnd.choice("ab"), dedup=False)
    query = " ".join(WORDS[:6])
    before = [(h.id, h.score) for h in store.search(query, namespace="a", mode="lexical").hits]
    assert store.check()["ok"]
    conn = store.session.conn
    conn.execute(
        "UPDATE namespace_stats SET docs = docs + 3, tokens = tokens + 7 WHERE namespace = 'a'"
    )
    conn.execute("DELETE FROM namespace_stats WHERE namespace = 'b'")
    report = store.check()
    assert not report["ok"]
    assert any(
        "ranking statistics differ" in p and " 2 namespaces" in p for p in report["problems"]
    )
    store.reindex()
    assert store.check()["ok"]
    kept = {
        ns: (docs, tokens)
        for ns, docs, tokens in conn.execute("SELECT namespace, docs, tokens FROM namespace_stats")
    }
    assert kept == _stats_from_index(conn)
    assert [
        (h.id, h.score) for h in store.search(query, namespace="a", mode="lexical").hits
    ] == before
    store.close()
