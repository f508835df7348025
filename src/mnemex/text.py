"""Pure text helpers: validation, CJK segmentation, ids, hashes, times, summaries.

CJK segmentation
----------------
FTS5's ``unicode61`` tokenizer treats a run of Chinese or Japanese characters
(or a Korean word with its particles) as one token, so a two-character query
never matches inside a longer run. mnemex indexes such text with a zero-width
space (U+200B, a separator for ``unicode61``) around every CJK character, so
each character is its own token; a query is then turned into phrases of
adjacent characters (see :mod:`mnemex.index.query`), which match exactly the
same substrings that bigram indexing finds, and longer ones too. Snippets are
cut from the segmented text and the zero-width spaces removed, giving back
the original characters.
"""

from __future__ import annotations

import functools
import importlib
import json
import math
import os
import re
import threading
import time
import unicodedata
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any, TypeVar

from mnemex.errors import ContentTooLarge, InvalidInput

T = TypeVar("T")

SEGMENT_MARK = "\u200b"
CJK_SEGMENTATION = "cjk-unigram-zwsp-v1"
SEGMENT_CHARS = 1 << 16  # a long text is segmented this many characters at a time

_CJK_CLASS = (
    "\u1100-\u11ff"  # Hangul Jamo
    "\u3005-\u3007"  # 々 〆 〇
    "\u3040-\u3098\u309d-\u309f"  # Hiragana (not the combining sound marks)
    "\u30a1-\u30fa\u30fc-\u30ff"  # Katakana (not the double hyphen or middle dot)
    "\u3100-\u312f"  # Bopomofo
    "\u3130-\u318f"  # Hangul compatibility Jamo
    "\u31a0-\u31bf"  # Bopomofo extended
    "\u31f0-\u31ff"  # Katakana phonetic extensions
    "\u3400-\u4dbf"  # CJK extension A
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\ua960-\ua97f"  # Hangul Jamo extended A
    "\uac00-\ud7af"  # Hangul syllables
    "\ud7b0-\ud7ff"  # Hangul Jamo extended B
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\uff66-\uff9f"  # halfwidth Katakana
    "\uffa0-\uffdc"  # halfwidth Hangul
    "\U00020000-\U0003134f"  # CJK extensions B-G, compatibility supplement
)
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_WS = re.compile(r"\s+")
_SURROGATE = re.compile("[\ud800-\udfff]")


@functools.cache
def cjk_pattern(form: str) -> re.Pattern[str]:
    """The regular expression ``form`` with ``CJK`` for the CJK characters (``[CJK]``).

    Compiled on first use: the class is large enough that compiling it costs a
    new process tens of milliseconds, which ASCII text never needs to pay.
    """
    return re.compile(form.replace("CJK", _CJK_CLASS))


def has_cjk(text: str) -> bool:
    return not text.isascii() and cjk_pattern("[CJK]").search(text) is not None


def starts_cjk(text: str) -> bool:
    return not text.isascii() and cjk_pattern("[CJK]").match(text) is not None


def segment(text: str) -> str | None:
    """Text as indexed, or ``None`` when it needs no segmentation (no CJK).

    A long text is segmented ``SEGMENT_CHARS`` characters at a time (each character is
    marked alone, so any cut is right): a substitution holds a piece per match until it
    joins them, about 100 bytes a character, which for megabytes of Chinese was most of
    what storing the text took."""
    if not has_cjk(text):
        return None
    sub = functools.partial(cjk_pattern("([CJK])").sub, SEGMENT_MARK + r"\1" + SEGMENT_MARK)
    if len(text) <= SEGMENT_CHARS:
        return sub(text)
    return "".join(sub(text[at : at + SEGMENT_CHARS]) for at in range(0, len(text), SEGMENT_CHARS))


def unsegment(text: str) -> str:
    return text.replace(SEGMENT_MARK, "")


# -- validation ---------------------------------------------------------------


def clean_content(value: object, max_bytes: int, *, what: str = "content") -> str:
    """Validate and normalize memory content (NFC, surrounding whitespace removed).

    Rejects non-text, invalid UTF-8, lone surrogates, NUL characters, empty
    text and text longer than ``max_bytes`` UTF-8 bytes.
    """
    if isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        try:
            value = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidInput(
                f"{what} is not valid UTF-8 (byte {exc.start}: {raw[exc.start : exc.start + 4]!r}); "
                "re-encode it as UTF-8"
            ) from None
    if not isinstance(value, str):
        raise InvalidInput(f"{what} must be text, got {type(value).__name__}")
    try:
        encoded = value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInput(
            f"{what} contains a lone surrogate (U+{ord(value[exc.start]):04X}) at character "
            f"{exc.start}; it is not valid Unicode text"
        ) from None
    if "\x00" in value:
        raise InvalidInput(f"{what} contains a NUL character at position {value.index(chr(0))}")
    if len(encoded) > max_bytes:
        raise ContentTooLarge(len(encoded), max_bytes, what)
    text = value.strip()
    if not text:
        raise InvalidInput(f"{what} is empty; a memory needs some text")
    if not text.isascii() and not unicodedata.is_normalized("NFC", text):
        text = unicodedata.normalize("NFC", text)
    return text


def clean_label(value: object, what: str, max_len: int = 64) -> str:
    """A kind or tag: stripped, lower-cased, no control characters, bounded length."""
    if not isinstance(value, str):
        raise InvalidInput(f"{what} must be text, got {type(value).__name__}")
    return _clean_label(value, what, max_len)


@functools.lru_cache(maxsize=4096)
def _clean_label(value: str, what: str, max_len: int) -> str:
    label = _WS.sub(" ", value.strip()).lower()
    if not label:
        raise InvalidInput(f"{what} is empty")
    if len(label) > max_len:
        raise InvalidInput(f"{what} {label[:20]!r}... is longer than {max_len} characters")
    if _CONTROL.search(label) or "\x00" in label:
        raise InvalidInput(f"{what} {label!r} contains control characters")
    try:
        label.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(f"{what} {label!r} is not valid Unicode text") from None
    return label


def listed(value: object, what: str) -> list[object]:
    """One text, or a list of values (any iterable but a mapping or bytes), as a list."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping | bytes | bytearray | memoryview) or not isinstance(
        value, Iterable
    ):
        raise InvalidInput(f"{what} must be text or a list of text, got {type(value).__name__}")
    return list(value)


def clean_tags(value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        items: list[object] = [t for t in value.split(",") if t.strip()]
    elif isinstance(value, list | tuple | set | frozenset):
        items = list(value)
    else:
        raise InvalidInput(f"tags must be a list of strings, got {type(value).__name__}")
    if len(items) > 64:
        raise InvalidInput(f"a memory can have at most 64 tags, got {len(items)}")
    return tuple(dict.fromkeys(clean_label(t, "tag") for t in items))


@functools.lru_cache(maxsize=4096)
def tags_columns(tags: tuple[str, ...]) -> tuple[str, str | None]:
    """The stored JSON of cleaned tags, and its segmented form for the index (or None)."""
    text = json.dumps(list(tags), ensure_ascii=False)
    return text, segment(text) if tags else None


def clean_confidence(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(f"confidence must be a number between 0 and 1, got {value!r}")
    f = float(value) if isinstance(value, float) or -2 < value < 2 else math.nan
    if not math.isfinite(f) or not 0.0 <= f <= 1.0:
        raise InvalidInput(f"confidence must be between 0 and 1, got {value!r}")
    return f


def clean_name(value: object, what: str, max_len: int) -> str:
    """An id, namespace or source: stripped, 1 to ``max_len`` printable characters."""
    if not isinstance(value, str):
        raise InvalidInput(f"{what} must be text, got {type(value).__name__}")
    text = value.strip()
    valid = 0 < len(text) <= max_len and not _CONTROL.search(text)
    if valid:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            valid = False
    if not valid:
        raise InvalidInput(f"{what} {value!r} is not valid: use 1-{max_len} printable characters")
    return text


ALL_NAMESPACES_LABEL = "*"  # how results and stats name every namespace: never one's name


def clean_namespace(value: object) -> str:
    """A namespace name (:func:`clean_name`); ``*`` is refused: it is how mnemex names
    every namespace (in results, stats and the web inspector)."""
    name = clean_name(value, "namespace", 128)
    if name == ALL_NAMESPACES_LABEL:
        raise InvalidInput(
            "namespace '*' is reserved: it names every namespace; to read across them use "
            "--all-namespaces (CLI), namespace=mnemex.ALL (Python) or ns=* (mnemex ui)"
        )
    return name


MAX_METADATA_DEPTH = 64  # nested objects and arrays; deeper JSON is refused


def clean_metadata(value: object, max_bytes: int) -> str:
    """Metadata as canonical JSON text (an object) at most ``MAX_METADATA_DEPTH`` deep."""
    if value is None:
        return "{}"
    if not isinstance(value, Mapping):
        raise InvalidInput(f"metadata must be a JSON object (dict), got {type(value).__name__}")
    value = dict(value)
    if _too_deep(value, MAX_METADATA_DEPTH):
        raise InvalidInput(
            f"metadata is nested more than {MAX_METADATA_DEPTH} levels deep "
            "(or contains itself); flatten it"
        )
    try:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True, allow_nan=False)
        text.encode("utf-8")
    except (TypeError, ValueError, UnicodeEncodeError, RecursionError) as exc:
        raise InvalidInput(f"metadata is not JSON-serializable: {exc}") from None
    if len(text) > max_bytes:
        raise ContentTooLarge(len(text.encode("utf-8")), max_bytes, "metadata")
    return text


def _too_deep(value: object, limit: int) -> bool:
    """Whether objects and arrays nest more than ``limit`` levels (walked without recursion,
    so a cycle is simply too deep)."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Iterable[object] = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def clean_query(value: object, max_chars: int = 65_536) -> str:
    """Make any query text safe to hand to SQLite: never raises for a string.

    Lone surrogates become U+FFFD, control characters become spaces, text
    past ``max_chars`` is dropped, and the rest is NFC-normalized like content.
    """
    if isinstance(value, bytes | bytearray):
        value = bytes(value).decode("utf-8", errors="replace")
    if not isinstance(value, str):
        raise InvalidInput(f"query must be text, got {type(value).__name__}")
    text = value[:max_chars]
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = _SURROGATE.sub("\ufffd", text)
    text = _CONTROL.sub(" ", text)
    if not text.isascii() and not unicodedata.is_normalized("NFC", text):
        text = unicodedata.normalize("NFC", text)
    return text


# -- ids, hashes --------------------------------------------------------------

_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"  # base32 without i, l, o, u
_PAIRS = [a + b for a in _CROCKFORD for b in _CROCKFORD]  # 10 bits -> 2 characters
_id_lock = threading.Lock()
_id_state = [0, 0]  # last millisecond, last random part


def echo(given: str) -> str:
    """A query or task as given, or as searched when it is not valid Unicode text (a
    lone surrogate from undecodable command-line bytes would make invalid UTF-8)."""
    try:
        given.encode("utf-8")
    except UnicodeEncodeError:
        return clean_query(given)
    return given


def new_id() -> str:
    """A 16-character id: 48-bit millisecond time then 32 bits, sortable, monotonic per process."""
    with _id_lock:
        ms = time.time_ns() // 1_000_000
        if ms <= _id_state[0]:
            ms = _id_state[0]
            rand = (_id_state[1] + 1) & 0xFFFFFFFF
            if rand == 0:
                ms += 1
        else:
            rand = int.from_bytes(os.urandom(4), "big")
        _id_state[0], _id_state[1] = ms, rand
    n = (ms << 32) | rand
    pairs = _PAIRS
    return "".join(pairs[(n >> shift) & 1023] for shift in (70, 60, 50, 40, 30, 20, 10, 0))


def clean_id(value: object) -> str:
    return clean_name(value, "id", 200)


def content_hash(text: str) -> str:
    return str(hash_function("sha256")(text.encode("utf-8")).hexdigest())


# CPython's own module of each hash that mnemex computes on a hook's path (3.12 and later,
# then 3.11): the same digests as hashlib's, without the OpenSSL that ``import hashlib``
# loads (3-5 ms of a new process: a prompt hook, a capture, ``mnemex add``).
_OWN_HASHES = {"sha1": ("_sha1",), "sha256": ("_sha2", "_sha256"), "blake2b": ("_blake2",)}


@functools.cache
def hash_function(name: str) -> Any:
    """hashlib's hash ``name`` (``"sha1"``, ``"sha256"``, ``"blake2b"``), from CPython's own
    module when the interpreter has it."""
    for module in _OWN_HASHES.get(name, ()):
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            continue
    import hashlib

    return getattr(hashlib, name)


# -- time ---------------------------------------------------------------------

_RELATIVE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w|y)\s*$", re.IGNORECASE)
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}
_EPOCH = re.compile(r"^[+-]?\d+(?:\.\d*)?$")
_SHORT_YEAR = re.compile(r"^(\d{1,3})-")
_TIME_HELP = (
    "use ISO 8601 (2025-11-27 or 2025-11-27T10:00:00Z), epoch seconds (1700000000), "
    "or an age like 7d"
)


def utcnow() -> datetime:
    return datetime.now(UTC)


def format_time(dt: datetime) -> str:
    """UTC ISO 8601 with milliseconds and ``Z``: fixed width (a four-digit year), so it
    sorts as text and reads back for every year a datetime can hold (1 to 9999)."""
    dt = dt.astimezone(UTC)
    return (
        f"{dt.year:04d}-{dt.month:02d}-{dt.day:02d}T{dt.hour:02d}:{dt.minute:02d}:"
        f"{dt.second:02d}.{dt.microsecond // 1000:03d}Z"
    )


def json_value(value: Any) -> Any:
    """A field of a value mnemex hands out (:mod:`mnemex.models`) as JSON: times
    formatted, tuples as lists, values with a ``to_dict`` as dicts."""
    if isinstance(value, datetime):
        return format_time(value)
    if isinstance(value, tuple):
        return [json_value(v) for v in value]
    return value.to_dict() if hasattr(value, "to_dict") else value


def json_fields(obj: Any, names: str, *, optional: str = "", **given: Any) -> dict[str, Any]:
    """The attributes ``names`` of ``obj`` in that order as JSON (``given`` replaces a
    value), then those of ``optional`` that are not ``None``."""
    data = {n: given[n] if n in given else json_value(getattr(obj, n)) for n in names.split()}
    for name in optional.split():
        if getattr(obj, name) is not None:
            data[name] = given[name] if name in given else json_value(getattr(obj, name))
    return data


def parse_stored_time(text: str) -> datetime:
    """A time as :func:`format_time` stores it (also read: years written unpadded)."""
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        short = _SHORT_YEAR.match(text)
        if short is None:
            raise
        return datetime.fromisoformat(
            short.group(1).zfill(4) + text[short.end() - 1 :].replace("Z", "+00:00")
        )


def parse_time(value: object, *, what: str = "time", now: datetime | None = None) -> datetime:
    """Accept a datetime, a date, epoch seconds, ISO 8601 text, or an age like ``7d``.

    Naive datetimes are taken as UTC. Ages (``30m``, ``12h``, ``7d``, ``2w``,
    ``1y``) count back from now. Text of digits is epoch seconds unless ISO 8601
    reads it as a date (``20251127``). A time that is not in the years 1 to 9999
    once in UTC raises :class:`~mnemex.errors.InvalidInput`.
    """
    try:
        return _parse_time(value, what, now)
    except InvalidInput:
        raise
    except (OverflowError, OSError, ValueError):
        raise InvalidInput(
            f"{what} {_shown(value)} is out of range: times must fall in the years 1 to 9999 (UTC)"
        ) from None


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _parse_time(value: object, what: str, now: datetime | None) -> datetime:
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day, tzinfo=UTC)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(float(value), UTC)
    if isinstance(value, str):
        text = value.strip()
        rel = _RELATIVE.match(text)
        if rel:
            seconds = float(rel.group(1)) * _UNIT[rel.group(2).lower()]
            return (now or utcnow()) - timedelta(seconds=seconds)
        if text.lower() in ("now", "today", "yesterday"):
            base = now or utcnow()
            if text.lower() == "now":
                return base
            day = base.replace(hour=0, minute=0, second=0, microsecond=0)
            return day if text.lower() == "today" else day - timedelta(days=1)
        try:
            dt = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            if _EPOCH.match(text):
                return datetime.fromtimestamp(float(text), UTC)
            raise InvalidInput(f"{what} {_shown(value)} is not a time: {_TIME_HELP}") from None
        return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)
    raise InvalidInput(
        f"{what} must be a datetime, ISO 8601 text or epoch seconds, got {type(value).__name__}"
    )


# -- summaries ----------------------------------------------------------------


def summarize(text: str, width: int = 100) -> str:
    """One line of at most ``width`` characters, cut at a word boundary when possible."""
    return clip(_WS.sub(" ", text).strip(), width, " ,;:.-")


def clip(text: str, max_chars: int, trailing: str | None = None) -> str:
    """Cut ``text`` to ``max_chars`` characters at a word boundary, marking the cut; the
    ``trailing`` characters (default: white space) are dropped before the mark."""
    if len(text) <= max_chars:
        return text
    cut = text[: max_chars - 1]
    space = cut.rfind(" ")
    if space >= max_chars * 0.6:
        cut = cut[:space]
    return cut.rstrip(trailing) + "…"


def batched(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    """Consecutive slices of ``items`` of at most ``size`` elements."""
    for start in range(0, len(items), size):
        yield items[start : start + size]
