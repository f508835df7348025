"""The lexical index: FTS5 BM25 retrieval, term statistics and snippets.

FTS5 is the only lexical index; nothing here caches what it holds. Query text
is tokenized by FTS5's own tokenizer (two contentless temp tables with the
index's tokenizer, with and without the stemmer), so query terms are exactly
the terms of the index in every script.

Retrieval scores rows with FTS5's ``bm25()``. Its cost grows with the number
of rows that contain any query term, so when the terms' document frequencies
add up to more than a budget, only rows containing the rarest terms are
candidates; each candidate is still scored with *all* terms, exactly. That
uses the fact that ``bm25()`` is a sum over the phrases of the expression:
for essential terms E and the rest R, the expression ``(E) AND (E OR R)``
matches the rows of E and scores each ``2·S_E + S_R``; subtracting ``S_E``
(from a plain ``E`` query) gives ``S_E + S_R``, the row's full score.

``bm25()`` takes N, the average row length and each term's document
frequency from the whole index. When the namespace searched does not hold
every row, a plan is *scoped* (:class:`Scope`): the statistics are the
namespace's (``namespace_stats``, kept by the triggers, and each term's rows
in the namespace, :class:`Postings`), and the rows are scored here with
``bm25()``'s own arithmetic, so a namespace ranks to the last bit as it
would in a store of its own. A store with one namespace keeps FTS5's path.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from mnemex.index.query import (
    Term,
    Token,
    idf,
    or_join,
    shape,
)
from mnemex.index.retrieval import (
    BM25_B,
    BM25_K1,
    Candidate,
    Filters,
    LexicalPlan,
    Postings,
    Retrieval,
    Scope,
    invalid_query,
)
from mnemex.storage import IN_CHUNK, marks
from mnemex.storage.migrations import TOKENIZER
from mnemex.text import (
    cjk_pattern,
    format_time,
    starts_cjk,
    unsegment,
)

TAGS_WEIGHT = 1.0  # bm25 weight of the tags column (content is 1.0)
DF_CACHE_DRIFT = 0.02  # drop cached document frequencies when the row count moves by 2 %
DF_CACHE_SIZE = 100_000  # terms
POSTINGS_CACHE_ROWS = 2_000_000  # rows of namespace postings kept (about 50 MB)
# A search's rows in a namespace read into tuples rather than numpy arrays while numpy is not
# imported (see _plain), up to this many rows of all its terms together: plain Python costs
# about 2.4 µs a row more than numpy (reading and scoring a row for five terms), numpy's import
# about 60 ms (RESULTS.md history, "Plain floats up to 20,000 rows a search").
PLAIN_POSTINGS = 20_000
PLAIN_SEARCHES = 16  # then numpy is imported, for a process that searches on
_BM25 = f"bm25(memories_fts, 1.0, {TAGS_WEIGHT})"

_TEMP_TABLES = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.mnemex_q_surface USING fts5("
    "t, content='', tokenize='unicode61 remove_diacritics 2')",
    f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.mnemex_q_stem USING fts5("
    f"t, content='', tokenize='{TOKENIZER}')",
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.mnemex_q_surface_v "
    "USING fts5vocab(temp, mnemex_q_surface, instance)",
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.mnemex_q_stem_v "
    "USING fts5vocab(temp, mnemex_q_stem, instance)",
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.mnemex_vocab USING fts5vocab(main, memories_fts, row)",
    # An index term's rows, exactly: a MATCH stems its text again ("hous" reads "hou").
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.mnemex_vocab_i "
    "USING fts5vocab(main, memories_fts, instance)",
    # Rows to score without a MATCH over the whole index (see bm25_of).
    f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.mnemex_score USING fts5("
    f"content, tags, content='', tokenize='{TOKENIZER}')",
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.mnemex_score_v "
    "USING fts5vocab(temp, mnemex_score, instance)",
    # The hits' text, to cut snippets from without a MATCH over the whole index (see snippets).
    f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.mnemex_snip USING fts5("
    f"content, tags, tokenize='{TOKENIZER}')",
)
# A term's rows in a namespace: bm25() under column weights w and 2w, and the row's size.
_POSTINGS = f"""SELECT memories_fts.rowid, bm25(memories_fts, 1.0, {TAGS_WEIGHT}),
        bm25(memories_fts, 2.0, {2 * TAGS_WEIGHT}), d.sz
    FROM memories_fts
    CROSS JOIN memories AS m INDEXED BY memories_seq_namespace ON m.seq = memories_fts.rowid
    JOIN memories_fts_docsize AS d ON d.id = memories_fts.rowid
    WHERE memories_fts MATCH ? AND memories_fts.rowid BETWEEN ? AND ? AND m.namespace = ?
    ORDER BY memories_fts.rowid"""
_COLUMN_WEIGHTS = {"content": 1.0, "tags": TAGS_WEIGHT}
# A word's rows in a namespace, an instance a row (in seq order): its column and the row's
# size. Cheaper than _POSTINGS (no bm25(), which reads each row's size twice more): for a
# term of one token, the word the query wrote and the index term it stems to (``Term.key``)
# match the same rows, each as many times as the word occurs.
_INSTANCES = """SELECT v.doc, v.col, d.sz FROM temp.mnemex_vocab_i AS v
    CROSS JOIN memories AS m INDEXED BY memories_seq_namespace ON m.seq = v.doc
    JOIN memories_fts_docsize AS d ON d.id = v.doc
    WHERE v.term = ? AND v.doc BETWEEN ? AND ? AND m.namespace = ?"""


def filter_sql(filters: Filters, alias: str = "m") -> tuple[str, list[object]]:
    """``AND ...`` conditions on the memories table for ``filters``, and their parameters."""
    parts: list[str] = []
    params: list[object] = []
    if filters.namespace is not None:
        parts.append(f"{alias}.namespace = ?")
        params.append(filters.namespace)
    if filters.kinds:
        parts.append(f"{alias}.kind IN ({marks(len(filters.kinds))})")
        params.extend(filters.kinds)
    for tag in filters.tags:
        parts.append(f"{alias}.seq IN (SELECT seq FROM memory_tags WHERE tag = ?)")
        params.append(tag)
    if filters.since is not None:
        parts.append(f"{alias}.created_at >= ?")
        params.append(format_time(filters.since))
    if filters.until is not None:
        parts.append(f"{alias}.created_at < ?")
        params.append(format_time(filters.until))
    return "".join(f" AND {p}" for p in parts), params


_FALLBACK = "shaped candidates < pool; scored every matching row"


def stored_rows(conn: sqlite3.Connection) -> int:
    """The memories in the store, from the rows the triggers count in ``namespace_stats``:
    ``count(*)`` reads a whole index, in every new process's first search (1.5 ms at
    10,000 memories, growing with them)."""
    return int(conn.execute("SELECT COALESCE(sum(docs), 0) FROM namespace_stats").fetchone()[0])


class Lexicon:
    """Per-connection access to FTS5's tokenizer and term statistics."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._ready = False
        self._n_docs: tuple[int, int] | None = None  # (data_version, count)
        self._df: dict[str, int] = {}  # term key -> rows containing it
        self._df_basis = 0  # row count when the cache was started
        # (namespace, term expression) -> the namespace's statistics when the term's rows
        # in it were read, and those rows
        self._postings: OrderedDict[tuple[str, str], tuple[Scope, Postings]] = OrderedDict()
        self._postings_rows = 0
        self._setup()

    @property
    def conn(self) -> sqlite3.Connection:
        """The connection whose index this lexicon reads."""
        return self._conn

    def _setup(self) -> None:
        """Create the temp tables once, outside any transaction: connection-local state
        that a rollback would drop while this object believes it exists."""
        if not self._ready:
            if self._conn.in_transaction:
                raise RuntimeError("a Lexicon is set up outside any transaction")
            for statement in _TEMP_TABLES:
                self._conn.execute(statement)
            self._ready = True

    def tokenize(self, text: str) -> list[Token]:
        """Tokens of ``text`` exactly as the index tokenizes it, in order.

        Runs of CJK characters are returned whole (one token each, flagged
        ``cjk_run``): the index holds one token per CJK character, and only
        characters adjacent in the text may form a phrase.
        """
        self._setup()
        conn = self._conn
        runs = [text] if text.isascii() else cjk_pattern("([CJK]+)").split(text)
        pieces = [p for p in runs if p]
        others = [(i, p) for i, p in enumerate(pieces) if not starts_cjk(p)]
        words: dict[int, list[tuple[int, str, str]]] = {}
        if others:
            conn.execute(
                "INSERT INTO temp.mnemex_q_surface (mnemex_q_surface) VALUES ('delete-all')"
            )
            conn.execute("INSERT INTO temp.mnemex_q_stem (mnemex_q_stem) VALUES ('delete-all')")
            rows = [(i + 1, p) for i, p in others]
            conn.executemany("INSERT INTO temp.mnemex_q_surface (rowid, t) VALUES (?, ?)", rows)
            conn.executemany("INSERT INTO temp.mnemex_q_stem (rowid, t) VALUES (?, ?)", rows)
            stems = {
                (doc, offset): term
                for doc, offset, term in conn.execute(
                    "SELECT doc, offset, term FROM temp.mnemex_q_stem_v"
                )
            }
            for doc, offset, term in conn.execute(
                "SELECT doc, offset, term FROM temp.mnemex_q_surface_v"
            ):
                words.setdefault(doc - 1, []).append((offset, term, stems.get((doc, offset), term)))
        tokens: list[Token] = []
        for index, piece in enumerate(pieces):
            if starts_cjk(piece):
                tokens.append(Token(piece, piece, len(tokens), cjk_run=True))
            else:
                for _, surface, stem in sorted(words.get(index, ())):
                    tokens.append(Token(surface, stem, len(tokens)))
        return tokens

    def invalidate(self, counts: bool = False) -> None:
        """Forget the cached row count (call after this connection writes); with ``counts``
        the cached document frequencies too (after a rollback: they may count its rows)."""
        self._n_docs = None
        if counts:
            self._df.clear()
            self._postings.clear()
            self._postings_rows = 0

    def n_docs(self) -> int:
        """Rows in the index (``bm25()``'s N), cached until ``PRAGMA data_version`` says
        another connection committed (this one's writes call :meth:`invalidate`)."""
        version = int(self._conn.execute("PRAGMA data_version").fetchone()[0])
        if self._n_docs is None or self._n_docs[0] != version:
            self._n_docs = (version, stored_rows(self._conn))
        return self._n_docs[1]

    def doc_freqs(self, terms: Sequence[Term]) -> list[int]:
        """Rows containing each term (phrases are counted with a query).

        Counting walks a term's whole posting list, so counts are cached; the
        cache is dropped when the number of rows has changed by more than
        ``DF_CACHE_DRIFT`` since it was started. The counts only steer query
        shaping and score normalization (ranking uses FTS5's own statistics);
        a count of zero is never cached, as it would leave the term out of the
        query once another writer adds it.
        """
        self._setup()
        n_docs = self.n_docs()
        if (
            abs(n_docs - self._df_basis) > DF_CACHE_DRIFT * self._df_basis
            or len(self._df) > DF_CACHE_SIZE
        ):
            self._df.clear()
            self._df_basis = n_docs
        cache = self._df
        words = sorted({t.key for t in terms if not t.phrase and not cache.get(t.key)})
        for start in range(0, len(words), IN_CHUNK):
            chunk = words[start : start + IN_CHUNK]
            sql = f"SELECT term, doc FROM temp.mnemex_vocab WHERE term IN ({marks(len(chunk))})"
            found = dict(self._conn.execute(sql, chunk).fetchall())
            for word in chunk:
                cache[word] = int(found.get(word, 0))
        for term in terms:
            if term.phrase and not cache.get(term.key):
                cache[term.key] = self._conn.execute(
                    "SELECT count(*) FROM memories_fts WHERE memories_fts MATCH ?", (term.match,)
                ).fetchone()[0]
        return [cache[t.key] for t in terms]

    def scope(self, namespace: str | None) -> Scope | None:
        """The statistics a search of ``namespace`` ranks by, or ``None`` when they are the
        index's own (all namespaces searched, or the namespace holds every row)."""
        if namespace is None:
            return None
        sql = "SELECT docs, tokens, changes, lo, hi FROM namespace_stats WHERE namespace = ?"
        row = self._conn.execute(sql, (namespace,)).fetchone()
        if row is None:
            row = (0, 0, 0, 0, -1)
        if row[0] == self.n_docs():
            return None
        return Scope(namespace, *row)

    def postings(self, terms: Sequence[Term], scope: Scope) -> list[Postings]:
        """Each term's rows in the scope's namespace, with frequencies and lengths.

        One query per term reads its rows within the namespace's seq bounds: a
        word's instances in the index (``fts5vocab``), counted per row; a phrase's
        rows by FTS5, the frequency recovered from ``bm25()`` under two column
        weightings (the ratio of the two scores fixes ``f / K``, and ``K``
        follows from the row's length and the index's average). Either way
        nothing but FTS5 reads the text. Cached per namespace and expression run: FTS5
        stems it again, and a stem is not always its own stem (``"hous"`` reads
        the rows of ``hou``), so the rows of a term's key queried as such are not
        those of the word it stems from. When the namespace has changed since, by
        rows added and nothing else (see :meth:`_appended`), only the rows after
        the cached ones are read; after any other change, all of them again.
        """

        self._setup()
        out: list[Postings] = []
        appended: dict[int, bool] = {}  # by the change counter of a cached read
        rows = 0  # of the terms so far: tuples while the search's rows are few (see _plain)
        for term in terms:
            key = (scope.namespace, term.match)
            kept = self._postings.get(key)
            since: tuple[Scope, Postings] | None = None
            if kept is not None:
                self._postings.move_to_end(key)
                if kept[0].changes == scope.changes:
                    if isinstance(kept[1].seqs, tuple) and _numpy_loaded():
                        kept = self._postings[key] = (kept[0], _arrays(kept[1]))
                    out.append(kept[1])
                    rows += len(kept[1])
                    continue
                then = kept[0]
                if then.changes not in appended:
                    appended[then.changes] = self._appended(then, scope)
                since = kept if appended[then.changes] else None
            if since is None:
                found = self._read(term, scope, scope.lo, PLAIN_POSTINGS - rows)
            else:
                room = PLAIN_POSTINGS - rows - len(since[1])
                found = _joined_postings(since[1], self._read(term, scope, since[0].hi + 1, room))
            rows += len(found)
            self._keep(key, scope, found)
            out.append(found)
        return out

    def _read(self, term: Term, scope: Scope, lo: int, room: int) -> Postings:
        """The term's rows in the namespace from seq ``lo`` on (tuples when they are at most
        ``room``: see :data:`PLAIN_POSTINGS`). A word's from its instances in the index, a
        phrase's (CJK characters) from ``bm25()`` (:func:`_postings_of`)."""
        if term.phrase or starts_cjk(term.key):
            params = (term.match, lo, scope.hi, scope.namespace)
            read = self._conn.execute(_POSTINGS, params).fetchall()
            return _postings_of(read, _totals(self._conn), plain=len(read) <= room)
        params = (term.key, lo, scope.hi, scope.namespace)
        return _instance_postings(self._conn.execute(_INSTANCES, params).fetchall(), room)

    def _appended(self, then: Scope, now: Scope) -> bool:
        """Whether the namespace changed from ``then`` to ``now`` only by rows added after
        ``then.hi``: each added row counts one change and one row, a removed one a change
        and one row less, an edited one two changes; and the rows past ``then.hi`` are as
        many as were added (seqs only grow)."""
        added = now.docs - then.docs
        if added <= 0 or now.changes - then.changes != added or now.hi <= then.hi:
            return False
        sql = (
            "SELECT count(*) FROM memories INDEXED BY memories_seq_namespace "
            "WHERE seq > ? AND seq <= ? AND namespace = ?"
        )
        return bool(
            self._conn.execute(sql, (then.hi, now.hi, now.namespace)).fetchone()[0] == added
        )

    def _keep(self, key: tuple[str, str], scope: Scope, found: Postings) -> None:
        """Cache a term's rows (read at ``scope``), the oldest dropped past the limit."""
        old = self._postings.pop(key, None)
        if old is not None:
            self._postings_rows -= len(old[1]) + 1
        self._postings[key] = (scope, found)
        self._postings_rows += len(found) + 1
        while self._postings_rows > POSTINGS_CACHE_ROWS and len(self._postings) > 1:
            _, dropped = self._postings.popitem(last=False)
            self._postings_rows -= len(dropped[1]) + 1


def _instance_postings(instances: list[tuple[int, str, bytes]], room: int) -> Postings:
    """A term's rows from its instances (:data:`_INSTANCES`): each row's frequency, the
    instances weighted by their column as ``bm25()`` weights them, and its length. Tuples
    when the rows are at most ``room`` and the process has not imported numpy (see
    :func:`_postings_of`)."""
    freqs: dict[int, float] = {}
    sizes: dict[int, bytes] = {}
    for doc, col, size in instances:
        if doc in freqs:
            freqs[doc] += _COLUMN_WEIGHTS[col]
        else:
            freqs[doc] = _COLUMN_WEIGHTS[col]
            sizes[doc] = size
    seqs = sorted(freqs)  # in seq order already (one pass to check)
    lengths = [float(_row_tokens(sizes[seq])) for seq in seqs]
    weights = [freqs[seq] for seq in seqs]
    if len(seqs) <= room and not _numpy_loaded():
        return Postings(tuple(seqs), tuple(weights), tuple(lengths))
    import numpy as np

    return Postings(
        np.array(seqs, dtype=np.int64),
        np.array(weights, dtype=np.float64),
        np.array(lengths, dtype=np.float64),
    )


def _joined_postings(first: Postings, then: Postings) -> Postings:
    """The rows of ``first`` followed by those of ``then`` (all of higher seqs): tuples
    while the process has not imported numpy, arrays after (the same values either way)."""
    if isinstance(first.seqs, tuple) and isinstance(then.seqs, tuple) and not _numpy_loaded():
        return Postings(
            first.seqs + then.seqs, first.freqs + then.freqs, first.lengths + then.lengths
        )
    import numpy as np

    a, b = _arrays(first), _arrays(then)
    return Postings(
        np.concatenate([a.seqs, b.seqs]),
        np.concatenate([a.freqs, b.freqs]),
        np.concatenate([a.lengths, b.lengths]),
    )


def _arrays(postings: Postings) -> Postings:
    """Postings read into tuples (see :func:`_plain`) as numpy's arrays."""
    import numpy as np

    if not isinstance(postings.seqs, tuple):
        return postings
    return Postings(
        np.array(postings.seqs, dtype=np.int64),
        np.array(postings.freqs, dtype=np.float64),
        np.array(postings.lengths, dtype=np.float64),
    )


def _postings_of(
    rows: list[tuple[int, float, float, bytes]], totals: tuple[int, int], *, plain: bool = False
) -> Postings:
    """Term frequencies from ``bm25()`` of one term under column weights w and 2w.

    For one phrase ``bm25 = g·(k1+1)·f / (f + K)``; doubling the weights
    doubles ``f`` and leaves ``K = k1·(1 - b + b·D/avgdl)`` as is, so with
    ``q = s_w / s_2w`` (in (1/2, 1)) ``f = K·(2q - 1) / (2 - 2q)``, an
    integer sum of column weights, rounded.

    Tuples rather than arrays when ``plain`` (the search's rows are few: see
    :data:`PLAIN_POSTINGS`) and the process has not imported numpy (see :func:`_plain`).
    """
    if plain and not _numpy_loaded():
        return _plain_postings(rows, totals)
    import numpy as np

    if not rows:
        empty = np.zeros(0)
        return Postings(np.zeros(0, dtype=np.int64), empty, empty)
    ids, one, two, sizes = zip(*rows, strict=True)
    seqs = np.array(ids, dtype=np.int64)
    lengths = np.array([_row_tokens(size) for size in sizes], dtype=np.float64)
    n_rows, n_tokens = totals
    avgdl = n_tokens / n_rows if n_rows else 1.0
    k = BM25_K1 * (1 - BM25_B + BM25_B * lengths / avgdl)
    q = np.array(one) / np.array(two)
    freqs = np.rint(k * (2 * q - 1) / np.maximum(2 - 2 * q, 1e-300))
    return Postings(seqs, np.maximum(freqs, 1.0), lengths)


def _plain_postings(
    rows: list[tuple[int, float, float, bytes]], totals: tuple[int, int]
) -> Postings:
    """:func:`_postings_of` in plain floats: the same operations in the same order, so
    the same values to the last bit."""
    n_rows, n_tokens = totals
    avgdl = n_tokens / n_rows if n_rows else 1.0
    seqs, freqs, lengths = [], [], []
    for seq, one, two, size in rows:
        length = float(_row_tokens(size))
        k = BM25_K1 * (1 - BM25_B + BM25_B * length / avgdl)
        q = one / two
        seqs.append(int(seq))
        freqs.append(max(float(round(k * (2 * q - 1) / max(2 - 2 * q, 1e-300))), 1.0))
        lengths.append(length)
    return Postings(tuple(seqs), tuple(freqs), tuple(lengths))


def _numpy_loaded() -> bool:
    return "numpy" in sys.modules


_plain_left = [PLAIN_SEARCHES]  # plain searches this process may still make


def _plain(postings: Sequence[Postings]) -> bool:
    """Whether a namespace's search scores in plain floats: while the process has not
    imported numpy, every term's postings are tuples. A new process (a prompt hook, a
    command) then answers a lexical search of one namespace among others without
    importing numpy (60 ms of a 170 ms prompt hook); a search of many rows
    (:data:`PLAIN_POSTINGS`) imports it, and so does a process past ``PLAIN_SEARCHES``
    such searches (a server: numpy's arithmetic is faster once imported)."""
    if _numpy_loaded() or not all(isinstance(p.seqs, tuple) for p in postings):
        return False
    if _plain_left[0] <= 0:
        import numpy  # noqa: F401  (the postings read from now on are arrays)

        return False
    _plain_left[0] -= 1
    return True


def exact_sql(match: str, filters: Filters, limit: int) -> tuple[str, list[object]]:
    """The SQL, and its parameters, of the best ``limit`` rows that match ``match`` within
    the filters, by BM25 (positive, higher is better)."""
    where, params = filter_sql(filters)
    sql = f"""SELECT memories_fts.rowid, -{_BM25} AS s
            FROM memories_fts{_joined(where)}
            WHERE memories_fts MATCH ?{where}
            ORDER BY s DESC, memories_fts.rowid LIMIT ?"""
    return sql, [match, *params, limit]


def shaped_sql(essential: str, rest: str, filters: Filters, limit: int) -> tuple[str, list[object]]:
    """:func:`exact_sql` over the rows that match an ``essential`` term only: the BM25 of
    ``essential AND (essential OR rest)`` less that of ``essential``, which is the BM25 of
    ``essential OR rest`` (each essential phrase counts twice, then once less)."""
    where, params = filter_sql(filters)
    sql = f"""WITH e (seq, b) AS MATERIALIZED (
                SELECT rowid, {_BM25} FROM memories_fts WHERE memories_fts MATCH ?
            )
            SELECT x.seq, e.b - x.b AS s FROM (
                SELECT memories_fts.rowid AS seq, {_BM25} AS b
                FROM memories_fts{_joined(where)}
                WHERE memories_fts MATCH ?{where}
            ) AS x JOIN e ON e.seq = x.seq
            ORDER BY s DESC, x.seq LIMIT ?"""
    return sql, [essential, f"({essential}) AND ({essential} OR {rest})", *params, limit]


def lexical_sql(
    lexical: LexicalPlan, filters: Filters, pool: int, budget: int
) -> tuple[str, list[object]]:
    """The SQL :func:`retrieve` runs first for a plan without a namespace's statistics:
    shaped when the budget calls for it (:func:`mnemex.index.query.shape`), else exact."""
    if lexical.raw is not None:
        return exact_sql(lexical.raw, filters, pool)
    essential, rest = _split(lexical, pool, budget)
    if rest:
        return shaped_sql(_or(essential), _or(rest), filters, pool)
    return exact_sql(lexical.match, filters, pool)


def _joined(where: str) -> str:
    """The join to the memories that the conditions ``where`` read, if they read any: a
    row of the index is a memory (the triggers keep them one to one), and the join costs
    a lookup per matching row (a fifth of the statement at 100,000 memories)."""
    return " CROSS JOIN memories AS m ON m.seq = memories_fts.rowid" if where else ""


def whole_index(lexicon: Lexicon, filters: Filters) -> Filters:
    """``filters``, or none when they let every row of the index through: nothing narrows
    them and the namespace they name holds every row. Read in the search's snapshot, so
    a memory another namespace commits meanwhile is not let through."""
    if filters.narrow or filters.namespace is None or lexicon.scope(filters.namespace) is not None:
        return filters
    return Filters(None)


def _or(terms: Sequence[Term]) -> str:
    return or_join(t.expression for t in terms)


def _split(lexical: LexicalPlan, pool: int, budget: int) -> tuple[list[Term], list[Term]]:
    """The plan's terms that occur, as essential and rest (see :func:`shape`)."""
    live = [i for i, df in enumerate(lexical.doc_freqs) if df]
    essential, rest = shape([lexical.doc_freqs[i] for i in live], budget, pool)
    return [lexical.terms[live[i]] for i in essential], [lexical.terms[live[i]] for i in rest]


def _candidates(conn: sqlite3.Connection, query: tuple[str, list[object]]) -> list[Candidate]:
    return [Candidate(seq, raw) for seq, raw in conn.execute(*query).fetchall()]


def retrieve(
    conn: sqlite3.Connection, lexical: LexicalPlan, filters: Filters, pool: int, budget: int
) -> Retrieval:
    """The best ``pool`` rows for the plan within the filters, by BM25."""
    if lexical.empty:
        return Retrieval([])
    if lexical.scope is not None and lexical.raw is None:
        return _retrieve_scoped(conn, lexical, filters, pool, budget)
    try:
        found = _candidates(conn, lexical_sql(lexical, filters, pool, budget))
    except sqlite3.OperationalError as exc:
        if lexical.raw is None:
            raise
        raise invalid_query(lexical.raw, exc) from None
    essential, rest = ([], []) if lexical.raw is not None else _split(lexical, pool, budget)
    if not rest:
        return Retrieval(found)
    if len(found) >= pool:
        return Retrieval(found, shaped=True, essential=tuple(t.key for t in essential))
    # Fewer candidates than wanted: rows with only common terms may still qualify.
    exact = _candidates(conn, exact_sql(lexical.match, filters, pool))
    return Retrieval(exact, fallback=True, notes=[_FALLBACK])


def _retrieve_scoped(
    conn: sqlite3.Connection, lexical: LexicalPlan, filters: Filters, pool: int, budget: int
) -> Retrieval:
    """:func:`retrieve` with a namespace's own statistics: the same candidates, shaping
    and scores (to the last bit) as FTS5 gives in a store holding the namespace alone.

    Each score is ``bm25()``'s arithmetic done in the same order over the same
    phrases: the OR of the terms in query order, or, shaped, the essential
    terms twice then the rest, less the essential terms alone.
    """
    live = [i for i, df in enumerate(lexical.doc_freqs) if df]
    terms = [lexical.terms[i] for i in live]
    postings = [lexical.postings[i] for i in live]
    scope = lexical.scope
    assert scope is not None
    essential_idx, rest_idx = shape([len(p) for p in postings], budget, pool)

    def phrases(indexes: Sequence[int]) -> list[tuple[Term, Postings]]:
        return [(terms[i], postings[i]) for i in indexes]

    allowed, scores, best = (
        (_plain_allowed, _plain_bm25, _plain_best)
        if _plain(postings)
        else (_allowed, _bm25_phrases, _best)
    )
    if rest_idx:
        seqs, lengths = allowed(conn, filters, [postings[i] for i in essential_idx])
        if len(seqs) >= pool:
            doubled = phrases([*essential_idx, *essential_idx, *rest_idx])
            score = scores(scope, seqs, lengths, doubled, less=phrases(essential_idx))
            return Retrieval(
                best(seqs, score, pool),
                shaped=True,
                essential=tuple(terms[i].key for i in essential_idx),
            )
    seqs, lengths = allowed(conn, filters, postings)
    score = scores(scope, seqs, lengths, phrases(range(len(terms))))
    notes = [_FALLBACK] if rest_idx else []
    return Retrieval(best(seqs, score, pool), fallback=bool(rest_idx), notes=notes)


def _allowed(
    conn: sqlite3.Connection, filters: Filters, postings: Sequence[Postings]
) -> tuple[Any, Any]:
    """The rows holding any of the terms that the filters allow, in seq order, and their
    lengths."""
    import numpy as np

    if not postings:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    each = [np.asarray(p.seqs, dtype=np.int64) for p in postings]  # tuples: see _plain
    seqs, first = np.unique(np.concatenate(each), return_index=True)
    lengths = np.concatenate([np.asarray(p.lengths, dtype=np.float64) for p in postings])[first]
    if filters.narrow and len(seqs):
        where, params = filter_sql(filters)
        sql = f"SELECT seq FROM memories AS m WHERE seq IN (SELECT value FROM json_each(?)){where}"
        rows = conn.execute(sql, [json.dumps(seqs.tolist()), *params])
        allowed = np.fromiter((r[0] for r in rows), dtype=np.int64)
        keep = np.isin(seqs, allowed)
        seqs, lengths = seqs[keep], lengths[keep]
    return seqs, lengths


def _freqs_in(postings: Postings, seqs: Any) -> Any:
    """The term's frequency in each of ``seqs`` (0 where the row lacks it)."""
    import numpy as np

    if not len(postings):
        return np.zeros(len(seqs))
    rows, freqs = np.asarray(postings.seqs), np.asarray(postings.freqs)  # tuples: see _plain
    at = np.minimum(np.searchsorted(rows, seqs), len(postings) - 1)
    return np.where(rows[at] == seqs, freqs[at], 0.0)


def _bm25_phrases(
    scope: Scope,
    seqs: Any,
    lengths: Any,
    phrases: Sequence[tuple[Term, Postings]],
    less: Sequence[tuple[Term, Postings]] = (),
) -> Any:
    """FTS5's ``bm25()`` (positive) of each row for these phrases, in FTS5's own order of
    operations, with the scope's N, average length and document frequencies; less that
    of the phrases ``less``, if any."""
    import numpy as np

    length = BM25_K1 * (1 - BM25_B + BM25_B * lengths / scope.avgdl)
    score = np.zeros(len(seqs))
    for term, postings in phrases:
        f = _freqs_in(postings, seqs)
        part = idf(len(postings), scope.docs) * ((f * (BM25_K1 + 1.0)) / (f + length))
        for _ in range(term.count):
            score = score + part
    return score - _bm25_phrases(scope, seqs, lengths, less) if less else score


def _best(seqs: Any, score: Any, pool: int) -> list[Candidate]:
    """The ``pool`` best rows, best first, ties by seq (as the SQL orders them)."""
    import numpy as np

    order = np.lexsort((seqs, -score))[:pool]
    return [Candidate(int(seqs[i]), float(score[i])) for i in order]


def _plain_allowed(
    conn: sqlite3.Connection, filters: Filters, postings: Sequence[Postings]
) -> tuple[list[int], list[float]]:
    """:func:`_allowed` of tuple postings."""
    sizes: dict[int, float] = {}
    for p in postings:
        for seq, length in zip(p.seqs, p.lengths, strict=True):
            sizes.setdefault(seq, length)
    seqs = sorted(sizes)
    if filters.narrow and seqs:
        where, params = filter_sql(filters)
        sql = f"SELECT seq FROM memories AS m WHERE seq IN (SELECT value FROM json_each(?)){where}"
        allowed = {r[0] for r in conn.execute(sql, [json.dumps(seqs), *params])}
        seqs = [seq for seq in seqs if seq in allowed]
    return seqs, [sizes[seq] for seq in seqs]


def _plain_bm25(
    scope: Scope,
    seqs: list[int],
    lengths: list[float],
    phrases: Sequence[tuple[Term, Postings]],
    less: Sequence[tuple[Term, Postings]] = (),
) -> list[float]:
    """:func:`_bm25_phrases` in plain floats, operation for operation."""
    length = [BM25_K1 * (1 - BM25_B + BM25_B * n / scope.avgdl) for n in lengths]
    score = [0.0] * len(seqs)
    for term, postings in phrases:
        freq = dict(zip(postings.seqs, postings.freqs, strict=True))
        weight = idf(len(postings), scope.docs)
        part = [
            weight * ((f * (BM25_K1 + 1.0)) / (f + k))
            for f, k in zip((freq.get(seq, 0.0) for seq in seqs), length, strict=True)
        ]
        for _ in range(term.count):
            score = [a + b for a, b in zip(score, part, strict=True)]
    if less:
        alone = _plain_bm25(scope, seqs, lengths, less)
        return [a - b for a, b in zip(score, alone, strict=True)]
    return score


def _plain_best(seqs: list[int], score: list[float], pool: int) -> list[Candidate]:
    """:func:`_best` of plain lists."""
    order = sorted(range(len(seqs)), key=lambda i: (-score[i], seqs[i]))[:pool]
    return [Candidate(seqs[i], score[i]) for i in order]


def bm25_of(
    conn: sqlite3.Connection, lexicon: Lexicon, lexical: LexicalPlan, seqs: Sequence[int]
) -> dict[int, float]:
    """BM25 (positive) of the rows ``seqs`` for the plan's terms, as ``bm25()`` would score them.

    A ``MATCH`` restricted to a few rowids still costs FTS5 a walk of every
    query term's whole posting list for each row (``bm25()`` counts the rows
    holding each term afresh), tens of milliseconds at 100,000 memories. Here
    the rows alone are tokenized (a contentless temp table with the index's
    tokenizer) and scored with FTS5's formula from the statistics the plan
    already holds: the same score, in well under a millisecond. Rows that
    contain no term are left out. A raw FTS5 expression is scored by FTS5.
    """
    if not seqs or lexical.empty:
        return {}
    terms = [(t, df) for t, df in zip(lexical.terms, lexical.doc_freqs, strict=True) if df]
    if lexical.scope is not None and lexical.raw is None:
        import numpy as np

        wanted = np.asarray(sorted(set(seqs)), dtype=np.int64)  # numpy.unique imports numpy.ma
        live = [p for p, df in zip(lexical.postings, lexical.doc_freqs, strict=True) if df]
        found, lengths = _allowed(conn, Filters(None), live)
        keep = np.isin(found, wanted)
        found, lengths = found[keep], lengths[keep]
        counts = np.stack([_freqs_in(p, found) for p in live], axis=1).tolist()
        rows, scope = found.tolist(), lexical.scope
        weights = [term.count * idf(df, scope.docs) for term, df in terms]
        sizes = dict(zip(rows, lengths.tolist(), strict=True))
        return _bm25(dict(zip(rows, counts, strict=True)), weights, sizes, scope.avgdl)
    if lexical.raw is not None:
        where = f"memories_fts MATCH ? AND rowid IN ({marks(len(seqs))})"
        rows = conn.execute(
            f"SELECT rowid, -{_BM25} FROM memories_fts WHERE {where}", [lexical.match, *seqs]
        )
        return {seq: raw for seq, raw in rows if raw > 0}
    _load(conn, lexicon, seqs)
    freqs = _frequencies(conn, [t for t, _ in terms])
    sql = f"SELECT id, sz FROM memories_fts_docsize WHERE id IN ({marks(len(seqs))})"
    sizes = {seq: sum(_varints(size)) for seq, size in conn.execute(sql, list(seqs))}
    n_rows, total_tokens = _totals(conn)
    weights = [term.count * idf(df, n_rows) for term, df in terms]
    return _bm25(freqs, weights, sizes, total_tokens / n_rows if n_rows else 1.0)


def bm25_beside(
    conn: sqlite3.Connection,
    lexicon: Lexicon,
    lexical: LexicalPlan,
    seqs: Sequence[int],
    content: str,
    tags: str,
) -> tuple[float, dict[int, float]]:
    """BM25 (positive) of a row not stored yet and of the rows ``seqs``, for the plan's terms.

    ``content`` and ``tags`` are the new row's text as the index would hold
    it. Both are scored as ``bm25()`` would score them once the new row is
    stored: it counts in the number of rows, the average length and the
    document frequency of each term it holds (the plan's frequencies are
    taken as those of the index without it). Returns the new row's score
    and the others' (rows without any term left out).
    """
    if lexical.raw is not None:
        raise ValueError("bm25_beside scores plain-text plans only")
    _load(conn, lexicon, seqs, (content, tags))
    terms = list(lexical.terms)
    freqs = _frequencies(conn, terms)
    own = freqs.pop(0, [0.0] * len(terms))
    sql = "SELECT id, sz FROM temp.mnemex_score_docsize"
    sizes = {doc: sum(_varints(size)) for doc, size in conn.execute(sql)}
    n_rows, total_tokens = _totals(conn)
    n_rows += 1
    total_tokens += sizes.get(0, 0)
    doc_freqs = [df + (1 if f else 0) for df, f in zip(lexical.doc_freqs, own, strict=True)]
    weights = [
        term.count * idf(df, n_rows) if df else 0.0
        for term, df in zip(terms, doc_freqs, strict=True)
    ]
    avgdl = total_tokens / n_rows
    if any(own):
        freqs[0] = own
    scores = _bm25(freqs, weights, sizes, avgdl)
    return scores.pop(0, 0.0), scores


def _load(
    conn: sqlite3.Connection,
    lexicon: Lexicon,
    seqs: Sequence[int],
    new: tuple[str, str] | None = None,
) -> None:
    """Tokenize rows ``seqs`` (and a new row, as row 0) into ``temp.mnemex_score``."""
    lexicon._setup()
    conn.execute("INSERT INTO temp.mnemex_score (mnemex_score) VALUES ('delete-all')")
    if new is not None:
        conn.execute("INSERT INTO temp.mnemex_score (rowid, content, tags) VALUES (0, ?, ?)", new)
    if seqs:
        rows = (
            f"SELECT seq, content, tags FROM memories_fts_source WHERE seq IN ({marks(len(seqs))})"
        )
        conn.execute(f"INSERT INTO temp.mnemex_score (rowid, content, tags) {rows}", list(seqs))


def _frequencies(conn: sqlite3.Connection, terms: Sequence[Term]) -> dict[int, list[float]]:
    """Each loaded row's weighted frequency of each term (phrases by their positions)."""
    tokens = sorted({token for t in terms for token in t.key.split(" ")})
    if not tokens:
        return {}
    where = f"WHERE term IN ({marks(len(tokens))})"
    sql = f"SELECT term, doc, col, offset FROM temp.mnemex_score_v {where}"
    # (row, column, offset) -> query token
    at = {(doc, col, offset): term for term, doc, col, offset in conn.execute(sql, tokens)}
    freqs: dict[int, list[float]] = {}
    for (doc, col, offset), token in at.items():
        for i, term in enumerate(terms):
            words = term.key.split(" ")
            if words[0] == token and all(
                at.get((doc, col, offset + k)) == word for k, word in enumerate(words[1:], 1)
            ):
                freqs.setdefault(doc, [0.0] * len(terms))[i] += _COLUMN_WEIGHTS[col]
    return freqs


def _bm25(
    freqs: dict[int, list[float]],
    weights: Sequence[float],
    sizes: Mapping[int, float],
    avgdl: float,
) -> dict[int, float]:
    """FTS5's ``bm25()`` from term frequencies, IDF weights and row lengths."""
    out = {}
    for doc, counts in freqs.items():
        length = BM25_K1 * (1 - BM25_B + BM25_B * sizes.get(doc, 0) / avgdl)
        out[doc] = sum(
            w * f * (BM25_K1 + 1) / (f + length) for w, f in zip(weights, counts, strict=True) if f
        )
    return out


def similar_terms(
    lexicon: Lexicon,
    term: str,
    lengths: tuple[int, int],
    edits: int,
    namespace: str | None,
    keep: Callable[[str], bool],
) -> list[tuple[str, int]]:
    """The index terms starting with ``term``'s letter whose length is within ``lengths``
    and that ``keep`` keeps, each with the rows of ``namespace`` (``None``: of the index)
    that hold it; those it holds none of left out. ``keep`` keeps terms at most ``edits``
    edits from ``term``: at one, only the terms one edit can reach are read
    (:func:`_one_edit_away`).

    Reading a term's document count walks its postings, so the letter's terms cost a
    store of a million memories about 60 ms; a namespace's rows cost a query a term, so
    they are counted for the terms kept only."""
    conn = lexicon.conn
    found = _one_edit_away(conn, term, lengths) if edits == 1 else None
    if found is None:
        found = _vocabulary(conn, term[:1], lengths)
    kept = [(t, d) for t, d in found if keep(t)]
    if lexicon.scope(namespace) is None or not kept:
        return kept
    sql = (
        "SELECT count(DISTINCT v.doc) FROM temp.mnemex_vocab_i AS v "
        "CROSS JOIN memories AS m ON m.seq = v.doc WHERE v.term = ? AND m.namespace = ?"
    )
    held = [(t, int(conn.execute(sql, (t, namespace)).fetchone()[0])) for t, _ in kept]
    return [(t, n) for t, n in held if n]


MAX_SECOND_LETTERS = 64  # past these under one letter, its terms are read whole


def _one_edit_away(
    conn: sqlite3.Connection, term: str, lengths: tuple[int, int]
) -> list[tuple[str, int]] | None:
    """The index terms starting with ``term``'s letter that may be one edit (a letter
    changed, added or dropped, or two swapped) from it, with their document counts:
    ``None`` when ``term`` is too short or its letter leads too many second letters.

    With the first letter the same, the edit is past it: past the second letter, the
    term starts as ``term`` does; at the second, it starts with the first and third
    letters (the second dropped, or swapped with the third), or it is the first letter,
    any second letter, then ``term`` from its third letter (changed) or its second
    (added): those are looked up for each second letter the index holds."""
    if len(term) < 3:
        return None
    first = term[0]
    seconds = _second_letters(conn, first)
    if seconds is None:
        return None
    found: dict[str, int] = {}
    for prefix in (term[:2], first + term[2]):
        found.update(_vocabulary(conn, prefix, lengths))
    probes = {first + x + rest for x in seconds for rest in (term[2:], term[1:])}
    found.update(_counts(conn, sorted(probes - found.keys())))
    return list(found.items())


def _vocabulary(
    conn: sqlite3.Connection, prefix: str, lengths: tuple[int, int]
) -> list[tuple[str, int]]:
    """The index terms starting with ``prefix`` of a length within ``lengths``, and their
    document counts."""
    rows = conn.execute(
        "SELECT term, doc FROM temp.mnemex_vocab WHERE term >= ? AND term < ? "
        "AND length(term) BETWEEN ? AND ?",
        (prefix, prefix + "\U0010ffff", *lengths),
    ).fetchall()
    return [(str(t), int(d)) for t, d in rows]


def _counts(conn: sqlite3.Connection, terms: Sequence[str]) -> list[tuple[str, int]]:
    """Those of ``terms`` the index holds, and their document counts."""
    out: list[tuple[str, int]] = []
    for start in range(0, len(terms), IN_CHUNK):
        chunk = terms[start : start + IN_CHUNK]
        sql = f"SELECT term, doc FROM temp.mnemex_vocab WHERE term IN ({marks(len(chunk))})"
        out += [(str(t), int(d)) for t, d in conn.execute(sql, chunk)]
    return out


def _second_letters(conn: sqlite3.Connection, first: str) -> list[str] | None:
    """The letters that follow ``first`` in the index's terms (one term read for each),
    or ``None`` when there are more than :data:`MAX_SECOND_LETTERS`."""
    out: list[str] = []
    after, end = first, first + "\U0010ffff"
    sql = "SELECT term FROM temp.mnemex_vocab WHERE term > ? AND term < ? LIMIT 1"
    while (row := conn.execute(sql, (after, end)).fetchone()) is not None:
        found = str(row[0])
        if len(found) < 2:
            after = found
            continue
        if len(out) == MAX_SECOND_LETTERS:
            return None
        out.append(found[1])
        after = found[:2] + "\U0010ffff"
    return out


def surface_of(
    conn: sqlite3.Connection, lexicon: Lexicon, term: str, namespace: str | None
) -> str | None:
    """How a memory of ``namespace`` writes the index term ``term`` (its first such word),
    or ``None`` when none holds it."""
    lexicon._setup()
    where, params = filter_sql(Filters(namespace))
    # The term's rows, read exactly (a MATCH would stem the term again), then their
    # memories: CROSS JOIN, as left to itself the planner walks the namespace's memories
    # and probes the index for each (100 ms to 2 s at 100,000 memories, against 0.1 ms).
    row = conn.execute(
        "SELECT m.content FROM temp.mnemex_vocab_i AS v CROSS JOIN memories AS m "
        f"ON m.seq = v.doc WHERE v.term = ? AND v.col = 'content'{where} LIMIT 1",
        [term, *params],
    ).fetchone()
    if row is None:
        return None
    return next((t.surface for t in lexicon.tokenize(row[0]) if t.stem == term), None)


def avg_tokens(conn: sqlite3.Connection) -> float:
    """The index's mean row length in tokens (1.0 when empty)."""
    rows, tokens = _totals(conn)
    return tokens / rows if rows else 1.0


def _totals(conn: sqlite3.Connection) -> tuple[int, int]:
    """FTS5's row count and total tokens over all columns (its "averages" record)."""
    row = conn.execute("SELECT block FROM memories_fts_data WHERE id = 1").fetchone()
    if row is None:
        return 0, 0
    values = _varints(row[0])
    return values[0], sum(values[1:])


def _row_tokens(size: bytes) -> int:
    """Tokens of a row from its ``memories_fts_docsize`` record (two columns); the
    common short records decoded inline."""
    if len(size) == 2:  # two one-byte varints
        return size[0] + size[1]
    if len(size) == 3:  # a two-byte varint and a one-byte one, in either order
        if size[0] & 0x80:
            return ((size[0] & 0x7F) << 7 | size[1]) + size[2]
        return size[0] + ((size[1] & 0x7F) << 7 | size[2])
    return sum(_varints(size))


def _varints(blob: bytes) -> list[int]:
    """SQLite's big-endian varints (FTS5's record format), one after another."""
    out = []
    i = 0
    while i < len(blob):
        value = 0
        for n in range(9):
            byte = blob[i]
            i += 1
            if n == 8:
                value = (value << 8) | byte
                break
            value = (value << 7) | (byte & 0x7F)
            if byte < 0x80:
                break
        out.append(value)
    return out


def snippets(
    conn: sqlite3.Connection,
    match: str,
    seqs: Sequence[int],
    *,
    start: str,
    end: str,
    tokens: int,
) -> dict[int, str]:
    """FTS5 ``snippet()`` of the content of each row, with highlight markers.

    The rows are copied into a table of their own (the index's tokenizer) and cut
    there: ``snippet()`` reads only the row's own text and positions, so the snippets
    are those the index would give, without its ``MATCH`` walking every query term's
    postings (1.0 against 0.45 ms for 10 hits at 100,000 memories, 1.6 against 0.5 ms
    at a million). The caller's connection has a :class:`Lexicon` (its temp tables).
    """
    if not seqs or not match:
        return {}
    conn.execute("DELETE FROM temp.mnemex_snip")
    conn.execute(
        "INSERT INTO temp.mnemex_snip (rowid, content, tags) SELECT seq, content, tags "
        f"FROM memories_fts_source WHERE seq IN ({marks(len(seqs))})",
        list(seqs),
    )
    sql = """SELECT rowid, snippet(mnemex_snip, 0, ?, ?, '…', ?)
             FROM temp.mnemex_snip WHERE mnemex_snip MATCH ?"""
    rows = conn.execute(sql, [start, end, tokens, match])
    return {seq: unsegment(text) for seq, text in rows if text is not None}
