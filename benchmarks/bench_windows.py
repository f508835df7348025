"""What a vector per window costs a search: in-process vector and hybrid search at 10k.

    python benchmarks/bench_windows.py [--data DIR] [--queries N] [--long N]

A store of 10,000 short memories (``common.memories``, one vector each, the
local model's real vectors; see ``bench_hybrid.py``), searched in process with
the queries' vectors computed first (query embedding excluded), limit 10:
vector and hybrid p50/p95. Run from two checkouts (before/after a change to
the vector index) to compare them: a store of short texts has one window a
memory, so its searches should not change. With ``--long N`` (a store schema
with windows only), N more memories get three windows each (random unit
vectors: latency depends on the number of rows, not their values), so the
search takes ``k × w`` rows and keeps each memory's best. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import numpy as np

import mnemex
from bench_hybrid import LIMIT, Precomputed, build
from common import data_dir, memories, percentiles, queries, real_embeddings
from mnemex.embed import embed_checked
from mnemex.embed.local import LocalEmbedder

SIZE = 10_000
WINDOWS = 3


def timed(search: Callable[[str], object], qs: list[str]) -> dict[str, dict[str, float]]:
    """Wall and CPU (this process's, every thread) milliseconds per query: on a shared,
    busy machine the CPU time says more than the wall time."""
    wall, cpu = [], []
    for q in qs:
        started, used = time.perf_counter(), time.process_time()
        search(q)
        wall.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - used) * 1000)
    return {"wall": percentiles(wall), "cpu": percentiles(cpu)}


def add_long(path: Path, count: int, model_id: str) -> None:
    """``count`` memories with ``WINDOWS`` random unit vectors each."""
    rng = np.random.default_rng(11)
    with mnemex.open(path, embedder=None) as store:
        store.add_many([f"long memory number {i} " * 40 for i in range(count)], embed=False)
        conn = store.session.conn
        rows = conn.execute(
            "SELECT seq, content_hash FROM memories ORDER BY seq DESC LIMIT ?", (count,)
        ).fetchall()
        vectors = rng.normal(size=(count * WINDOWS, 384)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        with conn:
            conn.executemany(
                "INSERT INTO embeddings (seq, model, window, dim, content_hash, vector) "
                "VALUES (?, ?, ?, 384, ?, ?)",
                [
                    (seq, model_id, w, digest, vectors[i * WINDOWS + w].tobytes())
                    for i, (seq, digest) in enumerate(rows)
                    for w in range(WINDOWS)
                ],
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--long", type=int, default=0)
    args = parser.parse_args()
    folder = data_dir(args.data)
    texts = memories(folder, SIZE)
    vectors, _ = real_embeddings(texts, "bench")
    qs = queries(folder)[: args.queries]
    model = LocalEmbedder()
    table = {q: embed_checked(model, [q])[0] for q in qs}
    out: dict[str, object] = {"size": SIZE, "long": args.long}
    with tempfile.TemporaryDirectory(prefix="mnemex-windows-") as tmp:
        path = Path(tmp) / "w.db"
        build(path, texts, np.asarray(vectors), model.model_id)
        if args.long:
            add_long(path, args.long, model.model_id)
        with mnemex.open(path, embedder=Precomputed(model.model_id, table), ann="off") as store:
            index = store.session.vectors(384)
            index.refresh()
            out["rows"] = int(index.live()[1].shape[0])
            for q in qs[:30]:
                store.search(q, LIMIT, mode="hybrid")
            for mode in ("vector", "hybrid", "vector", "hybrid"):  # twice: the second counts
                out[mode] = timed(lambda q, m=mode: store.search(q, LIMIT, mode=m), qs)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
