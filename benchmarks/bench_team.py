"""A team of agents on one store: many writer processes at once, on each engine.

    python benchmarks/bench_team.py [--writers 8] [--writes 10000] [--engines sqlite,postgres]

For each engine (a SQLite file; a PostgreSQL 16 + pgvector server started
from the ``pgserver`` package), ``--seed`` memories are written first, then
``--writers`` processes each make ``--writes`` single writes through the
Python API (``mnemex.open(db)``): ``Store.add`` of texts of their own, and,
every ``SHARED_EVERY``-th write, ``Store.remember`` of a fact that every
writer writes at about the same moment (two agents learning the same thing
at once must end with one memory). ``--searchers`` processes search the
store the whole time. Lexical only (``MNEMEX_EMBEDDER=none``): the contention
is about writing, not about the model.

Checked at the end: every acknowledged id is in the store (lost = acknowledged
and missing), the store holds exactly seed + own texts + one memory per shared
fact (doubled = more), and writers' errors. Reported: writes per second (all
writers together), write latency, search latency during the writes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import (
    data_dir,
    fresh_database,
    machine,
    memories,
    parser,
    percentiles,
    pg_server,
    publish,
    queries,
)

SHARED_EVERY = 50  # every 50th write of a writer is a fact all writers write
NAMESPACE = "team"


def worker(spec_path: str) -> None:
    """One process: its writes (or searches until the writers are done)."""
    import mnemex

    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    latencies: list[float] = []
    ids: list[str] = []
    errors: list[str] = []
    merged = 0
    with mnemex.open(spec["db"], namespace=NAMESPACE) as store:
        while time.time() < spec["start"]:
            time.sleep(0.001)
        done = Path(spec["done"])
        for n, text in enumerate(spec["texts"]):
            if spec["role"] == "search" and done.exists():
                break
            began = time.perf_counter()
            try:
                if spec["role"] == "search":
                    store.search(text, limit=10)
                elif text.startswith("shared fact"):
                    added = store.remember(text)
                    ids.append(added.id)
                    merged += added.deduplicated
                else:
                    ids.append(store.add(text, dedup=False))
            except mnemex.MnemexError as exc:
                errors.append(f"{n}: {type(exc).__name__}: {exc}"[:300])
                continue
            latencies.append((time.perf_counter() - began) * 1000)
    Path(spec["out"]).write_text(
        json.dumps({"latencies": latencies, "ids": ids, "errors": errors, "merged": merged}),
        encoding="utf-8",
    )


def writer_texts(pool: list[str], writer: int, writes: int) -> list[str]:
    """A writer's texts: its own slice of the pool, with the shared facts in place."""
    own = iter(pool[writer * writes : (writer + 1) * writes])
    return [
        f"shared fact {n // SHARED_EVERY}: the team agreed on decision {n // SHARED_EVERY}"
        if n % SHARED_EVERY == SHARED_EVERY - 1
        else next(own)
        for n in range(writes)
    ]


def campaign(db: str, args: argparse.Namespace, folder: Path, tmp: Path) -> dict[str, object]:
    """Seed ``db``, run the writers and searchers, verify; the figures of one engine."""
    import mnemex

    texts = memories(folder, args.seed + args.writers * args.writes)
    with mnemex.open(db, namespace=NAMESPACE) as store:
        store.add_many(texts[: args.seed])
    pool = texts[args.seed :]
    start = time.time() + 3.0
    done = tmp / "writers-done"
    done.unlink(missing_ok=True)
    specs = []
    asked = queries(folder)
    roles = ["write"] * args.writers + ["search"] * args.searchers
    for n, role in enumerate(roles):
        own = (asked * 50)[n::2] if role == "search" else writer_texts(pool, n, args.writes)
        spec = {"role": role, "texts": own, "db": db, "start": start, "done": str(done)}
        spec["out"] = str(tmp / f"out-{n}.json")
        (tmp / f"spec-{n}.json").write_text(json.dumps(spec), encoding="utf-8")
        specs.append(spec)
    env = {**os.environ, "MNEMEX_EMBEDDER": "none"}
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--worker", str(tmp / f"spec-{n}.json")], env=env
        )
        for n in range(len(specs))
    ]
    loads = []
    while any(proc.poll() is None for proc in procs[: args.writers]):
        time.sleep(1.0)
        loads.append(os.getloadavg()[0])
    took = time.time() - start
    done.touch()
    for proc in procs[args.writers :]:
        proc.wait()
    outs = [json.loads(Path(s["out"]).read_text(encoding="utf-8")) for s in specs]
    writes, searches = outs[: args.writers], outs[args.writers :]
    acknowledged = {i for out in writes for i in out["ids"]}
    shared = len({t for t in writer_texts(pool, 0, args.writes) if t.startswith("shared fact")})
    with mnemex.open(db, namespace=NAMESPACE) as store:
        found = {m.id for m in store.get(sorted(acknowledged)).memories}
        count = store.count()
    expected = args.seed + args.writers * (args.writes - shared) + shared
    return {
        "writes": sum(len(out["latencies"]) for out in writes),
        "errors": [e for out in writes for e in out["errors"]][:5],
        "error_count": sum(len(out["errors"]) for out in writes),
        "search_errors": sum(len(out["errors"]) for out in searches),
        "lost": len(acknowledged - found),
        "count": count,
        "expected": expected,
        "merged": sum(out["merged"] for out in writes),
        "took": took,
        "write_ms": percentiles([x for out in writes for x in out["latencies"]]),
        "search_ms": percentiles([x for out in searches for x in out["latencies"]] or [0.0]),
        "searches": sum(len(out["latencies"]) for out in searches),
        "procs": [p.returncode for p in procs],
        "load": max(loads, default=0.0),
    }


def row(engine: str, r: dict) -> str:  # type: ignore[type-arg]
    w, s = r["write_ms"], r["search_ms"]
    return (
        f"| {engine} | {r['writes']:,} | {r['writes'] / r['took']:,.0f}/s | {r['error_count']} | "
        f"{r['lost']} | {r['count'] - r['expected']:+d} | {w['p50']:.1f} / {w['p95']:.1f} ms | "
        f"{r['searches']:,} | {s['p50']:.1f} / {s['p95']:.1f} ms |"
    )


def main() -> None:
    arguments = parser(__doc__)
    arguments.add_argument("--writers", type=int, default=8)
    arguments.add_argument("--writes", type=int, default=10_000, help="writes per writer")
    arguments.add_argument("--searchers", type=int, default=2)
    arguments.add_argument("--seed", type=int, default=5_000, help="memories written first")
    arguments.add_argument("--engines", default="sqlite,postgres")
    arguments.add_argument("--worker", help=argparse.SUPPRESS)
    args = arguments.parse_args()
    if args.worker:
        worker(args.worker)
        return
    folder = data_dir(args.data)
    rows, load = [], 0.0
    for engine in args.engines.split(","):
        with (
            tempfile.TemporaryDirectory(prefix=f"mnemex-team-{engine}-") as tmp_name,
            pg_server(Path(tmp_name) / "pgdata")
            if engine == "postgres"
            else contextlib.nullcontext() as server,
        ):
            db = fresh_database(server.url, "team") if server else str(Path(tmp_name) / "team.db")
            result = campaign(db, args, folder, Path(tmp_name))
        print(engine, json.dumps(result, indent=1))
        rows.append(row(engine, result))
        load = max(load, float(result["load"]))  # type: ignore[arg-type]
    body = "\n".join(
        [
            "## A team on one store: concurrent writers per engine (`benchmarks/bench_team.py`)",
            "",
            f"Machine: {machine()}; load average during the writes up to {load:.1f}",
            "",
            f"{args.seed:,} memories first, then {args.writers} processes × {args.writes:,} "
            f"single writes through the Python API (`Store.add`; every {SHARED_EVERY}th write a "
            f"`Store.remember` of a fact all {args.writers} write at once), while "
            f"{args.searchers} processes search (limit 10). Lexical only. *Lost*: acknowledged "
            "and missing; *doubled*: memories beyond seed + own texts + one per shared fact.",
            "",
            "| engine | writes | writes/s (all writers) | errors | lost | doubled | "
            "write p50 / p95 | searches | search p50 / p95 |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
            *rows,
            "",
            "PostgreSQL: 16 + pgvector 0.6 from `pgserver` on the same machine (Unix socket), "
            "each process with its own pool. Before and after the PostgreSQL write changes: "
            'RESULTS.md History, "PostgreSQL writes (issue 30)".',
        ]
    )
    publish("bench_team", body, args.no_write)


if __name__ == "__main__":
    main()
