"""Fusing the lexical and the vector ranking: pure functions.

- ``rrf``: Reciprocal Rank Fusion, ``Σ 1 / (k + rank)`` over the arms that
  found a memory (rank from 1). Only ranks matter, so the two arms' score
  scales never have to agree. Reported scores are divided by the best possible
  value, ``arms / (k + 1)``, so a memory ranked first by both arms scores 1.
- ``weighted``: ``w_v · vector + w_t · text`` with the weights normalized to
  sum to 1, where ``vector`` is the cosine (negative values count as 0) and
  ``text`` the normalized BM25 score (``tanh(S / Z)``, see
  :func:`mnemex.index.query.normalized_score`, so more negative FTS5
  ``bm25()`` means a higher score). A memory missing from one arm's scores
  gets 0 from it; the pipeline first fetches, for each candidate only one arm
  returned, its score in the other arm, so that is 0 only for a memory with
  none of the query's terms.
- ``adaptive`` (the default): ``weighted``, with the weights moved for each
  query towards the arm that is surer of its answer (:func:`adaptive_weight`):
  an arm whose best score stands out from the rest of its top 20 gets more
  weight; one whose top is flat, less. Measured against ``weighted`` 0.5/0.5
  (benchmarks/RESULTS.md, "Adaptive fusion and the relevance floor").

:data:`FORMULAS` names each formula with its version string; a fused ranking
(:class:`Fused`) carries the version it was made with, which search results and
evaluation reports record.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import NamedTuple

RRF_VERSION = "rrf-v1"
WEIGHTED_VERSION = "weighted-tanh-bm25-cosine-v1"
ADAPTIVE_VERSION = "adaptive-margin-k20-mix0.5-v1"
MARGIN_DEPTH = 20  # the top scores of an arm its margin is measured over
MARGIN_MIX = 0.5  # how far the weights move from the configured ones towards the margins


def rrf(rankings: Sequence[Sequence[int]], k: int = 60) -> dict[int, float]:
    """Fused scores in (0, 1] for every key of every ranking (best first)."""
    if not rankings:
        return {}
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, key in enumerate(ranking, start=1):
            scores[key] = scores.get(key, 0.0) + 1.0 / (k + rank)
    best = len(rankings) / (k + 1)
    return {key: value / best for key, value in scores.items()}


def weighted(
    text: Mapping[int, float],
    vector: Mapping[int, float],
    vector_weight: float,
    text_weight: float,
) -> dict[int, float]:
    """Fused scores in [0, 1]: the weighted sum of the two arms' scores."""
    total = vector_weight + text_weight
    if total <= 0:
        raise ValueError("weights must not both be 0")
    wv, wt = vector_weight / total, text_weight / total
    return {
        key: wv * max(0.0, vector.get(key, 0.0)) + wt * text.get(key, 0.0)
        for key in text.keys() | vector.keys()
    }


def margin(scores: Sequence[float]) -> float:
    """How far an arm's best score stands above the mean of its top scores (best first)."""
    top = scores[:MARGIN_DEPTH]
    if len(top) < 2:
        return 0.0
    return max(0.0, top[0] - sum(top) / len(top))


def adaptive_weight(
    text_top: Sequence[float], vector_top: Sequence[float], vector_weight: float, text_weight: float
) -> float:
    """The vector arm's weight for this query, in [0, 1] (the text arm gets the rest).

    ``text_top`` and ``vector_top`` are each arm's own scores (normalized
    BM25, cosine clamped at 0) of the memories it ranked first, best first.
    The weight is ``MARGIN_MIX`` of the way from the configured weight to the
    arms' share of the summed margins (:func:`margin`).
    """
    total = vector_weight + text_weight
    if total <= 0:
        raise ValueError("weights must not both be 0")
    base = vector_weight / total
    mt, mv = margin(text_top), margin(vector_top)
    if mt + mv <= 0:
        return base
    return (1 - MARGIN_MIX) * base + MARGIN_MIX * mv / (mt + mv)


def ranked(scores: Mapping[int, float]) -> list[int]:
    """Keys by score, best first; ties broken by key so the order is stable."""
    return sorted(scores, key=lambda key: (-scores[key], key))


class Arms(NamedTuple):
    """What a fusion reads: each candidate's score in each arm (normalized BM25, cosine),
    each arm's own order (best first) and the configured parameters."""

    text: Mapping[int, float]
    vector: Mapping[int, float]
    text_order: Sequence[int]
    vector_order: Sequence[int]
    vector_weight: float = 0.5
    text_weight: float = 0.5
    rrf_k: int = 60


class Fused(NamedTuple):
    """Fused scores, their order, the formula with this query's parameters and its version
    (both ``None`` when a single arm answered)."""

    scores: dict[int, float]
    order: list[int]
    label: str | None = None
    version: str | None = None


class Formula(NamedTuple):
    """A fusion: its version, whether it needs every candidate's score in both arms (the
    pipeline completes them first), and the function giving the scores and their label."""

    version: str
    complete: bool
    fuse: Callable[[Arms], tuple[dict[int, float], str]]


def _rrf(arms: Arms) -> tuple[dict[int, float], str]:
    return rrf([arms.text_order, arms.vector_order], arms.rrf_k), f"rrf(k={arms.rrf_k})"


def _weighted(arms: Arms) -> tuple[dict[int, float], str]:
    wv, wt = arms.vector_weight, arms.text_weight
    return weighted(arms.text, arms.vector, wv, wt), f"weighted({wv:g} vector, {wt:g} text)"


def _adaptive(arms: Arms) -> tuple[dict[int, float], str]:
    wv = adaptive_weight(
        [arms.text[key] for key in arms.text_order],
        [max(0.0, arms.vector[key]) for key in arms.vector_order],
        arms.vector_weight,
        arms.text_weight,
    )
    scores = weighted(arms.text, arms.vector, wv, 1 - wv)
    return scores, f"adaptive({wv:.3g} vector, {1 - wv:.3g} text)"


FORMULAS: Mapping[str, Formula] = MappingProxyType(
    {
        "rrf": Formula(RRF_VERSION, complete=False, fuse=_rrf),
        "weighted": Formula(WEIGHTED_VERSION, complete=True, fuse=_weighted),
        "adaptive": Formula(ADAPTIVE_VERSION, complete=True, fuse=_adaptive),
    }
)
"""The fusions by name (``mnemex.config.FUSIONS`` names the same ones)."""


def fuse(name: str, arms: Arms) -> Fused:
    """The arms fused by the formula ``name`` (a key of :data:`FORMULAS`)."""
    formula = FORMULAS[name]
    scores, label = formula.fuse(arms)
    return Fused(scores, ranked(scores), label, formula.version)
