"""What a search reads in PostgreSQL: the retrieval seam of :mod:`mnemex.search.pipeline`
(its ``Retriever``) over one connection.

The pipeline's planning, fusion, ranking and hits are shared; here are only the
reads. The lexical plan is the SQLite arm's (the same tokenizer, expansion, stop
words and rarest-terms cut, see :mod:`mnemex.engine.sqlite.fts`), with the statistics of
the namespace searched (every namespace's with ``ALL``), and its candidates are
scored by :func:`mnemex.engine.postgres.bm25.retrieve` (shaped by
``lexical_budget``, as on SQLite). A raw FTS5 expression is answered by
:mod:`mnemex.engine.postgres.raw` (the expression decides which memories match,
as on SQLite). The vector arm is
pgvector (:func:`mnemex.engine.postgres.vectors.vector`; an exact scan when
filters beyond the namespace apply). Snippets are FTS5's
``snippet()`` over the hits' text, in an in-memory SQLite table on the client.
A memory with several windows' vectors is scored by its best window, as on SQLite.
"""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import field
from typing import TYPE_CHECKING, Any

from mnemex.config import SNIPPET_MAX_CHARS, Settings
from mnemex.embed import SENTENCE_BASE, Embedder
from mnemex.engine.postgres import bm25, raw
from mnemex.engine.postgres.connect import snapshot
from mnemex.engine.postgres.tokens import lexicon, query_key
from mnemex.engine.postgres.vectors import (
    EXACT_MAX,
    check_dim,
    counts,
    dim_and_counts,
    from_binary,
    literal,
    model_dim,
    param,
    vector,
)
from mnemex.engine.postgres.workspaces import tables
from mnemex.errors import IndexMismatch
from mnemex.index.query import (
    MAX_QUERY_TERMS,
    build_terms,
    capital_letters,
    content_terms,
    expand_terms,
    keep_rarest,
)
from mnemex.index.retrieval import (
    Candidate,
    Filters,
    LexicalPlan,
    Retrieval,
    VectorHit,
    raw_plan,
    raw_terms,
)
from mnemex.index.stopwords import ENGLISH, STOPWORDS
from mnemex.models import Location
from mnemex.records import dataclass
from mnemex.storage import TOKENIZER
from mnemex.text import format_time, segment, unsegment
from mnemex.workers import Job, query_pool

if TYPE_CHECKING:
    from pathlib import Path

    import numpy as np

    from mnemex.request import Plan, Request

_local = threading.local()


@dataclass(frozen=True, slots=True)
class Found:
    """The vector arm's hits (run at once: nothing to wait for or release)."""

    hits: list[VectorHit]

    def result(self) -> list[VectorHit]:
        return self.hits

    def close(self) -> None:
        return None


@dataclass(frozen=True, slots=True)
class Beside:
    """The vector arm running on a worker, on a second connection in the search's
    snapshot, while the lexical arm runs on the first."""

    job: Job[list[VectorHit]]
    held: contextlib.ExitStack  # the second connection, back to the pool on close

    def result(self) -> list[VectorHit]:
        return self.job.result()

    def close(self) -> None:
        if not self.job.cancel():
            self.job.wait()
        self.held.close()


_SNAPSHOT_ID = re.compile(r"[0-9A-F]+-[0-9A-F]+(-[0-9]+)?")


def _beside(conn: Any, exported: str, *args: Any, exact: bool = False) -> list[VectorHit]:
    """:func:`vector` on ``conn`` in the snapshot ``exported`` by another connection."""
    if not _SNAPSHOT_ID.fullmatch(exported):
        raise ValueError(f"not a snapshot id: {exported!r}")
    with snapshot(conn):
        conn.execute(f"SET TRANSACTION SNAPSHOT '{exported}'".encode())
        return [VectorHit(h.seq, h.cosine) for h in vector(conn, *args, exact=exact)]


def filter_sql(filters: Filters, alias: str) -> tuple[str, dict[str, Any]]:
    """``JOIN memories ... WHERE ...`` restricting rows of ``alias`` (a table with a
    ``seq``) by the filters beyond the namespace, and its parameters ('' when none)."""
    parts, params = conditions(filters)
    if not parts:
        return "", {}
    return f"JOIN memories AS m ON m.seq = {alias}.seq WHERE " + " AND ".join(parts), params


def conditions(filters: Filters) -> tuple[list[str], dict[str, Any]]:
    """Conditions on ``memories AS m`` for the filters beyond the namespace, and their
    named parameters."""
    parts: list[str] = []
    params: dict[str, Any] = {}
    if filters.kinds:
        parts.append("m.kind = ANY(%(f_kinds)s)")
        params["f_kinds"] = list(filters.kinds)
    if filters.tags:
        parts.append("m.tags @> %(f_tags)s::jsonb")
        params["f_tags"] = json.dumps(list(filters.tags))
    if filters.since is not None:
        parts.append("m.created_at >= %(f_since)s")
        params["f_since"] = filters.since
    if filters.until is not None:
        parts.append("m.created_at < %(f_until)s")
        params["f_until"] = filters.until
    return parts, params


@dataclass
class PostgresEngine:
    """The PostgreSQL reads of one search, on one connection."""

    conn: Any  # psycopg.Connection
    settings: Settings
    embedder: Embedder | None
    namespace: str | None = None  # the namespace searched (None: all), set by plan()
    # The namespace's statistics with the plan's terms, read by plan() in the search's
    # snapshot: the arm and the scores of given rows weigh the terms with them.
    stats: bm25.Statistics | None = None
    backgrounds: dict[Any, Any] = field(default_factory=dict)  # the session's levels
    queries: dict[Any, Any] | None = None  # the session's kept query vectors, if it keeps them
    # The candidates' columns, read once by meta() for the later stages of the same search
    # (rows, contents, locations): seq -> the columns of _MEMO.
    memo: dict[int, tuple[Any, ...]] = field(default_factory=dict)
    # The model's dimension and vector counts (namespace, all) read by the vector arm.
    shape: tuple[int | None, int, int] | None = None
    # Another of the session's connections, when one is free at once (else None): the
    # vector arm runs on it beside the lexical arm.
    spare: Callable[[], contextlib.AbstractContextManager[Any]] | None = None

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """One read-only snapshot for the whole search."""
        with snapshot(self.conn):
            yield

    def plan(self, request: Request, text: str) -> LexicalPlan:
        """The SQLite arm's plan (:func:`mnemex.index.retrieval.plan`) with this database's
        statistics of the namespace searched."""
        self.namespace = request.filters.namespace
        if request.raw:  # the whole store's statistics, as FTS5's bm25() on SQLite
            terms = raw_terms(lexicon(), text)
            keys = [query_key(t) for t in terms]
            stats = bm25.statistics(self.conn, None, keys)
            return raw_plan(text, terms, [stats.doc_freqs.get(k, 0) for k in keys], stats.docs)
        tokens = lexicon().tokenize(text)
        if request.expand:
            terms = expand_terms(tokens, STOPWORDS, capital_letters(text))
        else:
            terms = build_terms(tokens, ENGLISH)
        kept, dropped = content_terms(terms)
        keys = [query_key(t) for t in [*kept, *dropped]]
        stats = bm25.statistics(self.conn, request.filters.namespace, keys)
        self.stats = stats
        freqs = [stats.doc_freqs.get(k, 0) for k in keys]
        keep = keep_rarest(kept, freqs[: len(kept)], MAX_QUERY_TERMS)
        return LexicalPlan(
            terms=tuple(kept[i] for i in keep),
            doc_freqs=tuple(freqs[i] for i in keep),
            n_docs=stats.docs,
            dropped=tuple(dropped),
            dropped_freqs=tuple(freqs[len(kept) :]),
        )

    def with_dropped(self, lexical: LexicalPlan) -> LexicalPlan:
        return lexical.with_dropped()

    def lexical(self, request: Request, lexical: LexicalPlan, pool: int) -> Retrieval:
        if lexical.raw is not None:
            return Retrieval(self._raw(lexical.raw, request.filters, pool))
        terms = [t for t, df in zip(lexical.terms, lexical.doc_freqs, strict=True) if df]
        where = filter_sql(request.filters, "p")
        budget, namespace = self.settings.lexical_budget, request.filters.namespace
        return bm25.retrieve(self.conn, terms, namespace, pool, budget, where, self.stats)

    def warm(self, dim: int) -> None:
        return None

    def vector_arm(
        self, request: Request, planned: Plan, qvec: np.ndarray, side: bool, notes: list[str]
    ) -> Found | Beside | None:
        """pgvector's nearest neighbours of the model (``None``, with a note, when the
        stored vectors do not fit the query's)."""
        assert self.embedder is not None
        model, filters = self.embedder.model_id, request.filters
        exact = self.settings.ann == "off"
        try:
            if filters.narrow:
                return Found(self._exact(qvec, filters, model, planned.pool))
            self.shape = shape = dim_and_counts(self.conn, model, filters.namespace)
            check_dim(qvec, model, shape[0])
            if side and self.spare is not None and shape[1]:
                with contextlib.ExitStack() as held:  # the connection back if this fails
                    other = held.enter_context(self.spare())
                    if other is not None:
                        args = (other, self.exported(), qvec, filters.namespace, model)
                        job = query_pool().submit(_beside, *args, planned.pool, shape, exact=exact)
                        return Beside(job, held.pop_all())
            here = (self.conn, qvec, filters.namespace, model, planned.pool, shape)
            found = vector(*here, exact=exact)
        except IndexMismatch as exc:
            notes.append(f"{exc}; answered from the lexical arm")
            return None
        return Found([VectorHit(h.seq, h.cosine) for h in found])

    def exported(self) -> str:
        """The search's snapshot, exported for another connection to read in."""
        row = self.conn.execute("SELECT pg_export_snapshot()").fetchone()
        return str(row[0]) if row else ""

    def _exact(self, qvec: np.ndarray, filters: Filters, model: str, limit: int) -> list[VectorHit]:
        dim = model_dim(self.conn, model)
        if dim is None:
            return []
        if int(qvec.shape[0]) != dim:
            raise IndexMismatch(f"the query vector has {qvec.shape[0]} dimensions; {model!r} {dim}")
        join, params = filter_sql(filters, "e")
        only = "" if filters.namespace is None else "AND e.namespace = %(ns)s"
        rows = self.conn.execute(
            f"""SELECT e.seq, max(1 - (e.vector::vector({dim}) <=> %(q)b::vector({dim}))) AS c
                FROM embeddings AS e {join} AND e.model = %(model)s {only}
                GROUP BY e.seq ORDER BY c DESC, e.seq LIMIT %(limit)s""".encode(),
            {**params, "q": param(qvec), "model": model, "ns": filters.namespace, "limit": limit},
        ).fetchall()
        return [VectorHit(int(seq), float(c)) for seq, c in rows]

    def bm25_of(self, lexical: LexicalPlan, seqs: Sequence[int]) -> dict[int, float]:
        """BM25 of the rows ``seqs`` (those holding a term), as :meth:`lexical` scores them."""
        if not seqs or lexical.empty:
            return {}
        if lexical.raw is not None:  # the expression decides which rows have a score
            found = self._raw(lexical.raw, Filters(self.namespace), len(seqs), seqs)
            return {c.seq: c.raw for c in found}
        terms = [t for t, df in zip(lexical.terms, lexical.doc_freqs, strict=True) if df]
        found = bm25.scores_of(self.conn, terms, self.namespace, seqs, self.stats)
        return {c.seq: c.raw for c in found}

    def _raw(
        self, expression: str, filters: Filters, limit: int, seqs: Sequence[int] | None = None
    ) -> list[Candidate]:
        """The best rows a raw FTS5 expression matches within the filters (and ``seqs``)."""
        parts, params = conditions(filters)
        if seqs is not None:
            parts.append("m.seq = ANY(%(f_seqs)s::bigint[])")
            params["f_seqs"] = list(seqs)
        where = "".join(f" AND {p}" for p in parts)
        query = raw.translate(expression)
        return raw.search(self.conn, query, filters.namespace, limit, (where, params))

    def cosines_of(self, seqs: list[int], qvec: np.ndarray) -> dict[int, float]:
        """Each memory's cosine to the query: its best window's."""
        if not seqs or self.embedder is None:
            return {}
        dim = int(qvec.shape[0])
        rows = self.conn.execute(
            f"SELECT seq, max(1 - (vector::vector({dim}) <=> %b::vector({dim}))) FROM embeddings "
            "WHERE model = %s AND seq = ANY(%s) GROUP BY seq".encode(),
            (param(qvec), self.embedder.model_id, seqs),
        ).fetchall()
        return {int(seq): float(c) for seq, c in rows}

    def token_cosines_of(self, seqs: list[int], qvec: np.ndarray) -> dict[int, float]:
        """The cosine to the query of each of these memories that has sentence windows:
        its best token window's."""
        if not seqs or self.embedder is None:
            return {}
        dim = int(qvec.shape[0])
        rows = self.conn.execute(
            f"SELECT seq, max(1 - (vector::vector({dim}) <=> %b::vector({dim}))) "
            "FILTER (WHERE window_no < %s) FROM embeddings "
            "WHERE model = %s AND seq = ANY(%s) GROUP BY seq "
            "HAVING max(window_no) >= %s".encode(),
            (param(qvec), SENTENCE_BASE, self.embedder.model_id, seqs, SENTENCE_BASE),
        ).fetchall()
        return {int(seq): float(c) for seq, c in rows if c is not None}

    def vectors_of(self, seqs: list[int], dim: int) -> dict[int, Any]:
        """Each memory's first-window vector."""

        if not seqs or self.embedder is None:
            return {}
        with self.conn.cursor(binary=True) as cursor:
            rows = cursor.execute(
                "SELECT seq, vector FROM embeddings "
                "WHERE model = %s AND seq = ANY(%s) AND window_no = 0",
                (self.embedder.model_id, seqs),
            ).fetchall()
        return {int(s): from_binary(v) for s, v in rows}

    def _remembered(self, seqs: list[int]) -> dict[int, tuple[Any, ...]]:
        """The columns of :data:`_MEMO` of each memory, read once in this search."""
        missing = [s for s in seqs if s not in self.memo]
        if missing:
            for row in self.conn.execute(_MEMO, (missing,)).fetchall():
                self.memo[int(row[0])] = row
        return {s: self.memo[s] for s in seqs if s in self.memo}

    def rows(self, seqs: list[int]) -> dict[int, tuple[Any, ...]]:
        """seq, id, kind, tags (JSON), created_at (text), the start of the content and the
        namespace of each memory, as the SQLite engine's rows read."""
        return {
            s: (s, r[5], r[6], r[7], format_time(r[1]), r[10][:_ROW_CHARS], r[8])
            for s, r in self._remembered(seqs).items()
        }

    def meta(self, seqs: list[int]) -> dict[int, tuple[Any, ...]]:
        """created_at (text), confidence, pinned and source of each memory (read with the
        columns the later stages of the search need: one round trip for all)."""
        return {
            s: (format_time(r[1]), r[2], int(r[3]), r[4]) for s, r in self._remembered(seqs).items()
        }

    def neighbours(
        self, seqs: list[int]
    ) -> dict[int, tuple[int | None, int | None, tuple[str, str]]]:
        """The memories just before and after each memory in its thread (namespace and
        source; workspace chunks are in none), and the thread, as the SQLite engine
        finds them."""
        near = (
            "SELECT {} FROM memories AS m WHERE m.namespace = c.namespace "
            "AND m.source = c.source AND m.seq {} c.seq AND NOT m.file_chunk"
        )
        rows = self.conn.execute(
            f"SELECT c.seq, ({near.format('max(m.seq)', '<')}), ({near.format('min(m.seq)', '>')}), "
            "c.namespace, c.source FROM memories AS c "
            "WHERE c.seq = ANY(%s) AND c.source <> '' AND NOT c.file_chunk".encode(),
            (seqs,),
        ).fetchall()
        return {int(seq): (before, after, (ns, source)) for seq, before, after, ns, source in rows}

    def similar_terms(
        self,
        term: str,
        lengths: tuple[int, int],
        edits: int,
        namespace: str | None,
        keep: Callable[[str], bool],
    ) -> list[tuple[str, int]]:
        """The namespace's terms starting with ``term``'s letter of a length within
        ``lengths`` that ``keep`` keeps, each with the memories holding it (none searched
        across every namespace). The letter's terms are read from ``term_stats``'s
        B-tree, no postings: ``edits`` does not narrow them."""
        first = term[:1]
        if namespace is None:
            return []
        rows = self.conn.execute(
            "SELECT term, sum(docs) FROM term_stats WHERE namespace = %s AND term >= %s "
            "AND term < %s AND length(term) BETWEEN %s AND %s GROUP BY term "
            "HAVING sum(docs) > 0",
            (namespace, first, first + "\U0010ffff", *lengths),
        ).fetchall()
        return [(str(t), int(d)) for t, d in rows if keep(str(t))]

    def surface_of(self, term: str, namespace: str | None) -> str | None:
        """How a memory of the namespace writes the index term ``term``."""
        if namespace is None:
            return None
        row = self.conn.execute(
            "SELECT m.content FROM postings AS p JOIN memories AS m ON m.seq = p.seq "
            "WHERE p.namespace = %s AND p.term = %s LIMIT 1",
            (namespace, term),
        ).fetchone()
        if row is None:
            return None
        return next((t.surface for t in lexicon().tokenize(row[0]) if t.stem == term), None)

    def vector_count(self, filters: Filters) -> int:
        """Vectors of the model within ``filters`` (every window)."""
        if self.embedder is None:
            return 0
        model = self.embedder.model_id
        if not filters.narrow:
            if self.shape is not None and filters.namespace == self.namespace:
                return self.shape[1]  # read by the vector arm in this search's snapshot
            return counts(self.conn, model, filters.namespace)[0]
        join, params = filter_sql(filters, "e")
        only = "" if filters.namespace is None else "AND e.namespace = %(ns)s"
        row = self.conn.execute(
            f"SELECT count(*) FROM embeddings AS e {join} AND e.model = %(model)s {only}".encode(),
            {**params, "model": model, "ns": filters.namespace},
        ).fetchone()
        return int(row[0]) if row else 0

    def best_cosines(self, filters: Filters, queries: np.ndarray) -> list[float]:
        """Each query's best cosine within ``filters`` (-1 when none): one scan for every
        query when the scan is the vector arm's path (filters beyond the namespace, or few
        vectors), else each query's nearest window through the index."""
        if self.embedder is None:
            return [-1.0] * len(queries)
        model = self.embedder.model_id
        dim = model_dim(self.conn, model)
        if dim is None or dim != int(queries.shape[1]):
            return [-1.0] * len(queries)
        count = self.vector_count(filters)
        if not filters.narrow and count > EXACT_MAX and self.settings.ann != "off":
            return [
                hits[0].cosine
                if (hits := vector(self.conn, q, filters.namespace, model, 1))
                else -1.0
                for q in queries
            ]
        join, params = filter_sql(filters, "e")
        where = (join or "WHERE true") + " AND e.model = %(model)s"
        if filters.namespace is not None:
            where += " AND e.namespace = %(ns)s"
        rows = self.conn.execute(
            f"""SELECT b.i, max(1 - (e.vector::vector({dim}) <=> b.v))
                FROM unnest(%(queries)s::vector({dim})[]) WITH ORDINALITY AS b(v, i)
                CROSS JOIN embeddings AS e {where} GROUP BY b.i""".encode(),
            {
                **params,
                "queries": [literal(q) for q in queries],
                "model": model,
                "ns": filters.namespace,
            },
        ).fetchall()
        best = dict(rows)
        return [float(best.get(i + 1, -1.0)) for i in range(len(queries))]

    def sample_cosines(self, filters: Filters, queries: np.ndarray, rows: int) -> list[float]:
        """The queries' cosines with about ``rows`` vectors within ``filters``, sampled the
        same way every time."""
        if self.embedder is None:
            return []
        model = self.embedder.model_id
        dim = model_dim(self.conn, model)
        count = self.vector_count(filters)
        if dim is None or dim != int(queries.shape[1]) or not count:
            return []
        share = min(100.0, 100.0 * rows / count)
        join, params = filter_sql(filters, "e")
        where = (join or "WHERE true") + " AND e.model = %(model)s"
        if filters.namespace is not None:
            where += " AND e.namespace = %(ns)s"
        found = self.conn.execute(
            f"""SELECT 1 - (e.vector::vector({dim}) <=> b.v)
                FROM unnest(%(queries)s::vector({dim})[]) AS b(v)
                CROSS JOIN (SELECT * FROM embeddings TABLESAMPLE BERNOULLI (%(share)s)
                            REPEATABLE (7)) AS e {where}""".encode(),
            {
                **params,
                "queries": [literal(q) for q in queries],
                "model": model,
                "ns": filters.namespace,
                "share": share,
            },
        ).fetchall()
        return [float(c) for (c,) in found]

    def saved_backgrounds(self, dim: int) -> tuple[Path, dict[str, Any]] | None:
        """None: the backgrounds of a server's store are measured by each process."""
        return None

    def avg_tokens(self, lexical: LexicalPlan) -> float:
        """The namespace's mean memory length in tokens."""
        return bm25.statistics(self.conn, self.namespace).avgdl

    def contents(self, seqs: list[int]) -> list[tuple[int, str]]:
        """Each memory's whole content (those read whole with the search's columns
        first)."""
        known = {s: r for s, r in self.memo.items() if r[9] <= _MEMO_CHARS}
        out = [(s, str(known[s][10])) for s in seqs if s in known]
        missing = [s for s in seqs if s not in known]
        if missing:
            rows = self.conn.execute(
                "SELECT seq, content FROM memories WHERE seq = ANY(%s)", (missing,)
            ).fetchall()
            out.extend((int(s), str(c)) for s, c in rows)
        return out

    def locations(self, seqs: list[int]) -> dict[int, Location]:
        """Where each memory that is a chunk of a workspace file lives (no round trip when
        the search's columns say none is)."""
        if all(s in self.memo and not self.memo[s][11] for s in seqs):
            return {}
        return tables().locations(self.conn, seqs)

    def snippets(self, match: str, seqs: list[int]) -> dict[int, str]:
        """FTS5's ``snippet()`` of each row's content, as the SQLite engine shows it."""
        if not seqs or not match:
            return {}
        texts = self.contents(seqs)
        s, scratch = self.settings, _scratch()
        scratch.execute("DELETE FROM doc")
        scratch.executemany(
            "INSERT INTO doc (rowid, content) VALUES (?, ?)",
            [(seq, segment(text) or text) for seq, text in texts],
        )
        try:
            rows = scratch.execute(
                "SELECT rowid, snippet(doc, 0, ?, ?, '…', ?) FROM doc WHERE doc MATCH ?",
                (s.highlight_start, s.highlight_end, s.snippet_tokens, match),
            ).fetchall()
        except sqlite3.OperationalError:
            return {}
        return {seq: unsegment(text) for seq, text in rows if text is not None}


# What a search reads of its candidates, once (PostgresEngine._remembered): seq, created_at,
# confidence, pinned, source (meta), id, kind, tags, namespace (rows), the content's length
# and its first _MEMO_CHARS characters (rows and contents: the whole of most memories),
# file_chunk (locations).
_MEMO_CHARS = 4096
_ROW_CHARS = SNIPPET_MAX_CHARS * 2
_MEMO = (
    "SELECT seq, created_at, confidence, pinned, source, id, kind, tags::text, namespace, "
    f"length(content), substr(content, 1, {max(_MEMO_CHARS, _ROW_CHARS)}), file_chunk "
    "FROM memories WHERE seq = ANY(%s)"
).encode()


def _scratch() -> sqlite3.Connection:
    """This thread's in-memory FTS5 table for snippets."""
    conn: sqlite3.Connection | None = getattr(_local, "conn", None)
    if conn is None:
        conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        conn.execute(f"CREATE VIRTUAL TABLE doc USING fts5(content, tags, tokenize='{TOKENIZER}')")
        _local.conn = conn
    return conn
