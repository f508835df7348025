"""Raw FTS5 expressions (``search --raw``) on PostgreSQL beside SQLite: latency and membership.

    python benchmarks/bench_raw.py [--data DIR] [--runs N] [--no-write]

The SciFact corpus (5,183 documents) goes into a SQLite file and into a
PostgreSQL 16 database (a ``pgserver`` started in a temporary folder), each
document under its SciFact id, through ``add_many``. Each expression of
``EXPRESSIONS`` is searched on both stores (``search(expr, 10, raw=True)``, no
embedder: the lexical arm, snippets and ranking included), ``--runs`` times
after two warm-up runs, alternating the engines; the table gives the median.
Membership is checked apart: every memory FTS5 matches in SQLite against every
memory :mod:`mnemex.engine.postgres.raw` finds, no limit.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import mnemex
from common import data_dir, machine, write_section
from mnemex.engine import postgres as pg
from mnemex.engine.postgres import raw
from mnemex.eval.data import load_beir
from mnemex.text import clean_content

EXPRESSIONS = (
    ("words", "cancer AND therapy"),
    ("OR, NOT", "insulin OR glucose NOT diabetes"),
    ("prefix", "immun* AND vaccin*"),
    ("phrase", '"gene expression"'),
    ("NEAR", "NEAR(vitamin deficiency, 5)"),
    ("parentheses, phrase", '(tumor OR tumour) AND "cell line"'),
    ("column filter", "content: mortality NOT risk"),
    ("phrase of common words", '"of the"'),
)


def timed(store: mnemex.Store, expression: str) -> float:
    began = time.perf_counter()
    store.search(expression, 10, raw=True)
    return (time.perf_counter() - began) * 1000


def members(path: Path, url: str, expression: str) -> tuple[set[str], set[str]]:
    """The ids of every memory the expression matches: SQLite's FTS5, PostgreSQL's raw."""
    sql = (
        "SELECT m.id FROM memories_fts JOIN memories AS m ON m.seq = memories_fts.rowid "
        "WHERE memories_fts MATCH ?"
    )
    with contextlib.closing(sqlite3.connect(path)) as lite:
        mine = {str(i) for (i,) in lite.execute(sql, (expression,))}
    with pg.connect(url) as conn:
        found = raw.search(conn, raw.translate(expression), "default", 10**9)
        seqs = [c.seq for c in found]
        ids = conn.execute("SELECT id FROM memories WHERE seq = ANY(%s)", (seqs,)).fetchall()
    return mine, {str(i) for (i,) in ids}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    data = load_beir(data_dir(args.data) / "beir" / "scifact", "test")
    items = [{"content": clean_content(t, 10**7), "id": d} for d, t in data.corpus.items() if t]
    root = Path(tempfile.mkdtemp(prefix="mnemex-bench-raw-"))
    server = pg.start_server(root / "data", delete=True)
    rows = []
    try:
        url = str(server.url)
        with mnemex.open(root / "raw.db") as lite, mnemex.open(url) as post:
            for store in (lite, post):
                for start in range(0, len(items), 1000):
                    store.add_many(items[start : start + 1000], embed=False)
            for label, expression in EXPRESSIONS:
                samples: dict[str, list[float]] = {"sqlite": [], "pg": []}
                for run in range(args.runs + 2):
                    for name, store in (("sqlite", lite), ("pg", post)):
                        took = timed(store, expression)
                        if run >= 2:
                            samples[name].append(took)
                mine, theirs = members(root / "raw.db", url, expression)
                rows.append(
                    (
                        label,
                        expression,
                        statistics.median(samples["sqlite"]),
                        statistics.median(samples["pg"]),
                        len(mine),
                        mine == theirs,
                    )
                )
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
    report(rows, len(items), args)


def report(rows: list[tuple[str, str, float, float, int, bool]], docs: int, args) -> None:  # type: ignore[no-untyped-def]
    lines = [
        "## Raw FTS5 expressions on PostgreSQL beside SQLite (`benchmarks/bench_raw.py`)",
        "",
        f"Machine: {machine()}",
        "",
        f"SciFact, {docs:,} documents in one namespace of each engine; `search(expr, 10, "
        f"raw=True)` without an embedder, median of {args.runs} runs after 2 warm-ups, "
        "the engines alternating. Matches: the memories the expression matches (FTS5 on "
        "SQLite); same: PostgreSQL finds exactly those. Command: "
        "`python benchmarks/bench_raw.py --data /work/shared/data`.",
        "",
        "| expression | | SQLite p50 | PostgreSQL p50 | matches | same |",
        "| --- | --- | ---: | ---: | ---: | :---: |",
    ]
    for label, expression, lite, post, matches, same in rows:
        shown = expression.replace("|", "\\|")
        lines.append(
            f"| {label} | `{shown}` | {lite:.1f} ms | {post:.1f} ms | {matches:,} | "
            f"{'yes' if same else 'NO'} |"
        )
    lines += [
        "",
        "Where PostgreSQL's time goes (cProfile, EXPLAIN ANALYZE): the whole store's term "
        "statistics, read for the plan and again for the scores (`term_stats` without a "
        "namespace is scanned: about 5 ms each at this size); the rows holding the rarest "
        "required term tested with the tsquery (each row's `lex` read: 5,159 rows for "
        '`"of the"`, 78 ms); BM25 from the postings; for a phrase, NEAR or a column filter, '
        "FTS5's check of the best rows on the client (50, then twice as many); for a "
        "prefix, `term_stats` scanned for the terms it begins. Load average about 4 on the "
        "2 cores while it ran (other jobs).",
    ]
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        write_section("bench_raw", text)
        print("wrote benchmarks/RESULTS.md")


if __name__ == "__main__":
    main()
