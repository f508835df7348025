"""``mnemex eval beir``: nDCG@10, Recall@10/100, MRR@10 and latency on a BEIR dataset."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mnemex.eval.data import load_beir
from mnemex.eval.metrics import DEFAULT_MEASURES, latency, mean, per_query
from mnemex.eval.runner import (
    Spec,
    ask_foreign,
    eval_store,
    foreign_queries,
    ingest,
    lexical_fallbacks,
    machine,
    run_queries,
)

NAMESPACE = "beir"


def run_beir(
    directory: Path,
    *,
    split: str = "test",
    depth: int = 100,
    max_queries: int | None = None,
    spec: Spec | None = None,
    db: Path | str | None = None,
    progress: bool = True,
    others: Sequence[Path] = (),
) -> dict[str, Any]:
    """The ranking measures of ``directory``'s ``split``; ``others``: datasets whose
    queries are asked of the store too, reported as the share that gets any hit."""
    spec = spec or Spec()
    data = load_beir(directory, split)
    query_ids = list(data.queries)[: max_queries or None]
    with eval_store(db, spec, namespace=NAMESPACE) as store:
        corpus = data.corpus.items()
        items = [{"id": did, "content": text, "kind": "document"} for did, text in corpus if text]
        ingest_seconds = ingest(store, items, spec, show=progress)
        queries = [(q, data.queries[q], None) for q in query_ids]
        run, samples, modes, fusions = run_queries(store, queries, depth, spec, progress)
        memories = store.count()
        described = spec.describe(store, fusions)
        foreign = {}
        for path in others:
            name, texts = foreign_queries(path)
            foreign[name] = ask_foreign(store, texts, [None], spec, progress)
    qrels = {q: data.qrels[q] for q in query_ids}
    scores = per_query(qrels, run, DEFAULT_MEASURES)
    return {
        "dataset": directory.name,
        "split": split,
        **described,
        "modes_used": dict(modes),
        "lexical_fallbacks": lexical_fallbacks(modes.elements(), described["mode"]),
        "memories": memories,
        "queries": len(query_ids),
        "depth": depth,
        "ingest_seconds": round(ingest_seconds, 3),
        "metrics": mean(scores.values(), DEFAULT_MEASURES),
        **({"foreign": foreign} if foreign else {}),
        "latency_ms": latency(samples),
        "machine": machine(),
    }
