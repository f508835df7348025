"""Recall: the best memories for a task, packed into a token budget for a prompt.

The block an agent pastes into its prompt (seed 003)::

    ## Relevant Memories

    - [decision] We chose PostgreSQL for billing (confidence: 0.9, age: 3d)

Memories are taken best first. One that does not fit the remaining budget is
skipped, not cut, and the next one is tried; only when no memory fits at all
is the best one cut at a word boundary. The whole block, header included, is
counted with the same counter, so the budget is never exceeded.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from mnemex.errors import MissingExtra

HEADER = "## Relevant Memories\n"
ELLIPSIS = "…"
TokenCounter = Callable[[str], int]


def count_chars(text: str) -> int:
    """Tokens as ``len / 4``, rounded up: about four characters a token in English."""
    return math.ceil(len(text) / 4)


_wordpiece: Any = None
_wordpiece_lock = threading.Lock()


def count_wordpiece(text: str) -> int:
    """Tokens of the local model's WordPiece tokenizer (needs ``mnemex[embed]``)."""
    global _wordpiece
    with _wordpiece_lock:
        if _wordpiece is None:
            try:
                from tokenizers import Tokenizer
            except ImportError:
                raise MissingExtra("embed", "the wordpiece token counter", "tokenizers") from None
            from mnemex.embed.local import TOKENIZER

            tokenizer = Tokenizer.from_file(str(TOKENIZER))
            tokenizer.no_truncation()
            tokenizer.no_padding()
            _wordpiece = tokenizer
    return len(_wordpiece.encode(text, add_special_tokens=False).ids)


COUNTERS: dict[str, TokenCounter] = {"chars": count_chars, "wordpiece": count_wordpiece}


def format_age(days: float) -> str:
    """A short age: ``45m``, ``5h``, ``3d``, ``4mo``, ``2y``."""
    days = max(0.0, days)
    if days < 1 / 24:
        return f"{int(days * 1440)}m"
    if days < 1:
        return f"{int(days * 24)}h"
    if days < 60:
        return f"{int(days)}d"
    if days < 730:
        return f"{int(days / 30.44)}mo"
    return f"{int(days / 365.25)}y"


def render_line(kind: str, content: str, confidence: float, age: str) -> str:
    """``- [kind] content (confidence: 0.8, age: 3d)``, the content on one line."""
    return f"- [{kind}] {' '.join(content.split())} (confidence: {confidence:g}, age: {age})"


def render(lines: Sequence[str]) -> str:
    """The markdown block for these lines (empty when there are none)."""
    if not lines:
        return ""
    return HEADER + "\n" + "\n".join(lines) + "\n"


@dataclass(frozen=True, slots=True)
class Packed:
    """Which lines went in (indexes into the input, best first) and the block."""

    chosen: tuple[int, ...]
    lines: tuple[str, ...]
    markdown: str
    tokens: int
    considered: int  # lines looked at (the rest were past ``max_items``)
    cut: int | None = None  # index of a line cut to fit, when nothing fit whole


def pack(
    lines: Sequence[str],
    budget: int,
    max_items: int,
    count: TokenCounter = count_chars,
) -> Packed:
    """Take lines best first while the rendered block stays within ``budget`` tokens."""
    chosen: list[int] = []
    taken: list[str] = []
    considered = 0
    for index, line in enumerate(lines):
        if len(chosen) >= max_items:
            break
        considered = index + 1
        if count(render([*taken, line])) <= budget:
            chosen.append(index)
            taken.append(line)
    if not chosen and lines:
        cut = cut_to_fit(lines[0], budget, count)
        if cut is not None:
            markdown = render([cut])
            return Packed((0,), (cut,), markdown, count(markdown), considered, cut=0)
    markdown = render(taken)
    return Packed(
        tuple(chosen), tuple(taken), markdown, count(markdown) if taken else 0, considered
    )


def cut_to_fit(line: str, budget: int, count: TokenCounter) -> str | None:
    """The longest word-boundary prefix of ``line`` (ending in …) whose block fits."""
    words = line.split(" ")
    low, high = 0, len(words)  # binary search on the number of words kept
    best: str | None = None
    while low < high:
        mid = (low + high + 1) // 2
        candidate = " ".join(words[:mid]) + ELLIPSIS
        if count(render([candidate])) <= budget:
            best, low = candidate, mid
        else:
            high = mid - 1
    if best is None or low < 3:  # "- [kind] …" alone says nothing
        return None
    return best
