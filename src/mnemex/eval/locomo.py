"""``mnemex eval locomo``: evidence recall on LoCoMo conversations.

Each dialogue turn is a memory (``"<speaker>: <text>"``, plus the caption of
a shared image) in its conversation's namespace, created at its session's
date. Each question of categories 1-4 is a query against its conversation;
a hit is a retrieved turn named in the question's evidence.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from mnemex.eval.data import load_locomo
from mnemex.eval.metrics import latency, mean, per_query
from mnemex.eval.runner import Spec, eval_store, ingest, machine, run_queries

MEASURES = ("R@5", "R@10", "nDCG@10", "RR@10", "R@100")


def run_locomo(
    file: Path,
    *,
    depth: int = 100,
    spec: Spec | None = None,
    db: Path | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    spec = spec or Spec()
    data = load_locomo(file)
    by_ns: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for turn in data.turns:
        by_ns[turn.namespace].append(
            {
                "id": turn.id,
                "content": turn.content,
                "created_at": turn.created_at,
                "kind": "dialogue",
            }
        )
    with eval_store(db, spec) as store:
        ingest_seconds = sum(
            ingest(store, items, spec, namespace=ns, show=progress) for ns, items in by_ns.items()
        )
        run, samples, modes = run_queries(
            store, [(q.id, q.text, q.namespace) for q in data.questions], depth, spec, progress
        )
        described = spec.describe(store)
    qrels = {q.id: dict.fromkeys(q.evidence, 1) for q in data.questions}
    scores = per_query(qrels, run, MEASURES)
    categories: dict[str, Any] = {}
    for category in sorted({q.category for q in data.questions}):
        ids = [q.id for q in data.questions if q.category == category]
        categories[str(category)] = {
            "questions": len(ids),
            **{k: round(v, 4) for k, v in mean((scores[i] for i in ids), MEASURES).items()},
        }
    return {
        "dataset": file.stem,
        **described,
        "modes_used": dict(modes),
        "memories": len(data.turns),
        "conversations": len(by_ns),
        "queries": len(data.questions),
        "dropped_evidence_ids": data.dropped_evidence,
        "questions_without_evidence": data.unanswerable,
        "depth": depth,
        "ingest_seconds": round(ingest_seconds, 3),
        "metrics": {k: round(v, 4) for k, v in mean(scores.values(), MEASURES).items()},
        "per_category": categories,
        "latency_ms": latency(samples),
        "machine": machine(),
    }
