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
import re
import sqlite3
import threading
from collections import Counter
from collections.abc import Sequence

from mnemex.engine.sqlite.fts import Lexicon
from mnemex.index.query import Term
from mnemex.records import dataclass
from mnemex.storage import TOKENIZER
from mnemex.text import has_cjk, segment, starts_cjk

MAX_POSITIONS = 256  # PostgreSQL keeps at most this many positions per lexeme
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


# The in-memory FTS5 tables a document is loaded into, by their number of columns:
# a memory's (content, tags), a relation's (subject, predicate, object).
_TABLES = {2: ("mnemex_doc", "content, tags"), 3: ("mnemex_rel", "subject, predicate, object")}


def _connection() -> sqlite3.Connection:
    conn: sqlite3.Connection | None = getattr(_local, "conn", None)
    if conn is None:
        conn = sqlite3.connect(":memory:", isolation_level=None)
        for table, columns in _TABLES.values():
            conn.execute(
                f"CREATE VIRTUAL TABLE {table} USING fts5("
                f"{columns}, content='', tokenize='{TOKENIZER}')"
            )
            conn.execute(f"CREATE VIRTUAL TABLE {table}_v USING fts5vocab({table}, instance)")
        conn.create_function("mnemex_key", 1, index_key, deterministic=True)
        _local.conn = conn
    return conn


def lexeme(term: str) -> str:
    """A term as a quoted tsvector/tsquery lexeme (quotes and backslashes doubled)."""
    return "'" + term.replace("\\", "\\\\").replace("'", "''") + "'"


def lexeme_counts(literal: str) -> dict[str, int]:
    """The lexemes of a tsvector literal written here (:func:`tsvector`,
    :func:`document_lex`) with their counts of positions, as PostgreSQL reads them."""
    return {
        m.group(1).replace("''", "'").replace("\\\\", "\\"): m.group(2).count(",") + 1
        for m in _LEXEME.finditer(literal)
    }


_LEXEME = re.compile(r"'((?:[^']|'')*)':([0-9,]+)")


def tsvector(terms: Terms) -> str:
    """The tsvector literal of a document's terms: each lexeme with positions 1..tf."""
    return " ".join(
        f"{lexeme(term)}:{_POSITIONS[: _positions_length(tf)]}"
        for term, tf in sorted(terms.counts.items())
    )


def _positions_length(tf: int) -> int:
    """Characters of "1,2,...,tf" (tf capped at ``MAX_POSITIONS``)."""
    m = min(tf, MAX_POSITIONS)
    return 2 * m - 1 if m <= 9 else 17 + 3 * (m - 9) if m <= 99 else 287 + 4 * (m - 99)


_POSITIONS = ",".join(str(i) for i in range(1, MAX_POSITIONS + 1))
# Each loaded row's tsvector literal and length, written by SQLite (as tsvector() does).
_LEX_SQL = f"""
    SELECT doc, sum(n), group_concat(
        '''' || replace(replace(key, '\\', '\\\\'), '''', '''''') || ''':'
        || substr(?, 1, CASE WHEN m <= 9 THEN 2 * m - 1 WHEN m <= 99 THEN 17 + 3 * (m - 9)
                             ELSE 287 + 4 * (m - 99) END), ' ')
    FROM (
        SELECT doc, n, min(n, {MAX_POSITIONS}) AS m,
            CASE WHEN length(CAST(term AS BLOB)) > {MAX_KEY_BYTES} THEN mnemex_key(term)
                 ELSE term END AS key
        FROM (SELECT term, doc, count(*) AS n FROM {{table}}_v GROUP BY term, doc)
    )
    GROUP BY doc"""


def document_lex(docs: Sequence[tuple[str, ...]]) -> list[tuple[str, int]]:
    """For each (content, tags JSON) pair (or a relation's (subject, predicate, object)):
    its tsvector literal (each term with positions 1..tf, see :func:`tsvector`) and its
    length in tokens, as FTS5 indexes the stored row.

    Rows without CJK text have no pair terms: SQLite counts their terms and writes the
    literal itself. Rows with CJK text are read token by token for their pairs.
    """
    out: list[tuple[str, int]] = [("", 0)] * len(docs)
    if not docs:
        return out
    table = _TABLES[len(docs[0])][0]
    cjk = [i for i, doc in enumerate(docs) if any(has_cjk(column) for column in doc)]
    plain = sorted(set(range(len(docs))) - set(cjk))
    for start in range(0, len(plain), BATCH):
        chunk = plain[start : start + BATCH]
        _load(table, [docs[i] for i in chunk])
        for doc, length, literal in _connection().execute(
            _LEX_SQL.replace("{table}", table), (_POSITIONS,)
        ):
            out[chunk[doc]] = (literal, length)
    for start in range(0, len(cjk), BATCH):
        chunk = cjk[start : start + BATCH]
        _load(table, [docs[i] for i in chunk])
        for i, terms in zip(chunk, _with_pairs(table, len(chunk)), strict=True):
            out[i] = (tsvector(terms), terms.length)
    return out


def _load(table: str, docs: Sequence[tuple[str, ...]]) -> None:
    """Put the documents in the in-memory FTS5 table as rows 0, 1, ..."""
    conn = _connection()
    conn.execute(f"INSERT INTO {table} ({table}) VALUES ('delete-all')")
    width = len(docs[0]) if docs else 0
    conn.executemany(
        f"INSERT INTO {table} (rowid, {_TABLES[width][1]}) VALUES (?{', ?' * width})",
        [(i, *(segment(column) or column for column in doc)) for i, doc in enumerate(docs)],
    )


def _with_pairs(table: str, size: int) -> list[Terms]:
    """The loaded rows' terms, with a term for each pair of adjacent CJK characters."""
    at: dict[tuple[int, str], dict[int, str]] = {}  # (doc, column) -> offset -> token
    for doc, col, offset, term in _connection().execute(
        f"SELECT doc, col, offset, term FROM {table}_v"
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


def query_tokens(strings: Sequence[str]) -> list[list[str]]:
    """The terms FTS5 makes of each string of a raw expression, in order: the strings as
    written (FTS5 does not segment a query's CJK text; only stored text is segmented)."""
    if not strings:
        return []
    conn = _connection()
    conn.execute("INSERT INTO mnemex_doc (mnemex_doc) VALUES ('delete-all')")
    conn.executemany(
        "INSERT INTO mnemex_doc (rowid, content, tags) VALUES (?, ?, '')", enumerate(strings)
    )
    out: list[list[str]] = [[] for _ in strings]
    for doc, term in conn.execute("SELECT doc, term FROM mnemex_doc_v ORDER BY doc, offset"):
        out[doc].append(term)
    return out


def matching(expression: str, docs: Sequence[tuple[str, str]]) -> list[int]:
    """The indexes of the memories' (content, tags JSON) that an FTS5 expression matches,
    as FTS5 matches them in the SQLite engine's index; with no memories, a check of the
    expression. Raises ``sqlite3.OperationalError`` with FTS5's message for a bad one."""
    conn = _connection()
    if docs:
        _load("mnemex_doc", docs)
    else:
        conn.execute("INSERT INTO mnemex_doc (mnemex_doc) VALUES ('delete-all')")
    sql = "SELECT rowid FROM mnemex_doc WHERE mnemex_doc MATCH ? ORDER BY rowid"
    return [int(i) for (i,) in conn.execute(sql, (expression,))]
