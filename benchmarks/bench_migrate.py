"""Moving a store between engines: `mnemex migrate` throughput and the round trip.

Builds a SQLite store from the SciFact corpus (each abstract a memory, with the
local model's vector of it; ``--rows`` beyond the corpus repeats it in further
namespaces, ids distinct), then migrates SQLite → SQLite, SQLite → PostgreSQL
and PostgreSQL → SQLite (a local PostgreSQL 16 + pgvector from ``pgserver``),
each ending with its comparison of the two stores. Prints rows/s for each (the
check timed apart) and whether the round trip SQLite → PostgreSQL → SQLite is
identical, and whether the same searches give the same hits on both ends.

    python benchmarks/bench_migrate.py [--data DIR] [--rows N] [--no-write]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import common
import mnemex
from mnemex import migration
from mnemex.embed.local import LocalEmbedder
from mnemex.text import clean_content

QUERIES = 50


def corpus(folder: Path) -> list[tuple[str, str]]:
    """SciFact's abstracts, title and text, by id (none empty)."""
    docs = [
        (d["_id"], f"{d.get('title', '')}\n\n{d['text']}".strip())
        for d in common.scifact_docs(folder)
    ]
    return [(ident, text) for ident, text in docs if text]


def build(path: Path, docs: list[tuple[str, str]], rows: int, embedder: common.Precomputed) -> None:
    with mnemex.open(path, embedder=embedder, embed_windows=False) as store:
        copy = 0
        while copy * len(docs) < rows:
            take = docs[: rows - copy * len(docs)]
            for start in range(0, len(take), 1000):
                store.add_many(
                    [
                        {"id": f"{did}-{copy}", "content": text, "kind": "document",
                         "tags": ["scifact"], "metadata": {"doc": did}}
                        for did, text in take[start : start + 1000]
                    ],
                    namespace=f"scifact-{copy}",
                )  # fmt: skip
            copy += 1
        store.relate("SciFact", "holds", "abstracts", namespace="scifact-0")


def timed(source: Any, target: Any) -> tuple[float, float, bool]:
    """(rows/s of the copy, seconds of the check, identical)."""
    report = migration.migrate(source, target, check=False)
    assert report.conflict_count == 0, report.conflicts
    began = time.perf_counter()
    check = migration.compare(source, target)
    return report.memories / report.seconds, time.perf_counter() - began, check.identical


MODES = ("lexical", "vector", "hybrid")


def same_hits(a: Any, b: Any, queries: list[str], embedder: common.Precomputed) -> dict[str, float]:
    """Per mode, the share of searches (each query in the first and the last namespace)
    whose top 10 (ids, in order) are the same on both stores."""
    same = dict.fromkeys(MODES, 0)
    with mnemex.open(a, embedder=embedder) as x, mnemex.open(b, embedder=embedder) as y:
        spaces = sorted(x.stats(namespace=mnemex.ALL).namespaces)
        for q in queries:
            for mode in MODES:
                for ns in {spaces[0], spaces[-1]}:
                    hx = [h.id for h in x.search(q, limit=10, mode=mode, namespace=ns).hits]
                    hy = [h.id for h in y.search(q, limit=10, mode=mode, namespace=ns).hits]
                    same[mode] += hx == hy
        searches = len(queries) * len({spaces[0], spaces[-1]})
    return {mode: n / searches for mode, n in same.items()}


def main() -> None:
    arguments = common.parser(__doc__)
    arguments.add_argument("--rows", type=int, default=0, help="0: the corpus once")
    args = arguments.parse_args()
    folder = common.data_dir(args.data)
    docs = corpus(folder)
    rows = args.rows or len(docs)
    docs = docs[:rows]
    vectors, _ = common.real_embeddings([t for _, t in docs], "scifact-corpus")
    # The local model's vectors of the texts as the store cleans them; the queries by the model.
    table = {clean_content(t, 10**7): vectors[i] for i, (_, t) in enumerate(docs)}
    embedder = common.Precomputed(LocalEmbedder().model_id, table)
    queries = list(common.scifact_claims(folder).values())
    with (
        tempfile.TemporaryDirectory(prefix="mnemex-bench-migrate-") as tmp,
        common.pg_server(Path(tmp) / "pg") as server,
    ):
        root = Path(tmp)
        began = time.perf_counter()
        build(root / "a.db", docs, rows, embedder)
        print(f"built {rows:,} rows in {time.perf_counter() - began:.1f} s", file=sys.stderr)
        url = server.url
        results = {
            "SQLite → SQLite": timed(root / "a.db", root / "b.db"),
            "SQLite → PostgreSQL": timed(root / "a.db", url),
            "PostgreSQL → SQLite": timed(url, root / "c.db"),
        }
        round_trip = migration.compare(root / "a.db", root / "c.db").identical
        hits = same_hits(root / "a.db", url, queries[:QUERIES], embedder)
    report(results, rows, round_trip, hits, args.no_write)


def report(
    results: dict[str, tuple[float, float, bool]],
    rows: int,
    round_trip: bool,
    hits: dict[str, float],
    no_write: bool,
) -> None:
    lines = [
        *common.heading(
            "## Moving a store between engines: `mnemex migrate` (`benchmarks/bench_migrate.py`)"
        ),
        f"SciFact corpus abstracts (title and text) as {rows:,} memories (repeated in further namespaces "
        "past 5,183, ids distinct), each with a 384-dimensional vector of the local model, "
        "and a relation; PostgreSQL 16 + pgvector 0.6 from `pgserver` on the same machine. "
        "Rows/s is the copy alone (batches of 1,000, each one transaction of the target, "
        "the PostgreSQL target's HNSW index built at the end); the check (both stores "
        "streamed in id order, every field, vector and row compared) is timed apart.",
        "",
        "| migrate | rows/s | check | identical |",
        "| --- | ---: | ---: | :---: |",
        *(
            f"| {name} | {rate:,.0f} | {check:.1f} s | {'yes' if same else 'NO'} |"
            for name, (rate, check, same) in results.items()
        ),
        "",
        f"Round trip SQLite → PostgreSQL → SQLite identical to the start: "
        f"{'yes' if round_trip else 'NO'}. The same top 10 on the SQLite source and the "
        f"PostgreSQL copy ({QUERIES} SciFact queries, in the first and the last namespace): "
        + ", ".join(f"{mode} {share:.0%}" for mode, share in hits.items())
        + " of the searches.",
    ]
    common.publish("bench_migrate", "\n".join(lines), no_write)


if __name__ == "__main__":
    main()
