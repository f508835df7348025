"""The relevance floor: a search returns nothing rather than hits no arm finds relevant.

The vector arm always has a nearest memory, so without a floor a question about
something never stored fills the page. The floor asks each arm, in its own units,
how the store's answer to this query compares with what the same store gives
queries that have nothing to do with it:

- **The vector arm** is read against the store's *background*: the median, over a
  fixed set of unrelated queries (:mod:`mnemex.search.background`), of the best
  cosine the namespace searched gives each. A store of short chat turns answers
  any chat-like text at a higher cosine than a store of long notes does, and a
  memory of many windows has more chances; the background measures both, so a
  memory is judged by how far its cosine stands *above* it, whatever its length.
- **The lexical arm** gives each memory its normalized BM25 (see
  :func:`mnemex.index.query.normalized_score`): the share of the query's weight it
  holds, with the store's own IDFs.
- **What the query names**: a query term that this namespace holds far more often
  than the language does (its *lift*, :func:`lift`: the observed share of memories
  holding it over what its general frequency predicts) names something the store is
  about: a person, a project, a term of its trade.
- **Text the model cannot read** (:func:`readable`: most of its words are not words
  of the model's vocabulary: another script, code identifiers, jargon) has
  meaningless cosines; for it the lexical arm decides.

A query is answered (:func:`relevant_query`) when some candidate's cosine stands
``above`` the background; or when its height above the background and its text
score add up to ``agree`` (the two arms vouch together: a memory holding much of
the query needs less of the vector arm, one it barely names needs more); or
``named_above`` when the query names a term of the store (lift ≥
``characteristic``); or, where the model cannot read the query or the memory, when
its text score reaches ``unread_text``. Then each hit
(:func:`relevant_hit`) stays when its cosine is ``hit_above`` what unrelated queries give
a single memory of the store (the background's ``memory``) or its text score reaches
``hit_text``. No rule reads letter case, markup or layout: the
model and the lexical arm are case-blind, and so is every input here.

The cut-offs mean different things for different models, so they are calibrated
per model, on stores of every layout (a memory per turn, per session, workspace
chunks, abstracts, small stores of notes) against questions of other stores
(``benchmarks/RESULTS.md``, "The relevance floor"). A model without a calibration
gets no floor on its cosines.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable, Container, Iterable, Mapping
from functools import cache

from mnemex.records import dataclass

FLOOR_VERSION = "floor-v6"


@dataclass(frozen=True, slots=True)
class Floor:
    """A model's cut-offs: cosines above the store's background, text scores, lift; and
    the model they were calibrated for (its background queries' vectors ship under it)."""

    model: str
    above: float  # a cosine this far above the background answers alone
    agree: float  # ... or, added to the memory's text score, this much
    named_above: float  # ... or this far, when the query names what the store is about
    characteristic: float  # the lift of such a term
    unread_text: float  # where the model cannot read: the text score that answers
    hit_above: float  # a hit stays this far above what unrelated queries give one memory
    hit_text: float  # or with this text score


# Calibrated on LoCoMo-dev (a memory per turn, per session, and workspace chunks, each
# asked its own questions and the other conversations'), SciFact, CISI and the bundled
# paraphrase set, each asked the others' queries (benchmarks/RESULTS.md, "The relevance
# floor").
CALIBRATED = {
    "all-minilm-l6-v2": Floor(
        model="all-minilm-l6-v2",
        above=0.22,
        agree=0.45,
        named_above=0.15,
        characteristic=2.0,
        unread_text=0.10,
        hit_above=0.0,
        hit_text=0.15,
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


@dataclass(frozen=True, slots=True)
class Evidence:
    """What the arms say of one candidate: how far its cosine stands above the store's
    background level, and above what unrelated queries give one memory (both ``None`` when
    the model cannot read the query or the memory, or it has no vector yet); its text
    score."""

    above: float | None
    beyond: float | None
    text: float


def relevant_query(floor: Floor, candidates: Iterable[Evidence], lift: Callable[[], float]) -> bool:
    """True when some candidate answers the query at all; ``lift``: the highest lift of a
    term of the query in the store (:func:`lift`), asked only when it decides."""
    named: list[Evidence] = []
    for c in candidates:
        if c.above is None:
            if c.text >= floor.unread_text:
                return True
        elif c.above >= floor.above or c.above + c.text >= floor.agree:
            return True
        elif c.above >= floor.named_above:
            named.append(c)
    return bool(named) and lift() >= floor.characteristic


def relevant_hit(floor: Floor, evidence: Evidence) -> bool:
    """True when an arm finds the hit relevant: its cosine ``hit_above`` what unrelated
    queries give one memory, or its text score ``hit_text``."""
    if evidence.beyond is not None and evidence.beyond >= floor.hit_above:
        return True
    return evidence.text >= floor.hit_text


# -- what the model can read -------------------------------------------------------------

_WORD = re.compile(r"\w+")
_IDEOGRAPHS = r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]"
READABLE_SHARE = 0.5  # at least this share of the words must be words of the model


@cache
def _ideograph() -> re.Pattern[str]:
    """A CJK character the model reads as a word of its own. Compiled on first use: the
    class costs a new process about 4 ms to compile, which ASCII text never needs."""
    return re.compile(_IDEOGRAPHS)


def words(text: str) -> list[str]:
    """The words of ``text``, case-folded ("ß" as "ss", so that no case changes them)
    without diacritics; each CJK character a word of its own (as a WordPiece vocabulary
    holds them)."""
    lowered = text.casefold()
    if lowered.isascii():  # no ideograph, nothing to strip: the words as they are
        return _WORD.findall(lowered)
    out: list[str] = []
    for word in _WORD.findall(lowered):
        if word.isascii():  # no diacritic, no ideograph: the word itself (most words)
            out.append(word)
            continue
        out.extend(_ideograph().findall(word))
        for piece in _ideograph().split(word):
            plain = "".join(
                c for c in unicodedata.normalize("NFD", piece) if unicodedata.category(c) != "Mn"
            )
            if plain:
                out.append(plain)
    return out


def readable(text: str, vocabulary: Mapping[str, int]) -> bool:
    """Whether the model reads ``text``: at least :data:`READABLE_SHARE` of its words (digits
    aside) are whole words of its vocabulary. Text of another script, code identifiers and
    jargon are read as pieces, or not at all, and their cosines say little."""
    found = [w for w in words(text) if not w.isdigit()]
    if not found:
        return True
    known = sum(1 for w in found if w in vocabulary)
    return known >= READABLE_SHARE * len(found)


# -- what the query names ----------------------------------------------------------------


def model_words() -> tuple[dict[str, int], int]:
    """The calibrated model's vocabulary (each token's id; the table the local embedder
    reads too) and the id of its first whole word (``the``: from there on, whole words
    come most frequent first)."""
    from mnemex.embed.wordpiece import vocabulary

    table = vocabulary()
    return table, table["the"]


def model_holds() -> Container[str]:
    """The model's vocabulary, to ask whether it holds a token whole: the table of
    :func:`model_words` once this process has built it, else the vocabulary file itself,
    searched (a new process builds the table in 4 to 7 ms, which most queries never need)."""
    from mnemex.embed.wordpiece import vocabulary_loaded

    if vocabulary_loaded():
        return model_words()[0]
    return _VocabularyFile(_vocabulary_lines())


@dataclass(frozen=True, slots=True)
class _VocabularyFile:
    """A vocabulary read from its file."""

    lines: bytes  # the file's tokens, each between two newlines

    def __contains__(self, token: object) -> bool:
        if not isinstance(token, str):
            return False
        return b"\n" + token.encode("utf-8", "surrogatepass") + b"\n" in self.lines


@cache
def _vocabulary_lines() -> bytes:
    from mnemex.embed.wordpiece import VOCAB

    return b"\n" + VOCAB.read_bytes().rstrip(b"\n") + b"\n"


UNSEEN_FREQUENCY = 1e-6  # a word the vocabulary does not hold whole: rarer than its last word
ZIPF = 0.1  # a word's frequency is about 0.1 / its rank (Zipf's law)


def frequency(word: str, vocabulary: Mapping[str, int], first: int) -> float:
    """The word's frequency in general text, from its rank in the model's vocabulary (a
    WordPiece vocabulary lists whole words most frequent first, from index ``first``);
    a word it does not hold whole is rarer than any it does."""
    index = vocabulary.get(word)
    if index is None or index < first or word.startswith("##"):  # a piece, not a word
        return UNSEEN_FREQUENCY
    return ZIPF / (index - first + 1)


def lift(
    terms: Iterable[tuple[str, int]],
    n_docs: int,
    avg_tokens: float,
    vocabulary: Mapping[str, int],
    first: int,
) -> float:
    """The highest lift of a term the namespace holds: log10 of the share of its memories
    holding the term over the share its general frequency predicts for memories of
    ``avg_tokens`` tokens. ``terms``: (word, document frequency in the namespace); words
    with digits are left out (dates and numbers are not what a store is about). -inf
    when the namespace holds none of them."""
    best = -math.inf
    if n_docs <= 0:
        return best
    for word, df in terms:
        if df <= 0 or any(c.isdigit() for c in word):
            continue
        expected = min(1.0, frequency(word, vocabulary, first) * max(avg_tokens, 1.0))
        best = max(best, math.log10((df / n_docs) / expected))
    return best
