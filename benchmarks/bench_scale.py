"""Both engines at scale, side by side: build time, disk used, lexical and hybrid latency.

    python benchmarks/bench_scale.py [--data DIR] [--sizes 100000,1000000]
        [--postgres-sizes 100000] [--queries 300] [--add] [--no-write]

The numbers in RESULTS.md: ``--sizes 100000 --postgres-sizes 100000``, then
``--sizes 1000000 --postgres-sizes 1000000 --add`` (``--add`` keeps the sizes of the
previous run, saved under benchmarks/.cache, and replaces these). The memories and vectors
are ``bench_hybrid.py``'s (``common.scale_corpus``). For each size, in one run:

- SQLite: ``add_many`` (FTS5 included), the vectors written as the store writes them, the
  vector snapshot loaded, the HNSW index (faiss) built by ``update_ann``;
- PostgreSQL 16 + pgvector (``pgserver``, Unix socket, default settings): ``add_many``
  (the engine's write path), the vectors through ``insert_vectors`` with the model's HNSW
  index dropped meanwhile, the index built again from its own definition, the last
  ``LIVE`` vectors written through the live index, then ``VACUUM ANALYZE``.

Then disk (SQLite's files; ``pg_database_size`` and the largest relations), and the same
queries on every store, one query on each store in turn, default settings, **the query
embedding excluded** (the store's embedder answers from a table of the queries' vectors,
as in ``bench_hybrid.py``); SQLite exact and through HNSW, with the HNSW recall@10. The
1-minute load average is recorded with each figure.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import mnemex
from common import (
    CACHE,
    Precomputed,
    add_texts,
    build_sqlite,
    child_env,
    data_dir,
    fresh_database,
    machine,
    parser,
    percentiles,
    pg_server,
    publish,
    queries,
    query_vectors,
    run_checked,
    scale_corpus,
)
from mnemex.engine.sqlite import ann, codes

LIMIT = 10
SAVED = CACHE / "bench_scale.json"  # the last results, for --add
WARM = 30  # queries run on each store before the timed ones
LIVE = 5_000  # vectors written last on PostgreSQL, through the live HNSW index
PG_VECTOR_BATCH = 5_000
PG_MAINTENANCE_MEM = "4GB"  # for the HNSW build (pgvector builds in memory when it fits)


def load() -> float:
    return os.getloadavg()[0]


def stopwatch(fn: Callable[[], Any]) -> tuple[float, float]:
    """(seconds, 1-minute load average at the end) of ``fn()``."""
    began = time.perf_counter()
    fn()
    return time.perf_counter() - began, load()


def files_bytes(path: Path) -> int:
    """Bytes of a SQLite store's files: the database, its WAL, and every sidecar beside it."""
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*") if p.is_file())


def part_name(suffix: str) -> str:
    """What a file beside a SQLite store is, by the end of its name."""
    for end, name in (
        ("-wal", "WAL"),
        (".vectors", "vector snapshot"),
        (".codes", "8-bit codes"),
        (".hnsw", "HNSW file"),
    ):
        if suffix.endswith(end):
            return name
    return suffix or "database"


# -- SQLite ------------------------------------------------------------------------------

_RSS_PROBE = """
import json, sys, mnemex
store = mnemex.open(sys.argv[1])
result = store.search(sys.argv[2], 10, mode="hybrid")
assert result.mode_used == "hybrid", result.notes
index = store.session.vectors(384)
hwm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM"))
print(json.dumps({"rss_mb": hwm / 1024,
                  "matrix_mb": index.memory_bytes() / 1e6, "ann": index.ann is not None}))
"""


def process_memory(path: Path, query: str, ann_mode: str) -> dict[str, float]:
    """Peak RSS of a new process that opens the store and runs one hybrid search."""
    env = child_env(MNEMEX_EMBEDDER="local", MNEMEX_ANN=ann_mode)
    command = [sys.executable, "-c", _RSS_PROBE, str(path), query]
    done = run_checked(command, "memory probe", text=True, env=env)
    return json.loads(done.stdout.strip().splitlines()[-1])


def sqlite_build(path: Path, texts, vectors, model_id: str, table: dict) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """Build the SQLite store; seconds of each step, disk, load."""
    row: dict[str, Any] = {"engine": "SQLite", "size": len(texts)}
    began = time.perf_counter()
    row.update(build_sqlite(path, texts, vectors, model_id))
    row["build_load"] = load()
    with mnemex.open(path, embedder=Precomputed(model_id, table), ann="off") as store:
        index = store.session.vectors(384)
        row["snapshot_s"], _ = stopwatch(index.refresh)
    if ann.available():
        with mnemex.open(path, embedder=Precomputed(model_id, table), ann="on") as store:
            row["ann_s"], row["ann_load"] = stopwatch(
                lambda: store.session.update_ann(store.embedder)  # type: ignore[arg-type]
            )
    row["total_s"] = time.perf_counter() - began
    row["disk"] = files_bytes(path)
    row["disk_parts"] = {
        part_name(p.name[len(path.name) :]): p.stat().st_size
        for p in sorted(path.parent.glob(path.name + "*"))
        if p.is_file() and p.stat().st_size >= 1e6
    }
    return row


# -- PostgreSQL --------------------------------------------------------------------------


def pg_server_info(conn: Any) -> dict[str, str]:
    names = ("server_version", "shared_buffers", "work_mem", "maintenance_work_mem")
    out = {n: str(conn.execute(f"SHOW {n}").fetchone()[0]) for n in names}
    found = conn.execute(
        "SELECT default_version FROM pg_available_extensions WHERE name = 'vector'"
    ).fetchone()
    out["pgvector"] = str(found[0]) if found else "?"
    return out


def pg_build(url: str, texts, vectors, model_id: str) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """Load the PostgreSQL store; seconds of each step, disk, load."""
    from mnemex.engine.postgres import insert_vectors
    from mnemex.engine.postgres.vectors import index_name

    row: dict[str, Any] = {"engine": "PostgreSQL", "size": len(texts)}
    began = time.perf_counter()
    with mnemex.open(url, embedder=None) as store:
        add_texts(store, texts)
        row["rows_s"], row["build_load"] = time.perf_counter() - began, load()
        with store.session.connection() as conn:
            stored = conn.execute("SELECT seq, content_hash FROM memories ORDER BY seq").fetchall()
            assert len(stored) == len(texts), (len(stored), len(texts))
            items = [(seq, digest, vectors[i]) for i, (seq, digest) in enumerate(stored)]
            row["live"] = min(LIVE, len(items) // 10)
            bulk, live = items[: -row["live"]], items[-row["live"] :]
            insert_vectors(conn, model_id, bulk[:1])  # records the model, creates its index
            name = index_name(model_id)
            definition = conn.execute("SELECT pg_get_indexdef(%s::regclass)", (name,)).fetchone()[0]
            conn.execute(f'DROP INDEX "{name}"'.encode())
            started = time.perf_counter()
            for start in range(1, len(bulk), PG_VECTOR_BATCH):
                insert_vectors(conn, model_id, bulk[start : start + PG_VECTOR_BATCH])
            row["vectors_s"], row["vectors_load"] = time.perf_counter() - started, load()

            def build_index() -> None:
                with conn.transaction():
                    conn.execute(f"SET LOCAL maintenance_work_mem = '{PG_MAINTENANCE_MEM}'")
                    conn.execute(definition.encode())

            row["ann_s"], row["ann_load"] = stopwatch(build_index)
            row["maintenance_work_mem"] = PG_MAINTENANCE_MEM

            def write_live() -> None:
                for start in range(0, len(live), 1_000):
                    insert_vectors(conn, model_id, live[start : start + 1_000])

            row["live_s"], row["live_load"] = stopwatch(write_live)
            row["analyze_s"], _ = stopwatch(lambda: conn.execute("VACUUM ANALYZE"))
            row["total_s"] = time.perf_counter() - began
            row["disk"], row["disk_parts"] = pg_disk(conn, name)
    return row


def pg_disk(conn: Any, hnsw: str) -> tuple[int, dict[str, int]]:
    """The database's size, and its largest parts (tables with their indexes and TOAST;
    the HNSW index apart from its table)."""
    total = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
    parts = dict(
        conn.execute(
            """SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class AS c
               JOIN pg_namespace AS n ON n.oid = c.relnamespace
               WHERE c.relkind = 'r' AND n.nspname = 'public'
               ORDER BY 2 DESC LIMIT 4"""
        ).fetchall()
    )
    index = conn.execute("SELECT pg_relation_size(%s::regclass)", (hnsw,)).fetchone()[0]
    if "embeddings" in parts:
        parts["embeddings"] -= index
    parts["HNSW index"] = index
    return int(total), {k: int(v) for k, v in parts.items()}


# -- searching ---------------------------------------------------------------------------

MODES = (("lexical", "lexical", LIMIT), ("hybrid", "hybrid", LIMIT), ("hybrid6", "hybrid", None))


def interleaved(runs: dict[str, Callable[[str], Any]], qs: list[str]) -> dict[str, Any]:
    """p50/p95 (ms) of each run over the queries, each query run by every one in turn
    (the machine's load then weighs on all alike), with the load average before and after."""
    for run in runs.values():
        for q in qs[:WARM]:
            run(q)
    samples: dict[str, list[float]] = {label: [] for label in runs}
    before = load()
    for q in qs:
        for label, run in runs.items():
            began = time.perf_counter()
            run(q)
            samples[label].append((time.perf_counter() - began) * 1000)
    loads = (before, load())
    return {label: {**percentiles(s), "load": loads} for label, s in samples.items()}


FLOAT32 = "SQLite, float32 scan (no 8-bit codes: before)"


@contextlib.contextmanager
def float32_scan(label: str):  # type: ignore[no-untyped-def]
    """Exact search without the 8-bit first pass, for the store labelled :data:`FLOAT32`."""
    if not label.startswith(FLOAT32):
        yield
        return
    before = codes.CODES_MIN_ROWS
    codes.CODES_MIN_ROWS = 1 << 62
    try:
        yield
    finally:
        codes.CODES_MIN_ROWS = before


def searcher(store: Any, mode: str, limit: int | None, label: str = "") -> Callable[[str], Any]:
    def run(q: str) -> None:
        with float32_scan(label):
            result = store.search(q, limit, mode=mode)
        assert result.mode_used == mode, (mode, result.mode_used, result.notes)

    return run


def latencies(stores: dict[str, Any], qs: list[str]) -> dict[str, dict[str, Any]]:
    """Per store and mode, p50/p95 (ms) and the load average, the stores interleaved."""
    out: dict[str, dict[str, Any]] = {label: {} for label in stores}
    for q in qs:  # the queries a search corrects get their vectors before any is timed
        next(iter(stores.values())).search(q, LIMIT, mode="hybrid")
    for key, mode, limit in MODES:
        runs = {label: searcher(store, mode, limit, label) for label, store in stores.items()}
        for label, figures in interleaved(runs, qs).items():
            out[label][key] = figures
    return out


def ann_recall(stores: dict[str, Any], qs: list[str]) -> dict[str, float]:
    """Recall@10 of the SQLite store searched through the HNSW index against the same
    store searched exactly, per mode."""
    exact = next((s for label, s in stores.items() if label.startswith("SQLite, exact")), None)
    approx = next((s for label, s in stores.items() if label.startswith("SQLite, HNSW")), None)
    if exact is None or approx is None:
        return {}
    return recall(exact, approx, qs)


def recall(exact: Any, approx: Any, qs: list[str]) -> dict[str, float]:
    """Per mode, the share of ``exact``'s top 10 that ``approx`` returns (the same store
    searched exactly and through its index), a query with no exact hit counting 1."""
    out = {}
    for mode in ("vector", "hybrid"):
        shares = []
        for q in qs:
            truth = {h.id for h in exact.search(q, LIMIT, mode=mode).hits}
            found = {h.id for h in approx.search(q, LIMIT, mode=mode).hits}
            shares.append(len(truth & found) / len(truth) if truth else 1.0)
        out[mode] = sum(shares) / len(shares)
    return out


def codes_same(stores: dict[str, Any], qs: list[str]) -> dict[str, float]:
    """The share of queries whose top 10 (ids, in order) the exact search through the 8-bit
    codes gives as the float32 scan does, per mode."""
    exact = next((s for label, s in stores.items() if label.startswith("SQLite, exact")), None)
    before = next((s for label, s in stores.items() if label.startswith(FLOAT32)), None)
    if exact is None or before is None:
        return {}
    out = {}
    for mode in ("vector", "hybrid"):
        same = 0
        for q in qs:
            with float32_scan(FLOAT32):
                old = [h.id for h in before.search(q, LIMIT, mode=mode).hits]
            same += old == [h.id for h in exact.search(q, LIMIT, mode=mode).hits]
        out[mode] = same / len(qs)
    return out


def open_stores(size: int, sqlite_path: Path, pg_url: str | None, embedder: Precomputed):  # type: ignore[no-untyped-def]
    stores = {
        f"SQLite, exact vectors|{size}": mnemex.open(sqlite_path, embedder=embedder, ann="off")
    }
    if codes.available() and size >= codes.CODES_MIN_ROWS:
        stores[f"{FLOAT32}|{size}"] = mnemex.open(sqlite_path, embedder=embedder, ann="off")
    if ann.available():
        stores[f"SQLite, HNSW (faiss)|{size}"] = mnemex.open(
            sqlite_path, embedder=embedder, ann="on"
        )
    if pg_url is not None:
        stores[f"PostgreSQL, HNSW (pgvector)|{size}"] = mnemex.open(pg_url, embedder=embedder)
    for label, store in stores.items():
        if label.startswith("SQLite"):
            store.session.vectors(384).refresh()
    for label, store in stores.items():  # the first full scan reads the codes
        with float32_scan(label):
            store.search("warm", LIMIT, mode="vector")
    return stores


# -- the run -----------------------------------------------------------------------------


def main() -> None:
    arguments = parser(__doc__)
    arguments.add_argument("--sizes", default="100000")
    arguments.add_argument("--postgres-sizes", default="100000", help="'' for none")
    arguments.add_argument("--queries", type=int, default=300)
    arguments.add_argument("--add", action="store_true", help="keep the previous run's other sizes")
    args = arguments.parse_args()
    folder = data_dir(args.data)
    sizes = [int(s) for s in args.sizes.split(",")]
    pg_sizes = {int(s) for s in args.postgres_sizes.split(",") if s}
    texts, vectors, _ = scale_corpus(folder, max(sizes))
    qs = queries(folder)[: args.queries]
    model_id, table, embed_ms = query_vectors(qs)
    results: dict[str, Any] = {"builds": [], "latency": {}, "embed_ms": embed_ms}
    results["queries"] = len(qs)
    engines = "SQLite" + (f", PostgreSQL at {fmt(sorted(pg_sizes))}" if pg_sizes else "")
    results["runs"] = [
        f"{fmt(sizes)} memories ({engines}): {machine()}; 1-minute load average at the "
        f"start {load():.1f}"
    ]
    with (
        tempfile.TemporaryDirectory(prefix="mnemex-scale-") as tmp,
        pg_server(Path(tmp) / "pg") if pg_sizes else contextlib.nullcontext() as server,
    ):
        root = Path(tmp)
        if server is not None:
            from mnemex.engine.postgres import connect

            with connect(server.url) as admin:
                results["server"] = pg_server_info(admin)
        for size in sizes:
            run_size(size, texts, vectors, qs, model_id, table, root, server, pg_sizes, results)
            for leftover in root.glob(f"scale-{size}.db*"):
                leftover.unlink()
    if args.add and SAVED.exists():
        results = merged(json.loads(SAVED.read_text(encoding="utf-8")), results)
    if not args.no_write:  # a trial run leaves the saved results (what --add merges with)
        SAVED.parent.mkdir(parents=True, exist_ok=True)
        SAVED.write_text(json.dumps(results, default=float), encoding="utf-8")
    publish("bench_scale", report(results), args.no_write)


def run_size(size, texts, vectors, qs, model_id, table, root, server, pg_sizes, results) -> None:  # type: ignore[no-untyped-def]
    """Build each engine's store of ``size`` memories, then time the queries on all of them."""
    from mnemex.engine.postgres import connect

    path = root / f"scale-{size}.db"
    built = sqlite_build(path, texts[:size], vectors[:size], model_id, table)
    modes = ("off", "on") if ann.available() else ("off",)
    built["rss_mb"] = {m: process_memory(path, qs[0], m)["rss_mb"] for m in modes}
    print(json.dumps(built, default=float), flush=True)
    results["builds"].append(built)
    url = None
    if server is not None and size in pg_sizes:
        url = fresh_database(server.url, f"scale_{size}")
        built = pg_build(url, texts[:size], vectors[:size], model_id)
        print(json.dumps(built, default=float), flush=True)
        results["builds"].append(built)
    stores = open_stores(size, path, url, Precomputed(model_id, table))
    try:
        measured = latencies(stores, qs)
        results.setdefault("recall", {})[str(size)] = ann_recall(stores, qs)
        if url is not None:  # pgvector's HNSW index against the same database searched exactly
            pg = stores[f"PostgreSQL, HNSW (pgvector)|{size}"]
            with mnemex.open(url, embedder=Precomputed(model_id, table), ann="off") as exact:
                results.setdefault("pg_recall", {})[str(size)] = recall(exact, pg, qs)
        results.setdefault("codes_same", {})[str(size)] = codes_same(stores, qs)
    finally:
        for store in stores.values():
            store.close()
    print(json.dumps(measured, default=float), flush=True)
    results["latency"].update(measured)
    if url is not None and server is not None:
        with connect(server.url) as admin:
            admin.execute(f"DROP DATABASE scale_{size} WITH (FORCE)".encode())


def merged(before: dict[str, Any], now: dict[str, Any]) -> dict[str, Any]:
    """The previous run's results with this run's engines and sizes replaced (and its runs
    listed)."""
    built = {(b["engine"], b["size"]) for b in now["builds"]}
    out = dict(before)
    out["builds"] = [b for b in before["builds"] if (b["engine"], b["size"]) not in built]
    out["builds"] = sorted(
        out["builds"] + now["builds"], key=lambda b: (b["size"], b["engine"] != "SQLite")
    )
    kept = {k: v for k, v in before["latency"].items() if k not in now["latency"]}
    out["latency"] = dict(
        sorted(
            {**kept, **now["latency"]}.items(),
            key=lambda kv: (int(kv[0].rsplit("|", 1)[1]), kv[0].startswith("PostgreSQL")),
        )
    )
    for key in ("recall", "pg_recall"):
        out[key] = {**before.get(key, {}), **now.get(key, {})}
    out["codes_same"] = {**before.get("codes_same", {}), **now.get("codes_same", {})}
    out["runs"] = before["runs"] + now["runs"]
    for key in ("server", "embed_ms"):  # this run's server and query embedding
        if key in now:
            out[key] = now[key]
    return out


def fmt(sizes: list[int]) -> str:
    return ", ".join(f"{s:,}" for s in sizes)


def mb(n: float) -> str:
    return f"{n / 1e6:,.0f} MB"


def cell(v: dict[str, Any] | None) -> str:
    return f"{v['p50']:.1f} / {v['p95']:.1f}" if v else "-"


def build_lines(builds: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| engine | memories | rows (+ lexical index) | vectors | ANN index | total | disk | "
        "load (1-min) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for b in builds:
        if b["engine"] == "SQLite":
            vec = f"{b['vectors_s']:.0f} s (+ {b['snapshot_s']:.0f} s snapshot)"
            index = f"{b['ann_s']:.0f} s (faiss HNSW)" if "ann_s" in b else "-"
        else:
            vec = (
                f"{b['vectors_s']:.0f} s without the index (+ {b['live_s']:.0f} s for the last "
                f"{b['live']:,} through it: {b['live'] / b['live_s']:,.0f}/s)"
            )
            index = (
                f"{b['ann_s']:.0f} s (pgvector HNSW, maintenance_work_mem "
                f"{b['maintenance_work_mem']})"
            )
        loads = ", ".join(
            f"{b[k]:.1f}" for k in ("build_load", "vectors_load", "ann_load") if k in b
        )
        lines.append(
            f"| {b['engine']} | {b['size']:,} | {b['rows_s']:.0f} s "
            f"({b['size'] / b['rows_s']:,.0f}/s) | {vec} | {index} | {b['total_s']:.0f} s | "
            f"{mb(b['disk'])} | {loads} |"
        )
    lines += ["", "Disk, by part (SQLite: and the peak RSS of a new process that opens the "]
    lines += ["store and runs one hybrid search with the local model, exact / through HNSW):", ""]
    for b in builds:
        parts = ", ".join(f"{name} {mb(n)}" for name, n in b["disk_parts"].items())
        rss = " / ".join(f"{v:,.0f} MB" for v in b.get("rss_mb", {}).values())
        lines.append(
            f"- {b['engine']} at {b['size']:,}: {parts}" + (f"; RSS {rss}." if rss else ".")
        )
    return lines


def report(results: dict[str, Any]) -> str:
    sizes = sorted({b["size"] for b in results["builds"]})
    server = results.get("server")
    lines = [
        "## Both engines at scale: build, disk, lexical and hybrid latency "
        "(`benchmarks/bench_scale.py`)",
        "",
        "Machine (one line per run; shared: other jobs ran meanwhile, the load is given "
        "with each figure):",
        "",
        *(f"- {run}" for run in results["runs"]),
        "",
        f"Memories: {fmt(sizes)} (bench_hybrid's texts and vectors: "
        "real local-model vectors at 100k, repeated with noise at 1M).",
    ]
    if server:
        lines += [
            "",
            f"PostgreSQL {server['server_version']} + pgvector {server['pgvector']} from "
            f"`pgserver` on the same machine (Unix socket; shared_buffers "
            f"{server['shared_buffers']}, work_mem {server['work_mem']}; the HNSW build ran "
            "with more maintenance_work_mem than the server's default, "
            f"{server['maintenance_work_mem']}).",
        ]
    lines += ["", "Build, seconds:", "", *build_lines(results["builds"]), ""]
    lines += [
        f"Latency per search, {results['queries']} queries, p50 / p95 ms, **query embedding "
        f"excluded** (it costs p50 {results['embed_ms']['p50']:.1f} ms, p95 "
        f"{results['embed_ms']['p95']:.1f} ms with the local model); every store searched "
        "each query in turn, default settings, limit 10 with snippets unless said. The "
        "float32 scan is the same store searched with the codes' threshold raised: its "
        "vectors are read from SQLite into the process's memory (a large store's snapshot "
        "holds none since 2662aa3; before, the scan read the mapped snapshot's, 42.0 ms "
        "hybrid at 1M against 28.7 through the codes).",
        "",
        "| engine, vector search | memories | lexical | hybrid | hybrid, limit 6 (default) | "
        "load (1-min) |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for key, modes in results["latency"].items():
        label, size = key.rsplit("|", 1)
        low = min(m["load"][0] for m in modes.values())
        high = max(m["load"][1] for m in modes.values())
        lines.append(
            f"| {label} | {int(size):,} | {cell(modes.get('lexical'))} | "
            f"{cell(modes.get('hybrid'))} | {cell(modes.get('hybrid6'))} | "
            f"{low:.1f}-{high:.1f} |"
        )
    for key, what in (
        ("recall", "the HNSW index (faiss, hits rescored exactly) against exact search of the "
         "same SQLite store"),
        ("pg_recall", "pgvector's HNSW index against exact search of the same PostgreSQL "
         "database (`ann = \"off\"`)"),
    ):  # fmt: skip
        if any(results.get(key, {}).values()):
            lines += ["", f"Recall@10 of {what}, over the same queries:", ""]
            lines += figures(results[key])
    same = results.get("codes_same", {})
    if any(same.values()):
        lines += [
            "",
            "Exact search through the 8-bit codes (faiss, the best rows rescored exactly) "
            "against the float32 scan of the same store: the share of queries with the same "
            "top 10, in the same order:",
            "",
            *figures(same),
        ]
    return "\n".join(lines)


def figures(by_size: dict[str, dict[str, float]]) -> list[str]:
    """A line per size: the vector and hybrid figures."""
    return [
        f"- {int(size):,} memories: vector {r['vector']:.4f}, hybrid {r['hybrid']:.4f}"
        for size, r in sorted(by_size.items(), key=lambda kv: int(kv[0]))
        if r
    ]


if __name__ == "__main__":
    main()
