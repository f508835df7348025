"""Every word of a chunk counts: what the local model sees of long memories (issue 11).

The local model (all-MiniLM-L6-v2) reads the first 256 WordPiece tokens of a
text; workspace chunks hold about 1,600 characters, so the vector arm never
sees their tail, and many SciFact abstracts are longer too. Measured here,
with the local model, on the LoCoMo dev half as a workspace
(``mnemex eval locomo --as-workspace``), SciFact train and CISI:

- **first** (today): one vector of the text's first 254 tokens;
- **max**: the text cut into windows of 254 tokens (stride 192), one vector
  a window, a text scored by its best window (needs several vectors per
  memory, so measured on the vector arm alone, outside the store);
- **mean**: the same windows, their vectors averaged into one (fits today's
  one-vector schema, so measured on the vector arm and in hybrid search);
- **window-sized chunks** (workspace only): chunks of 250 tokens (``len/4``)
  with 50 of overlap, which mostly fit the model's window, in hybrid search.

    python benchmarks/eval_chunk_windows.py [--data DIR] [--cache DIR] [--no-write]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from common import data_dir, machine, write_section
from mnemex.config import load_settings
from mnemex.embed import local
from mnemex.embed.local import LocalEmbedder
from mnemex.eval.data import load_beir, load_locomo
from mnemex.eval.embed_cache import CachedEmbedder, default_cache_dir
from mnemex.eval.metrics import mean, per_query, ranked_run
from mnemex.eval.runner import Spec, ingest, run_queries
from mnemex.eval.workspace import evaluate, sync_all, write_all
from mnemex.store import Store

WINDOW = 254  # content tokens of a window ([CLS] and [SEP] make the model's 256)
STRIDE = 192  # windows overlap by 62 tokens
SIZED_CHUNKS = (250, 50)  # chunk_tokens, chunk_overlap (len/4) that mostly fit one window


class Windows:
    """A text cut into windows of ``WINDOW`` WordPiece tokens, ``STRIDE`` apart (the local
    embedder's own cut, :meth:`mnemex.embed.local.LocalEmbedder.windows`)."""

    def __init__(self) -> None:
        self.model = LocalEmbedder()
        assert (WINDOW, STRIDE) == (local.WINDOW, local.WINDOW_STRIDE)

    def __call__(self, text: str) -> list[str]:
        return self.model.windows(text)


class MeanOfWindows:
    """An embedder whose vector of a text is the normalized mean of its windows' vectors."""

    def __init__(self, inner: Any, windows: Windows) -> None:
        self.inner, self.windows = inner, windows

    @property
    def model_id(self) -> str:
        return f"{self.inner.model_id}+mean-of-windows-{WINDOW}/{STRIDE}"

    @property
    def dim(self) -> int:
        return int(self.inner.dim)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return mean_vectors(self.inner, self.windows, texts)


def window_vectors(
    embedder: Any, windows: Windows, texts: Sequence[str]
) -> tuple[np.ndarray, np.ndarray]:
    """Every window's vector, and the index of each text's first window (for reduceat)."""
    pieces = [windows(t) for t in texts]
    starts = np.cumsum([0] + [len(p) for p in pieces[:-1]])
    flat = [w for p in pieces for w in p]
    return np.asarray(embedder.embed(flat), dtype=np.float32), starts


def mean_vectors(embedder: Any, windows: Windows, texts: Sequence[str]) -> np.ndarray:
    vectors, starts = window_vectors(embedder, windows, texts)
    summed = np.add.reduceat(vectors, starts, axis=0)
    return summed / np.clip(np.linalg.norm(summed, axis=1, keepdims=True), 1e-12, None)


def vector_rankings(
    embedder: Any,
    windows: Windows,
    docs: dict[str, str],
    queries: dict[str, str],
    depth: int,
) -> dict[str, dict[str, list[str]]]:
    """Per strategy, per query, the doc ids ranked by the vector arm alone."""
    ids = list(docs)
    texts = [docs[i] for i in ids]
    first = np.asarray(embedder.embed(texts), dtype=np.float32)
    every, starts = window_vectors(embedder, windows, texts)
    summed = np.add.reduceat(every, starts, axis=0)
    meaned = summed / np.clip(np.linalg.norm(summed, axis=1, keepdims=True), 1e-12, None)
    qids = list(queries)
    qv = np.asarray(embedder.embed([queries[q] for q in qids]), dtype=np.float32)
    scores = {
        "first": qv @ first.T,
        "max": np.maximum.reduceat(qv @ every.T, starts, axis=1),
        "mean": qv @ meaned.T,
    }
    out: dict[str, dict[str, list[str]]] = {}
    for name, matrix in scores.items():
        top = np.argsort(-matrix, axis=1, kind="stable")[:, :depth]
        out[name] = {q: [ids[j] for j in row] for q, row in zip(qids, top, strict=True)}
    return out


def beir_vector_and_hybrid(
    folder: Path, split: str, embedder: Any, windows: Windows, hybrid: bool
) -> dict[str, dict[str, float]]:
    data = load_beir(folder, split)
    docs = {d: t for d, t in data.corpus.items() if t}
    rows: dict[str, dict[str, float]] = {}
    for name, run in vector_rankings(embedder, windows, docs, data.queries, 100).items():
        scores = per_query(data.qrels, {q: ranked_run(r) for q, r in run.items()}, ["nDCG@10"])
        rows[f"vector, {name}"] = mean(scores.values(), ["nDCG@10"])
    if hybrid:
        for name, model in (("first", embedder), ("mean", MeanOfWindows(embedder, windows))):
            with tempfile.TemporaryDirectory() as tmp:
                settings = load_settings(Path(tmp) / "e.db", home=tmp)
                with Store(settings, embedder=model) as store:
                    spec = Spec(mode="hybrid")
                    ingest(
                        store,
                        [{"id": d, "content": t, "kind": "document"} for d, t in docs.items()],
                        spec,
                        show=False,
                    )
                    run, *_ = run_queries(
                        store, [(q, t, None) for q, t in data.queries.items()], 100, spec, False
                    )
            scores = per_query(data.qrels, run, ["nDCG@10"])
            rows[f"hybrid, {name}"] = mean(scores.values(), ["nDCG@10"])
    return rows


def workspace_rows(
    file: Path, embedder: Any, windows: Windows, hybrid: bool
) -> dict[str, dict[str, float]]:
    data = load_locomo(file)
    rows: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        written = write_all(data, Path(tmp) / "ws")
        variants = [("first", embedder, None), ("mean", MeanOfWindows(embedder, windows), None)]
        variants.append(("window-sized chunks, first", embedder, SIZED_CHUNKS))
        for label, model, sizes in variants:
            extra = {"chunk_tokens": sizes[0], "chunk_overlap": sizes[1]} if sizes else {}
            db = Path(tmp) / f"{len(rows)}.db"
            settings = load_settings(db, home=tmp, **extra)
            with Store(settings, embedder=model) as store:
                sync_all(store, written, embed=True, progress=False)
                if label == "first":
                    rows.update(_vector_found(store, data, written, embedder, windows))
                if hybrid:
                    report = evaluate(store, data, written, Spec(mode="hybrid"), file, False)
                    rows[f"hybrid, {label}"] = report["metrics"]
    return rows


def _vector_found(
    store: Store, data: Any, written: dict[str, Any], embedder: Any, windows: Windows
) -> dict[str, dict[str, float]]:
    """found@1/@5 of the vector arm alone with each strategy, per conversation's chunks."""
    found: dict[str, dict[str, list[float]]] = {}
    for ns, ws in written.items():
        ids = [
            r[0]
            for r in store.session.conn.execute(
                "SELECT id FROM memories WHERE namespace = ?", (ns,)
            )
        ]
        memories = store.get(ids, namespace=ns).memories
        docs = {m.id: m.content for m in memories}
        places = {m.id: m.location for m in memories}
        questions = [q for q in data.questions if q.namespace == ns]
        ranked = vector_rankings(embedder, windows, docs, {q.id: q.text for q in questions}, 5)
        for name, run in ranked.items():
            for q in questions:
                lines = [ws.lines[e] for e in q.evidence if e in ws.lines]
                hit = [
                    any(
                        (p := places[i]) is not None
                        and any(
                            path == p.path and p.start_line <= n <= p.end_line for path, n in lines
                        )
                        for i in run[q.id][:k]
                    )
                    for k in (1, 5)
                ]
                slot = found.setdefault(f"vector, {name}", {"found@1": [], "found@5": []})
                slot["found@1"].append(float(hit[0]))
                slot["found@5"].append(float(hit[1]))
    return {k: {m: sum(v) / len(v) for m, v in d.items()} for k, d in found.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data")
    parser.add_argument("--cache", help="embedding cache folder (default: the user cache dir)")
    parser.add_argument("--no-hybrid", action="store_true")
    parser.add_argument(
        "--only", choices=("workspace", "scifact", "cisi"), action="append", help="these only"
    )
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    folder = data_dir(args.data)
    cache = CachedEmbedder(LocalEmbedder(), Path(args.cache) if args.cache else default_cache_dir())
    windows = Windows()
    hybrid = not args.no_hybrid
    started = time.perf_counter()
    only = set(args.only or ("workspace", "scifact", "cisi"))
    results: dict[str, dict[str, dict[str, float]]] = {}
    if "workspace" in only:
        results["LoCoMo dev as workspace"] = workspace_rows(
            folder / "locomo" / "locomo10-dev.json", cache, windows, hybrid
        )
    for name, title, split in (("scifact", "SciFact train", "train"), ("cisi", "CISI", "test")):
        if name in only:
            results[title] = beir_vector_and_hybrid(
                folder / "beir" / name, split, cache, windows, hybrid
            )
    section = "eval_chunk_windows" + ("" if len(only) == 3 else "_" + "_".join(sorted(only)))
    cache.close()
    body = render(results, time.perf_counter() - started)
    print(body)
    if not args.no_write:
        write_section(section, body)


def render(results: dict[str, dict[str, dict[str, float]]], seconds: float) -> str:
    lines = [
        "## Every word of a chunk: windows of the local model (`benchmarks/eval_chunk_windows.py`)",
        "",
        f"Machine: {machine()}; {seconds / 60:.1f} min.",
        "",
        f"Windows of {WINDOW} WordPiece tokens, {STRIDE} apart; *first* is today's one vector "
        "of the first window, *max* scores a text by its best window, *mean* averages the "
        "windows' vectors into one; *window-sized chunks* are chunks of "
        f"{SIZED_CHUNKS[0]} tokens (len/4), overlap {SIZED_CHUNKS[1]}, instead of 400/80. "
        "Vector rows rank by the vector arm alone; hybrid rows are `mnemex` search "
        "(adaptive fusion, relevance floor).",
        "",
    ]
    for dataset, rows in results.items():
        measures = sorted({m for r in rows.values() for m in r})
        lines += [f"### {dataset}", "", "| variant | " + " | ".join(measures) + " |"]
        lines.append("| --- |" + " ---: |" * len(measures))
        for variant, values in rows.items():
            cells = [f"{values[m]:.4f}" if m in values else "" for m in measures]
            lines.append(f"| {variant} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
