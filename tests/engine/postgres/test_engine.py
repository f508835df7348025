"""The PostgreSQL engine against a real server (see tests/pg_fixtures.py): schema, writes,
BM25 equal to the SQLite engine's, CJK, vectors, and writers in several processes."""

from __future__ import annotations

import multiprocessing
import re
import sqlite3
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mnemex
from mnemex.engine import postgres as pg
from mnemex.engine.postgres import bm25, tokens
from mnemex.engine.postgres import schema as pg_schema
from mnemex.engine.postgres import vectors as pg_vectors
from mnemex.engine.sqlite import fts
from mnemex.errors import IndexMismatch, InvalidInput, MissingExtra
from mnemex.index import retrieval
from mnemex.storage import connect as sqlite_connect
from mnemex.text import content_hash

postgres = pytest.mark.postgres

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)

TEXTS = [
    "The nightly reconciliation job failed on refunds with negative amounts",
    "Invoice PDFs were slow because fonts were embedded on every page",
    "Users sign in with OIDC since the cutover; the old password flow is gone",
    "Refunds are reconciled nightly; the job retries three times before paging",
    "发票 PDF 生成很慢，因为每一页都嵌入了字体",
    "会議は毎週火曜日に行われます。議事録は共有フォルダにあります",
    "사과를 먹었다. 회의는 내일 오후에 있다",
    "Billing is owned by the payments team; Alice leads it",
    "The the the the the reconciliation reconciliation job",
    "Ä café naïve résumé — diacritics are folded by the tokenizer",
    "O'Brien's backslash \\ path: C:\\temp and 'quotes' \"double\"",
]
QUERIES = [
    "why were invoice PDFs slow?",
    "reconciliation job refunds",
    "how do users sign in now?",
    "发票",
    "字体 很慢",
    "会議",
    "사과",
    "cafe resume",
    "the",
    "who owns billing",
    "O'Brien backslash",
    "nothing matches this zyzzyva",
]


def rows_of(texts: list[str], namespace: str = "ns", prefix: str = "m") -> list[pg.Row]:
    return [
        pg.Row(
            id=f"{prefix}{i}",
            namespace=namespace,
            kind="note",
            content=text,
            content_hash=content_hash(text),
            created_at=NOW,
            updated_at=NOW,
            tags=("billing", "多语言") if i % 3 == 0 else (),
        )
        for i, text in enumerate(texts)
    ]


@pytest.fixture
def conn(pg_url: str) -> Iterator[Any]:
    with pg.connect(pg_url) as c:
        pg.migrate(c)
        yield c


def sqlite_ranking(
    path: Path, text: str, namespace: str | None, pool: int
) -> list[tuple[str, float]]:
    """The SQLite engine's lexical arm, exact (no query shaping), as (id, BM25)."""
    conn = sqlite_connect(path, busy_timeout=5.0)
    try:
        lexicon = fts.Lexicon(conn)
        plan = retrieval.plan(lexicon, text, namespace=namespace)
        found = fts.retrieve(conn, plan, retrieval.Filters(namespace), pool, 0)
        if not found.candidates and plan.dropped:
            found = fts.retrieve(
                conn, plan.with_dropped(lexicon), retrieval.Filters(namespace), pool, 0
            )
        ids = dict(conn.execute("SELECT seq, id FROM memories").fetchall())
        return [(ids[c.seq], c.raw) for c in found.candidates]
    finally:
        conn.close()


def pg_ranking(conn: Any, text: str, namespace: str | None, pool: int) -> list[tuple[str, float]]:
    ids = dict(conn.execute("SELECT seq, id FROM memories").fetchall())
    return [(ids[c.seq], c.raw) for c in pg.search(conn, text, namespace, pool)]


def test_import_needs_no_driver_and_connect_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(MissingExtra, match=r"pip install 'mnemex\[postgres\]'"):
        pg.connect("postgresql://nobody@/nothing")


@postgres
def test_migrate_is_idempotent_and_records_its_versions(conn: Any) -> None:
    assert pg.schema_version(conn) == pg.LATEST
    assert pg.migrate(conn) == pg.LATEST
    versions = [v for (v,) in conn.execute("SELECT version FROM schema_migrations ORDER BY 1")]
    assert versions == [v for v, _, _ in pg_schema.MIGRATIONS]
    extensions = {e for (e,) in conn.execute("SELECT extname FROM pg_extension")}
    assert "vector" in extensions


def _migrate_in_process(url: str) -> int:
    with pg.connect(url) as c:
        return pg.migrate(c)


@postgres
@pytest.mark.slow
def test_two_migrators_at_once_apply_each_migration_once(pg_url: str) -> None:
    """The migrators start while the lock is held, so all of them find the database empty
    and wait; the first to get the lock migrates, the others find it done."""
    with pg.connect(pg_url) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (pg_schema.LOCK_KEY,))
        with ProcessPoolExecutor(3, mp_context=multiprocessing.get_context("spawn")) as workers:
            jobs = [workers.submit(_migrate_in_process, pg_url) for _ in range(3)]
            deadline = time.monotonic() + 60
            while _waiting_for_lock(holder) < 3 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert _waiting_for_lock(holder) == 3
            holder.execute("SELECT pg_advisory_unlock(%s)", (pg_schema.LOCK_KEY,))
            assert [job.result() for job in jobs] == [pg.LATEST] * 3
    with pg.connect(pg_url) as c:
        rows = c.execute("SELECT version, count(*) FROM schema_migrations GROUP BY 1").fetchall()
        assert sorted(rows) == [(v, 1) for v, _, _ in pg_schema.MIGRATIONS]


def _waiting_for_lock(conn: Any) -> int:
    row = conn.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
    ).fetchone()
    return int(row[0])


@postgres
def test_statistics_follow_inserts_updates_and_deletes(conn: Any) -> None:
    pg.insert_rows(conn, rows_of(TEXTS))
    pg.insert_rows(conn, rows_of(TEXTS[:4], namespace="other", prefix="o"))
    assert bm25.check(conn) == []
    conn.execute("UPDATE memories SET namespace = 'moved' WHERE id IN ('m1', 'm2')")
    conn.execute("UPDATE memories SET confidence = 0.5")  # no text change
    conn.execute("DELETE FROM memories WHERE id IN ('m3', 'o0')")
    assert bm25.check(conn) == []
    with pytest.raises(Exception, match="rolled"), conn.transaction():
        conn.execute("DELETE FROM memories")
        raise RuntimeError("rolled back")
    assert bm25.check(conn) == []
    assert conn.execute("SELECT count(*) FROM term_stats WHERE docs < 0").fetchone() == (0,)
    conn.execute("UPDATE term_stats SET docs = docs + 1 WHERE term = 'refund' AND namespace = 'ns'")
    conn.execute("DELETE FROM postings WHERE seq = (SELECT min(seq) FROM memories)")
    problems = bm25.check(conn)
    assert len(problems) == 2
    assert problems[0] == "term_stats: 1 rows that the memories do not give, 1 missing"
    assert problems[1].startswith("postings: 0 rows that the memories do not give, ")


@postgres
def test_writers_of_one_namespace_do_not_wait_for_each_others_counts(
    conn: Any, pg_url: str
) -> None:
    """A write not yet committed holds its slot's counts, not the namespace's: a second
    writer of the same words (and a delete, and an update) goes through at once, and
    the counts of both, summed over the slots, are what the rows give."""
    pg.insert_rows(conn, rows_of(TEXTS[:2]))
    with pg.connect(pg_url) as other:
        with conn.transaction():
            pg.insert_rows(conn, rows_of(TEXTS[2:4], prefix="a"))
            other.execute("SET lock_timeout = '2s'")
            pg.insert_rows(other, rows_of(TEXTS[4:6], prefix="b"))  # raised LockNotAvailable
            other.execute("DELETE FROM memories WHERE id = 'm0'")
            other.execute("UPDATE memories SET tags = '[]', lex = '' WHERE id = 'b0'")
            assert bm25.check(other) == []  # the rows committed, and their counts
        slots = conn.execute("SELECT count(DISTINCT slot) FROM namespace_stats").fetchone()[0]
        assert slots == 2
        assert bm25.check(conn) == []
        stats = bm25.statistics(conn, "ns", ["refund", "reconcil"])
        assert (stats.docs, stats.doc_freqs) == (5, {"refund": 1, "reconcil": 1})
        assert [i for i, _ in pg_ranking(conn, "refunds reconciliation", None, 10)] == ["a1"]


@postgres
def test_counts_of_a_store_made_before_slots_are_kept(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Migration 12 puts every counter in slot 0 and the writes after it add to it."""
    before = [m for m in pg_schema.MIGRATIONS if m[0] < 12]
    with pg.connect(pg_url) as c:
        with monkeypatch.context() as patched:
            patched.setattr(pg_schema, "MIGRATIONS", tuple(before))
            patched.setattr(pg_schema, "LATEST", before[-1][0])
            assert pg_schema.migrate(c) == 11
        pg.insert_rows(c, rows_of(TEXTS))
        counts = bm25.statistics(c, "ns", ["refund", "the"])
        assert pg.migrate(c) == 12
        assert bm25.statistics(c, "ns", ["refund", "the"]) == counts
        assert c.execute("SELECT DISTINCT slot FROM term_stats").fetchall() == [(0,)]
        pg.insert_rows(c, rows_of(TEXTS[:3], namespace="ns2"))
        c.execute("DELETE FROM memories WHERE id = 'm1'")
        assert bm25.check(c) == []


@postgres
def test_index_terms_and_lengths_are_fts5s(conn: Any, tmp_path: Path) -> None:
    pg.insert_rows(conn, rows_of(TEXTS))
    with mnemex.open(tmp_path / "m.db") as store:
        store.add_many(
            [{"id": r.id, "content": r.content, "tags": list(r.tags)} for r in rows_of(TEXTS)],
            namespace="ns",
        )
    lite = sqlite3.connect(tmp_path / "m.db")
    sizes = dict(
        lite.execute(
            "SELECT m.id, d.sz FROM memories AS m JOIN memories_fts_docsize AS d ON d.id = m.seq"
        ).fetchall()
    )
    lite.close()
    for mid, length in conn.execute("SELECT id, lex_len FROM memories"):
        assert length == sum(fts._varints(sizes[mid])), mid


@postgres
@pytest.mark.parametrize("query", QUERIES)
def test_bm25_equals_the_sqlite_engines(conn: Any, tmp_path: Path, query: str) -> None:
    """Same rows, same order, same scores as SQLite's lexical arm, in a namespace that
    shares the store with another (so both use the namespace's own statistics), and in
    the whole store."""
    rows = rows_of(TEXTS) + rows_of([*TEXTS[::2], "another namespace"], "other", "o")
    pg.insert_rows(conn, rows)
    with mnemex.open(tmp_path / "m.db") as store:
        for r in rows:
            store.add_many(
                [{"id": r.id, "content": r.content, "tags": list(r.tags)}],
                namespace=r.namespace,
            )
    for namespace in ("ns", "other", None):
        expected = sqlite_ranking(tmp_path / "m.db", query, namespace, 50)
        got = pg_ranking(conn, query, namespace, 50)
        assert [i for i, _ in got] == [i for i, _ in expected], (query, namespace)
        assert [s for _, s in got] == pytest.approx([s for _, s in expected], rel=1e-9)


def _ranked(scores: dict[str, float]) -> list[tuple[float, str]]:
    return sorted((-round(score, 9), mid) for mid, score in scores.items())


def _shaped_texts() -> list[str]:
    """Rows where a query's common words fill far more than a small budget: every row
    says "alpha", every other "beta", a few "zeta" or "omega"."""
    out = []
    for n in range(240):
        words = ["alpha", f"item{n}"] + ["beta"] * (n % 2) + ["gamma"] * (n % 3 == 0)
        words += ["zeta"] * (n % 37 == 0) + ["omega"] * (n % 41 == 0) + ["alpha"] * (n % 5 == 0)
        out.append(" ".join(words))
    return out


@postgres
@pytest.mark.parametrize("query", ["alpha beta zeta", "zeta omega gamma alpha", "beta gamma"])
def test_shaped_bm25_equals_the_sqlite_engines(conn: Any, tmp_path: Path, query: str) -> None:
    """With a small lexical budget both engines shape the query alike: the same rows, in
    the same order, with the same scores (each candidate scored with every term), in a
    namespace beside another and in the whole store; fewer candidates than the pool:
    every matching row."""
    texts = _shaped_texts()
    rows = rows_of(texts) + rows_of(texts[::3], "other", "o")
    pg.insert_rows(conn, rows)
    with mnemex.open(tmp_path / "m.db") as store:
        for namespace in ("ns", "other"):
            store.add_many(
                [
                    {"id": r.id, "content": r.content, "tags": list(r.tags)}
                    for r in rows
                    if r.namespace == namespace
                ],
                namespace=namespace,
            )
    lite = sqlite_connect(tmp_path / "m.db", busy_timeout=5.0)
    lexicon = fts.Lexicon(lite)
    lite_ids = dict(lite.execute("SELECT seq, id FROM memories").fetchall())
    pg_ids = dict(conn.execute("SELECT seq, id FROM memories").fetchall())
    try:
        shaped = []
        for namespace, pool in (("ns", 12), ("other", 12), (None, 12), ("ns", 200)):
            plan = retrieval.plan(lexicon, query, namespace=namespace)
            expected = fts.retrieve(lite, plan, retrieval.Filters(namespace), pool, 30)
            got = bm25.retrieve(conn, list(plan.terms), namespace, pool, 30)
            assert (got.shaped, got.fallback) == (expected.shaped, expected.fallback)
            shaped.append(got.shaped)
            # Ranked alike up to the last bits of a score (SQLite's shaped score is a
            # difference of two sums): rows compared in order of their rounded scores.
            assert _ranked({pg_ids[c.seq]: c.raw for c in got.candidates}) == _ranked(
                {lite_ids[c.seq]: c.raw for c in expected.candidates}
            ), (query, namespace, pool)
            exact = dict(
                (c.seq, c.raw) for c in bm25.lexical(conn, list(plan.terms), namespace, 10_000)
            )
            assert all(exact[c.seq] == pytest.approx(c.raw, rel=1e-12) for c in got.candidates)
    finally:
        lite.close()
    assert shaped[0] and not shaped[3]  # a pool of 200: every matching row scored


@postgres
def test_common_terms_probed_or_read_give_the_same_scores(
    conn: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shaped search reads each common term's postings whole or looks them up per
    candidate (:func:`bm25.probed`): every term probed, none, or as the default chooses
    (here "alpha", in every row, probed and "gamma" read), the candidates are the same rows
    with the same scores, each that of the exact arm."""
    pg.insert_rows(conn, rows_of(_shaped_texts()))
    terms = list(bm25.plan(conn, "zeta omega gamma alpha", "ns").terms)
    stats, _ = bm25.term_weights(conn, terms, "ns")
    candidates = stats.doc_freqs["zeta"] + stats.doc_freqs["omega"]
    assert bm25.probed(stats.doc_freqs["alpha"], candidates)
    assert not bm25.probed(stats.doc_freqs["gamma"], candidates)
    exact = {c.seq: c.raw for c in bm25.lexical(conn, terms, "ns", 10_000)}
    found, default = {}, bm25.PROBE_COST
    for cost in (0.0, default, 1e12):  # every term probed, the default, none
        monkeypatch.setattr(bm25, "PROBE_COST", cost)
        got = bm25.retrieve(conn, terms, "ns", 12, 30)
        assert got.shaped and len(got.candidates) == 12
        assert all(exact[c.seq] == pytest.approx(c.raw, rel=1e-12) for c in got.candidates)
        found[cost] = _ranked({str(c.seq): c.raw for c in got.candidates})
    assert found[0.0] == found[1e12] == found[default]


@postgres
@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("发票", "m4"),
        ("字体", "m4"),
        ("会議", "m5"),
        ("議事録", "m5"),
        ("사과", "m6"),
        ("多语言", "m0"),
    ],
)
def test_cjk_text_is_found(conn: Any, query: str, expected: str) -> None:
    pg.insert_rows(conn, rows_of(TEXTS))
    assert pg_ranking(conn, query, "ns", 5)[0][0] == expected


@postgres
@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(word=st.text(st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"]), min_size=1))
def test_any_text_is_stored_and_finds_itself(conn: Any, word: str) -> None:
    text = f"{word} zq{abs(hash(word))}"
    [written] = pg.insert_rows(conn, rows_of([text], prefix=f"h{abs(hash(word))}-"))
    assert written.seq in [c.seq for c in pg.search(conn, text, "ns", 100)]


def _insert_same(url: str, text: str, writer: int) -> list[tuple[int, bool]]:
    row = pg.Row(
        id=f"w{writer}-{content_hash(text)[:8]}",
        namespace="ns",
        kind="note",
        content=text,
        content_hash=content_hash(text),
        created_at=NOW,
        updated_at=NOW,
    )
    with pg.connect(url) as c:
        return [(w.seq, w.inserted) for w in pg.insert_rows(c, [row])]


@postgres
@pytest.mark.slow
def test_two_processes_writing_the_same_text_end_with_one_row(conn: Any, pg_url: str) -> None:
    texts = [f"the same fact, written twice at once, number {n}" for n in range(20)]
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as workers:
        for text in texts:
            a, b = (
                workers.submit(_insert_same, pg_url, text, 1),
                workers.submit(_insert_same, pg_url, text, 2),
            )
            [(seq_a, new_a)], [(seq_b, new_b)] = a.result(), b.result()
            assert seq_a == seq_b and new_a != new_b, text
    assert conn.execute("SELECT count(*) FROM memories").fetchone() == (len(texts),)
    assert bm25.check(conn) == []


@postgres
def test_a_repeat_within_one_call_resolves_to_the_first(conn: Any) -> None:
    written = pg.insert_rows(conn, rows_of(["same text", "same text", "other text"]))
    assert [(w.id, w.inserted) for w in written] == [("m0", True), ("m0", False), ("m2", True)]
    again = pg.insert_rows(conn, rows_of(["same text"], prefix="x"))
    assert [(w.id, w.inserted) for w in again] == [("m0", False)]


def _vectors(n: int, dim: int, seed: int) -> np.ndarray:
    out = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return out / np.linalg.norm(out, axis=1, keepdims=True)


@postgres
@pytest.mark.parametrize("exact_max", [20_000, 10])
def test_vector_search_is_cosine_nearest_per_model_and_namespace(
    conn: Any, monkeypatch: pytest.MonkeyPatch, exact_max: int
) -> None:
    monkeypatch.setattr(pg_vectors, "EXACT_MAX", exact_max)  # 10: the HNSW index answers
    texts = [f"memory number {i}" for i in range(300)]
    written = pg.insert_rows(conn, rows_of(texts[:200]) + rows_of(texts[200:], "b", "b"))
    seqs = np.array([w.seq for w in written])
    vecs = _vectors(300, 16, 1)
    pg.insert_vectors(conn, "model-a", [(int(s), "h", v) for s, v in zip(seqs, vecs, strict=True)])
    pg.insert_vectors(
        conn, "model-b:8", [(int(s), "h", v[:8]) for s, v in zip(seqs, vecs, strict=True)]
    )
    query = _vectors(1, 16, 2)[0]
    hits = pg.vector(conn, query, "ns", "model-a", 10)
    cos = vecs[:200] @ query
    best = np.argsort(-cos)[:10]
    assert len(hits) == 10
    assert len({h.seq for h in hits} & set(seqs[best].tolist())) >= 9
    if exact_max > 200:
        assert [h.seq for h in hits] == seqs[best].tolist()
        assert [h.cosine for h in hits] == pytest.approx(cos[best].tolist(), abs=1e-6)
    assert {h.seq for h in pg.vector(conn, query, "b", "model-a", 200)} == set(seqs[200:].tolist())
    assert len(pg.vector(conn, query[:8], None, "model-b:8", 500)) == 300
    with pytest.raises(IndexMismatch):
        pg.vector(conn, query, "ns", "model-b:8", 5)
    with pytest.raises(IndexMismatch):
        pg.insert_vectors(conn, "model-a", [(int(seqs[0]), "h", query[:8])])
    assert pg.vector(conn, query, "ns", "no-such-model", 5) == []


@postgres
def test_vectors_are_written_and_read_in_binary_exactly(conn: Any) -> None:
    """float32 values pass unchanged both ways (COPY in pgvector's binary form, binary
    parameters and reads); a memory that is gone is skipped; NaN is refused."""
    written = pg.insert_rows(conn, rows_of(["one", "two", "three"]))
    vecs = _vectors(3, 8, 4) * np.float32(1 / 3)  # values with every bit of float32 used
    items = [(w.seq, f"h{i}", v, i % 2) for i, (w, v) in enumerate(zip(written, vecs, strict=True))]
    assert pg.insert_vectors(conn, "m", [*items, (10**9, "gone", vecs[0])]) == 3
    stored = pg_vectors.stored_windows(conn, "m", ["h0", "h2"])
    assert [w for w, _ in stored["h0"]] == [0] and stored["h0"][0][1].tobytes() == vecs[0].tobytes()
    hits = pg.vector(conn, vecs[1], "ns", "m", 1)
    assert hits[0].seq == written[1].seq and hits[0].cosine == pytest.approx(1.0, abs=1e-6)
    with pytest.raises(InvalidInput, match="NaN"):
        pg.insert_vectors(conn, "m", [(written[0].seq, "h", np.full(8, np.nan, np.float32))])
    assert len(pg_vectors.stored_windows(conn, "m", ["h0"])["h0"]) == 1  # nothing lost


@postgres
def test_vectors_go_with_their_memory_and_follow_its_namespace(conn: Any) -> None:
    written = pg.insert_rows(conn, rows_of(["one", "two"]))
    vecs = _vectors(2, 4, 3)
    pg.insert_vectors(conn, "m", [(w.seq, "h", v) for w, v in zip(written, vecs, strict=True)])
    conn.execute("UPDATE memories SET namespace = 'elsewhere' WHERE id = 'm0'")
    conn.execute("DELETE FROM memories WHERE id = 'm1'")
    assert [h.seq for h in pg.vector(conn, vecs[0], "elsewhere", "m", 5)] == [written[0].seq]
    assert pg.vector(conn, vecs[1], "ns", "m", 5) == []


def _parsed(literal: str) -> dict[str, int]:
    """A tsvector literal's lexemes and their position counts."""
    return {
        m.group(1).replace("''", "'").replace("\\\\", "\\"): m.group(2).count(",") + 1
        for m in re.finditer(r"'((?:[^']|'')*)':([0-9,]+)", literal)
    }


@postgres
def test_lexeme_counts_read_a_literal_as_postgresql_does(conn: Any) -> None:
    docs = [*TEXTS, "it's a 'quoted' \\ back\\slash \\' mix ''", "x " * 300, ""]
    for literal, _ in tokens.document_lex([(d, "") for d in docs]):
        server = dict(
            conn.execute(
                "SELECT lexeme, cardinality(positions) FROM unnest(%s::tsvector)", (literal,)
            ).fetchall()
        )
        assert tokens.lexeme_counts(literal) == server, literal


def test_sqlite_written_literals_equal_the_token_by_token_ones() -> None:
    """Rows without CJK text get their tsvector literal from SQL; it says what the
    token-by-token path (the one rows with CJK text take) says."""
    texts = [*TEXTS[:4], TEXTS[8], TEXTS[9], TEXTS[10], "word " * 300, "x" * 1500 + " y"]
    memories = [(text, '["billing","o\'brien"]') for text in texts]
    relations = [(text[:40], "works on", text[-40:]) for text in texts]  # three columns
    for table, docs in (("mnemex_doc", memories), ("mnemex_rel", relations)):
        fast = tokens.document_lex(docs)
        tokens._load(table, docs)
        slow = tokens._with_pairs(table, len(docs))
        for (literal, length), terms in zip(fast, slow, strict=True):
            assert length == terms.length
            assert _parsed(literal) == {k: min(v, 256) for k, v in terms.counts.items()}


def _insert_batches(url: str, writer: int) -> int:
    """20 batches of 10 memories sharing most of their words with other writers'."""
    written = 0
    with pg.connect(url) as c:
        for batch in range(20):
            texts = [
                f"the shared words of every writer, {TEXTS[(batch + i) % 4]} unique{writer}x{batch}x{i}"
                for i in range(10)
            ]
            written += sum(
                w.inserted for w in pg.insert_rows(c, rows_of(texts, prefix=f"{writer}-{batch}-"))
            )
    return written


@postgres
@pytest.mark.slow
def test_writers_in_four_processes_lose_nothing_and_keep_the_statistics(
    conn: Any, pg_url: str
) -> None:
    with ProcessPoolExecutor(4, mp_context=multiprocessing.get_context("spawn")) as workers:
        counts = list(workers.map(_insert_batches, [pg_url] * 4, range(4)))
    assert counts == [200] * 4
    assert conn.execute("SELECT count(*) FROM memories").fetchone() == (800,)
    assert bm25.check(conn) == []


@postgres
def test_a_pool_serves_threads_that_write_and_search(pg_url: str) -> None:
    from concurrent.futures import ThreadPoolExecutor

    with pg.connect(pg_url) as c:
        pg.migrate(c)
    shared = pg.pool(pg_url, max_size=3)
    try:

        def work(n: int) -> int:
            with shared.connection() as c:
                pg.insert_rows(c, rows_of([f"pooled memory {n} about refunds"], prefix=f"p{n}-"))
                return len(pg.search(c, "refunds", "ns", 100))

        with ThreadPoolExecutor(6) as threads:
            found = list(threads.map(work, range(30)))
    finally:
        shared.close()
    assert all(n >= 1 for n in found)
    with pg.connect(pg_url) as c:
        assert c.execute("SELECT count(*) FROM memories").fetchone() == (30,)


def test_exact_search_for_few_vectors_or_a_small_share_of_them() -> None:
    assert pg_vectors.ef_search(10, pg_vectors.EXACT_MAX, 10**6) is None  # few
    assert pg_vectors.ef_search(10, 60_000, 10**7) is None  # 0.6 %: ef would pass 1000
    assert pg_vectors.ef_search(10, 100_000, 100_000) == pg_vectors.EF_SEARCH_MIN
    assert pg_vectors.ef_search(100, 100_000, 400_000) == 800


def test_the_index_looks_further_as_its_graph_grows() -> None:
    """``ef_search`` is at least 200 up to 100,000 vectors, then grows with the graph (its
    recall at a given ``ef_search`` falls as it grows), never past pgvector's limit."""
    least = [pg_vectors.least_ef(n) for n in (60_000, 100_000, 300_000, 10**6, 2 * 10**6)]
    assert least == [200, 200, 387, 797, pg_vectors.EF_SEARCH_MAX]
    assert pg_vectors.ef_search(20, 10**6, 10**6) == 797  # one namespace of a million
    assert pg_vectors.ef_search(40, 100_000, 10**6) == 800  # a tenth of them: the share's


@postgres
def test_the_index_answers_only_the_approximate_query_and_counts_follow(conn: Any) -> None:
    written = pg.insert_rows(conn, rows_of([f"vector memory {i}" for i in range(50)]))
    vecs = _vectors(50, 8, 4)
    pg.insert_vectors(conn, "m", [(w.seq, "h", v) for w, v in zip(written, vecs, strict=True)])
    plans = {
        exact: pg_vectors.explain(conn, vecs[0], "ns", "m", exact=exact) for exact in (False, True)
    }
    assert pg_vectors.index_name("m") in plans[False]
    assert pg_vectors.index_name("m") not in plans[True]
    conn.execute(
        "UPDATE memories SET namespace = 'b' WHERE seq = ANY(%s)", ([w.seq for w in written[:10]],)
    )
    conn.execute("DELETE FROM memories WHERE seq = ANY(%s)", ([w.seq for w in written[10:15]],))
    assert pg_vectors.counts(conn, "m", "ns") == (35, 45)
    assert pg_vectors.counts(conn, "m", "b") == (10, 45)
    assert pg_vectors.counts(conn, "m", None) == (45, 45)
