"""Index terms of a memory exactly as the SQLite engine's FTS5 index holds them.

PostgreSQL's own parsers and stemmers cut text differently from FTS5's
``porter unicode61 remove_diacritics 2`` (hyphenated words, URLs, the
Snowball stemmer, its stop-word lists), so a store searched with them would
rank differently from the same memories in SQLite. Instead the terms come
from FTS5 itself, run on an in-memory SQLite database on the client: the
same tokens, the same stems, and text segmented for CJK by the same function
(:func:`mnemex.text.segment`), so a query's terms (built by
:mod:`mnemex.index.query`) find in PostgreSQL what they find in SQLite.

A document's terms are its tokens over both indexed columns (content, tags),
counted, plus one term ``"x y"`` for each pair of adjacent CJK characters in
a column: the phrases a CJK query searches (see
:func:`mnemex.index.query.cjk_terms`), so a phrase is one lookup. Its length
is its token count, as FTS5's ``docsize`` records it (pairs not counted).
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from mnemex.index.fts import Lexicon
from mnemex.index.query import Term
from mnemex.storage import TOKENIZER
from mnemex.text import has_cjk, segment, starts_cjk

MAX_KEY_BYTES = 1000  # a longer term is stored by its digest (tsvector lexemes stop at 2 KB)
BATCH = 1000  # documents tokenized per pass through FTS5

_local = threading.local()


@dataclass(frozen=True, slots=True)
class Terms:
    """A document's index terms with their frequencies, and its length in tokens."""

    counts: dict[str, int]
    length: int


def index_key(term: str) -> str:
    """The key a term is stored under: itself, or a digest when it is too long for a lexeme."""
    if len(term) * 4 <= MAX_KEY_BYTES or len(term.encode()) <= MAX_KEY_BYTES:
        return term
    return "#sha256:" + hashlib.sha256(term.encode()).hexdigest()


def query_key(term: Term) -> str:
    """The stored key of a query term (a CJK phrase re-tokenized as the index holds it)."""
    if term.phrase or starts_cjk(term.key):
        return index_key(" ".join(tokens(term.key.replace(" ", ""))))
    return index_key(term.key)


def tokens(text: str) -> list[str]:
    """The index tokens of ``text`` in order (CJK characters one token each)."""
    conn = _connection()
    conn.execute("INSERT INTO mnemex_doc (mnemex_doc) VALUES ('delete-all')")
    conn.execute(
        "INSERT INTO mnemex_doc (rowid, content, tags) VALUES (0, ?, '')", (segment(text) or text,)
    )
    return [t for (t,) in conn.execute("SELECT term FROM mnemex_doc_v ORDER BY offset")]


def lexicon() -> Lexicon:
    """This thread's FTS5 tokenizer for query text (an in-memory SQLite database)."""
    found: Lexicon | None = getattr(_local, "lexicon", None)
    if found is None:
        found = Lexicon(_connection())
        _local.lexicon = found
    return found


def _connection() -> sqlite3.Connection:
    conn: sqlite3.Connection | None = getattr(_local, "conn", None)
    if conn is None:
        conn = sqlite3.connect(":memory:", isolation_level=None)
        conn.execute(
            "CREATE VIRTUAL TABLE mnemex_doc USING fts5("
            f"content, tags, content='', tokenize='{TOKENIZER}')"
        )
        conn.execute("CREATE VIRTUAL TABLE mnemex_doc_v USING fts5vocab(mnemex_doc, instance)")
        _local.conn = conn
    return conn


def document_terms(docs: Sequence[tuple[str, str]]) -> list[Terms]:
    """The terms of each (content, tags JSON) pair, as FTS5 indexes the stored row."""
    out: list[Terms | None] = [None] * len(docs)
    cjk = [i for i, (content, tags) in enumerate(docs) if has_cjk(content) or has_cjk(tags)]
    plain = sorted(set(range(len(docs))) - set(cjk))
    for group, read in ((plain, _counted), (cjk, _with_pairs)):
        for start in range(0, len(group), BATCH):
            chunk = group[start : start + BATCH]
            _load([docs[i] for i in chunk])
            for i, terms in zip(chunk, read(len(chunk)), strict=True):
                out[i] = terms
    return [t for t in out if t is not None]


def _load(docs: Sequence[tuple[str, str]]) -> None:
    """Put the documents in the in-memory FTS5 table as rows 0, 1, ..."""
    conn = _connection()
    conn.execute("INSERT INTO mnemex_doc (mnemex_doc) VALUES ('delete-all')")
    conn.executemany(
        "INSERT INTO mnemex_doc (rowid, content, tags) VALUES (?, ?, ?)",
        [
            (i, segment(content) or content, segment(tags) or tags)
            for i, (content, tags) in enumerate(docs)
        ],
    )


def _counted(size: int) -> list[Terms]:
    """The loaded rows' terms, counted by SQLite (rows without CJK text: no pairs)."""
    counts: list[dict[str, int]] = [{} for _ in range(size)]
    for term, doc, count in _connection().execute(
        "SELECT term, doc, count(*) FROM mnemex_doc_v GROUP BY term, doc"
    ):
        found = counts[doc]
        key = index_key(term)
        found[key] = found.get(key, 0) + count
    return [Terms(c, sum(c.values())) for c in counts]


def _with_pairs(size: int) -> list[Terms]:
    """The loaded rows' terms, with a term for each pair of adjacent CJK characters."""
    at: dict[tuple[int, str], dict[int, str]] = {}  # (doc, column) -> offset -> token
    for doc, col, offset, term in _connection().execute(
        "SELECT doc, col, offset, term FROM mnemex_doc_v"
    ):
        at.setdefault((doc, col), {})[offset] = term
    counts: list[Counter[str]] = [Counter() for _ in range(size)]
    lengths = [0] * size
    for (doc, _), tokens in at.items():
        found = counts[doc]
        lengths[doc] += len(tokens)
        found.update(index_key(t) for t in tokens.values())
        for offset, token in tokens.items():
            after = tokens.get(offset + 1)
            if after is not None and _cjk_char(token) and _cjk_char(after):
                found[f"{token} {after}"] += 1
    return [Terms(dict(c), n) for c, n in zip(counts, lengths, strict=True)]


def _cjk_char(token: str) -> bool:
    return len(token) == 1 and starts_cjk(token)
