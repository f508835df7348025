"""Markdown into chunks of about 400 tokens with 80 tokens of overlap (seed 004). Pure.

Tokens are counted as ``len / 4`` characters (as
:func:`mnemex.search.recall.count_chars` counts spaced scripts), so a chunk holds at most
``4 × chunk_tokens`` characters, overlap included.

1. **Units.** The text is cut into units that are never split: a heading
   line, a line of prose or a list item, or a whole fenced code block (up to
   the full budget). Blank lines stick to the unit before them. A line too
   long for a chunk is cut into pieces at sentence ends, else at spaces; a
   fenced block too long for a chunk is cut into its lines (the only case
   where a fence is split: it cannot be avoided).
2. **Breaks.** Each unit says how good a chunk boundary right before it is:
   a heading (the higher its level, the better), then a paragraph, a fence,
   a list item, a continuation line; never right after a heading, and inside
   a line only when nothing else fits.
3. **Packing.** Units are added to a chunk while it fits; when the next one
   does not, the chunk ends at the best boundary in its second half (the
   latest among equals), else right before the unit that did not fit.
4. **Overlap.** The next chunk starts with the last ``4 × chunk_overlap``
   characters of the previous one, from a line start when whole lines give
   at least half of that, else from a word boundary, never from inside a
   fenced block. A chunk that starts at a heading starts a new section and
   carries no overlap.
5. **Entries.** A heading whose title is a time, ``## 14:30`` or
   ``## 14:30 · todo · #tag`` (what ``mnemex add --to-workspace`` writes),
   always starts a new chunk: each entry is a memory of its own, whose kind
   and tags its heading gives.

The chunks' new text (``text[overlap:]``), concatenated, is the input minus
its leading blank lines: nothing is lost and nothing is repeated except the
overlap. A chunk's boundaries depend only on the text up to its end, so text
appended to a file changes only its last chunk.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from mnemex.records import dataclass

CHARS_PER_TOKEN = 4  # as mnemex.search.recall.count_chars
CHUNKER_VERSION = "md-v2"  # stored per workspace: a different chunker re-chunks every file

_FENCE_OPEN = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d{1,9}[.)])\s")
_SENTENCE_END = re.compile(r"[.!?。！？][\"')\]]*\s+")
_LINES = re.compile(r"[^\n]*\n|[^\n]+\Z")
ENTRY_TITLE = re.compile(r"^([01]\d|2[0-3]):[0-5]\d(?: · (.*))?$")  # a write-through entry


# How good a chunk boundary right before a unit is (higher is better).
ENTRY_BREAK = 100  # a write-through entry's heading: always a boundary
HEADING_BREAK = 4  # h6; an h1 is 4 + 5
PARAGRAPH_BREAK = 3
LIST_BREAK = 2
LINE_BREAK = 1
INSIDE_FENCE = 0
AFTER_HEADING = -1
INSIDE_LINE = -2


@dataclass(frozen=True, slots=True)
class Chunk:
    """A piece of a markdown file.

    ``text`` is the file's text from ``start_line`` to ``end_line`` (1-based,
    inclusive; the first line may start mid-line when the overlap does); its
    first ``overlap`` characters repeat the end of the previous chunk.
    ``heading`` is the path of headings in force at the chunk's first line.
    """

    text: str
    start_line: int
    end_line: int
    heading: tuple[str, ...]
    overlap: int = 0
    entry: str = ""  # the title of the write-through entry it holds (see ENTRY_TITLE)


@dataclass(frozen=True, slots=True)
class _Unit:
    text: str  # with its newline and the blank lines after it
    first: int  # line of its first character
    last: int  # last line with text (trailing blank lines excluded)
    quality: int  # of a boundary right before it
    heading: tuple[str, ...]
    fence: bool = False  # a fenced block or a line of one
    title: bool = False  # a heading line


def chunk_markdown(text: str, tokens: int = 400, overlap: int = 80) -> list[Chunk]:
    """Cut ``text`` (lines separated by ``\\n``) into chunks; see the module docstring."""
    if tokens < 1 or not 0 <= overlap < tokens:
        raise ValueError("chunk tokens must be >= 1 and 0 <= overlap < tokens")
    budget = tokens * CHARS_PER_TOKEN
    carry = overlap * CHARS_PER_TOKEN
    units = list(_units(text, budget, max(1, budget - carry)))
    chunks: list[Chunk] = []
    lead: _Unit | None = None  # the overlap carried from the previous chunk
    start = 0
    while start < len(units):
        if lead is not None and len(lead.text) + len(units[start].text) > budget:
            lead = None
        size = len(lead.text) if lead else 0
        end = start
        while end < len(units) and size + len(units[end].text) <= budget:
            size += len(units[end].text)
            end += 1
            entry_next = end < len(units) and units[end].quality >= ENTRY_BREAK
            if entry_next and not all(u.title for u in units[start:end]):
                break
        if end == start:  # a unit larger than a chunk (only a run of blank lines can be)
            end += 1
        elif end < len(units):
            end = _best_break(units, start, end, len(lead.text) if lead else 0, budget)
        body = units[start:end]
        parts = [lead, *body] if lead else body
        entry = next((t for t in reversed(body[-1].heading) if ENTRY_TITLE.match(t)), "")
        place = (parts[0].first, body[-1].last, parts[0].heading, len(lead.text) if lead else 0)
        chunks.append(Chunk("".join(u.text for u in parts), *place, entry))
        starts_section = end < len(units) and units[end].quality >= HEADING_BREAK
        lead = None if starts_section or not carry else _tail(parts, carry)
        start = end
    return chunks


def _best_break(units: list[_Unit], start: int, end: int, lead: int, budget: int) -> int:
    """Where a chunk of ``units[start:end]`` (all that fit) ends: the best boundary that
    leaves it at least half full, the latest among equals; else at ``end``."""
    best, best_quality = end, units[end].quality
    size = lead
    for index in range(start, end):
        size += len(units[index].text)
        boundary = index + 1
        if boundary == end or 2 * size < budget:
            continue
        if units[boundary].quality > best_quality or (
            units[boundary].quality == best_quality and boundary > best
        ):
            best, best_quality = boundary, units[boundary].quality
    return best


def _tail(parts: list[_Unit], room: int) -> _Unit | None:
    """The last ``room`` characters of a chunk, as the next chunk's first unit (or None)."""
    taken = 0
    index = len(parts)
    while index > 0 and taken + len(parts[index - 1].text) <= room:
        index -= 1
        taken += len(parts[index].text)
    whole = parts[index:]
    if index > 0 and 2 * taken < room and not parts[index - 1].fence:
        partial = parts[index - 1]
        cut = _word_cut(partial.text, room - taken)
        if cut is not None:
            first = partial.first + partial.text.count("\n", 0, cut)
            head = _Unit(partial.text[cut:], first, partial.last, INSIDE_LINE, partial.heading)
            return _join([head, *whole])
    while whole and whole[0].quality <= INSIDE_FENCE and whole[0].fence:
        whole = whole[1:]  # never start inside a fenced block
    return _join(whole) if whole else None


def _word_cut(text: str, room: int) -> int | None:
    """The start of the shortest suffix of ``text`` of at most ``room`` characters that
    begins after whitespace (and has some text), or None."""
    lowest = len(text) - room
    for match in re.finditer(r"\s+", text):
        position = match.end()
        if position >= lowest and text[position:].strip():
            return position
    return None


def _join(parts: list[_Unit]) -> _Unit:
    text, first = "".join(u.text for u in parts), parts[0]
    fence = any(u.fence for u in parts)
    return _Unit(text, first.first, parts[-1].last, first.quality, first.heading, fence=fence)


def _units(text: str, budget: int, piece: int) -> Iterator[_Unit]:
    """The text as units (see the module docstring), with trailing blank lines attached."""
    stack: list[tuple[int, str]] = []  # (level, title) of the headings in force
    held: _Unit | None = None  # the last unit, until its trailing blank lines are known
    blank_before = True
    after_heading = False
    fence: list[str] = []
    fence_start = 0
    fence_mark = ""

    def path() -> tuple[str, ...]:
        return tuple(title for _, title in stack)

    def quality(base: int) -> int:
        if after_heading:
            return AFTER_HEADING
        return max(base, PARAGRAPH_BREAK) if blank_before else base

    def flush() -> Iterator[_Unit]:
        nonlocal held
        if held is not None:
            yield held
            held = None

    for number, line in enumerate(_LINES.findall(text), start=1):
        body = line.rstrip("\n").rstrip("\r")
        if fence:
            fence.append(line)
            mark = body.strip()
            if mark.startswith(fence_mark) and not mark.strip(fence_mark[0]):
                yield from flush()
                *units, held = _fence_units(
                    fence, fence_start, quality(PARAGRAPH_BREAK), path(), budget, piece
                )
                yield from units
                fence = []
                blank_before = after_heading = False
            continue
        opening = _FENCE_OPEN.match(body)
        if opening and not (opening.group(1)[0] == "`" and "`" in opening.group(2)):
            fence, fence_start, fence_mark = [line], number, opening.group(1)
            continue
        if not body.strip():
            blank_before = True
            if held is None:
                continue  # leading blank lines are not part of any chunk
            if len(held.text) + len(line) <= piece:
                held = _with_text(held, held.text + line)
            else:
                yield from flush()
                held = _Unit(line, number, number, LINE_BREAK, path())
            continue
        yield from flush()
        heading = _HEADING.match(body)
        if heading:
            level = len(heading.group(1))
            title = re.sub(r"[ \t]+#+$", "", (heading.group(2) or "").strip()).strip()
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, title))
            if ENTRY_TITLE.match(title):
                first_quality = ENTRY_BREAK
            else:
                first_quality = AFTER_HEADING if after_heading else HEADING_BREAK + 6 - level
            after_heading = True
        else:
            first_quality = quality(LIST_BREAK if _LIST_ITEM.match(body) else LINE_BREAK)
            after_heading = False
        blank_before = False
        *pieces, last = _split_line(line, piece)
        for index, part in enumerate(pieces):
            yield _Unit(part, number, number, first_quality if index == 0 else INSIDE_LINE, path())
        quality_last = INSIDE_LINE if pieces else first_quality
        held = _Unit(last, number, number, quality_last, path(), title=bool(heading))
    if fence:  # an unclosed fence runs to the end of the text
        yield from flush()
        yield from _fence_units(fence, fence_start, quality(PARAGRAPH_BREAK), path(), budget, piece)
    yield from flush()


def _with_text(unit: _Unit, text: str) -> _Unit:
    return _Unit(text, unit.first, unit.last, unit.quality, unit.heading, unit.fence, unit.title)


def _fence_units(
    lines: list[str],
    first: int,
    quality: int,
    heading: tuple[str, ...],
    budget: int,
    piece: int,
) -> list[_Unit]:
    """A fenced block as one unit when it fits a chunk, else line by line (its blank lines
    attached to the line before them)."""
    last = first + len(lines) - 1
    while last > first and not lines[last - first].strip():
        last -= 1  # an unclosed fence's trailing blank lines
    text = "".join(lines)
    if len(text) <= budget:
        return [_Unit(text, first, last, quality, heading, fence=True)]
    units: list[_Unit] = []
    for offset, line in enumerate(lines):
        number = first + offset
        if offset and not line.strip() and len(units[-1].text) + len(line) <= piece:
            units[-1] = _with_text(units[-1], units[-1].text + line)
            continue
        for index, part in enumerate(_split_line(line, piece)):
            q = quality if offset == index == 0 else INSIDE_FENCE if index == 0 else INSIDE_LINE
            units.append(_Unit(part, number, min(number, last), q, heading, fence=True))
    return units


def _split_line(line: str, size: int) -> list[str]:
    """``line`` in pieces of at most ``size`` characters: cut after a sentence end in the
    second half of a piece, else after the last space, else anywhere."""
    pieces: list[str] = []
    rest = line
    while len(rest) > size:
        window = rest[:size]
        sentence = max((m.end() for m in _SENTENCE_END.finditer(window)), default=0)
        cut = sentence
        if 2 * sentence < size:
            space = max(window.rfind(" "), window.rfind("\t"))
            cut = space + 1 if space > 0 else sentence
        if cut <= 0:
            cut = size
        pieces.append(rest[:cut])
        rest = rest[cut:]
    return [*pieces, rest] if rest or not pieces else pieces
