"""The PostgreSQL engine beside the SQLite engine: SciFact lexical quality, insert
throughput, lexical latency, and the start of a local server.

    python benchmarks/bench_postgres.py [--data DIR] [--queries N] [--vectors N] [--no-write]

A PostgreSQL 16 + pgvector server is started from the ``pgserver`` package in
a temporary folder (timed: a fresh data folder, initdb included). The SciFact
corpus goes into both engines in one namespace: SQLite through ``add_many``
(as ``mnemex eval beir`` ingests it), PostgreSQL through ``insert_rows``, in
batches of ``BATCH``; then ``SINGLES`` further memories one call each. The
test queries are searched in both lexical arms, 100 deep:
- SQLite: ``mnemex.index.fts`` plan + retrieve, as the search pipeline runs it
  (query shaping at the default ``lexical_budget``), and exact (budget 0);
- PostgreSQL: ``mnemex.engine.postgres.retrieval`` (always exact), and the design
  it was chosen over: a GIN index on the tsvector finding the rows, each
  scored from its tsvector;
nDCG@10 and R@100 from ``mnemex.eval.metrics`` (ir-measures, as ``mnemex eval``),
the mean overlap of each query's top 10 with SQLite's, and latency. Then the
vector arm on ``--vectors`` random unit vectors: the exact scan against the
HNSW index at several ``ef_search`` (p50, recall@10 against numpy).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import mnemex
from common import data_dir, machine, percentiles, write_section
from mnemex.config import DEFAULT_LEXICAL_BUDGET
from mnemex.engine import postgres as pg
from mnemex.engine.postgres import bm25
from mnemex.engine.postgres.tokens import lexeme
from mnemex.eval.data import load_beir
from mnemex.eval.metrics import mean, per_query, ranked_run
from mnemex.index import fts
from mnemex.index.fts import BM25_B, BM25_K1
from mnemex.storage import connect as sqlite_connect
from mnemex.text import clean_content, content_hash

NAMESPACE = "beir"
BATCH = 1_000
SINGLES = 300
DEPTH = 100
MEASURES = ("nDCG@10", "R@100")
VECTOR_DIM = 64
VECTOR_QUERIES = 30


def sqlite_arm(path: Path, texts: dict[str, str], budget: int) -> tuple[dict, list[float]]:
    conn = sqlite_connect(path, busy_timeout=5.0)
    lexicon = fts.Lexicon(conn)
    ids = dict(conn.execute("SELECT seq, id FROM memories").fetchall())
    run, samples = {}, []
    for qid, text in texts.items():
        began = time.perf_counter()
        plan = fts.plan(lexicon, text, namespace=NAMESPACE)
        found = fts.retrieve(conn, plan, fts.Filters(NAMESPACE), DEPTH, budget)
        if not found.candidates and plan.dropped:
            plan = plan.with_dropped(lexicon)
            found = fts.retrieve(conn, plan, fts.Filters(NAMESPACE), DEPTH, budget)
        samples.append((time.perf_counter() - began) * 1000)
        run[qid] = ranked_run([ids[c.seq] for c in found.candidates])
    conn.close()
    return run, samples


def pg_arm(conn: object, texts: dict[str, str]) -> tuple[dict, list[float]]:
    ids = dict(conn.execute("SELECT seq, id FROM memories").fetchall())  # type: ignore[attr-defined]
    run, samples = {}, []
    for qid, text in texts.items():
        began = time.perf_counter()
        found = pg.search(conn, text, NAMESPACE, DEPTH)  # type: ignore[arg-type]
        samples.append((time.perf_counter() - began) * 1000)
        run[qid] = ranked_run([ids[c.seq] for c in found])
    return run, samples


# The rejected design, measured beside: rows found through a GIN index on the tsvector,
# each row's query terms cut out of it (setweight + ts_filter) and scored.
GIN_SCORE = f"""
    SELECT m.seq, (
        SELECT sum(q.w * (f * {BM25_K1 + 1.0!r})
                   / (f + {BM25_K1!r} * (1 - {BM25_B!r} + {BM25_B!r} * m.lex_len / %(avgdl)s)))
        FROM (SELECT lexeme, cardinality(positions)::float8 AS f
              FROM unnest(ts_filter(setweight(m.lex, 'A', %(keys)s::text[]), '{{a}}'))) AS u
        JOIN unnest(%(keys)s::text[], %(weights)s::float8[]) AS q (term, w) ON q.term = u.lexeme
    ) AS score
    FROM memories AS m
    WHERE m.lex @@ %(query)s::tsquery AND m.namespace = %(ns)s
    ORDER BY score DESC, m.seq
    LIMIT %(limit)s"""


def gin_arm(conn: Any, texts: dict[str, str]) -> tuple[dict, list[float]]:
    conn.execute("CREATE INDEX IF NOT EXISTS bench_lex_gin ON memories USING gin (lex)")
    conn.execute("ANALYZE memories")
    ids = dict(conn.execute("SELECT seq, id FROM memories").fetchall())
    run, samples = {}, []
    for qid, text in texts.items():
        began = time.perf_counter()
        planned = bm25.plan(conn, text, NAMESPACE)
        found = []
        for terms in (planned.terms, planned.terms + planned.dropped):
            stats, weights = bm25.term_weights(conn, terms, NAMESPACE)
            if weights:
                found = conn.execute(
                    GIN_SCORE,
                    {
                        "avgdl": stats.avgdl,
                        "keys": list(weights),
                        "weights": list(weights.values()),
                        "query": " | ".join(lexeme(k) for k in weights),
                        "ns": NAMESPACE,
                        "limit": DEPTH,
                    },
                ).fetchall()
            if found or not planned.dropped:
                break
        samples.append((time.perf_counter() - began) * 1000)
        run[qid] = ranked_run([ids[seq] for seq, _ in found])
    conn.execute("DROP INDEX bench_lex_gin")
    return run, samples


def overlap(a: dict, b: dict) -> float:
    """Mean share of each query's top 10 in ``a`` that ``b``'s top 10 holds too."""
    shares = []
    for qid, ranked in a.items():
        top_a = sorted(ranked, key=lambda d: -ranked[d])[:10]
        top_b = set(sorted(b.get(qid, {}), key=lambda d: -b[qid][d])[:10])
        if top_a:
            shares.append(len(set(top_a) & top_b) / len(top_a))
    return sum(shares) / len(shares) if shares else 1.0


def rows(items: list[tuple[str, str]], now: datetime) -> list[pg.Row]:
    return [
        pg.Row(did, NAMESPACE, "document", text, content_hash(text), now, now)
        for did, text in items
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data")
    parser.add_argument("--queries", type=int, default=0, help="0: every test query")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--vectors", type=int, default=25_000, help="random vectors (0: none)")
    args = parser.parse_args()
    data = load_beir(data_dir(args.data) / "beir" / "scifact", "test")
    corpus = [(did, clean_content(t, 10**7)) for did, t in data.corpus.items() if t]
    singles, corpus = corpus[-SINGLES:], corpus[:-SINGLES]
    qids = list(data.queries)[: args.queries or None]
    texts = {q: data.queries[q] for q in qids}
    root = Path(tempfile.mkdtemp(prefix="mnemex-bench-pg-"))
    server = pg.start_server(root / "data", delete=True)
    try:
        results = measure(server, root, corpus, singles, texts, data.qrels)
        results["vectors"] = vector_arm(server, args.vectors, VECTOR_DIM) if args.vectors else []
        results["vector_count"] = args.vectors
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
    results["start"] = server.started_in
    report(results, len(corpus) + len(singles), len(texts), args.no_write)


def measure(server, root, corpus, singles, texts, qrels) -> dict:  # type: ignore[no-untyped-def]
    now = datetime.now(UTC)
    out: dict = {}
    with mnemex.open(root / "m.db") as store:
        began = time.perf_counter()
        for start in range(0, len(corpus), BATCH):
            batch = corpus[start : start + BATCH]
            store.add_many(
                [{"id": d, "content": t, "kind": "document"} for d, t in batch],
                namespace=NAMESPACE,
                embed=False,
            )
        out["sqlite_bulk"] = len(corpus) / (time.perf_counter() - began)
        began = time.perf_counter()
        for did, text in singles:
            store.add_many(
                [{"id": did, "content": text, "kind": "document"}], namespace=NAMESPACE, embed=False
            )
        out["sqlite_single"] = len(singles) / (time.perf_counter() - began)
    with pg.connect(server.url) as conn:
        pg.migrate(conn)
        began = time.perf_counter()
        for start in range(0, len(corpus), BATCH):
            pg.insert_rows(conn, rows(corpus[start : start + BATCH], now))
        out["pg_bulk"] = len(corpus) / (time.perf_counter() - began)
        began = time.perf_counter()
        for item in singles:
            pg.insert_rows(conn, rows([item], now))
        out["pg_single"] = len(singles) / (time.perf_counter() - began)
        conn.execute("ANALYZE")
        runs = {
            "SQLite (default: shaped)": sqlite_arm(root / "m.db", texts, DEFAULT_LEXICAL_BUDGET),
            "SQLite (exact)": sqlite_arm(root / "m.db", texts, 0),
            "PostgreSQL (postings, the engine)": pg_arm(conn, texts),
            "PostgreSQL (GIN on the tsvector, rejected)": gin_arm(conn, texts),
        }
        size = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
    out["pg_bytes"] = size
    judged = {q: qrels[q] for q in texts}
    base = runs["SQLite (default: shaped)"][0]
    out["arms"] = {
        name: {
            **mean(per_query(judged, run, MEASURES).values(), MEASURES),
            "overlap": overlap(base, run),
            **percentiles(samples),
        }
        for name, (run, samples) in runs.items()
    }
    return out


def vector_arm(server: Any, count: int, dim: int) -> list[tuple[str, float, float]]:
    """(search, p50 ms, recall@10) over ``count`` random unit vectors: exact, then the HNSW
    index at several ``ef_search`` (random vectors: a hard case for HNSW)."""
    import numpy as np

    from mnemex.engine.postgres import vectors

    with pg.connect(server.url) as admin:
        admin.execute("CREATE DATABASE bench_vectors")
    now = datetime.now(UTC)
    rng = np.random.default_rng(0)
    points = rng.standard_normal((count, dim)).astype(np.float32)
    points /= np.linalg.norm(points, axis=1, keepdims=True)
    queries = rng.standard_normal((VECTOR_QUERIES, dim)).astype(np.float32)
    out = []
    with pg.connect(server.url_for("bench_vectors")) as conn:
        pg.migrate(conn)
        written = pg.insert_rows(conn, rows([(f"v{i}", f"vector {i}") for i in range(count)], now))
        seqs = np.array([w.seq for w in written])
        for start in range(0, count, 5_000):
            pg.insert_vectors(
                conn,
                "random",
                list(
                    zip(
                        seqs[start : start + 5_000].tolist(),
                        ["h"] * 5_000,
                        points[start : start + 5_000],
                        strict=False,
                    )
                ),
            )
        conn.execute("ANALYZE")
        truth = [set(seqs[np.argsort(-(points @ q))[:10]].tolist()) for q in queries]
        for label, ef in [
            ("exact", None),
            *((f"HNSW, ef_search {ef}", ef) for ef in (40, 100, 200, 400)),
        ]:
            query = vectors.search_sql(NAMESPACE, "random", dim, exact=ef is None)
            samples, recall = [], []
            for q, best in zip(queries, truth, strict=True):
                began = time.perf_counter()
                hits = vectors.run_search(conn, q, query, 10, ef)
                samples.append((time.perf_counter() - began) * 1000)
                recall.append(len(best & {h.seq for h in hits}) / 10)
            out.append((label, percentiles(samples)["p50"], sum(recall) / len(recall)))
    return out


def report(results: dict, memories: int, queries: int, no_write: bool) -> None:
    lines = [
        "## PostgreSQL engine beside SQLite: SciFact lexical, inserts, server start "
        "(`benchmarks/bench_postgres.py`)",
        "",
        f"Machine: {machine()}",
        "",
        f"SciFact test: {memories:,} documents in one namespace, {queries} queries, "
        f"{DEPTH} deep. PostgreSQL 16 + pgvector 0.6 from `pgserver`, started in "
        f"{results['start']:.2f} s (fresh data folder, initdb included).",
        "",
        "| lexical arm | nDCG@10 | R@100 | top-10 overlap with SQLite default | p50 | p95 |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, arm in results["arms"].items():
        lines.append(
            f"| {name} | {arm['nDCG@10']:.4f} | {arm['R@100']:.4f} | {arm['overlap']:.3f} | "
            f"{arm['p50']:.2f} ms | {arm['p95']:.2f} ms |"
        )
    lines += [
        "",
        "| inserts | SQLite `add_many` | PostgreSQL `insert_rows` |",
        "| --- | ---: | ---: |",
        f"| batches of {BATCH:,} | {results['sqlite_bulk']:,.0f} /s | {results['pg_bulk']:,.0f} /s |",
        f"| one memory per call ({SINGLES}) | {results['sqlite_single']:,.0f} /s | "
        f"{results['pg_single']:,.0f} /s |",
        "",
        f"PostgreSQL database size after the load: {results['pg_bytes'] / 2**20:.1f} MiB. "
        "Both PostgreSQL figures include computing the index terms with FTS5 on the client.",
    ]
    if results["vectors"]:
        lines += [
            "",
            f"Vector arm: {results['vector_count']:,} random unit vectors of {VECTOR_DIM} "
            f"dimensions in one namespace, {VECTOR_QUERIES} random queries, top 10.",
            "",
            "| search | p50 | recall@10 |",
            "| --- | ---: | ---: |",
            *(
                f"| {label} | {p50:.2f} ms | {recall:.3f} |"
                for label, p50, recall in results["vectors"]
            ),
        ]
    text = "\n".join(lines)
    print(text)
    if not no_write:
        write_section("bench_postgres", text)
        print("wrote benchmarks/RESULTS.md")


if __name__ == "__main__":
    main()
