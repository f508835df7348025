"""Recall: the best memories for a task, packed into a token budget for a prompt.

The block an agent pastes into its prompt (seed 003)::

    ## Relevant Memories

    - [decision] We chose PostgreSQL for billing (confidence: 0.9, age: 3d)

Memories are taken best first. One that does not fit the remaining budget is,
when a trimmer is given (``Store.recall`` gives one) and at least
``MIN_EXCERPT_TOKENS`` are left, replaced by its excerpt: the lines around the
part that matches the task best, as many as fit (:func:`excerpt`), marked
``…`` where text was left out; otherwise it is skipped and the next one tried.
A long workspace chunk then gives the block the lines that matter instead of
nothing (or, in a plain cut, its first lines). Without a trimmer, only when no
memory fits at all is the best one cut at a word boundary. The whole block,
header included, is counted with the same counter, so the budget is never
exceeded.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from mnemex.errors import MissingExtra
from mnemex.index.stopwords import STOPWORDS
from mnemex.models import Recalled, RecallResult
from mnemex.records import dataclass
from mnemex.search.rank import age_days

if TYPE_CHECKING:
    from datetime import datetime

    from mnemex.config import RecallOptions
    from mnemex.models import SearchResult

HEADER = "## Relevant Memories\n"
ELLIPSIS = "…"
TokenCounter = Callable[[str], int]
Fits = Callable[[str], bool]
Trim = Callable[[int, Fits], "str | None"]  # (line index, does a line fit?) -> a shorter line
MIN_EXCERPT_TOKENS = 32  # room left below which a memory that does not fit is skipped
SENTENCE_SPLIT_CHARS = 400  # a line longer than this is cut into sentences for an excerpt


# Scripts written without spaces, where tokenizers spend a token (or more) a character:
# CJK ideographs (the WordPiece normalizer isolates each one), kana, CJK punctuation and
# full-width forms one each; a Hangul syllable two (it decomposes into 2 or 3 jamo).
# Compiled on first use (the re module caches them): compiling these classes costs a new
# process (the prompt hook) milliseconds, and most text has none of their characters.
_WIDE = (
    "[\u2e80-\u2fdf\u3000-\u30ff\u3100-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    "\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef\U00020000-\U0003134f]"
)
_HANGUL = "[\uac00-\ud7a3]"
# From the lowest character either class matches up: searched for, it finds in a few kB of
# text what max(text) does several times slower (recall counts a block per line it tries).
_FROM_FIRST_WIDE = "[^\x00-\u2e7f]"


def _narrow(text: str) -> bool:
    """Whether ``text`` has no character of ``_WIDE`` or ``_HANGUL``."""
    return text.isascii() or re.search(_FROM_FIRST_WIDE, text) is None


def count_chars(text: str) -> int:
    """Tokens by characters, rounded up: a quarter a character (about four a token in
    English and other spaced scripts), one a CJK ideograph, kana or full-width sign, and
    two a Hangul syllable: close to the local model's WordPiece count."""
    if _narrow(text):
        return math.ceil(len(text) / 4)
    wide = len(re.findall(_WIDE, text))
    hangul = len(re.findall(_HANGUL, text))
    return math.ceil((len(text) - wide - hangul) / 4) + wide + 2 * hangul


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
    excerpts: tuple[int, ...] = ()  # indexes of lines replaced by their excerpt


def pack(
    lines: Sequence[str],
    budget: int,
    max_items: int,
    count: TokenCounter = count_chars,
    trim: Trim | None = None,
) -> Packed:
    """Take lines best first while the rendered block stays within ``budget`` tokens; with
    ``trim``, a line that does not fit is trimmed to the room left (see the module)."""
    chosen: list[int] = []
    taken: list[str] = []
    excerpts: list[int] = []
    considered = 0

    def fits(line: str) -> bool:
        return count(render([*taken, line])) <= budget

    for index, line in enumerate(lines):
        if len(chosen) >= max_items:
            break
        considered = index + 1
        if fits(line):
            chosen.append(index)
            taken.append(line)
        elif trim is not None and budget - count(render(taken)) >= MIN_EXCERPT_TOKENS:
            short = trim(index, fits)
            if short is not None and fits(short):
                chosen.append(index)
                taken.append(short)
                excerpts.append(index)
    if excerpts:
        markdown = render(taken)
        return Packed(
            tuple(chosen), tuple(taken), markdown, count(markdown), considered, None,
            tuple(excerpts),
        )  # fmt: skip
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
    """The longest prefix of ``line`` (ending in …) whose block fits, cut at a space or
    after a character of a script written without spaces (CJK); when not even the first
    word fits, cut inside it. ``None`` only when the budget holds no more than the frame
    (:func:`frame_tokens`)."""
    head = _head(line)  # "- [kind] " alone says nothing
    spaced = _narrow(line)
    ends = [
        i
        for i in range(head + 1, len(line) + 1)
        if i == len(line)
        or line[i] == " "
        or (not spaced and re.match(_WIDE, line[i - 1]))
        or (not spaced and re.match(_HANGUL, line[i - 1]))
    ]
    best = _longest(line, ends, budget, count)
    if best is None:  # a budget just above the frame: part of the first word
        best = _longest(line, list(range(head + 1, ends[0] if ends else len(line))), budget, count)
    return best


def _head(line: str) -> int:
    """Where the content of a rendered line starts (after ``- [kind] ``)."""
    close = line.find("] ")
    return close + 2 if line.startswith("- [") and close > 0 else 0


def _longest(line: str, ends: list[int], budget: int, count: TokenCounter) -> str | None:
    """The longest ``line[:end] + …`` of ``ends`` (ascending) whose block fits."""
    low, high = 0, len(ends)  # binary search on the number of cut points kept
    best: str | None = None
    while low < high:
        mid = (low + high + 1) // 2
        candidate = line[: ends[mid - 1]].rstrip() + ELLIPSIS
        if count(render([candidate])) <= budget:
            best, low = candidate, mid
        else:
            high = mid - 1
    return best


def frame_tokens(kind: str, count: TokenCounter = count_chars) -> int:
    """Tokens of a block that holds one memory of ``kind`` cut to nothing: the header and
    ``- [kind] …``. Any larger budget holds part of the memory."""
    return count(render([f"- [{kind}] {ELLIPSIS}"]))


_WORD = re.compile(r"\w+")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
KEY_CHARS = 5  # words are compared by their first five characters (a crude stem)


def _keys(text: str) -> set[str]:
    return {
        w[:KEY_CHARS]
        for w in _WORD.findall(text.lower())
        if len(w) > 1 and w not in STOPWORDS and not w.isdigit()
    }


def segments(content: str) -> list[str]:
    """The content's lines, long ones cut into sentences, blank ones dropped."""
    out: list[str] = []
    for line in content.splitlines():
        line = " ".join(line.split())
        if len(line) > SENTENCE_SPLIT_CHARS:
            out.extend(s for s in _SENTENCE.split(line) if s)
        elif line:
            out.append(line)
    return out


def excerpt(content: str, query: str, fits: Fits) -> str | None:
    """The run of ``content``'s lines around the one matching ``query`` best that ``fits``.

    A line's match is the sum over the query's words it holds (stop words
    aside, compared by their first five characters) of ``log(1 + n / df)``,
    ``df`` being how many of the content's ``n`` lines hold the word, so a name
    on every line counts little. The run starts at the best line (the first
    line when none matches) and grows a line after, then a line before, while
    it fits; ``…`` marks text left out. When even the best line does not fit,
    its longest word-boundary prefix that does is returned (None under three
    words).
    """
    parts = segments(content)
    if not parts:
        return None
    wanted = _keys(query)
    held = [_keys(p) & wanted for p in parts]
    df: dict[str, int] = {}
    for keys in held:
        for key in keys:
            df[key] = df.get(key, 0) + 1
    scores = [sum(math.log(1 + len(parts) / df[k]) for k in keys) for keys in held]
    anchor = max(range(len(parts)), key=lambda i: (scores[i], -i))

    def text(lo: int, hi: int) -> str:
        body = " ".join(parts[lo : hi + 1])
        return ("… " if lo > 0 else "") + body + (" …" if hi < len(parts) - 1 else "")

    lo = hi = anchor
    if not fits(text(lo, hi)):
        words = parts[anchor].split(" ")
        low, high, best = 0, len(words), None
        while low < high:
            mid = (low + high + 1) // 2
            candidate = ("… " if anchor else "") + " ".join(words[:mid]) + ELLIPSIS
            if fits(candidate):
                best, low = candidate, mid
            else:
                high = mid - 1
        return best if low >= 3 else None
    grown = True
    while grown:
        grown = False
        if hi + 1 < len(parts) and fits(text(lo, hi + 1)):
            hi, grown = hi + 1, True
        if lo > 0 and fits(text(lo - 1, hi)):
            lo, grown = lo - 1, True
    return text(lo, hi)


def counter(choice: str | TokenCounter) -> tuple[str, TokenCounter]:
    """The name and function of a token counter given by name or as a function."""
    if callable(choice):
        return getattr(choice, "__name__", "custom"), choice
    return choice, COUNTERS[choice]


def read_bodies(session: Any, ids: Sequence[str]) -> dict[str, tuple[str, float]]:
    """The whole content and the confidence of each memory, which a search hit lacks, from
    the store of ``session`` (SQLite or PostgreSQL)."""
    return dict(session.memories.bodies(session, ids))


def recall(
    task: str,
    found: SearchResult,
    bodies: Mapping[str, tuple[str, float]],
    options: RecallOptions,
    moment: datetime,
) -> RecallResult:
    """Pack the hits of ``found`` still stored (``bodies``) into a block for ``task``."""
    counter_name, count = counter(options.token_counter)
    hits = [hit for hit in found.hits if hit.id in bodies]
    ages = [format_age(age_days(hit.created_at, moment)) for hit in hits]

    def line(index: int, text: str) -> str:
        hit = hits[index]
        return render_line(hit.kind, text, bodies[hit.id][1], ages[index])

    def trim(index: int, fits: Fits) -> str | None:
        content = bodies[hits[index].id][0]
        part = excerpt(content, found.query, lambda t: fits(line(index, t)))
        return None if part is None else line(index, part)

    lines = [line(index, bodies[hit.id][0]) for index, hit in enumerate(hits)]
    packed = pack(lines, options.budget, options.most, count, trim)

    def recalled(index: int, text: str) -> Recalled:
        hit, cut = hits[index], packed.cut == index or index in packed.excerpts
        content, confidence = bodies[hit.id]
        made = (hit.id, hit.kind, content, confidence, hit.created_at, hit.score)
        return Recalled(*made, text, count(text), cut, hit.tags)

    chosen = tuple(map(recalled, packed.chosen, packed.lines))
    notes = found.notes
    if hits and not chosen:
        frame = frame_tokens(hits[0].kind, count)
        notes = (
            *notes,
            f"the budget of {options.budget} tokens leaves no room for a memory: the block's "
            f"frame (the header and '- [{hits[0].kind}] …') takes {frame}; give {frame + 1} "
            "or more",
        )
    return RecallResult(
        task=task,
        markdown=packed.markdown,
        memories=chosen,
        tokens=packed.tokens,
        budget_tokens=options.budget,
        max_memories=options.most,
        skipped=packed.considered - len(chosen),
        mode_used=found.mode_used,
        token_counter=counter_name,
        notes=notes,
        stale=found.stale,
        floor=found.floor,
    )
