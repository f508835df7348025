"""``mnemex eval beir``: nDCG@10, Recall@10/100, MRR@10 and latency on a BEIR dataset."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from mnemex.eval.data import load_beir
from mnemex.eval.metrics import DEFAULT_MEASURES, latency, mean, per_query, ranked_run
from mnemex.eval.runner import eval_store, ingest, machine
from mnemex.progress import progress_bar

NAMESPACE = "beir"


def run_beir(
    directory: Path,
    *,
    split: str = "test",
    depth: int = 100,
    max_queries: int | None = None,
    lexical_budget: int | None = None,
    db: Path | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    show = progress
    data = load_beir(directory, split)
    query_ids = list(data.queries)[: max_queries or None]
    with eval_store(db, namespace=NAMESPACE, lexical_budget=lexical_budget) as store:
        ingest_seconds = 0.0
        if store.count() < len(data.corpus):
            items = [
                {"id": did, "content": text, "kind": "document"}
                for did, text in data.corpus.items()
                if text
            ]
            ingest_seconds = ingest(store, items, show=show)
        run: dict[str, dict[str, float]] = {}
        samples: list[float] = []
        with progress_bar(len(query_ids), "searching", show) as advance:
            for qid in query_ids:
                started = time.perf_counter()
                result = store.search(data.queries[qid], depth, snippets=False)
                samples.append((time.perf_counter() - started) * 1000)
                run[qid] = ranked_run([h.id for h in result.hits])
                advance(1)
        memories = store.count()
        budget = store.settings.lexical_budget
    qrels = {q: data.qrels[q] for q in query_ids}
    scores = per_query(qrels, run, DEFAULT_MEASURES)
    return {
        "dataset": directory.name,
        "split": split,
        "mode": "lexical",
        "scoring": f"fts5 bm25 (k1=1.2, b=0.75), lexical_budget={budget}",
        "memories": memories,
        "queries": len(query_ids),
        "depth": depth,
        "ingest_seconds": round(ingest_seconds, 3),
        "metrics": {k: round(v, 4) for k, v in mean(scores.values(), DEFAULT_MEASURES).items()},
        "latency_ms": latency(samples),
        "machine": machine(),
    }
