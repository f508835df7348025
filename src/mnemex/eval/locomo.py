"""``mnemex eval locomo``: evidence recall on LoCoMo conversations.

Each dialogue turn is a memory (``"<speaker>: <text>"``, plus the caption of
a shared image) in its conversation's namespace, created at its session's
date. Each question of categories 1-4 is a query against its conversation;
a hit is a retrieved turn named in the question's evidence.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from mnemex.errors import InvalidInput
from mnemex.eval.data import LocomoData, load_locomo
from mnemex.eval.metrics import latency, mean, per_query
from mnemex.eval.runner import Spec, eval_store, ingest, lexical_fallbacks, machine, run_queries

MEASURES = ("R@5", "R@10", "nDCG@10", "RR@10", "R@100")


def run_locomo(
    file: Path,
    *,
    depth: int = 100,
    spec: Spec | None = None,
    db: Path | None = None,
    progress: bool = True,
    separate: bool = False,
) -> dict[str, Any]:
    """Evidence recall on every conversation, overall (question-weighted), per category
    and per conversation. All conversations share one store, one namespace each, or
    with ``separate`` each has a store of its own; a namespace ranks as it would alone,
    so both give the same numbers."""
    spec = spec or Spec()
    data = load_locomo(file)
    if separate and db is not None:
        raise InvalidInput("--keep-db keeps one store: it cannot be used with --separate")
    by_ns: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for turn in data.turns:
        item = {"id": turn.id, "content": turn.content, "created_at": turn.created_at}
        # A session's turns are one thread, as the hooks store a captured session.
        by_ns[turn.namespace].append({**item, "kind": "dialogue", "source": turn.session})
    groups = [[ns] for ns in by_ns] if separate else [list(by_ns)]
    ingest_seconds = 0.0
    run: dict[str, dict[str, float]] = {}
    samples: list[float] = []
    modes: Counter[str] = Counter()
    fusions: set[str] = set()
    described: dict[str, Any] = {}
    for group in groups:
        with eval_store(db, spec) as store:
            ingest_seconds += sum(
                ingest(store, by_ns[ns], spec, namespace=ns, show=progress) for ns in group
            )
            questions = [
                (q.id, q.text, q.namespace) for q in data.questions if q.namespace in group
            ]
            found, times, used, versions = run_queries(store, questions, depth, spec, progress)
            run.update(found)
            samples.extend(times)
            modes.update(used)
            fusions.update(versions)
            described = spec.describe(store, fusions)
    scores = per_query({q.id: dict.fromkeys(q.evidence, 1) for q in data.questions}, run, MEASURES)
    return {
        "dataset": file.stem,
        **described,
        "stores": "one per conversation" if separate else "one, a namespace per conversation",
        "modes_used": dict(modes),
        "lexical_fallbacks": lexical_fallbacks(modes.elements(), described["mode"]),
        "memories": len(data.turns),
        "conversations": len(by_ns),
        "queries": len(data.questions),
        "dropped_evidence_ids": data.dropped_evidence,
        "questions_without_evidence": data.unanswerable,
        "depth": depth,
        "ingest_seconds": round(ingest_seconds, 3),
        "metrics": mean(scores.values(), MEASURES),
        **_breakdown(data, scores),
        "latency_ms": latency(samples),
        "machine": machine(),
    }


def _breakdown(data: LocomoData, scores: dict[str, dict[str, float]]) -> dict[str, Any]:
    """The metrics per category and per conversation, each with its number of questions."""

    def summary(ids: list[str]) -> dict[str, Any]:
        return {"questions": len(ids), **mean((scores[i] for i in ids), MEASURES)}

    questions = data.questions
    return {
        "per_category": {
            str(category): summary([q.id for q in questions if q.category == category])
            for category in sorted({q.category for q in questions})
        },
        "per_conversation": {
            ns: summary([q.id for q in questions if q.namespace == ns])
            for ns in dict.fromkeys(t.namespace for t in data.turns)
        },
    }
