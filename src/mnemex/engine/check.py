"""The integrity check of a SQLite store: SQLite's and FTS5's own checks, and proof that
the full-text and tag indexes, and the per-namespace ranking statistics, hold exactly what a
rebuild from the memories table would."""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mnemex.engine.protocol import Session

from mnemex.embed import SENTENCE_BASE
from mnemex.engine import logger
from mnemex.storage import TOKENIZER, read_transaction

_CHECK_TABLES = ("mnemex_index_v", "mnemex_check_v", "mnemex_check")
_TAG_DRIFT = """SELECT
    (SELECT count(*) FROM (SELECT tag, seq FROM memory_tags
        EXCEPT SELECT j.value, m.seq FROM memories AS m, json_each(m.tags) AS j))
  + (SELECT count(*) FROM (SELECT j.value, m.seq FROM memories AS m, json_each(m.tags) AS j
        EXCEPT SELECT tag, seq FROM memory_tags))"""
# Vectors of no memory, or of another text than the memory's; memories whose windows
# are not numbered without a gap (token windows 0, 1, ..., sentence windows from
# SENTENCE_BASE, ...; a memory's windows are written together).
_VECTOR_DRIFT = f"""SELECT
    (SELECT count(*) FROM embeddings AS e LEFT JOIN memories AS m ON m.seq = e.seq
        WHERE m.content_hash IS NOT e.content_hash),
    (SELECT count(*) FROM (SELECT 1 FROM embeddings GROUP BY model, seq
        HAVING count(*) != coalesce(max(window) FILTER (WHERE window < {SENTENCE_BASE}) + 1, 0)
            + coalesce(max(window) FILTER (WHERE window >= {SENTENCE_BASE})
                - {SENTENCE_BASE} + 1, 0)))"""

# Each namespace's rows and tokens as the memories and the index hold them, beside what the
# triggers keep in ``namespace_stats`` (rows of no namespace left: 0 and 0).
_STATS_TRUTH = """SELECT m.namespace AS n, count(*) AS d, COALESCE(sum(t.tokens), 0) AS t,
        min(m.seq) AS lo, max(m.seq) AS hi
    FROM memories AS m LEFT JOIN memories_fts_tokens AS t ON t.id = m.seq GROUP BY m.namespace"""
_STATS_KEPT = "SELECT namespace, docs, tokens FROM namespace_stats WHERE docs <> 0 OR tokens <> 0"
_STATS_DRIFT = f"""SELECT count(DISTINCT n) FROM (
    SELECT n FROM (SELECT n, d, t FROM ({_STATS_TRUTH}) EXCEPT {_STATS_KEPT})
    UNION ALL
    SELECT namespace FROM ({_STATS_KEPT} EXCEPT SELECT n, d, t FROM ({_STATS_TRUTH})))"""


def stats_drift(conn: sqlite3.Connection) -> int:
    """The namespaces whose kept rows or tokens differ from the memories' (0 unless the
    table was edited by hand or damaged)."""
    return int(conn.execute(_STATS_DRIFT).fetchone()[0])


def recount_stats(conn: sqlite3.Connection) -> None:
    """Count every namespace's rows and tokens anew (in the caller's write transaction),
    each change counter moved on: cached term statistics of the old counts are not read."""
    conn.execute(
        "UPDATE namespace_stats SET docs = 0, tokens = 0, changes = changes + 1 "
        "WHERE namespace NOT IN (SELECT namespace FROM memories)"
    )
    conn.execute(
        f"""INSERT INTO namespace_stats (namespace, docs, tokens, changes, lo, hi)
            SELECT n, d, t, 1, lo, hi FROM ({_STATS_TRUTH}) WHERE true
            ON CONFLICT (namespace) DO UPDATE SET docs = excluded.docs,
                tokens = excluded.tokens, changes = changes + 1,
                lo = excluded.lo, hi = excluded.hi"""
    )


def check(session: Session) -> dict[str, Any]:
    """See :meth:`mnemex.store.Store.check`."""
    problems: list[str] = []
    with session.connection() as conn:
        result = conn.execute("PRAGMA integrity_check").fetchone()[0]
        if result != "ok":
            problems.append(f"sqlite integrity_check: {result}")
        for table in ("memories_fts", "relations_fts"):
            try:
                conn.execute(f"INSERT INTO {table} ({table}) VALUES ('integrity-check')")
            except sqlite3.DatabaseError as exc:
                problems.append(f"fts5 integrity-check of {table}: {exc}")
        try:
            with read_transaction(conn):
                extra, absent, ghost_docs = _index_drift(conn)
                tag_rows = conn.execute(_TAG_DRIFT).fetchone()[0]
                stats = stats_drift(conn)
                rows = conn.execute("SELECT count(*) FROM memories").fetchone()[0]
                file_problems = session.workspaces.drift(conn)
                stale, gaps = conn.execute(_VECTOR_DRIFT).fetchone()
        finally:
            _drop_check_tables(conn)
    index = (
        (extra, "full-text index has {} postings no memory explains"),
        (absent, "full-text index lacks {} postings of stored memories"),
        (ghost_docs, "full-text index has {} ghost rows"),
        (tag_rows, "tag index differs from memories in {} rows"),
        (
            stats,
            "ranking statistics differ from the memories in {} namespaces: run `mnemex reindex`",
        ),
    )
    vectors = (
        (stale, "{} vectors belong to no memory's text: run `mnemex reindex --force`"),
        (gaps, "{} memories lack some of their windows' vectors: run `mnemex reindex --force`"),
    )
    problems += [problem.format(count) for count, problem in index if count]
    problems += file_problems
    problems += [problem.format(count) for count, problem in vectors if count]
    return {"ok": not problems, "memories": rows, "problems": problems}


def index_differs(session: Session) -> bool:
    """Whether the full-text index, or the statistics kept beside it, differ from a
    rebuild (or cannot be read)."""
    with session.connection() as conn:
        try:
            with read_transaction(conn):
                return any(_index_drift(conn)) or stats_drift(conn) > 0
        except sqlite3.DatabaseError as exc:
            logger().warning("full-text index unreadable, rebuilding it: %s", exc)
            return True
        finally:
            _drop_check_tables(conn)


def _index_drift(conn: sqlite3.Connection) -> tuple[int, int, int]:
    """How the full-text index differs from a rebuild from the memories table:
    postings no memory explains, postings it lacks, and rows of no memory.

    Reads every row (a fresh tokenization into a temp table) inside the
    caller's read transaction; the temp tables stay until :func:`_drop_check_tables`.
    """
    _drop_check_tables(conn)
    conn.execute(
        f"CREATE VIRTUAL TABLE temp.mnemex_check USING fts5(content, tags, tokenize='{TOKENIZER}')"
    )
    conn.execute(
        "CREATE VIRTUAL TABLE temp.mnemex_check_v USING fts5vocab(temp, mnemex_check, instance)"
    )
    conn.execute(
        "CREATE VIRTUAL TABLE temp.mnemex_index_v USING fts5vocab(main, memories_fts, instance)"
    )
    conn.execute(
        "INSERT INTO temp.mnemex_check (rowid, content, tags) "
        "SELECT seq, content, tags FROM memories_fts_source"
    )
    postings = "SELECT term, doc, col, offset FROM temp.mnemex_{}_v"
    extra, absent = (
        conn.execute(
            f"SELECT count(*) FROM ({postings.format(a)} EXCEPT {postings.format(b)})"
        ).fetchone()[0]
        for a, b in (("index", "check"), ("check", "index"))
    )
    ghost_docs = conn.execute(
        "SELECT count(*) FROM (SELECT DISTINCT doc FROM temp.mnemex_index_v) "
        "WHERE doc NOT IN (SELECT seq FROM memories)"
    ).fetchone()[0]
    return int(extra), int(absent), int(ghost_docs)


def _drop_check_tables(conn: sqlite3.Connection) -> None:
    for table in _CHECK_TABLES:
        conn.execute(f"DROP TABLE IF EXISTS temp.{table}")
