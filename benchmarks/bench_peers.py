"""mnemex beside the search of the agent-memory tools people use, in one run, on the same
memories, vectors and queries: latency per query and quality.

    python benchmarks/bench_peers.py [--size 100000] [--systems NAME,...] [--data DIR]
        [--no-write]

A peer too slow to build at 100,000 memories runs at a smaller ``--size`` with mnemex
beside it (each size writes a section of its own).

The memories: SciFact's 5,183 abstracts (title and text, one memory each) and
``common.memories`` up to ``--size`` (none holding a sentence of an abstract that
a test claim names). The queries: SciFact's 300 test claims, after 20 train claims
as warm-up. One vector per memory from the local model (all-MiniLM-L6-v2 int8,
``common.real_embeddings``, cached), given to every system: each one's embedding
function answers from this table, so no system loads a model and **the query
embedding is excluded for every system alike** (its own cost, the same for all, is
printed beside). Each system runs in a process of its own, a peer in its own venv
(``make .venv-peers``), this file being its runner (``--serve``): it builds or
reopens its index under benchmarks/.cache/peers-SIZE, then answers the queries sent
on its input, timing each search call. The systems take turns query by query, in
a rotating order (the machine is shared). recall@10 and nDCG@10 against SciFact's
labels (a hit on an abstract judged relevant; ir-measures, as ``mnemex eval``).

- mnemex hybrid: ``store.search(q, 10)`` with the default settings (a query it corrects,
  a misspelled word, is embedded as corrected: that vector from the model, before the
  timing); mnemex lexical: the same store, ``mode="lexical"``.
- memsearch: ``MemSearch.search`` (Milvus Lite: dense FLAT cosine + BM25, RRF),
  its chunks written through its store with the table's vectors.
- basic-memory: its SQLite search repository, hybrid (its default with vectors:
  FTS5 + sqlite-vec), rows and vector chunks written through it; Python's
  sqlite3 here cannot load extensions, so its runner swaps in pysqlite3.
- txtai: ``Embeddings(hybrid=True, content=True)``, external vectors (faiss
  and BM25, its defaults).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import common

LIMIT, WARM = 10, 20
SYSTEMS = {  # name: the venv that runs it
    "mnemex hybrid": ".venv",
    "mnemex lexical": ".venv",
    "memsearch": ".venv-peers-memsearch",
    "basic-memory": ".venv-peers-basic",
    "txtai": ".venv-peers-txtai",
}


# -- the runners, one process each, in the system's own venv --------------------------------


def serve(system: str, work: Path) -> None:
    import numpy as np

    texts = json.loads((work / "texts.json").read_text(encoding="utf-8"))
    qs = json.loads((work / "queries.json").read_text(encoding="utf-8"))
    vectors, qvectors = np.load(work / "vectors.npy"), np.load(work / "qvectors.npy")
    rows = {t: vectors[i] for i, t in enumerate(texts)} | {q: qvectors[i] for i, q in enumerate(qs)}
    began = time.perf_counter()
    search = RUNNERS[system](work, texts, vectors, rows)
    print(json.dumps({"build_s": time.perf_counter() - began}), flush=True)
    for line in sys.stdin:
        q = json.loads(line)
        began = time.perf_counter()
        ids = search(q)
        print(json.dumps({"ms": (time.perf_counter() - began) * 1000, "ids": ids}), flush=True)


def built(work: Path, name: str, build) -> None:  # type: ignore[no-untyped-def]
    """Build an index once (both mnemex runners share theirs: the other one waits)."""
    import fcntl

    with open(work / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (work / f"{name}.built").exists():
            build()
            (work / f"{name}.built").touch()


def run_mnemex(work: Path, texts, vectors, rows, mode: str | None):  # type: ignore[no-untyped-def]
    import unicodedata

    import mnemex

    meta = json.loads((work / "meta.json").read_text(encoding="utf-8"))
    db = work / "mnemex.db"
    built(work, "mnemex", lambda: common.build_sqlite(db, texts, vectors, meta["model_id"]))
    # A query mnemex corrects is embedded as corrected, by the model (common.Precomputed).
    embedder = common.Precomputed(meta["model_id"], rows) if mode is None else None
    if embedder is not None:  # the corrected queries' vectors, before any timing, by another store
        with mnemex.open(db, embedder=embedder) as store:
            for q in json.loads((work / "queries.json").read_text(encoding="utf-8")):
                store.search(q, LIMIT)
    store = mnemex.open(db, embedder=embedder, query_timeout=60.0)  # a table lookup: never late
    position = {unicodedata.normalize("NFC", t.strip()): i for i, t in enumerate(texts)}
    ids = {
        k: position[c] for k, c in store.session.conn.execute("SELECT id, content FROM memories")
    }

    def search(q: str) -> list[int]:
        result = store.search(q, LIMIT, mode=mode)
        assert result.mode_used == (mode or "hybrid"), (q, result.notes)
        return [ids[h.id] for h in result.hits]

    return search


def run_memsearch(work: Path, texts, vectors, rows):  # type: ignore[no-untyped-def]
    import asyncio

    import memsearch.core

    class Table:  # memsearch's EmbeddingProvider protocol, answering from the table
        model_name, dimension, batch_size = "all-MiniLM-L6-v2-int8", 384, 512

        async def embed(self, batch: list[str]) -> list[list[float]]:
            return [rows[t].tolist() for t in batch]

    memsearch.core.get_provider = lambda *a, **k: Table()
    uri = str(work / "memsearch.db")

    def build() -> None:
        ms = memsearch.core.MemSearch(milvus_uri=uri)
        ms.store._ensure_collection_for_write()
        for start in range(0, len(texts), 2_000):
            ms.store.upsert(
                [
                    {"chunk_hash": str(i), "embedding": vectors[i].tolist(), "content": texts[i],
                     "source": "memories.md", "heading": "", "heading_level": 0,
                     "start_line": i, "end_line": i}
                    for i in range(start, min(start + 2_000, len(texts)))
                ]
            )  # fmt: skip
        ms.store._client.flush(ms.store._collection)
        ms.close()

    built(work, "memsearch", build)
    ms, loop = memsearch.core.MemSearch(milvus_uri=uri), asyncio.new_event_loop()
    return lambda q: [
        int(h["chunk_hash"]) for h in loop.run_until_complete(ms.search(q, top_k=LIMIT))
    ]


def run_basic_memory(work: Path, texts, vectors, rows):  # type: ignore[no-untyped-def]
    import asyncio
    import re
    from datetime import UTC, datetime

    import pysqlite3  # its sqlite-vec needs an sqlite3 that loads extensions

    sys.modules["sqlite3"], sys.modules["sqlite3.dbapi2"] = pysqlite3, pysqlite3.dbapi2
    os.environ["BASIC_MEMORY_CONFIG_DIR"] = str(work / "basic-memory")
    from basic_memory import db
    from basic_memory.config import BasicMemoryConfig
    from basic_memory.repository.project_repository import ProjectRepository
    from basic_memory.repository.search_index_row import SearchIndexRow
    from basic_memory.repository.sqlite_search_repository import SQLiteSearchRepository
    from basic_memory.schemas.search import SearchRetrievalMode
    from loguru import logger

    logger.remove()
    header, long = re.compile(r"m(\d+)\n"), [t for t in texts if len(t) > 800]

    def vector(chunk: str) -> list[float]:  # a chunk of memory i: "m{i}\n\nm{i}\n\n{text}..."
        if found := header.match(chunk):
            return vectors[int(found[1])].tolist()
        piece = chunk.strip()[:200]  # a later chunk of a long memory: the memory holding it
        return rows[next(t for t in long if piece in t)].tolist()

    class Table:  # basic-memory's EmbeddingProvider protocol, answering from the table
        model_name, dimensions = "all-MiniLM-L6-v2-int8", 384

        async def embed_query(self, text: str) -> list[float]:
            return rows[text].tolist()

        async def embed_documents(self, batch: list[str]) -> list[list[float]]:
            return [vector(c) for c in batch]

        def runtime_log_attrs(self) -> dict[str, str]:
            return {}

    config = BasicMemoryConfig(projects={"bench": str(work / "notes")}, default_project="bench")
    loop = asyncio.new_event_loop()
    _, sessions = loop.run_until_complete(db.get_or_create_db(config.database_path, config=config))

    async def build() -> None:
        async with sessions() as session:
            await ProjectRepository().create(
                session, {"name": "bench", "path": str(work / "notes"), "permalink": "bench"}
            )
            await session.commit()
        repo = SQLiteSearchRepository(sessions, 1, app_config=config, embedding_provider=Table())
        await repo.init_search_index()
        now = datetime.now(UTC)
        for start in range(0, len(texts), 5_000):
            await repo.bulk_index_items(
                [
                    SearchIndexRow(project_id=1, id=i + 1, type="entity", file_path=f"m{i}.md",
                                   created_at=now, updated_at=now, permalink=f"m{i}", title=f"m{i}",
                                   content_stems=texts[i], content_snippet=texts[i], entity_id=i + 1)
                    for i in range(start, min(start + 5_000, len(texts)))
                ]
            )  # fmt: skip
            done = await repo.sync_entity_vectors_batch(
                list(range(start + 1, min(start + 5_000, len(texts)) + 1))
            )
            assert not done.entities_failed, done.sample_errors

    built(work, "basic-memory", lambda: loop.run_until_complete(build()))
    repo = SQLiteSearchRepository(sessions, 1, app_config=config, embedding_provider=Table())
    loop.run_until_complete(repo.init_search_index())
    assert loop.run_until_complete(repo.semantic_effectively_enabled())
    hybrid = SearchRetrievalMode.HYBRID

    def search(q: str) -> list[int]:
        found = repo.search(search_text=q, retrieval_mode=hybrid, limit=LIMIT)
        return [r.id - 1 for r in loop.run_until_complete(found)]

    return search


def run_txtai(work: Path, texts, vectors, rows):  # type: ignore[no-untyped-def]
    import numpy as np
    from txtai import Embeddings

    embeddings = Embeddings(
        method="external", transform=lambda batch: np.vstack([rows[t] for t in batch]),
        content=True, hybrid=True, dimensions=384,
    )  # fmt: skip
    embeddings.index((i, t, None) for i, t in enumerate(texts))
    return lambda q: [int(r["id"]) for r in embeddings.search(q, LIMIT)]


RUNNERS = {
    "mnemex hybrid": lambda *a: run_mnemex(*a, None),
    "mnemex lexical": lambda *a: run_mnemex(*a, "lexical"),
    "memsearch": run_memsearch,
    "basic-memory": run_basic_memory,
    "txtai": run_txtai,
}


# -- the driver ---------------------------------------------------------------------------


def corpus(
    folder: Path, size: int
) -> tuple[list[str], dict[int, str], list[tuple[str, str]], dict]:  # type: ignore[type-arg]
    """The memories, the doc id of each abstract among them, the (claim id, claim) asked
    (warm-up, then test) and the relevant doc ids of each test claim."""
    scifact = folder / "beir" / "scifact"
    docs, claims = common.scifact_docs(folder), common.scifact_claims(folder)
    qrels: dict[str, dict[str, set[str]]] = {"train": {}, "test": {}}
    for split, judged in qrels.items():
        for line in (scifact / "qrels" / f"{split}.tsv").read_text().splitlines()[1:]:
            qid, doc, _ = line.split("\t")
            judged.setdefault(qid, set()).add(doc)
    wanted = set().union(*qrels["test"].values())
    taken = {
        s.strip() for d in docs if d["_id"] in wanted for s in common._SENTENCE.split(d["text"])
    }
    abstracts = {f"{d['title']}\n{d['text']}": d["_id"] for d in docs}
    fill = [
        m
        for m in common.memories(folder, int(size * 1.3) + 10_000)
        if not taken.intersection(s.strip() for s in common._SENTENCE.split(m))
        and m not in abstracts
    ]
    texts = list(abstracts) + fill[: size - len(abstracts)]
    asked = [(q, claims[q]) for q in list(qrels["train"])[:WARM]]
    asked += [(q, claims[q]) for q in qrels["test"]]
    return texts, dict(enumerate(abstracts.values())), asked, qrels["test"]


def quality(ranked: list[list[int]], asked, doc_of, relevant) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """Mean R@10 and nDCG@10 over the test claims (a hit on another memory: not relevant)."""
    from mnemex.eval.metrics import mean, per_query, ranked_run

    run = {
        q: ranked_run([doc_of.get(i, f"m{i}") for i in ids])
        for ids, (q, _) in zip(ranked, asked, strict=True)
    }
    qrels = {q: dict.fromkeys(docs, 1) for q, docs in relevant.items()}
    return mean(per_query(qrels, run, ("R@10", "nDCG@10")).values(), ("R@10", "nDCG@10"))


def launch(name: str, work: Path) -> subprocess.Popen | str:  # type: ignore[type-arg]
    """A system's runner, started (it builds or reopens its index); else why not."""
    python = common.ROOT / SYSTEMS[name] / "bin" / "python"
    if not python.exists():
        return f"{python.relative_to(common.ROOT)} missing (make .venv-peers)"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": ""}
    env["LOGFIRE_IGNORE_NO_CONFIG"] = "1"
    return subprocess.Popen(
        [python, __file__, "--serve", name, str(work)], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=(work / f"{name}.log").open("w"), text=True, env=env,
    )  # fmt: skip


def prepare(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    """The run's folder (memories, queries, vectors), the queries, their labels and the
    query embedding's latency."""
    import hashlib

    import numpy as np

    texts, doc_of, asked, relevant = corpus(common.data_dir(args.data), args.size)
    vectors, _ = common.real_embeddings(texts, "peers")
    model_id, table, embed_ms = common.query_vectors([q for _, q in asked])
    digest = hashlib.sha256("\n".join(texts + [q for _, q in asked]).encode()).hexdigest()[:12]
    work = common.CACHE / f"peers-{args.size}-{digest}"
    work.mkdir(parents=True, exist_ok=True)
    (work / "texts.json").write_text(json.dumps(texts), encoding="utf-8")
    (work / "queries.json").write_text(json.dumps([q for _, q in asked]), encoding="utf-8")
    (work / "meta.json").write_text(json.dumps({"model_id": model_id}), encoding="utf-8")
    np.save(work / "vectors.npy", vectors)
    np.save(work / "qvectors.npy", np.vstack([table[q] for _, q in asked]))
    return work, asked, (asked[WARM:], doc_of, relevant), embed_ms


def main() -> None:
    arguments = common.parser(__doc__)
    arguments.add_argument("--size", type=int, default=100_000)
    arguments.add_argument("--systems", default=",".join(SYSTEMS))
    arguments.add_argument("--serve", nargs=2, help=argparse.SUPPRESS)
    args = arguments.parse_args()
    if args.serve:
        return serve(args.serve[0], Path(args.serve[1]))
    work, asked, labels, embed_ms = prepare(args)
    procs, notes = {}, {}
    launched = {name: launch(name, work) for name in args.systems.split(",")}  # side by side
    for name, proc in launched.items():
        line = proc.stdout.readline() if not isinstance(proc, str) else ""  # type: ignore[union-attr]
        if line:
            procs[name], notes[name] = proc, f"{json.loads(line)['build_s']:.0f}"
        else:
            log = work / f"{name}.log"
            notes[name] = proc if isinstance(proc, str) else log.read_text().strip().split("\n")[-1]
        print(f"{name}: {'build/open ' + notes[name] + ' s' if name in procs else notes[name]}")
    samples: dict[str, list[float]] = {n: [] for n in procs}
    ranked: dict[str, list[list[int]]] = {n: [] for n in procs}
    loads = []
    for n, (_, q) in enumerate(asked):  # each query on every system, in a rotating order
        names = list(procs)[n % len(procs) :] + list(procs)[: n % len(procs)]
        for name in names:
            procs[name].stdin.write(json.dumps(q) + "\n")  # type: ignore[union-attr]
            procs[name].stdin.flush()  # type: ignore[union-attr]
            reply = json.loads(procs[name].stdout.readline())  # type: ignore[union-attr]
            if n >= WARM:
                samples[name].append(reply["ms"])
                ranked[name].append(reply["ids"])
        loads.append(os.getloadavg()[0])
    for proc in procs.values():
        proc.stdin.close()  # type: ignore[union-attr]
        proc.wait()
    report(args, samples, ranked, labels, notes, loads, embed_ms)


def report(args, samples, ranked, labels, notes, loads, embed_ms) -> None:  # type: ignore[no-untyped-def]
    base = {n: common.percentiles(s) for n, s in samples.items()}
    lines = [
        f"## Beside the peers, {args.size:,} memories (`benchmarks/bench_peers.py`)",
        "",
        f"`python benchmarks/bench_peers.py --size {args.size}` on {common.machine()}; load average "
        f"(1 min) during the queries {min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} "
        "cores (shared machine). SciFact's 5,183 abstracts among the memories, its 300 test "
        "claims asked (after 20 warm-up), the systems in turn query by query; every system "
        "given the same vectors (all-MiniLM-L6-v2 int8), **query embedding excluded** for all "
        f"(alone it costs p50 {embed_ms['p50']:.1f} ms, the same for every system). Limit 10. "
        "*× mnemex*: a system's p50 over mnemex's of the same kind (hybrid over hybrid, "
        "lexical over lexical). Every system's defaults otherwise (basic-memory drops vector "
        "hits below cosine 0.55, its `semantic_min_similarity`). *Build or reopen*: the "
        "indexes built side by side (or reopened when a run before built them), seconds.",
        "",
        "| system | p50 ms | p95 ms | × mnemex (p50) | recall@10 | nDCG@10 | build or reopen s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name in notes:  # a system that failed says why, from its log
        if name not in base:
            lines.append(f"| {name} | failed: {notes[name]} | | | | | |")
            continue
        p = base[name]
        kind = "mnemex lexical" if name.endswith("lexical") else "mnemex hybrid"
        ratio = p["p50"] / base[kind]["p50"] if kind in base else float("nan")
        got = quality(ranked[name], *labels)
        lines.append(
            f"| {name} | {p['p50']:.1f} | {p['p95']:.1f} | {ratio:.1f}× | {got['R@10']:.3f} | "
            f"{got['nDCG@10']:.3f} | {notes[name]} |"
        )
    common.publish(f"bench_peers_{args.size}", "\n".join(lines), args.no_write)


if __name__ == "__main__":
    main()
