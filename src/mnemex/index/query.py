"""From tokens to FTS5 terms: pure functions, no I/O.

A natural-language query never reaches FTS5 as typed. It is tokenized by
FTS5's own tokenizer (see :mod:`mnemex.engine.sqlite.fts`), and every resulting term
is written as a double-quoted FTS5 string, so no input character can be read
as FTS5 syntax. Terms are joined with ``OR`` (never AND-only), ranked by
BM25, which weights rare terms above common ones.

CJK characters are indexed one per token (see :mod:`mnemex.text`); a run of
them in a query becomes the phrases of each pair of adjacent characters, the
same substrings that bigram indexing matches (a lone character stays a term).

Query expansion (:func:`expand_terms`) turns a conversational question into
its content words: stop words of every supported language and one-letter
words are set aside (they come back when nothing else is left); a Korean
word loses its trailing particle; a run of Chinese or Japanese characters is
cut at its function words, so no phrase straddles one. Every term it keeps is
a substring of what the question said, so a memory holding the question's
words still matches. It stays one OR query, so that a row's score adds up
the query terms it contains.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace

from mnemex.index.stopwords import KOREAN_PARTICLES
from mnemex.records import dataclass

MAX_QUERY_TERMS = 48  # longer queries keep their rarest terms
FTS_OPERATORS = frozenset({"and", "or", "not", "near"})
MIN_WORD_CHARS = 2  # shorter words (a, x) are set aside; "db", "ui", "os" are content
MIN_KOREAN_STEM = 2  # syllables a Korean word keeps when its particle is stripped
MAX_CJK_STOPWORD = 4  # characters of the longest Chinese or Japanese stop word

# Compiled on first use (the re module caches it): only a run of CJK characters needs it.
_HANGUL = "[\u1100-\u11ff\u3130-\u318f\ua960-\ua97f\uac00-\ud7ff\uffa0-\uffdc]"
_HIRAGANA = re.compile("([\u3041-\u309f]+)")


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
    count: int = 1  # times the query says it: BM25 counts each, as FTS5 counts a repeated OR term

    @property
    def word(self) -> str:
        """The word as the query writes it, folded as the index folds it (a CJK phrase: its
        characters joined by spaces)."""
        return self.match[1:-1].replace('""', '"')

    @property
    def expression(self) -> str:
        """The term as it goes into the OR query: its string once per time the query says it."""
        return or_join([self.match] * self.count)


def quote(text: str) -> str:
    """An FTS5 string literal: any text, no syntax."""
    return '"' + text.replace('"', '""') + '"'


def build_terms(tokens: Sequence[Token], stopwords: frozenset[str]) -> list[Term]:
    """Query terms in order of appearance, one per index term, counting repeats.

    A word becomes one term; a run of CJK characters becomes the phrase of
    each pair of adjacent characters (a single character stays a term). A
    term said again (the same index term, as "run" and "running" are) counts
    once more, as it does in FTS5's BM25 of the OR of every word.
    """
    terms: dict[str, Term] = {}

    def add(term: Term) -> None:
        known = terms.get(term.key)
        terms[term.key] = term if known is None else replace(known, count=known.count + 1)

    for token in sorted(tokens, key=lambda t: t.position):
        if not token.cjk_run:
            add(Term(token.stem, quote(token.surface), False, token.surface in stopwords))
        else:
            run = token.surface
            for term in cjk_terms(run, len(run) == 1 and run in stopwords):
                add(term)
    return list(terms.values())


def cjk_terms(run: str, stop: bool) -> Iterator[Term]:
    """The phrase of each pair of adjacent characters of a run; a lone character as is."""
    if len(run) == 1:
        yield Term(run, quote(run), False, stop)
        return
    for left, right in itertools.pairwise(run):
        pair = f"{left} {right}"
        yield Term(pair, quote(pair), True, stop)


def expand_terms(
    tokens: Sequence[Token], stopwords: frozenset[str], letters: frozenset[str] = frozenset()
) -> list[Term]:
    """Query terms in order of appearance, with weak words flagged as stop words.

    Like :func:`build_terms`, but one-letter words are set aside with the
    stop words (see :func:`weak_word`) unless the query writes them as
    capitals that name something (``letters``, see :func:`capital_letters`),
    a Korean word is searched without its trailing particle, and a run of
    Chinese or Japanese characters is cut at its function words (see
    :func:`run_pieces`). A term found both as a stop word and as a content
    word is content; repeats count as in :func:`build_terms`.
    """
    terms: dict[str, Term] = {}

    def add(term: Term) -> None:
        known = terms.get(term.key)
        if known is None:
            terms[term.key] = term
        else:  # the content word's spelling wins
            first = term if known.stop and not term.stop else known
            terms[term.key] = replace(first, stop=known.stop and term.stop, count=known.count + 1)

    for token in sorted(tokens, key=lambda t: t.position):
        if not token.cjk_run:
            weak = token.surface not in letters and weak_word(token.surface, stopwords)
            add(Term(token.stem, quote(token.surface), False, weak))
        else:
            for piece, stop in run_pieces(token.surface, stopwords):
                for term in cjk_terms(piece, stop):
                    add(term)
    return list(terms.values())


def weak_word(surface: str, stopwords: frozenset[str]) -> bool:
    """A word that says little on its own: a stop word, or one character that is not a digit.

    Numbers are kept (dropping them cost SciFact in lexical mode). Punctuation needs
    no rule: FTS5's tokenizer never makes a token of it.
    """
    return surface in stopwords or (len(surface) < MIN_WORD_CHARS and not surface.isdigit())


_CAPITAL = re.compile(r"(?<![\w'’])([A-Z])(?![\w'’])")
_SENTENCE_START = re.compile(r"(?:^|[.!?:;]\s+|\n)\s*$")
_LOOK_BACK = 64  # characters before a lone "A" read to tell whether it opens a sentence


def capital_letters(text: str) -> frozenset[str]:
    """One-letter words the text writes as capitals that name something, lower-cased.

    Initials ("B. F. Skinner"), vitamins and cell types ("vitamin A", "T
    cells"): a lone capital letter. Not "I", and not an "A" that opens a
    sentence (the article). Lower-case one-letter words stay weak words:
    most are the tails of contractions ("it's", "don't") or stray letters.
    """
    found = set()
    for match in _CAPITAL.finditer(text):
        letter = match.group(1)
        start = match.start()
        if letter == "I" or (
            letter == "A" and _SENTENCE_START.search(text, max(0, start - _LOOK_BACK), start)
        ):
            continue
        found.add(letter.lower())
    return frozenset(found)


def strip_particle(word: str, particles: Sequence[str] = KOREAN_PARTICLES) -> str:
    """A Korean word without its trailing particle (사과를 -> 사과).

    Only when at least ``MIN_KOREAN_STEM`` syllables remain: a shorter rest
    is more often a word that merely ends like a particle (회의, 도로).
    ``particles`` are tried longest first.
    """
    for particle in particles:
        if word.endswith(particle) and len(word) - len(particle) >= MIN_KOREAN_STEM:
            return word[: -len(particle)]
    return word


def run_pieces(run: str, stopwords: frozenset[str]) -> list[tuple[str, bool]]:
    """A run of CJK characters cut into (piece, is stop word), in order.

    Korean words are separated by spaces, so a Hangul run is one word: it
    loses its particle and is a stop word as a whole or not at all (그 is
    "that", 그림 is "picture"). Chinese and Japanese runs have no spaces: a
    stop word is cut out wherever it stands, except in hiragana, where
    words are also written; there a stretch of hiragana is cut out only when
    it is made entirely of stop words (会議|は|いつ, not おにぎり), and not
    from the start of the run when it opens with a one-character particle
    (もも, "peach", is not も + も).
    """
    if re.search(_HANGUL, run):
        stem = strip_particle(run)
        return [(stem, run in stopwords or stem in stopwords)]
    pieces: list[tuple[str, bool]] = []
    content = ""
    for index, segment in enumerate(_HIRAGANA.split(run)):
        if index % 2:  # hiragana
            if _made_of(segment, stopwords, single_first=bool(content or pieces)):
                pieces.extend([(content, False), (segment, True)])
                content = ""
            else:
                content += segment
            continue
        start = 0
        while start < len(segment):
            size = _stopword_at(segment, start, stopwords)
            if size:
                pieces.extend([(content, False), (segment[start : start + size], True)])
                content = ""
                start += size
            else:
                content += segment[start]
                start += 1
    pieces.append((content, False))
    return [(piece, stop) for piece, stop in pieces if piece]


def _stopword_at(text: str, start: int, stopwords: frozenset[str]) -> int:
    """Length of the longest stop word at ``start`` (0 if none)."""
    for size in range(min(MAX_CJK_STOPWORD, len(text) - start), 0, -1):
        if text[start : start + size] in stopwords:
            return size
    return 0


def _made_of(text: str, stopwords: frozenset[str], *, single_first: bool) -> bool:
    """True when ``text`` is a sequence of stop words (the first one longer than a
    character unless ``single_first``)."""
    # ends[i]: text[i:] is such a sequence (filled from the end: no recursion on long text)
    ends = [False] * len(text) + [True]
    for start in range(len(text) - 1, -1, -1):
        ends[start] = any(
            ends[start + size]
            and text[start : start + size] in stopwords
            and (size > 1 or single_first or start > 0)
            for size in range(1, min(MAX_CJK_STOPWORD, len(text) - start) + 1)
        )
    return ends[0]


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
