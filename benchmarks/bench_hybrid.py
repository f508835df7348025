"""Search at 10k / 100k / 1M memories per mode, lexical ingest, the local model's costs, memory.

    python benchmarks/bench_hybrid.py [--data DIR] [--sizes 10000,100000,1000000]

What it measures (medians over the queries of one run; baselines in the same run):
- query embedding latency of the local model (int8 ONNX all-MiniLM-L6-v2);
- search latency per mode *excluding the query embedding* (the queries' vectors
  are computed first and handed to the store by an embedder that looks them
  up): lexical, vector (exact), hybrid (the HNSW index, its recall and the process's
  RSS are ``bench_scale.py``'s, at 100k and 1M on both engines);
- a cold ``mnemex search`` in a new process (hybrid, with the real model) vs
  a cold lexical one;
- ingest with the local model vs the model's raw throughput on the same texts;
- memory: the vector matrix;
- up to 100k (section bench_lexical): add_many's rate beside a bare FTS5 table with one
  trigger (no validation, ids, tags or metadata); lexical search beside exact scoring
  (``lexical_budget=0``, with the agreement of the two top-10 lists) and beside FTS5
  alone (the query's words OR-joined, stop words removed, ``ORDER BY rank LIMIT 10``, no
  snippets).

Vectors: at 10k and 100k, the real embeddings of the texts (computed once
and cached under benchmarks/.cache). At 1M, each of the 100k real vectors
appears ten times with Gaussian noise (sigma 0.02 per dimension, then
renormalized): realistic for latency and memory, not for quality.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


import common
import mnemex
from mnemex.embed import embed_checked
from mnemex.embed.local import LocalEmbedder
from mnemex.index.stopwords import STOPWORDS

LIMIT = 10


def search_ms(store: mnemex.Store, qs: list[str], limit: int | None = LIMIT, **call):  # type: ignore[no-untyped-def]
    """p50, p95 and mean milliseconds of ``store.search`` over the queries."""
    return common.percentiles(common.timed(lambda q: store.search(q, limit, **call), qs))


def top(store: mnemex.Store, q: str, **call) -> list[str]:  # type: ignore[no-untyped-def]
    return [h.id for h in store.search(q, LIMIT, **call).hits]


def run_size(size: int, texts, vectors, qs, table, model_id, tmp: Path):  # type: ignore[no-untyped-def]
    path = tmp / f"hybrid-{size}.db"
    took = common.build_sqlite(path, texts[:size], vectors[:size], model_id)
    row: dict[str, object] = {"size": size, "build_s": sum(took.values()), "rows_s": took["rows_s"]}
    with mnemex.open(path, embedder=common.Precomputed(model_id, table), ann="off") as store:
        started = time.perf_counter()
        index = store.session.vectors(384)
        index.refresh()
        row["load_s"] = time.perf_counter() - started
        row["matrix_mb"] = index.memory_bytes() / 1e6
        for q in qs[:30]:
            store.search(q, LIMIT, mode="hybrid")
        for key, mode in (("lexical", "lexical"), ("vector", "vector"), ("hybrid", "hybrid")):
            row[key] = search_ms(store, qs, mode=mode)
        row["hybrid6"] = search_ms(store, qs, None, mode="hybrid")
    return row, path


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
    for start in range(0, len(texts), 10_000):
        rows = [(t,) for t in texts[start : start + 10_000]]
        conn.execute("BEGIN")
        conn.executemany("INSERT INTO m (content) VALUES (?)", rows)
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


def lexical_row(size: int, texts: list[str], qs: list[str], path: Path, rows_s: float, tmp: Path):  # type: ignore[no-untyped-def]
    """The lexical measures of a store of ``size`` (section bench_lexical)."""
    row: dict[str, object] = {"size": size, "ingest_per_s": size / rows_s}
    row["baseline_ingest_per_s"] = size / baseline_ingest(texts[:size], tmp / f"bare-{size}.db")
    with (
        mnemex.open(path, embedder=None) as shaped,
        mnemex.open(path, embedder=None, lexical_budget=0) as exact,
    ):
        for q in qs[:30]:
            shaped.search(q, LIMIT)
            exact.search(q, LIMIT)
            fts5_alone(shaped.session.conn, q)
        row["fts"] = common.percentiles(
            common.timed(lambda q: fts5_alone(shaped.session.conn, q), qs)
        )
        row["shaped"], row["exact"] = search_ms(shaped, qs), search_ms(exact, qs)
        agree = []
        for q in qs:
            a, b = top(shaped, q), top(exact, q)
            agree.append(len(set(a) & set(b)) / len(b) if b else 1.0)
        row["agreement"] = sum(agree) / len(agree)
        row["identical"] = sum(a == 1.0 for a in agree) / len(agree)
    return row


_STORES_PROBE = """
import json, sys, mnemex
def rss(): return next(int(x.split()[1]) for x in open("/proc/self/status") if x[:6] == "VmRSS:") / 1024
def search(s): assert s.search(sys.argv[1], 10, mode="hybrid").mode_used == "hybrid"
paths, stores = sys.argv[2:], [mnemex.open(sys.argv[2])]
search(stores[0]); out = {"one": rss()}
stores += [mnemex.open(p) for p in paths[1:]]; [search(s) for s in stores]; out["ten"] = rss()
[s.close() for s in stores]
for i in range(100):
    with mnemex.open(paths[i % len(paths)]) as s: search(s)
print(json.dumps(out | {"cycled": rss()}))
"""


def many_stores(texts, vectors, query: str, tmp: Path, srcs: dict[str, Path]) -> str:  # type: ignore[no-untyped-def]
    """RSS of a process (MB) with one store of 1,000 memories open and searched (hybrid, the
    local model the store records), ten, then after opening, searching and closing one 100
    times; three runs of each code in ``srcs``, alternating, medians (section bench_stores)."""
    paths, model_id = [tmp / f"small-{i}.db" for i in range(10)], LocalEmbedder().model_id
    for i, path in enumerate(paths):
        common.build_sqlite(
            path, texts[i * 1000 : i * 1000 + 1000], vectors[i * 1000 :], model_id, True
        )
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in srcs}
    for _ in range(3):
        for name, src in srcs.items():
            env = common.child_env(src, MNEMEX_HOME=str(tmp / "home"))
            probe = [sys.executable, "-c", _STORES_PROBE, query, *map(str, paths)]
            done = subprocess.run(probe, capture_output=True, text=True, env=env, check=True)
            runs[name].append(json.loads(done.stdout))
    lines = [
        *common.heading(
            "## Many stores in one process: RSS (`benchmarks/bench_hybrid.py --stores`)",
            f"; load average {os.getloadavg()[0]:.1f}",
        ),
        "A new process opens a store of 1,000 memories (real local-model vectors; the store "
        "records its embedder, none is configured) and runs a hybrid search; then nine more, "
        "each searched; closes the ten; then opens, searches and closes one of them 100 "
        "times. RSS (MB), median of 3 runs, alternating when there are two codes:",
        "",
        "| code | one store | ten open | after 100 opened, searched, closed | ten / one | 100 / one |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, found in runs.items():
        one, ten, cycled = (
            statistics.median(r[k] for r in found) for k in ("one", "ten", "cycled")
        )
        lines.append(
            f"| {name} | {one:.0f} | {ten:.0f} | {cycled:.0f} | {ten / one:.2f}× | {cycled / one:.2f}× |"
        )
    return "\n".join(lines)


def cold(path: Path, query: str, mode: str, runs: int = 5) -> float:
    env = common.child_env(MNEMEX_EMBEDDER="local", MNEMEX_ANN="off")
    command = [sys.executable, "-m", "mnemex", "--db", str(path), "-n", "default", "search", query]
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        done = common.run_checked(
            [*command, "--mode", mode, "--json"], "cold search", text=True, env=env
        )
        samples.append(time.perf_counter() - started)
        assert json.loads(done.stdout)["mode_used"] == mode
    return statistics.median(samples)


def ingest_ratio(texts: list[str], tmp: Path) -> dict[str, float]:
    """add_many with the local model vs the model alone, same texts, same batches."""
    model = LocalEmbedder()
    model.load()
    embed_checked(model, texts[:64])
    started = time.perf_counter()
    for start in range(0, len(texts), 256):
        embed_checked(model, texts[start : start + 256])
    raw = len(texts) / (time.perf_counter() - started)
    with mnemex.open(tmp / "ingest.db", embedder=model) as store:
        started = time.perf_counter()
        for start in range(0, len(texts), 1000):
            store.add_many(texts[start : start + 1000])
        ours = len(texts) / (time.perf_counter() - started)
        assert store.stats().pending_vectors == 0
    return {"raw": raw, "add_many": ours, "ratio": ours / raw}


def lexical_section(lexical: list[dict], texts: list[str], qs: list[str]) -> str:  # type: ignore[type-arg]
    lexical_lines = [
        *common.heading("## Lexical store: ingest and search (`benchmarks/bench_hybrid.py`)"),
        f"Memories: distinct SciFact sentences and sentence pairs plus LoCoMo turns "
        f"(avg {sum(map(len, texts)) / len(texts):.0f} chars). Queries: {len(qs)} "
        "SciFact claims and LoCoMo questions of 5-10 words. Search: limit 10, with snippets.",
        "",
        "| memories | add_many /s (no vectors) | bare FTS5 insert /s | mnemex p50 | mnemex p95 | exact p50 | exact p95 | FTS5 alone p50 | FTS5 alone p95 | p50 vs FTS5 alone | top-10 = exact |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in lexical:
        lexical_lines.append(
            f"| {r['size']:,} | {r['ingest_per_s']:,.0f} | {r['baseline_ingest_per_s']:,.0f} | "
            f"{r['shaped']['p50']:.2f} ms | {r['shaped']['p95']:.2f} ms | "
            f"{r['exact']['p50']:.2f} ms | {r['exact']['p95']:.2f} ms | "
            f"{r['fts']['p50']:.2f} ms | {r['fts']['p95']:.2f} ms | "
            f"{r['shaped']['p50'] / r['fts']['p50']:.2f}× | "
            f"{r['agreement']:.3f} ({r['identical']:.0%} identical) |"
        )
    lexical_lines += [
        "",
        "*mnemex* is the default (query shaping: when the terms' postings exceed "
        "`lexical_budget` = 2,000 rows, candidates are the rows holding the rarest terms, each "
        "scored exactly with all terms); *exact* scores every matching row (`lexical_budget=0`). "
        "*top-10 = exact* is the mean overlap of the two top-10 lists.",
    ]
    return "\n".join(lexical_lines)


def plot(rows: list[dict[str, object]], out: Path) -> None:
    sizes = [r["size"] for r in rows]
    with common.figure(out, (7, 4.5)) as ax:
        for key, label in (
            ("lexical", "lexical"),
            ("vector", "vector (exact)"),
            ("hybrid", "hybrid (exact vectors)"),
        ):
            points = [(r["size"], r[key]["p50"]) for r in rows if key in r]  # type: ignore[index]
            if points:
                ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(sizes, [f"{s:,}" for s in sizes])
        ax.set_xlabel("memories")
        ax.set_ylabel("p50 latency, ms (query embedding excluded)")
        ax.set_title("Search latency vs store size (limit 10, with snippets)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()


def main() -> None:
    arguments = common.parser(__doc__)
    arguments.add_argument("--sizes", default="10000,100000,1000000")
    arguments.add_argument("--queries", type=int, default=300)
    arguments.add_argument("--stores", action="store_true", help="only: RSS of many stores")
    arguments.add_argument("--against", metavar="REF", help="with --stores: also REF's code")
    args = arguments.parse_args()
    folder = common.data_dir(args.data)
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.stores:
        texts, vectors, _ = common.scale_corpus(folder, 10_000)
        with tempfile.TemporaryDirectory(prefix="mnemex-bench-") as tmp:
            srcs = {"this commit": common.ROOT / "src"}
            if args.against:
                srcs = {
                    f"`{args.against}`": common.checkout(args.against, Path(tmp) / "ref"),
                    **srcs,
                }
            section = many_stores(texts, vectors, common.queries(folder)[0], Path(tmp), srcs)
        return common.publish("bench_stores", section, args.no_write)
    texts, vectors, base_texts = common.scale_corpus(folder, max(sizes))
    qs = common.queries(folder)[: args.queries]
    model_id, table, embed_ms = common.query_vectors(qs)
    rows = []
    with tempfile.TemporaryDirectory(prefix="mnemex-bench-") as tmp_name:
        tmp = Path(tmp_name)
        paths = {}
        for size in sizes:
            row, path = run_size(size, texts, vectors, qs, table, model_id, tmp)
            rows.append(row)
            paths[size] = path
            print(json.dumps(row, default=float), flush=True)
        cold_size = 100_000 if 100_000 in paths else sizes[0]
        cold_hybrid = cold(paths[cold_size], qs[0], "hybrid")
        cold_lexical = cold(paths[cold_size], qs[0], "lexical")
        print(
            f"cold search at {cold_size:,}: hybrid {cold_hybrid:.2f} s, lexical {cold_lexical:.2f} s"
        )
        ingest = ingest_ratio(base_texts[:3000], tmp)
        lexical = [
            lexical_row(r["size"], texts, qs, paths[r["size"]], r["rows_s"], tmp)  # type: ignore[arg-type]
            for r in rows
            if r["size"] <= 100_000  # type: ignore[operator]
        ]
        print(
            f"ingest: model alone {ingest['raw']:.0f}/s, add_many {ingest['add_many']:.0f}/s "
            f"({ingest['ratio']:.0%})"
        )
    if not args.no_write:  # a trial run leaves the figure RESULTS.md shows as it is
        plot(rows, common.ROOT / "benchmarks" / "latency_vs_size.png")
    lines = [
        *common.heading("## Vector and hybrid search (`benchmarks/bench_hybrid.py`)"),
        f"Local model (int8 ONNX all-MiniLM-L6-v2): query embedding p50 {embed_ms['p50']:.2f} ms, "
        f"p95 {embed_ms['p95']:.2f} ms over {len(qs)} queries (5-10-word SciFact claims and "
        "LoCoMo questions).",
        "",
        "Latency per search, limit 10 with snippets (and hybrid at the default limit, 6), "
        "**query embedding excluded** (p50 / p95, ms):",
        "",
        "| memories | lexical | vector (exact) | hybrid | hybrid, limit 6 | vector matrix |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]

    def cell(r: dict[str, object], key: str) -> str:
        v = r.get(key)
        return f"{v['p50']:.2f} / {v['p95']:.2f}" if isinstance(v, dict) else "-"

    for r in rows:
        lines.append(
            f"| {r['size']:,} | {cell(r, 'lexical')} | {cell(r, 'vector')} | {cell(r, 'hybrid')} | "
            f"{cell(r, 'hybrid6')} | {r['matrix_mb']:.0f} MB |"
        )
    big = rows[-1]
    lines += [
        "",
        f"At {big['size']:,} memories the vector matrix ({big['matrix_mb']:.0f} MB) loads in "
        f"{big['load_s']:.1f} s. The HNSW index, its recall and the peak RSS of a searching "
        "process: `bench_scale.py`.",
        "",
        f"Cold `mnemex search` in a new process at {cold_size:,} memories (median of 5, wall): "
        f"hybrid {cold_hybrid:.2f} s (loads the model and {cold_size:,} vectors), "
        f"lexical {cold_lexical:.2f} s.",
        "",
        f"Ingest with the local model (3,000 texts, add_many in batches of 1,000): "
        f"{ingest['add_many']:.0f} memories/s vs the model alone on the same texts "
        f"{ingest['raw']:.0f} texts/s: {ingest['ratio']:.0%} of the model's throughput.",
        "",
        "At 1M the vectors are the 100k real ones repeated with noise (see the script). "
        "![latency vs store size](latency_vs_size.png)",
    ]
    common.publish("bench_hybrid", "\n".join(lines), args.no_write)
    common.publish(
        "bench_lexical", lexical_section(lexical, texts[: max(sizes)], qs), args.no_write
    )


if __name__ == "__main__":
    main()
