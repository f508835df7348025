"""What the duplicate checks of both engines decide alike (see :mod:`mnemex.dedup`): the
match found, a new memory as the checks read it, the converse coverage of two texts,
the numbers and negations two duplicates must share, and what a merge writes.

The reads and the locking are each engine's: :mod:`mnemex.engine.sqlite.dedup`,
:mod:`mnemex.engine.postgres.dedup`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, Protocol

from mnemex.index.query import Term, Token, build_terms, content_terms, idf
from mnemex.index.stopwords import STOPWORDS
from mnemex.records import dataclass
from mnemex.text import format_time, tags_columns, utcnow

NEGATIONS = frozenset(
    "not no never none nothing nobody nor without cannot don doesn didn isn aren wasn weren "
    "won wouldn shouldn couldn hasn haven hadn mustn ni nunca não nem jamais kein keine nicht "
    "pas".split()
)
_WORDS = re.compile(r"\w+")
CANDIDATES = 5  # nearest memories compared with a new one, per arm
NEAR_MAX_CHARS = 65_536  # a longer new memory merges only into the same text
RECHECK_ROWS = 50  # rows written since a lookup that the check under the lock compares
RECHECK_TERMS = 3  # rarest terms a row must hold to be compared there
MAX_RECORDED_TEXT = 2_000  # characters of a differing duplicate kept in metadata


class Statistics(Protocol):
    """What :func:`coverage` reads of an index: its tokenizer and term statistics."""

    def tokenize(self, text: str) -> list[Token]: ...

    def n_docs(self) -> int: ...

    def doc_freqs(self, terms: Sequence[Term]) -> list[int]: ...


@dataclass(frozen=True, slots=True)
class Match:
    """The memory another one repeats, and how closely."""

    seq: int
    id: str
    similarity: float
    by: str  # exact | text | cosine


@dataclass(frozen=True, slots=True)
class NewMemory:
    """A memory about to be stored, as the duplicate check needs it."""

    namespace: str
    content: str
    content_hash: str
    indexed: tuple[str, str]  # its content and tags as the full-text index holds them


def coverage(lexicon: Statistics, text: str, by: str, *, by_stored: bool = True) -> float:
    """The IDF-weighted share of ``text``'s terms that ``by`` also has.

    The BM25 ratio measures how much of the new memory an existing one holds;
    this measures the converse, so that a short remark is not merged into a
    longer memory that happens to contain its words. Without ``by_stored``
    the statistics count ``by`` as stored.
    """
    mine = content_terms(build_terms(lexicon.tokenize(text), STOPWORDS))[0]
    if not mine:
        return 0.0
    theirs = {t.key for t in content_terms(build_terms(lexicon.tokenize(by), STOPWORDS))[0]}
    extra = 0 if by_stored else 1
    n_docs = lexicon.n_docs() + extra
    weights = [
        idf(df + (extra if t.key in theirs else 0), n_docs)
        for t, df in zip(mine, lexicon.doc_freqs(mine), strict=True)
    ]
    total = sum(weights)
    shared = sum(w for t, w in zip(mine, weights, strict=True) if t.key in theirs)
    return shared / total if total > 0 else 0.0


def markers(text: str) -> tuple[frozenset[str], frozenset[str]]:
    """The numbers and negations in a text: two memories must share them to be duplicates."""
    words = _WORDS.findall(text.lower())
    return (
        frozenset(w for w in words if any(c.isdigit() for c in w)),
        frozenset(w for w in words if w in NEGATIONS),
    )


def merged(
    old: Sequence[Any], keep: Match, duplicate: Sequence[Any], max_bytes: int
) -> tuple[str, float, bool, str, str]:
    """What a merge writes into the kept memory: (tags JSON, confidence, pinned, metadata
    JSON, updated_at), from its stored (content, tags JSON, confidence, pinned, metadata
    JSON) and the duplicate as :func:`merge` takes it."""
    duplicate_id, content, tags_text, source, confidence, pinned, created_at = duplicate
    tags = json.loads(tags_text)
    old_content, old_tags, old_confidence, old_pinned, old_metadata = old
    merged_tags = list(dict.fromkeys([*json.loads(old_tags), *tags]))
    tags_json = tags_columns(tuple(merged_tags))[0]
    metadata = json.loads(old_metadata)
    record: dict[str, Any] = {
        "at": created_at,
        "merged_at": format_time(utcnow()),
        "by": keep.by,
        "similarity": round(keep.similarity, 4),
    }
    if duplicate_id is not None:
        record["id"] = duplicate_id
    if source is not None:
        record["source"] = source
    if content != old_content:
        record["content"] = content[:MAX_RECORDED_TEXT]
    duplicates = metadata.get("duplicates")
    metadata["duplicates"] = [*(duplicates if isinstance(duplicates, list) else []), record]
    text = json.dumps(metadata, ensure_ascii=False, sort_keys=True)
    if len(text.encode("utf-8")) > max_bytes:  # keep the record, drop its text
        record.pop("content", None)
        text = json.dumps(metadata, ensure_ascii=False, sort_keys=True)
    confidence = max(old_confidence, confidence)
    return tags_json, confidence, bool(old_pinned) or bool(pinned), text, format_time(utcnow())
