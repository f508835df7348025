"""The model's WordPiece tokenizer for ASCII text, in plain Python.

A process that embeds one query (a hook) would spend more on importing the
``tokenizers`` library and parsing ``tokenizer.json`` than on the query. For
text made of ASCII characters only, :func:`encode` gives the ids ``tokenizers``
gives with that file (BERT uncased: control characters dropped, whitespace
and punctuation split, lower case, greedy longest-match WordPiece with
``##``, ``[CLS] … [SEP]``, truncated to the model's maximum), from the same
vocabulary (``minilm/vocab.txt``, one token per line, line n is id n). Any
other text, and text that spells one of the special tokens, is left to
``tokenizers`` (:func:`encode` returns ``None``).

:class:`Tokens` finds the tokens of any text and their places (the offsets
``tokenizers`` gives), which cutting a long text into windows needs, several
times faster than ``tokenizers``: it reads each distinct segment of text between
spaces once, in plain Python when it is plain ASCII (else by ``tokenizers``),
and places no token it is not asked about.
"""

from __future__ import annotations

import functools
import re
import threading
from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

VOCAB = Path(__file__).parent / "minilm" / "vocab.txt"
UNK, CLS, SEP = "[UNK]", "[CLS]", "[SEP]"
# Matched in the raw text by `tokenizers` before anything else: left to it.
SPECIAL = ("[PAD]", UNK, CLS, SEP, "[MASK]")
MAX_WORD_CHARS = 100  # longer words are [UNK]
PREFIX = "##"  # of a piece that continues a word

# ASCII control characters are dropped (tab, newline and carriage return are whitespace).
_CONTROL = dict.fromkeys([*range(0, 9), 11, 12, *range(14, 32), 127])
# After lower-casing: runs of letters and digits, and every other visible character alone.
_WORDS = re.compile(r"[a-z0-9]+|[^a-z0-9\s]")
# The same words in a plain segment as it is (no whitespace in it).
_WORD = re.compile(r"[A-Za-z0-9]+|[^A-Za-z0-9]")
# What plain text has not: a character outside ASCII, a control character, a special token.
_NOT_PLAIN = re.compile("|".join([r"[^\t\n\r\x20-\x7e]", *map(re.escape, SPECIAL)]))
# Text between spaces, tabs and line breaks (split keeps both): no step of `tokenizers`
# (special tokens, cleaning, accents, lower case, splitting, pieces) reads across these.
_SEGMENT = re.compile(r"([^ \t\n\r]+)")
PIECES_KEPT = 1 << 15  # distinct segments Pieces keeps, about 14 MB (it starts over past them)
SPANS_KEPT = 1 << 18  # and tokens' places in them at most, about 30 MB
# A segment longer than this is read in parts (a text without spaces, as Chinese or Japanese is,
# would be one segment): each part ends before a character no token crosses, as close past
# this length as there is one. `tokenizers` makes a token of each CJK ideograph and of each
# punctuation character (and the ideographic space splits); `]` is left out, as it ends the
# special tokens (`[UNK]`).
PART_CHARS = 128
# Compiled on first use (a long segment): compiling it costs a new process 1.5 ms.
_PART_START = (
    "[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002a6df\U0002a700-\U0002ceaf"
    "\U0002f800-\U0002fa1f!-/:-@\\[\\^-`{-~\u3000-\u3003\u3008-\u3011\u3014-\u301f"
    "\u3030\u303d\uff01-\uff03\uff05-\uff0a\uff0c-\uff0f]"
)


def load_vocab(path: Path = VOCAB) -> dict[str, int]:
    """Each token's id."""
    tokens = path.read_text(encoding="utf-8").split("\n")
    if tokens and tokens[-1] == "":
        tokens.pop()
    return dict(zip(tokens, range(len(tokens)), strict=True))


_VOCABULARY: list[dict[str, int]] = []
_VOCABULARY_LOCK = threading.Lock()


def vocabulary() -> dict[str, int]:
    """The model's vocabulary (:func:`load_vocab`), loaded once in a process: the local
    embedder's tokenizer and the relevance floor read the same table (4-7 ms to build)."""
    with _VOCABULARY_LOCK:
        if not _VOCABULARY:
            _VOCABULARY.append(load_vocab())
        return _VOCABULARY[0]


def vocabulary_loaded() -> bool:
    """Whether :func:`vocabulary` has built its table in this process."""
    return bool(_VOCABULARY)


def encode(text: str, vocab: dict[str, int], max_tokens: int) -> list[int] | None:
    """The ids of ``text`` with ``[CLS]`` and ``[SEP]``, at most ``max_tokens`` in all;
    ``None`` when ``text`` is not plain ASCII (``tokenizers`` handles it)."""
    if not text.isascii() or any(token in text for token in SPECIAL):
        return None
    ids: list[int] = []
    for word in _WORDS.findall(text.translate(_CONTROL).lower()):
        ids.extend(_pieces(word, vocab))
    return [vocab[CLS], *ids[: max_tokens - 2], vocab[SEP]]


def _pieces(word: str, vocab: dict[str, int]) -> list[int]:
    """The ids of ``word``'s pieces (:func:`_split`); ``[UNK]`` when it has none."""
    pieces = _split(word, vocab)
    return [vocab[UNK]] if pieces is None else [found for found, _ in pieces]


def _split(word: str, vocab: dict[str, int]) -> list[tuple[int, int]] | None:
    """Greedy longest-match-first: the longest known prefix, then the longest known
    ``##`` piece of the rest, and so on, each as (id, characters); ``None`` (the whole
    word is ``[UNK]``) when a rest has none or the word is too long."""
    if len(word) > MAX_WORD_CHARS:
        return None
    out, start = [], 0
    while start < len(word):
        for end in range(len(word), start, -1):
            piece = word[start:end] if start == 0 else PREFIX + word[start:end]
            found = vocab.get(piece)
            if found is not None:
                out.append((found, end - start))
                start = end
                break
        else:
            return None
    return out


def plain(text: str) -> bool:
    """Whether :class:`Pieces` reads ``text`` in plain Python: ASCII, spelling no special
    token, with no control character (``tokenizers`` drops those, which moves the words'
    places)."""
    return _NOT_PLAIN.search(text) is None


@functools.cache
def _part_start() -> re.Pattern[str]:
    return re.compile(_PART_START)


def _parts(text: str, start: int, end: int) -> Iterator[tuple[int, int]]:
    """The segment ``text[start:end]`` in parts of ``PART_CHARS`` characters or a few more,
    each cut before a character that starts a token of its own (``_PART_START``); whole
    when it is short or has no such character."""
    while end - start > PART_CHARS:
        cut = _part_start().search(text, start + PART_CHARS, end)
        if cut is None:
            break
        yield start, cut.start()
        start = cut.start()
    yield start, end


Spans = tuple[tuple[int, int], ...]  # tokens' (start, end) in a text, in order


class Pieces(dict[str, Spans]):
    """The tokens of each segment of text between spaces, tabs and line breaks (:class:`Tokens`),
    their (start, end) in it, found on first use: in plain Python for a :func:`plain` one,
    by ``other`` (``tokenizers``) for any other. At most ``PIECES_KEPT`` segments (and as
    many words) are kept."""

    def __init__(self, vocab: dict[str, int], other: Callable[[str], Sequence[tuple[int, int]]]):
        super().__init__()
        self.vocab = vocab
        self.other = other
        self._words: dict[str, tuple[int, ...]] = {}  # a word's pieces' lengths
        self._spans = 0  # tokens' places kept

    def __missing__(self, segment: str) -> Spans:
        if len(self) >= PIECES_KEPT or self._spans >= SPANS_KEPT:
            self.clear()
            self._spans = 0
        if _NOT_PLAIN.search(segment) is None:
            at, found = 0, []
            for word in _WORD.findall(segment):  # its words, one after the other
                for length in self._words.get(word) or self._lengths(word):
                    found.append((at, at + length))
                    at += length
            spans = tuple(found)
        else:
            spans = tuple(self.other(segment))
        self[segment] = spans
        self._spans += len(spans)
        return spans

    def _lengths(self, word: str) -> tuple[int, ...]:
        if len(self._words) >= PIECES_KEPT:
            self._words.clear()
        pieces = _split(word.lower(), self.vocab)
        lengths = (len(word),) if pieces is None else tuple(n for _, n in pieces)
        self._words[word] = lengths
        return lengths


class Tokens:
    """The tokens of a text, ``[CLS]`` and ``[SEP]`` left out: how many (``len``), and
    where one is in the text (:meth:`span`, as ``tokenizers``' offsets), each segment
    between spaces, tabs and line breaks read once (:class:`Pieces`: ``tokenizers`` reads
    those alike, as nothing it does to a text crosses them).

    Each segment is kept as three machine integers (where it starts and ends, and how
    many tokens the text has up to its end), not as a string: a text of megabytes
    costs about 24 bytes a word here. A segment of more than ``PART_CHARS`` characters
    is read in parts (:func:`_parts`), so that no one reading holds a whole text's
    tokens."""

    __slots__ = ("_ends", "_last", "_pieces", "_starts", "_text")

    def __init__(self, text: str, pieces: Pieces) -> None:
        self._text = text
        self._starts, self._ends, self._last = array("q"), array("q"), array("q")
        total = 0
        for match in _SEGMENT.finditer(text):
            for start, end in _parts(text, *match.span()):
                self._starts.append(start)
                self._ends.append(end)
                total += len(pieces[text[start:end]])
                self._last.append(total)  # how many tokens the text has up to its end
        self._pieces = pieces

    def __len__(self) -> int:
        return self._last[-1] if self._last else 0

    def span(self, token: int) -> tuple[int, int]:
        """The (start, end) in the text of token ``token`` (from 0)."""
        segment = bisect_right(self._last, token)
        at = self._starts[segment]
        spans = self._pieces[self._text[at : self._ends[segment]]]
        start, end = spans[token - self._last[segment] + len(spans)]
        return at + start, at + end
