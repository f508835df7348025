"""Spelling tolerance: a query word the store does not hold, read as the store's word it
misspells.

People misspell names ("Carolinn", "Muhhamed") and type them in lower case, and chats
spell them in ways a question does not ("Fahim" / "Faheem"). A query word is a
*misspelling* worth correcting when:

- the namespace searched holds no memory with it (its document frequency is 0);
- it has at least :data:`MIN_LETTERS` letters and is not a word of the model's
  vocabulary (a real word, "Andrew", "join", is what it says, even if the store only
  knows "John");
- a term the namespace holds, of at least :data:`MIN_MEANT` letters, is within
  :func:`allowed_edits` of it (Damerau-Levenshtein: a letter added, dropped, changed, or
  two swapped), starts with the same letter, and the store uses it at least as often as
  English does (its lift, :func:`mnemex.search.floor.lift`, at least :data:`MIN_LIFT`: a
  name, a term of its trade, even one every memory holds, as a speaker's name in every
  session of a chat; a word the store barely uses is not what a query misspells).

The nearest such term wins (fewer edits, then more memories holding it). The search then
runs on the corrected query in both arms, and says so in its notes. Letter case plays no
part: the lexical arm's terms are case-folded, and so is the vocabulary.
"""

from __future__ import annotations

from collections.abc import Container, Iterable

from mnemex.records import dataclass

MIN_LETTERS = 3  # a written word this short ("jhn") is still read as a longer one it misses
MIN_MEANT = 4  # a shorter word meant has too many neighbours one edit away ("tim", "tom")
LONG_WORD = 12  # a word this long may be two edits away
MIN_LIFT = 0.0  # how much more the store uses the word meant than English does (floor.lift)
MAX_CORRECTIONS = 2  # query words corrected at most


@dataclass(frozen=True, slots=True)
class Correction:
    """A query word (its index term) read as a term the store holds."""

    written: str
    meant: str
    distance: int
    held: int  # memories holding the word meant


def allowed_edits(a: str, b: str) -> int:
    """Edits a misspelling may be from the word it stands for: 1, or 2 for long words."""
    return 2 if max(len(a), len(b)) >= LONG_WORD else 1


def worth_correcting(word: str, df: int, vocabulary: Container[str]) -> bool:
    """Whether a query word (as the query writes it, folded) may be a misspelling of a
    word the store holds (see the module docstring)."""
    return unheld(word, df) and word not in vocabulary


def unheld(word: str, df: int) -> bool:
    """:func:`worth_correcting` but for the vocabulary: a word of letters, long enough,
    that no memory searched holds."""
    return df == 0 and len(word) >= MIN_LETTERS and word.isalpha()


def nearest(term: str, held: Iterable[tuple[str, int]]) -> Correction | None:
    """The term of ``held`` (index term, memories holding it) that ``term`` most likely
    misspells, or ``None``."""
    best: tuple[int, int, str] | None = None
    for candidate, df in held:
        distance = edits(term, candidate) if df > 0 else None
        if distance is not None and (best is None or (distance, -df, candidate) < best):
            best = (distance, -df, candidate)
    return None if best is None else Correction(term, best[2], best[0], -best[1])


def near(term: str, candidate: str) -> bool:
    """Whether ``term`` may misspell the index term ``candidate`` (:func:`nearest`'s test
    but for the memories holding it)."""
    return edits(term, candidate) is not None


def edits(term: str, candidate: str) -> int | None:
    """The edits from ``term`` to ``candidate`` when it may misspell it (another term of at
    least :data:`MIN_MEANT` letters, starting with the same letter, within
    :func:`allowed_edits`), else ``None``."""
    from rapidfuzz.distance import DamerauLevenshtein

    if candidate == term or candidate[:1] != term[:1] or len(candidate) < MIN_MEANT:
        return None
    limit = allowed_edits(term, candidate)
    if abs(len(candidate) - len(term)) > limit:
        return None
    distance = DamerauLevenshtein.distance(term, candidate, score_cutoff=limit)
    return distance if distance <= limit else None


def length_range(term: str) -> tuple[int, int]:
    """The lengths of the terms ``term`` may misspell."""
    return max(1, len(term) - 2), len(term) + 2
