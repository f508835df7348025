"""Ingest throughput and lexical search latency at 10k and 100k memories.

    python benchmarks/bench_lexical.py [--data DIR] [--sizes 10000,100000]

Baselines in the same run:
- ingest: the same texts inserted into a bare external-content FTS5 table
  with one trigger (no validation, ids, tags or metadata);
- search: FTS5 alone: the query's words OR-joined (stop words removed),
  ``ORDER BY rank LIMIT 10`` (no snippets).
mnemex search is measured lexical-only (no embedder), with snippets, as an agent would call it (limit 10),
with query shaping (the default) and exact (``lexical_budget=0``); the
agreement of the two top-10 lists is reported. Then ``RELATIONS`` relations
are added and search is timed with and without the relations beside the hits.
"""

from __future__ import annotations

import argparse
import re
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import mnemex
from common import data_dir, machine, memories, percentiles, queries, write_section
from mnemex.index.stopwords import STOPWORDS

BATCH = 10_000
LIMIT = 10
RELATIONS = 10_000
PREDICATES = ("works_on", "owns", "uses", "depends_on", "mentions", "fixed", "prefers", "runs")


def baseline_ingest(texts: list[str], path: Path) -> float:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("CREATE TABLE m (seq INTEGER PRIMARY KEY, content TEXT)")
    conn.execute(
        "CREATE VIRTUAL TABLE f USING fts5(content, content='m', content_rowid='seq', "
        "tokenize='porter unicode61 remove_diacritics 2')"
    )
    conn.execute(
        "CREATE TRIGGER m_ai AFTER INSERT ON m BEGIN "
        "INSERT INTO f (rowid, content) VALUES (new.seq, new.content); END"
    )
    started = time.perf_counter()
    for start in range(0, len(texts), BATCH):
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO m (content) VALUES (?)", [(t,) for t in texts[start : start + BATCH]]
        )
        conn.execute("COMMIT")
    seconds = time.perf_counter() - started
    conn.close()
    return seconds


def fts5_alone(conn: sqlite3.Connection, query: str) -> list[int]:
    words = [w for w in re.findall(r"\w+", query.lower()) if w not in STOPWORDS]
    if not words:
        return []
    match = " OR ".join(f'"{w}"' for w in words)
    return [
        r[0]
        for r in conn.execute(
            "SELECT rowid FROM memories_fts WHERE memories_fts MATCH ? ORDER BY rank LIMIT ?",
            (match, LIMIT),
        )
    ]


def timed(fn, items):  # type: ignore[no-untyped-def]
    samples, results = [], []
    for item in items:
        started = time.perf_counter()
        results.append(fn(item))
        samples.append((time.perf_counter() - started) * 1000)
    return samples, results


def run(size: int, texts: list[str], qs: list[str], tmp: Path) -> dict[str, object]:
    texts = texts[:size]
    base_seconds = baseline_ingest(texts, tmp / f"baseline-{size}.db")
    store = mnemex.open(tmp / f"mnemex-{size}.db", embedder=None)
    started = time.perf_counter()
    for start in range(0, size, BATCH):
        store.add_many(
            [
                {"content": t, "kind": "observation", "tags": ["bench"]}
                for t in texts[start : start + BATCH]
            ]
        )
    ingest_seconds = time.perf_counter() - started
    store.close()

    shaped = mnemex.open(tmp / f"mnemex-{size}.db", embedder=None)
    exact = mnemex.open(tmp / f"mnemex-{size}.db", embedder=None, lexical_budget=0)
    warm = qs[:50]
    for q in warm:
        shaped.search(q, LIMIT)
        exact.search(q, LIMIT)
        fts5_alone(shaped.session.conn, q)
    fts_ms, _ = timed(lambda q: fts5_alone(shaped.session.conn, q), qs)
    shaped_ms, shaped_res = timed(lambda q: [h.id for h in shaped.search(q, LIMIT).hits], qs)
    exact_ms, exact_res = timed(lambda q: [h.id for h in exact.search(q, LIMIT).hits], qs)
    agree = [
        len(set(a) & set(b)) / len(b) if b else 1.0
        for a, b in zip(shaped_res, exact_res, strict=True)
    ]
    exact.close()
    add_relations(shaped, texts)
    for q in warm:
        shaped.search(q, LIMIT)
    related_ms, _ = timed(lambda q: shaped.search(q, LIMIT), qs)
    unrelated_ms, _ = timed(lambda q: shaped.search(q, LIMIT, relations=0), qs)
    shaped.close()
    return {
        "size": size,
        "ingest_per_s": size / ingest_seconds,
        "baseline_ingest_per_s": size / base_seconds,
        "fts": percentiles(fts_ms),
        "shaped": percentiles(shaped_ms),
        "exact": percentiles(exact_ms),
        "agreement": sum(agree) / len(agree),
        "identical": sum(a == 1.0 for a in agree) / len(agree),
        "queries": len(qs),
        "with_relations": percentiles(related_ms),
        "relations_off": percentiles(unrelated_ms),
    }


def add_relations(store: mnemex.Store, texts: list[str]) -> None:
    """``RELATIONS`` relations between words of the memories, in one transaction."""
    from mnemex import relations
    from mnemex.storage import write_transaction

    words = [w for t in texts[:RELATIONS] for w in re.findall(r"[A-Za-z]{5,}", t)][: 4 * RELATIONS]
    rows = [
        relations.relation_row(
            store.namespace,
            words[(2 * i) % len(words)],
            PREDICATES[i % len(PREDICATES)],
            words[(2 * i + 1) % len(words)] + f" {i}",
        )
        for i in range(RELATIONS)
    ]
    with write_transaction(store.session.conn) as conn:
        relations.upsert(conn, rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="folder with beir/scifact and locomo (see common.py)")
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--no-write", action="store_true", help="do not update RESULTS.md")
    args = parser.parse_args()
    folder = data_dir(args.data)
    sizes = [int(s) for s in args.sizes.split(",")]
    texts = memories(folder, max(sizes))
    qs = queries(folder)[: args.queries]
    rows = []
    with tempfile.TemporaryDirectory(prefix="mnemex-bench-") as tmp:
        for size in sizes:
            row = run(size, texts, qs, Path(tmp))
            rows.append(row)
            print(
                f"{size:>7,} memories: add_many {row['ingest_per_s']:,.0f}/s "
                f"(bare FTS5 trigger insert {row['baseline_ingest_per_s']:,.0f}/s); "
                f"search p50/p95 ms: mnemex {row['shaped']['p50']:.2f}/{row['shaped']['p95']:.2f}, "
                f"exact {row['exact']['p50']:.2f}/{row['exact']['p95']:.2f}, "
                f"FTS5 alone {row['fts']['p50']:.2f}/{row['fts']['p95']:.2f}; "
                f"top-10 agreement with exact {row['agreement']:.3f}",
                flush=True,
            )
    lines = [
        "## Lexical store: ingest and search (`benchmarks/bench_lexical.py`)",
        "",
        f"Machine: {machine()}",
        "",
        f"Memories: distinct SciFact sentences and sentence pairs plus LoCoMo turns "
        f"(avg {sum(map(len, texts)) / len(texts):.0f} chars). Queries: {rows[0]['queries']} "
        "SciFact claims and LoCoMo questions of 5-10 words. Search: limit 10, with snippets.",
        "",
        "| memories | add_many /s | bare FTS5 insert /s | mnemex p50 | mnemex p95 | exact p50 | exact p95 | FTS5 alone p50 | FTS5 alone p95 | p50 vs FTS5 alone | top-10 = exact |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['size']:,} | {r['ingest_per_s']:,.0f} | {r['baseline_ingest_per_s']:,.0f} | "
            f"{r['shaped']['p50']:.2f} ms | {r['shaped']['p95']:.2f} ms | "
            f"{r['exact']['p50']:.2f} ms | {r['exact']['p95']:.2f} ms | "
            f"{r['fts']['p50']:.2f} ms | {r['fts']['p95']:.2f} ms | "
            f"{r['shaped']['p50'] / r['fts']['p50']:.2f}× | "
            f"{r['agreement']:.3f} ({r['identical']:.0%} identical) |"
        )
    lines += [
        "",
        "*mnemex* is the default (query shaping: when the terms' postings exceed "
        "`lexical_budget` = 2,000 rows, candidates are the rows holding the rarest terms, each "
        "scored exactly with all terms); *exact* scores every matching row (`lexical_budget=0`). "
        "*top-10 = exact* is the mean overlap of the two top-10 lists.",
        "",
        f"With {RELATIONS:,} relations in the store, each search also ranks them "
        "(up to 5 returned beside the hits), measured in the same run:",
        "",
        "| memories | search p50 / p95, relations on | relations off (`relations=0`) | cost of relations (p50) |",
        "| ---: | ---: | ---: | ---: |",
        *(
            f"| {r['size']:,} | {r['with_relations']['p50']:.2f} / {r['with_relations']['p95']:.2f} ms | "
            f"{r['relations_off']['p50']:.2f} / {r['relations_off']['p95']:.2f} ms | "
            f"{r['with_relations']['p50'] - r['relations_off']['p50']:+.2f} ms |"
            for r in rows
        ),
    ]
    if not args.no_write:
        write_section("bench_lexical", "\n".join(lines))
        print("wrote benchmarks/RESULTS.md")


if __name__ == "__main__":
    main()
