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
   best cosine as much as an in-domain one's. A chunk of several lines of a
   workspace file holds several things, so its cosine to a question about one
   of them is lower than that line's would be: when the query names a word
   the store holds (a word written with a capital that does not open a
   sentence, "Caroline", whose term some memory searched holds), such a chunk
   also passes when either arm reaches its agreement cut-off alone. A query
   naming nothing, written without a capital or with one only where a
   sentence opens (a typed prompt: "What did caroline do in june?"), says
   nothing by its capitals: for it, the chunk itself must write one of the
   query's words as a name ("- Caroline: …" for "caroline"). A question
   naming someone the store never heard of gets the gate above.
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

from mnemex.index.fts import LexicalPlan
from mnemex.index.query import named_words

FLOOR_VERSION = "floor-v5"


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
# floor-v3 adds the gate on chunks of several lines for queries naming a word the store
# holds, with the same cut-offs: LoCoMo-dev as a workspace found@1 / found@5 0.6316 /
# 0.8342 -> 0.6697 / 0.8882 (no floor 0.6750 / 0.8934), its other conversations'
# questions keeping a hit 8.5 -> 12.0 %, per-memory stores unchanged (RESULTS.md, "The
# relevance floor on workspace stores (issue 11)"). floor-v4: a query written without a
# capital gets that gate on the chunks that write one of its words as a name; with every
# query lower-cased, found@1 / found@5 -0.0434 / -0.0592 -> -0.0066 / -0.0066 against no
# floor, other conversations' questions 8.5 -> 11.5 % (RESULTS.md, "A gate for chunks when
# the query names what the store holds"). floor-v5: so does a query naming nothing, written
# with a capital only where a sentence opens ("What did caroline do in june?"): with every
# query sentence-cased, found@1 / found@5 -0.0434 / -0.0592 -> -0.0066 / -0.0066, other
# conversations' questions 8.5 -> 11.5 %; the cased and lower-cased tables as v4 (RESULTS.md,
# "Queries with a capital only where a sentence opens (floor-v5)").
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
    chunks: Callable[[list[int]], list[int]] | None = None,
) -> bool:
    """True when some candidate is relevant enough to answer the query at all.

    ``cosines`` are each candidate's best window's; ``token_cosines`` gives, for the
    candidates that have sentence windows, their best token window's, which the gate
    reads instead: it is asked only about the candidates ``cosines`` would let through.
    ``chunks``, asked only when the default gate fails, picks from the candidates it is
    given those that are chunks of several lines, when the query names a word the store
    holds (:func:`names_held`) or names nothing (:func:`names_nothing`; then only chunks
    that write one of its words as a name, :func:`writes_as_name`), else none: one of them
    passes on either arm's agreement cut-off alone."""
    seqs = list(seqs)
    if _gate(floor, _vouched, seqs, text, cosines, token_cosines):
        return True
    if chunks is None:
        return False
    either = [seq for seq in seqs if _either(floor, cosines.get(seq, -1.0), text.get(seq))]
    return bool(either) and _gate(floor, _either, chunks(either), text, cosines, token_cosines)


Vouch = Callable[[Floor, float, float | None], bool]


def _gate(
    floor: Floor,
    vouch: Vouch,
    seqs: list[int],
    text: Mapping[int, float],
    cosines: Mapping[int, float],
    token_cosines: Callable[[list[int]], Mapping[int, float]] | None,
) -> bool:
    """Some candidate passes ``vouch`` on its best window, then on its best token window."""
    passing = [seq for seq in seqs if vouch(floor, cosines.get(seq, -1.0), text.get(seq))]
    if not passing or token_cosines is None:
        return bool(passing)
    tokens = token_cosines(passing)
    return any(
        vouch(floor, tokens.get(seq, cosines.get(seq, -1.0)), text.get(seq)) for seq in passing
    )


def _vouched(floor: Floor, cosine: float, text: float | None) -> bool:
    """A candidate's cosine reaches the query's cut-off, or both arms vouch for it."""
    return cosine >= floor.query_cosine or (
        cosine >= floor.agree_cosine and (text or 0.0) >= floor.agree_text
    )


def _either(floor: Floor, cosine: float, text: float | None) -> bool:
    """Either arm reaches its agreement cut-off on its own."""
    return cosine >= floor.agree_cosine or (text or 0.0) >= floor.agree_text


def names_held(lexical: LexicalPlan, query: str) -> bool:
    """The query names a word (:func:`mnemex.index.query.named_words`) that some memory
    searched holds: its term's document frequency in the plan is not zero."""
    names = named_words(query)
    return bool(names) and any(
        df and term.word in names for term, df in zip(lexical.terms, lexical.doc_freqs, strict=True)
    )


def names_nothing(query: str) -> bool:
    """The query writes no word as a name (:func:`mnemex.index.query.named_words`): no
    capital, or one only where a sentence opens; its capitals cannot tell what it names."""
    return not named_words(query)


def writes_as_name(lexical: LexicalPlan, content: str) -> bool:
    """The memory's text writes a word of the query as a name
    (:func:`mnemex.index.query.named_words` of the memory: "- Caroline: …" for
    "caroline")."""
    names = named_words(content)
    return bool(names) and any(term.word in names for term in lexical.terms)


def relevant_hit(floor: Floor, text: float | None, cosine: float | None) -> bool:
    """True when an arm finds the hit relevant."""
    return (cosine is not None and cosine >= floor.hit_cosine) or (
        text is not None and text >= floor.hit_text
    )
