"""From tokens to FTS5 terms: pure functions, no I/O.

A natural-language query never reaches FTS5 as typed. It is tokenized by
FTS5's own tokenizer (see :mod:`mnemex.index.fts`), and every resulting term
is written as a double-quoted FTS5 string, so no input character can be read
as FTS5 syntax. Terms are joined with ``OR`` (never AND-only), ranked by
BM25, which weights rare terms above common ones.

CJK characters are indexed one per token (see :mod:`mnemex.text`); a run of
them in a query becomes the phrases of each pair of adjacent characters, the
same substrings that bigram indexing matches (a lone character stays a term).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

MAX_QUERY_TERMS = 48  # longer queries keep their rarest terms
FTS_OPERATORS = frozenset({"and", "or", "not", "near"})


@dataclass(frozen=True, slots=True)
class Token:
    """One token of query text as FTS5 sees it, or a run of adjacent CJK characters."""

    surface: str  # lower case, accents removed (unicode61); a CJK run as written
    stem: str  # after the porter stemmer: what the index holds
    position: int
    cjk_run: bool = False


@dataclass(frozen=True, slots=True)
class Term:
    """A query term: what to MATCH, and the key its statistics are found under."""

    key: str  # index term (stem) or, for a CJK phrase, its characters joined by spaces
    match: str  # a double-quoted FTS5 string
    phrase: bool  # a multi-token phrase (document frequency needs a count query)
    stop: bool  # a stop word


def quote(text: str) -> str:
    """An FTS5 string literal: any text, no syntax."""
    return '"' + text.replace('"', '""') + '"'


def build_terms(tokens: Sequence[Token], stopwords: frozenset[str]) -> list[Term]:
    """Query terms in order of appearance, deduplicated by index term.

    A word becomes one term; a run of CJK characters becomes the phrase of
    each pair of adjacent characters (a single character stays a term).
    """
    terms: dict[str, Term] = {}
    for token in sorted(tokens, key=lambda t: t.position):
        if not token.cjk_run:
            key = token.stem
            terms.setdefault(
                key, Term(key, quote(token.surface), False, token.surface in stopwords)
            )
        elif len(token.surface) == 1:
            char = token.surface
            terms.setdefault(char, Term(char, quote(char), False, char in stopwords))
        else:
            run = token.surface
            for left, right in itertools.pairwise(run):
                pair = f"{left} {right}"
                terms.setdefault(pair, Term(pair, quote(pair), True, False))
    return list(terms.values())


def content_terms(terms: Sequence[Term]) -> tuple[list[Term], list[Term]]:
    """Split into (terms to search, stop words dropped). All-stop-word queries keep them."""
    kept = [t for t in terms if not t.stop]
    if not kept:
        return list(terms), []
    return kept, [t for t in terms if t.stop]


def idf(doc_freq: int, n_docs: int) -> float:
    """Inverse document frequency exactly as FTS5's ``bm25()`` computes it."""
    value = math.log((n_docs - doc_freq + 0.5) / (doc_freq + 0.5))
    return value if value > 0.0 else 1e-6


def keep_rarest(terms: Sequence[Term], doc_freqs: Sequence[int], limit: int) -> list[int]:
    """Indexes of the ``limit`` terms with the lowest document frequency, in query order."""
    if len(terms) <= limit:
        return list(range(len(terms)))
    ranked = sorted(range(len(terms)), key=lambda i: (doc_freqs[i], i))
    return sorted(ranked[:limit])


def shape(doc_freqs: Sequence[int], budget: int, pool: int) -> tuple[list[int], list[int]]:
    """Split term indexes into (essential, rest) so that scoring stays within ``budget``.

    Essential terms are the rarest, taken while their document frequencies
    add up to at most ``budget`` (always at least one, and enough to expect
    ``pool`` candidate rows). Candidates are rows containing an essential
    term; every candidate is still scored with all terms, which costs two
    scorings of each candidate, so shaping is only chosen when that is less
    work than scoring every matching row once. With ``budget`` 0, or when all
    terms fit, every term is essential and the search is exact.
    """
    order = sorted(range(len(doc_freqs)), key=lambda i: (doc_freqs[i], i))
    total = sum(doc_freqs)
    if budget <= 0 or total <= budget:
        return order, []
    essential: list[int] = []
    acc = 0
    for i in order:
        if essential and acc + doc_freqs[i] > budget and acc >= pool:
            break
        essential.append(i)
        acc += doc_freqs[i]
    if 2 * acc >= total:
        return order, []
    rest = [i for i in order if i not in essential]
    return essential, rest


def or_join(matches: Iterable[str]) -> str:
    return " OR ".join(matches)


def normalized_score(raw: float, norm: float) -> float:
    """Map a (positive) BM25 score to [0, 1): ``tanh(raw / norm)``.

    ``norm`` is the sum of the query terms' IDFs: what a row containing each
    term once, at average length, scores. A row that covers the query's
    weight fully scores about 0.76; half of it about 0.46; more occurrences
    or a shorter row push towards 1. Higher is better, and distinct raw
    scores give distinct normalized scores.
    """
    if raw <= 0.0 or norm <= 0.0:
        return 0.0
    return math.tanh(raw / norm)
