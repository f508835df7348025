"""Ranking stages after fusion: pure functions over scores, no I/O.

A fused list says how well each memory matches the query. What an agent
should read also depends on how old a memory is, how sure its writer was and
whether it only repeats a better hit. The pipeline applies, in order:

1. **threshold**: a hit stays if some arm that found it vouches for it, each
   arm in its own units (normalized BM25 for the lexical arm, cosine for the
   vector arm). A threshold is never compared with a fused score, so no mode
   or fusion can lose all its results because its scores sit on another
   scale; and it is applied to relevance, before decay, so old memories are
   not dropped for being old.
2. **decay**: ``score · 0.5^(age_days / half_life)``; pinned memories and
   evergreen sources never decay.
3. **confidence**: ``score · confidence``.
4. **MMR**: ``λ·relevance − (1−λ)·max similarity to the hits already chosen``,
   with Jaccard similarity over word sets or cosine between embeddings.
5. **top-K**.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Hashable, Mapping, Sequence
from datetime import datetime
from pathlib import PurePosixPath
from typing import Any, TypeVar

from mnemex.text import has_cjk

K = TypeVar("K", bound=Hashable)

DAY_SECONDS = 86_400.0
_WORDS = re.compile(r"\w+")
_DATED_FILE = re.compile(r"^\d{4}-\d{2}-\d{2}")
EVERGREEN_FILES = frozenset({"memory.md"})


# -- 1. threshold --------------------------------------------------------------------


def passes(
    text_score: float | None, cosine: float | None, min_text: float, min_vector: float
) -> bool:
    """Whether an arm that found the hit vouches for it (``None``: that arm did not find it)."""
    return (text_score is not None and text_score >= min_text) or (
        cosine is not None and cosine >= min_vector
    )


# -- 2. thread -----------------------------------------------------------------------


def thread_context(
    scores: Mapping[K, float], neighbours: Mapping[K, tuple[K | None, K | None]], weight: float
) -> tuple[dict[K, float], dict[K, dict[str, Any]]]:
    """The thread stage: a memory also scores ``weight`` × the better score of the
    memories just before and after it in its thread, when they are candidates too.

    A chat turn such as "Yes, last Tuesday" says little alone; the turn it answers
    says what it is about. Only candidates lend (a neighbour the arms did not find,
    or that the relevance floor dropped, lends nothing), and what is lent is the
    neighbour's score before this stage. Returns the scores and, for each memory
    that gained, what the stage did.
    """
    out = dict(scores)
    trace: dict[K, dict[str, Any]] = {}
    for key, pair in neighbours.items():
        if key not in scores:
            continue
        lent = max((scores[n] for n in pair if n is not None and n in scores), default=0.0)
        if lent > 0:
            out[key] = scores[key] + weight * lent
            trace[key] = {"stage": "thread", "weight": weight, "neighbour": round(lent, 6)}
    return out, trace


def thread_best(
    before: Mapping[K, float],
    scores: Mapping[K, float],
    threads: Mapping[K, Hashable],
    weight: float,
) -> tuple[dict[K, float], dict[K, dict[str, Any]]]:
    """The thread stage's second part: a memory in a thread moves toward the best score
    among its thread's candidates, ``(score + weight × best) / (1 + weight)``.

    A question about one session of a conversation is answered by the turns of that
    session; a turn of a session where something else scored well is likelier to be
    one of them than a turn of a session where nothing did. ``best`` is taken over
    the scores ``before`` the thread stage; ``scores`` are those after its first part.
    A memory that is its thread's only candidate, or its best, and a memory in no
    thread keep their score (the division keeps the scale of memories outside threads).
    Returns the scores and, for each memory that gained, what the stage did.
    """
    best: dict[Hashable, float] = {}
    for key, thread in threads.items():
        if key in before:
            best[thread] = max(best.get(thread, before[key]), before[key])
    out = dict(scores)
    trace: dict[K, dict[str, Any]] = {}
    for key, thread in threads.items():
        if key not in scores:
            continue
        top = best[thread]
        out[key] = (scores[key] + weight * top) / (1 + weight)
        if top > before[key]:
            trace[key] = {"stage": "thread_best", "weight": weight, "best": round(top, 6)}
    return out, trace


# -- 3. decay ------------------------------------------------------------------------


def decay_factor(age_days: float, half_life_days: float) -> float:
    """``0.5^(age / half_life)``; a memory from the future (clock skew) does not gain."""
    if half_life_days <= 0:
        raise ValueError("half_life_days must be > 0")
    return float(0.5 ** (max(0.0, age_days) / half_life_days))


def age_days(created_at: datetime, now: datetime) -> float:
    return (now - created_at).total_seconds() / DAY_SECONDS


def evergreen_source(source: str | None) -> bool:
    """A source that never decays: ``MEMORY.md``, or an undated file under ``memory/``.

    Daily notes (``memory/2025-11-27.md``) decay like any memory; lasting
    knowledge kept in a workspace's ``MEMORY.md`` does not (seed 004).
    """
    if not source:
        return False
    path = PurePosixPath(source.replace("\\", "/").split("#", 1)[0])
    name = path.name.lower()
    if name in EVERGREEN_FILES:
        return True
    return (
        name.endswith(".md")
        and "memory" in (p.lower() for p in path.parts[:-1])
        and not _DATED_FILE.match(name)
    )


def decay(
    scores: Mapping[K, float],
    made: Mapping[K, tuple[datetime, bool, str | None]],
    now: datetime,
    half_life_days: float,
) -> tuple[dict[K, float], dict[K, dict[str, Any]]]:
    """The decay stage: each score decayed by the age of its memory (``made``: created at,
    pinned, source), and what decay did to each (its age and factor, or why it is exempt)."""
    ages: dict[K, float | None] = {}
    trace: dict[K, dict[str, Any]] = {}
    for key, (created, pinned, source) in made.items():
        if pinned or evergreen_source(source):
            ages[key] = None
            trace[key] = {"stage": "decay", "exempt": "pinned" if pinned else "evergreen"}
        else:
            age = ages[key] = age_days(created, now)
            factor = round(decay_factor(age, half_life_days), 6)
            trace[key] = {"stage": "decay", "age_days": round(age, 2), "factor": factor}
    return apply_decay(scores, ages, half_life_days), trace


def apply_decay(
    scores: Mapping[K, float], ages: Mapping[K, float | None], half_life_days: float
) -> dict[K, float]:
    """Each score times its decay factor; an age of ``None`` means exempt."""
    out = {}
    for key, score in scores.items():
        age = ages.get(key)
        out[key] = score if age is None else score * decay_factor(age, half_life_days)
    return out


# -- 4. confidence -------------------------------------------------------------------


def apply_confidence(scores: Mapping[K, float], confidences: Mapping[K, float]) -> dict[K, float]:
    """Each score times its memory's confidence (1.0 when unknown)."""
    return {key: score * confidences.get(key, 1.0) for key, score in scores.items()}


# -- 5. MMR --------------------------------------------------------------------------


def word_set(text: str) -> frozenset[str]:
    """Lower-cased words of ``text``, each CJK character on its own (for Jaccard)."""
    words = set()
    for word in _WORDS.findall(text.lower()):
        if has_cjk(word):
            words.update(word)
        else:
            words.add(word)
    return frozenset(words)


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 0.0
    return len(a & b) / len(a | b)


def mmr(
    order: Sequence[K],
    scores: Mapping[K, float],
    similarity: Callable[[K, K], float],
    k: int,
    lam: float,
) -> list[K]:
    """Maximal marginal relevance: pick ``k`` of ``order`` trading relevance for novelty.

    Relevance is the score divided by the best score, so ``λ`` weighs two
    quantities on the same [0, 1] scale. Ties keep the input order, so the
    result is deterministic; with ``λ = 1`` it is the input order. Returns
    ``min(k, len(order))`` keys.
    """
    if not 0.0 <= lam <= 1.0:
        raise ValueError("mmr lambda must be between 0 and 1")
    remaining = list(order)
    if not remaining or k <= 0:
        return []
    top = max(scores[key] for key in remaining)
    scale = 1.0 / top if top > 0 else 1.0
    chosen: list[K] = []
    closest = dict.fromkeys(remaining, 0.0)  # max similarity to the chosen so far
    while remaining and len(chosen) < k:
        best_index, best_value = 0, -math.inf
        for index, key in enumerate(remaining):
            value = lam * scores[key] * scale - (1.0 - lam) * closest[key]
            if value > best_value:
                best_index, best_value = index, value
        picked = remaining.pop(best_index)
        chosen.append(picked)
        for key in remaining:
            closest[key] = max(closest[key], similarity(key, picked))
    return chosen


def ranked(scores: Mapping[K, float], order: Sequence[K]) -> list[K]:
    """``order`` re-sorted by ``scores`` (best first), ties in their previous order."""
    position = {key: i for i, key in enumerate(order)}
    return sorted(order, key=lambda key: (-scores[key], position[key]))
