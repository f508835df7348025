"""BM25 of chosen rows computed beside FTS5 equals FTS5's own ``bm25()``."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mnemex
from mnemex.engine.sqlite.fts import _BM25, _varints, bm25_of, retrieve
from mnemex.index.retrieval import Filters, plan, plan_raw
from mnemex.store import Store

WORDS = [
    "billing",
    "invoices",
    "invoice",
    "redis",
    "deploy",
    "deploys",
    "fly",
    "the",
    "上海",
    "发票",
    "a",
]


def fts5_scores(store: Store, match: str) -> dict[int, float]:
    return dict(
        store.session.conn.execute(
            f"SELECT rowid, -{_BM25} FROM memories_fts WHERE memories_fts MATCH ?", (match,)
        ).fetchall()
    )


def check(store: Store, query: str) -> None:
    lexical = plan(store.session.lexicon, query)
    if lexical.empty:
        return
    expected = fts5_scores(store, lexical.match)
    seqs = [r[0] for r in store.session.conn.execute("SELECT seq FROM memories")]
    got = bm25_of(store.session.conn, store.session.lexicon, lexical, seqs)
    assert got.keys() == {s for s, v in expected.items() if v > 0}
    for seq, value in got.items():
        assert value == pytest.approx(expected[seq], rel=1e-9, abs=1e-12)


memory = st.builds(
    lambda words, tags: {"content": " ".join(words), "tags": tags},
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=12),
    st.lists(st.sampled_from(["billing", "redis", "ops"]), max_size=2, unique=True),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(memory, min_size=1, max_size=25),
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=5),
)
def test_equals_fts5_bm25(memories: list[dict[str, object]], query: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp, mnemex.open(Path(tmp) / "m.db") as store:
        store.add_many(memories)
        check(store, " ".join(query))
        check(store, "".join(query))  # CJK runs become phrases of adjacent characters


CONTENT = [
    w for w in WORDS if w.isascii() and w not in ("the", "a")
]  # CJK is segmented before FTS5


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(memory, min_size=1, max_size=25),
    st.lists(st.sampled_from(CONTENT), min_size=1, max_size=6),
)
def test_a_repeated_word_counts_as_fts5_counts_it(
    memories: list[dict[str, object]], query: list[str]
) -> None:
    """The plan scores a query as FTS5 scores the OR of every word as typed, repeats included."""
    with tempfile.TemporaryDirectory() as tmp, mnemex.open(Path(tmp) / "m.db") as store:
        store.add_many(memories)
        typed = fts5_scores(store, " OR ".join(f'"{w}"' for w in query))
        lexical = plan(store.session.lexicon, " ".join(query))
        seqs = [r[0] for r in store.session.conn.execute("SELECT seq FROM memories")]
        got = bm25_of(store.session.conn, store.session.lexicon, lexical, seqs)
        assert got.keys() == {s for s, v in typed.items() if v > 0}
        for seq, value in got.items():
            assert value == pytest.approx(typed[seq], rel=1e-9, abs=1e-12)
        found = retrieve(store.session.conn, lexical, Filters(None), 100, 0).candidates
        assert {c.seq: c.raw for c in found} == pytest.approx(typed)


def test_real_text_and_a_subset_of_rows(store: Store) -> None:
    store.add_many(
        [
            "Invoice PDFs render slowly because of embedded fonts",
            {"content": "Redis evicts sessions under memory pressure", "tags": ["redis"]},
            "上海客户需要增值税专用发票，开票信息每月核对一次",
            "Deploys need FLY_API_TOKEN; the invoice worker deploys separately",
        ]
    )
    for query in ("slow invoice deploys", "redis sessions", "增值税发票", "fly token invoice"):
        check(store, query)
    lexical = plan(store.session.lexicon, "invoice deploys")
    assert set(bm25_of(store.session.conn, store.session.lexicon, lexical, [1, 2])) == {1}
    assert bm25_of(store.session.conn, store.session.lexicon, lexical, []) == {}
    raw = plan_raw(store.session.lexicon, "invoice NEAR(deploys worker)")
    assert set(bm25_of(store.session.conn, store.session.lexicon, raw, [1, 2, 3, 4])) == {4}


def test_varints() -> None:
    assert _varints(bytes([0x86, 0x8D, 0x20, 0x01, 0x7F])) == [100_000, 1, 127]
