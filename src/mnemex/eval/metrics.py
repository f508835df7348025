"""Retrieval metrics (from ir-measures) and latency percentiles."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from mnemex.errors import MnemexError

Qrels = Mapping[str, Mapping[str, int]]
Run = Mapping[str, Mapping[str, float]]

DEFAULT_MEASURES = ("nDCG@10", "R@10", "R@100", "RR@10")


def _ir_measures() -> Any:
    try:
        import ir_measures
    except ImportError:
        raise MnemexError(
            "the evaluation harness needs the eval extra: pip install 'mnemex[eval]'"
        ) from None
    return ir_measures


def per_query(qrels: Qrels, run: Run, measures: Sequence[str]) -> dict[str, dict[str, float]]:
    """Each measure for each judged query; a query with no hits scores 0."""
    ir = _ir_measures()
    parsed = [ir.parse_measure(m) for m in measures]
    names = {str(p): m for p, m in zip(parsed, measures, strict=True)}
    values: dict[str, dict[str, float]] = {q: dict.fromkeys(measures, 0.0) for q in qrels}
    judged_run = {q: dict(run[q]) for q in qrels if run.get(q)}
    qrels_plain = {q: dict(docs) for q, docs in qrels.items()}
    for metric in ir.iter_calc(parsed, qrels_plain, judged_run):
        values[metric.query_id][names[str(metric.measure)]] = float(metric.value)
    return values


def mean(values: Iterable[dict[str, float]], measures: Sequence[str]) -> dict[str, float]:
    """Each measure's mean over ``values``, to four decimals (0 when there are none)."""
    rows = list(values)
    if not rows:
        return dict.fromkeys(measures, 0.0)
    return {m: round(sum(r[m] for r in rows) / len(rows), 4) for m in measures}


def latency(samples_ms: Sequence[float]) -> dict[str, float]:
    if not samples_ms:
        return {"p50": 0.0, "p95": 0.0, "mean": 0.0}
    ordered = sorted(samples_ms)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {
        "p50": round(statistics.median(ordered), 3),
        "p95": round(p95, 3),
        "mean": round(statistics.fmean(ordered), 3),
    }


def ranked_run(ids: Sequence[str]) -> dict[str, float]:
    """Scores that make trec_eval keep our order (it breaks score ties by doc id)."""
    return {doc: float(len(ids) - rank) for rank, doc in enumerate(ids)}
