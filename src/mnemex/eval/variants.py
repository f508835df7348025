"""Query variants of an evaluation: the same questions written as people type them.

A person asking an agent about its memories does not write as a benchmark does:
``lower`` writes every question in lower case ("what did caroline do in june?"),
``sentence`` in lower case with a capital only where it opens ("What did caroline
do in june?"), and ``perturb_names`` misspells every name by one edit
("Carolnie" is two; "Caroilne", "Carolline", "Carline" are one), so that spelling
tolerance is measured rather than assumed.

Which words are names is read here from the question's capitals (a capitalized
word that does not open a sentence): an evaluation may read the data's typography;
the search may not.
"""

from __future__ import annotations

import re
import zlib

CASES = ("lower", "sentence")

_WORD = re.compile(r"[^\W\d_]+", re.UNICODE)
_VOWELS = "aeiou"
MIN_NAME_LETTERS = 4  # shorter capitalized words ("I", "Dr", "Al") are left alone


def recase(text: str, case: str | None) -> str:
    """``text`` as ``case`` writes it: ``None`` as written, ``lower``, or ``sentence``
    (lower case, its first letter upper)."""
    if case is None:
        return text
    if case not in CASES:
        raise ValueError(f"unknown case {case!r}: one of {', '.join(CASES)}")
    lowered = text.lower()
    if case == "lower":
        return lowered
    first = next((i for i, c in enumerate(lowered) if c.isalpha()), len(lowered))
    return lowered[:first] + lowered[first : first + 1].upper() + lowered[first + 1 :]


def names_in(text: str) -> list[tuple[int, int]]:
    """The spans of the words ``text`` writes as names: a capital first letter, at least
    :data:`MIN_NAME_LETTERS` letters, and not the first word of a sentence."""
    spans = []
    for found in _WORD.finditer(text):
        word = found.group()
        before = text[: found.start()].rstrip().rstrip("\"'“‘(")
        opening = not before or before[-1] in ".!?:"
        if not opening and word[0].isupper() and len(word) >= MIN_NAME_LETTERS:
            spans.append(found.span())
    return spans


def misspell(word: str) -> str:
    """``word`` with one edit (a letter doubled, dropped, or a vowel changed), chosen by
    the word itself so that every run misspells it alike; the first and last letters
    stay."""
    seed = zlib.crc32(word.lower().encode("utf-8"))
    inner = range(1, len(word) - 1)
    vowels = [i for i in inner if word[i].lower() in _VOWELS]
    kind = seed % 3
    if kind == 0 and vowels:
        i = vowels[seed // 3 % len(vowels)]
        options = [v for v in _VOWELS if v != word[i].lower()]
        return word[:i] + options[seed // 7 % len(options)] + word[i + 1 :]
    i = inner[seed // 3 % len(inner)]
    if kind == 1:
        return word[: i + 1] + word[i] + word[i + 1 :]  # a letter doubled
    return word[:i] + word[i + 1 :]  # a letter dropped


def perturb_names(text: str) -> str:
    """``text`` with every name (:func:`names_in`) misspelt by one edit (:func:`misspell`)."""
    out, last = [], 0
    for start, end in names_in(text):
        out += [text[last:start], misspell(text[start:end])]
        last = end
    return "".join([*out, text[last:]])


def variant(text: str, case: str | None = None, names: bool = False) -> str:
    """The question as the variant writes it: names misspelt first (they are found by
    their capitals), then recased."""
    return recase(perturb_names(text) if names else text, case)


def describe(case: str | None, names: bool) -> str:
    """The variant in words, for reports."""
    parts = [f"{case}-cased" if case else "as written"]
    if names:
        parts.append("names misspelt by one edit")
    return ", ".join(parts)
