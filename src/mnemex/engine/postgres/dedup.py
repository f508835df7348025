"""What the duplicate checks of :mod:`mnemex.dedup` read and write in PostgreSQL.

The decisions (thresholds, the converse coverage, numbers and negations, what
a merge records) are the shared code's; here are the reads: a text's BM25
against the namespace's rows and against itself, its nearest first-window
vectors, term statistics for the coverage, and the writes of a merge and of a
move to the duplicates namespace.

Writers of one namespace that check for duplicates take turns: each check and
its write run in one transaction under ``pg_advisory_xact_lock`` for the
namespace, so two agents remembering the same fact at once compare with each
other's row and end with one memory (an exact repeat also meets the schema's
unique index).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mnemex.engine.postgres import bm25
from mnemex.engine.postgres.tokens import document_lex, lexeme_counts, lexicon, query_key
from mnemex.engine.postgres.vectors import model_dim, param
from mnemex.index.query import Term, Token, idf
from mnemex.index.retrieval import BM25_B, BM25_K1
from mnemex.text import parse_stored_time, tags_columns

Conn = Any  # psycopg.Connection


def lock_namespace(conn: Conn, namespace: str) -> None:
    """Take the namespace's duplicate-check lock until the transaction ends."""
    conn.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", ("mnemex dedup " + namespace,)
    )


@dataclass(frozen=True, slots=True)
class NamespaceLexicon:
    """The tokenizer and a namespace's term statistics, as :func:`mnemex.dedup.coverage`
    reads them (a :class:`~mnemex.engine.sqlite.fts.Lexicon`'s ``tokenize``, ``doc_freqs``,
    ``n_docs``)."""

    conn: Conn
    namespace: str

    def tokenize(self, text: str) -> list[Token]:
        return lexicon().tokenize(text)

    def doc_freqs(self, terms: Sequence[Term]) -> list[int]:
        keys = [query_key(t) for t in terms]
        found = bm25.statistics(self.conn, self.namespace, keys).doc_freqs
        return [found.get(k, 0) for k in keys]

    def n_docs(self) -> int:
        return bm25.statistics(self.conn, self.namespace).docs


def query_terms(conn: Conn, text: str, namespace: str) -> list[Term]:
    """A text's terms as a query of the namespace (the lexical arm's plan)."""
    return list(bm25.plan(conn, text, namespace).terms)


def scores(
    conn: Conn,
    terms: Sequence[Term],
    namespace: str,
    limit: int,
    seqs: Sequence[int] = (),
    budget: int = 0,
) -> list[tuple[int, float]]:
    """(seq, BM25) of the namespace's best ``limit`` rows for the terms (only ``seqs``,
    when given), shaped by ``budget`` as a search is."""
    if seqs:
        found = bm25.scores_of(conn, terms, namespace, seqs)
        found.sort(key=lambda c: (-c.raw, c.seq))
        return [(c.seq, c.raw) for c in found[:limit]]
    return [(c.seq, c.raw) for c in bm25.retrieve(conn, terms, namespace, limit, budget).candidates]


def beside(
    conn: Conn,
    terms: Sequence[Term],
    namespace: str,
    new: tuple[str, str],
    limit: int,
    budget: int = 0,
) -> tuple[float, list[tuple[int, float]]]:
    """BM25 of a text not stored yet, ``new`` = (content, tags JSON), and (seq, BM25) of
    the namespace's best ``limit`` rows, for the terms; both scored as they would be once
    the text is stored (it counts in the rows, their average length and the document
    frequency of each term it holds), as :func:`mnemex.engine.sqlite.fts.bm25_beside` does. The
    rows are found as a search finds them, shaped by ``budget`` (on the rows stored)."""
    keys = [query_key(t) for t in terms]
    stats = bm25.statistics(conn, namespace, keys)
    lex, length = document_lex([new])[0]
    freqs = lexeme_counts(lex)
    counted = bm25.Statistics(stats.docs + 1, stats.tokens + length, stats.doc_freqs)
    weights: dict[str, float] = {}
    for term, key in zip(terms, keys, strict=True):
        df = stats.doc_freqs.get(key, 0) + (1 if key in freqs else 0)
        if df:
            weights[key] = weights.get(key, 0.0) + term.count * idf(df, counted.docs)
    if not weights:
        return 0.0, []
    norm = BM25_K1 * (1 - BM25_B + BM25_B * length / counted.avgdl)
    own = sum(
        w * freqs[k] * (BM25_K1 + 1) / (freqs[k] + norm) for k, w in weights.items() if k in freqs
    )
    found = bm25.best(conn, counted, weights, namespace, limit, budget).candidates
    return own, [(c.seq, c.raw) for c in found]


def nearest(
    conn: Conn, vector: Any, namespace: str, model: str, limit: int
) -> list[tuple[int, float]]:
    """(seq, cosine) of the ``limit`` memories of the namespace whose first-window vector
    of ``model`` is nearest to ``vector`` (exact)."""
    dim = model_dim(conn, model)
    if dim is None or len(vector) != dim:
        return []
    rows = conn.execute(
        f"""SELECT seq, 1 - (vector::vector({dim}) <=> %(q)b::vector({dim})) AS c
            FROM embeddings WHERE model = %(model)s AND namespace = %(ns)s AND window_no = 0
            ORDER BY c DESC, seq LIMIT %(limit)s""".encode(),
        {"q": param(vector), "model": model, "ns": namespace, "limit": limit},
    ).fetchall()
    return [(int(seq), float(c)) for seq, c in rows]


def stored_vector(conn: Conn, model: str, seq: int) -> Any:
    """A memory's first-window vector of ``model`` (a numpy array), or ``None``."""
    import numpy as np

    row = conn.execute(
        "SELECT vector::text FROM embeddings WHERE model = %s AND seq = %s AND window_no = 0",
        (model, seq),
    ).fetchone()
    return None if row is None else np.asarray(json.loads(row[0]), dtype=np.float32)


def vector_of_text(conn: Conn, model: str, digest: str) -> Any:
    """The first-window vector of ``model`` already stored for a text (by its hash)."""
    import numpy as np

    row = conn.execute(
        "SELECT vector::text FROM embeddings "
        "WHERE model = %s AND content_hash = %s AND window_no = 0 LIMIT 1",
        (model, digest),
    ).fetchone()
    return None if row is None else np.asarray(json.loads(row[0]), dtype=np.float32)


def same_text(conn: Conn, namespace: str, digest: str, before: int | None = None) -> Any:
    """(seq, id) of the namespace's memory with this text (older than ``before``)."""
    return conn.execute(
        "SELECT seq, id FROM memories WHERE namespace = %s AND content_hash = %s "
        "AND kind <> 'chunk' AND NOT file_chunk AND seq < %s ORDER BY seq LIMIT 1",
        (namespace, digest, before if before is not None else 2**62),
    ).fetchone()


def texts(conn: Conn, seqs: Sequence[int]) -> dict[int, tuple[str, str, str]]:
    """(id, content, kind) of each memory; the kind of a chunk of a workspace file is
    ``chunk`` whatever its heading says (never a merge target)."""
    rows = conn.execute(
        "SELECT seq, id, content, CASE WHEN file_chunk THEN 'chunk' ELSE kind END "
        "FROM memories WHERE seq = ANY(%s)",
        (list(seqs),),
    ).fetchall()
    return {int(r[0]): (r[1], r[2], r[3]) for r in rows}


def namespace_rows(conn: Conn, namespace: str) -> list[tuple[int, str, str, str]]:
    """(seq, id, content, content_hash) of the namespace's memories (no file chunks),
    oldest first."""
    rows = conn.execute(
        "SELECT seq, id, content, content_hash FROM memories WHERE namespace = %s "
        "AND kind <> 'chunk' AND NOT file_chunk ORDER BY seq",
        (namespace,),
    ).fetchall()
    return [(int(r[0]), r[1], r[2], r[3]) for r in rows]


def present(conn: Conn, seq: int, namespace: str) -> bool:
    row = conn.execute(
        "SELECT 1 FROM memories WHERE seq = %s AND namespace = %s", (seq, namespace)
    ).fetchone()
    return row is not None


def for_merge(conn: Conn, seq: int) -> tuple[str, str, float, bool, str]:
    """(content, tags JSON, confidence, pinned, metadata JSON) of a memory, locked."""
    row = conn.execute(
        "SELECT content, tags::text, confidence, pinned, metadata::text FROM memories "
        "WHERE seq = %s FOR UPDATE",
        (seq,),
    ).fetchone()
    return row[0], row[1], float(row[2]), bool(row[3]), row[4]


def stored_row(conn: Conn, seq: int) -> tuple[str, str | None, float, bool, str]:
    """(tags JSON, source, confidence, pinned, created_at as text) of a memory."""
    from mnemex.text import format_time

    row = conn.execute(
        "SELECT tags::text, source, confidence, pinned, created_at FROM memories WHERE seq = %s",
        (seq,),
    ).fetchone()
    return row[0], row[1], float(row[2]), bool(row[3]), format_time(row[4])


def apply_merge(
    conn: Conn,
    seq: int,
    merged: tuple[str, float, bool, str, str],
) -> None:
    """Write a merge's (tags JSON, confidence, pinned, metadata JSON, updated_at) into
    memory ``seq``, its index terms again when its tags changed."""
    tags, confidence, pinned, metadata, updated = merged
    row = conn.execute(
        """UPDATE memories AS m SET tags = %s::jsonb, confidence = %s, pinned = %s,
               metadata = %s::jsonb, updated_at = %s
           FROM (SELECT seq, tags FROM memories WHERE seq = %s) AS old
           WHERE m.seq = old.seq RETURNING m.content, old.tags::text <> m.tags::text""",
        (tags, confidence, pinned, metadata, parse_stored_time(updated), seq),
    ).fetchone()
    if row is not None and row[1]:
        lex, length = document_lex([(row[0], tags_columns(tuple(json.loads(tags)))[0])])[0]
        conn.execute(
            "UPDATE memories SET lex = %s::tsvector, lex_len = %s WHERE seq = %s",
            (lex, length, seq),
        )


def move(conn: Conn, seq: int, namespace: str, duplicate_of: str) -> None:
    """Move memory ``seq`` unchanged to ``namespace``, noting ``duplicate_of`` in its
    metadata. When that namespace holds the same text already (moved there by an earlier
    pass), the copy there stands for it and the row goes."""
    from psycopg import errors

    try:
        with conn.transaction():
            conn.execute(
                "UPDATE memories SET namespace = %s, "
                "metadata = jsonb_set(metadata, '{duplicate_of}', to_jsonb(%s::text)) "
                "WHERE seq = %s",
                (namespace, duplicate_of, seq),
            )
    except errors.UniqueViolation:
        conn.execute("DELETE FROM memories WHERE seq = %s", (seq,))
