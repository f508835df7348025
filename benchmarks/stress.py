"""The campaigns of many processes on one store, each writing its section of RELIABILITY.md
(``team``: of benchmarks/RESULTS.md) with the machine and its load; lexical only
(``MNEMEX_EMBEDDER=none``):

    python benchmarks/stress.py writers [--seconds 60] [--seed-rows 20000] [--no-write]
    python benchmarks/stress.py team [--writers 8] [--writes 10000] [--engines sqlite,postgres]
        [--batched 10000] [--batch 1000]
    python benchmarks/stress.py kill [--runs 100] [--no-write]
    python benchmarks/stress.py fuzz [--calls 200000] [--imports 200] [--jobs 2] [--no-write]

``writers`` (section stress_writers): a store seeded with ``--seed-rows`` real memories,
then for ``--seconds`` 2 ``Store.add`` writers (duplicate check on), 2 ``Store.remember``,
2 ``add_many`` (batches of ``--batch``, ``--bulk-rows`` each), 2 ``mnemex add`` CLI
writers (a new process per memory) and 2 searchers, each in its own process. Every
acknowledged id must be in the store at the end (lost = acknowledged and missing).

``team`` (section bench_team): on each engine (a SQLite file; PostgreSQL 16 + pgvector from
``pgserver``), ``--seed`` memories, then ``--writers`` processes each make ``--writes``
single writes (``Store.add``; every ``SHARED_EVERY``-th a ``Store.remember`` of a fact
every writer writes at about the same moment, which must end as one memory) while
``--searchers`` processes search. Checked: every acknowledged id is in the store, the store
holds seed + own texts + one memory per shared fact (doubled = more), the errors. Then
one process writes ``--batched`` more by ``add_many`` in batches of ``--batch``, alone.

``kill`` (section stress_kill): ``--runs`` times, a child writes a store (``add_many`` or
``import_jsonl`` batches of ``--batch``, printing the ids after each commit;
``reindex(force=True)``; or editing a markdown workspace between ``sync`` calls) and is
SIGKILLed at a random moment (0 to ``--max-delay`` s after it opened the store); then
``check()`` runs and every id acknowledged so far on that store is looked up (and a
workspace synced again).

``fuzz`` (section stress_fuzz): the fuzzing of ``tests/test_hostile.py`` scaled up with
plain ``random`` (a seed repeats a run): ``--calls`` random calls of the public ``Store``
methods, each parameter of the right type or hostile (huge and NaN numbers, lone
surrogates, NUL bytes, long text, dates of year 1 and 9999, bytes, nested values): any
exception not a ``mnemex.MnemexError`` is counted, and the store must still search after
each; ``--imports`` JSONL files of good lines with hostile ones at random places, across
import batches: every good line stored, every bad one reported, no import aborted.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path
from subprocess import PIPE
from typing import Any

import common

sys.path.insert(0, str(common.ROOT))
os.environ.setdefault("MNEMEX_EMBEDDER", "none")  # every campaign is lexical only

import mnemex
from mnemex.store import ALL
from mnemex.transfer import IMPORT_BATCH, import_jsonl

RELIABILITY = common.ROOT / "RELIABILITY.md"

# -- writers: eight processes write one store while two search it ----------------------

ROLES = ("add", "add", "remember", "remember", "add_many", "add_many", "cli", "cli")
SEARCHERS = 2


class CliFailed(Exception):
    """``mnemex add`` exited with an error (its message is the exception's)."""


def write_one(
    store: mnemex.Store, spec: dict[str, Any], position: int
) -> tuple[int, list[str], int]:
    """One call of the process's role at ``position`` of its texts: (texts used, ids
    acknowledged, writes merged as duplicates)."""
    role, texts = spec["role"], spec["texts"]
    if role == "add_many":
        batch = texts[position : position + spec["batch"]]
        return len(batch), list(store.add_many(batch)), 0
    if role == "search":
        store.search(texts[position % len(texts)], spec.get("limit"))
        return 1, [], 0
    if role == "add" or (role == "team" and not texts[position].startswith("shared fact")):
        return 1, [store.add(texts[position], dedup=None if role == "add" else False)], 0
    if role in ("remember", "team"):
        added = store.remember(texts[position])
        return 1, [added.id], int(added.deduplicated)
    command = [sys.executable, "-m", "mnemex", "--db", spec["db"], "-n", "default", "add"]
    command.append(texts[position])
    done = subprocess.run(command, capture_output=True, text=True, env=os.environ)
    if done.returncode != 0:  # a new process per memory, as an agent's shell would
        raise CliFailed(done.stderr.strip()[-300:])
    return 1, [done.stdout.strip()], int("deduplicated" in done.stderr)


def writers_worker(args: argparse.Namespace) -> None:
    """One process of the campaign: writes (or searches) until the deadline."""
    spec = json.loads(Path(args.worker).read_text(encoding="utf-8"))
    out: dict[str, Any] = {"latencies": [], "ids": [], "merged": 0, "errors": []}
    store = mnemex.open(spec["db"], namespace=spec.get("namespace"))
    while time.time() < spec["start"]:
        time.sleep(0.001)
    position, done = 0, Path(spec.get("done") or "-never-")
    while time.time() < spec["deadline"] and not done.exists():
        if spec["role"] != "search" and position >= len(spec["texts"]):
            break
        began = time.perf_counter()
        try:
            used, ids, merged = write_one(store, spec, position)
        except CliFailed as exc:
            position += 1
            out["errors"].append(str(exc))
            continue
        except mnemex.MnemexError as exc:
            position += spec["role"] != "add_many"
            out["errors"].append(f"{type(exc).__name__}: {exc}"[:300])
            continue
        position += used
        out["ids"] += ids
        out["merged"] += merged
        out["latencies"].append((time.perf_counter() - began) * 1000)
    store.close()
    Path(spec["out"]).write_text(json.dumps(out), encoding="utf-8")


WRITERS_SEED = """
import json, sys, mnemex
texts = json.loads(open(sys.argv[2], encoding="utf-8").read())
with mnemex.open(sys.argv[1]) as store:
    for start in range(0, len(texts), 5_000):
        store.add_many(texts[start : start + 5_000])
"""

WRITERS_VERIFY = """
import json, sys, mnemex
ids = json.loads(open(sys.argv[2], encoding="utf-8").read())
with mnemex.open(sys.argv[1]) as store:
    found = {m.id for m in store.get(ids).memories}
    print(json.dumps({"found": len(found), "count": store.count(), "check": store.check()}))
"""


def in_process(script: str, env: dict[str, str], *argv: Path) -> str:
    """The standard output of ``script`` run by a new Python with ``argv``."""
    command = [sys.executable, "-c", script, *map(str, argv)]
    return subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout


def writers_run(args: argparse.Namespace, folder: Path, tmp: Path, src: Path) -> dict[str, Any]:
    """One campaign with the mnemex of ``src`` (this checkout's, or a baseline's)."""
    per_writer = args.bulk_rows
    texts = common.memories(folder, args.seed_rows + 8 * per_writer)
    db = tmp / "stress.db"
    env = common.child_env(src, MNEMEX_EMBEDDER="none")
    (tmp / "seed.json").write_text(json.dumps(texts[: args.seed_rows]), encoding="utf-8")
    in_process(WRITERS_SEED, env, db, tmp / "seed.json")
    pool, start = texts[args.seed_rows :], time.time() + 3.0
    procs, specs = [], []
    for n, role in enumerate((*ROLES, *("search",) * SEARCHERS)):
        own = (
            common.queries(folder)[n::SEARCHERS]
            if role == "search"
            else pool[n * per_writer : (n + 1) * per_writer]
        )
        spec = {"role": role, "texts": own, "db": str(db), "start": start, "batch": args.batch}
        spec |= {"deadline": start + args.seconds, "out": str(tmp / f"out-{n}.json")}
        (tmp / f"spec-{n}.json").write_text(json.dumps(spec), encoding="utf-8")
        worker = [sys.executable, __file__, "writers", "--worker", str(tmp / f"spec-{n}.json")]
        procs.append(subprocess.Popen(worker, env=env))
        specs.append(spec)
    load_before, loads = os.getloadavg(), []
    while any(p.poll() is None for p in procs):
        time.sleep(1.0)
        if time.time() > start:
            loads.append(os.getloadavg()[0])
    took = time.time() - start
    results = [
        (
            s["role"],
            p.returncode,
            json.loads(Path(s["out"]).read_text(encoding="utf-8"))
            if Path(s["out"]).exists()
            else None,
        )
        for s, p in zip(specs, procs, strict=True)
    ]
    acknowledged = [i for role, _, d in results if d and role != "search" for i in d["ids"]]
    (tmp / "acknowledged.json").write_text(json.dumps(acknowledged), encoding="utf-8")
    verified = json.loads(in_process(WRITERS_VERIFY, env, db, tmp / "acknowledged.json"))
    return verified | {
        "results": results,
        "acknowledged": len(acknowledged),
        "unique": len(set(acknowledged)),
        "seed": args.seed_rows,
        "took": took,
        "load_before": load_before,
        "load_max": max(loads, default=float("nan")),
        "load_mean": sum(loads) / len(loads) if loads else float("nan"),
    }


def _latency(samples: list[float]) -> str:
    if not samples:
        return "none"
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return (
        f"p50 {common.percentiles(ordered)['p50']:.0f} ms, p99 {p99:.0f} ms, max {ordered[-1]:.0f} ms "
        f"({len(ordered):,} calls)"
    )


def measures(run: dict[str, Any]) -> list[tuple[str, str]]:
    """The table's rows for one campaign."""
    results: list[tuple[str, int, dict[str, Any] | None]] = run["results"]
    by_role: dict[str, list[dict[str, Any] | None]] = {}
    for role, _, data in results:
        by_role.setdefault(role, []).append(data)

    def samples(*roles: str) -> list[float]:
        return [x for r in roles for d in by_role.get(r, []) if d for x in d["latencies"]]

    def writes(role: str) -> str:
        return " / ".join(f"{len(d['ids']) if d else 0:,}" for d in by_role[role])

    errors = [e for _, _, d in results if d for e in d["errors"]]
    crashed = sum(1 for _, code, d in results if code != 0 or d is None)
    merged = sum(int(d["merged"]) for _, _, d in results if d)
    single = samples("add", "remember")
    count, seed, check, load = run["count"], run["seed"], run["check"], run["load_before"]
    return [
        ("acknowledged writes (memories)", f"{run['acknowledged']:,}"),
        ("lost (acknowledged, not in the store)", f"{run['unique'] - run['found']:,}"),
        (
            "memories in the store after the run (seed + new)",
            f"{count:,} ({seed:,} + {count - seed:,}; "
            f"{merged:,} writes merged as duplicates by remember or mnemex add)",
        ),
        (
            "errors (any writer or searcher)",
            f"{len(errors):,}" + (f": {errors[0]}" if errors else ""),
        ),
        ("processes that crashed", str(crashed)),
        ("writes per process: add / remember", f"{writes('add')} / {writes('remember')}"),
        (
            "single writes per second per process (API)",
            f"{len(single) / 4 / max(run['took'], 1e-9):.1f}",
        ),
        ("add_many rows per process", writes("add_many")),
        ("mnemex add (CLI) writes per process", writes("cli")),
        ("single add latency (API add + remember)", _latency(single)),
        ("add_many latency per batch", _latency(samples("add_many"))),
        ("mnemex add latency (new process each)", _latency(samples("cli"))),
        ("search latency during the writes", _latency(samples("search"))),
        ("campaign time (until the last process stopped)", f"{run['took']:.0f} s"),
        ("`check` after the run", "ok" if check["ok"] else f"PROBLEMS {check['problems']}"),
        (
            "load average (1 min) before / mean / max during",
            f"{load[0]:.1f} / {run['load_mean']:.1f} / {run['load_max']:.1f} on {os.cpu_count()} cores",
        ),
    ]


def writers_report(
    args: argparse.Namespace, runs: list[tuple[str, dict[str, Any]]], took: float
) -> str:
    tables = [measures(r) for _, r in runs]
    baseline = f" --baseline-src {args.baseline_src}" if args.baseline_src else ""
    return "\n".join(
        [
            "## Writers side by side: 8 processes write, 2 search",
            "",
            f"`python benchmarks/stress.py writers --seconds {args.seconds:g} --seed-rows "
            f"{args.seed_rows} --bulk-rows {args.bulk_rows} --batch {args.batch}{baseline}` "
            f"on {common.machine()}.",
            f"A store seeded with {args.seed_rows:,} memories; for {args.seconds:g} s, 2 `add`, "
            f"2 `remember`, 2 `add_many` (batches of {args.batch}, {args.bulk_rows:,} rows "
            "each at most) and 2 `mnemex add` processes write while 2 processes search; "
            "lexical only, duplicate check on, default `busy_timeout` (each version's own). "
            f"{took:.0f} s in all. The machine is shared with other work: its load is in "
            "the table. The baseline column, when there is one, is the same campaign run "
            "just before with the mnemex of `--baseline-src`.",
            "Target (issue 15): 0 errors, 0 lost, every writer finishes, single add p99 "
            "≤ 250 ms, search p99 ≤ 100 ms. Measured when the issue was filed: 367 errors, "
            "single add p50 132 ms, p99 7.5 s, max 25.7 s.",
            "",
            f"| measure | {' | '.join(name for name, _ in runs)} |",
            "| --- |" + " --- |" * len(runs),
            *(
                f"| {name} | " + " | ".join(t[i][1] for t in tables) + " |"
                for i, (name, _) in enumerate(tables[0])
            ),
        ]
    )


def writers_main(args: argparse.Namespace) -> None:
    if args.worker:
        return writers_worker(args)
    folder = common.data_dir(args.data)
    began = time.time()
    srcs = ([("baseline", Path(args.baseline_src))] if args.baseline_src else []) + [
        ("this checkout", common.SRC)
    ]
    runs = []
    for name, src in srcs:
        with tempfile.TemporaryDirectory(prefix="mnemex-stress-") as tmp:
            runs.append((name, writers_run(args, folder, Path(tmp), src)))
    common.publish(
        "stress_writers",
        writers_report(args, runs, time.time() - began),
        args.no_write,
        RELIABILITY,
    )


# -- team: writer processes on one store, per engine (section bench_team of RESULTS.md) ----

SHARED_EVERY = 50  # every 50th write of a writer is a fact all writers write


def team_texts(pool: list[str], writer: int, writes: int) -> list[str]:
    """A writer's texts: its own slice of the pool, with the shared facts in place."""
    own = iter(pool[writer * writes : (writer + 1) * writes])
    return [
        f"shared fact {n // SHARED_EVERY}: the team agreed on decision {n // SHARED_EVERY}"
        if n % SHARED_EVERY == SHARED_EVERY - 1
        else next(own)
        for n in range(writes)
    ]


def team_run(db: str, args: argparse.Namespace, folder: Path, tmp: Path) -> dict[str, Any]:
    """Seed ``db``, run the writers and searchers, verify; the figures of one engine."""
    texts = common.memories(folder, args.seed + args.writers * args.writes + args.batched)
    with mnemex.open(db, namespace="team") as store:
        store.add_many(texts[: args.seed])
    pool, start, done = texts[args.seed :], time.time() + 3.0, tmp / "writers-done"
    done.unlink(missing_ok=True)
    asked, procs, outs = common.queries(folder), [], []
    env = {**os.environ, "MNEMEX_EMBEDDER": "none"}
    for n in range(args.writers + args.searchers):
        own = team_texts(pool, n, args.writes) if n < args.writers else (asked * 50)[n::2]
        spec = {"role": "team" if n < args.writers else "search", "texts": own, "db": db}
        spec |= {"start": start, "deadline": start + 1e9, "done": str(done), "limit": 10}
        spec |= {"namespace": "team", "out": str(tmp / f"out-{n}.json")}
        (tmp / f"spec-{n}.json").write_text(json.dumps(spec), encoding="utf-8")
        worker = [sys.executable, __file__, "writers", "--worker", str(tmp / f"spec-{n}.json")]
        procs.append(subprocess.Popen(worker, env=env))
        outs.append(Path(spec["out"]))
    loads = []
    while any(proc.poll() is None for proc in procs[: args.writers]):
        time.sleep(1.0)
        loads.append(os.getloadavg()[0])
    took = time.time() - start
    done.touch()
    for proc in procs[args.writers :]:
        proc.wait()
    results = [json.loads(out.read_text(encoding="utf-8")) for out in outs]
    writes, searches = results[: args.writers], results[args.writers :]
    acknowledged = {i for out in writes for i in out["ids"]}
    shared = len({t for t in team_texts(pool, 0, args.writes) if t.startswith("shared fact")})
    with mnemex.open(db, namespace="team") as store:
        found = {m.id for m in store.get(sorted(acknowledged)).memories}
        count = store.count()
        batched = team_batched(store, pool[args.writers * args.writes :], args.batch)
    return {
        "batched": batched,
        "writes": sum(len(out["latencies"]) for out in writes),
        "errors": [e for out in writes for e in out["errors"]][:5],
        "error_count": sum(len(out["errors"]) for out in writes),
        "search_errors": sum(len(out["errors"]) for out in searches),
        "lost": len(acknowledged - found),
        "count": count,
        "expected": args.seed + args.writers * (args.writes - shared) + shared,
        "merged": sum(out["merged"] for out in writes),
        "took": took,
        "write_ms": common.percentiles([x for out in writes for x in out["latencies"]]),
        "search_ms": common.percentiles([x for out in searches for x in out["latencies"]] or [0.0]),
        "searches": sum(len(out["latencies"]) for out in searches),
        "procs": [p.returncode for p in procs],
        "load": max(loads, default=0.0),
    }


def team_batched(store: mnemex.Store, texts: list[str], batch: int) -> dict[str, Any]:
    """``texts`` written by ``add_many`` in batches of ``batch`` after the single writes,
    one process alone: rows per second (all, and the median batch's), every id found."""
    rates, ids, began = [], [], time.perf_counter()
    for at in range(0, len(texts), batch):
        part = texts[at : at + batch]
        started = time.perf_counter()
        ids += store.add_many(part)
        rates.append(len(part) / (time.perf_counter() - started))
    took = time.perf_counter() - began
    found = len({m.id for m in store.get(sorted(set(ids))).memories}) if ids else 0
    rates.sort()
    median = rates[len(rates) // 2] if rates else 0.0
    return {
        "rows": len(texts),
        "per_s": len(texts) / max(took, 1e-9),
        "median_batch_per_s": median,
        "lost": len(set(ids)) - found,
        "load": os.getloadavg()[0],
    }


def team_main(args: argparse.Namespace) -> None:
    folder, rows, load = common.data_dir(args.data), [], 0.0
    for engine in args.engines.split(","):
        with (
            tempfile.TemporaryDirectory(prefix=f"mnemex-team-{engine}-") as tmp,
            common.pg_server(Path(tmp) / "pgdata")
            if engine == "postgres"
            else contextlib.nullcontext() as server,
        ):
            db = common.fresh_database(server.url, "team") if server else str(Path(tmp) / "team.db")
            r = team_run(db, args, folder, Path(tmp))
        print(engine, json.dumps(r, indent=1))
        w, s, b = r["write_ms"], r["search_ms"], r["batched"]
        rows.append(
            f"| {engine} | {r['writes']:,} | {r['writes'] / r['took']:,.0f}/s | {r['error_count']} | "
            f"{r['lost']} | {r['count'] - r['expected']:+d} | {w['p50']:.1f} / {w['p95']:.1f} ms | "
            f"{r['searches']:,} | {s['p50']:.1f} / {s['p95']:.1f} ms | "
            f"{b['per_s']:,.0f}/s ({b['median_batch_per_s']:,.0f}/s), {b['lost']} lost |"
        )
        load = max(load, float(r["load"]))
    body = "\n".join(
        [
            *common.heading(
                "## A team on one store: concurrent writers per engine (`benchmarks/stress.py team`)",
                f"; load average during the writes up to {load:.1f}",
            ),
            f"{args.seed:,} memories first, then {args.writers} processes × {args.writes:,} "
            f"single writes through the Python API (`Store.add`; every {SHARED_EVERY}th write a "
            f"`Store.remember` of a fact all {args.writers} write at once), while "
            f"{args.searchers} processes search (limit 10). Lexical only. *Lost*: acknowledged "
            "and missing; *doubled*: memories beyond seed + own texts + one per shared fact. "
            f"*Batched*: then {args.batched:,} more memories by `add_many` in batches of "
            f"{args.batch:,}, one process alone (all rows per second, and the median "
            "batch's).",
            "",
            "| engine | writes | writes/s (all writers) | errors | lost | doubled | "
            "write p50 / p95 | searches | search p50 / p95 | batched |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
            *rows,
            "",
            "PostgreSQL: 16 + pgvector 0.6 from `pgserver` on the same machine (Unix socket), "
            "each process with its own pool. Before and after the PostgreSQL write changes: "
            'RESULTS.md History, "PostgreSQL writes (issue 30)".',
        ]
    )
    common.publish("bench_team", body, args.no_write)


# -- kill: SIGKILL a writer at a random moment -----------------------------------------


OPERATIONS = ("add_many", "import", "reindex", "sync")

CHILD = """
import json, os, sys, mnemex
from pathlib import Path
from mnemex.transfer import import_jsonl
op, db, pool_path, batch, start, folder = sys.argv[1:7]
batch, start = int(batch), int(start)
texts = json.loads(Path(pool_path).read_text(encoding="utf-8"))
store = mnemex.open(db, embedder=None)
print("ready", flush=True)
n = 0
while True:
    if op == "add_many":
        chunk = texts[start + n * batch : start + (n + 1) * batch]
        if not chunk:
            break
        ids = store.add_many(chunk)
        print("ids " + json.dumps(list(ids)), flush=True)
    elif op == "import":
        lines = [
            json.dumps({"id": f"k{start}-{n}-{i}", "content": t})
            for i, t in enumerate(texts[start + n * batch : start + (n + 1) * batch])
        ]
        if not lines:
            break
        report = import_jsonl(store, lines, namespace="imported")
        print("ids " + json.dumps(list(report.ids)), flush=True)
    elif op == "reindex":
        store.reindex(force=True)
        print("reindexed", flush=True)
    else:
        page = Path(folder) / "memory" / f"page-{start}-{n % 20}.md"
        body = "\\n\\n".join(f"## Note {j}\\n\\n{texts[(start + n * 7 + j) % len(texts)]}" for j in range(8))
        page.write_text(f"# Page {n}\\n\\n{body}\\n", encoding="utf-8")
        store.sync(folder, namespace="ws")
        print("synced", flush=True)
    n += 1
"""


KILL_SEED = """
import json, sys, mnemex
texts = json.load(open(sys.argv[2], encoding="utf-8"))
with mnemex.open(sys.argv[1], embedder=None) as store:
    store.add_many(texts)
    store.sync(sys.argv[3], namespace="ws")
"""


def kill_seed(db: Path, texts: list[str], workspace: Path, env: dict[str, str]) -> None:
    (workspace / "memory").mkdir(parents=True)
    for i in range(20):
        (workspace / "memory" / f"seed-{i}.md").write_text(
            f"# Seed {i}\n\n" + "\n\n".join(texts[i * 10 : i * 10 + 10]) + "\n", encoding="utf-8"
        )
    seed_file = db.parent / "seed.json"
    seed_file.write_text(json.dumps(texts), encoding="utf-8")
    in_process(KILL_SEED, env, db, seed_file, workspace)


def one_kill(
    argv: list[Any], args: argparse.Namespace, rng: random.Random, env: dict[str, str]
) -> dict[str, Any]:
    """Start the child with ``argv`` (operation, store, pool, batch, first text, workspace),
    kill it after a random delay, return what it acknowledged."""
    argv.insert(3, args.batch)
    command = [sys.executable, "-c", CHILD, *map(str, argv)]
    child = subprocess.Popen(command, stdout=PIPE, stderr=PIPE, text=True, env=env)
    assert child.stdout is not None
    ready = child.stdout.readline().strip() == "ready"
    delay = rng.uniform(0, args.max_delay)
    time.sleep(delay)
    child.send_signal(signal.SIGKILL)
    out, err = child.communicate()
    ids: list[str] = []
    steps = 0
    for line in out.splitlines():
        with contextlib.suppress(json.JSONDecodeError):  # a line cut by the kill: not acknowledged
            ids.extend(json.loads(line[4:]) if line.startswith("ids ") else [])
            steps += 1
    finished = child.returncode != -signal.SIGKILL
    return {
        "ready": ready,
        "ids": ids,
        "steps": steps,
        "finished": finished,
        "stderr": err.strip()[-300:],
    }


def verify(db: Path, op: str, acknowledged: list[str], workspace: Path) -> dict[str, Any]:
    with mnemex.open(db, embedder=None) as store:
        check = store.check()
        namespace = "imported" if op == "import" else None
        missing = store.get(acknowledged, namespace=namespace).missing if acknowledged else ()
        recovery = ""
        if op == "sync":
            try:
                report = store.sync(workspace, namespace="ws")
                if report.problems:
                    recovery = f"problems: {report.problems}"[:200]
            except mnemex.MnemexError as exc:
                recovery = f"{type(exc).__name__}: {exc}"[:200]
        return {"check": check, "missing": len(missing), "recovery": recovery}


def campaign(args: argparse.Namespace, texts: list[str], tmp: Path) -> dict[str, Any]:
    env = common.child_env(MNEMEX_EMBEDDER="none")
    rng = random.Random(args.seed)
    seeded = texts[: args.seed_rows]
    pool = tmp / "pool.json"
    pool.write_text(json.dumps(texts[args.seed_rows :]), encoding="utf-8")
    stores = {}
    for op in OPERATIONS:
        folder = tmp / op
        folder.mkdir()
        db, workspace = folder / "kill.db", folder / "workspace"
        kill_seed(db, seeded, workspace, env)
        stores[op] = (db, workspace)
    acknowledged: dict[str, list[str]] = {op: [] for op in OPERATIONS}
    per_op: dict[str, dict[str, int]] = {
        op: {"runs": 0, "problems": 0, "lost": 0, "acknowledged": 0, "steps": 0, "unrecovered": 0}
        for op in OPERATIONS
    }
    findings: list[str] = []
    next_start = 0
    began = time.time()
    runs = 0
    while runs < args.runs and time.time() - began < args.seconds:
        op = OPERATIONS[runs % len(OPERATIONS)]
        db, workspace = stores[op]
        result = one_kill([op, db, pool, next_start, workspace], args, rng, env)
        next_start += args.batch * 40  # fresh texts (and ids) for every run
        if next_start + args.batch * 40 > len(texts) - args.seed_rows:
            next_start = 0
        acknowledged[op].extend(result["ids"])
        checked = verify(db, op, acknowledged[op], workspace)
        problems = checked["check"]["problems"]
        counted = {"runs": 1, "steps": result["steps"], "acknowledged": len(result["ids"])}
        counted |= {"lost": checked["missing"], "problems": len(problems)}
        for key, value in (counted | {"unrecovered": bool(checked["recovery"])}).items():
            per_op[op][key] += value
        found = [f"check: {p}" for p in problems]
        found += [f"{checked['missing']} acknowledged ids missing"] * bool(checked["missing"])
        found += [f"sync after the kill: {checked['recovery']}"] * bool(checked["recovery"])
        failed = result["finished"] or not result["ready"]
        found += [f"child failed before the kill: {result['stderr']}"] * failed
        for message in (f"run {runs} ({op}): {f}" for f in found):
            findings.append(message)
            print(message, flush=True)
        runs += 1
        if runs % 10 == 0:
            print(f"{runs} kills, {time.time() - began:.0f} s", flush=True)
    return {"per_op": per_op, "findings": findings, "runs": runs, "took": time.time() - began}


def kill_report(args: argparse.Namespace, result: dict[str, Any]) -> str:
    per_op = result["per_op"]
    rows = [
        f"| {op} | {s['runs']} | {s['steps']:,} | {s['acknowledged']:,} | {s['problems']} | "
        f"{s['lost']} | {s['unrecovered'] if op == 'sync' else '-'} |"
        for op, s in per_op.items()
    ]
    total = {
        k: sum(s[k] for s in per_op.values())
        for k in ("runs", "steps", "acknowledged", "problems", "lost")
    }
    lines = [
        "## SIGKILL during writes",
        "",
        f"`python benchmarks/stress.py kill --runs {args.runs} --seconds {args.seconds:g} "
        f"--max-delay {args.max_delay:g} --batch {args.batch} --seed-rows {args.seed_rows} "
        f"--seed {args.seed}` on {common.machine()}.",
        f"{result['runs']} runs in {result['took']:.0f} s: each starts a process that writes a store "
        f"seeded with {args.seed_rows:,} real memories and a 20-file markdown workspace "
        f"(`add_many` / `import_jsonl` of {args.batch} rows at a time, `reindex(force=True)`, "
        "or edit-a-page-then-`sync`), SIGKILLs it at a random moment "
        f"(0-{args.max_delay:g} s after it opened the store), then runs `check()` and looks up "
        "every id acknowledged (printed by the child after its commit) so far on that store. "
        "Target: 0 problems, 0 lost, every sync after a kill succeeds.",
        "",
        "| operation | kills | steps completed before the kills | ids acknowledged | "
        "`check` problems | acknowledged ids lost | sync after the kill failed |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        *rows,
        f"| all | {total['runs']} | {total['steps']:,} | {total['acknowledged']:,} | "
        f"{total['problems']} | {total['lost']} | {per_op['sync']['unrecovered']} |",
    ]
    if result["findings"]:
        lines += ["", "Found:", "", *(f"- {f}" for f in result["findings"][:20])]
    return "\n".join(lines)


def kill_main(args: argparse.Namespace) -> None:
    texts = common.memories(common.data_dir(args.data), args.seed_rows + 40_000)
    with tempfile.TemporaryDirectory(prefix="mnemex-kill-") as tmp:
        result = campaign(args, texts, Path(tmp))
    common.publish("stress_kill", kill_report(args, result), args.no_write, RELIABILITY)


# -- fuzz: the public API and imports with hostile input --------------------------------


SHOWN = 5

_TEXTS = ["deploy", "NEAR(a b)", '"', "*", "memory 1", "the deploy to production", "x"]
_IDS = ["m0", "m1", "o1", "nope"]
_TIMES = ["2025-01-01", "7d", "1700000000", "0999-01-01", datetime(2020, 5, 1, tzinfo=UTC)]
_LABELS: list[Any] = [["fact"], ["t"], ["fact", "t"], [], "fact", "t"]


_API: list[Any] = []  # the generators of tests/test_hostile.py: _load_hostile()
_SPECIALS: list[Any] = []
HOSTILE_LINES: list[Any] = []


def _load_hostile() -> None:
    """The fuzz campaign's generators (imported for it alone: hypothesis is slow to import,
    and the writers' processes must start within their seconds)."""
    global _API, _SPECIALS, HOSTILE_LINES
    from tests.test_hostile import _API, _SPECIALS, HOSTILE_LINES


def _text(rng: random.Random) -> str:
    if rng.random() < 0.5:
        return rng.choice(_TEXTS)
    return "".join(chr(rng.randint(1, 0x2FFF)) for _ in range(rng.randint(1, 20)))


_PLAUSIBLE: dict[str, Any] = {  # name -> rng -> a value of the right type
    **dict.fromkeys(
        ("content", "query", "task", "subject", "predicate", "object", "entity", "source"), _text
    ),
    **dict.fromkeys(("id", "around", "source_memory"), lambda r: r.choice(_IDS)),
    "ids": lambda r: r.sample(_IDS, r.randint(1, 3)) if r.random() < 0.7 else r.choice(_IDS),
    **dict.fromkeys(
        ("limit", "before", "after", "max_memories", "relations", "batch"),
        lambda r: r.randint(0, 60),
    ),
    "budget_tokens": lambda r: r.randint(0, 2_000),
    **dict.fromkeys(
        ("since", "until", "start", "end", "created_at", "now"), lambda r: r.choice(_TIMES)
    ),
    **dict.fromkeys(("kinds", "tags"), lambda r: r.choice(_LABELS)),
    "kind": lambda r: r.choice(["fact", "note"]),
    "namespace": lambda r: r.choice(["default", "other", ALL, None]),
    "mode": lambda r: r.choice(["lexical", "vector", "hybrid", None]),
    "fusion": lambda r: r.choice(["rrf", "weighted", None]),
    "token_counter": lambda r: r.choice(["chars", None]),
    "weights": lambda r: (r.random(), r.random()),
    "confidence": lambda r: r.choice([r.random(), True, False]),
    "pinned": lambda r: r.random() < 0.5,
    "metadata": lambda r: {_text(r)[:3]: r.randint(-5, 5) for _ in range(r.randint(0, 2))},
    "items": lambda r: [
        _text(r) if r.random() < 0.5 else {"content": _text(r)} for _ in range(r.randint(0, 3))
    ],
}


def hostile(rng: random.Random, depth: int = 0) -> Any:
    """A scalar of any type (often a special) or a small list, dict or tuple of them."""
    roll = rng.random()
    if roll < 0.7 or depth > 2:
        return rng.choice(
            [
                None,
                rng.random() < 0.5,
                rng.randint(-(2**70), 2**70),
                rng.choice([rng.uniform(-1e9, 1e9), math.nan, -math.inf, 0.0, 1e308]),
                "".join(chr(rng.randint(1, 0x10FFFF)) for _ in range(rng.randint(0, 12))),
                rng.randbytes(rng.randint(0, 6)),
                rng.choice(_SPECIALS),
                rng.choice(_SPECIALS),
            ]
        )
    if roll < 0.8:
        return [hostile(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if roll < 0.9:
        return {str(hostile(rng, depth + 1))[:3]: hostile(rng, depth + 1) for _ in range(2)}
    return (hostile(rng, depth + 1), hostile(rng, depth + 1))


def fuzz_seed(store: mnemex.Store) -> None:
    for i in range(3):
        store.add(f"memory {i} about deploys", id=f"m{i}", tags=["t"], kind="fact")
    store.add("another namespace's memory", id="o1", namespace="other")
    store.relate("api", "uses", "postgres", source_memory="m0")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def fuzz_calls(
    store: mnemex.Store, rng: random.Random, calls: int, seconds: float
) -> dict[str, Any]:
    signatures = {
        m: [
            (name, p)
            for name, p in inspect.signature(getattr(store, m)).parameters.items()
            if name != "embed" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
        for m in _API
    }
    undocumented: list[str] = []
    kinds: dict[str, int] = {}
    mnemex_errors = done = broken = 0
    deadline = time.time() + seconds
    while done < calls and time.time() < deadline:
        method = rng.choice(_API)
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        for name, parameter in signatures[method]:
            required = parameter.default is inspect.Parameter.empty
            if not required and rng.random() < 0.5:
                continue
            plausible = name in _PLAUSIBLE and rng.random() < 0.75
            value = _PLAUSIBLE[name](rng) if plausible else hostile(rng)
            if parameter.kind is parameter.POSITIONAL_ONLY or (
                required and parameter.kind is parameter.POSITIONAL_OR_KEYWORD
            ):
                args.append(value)
            else:
                kwargs[name] = value
        done += 1
        try:
            result = getattr(store, method)(*args, **kwargs)
            if inspect.isgenerator(result):
                for _ in result:
                    pass
            continue
        except mnemex.MnemexError:
            mnemex_errors += 1
        except Exception as exc:
            key = f"{method}: {type(exc).__name__}: {str(exc)[:100]}"
            kinds[key] = kinds.get(key, 0) + 1
            if len(undocumented) < SHOWN * 4:
                frame = traceback.extract_tb(exc.__traceback__)[-1]
                undocumented.append(
                    f"store.{method}(*{_short(args)}, **{_short(kwargs)}) -> "
                    f"{type(exc).__name__}: {str(exc)[:160]} "
                    f"(at {Path(frame.filename).name}:{frame.lineno})"
                )
        try:  # after any error the store must still work
            store.search("memory deploys", namespace=ALL)
        except Exception:
            broken += 1
    return {
        "calls": done,
        "mnemex_errors": mnemex_errors,
        "undocumented": sum(kinds.values()),
        "kinds": kinds,
        "examples": undocumented,
        "broken": broken,
    }


def calls_in_own_store(seed_value: int, calls: int, seconds: float) -> dict[str, Any]:
    """:func:`fuzz_calls` on a fresh store of its own, with its own seed."""
    _load_hostile()
    with (
        tempfile.TemporaryDirectory(prefix="mnemex-fuzz-") as tmp,
        mnemex.open(Path(tmp) / "fuzz.db", embedder=None) as store,
    ):
        fuzz_seed(store)
        return fuzz_calls(store, random.Random(seed_value), calls, seconds)


def merged(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures of several :func:`fuzz_calls` runs, added up."""
    total: dict[str, Any] = {"kinds": {}, "examples": []}
    for part in parts:
        for key in ("calls", "mnemex_errors", "undocumented", "broken"):
            total[key] = total.get(key, 0) + part[key]
        for kind, count in part["kinds"].items():
            total["kinds"][kind] = total["kinds"].get(kind, 0) + count
        total["examples"] += part["examples"]
    return total


def _bad_line(rng: random.Random, good: str) -> str | bytes:
    roll = rng.randrange(5)
    if roll == 0:
        return rng.choice(HOSTILE_LINES)
    if roll == 1:
        return good[: rng.randint(1, len(good) - 1)]  # truncated JSON
    if roll == 2:
        return b'{"content": "' + rng.randbytes(4) + b'\xff\xfe"}'  # invalid UTF-8
    if roll == 3:
        return json.dumps({"content": rng.choice([5, None, ["a"], {"a": 1}, True, ""])})
    field = rng.choice(["confidence", "tags", "created_at"])  # a single tag text is valid
    value = rng.choice([math.inf, {"x": 1}, 10**30])  # and so are negative epoch seconds
    return json.dumps({"content": "bad field", field: value})


def fuzz_imports(store: mnemex.Store, rng: random.Random, files: int) -> dict[str, Any]:
    aborted = lost = unreported = misreported = good_total = bad_total = 0
    examples: list[str] = []
    for f in range(files):
        n_good = rng.choice(
            [rng.randint(1, 300), rng.randint(IMPORT_BATCH - 50, IMPORT_BATCH + 500)]
        )
        good = [
            json.dumps({"id": f"f{f}-{i}", "content": f"file {f} good memory {i} {rng.random()}"})
            for i in range(n_good)
        ]
        lines: list[str | bytes] = list(good)
        for _ in range(rng.randint(1, 12)):
            lines.insert(rng.randint(0, len(lines)), _bad_line(rng, rng.choice(good)))
        good_set = set(good)
        bad_at = [n for n, line in enumerate(lines, 1) if line not in good_set]
        good_total += n_good
        bad_total += len(bad_at)
        payload = [line if isinstance(line, bytes) else line.encode("utf-8") for line in lines]
        try:
            report = import_jsonl(store, payload, namespace=f"imp{f % 7}")
        except Exception as exc:
            aborted += 1
            if len(examples) < SHOWN:
                examples.append(f"file {f}: {type(exc).__name__}: {str(exc)[:160]}")
        else:
            reported = sorted(e.line for e in report.errors)
            unreported += len(set(bad_at) - set(reported))
            misreported += len(set(reported) - set(bad_at))
            if reported != bad_at and len(examples) < SHOWN:
                examples.append(f"file {f}: bad lines {bad_at[:12]}, reported {reported[:12]}")
        ids = [f"f{f}-{i}" for i in range(n_good)]
        lost += len(store.get(ids, namespace=f"imp{f % 7}").missing)
    return {
        "files": files,
        "good": good_total,
        "bad": bad_total,
        "aborted": aborted,
        "lost": lost,
        "unreported": unreported,
        "misreported": misreported,
        "examples": examples,
    }


def fuzz_report(
    args: argparse.Namespace, calls: dict[str, Any], imports: dict[str, Any], took: float
) -> str:
    kinds = sorted(calls["kinds"].items(), key=lambda kv: -kv[1])
    rows = [
        ("random API calls", f"{calls['calls']:,}"),
        ("answered with a MnemexError", f"{calls['mnemex_errors']:,}"),
        ("undocumented exceptions (not a MnemexError)", f"{calls['undocumented']:,}"),
        ("distinct undocumented (method, exception, message)", f"{len(kinds):,}"),
        ("calls after which the store could not search", f"{calls['broken']:,}"),
        ("import files", f"{imports['files']:,}"),
        ("good / hostile lines in them", f"{imports['good']:,} / {imports['bad']:,}"),
        ("imports aborted", f"{imports['aborted']:,}"),
        ("good lines lost", f"{imports['lost']:,}"),
        (
            "bad lines not reported / good lines reported bad",
            f"{imports['unreported']:,} / {imports['misreported']:,}",
        ),
        ("time", f"{took:.0f} s"),
    ]
    lines = [
        "## Fuzzed API calls and imports",
        "",
        f"`python benchmarks/stress.py fuzz --calls {args.calls} --seconds {args.seconds:g} "
        f"--imports {args.imports} --seed {args.seed} --jobs {args.jobs}` on {common.machine()}.",
        "Random calls of the public `Store` methods (the generators of "
        "`tests/test_hostile.py`, plain `random`, lexical only), each parameter of the right "
        "type 3 times in 4 and hostile otherwise; import files of good lines with 1-12 "
        "hostile ones at random places (some files span two import batches). "
        "Target: 0 undocumented exceptions, 0 aborted imports, 0 good lines lost, every bad "
        "line reported.",
        "",
        "| measure | value |",
        "| --- | --- |",
        *(f"| {name} | {value} |" for name, value in rows),
    ]
    if kinds:
        lines += ["", "Undocumented exceptions (count, method: exception):", ""]
        lines += [f"- {count:,} × `{key}`" for key, count in kinds[:20]]
        lines += ["", "First calls that raised them:", ""]
        lines += [f"- `{example}`" for example in calls["examples"][:SHOWN]]
    if imports["examples"]:
        lines += ["", "Imports that went wrong:", ""]
        lines += [f"- {example}" for example in imports["examples"]]
    return "\n".join(lines)


def fuzz_main(args: argparse.Namespace) -> None:
    _load_hostile()
    began = time.time()
    jobs = max(1, args.jobs)
    shares = [
        (args.seed + i, args.calls // jobs + (i < args.calls % jobs), args.seconds)
        for i in range(jobs)
    ]
    if jobs == 1:
        calls = calls_in_own_store(*shares[0])
    else:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(jobs) as pool:
            calls = merged(list(pool.map(calls_in_own_store, *zip(*shares, strict=True))))
    rng = random.Random(args.seed)
    with (
        tempfile.TemporaryDirectory(prefix="mnemex-fuzz-") as tmp,
        mnemex.open(Path(tmp) / "import.db", embedder=None) as store,
    ):
        imports = fuzz_imports(store, rng, args.imports)
    body = fuzz_report(args, calls, imports, time.time() - began)
    common.publish("stress_fuzz", body, args.no_write, RELIABILITY)


def _writers_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--seed-rows", type=int, default=20_000)
    parser.add_argument("--bulk-rows", type=int, default=10_000, help="rows per writer at most")
    parser.add_argument("--batch", type=int, default=500, help="rows per add_many call")
    parser.add_argument("--data", help="benchmark data folder (see common.py)")
    parser.add_argument(
        "--baseline-src", help="also run the campaign with the mnemex of this src folder, first"
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)


def _team_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--writes", type=int, default=10_000, help="writes per writer")
    parser.add_argument("--searchers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=5_000, help="memories written first")
    parser.add_argument("--engines", default="sqlite,postgres")
    parser.add_argument("--batched", type=int, default=10_000, help="add_many rows after")
    parser.add_argument("--batch", type=int, default=1_000, help="rows per add_many call")
    parser.add_argument("--data", help="benchmark data folder (see common.py)")


def _kill_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=3600.0, help="stop after this")
    parser.add_argument("--max-delay", type=float, default=2.0, help="kill within this")
    parser.add_argument("--batch", type=int, default=200, help="rows per add_many / import")
    parser.add_argument("--seed-rows", type=int, default=5_000)
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--data", help="benchmark data folder (see common.py)")


def _fuzz_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--seconds", type=float, default=3600.0, help="stop the calls after this")
    parser.add_argument("--imports", type=int, default=200, help="import files")
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument(
        "--jobs", type=int, default=1, help="processes, each with its own store and seed"
    )


CAMPAIGNS = {"writers": _writers_args, "team": _team_args, "kill": _kill_args, "fuzz": _fuzz_args}
MAINS = {"writers": writers_main, "team": team_main, "kill": kill_main, "fuzz": fuzz_main}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    campaigns = parser.add_subparsers(dest="campaign", required=True)
    for name, add in CAMPAIGNS.items():
        sub = campaigns.add_parser(name)
        sub.add_argument("--no-write", action="store_true", help="print, do not touch the results")
        add(sub)
    args = parser.parse_args()
    MAINS[args.campaign](args)


if __name__ == "__main__":
    main()
