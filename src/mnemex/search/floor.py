"""The relevance floor: a search returns nothing rather than hits no arm finds relevant.

The vector arm always has a nearest memory, so without a floor a question
about something never stored fills the page. The floor has two steps, both
in the arms' own units (cosine; normalized BM25, see
:func:`mnemex.index.query.normalized_score`):

1. **The query**: something in the store must be relevant to it: a
   candidate whose cosine reaches ``query_cosine``, or one that both arms
   vouch for (``agree_text`` and ``agree_cosine``). Otherwise the search
   returns no hits and says so. The cosine read here is the candidate's best
   *token* window's: a sentence window (see
   :meth:`mnemex.embed.local.LocalEmbedder.windows`) lifts a foreign query's
   best cosine as much as an in-domain one's.
2. **Each hit**: a hit stays when its cosine (its best window's, sentence
   windows too, as it ranks) reaches ``hit_cosine`` or its text score reaches
   ``hit_text``.

Cosines mean different things for different models, so the cut-offs are
calibrated per model, from the trade-off curve of foreign queries (queries
of one dataset against stores of another) against in-domain recall
(``benchmarks/RESULTS.md``, "Adaptive fusion and the relevance floor"). A
model without a calibration gets no floor on its cosines. Lexical scores
alone were measured unable to tell a foreign query from an in-domain one
(a floor that cut 23 % of foreign queries cost CISI 0.13 nDCG@10), so a
lexical search keeps every row its expression matches.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

FLOOR_VERSION = "floor-v2"


@dataclass(frozen=True, slots=True)
class Floor:
    query_cosine: float
    agree_cosine: float
    agree_text: float
    hit_cosine: float
    hit_text: float


# Calibrated on SciFact train/test, CISI and LoCoMo-dev with foreign queries from the
# others, on best-window cosines before sentence windows (floor-v2; v1 had agree_text
# 0.30, calibrated on first windows); the query gate reads best token windows since, the
# same cosines: 4.2 % of 926 foreign queries keep a hit (0-4 % per pair, except CISI's
# library-science questions against SciFact abstracts: 35.5 %), in-domain nDCG@10 / R@10
# within 0.003 (benchmarks/RESULTS.md, "A vector per sentence: built, off by default").
CALIBRATED = {
    "all-minilm-l6-v2": Floor(
        query_cosine=0.40, agree_cosine=0.30, agree_text=0.40, hit_cosine=0.20, hit_text=0.15
    ),
}


def floor_for(model_id: str | None) -> Floor | None:
    """The calibrated floor of an embedding model, or ``None`` when it has none."""
    if not model_id:
        return None
    name = model_id.lower()
    for key, floor in CALIBRATED.items():
        if key in name:
            return floor
    return None


def relevant_query(
    floor: Floor,
    seqs: Iterable[int],
    text: Mapping[int, float],
    cosines: Mapping[int, float],
    token_cosines: Callable[[list[int]], Mapping[int, float]] | None = None,
) -> bool:
    """True when some candidate is relevant enough to answer the query at all.

    ``cosines`` are each candidate's best window's; ``token_cosines`` gives, for the
    candidates that have sentence windows, their best token window's, which the gate
    reads instead: it is asked only about the candidates ``cosines`` would let through."""
    passing = [seq for seq in seqs if _vouched(floor, cosines.get(seq, -1.0), text.get(seq))]
    if not passing or token_cosines is None:
        return bool(passing)
    tokens = token_cosines(passing)
    return any(_vouched(floor, tokens.get(seq, cosines[seq]), text.get(seq)) for seq in passing)


def _vouched(floor: Floor, cosine: float, text: float | None) -> bool:
    """A candidate's cosine reaches the query's cut-off, or both arms vouch for it."""
    return cosine >= floor.query_cosine or (
        cosine >= floor.agree_cosine and (text or 0.0) >= floor.agree_text
    )


def relevant_hit(floor: Floor, text: float | None, cosine: float | None) -> bool:
    """True when an arm finds the hit relevant."""
    return (cosine is not None and cosine >= floor.hit_cosine) or (
        text is not None and text >= floor.hit_text
    )
