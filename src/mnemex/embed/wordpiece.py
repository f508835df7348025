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
"""

from __future__ import annotations

import re
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


def load_vocab(path: Path = VOCAB) -> dict[str, int]:
    """Each token's id."""
    tokens = path.read_text(encoding="utf-8").split("\n")
    if tokens and tokens[-1] == "":
        tokens.pop()
    return dict(zip(tokens, range(len(tokens)), strict=True))


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
    """Greedy longest-match-first: the longest known prefix, then the longest known
    ``##`` piece of the rest, and so on; ``[UNK]`` for the whole word when a rest has none."""
    if len(word) > MAX_WORD_CHARS:
        return [vocab[UNK]]
    out, start = [], 0
    while start < len(word):
        for end in range(len(word), start, -1):
            piece = word[start:end] if start == 0 else PREFIX + word[start:end]
            found = vocab.get(piece)
            if found is not None:
                out.append(found)
                start = end
                break
        else:
            return [vocab[UNK]]
    return out
