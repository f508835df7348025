"""What the duplicate checks of :mod:`mnemex.dedup` read and write in PostgreSQL.

The decisions (thresholds, the converse coverage, numbers and negations, what
a merge records) are :mod:`mnemex.engine.duplicates`'; here are the reads: a text's BM25
against the namespace's rows and against itself, its nearest first-window
vectors, term statistics for the coverage, and the writes of a merge and of a
move to the duplicates namespace.

Writers of one namespace that check for duplicates look side by side and write
in turn, as on SQLite: the lookup (a ranked search of the namespace) runs under
the namespace's advisory lock taken shared, so lookups do not wait for each
other; the write takes it exclusive (``pg_advisory_xact_lock``) and compares only
the rows stored since the lookup (rows with a larger seq: a writer that held the
lock before the lookup committed before it, and one that takes it after drew its
seq after the lookup read the largest), then inserts or merges. Two agents
remembering the same fact at once thus compare with each other's row and end
with one memory (an exact repeat also meets the schema's unique index).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from mnemex.config import Settings
from mnemex.engine import logger
from mnemex.engine.duplicates import (
    CANDIDATES,
    NEAR_MAX_CHARS,
    Match,
    NewMemory,
    coverage,
    markers,
    merged,
)
from mnemex.engine.postgres import bm25
from mnemex.engine.postgres.tokens import document_lex, lexeme_counts, lexicon, query_key
from mnemex.engine.postgres.vectors import model_dim, param
from mnemex.errors import EmbeddingError, IndexMismatch, MissingExtra
from mnemex.index.query import Term, Token, idf
from mnemex.index.retrieval import BM25_B, BM25_K1
from mnemex.records import dataclass
from mnemex.text import parse_stored_time, tags_columns

Conn = Any  # psycopg.Connection


def lock_namespace(conn: Conn, namespace: str, *, shared: bool = False) -> None:
    """Take the namespace's duplicate-check lock until the transaction ends: exclusive
    to write, ``shared`` to look up (lookups side by side, none while a write runs)."""
    lock = "pg_advisory_xact_lock_shared" if shared else "pg_advisory_xact_lock"
    conn.execute(f"SELECT {lock}(hashtextextended(%s, 0))".encode(), ("mnemex dedup " + namespace,))


def last_seq(conn: Conn) -> int:
    """The largest seq of the memories stored (0: none)."""
    row = conn.execute("SELECT coalesce(max(seq), 0) FROM memories").fetchone()
    return int(row[0]) if row else 0


@dataclass(frozen=True, slots=True)
class NamespaceLexicon:
    """The tokenizer and a namespace's term statistics, as :func:`mnemex.engine.duplicates.coverage`
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
    known: tuple[bm25.Statistics | None, int] = (None, 0),
) -> tuple[float, list[tuple[int, float]]]:
    """BM25 of a text not stored yet, ``new`` = (content, tags JSON), and (seq, BM25) of
    the namespace's best ``limit`` rows, for the terms; both scored as they would be once
    the text is stored (it counts in the rows, their average length and the document
    frequency of each term it holds), as :func:`mnemex.engine.sqlite.fts.bm25_beside` does. The
    rows are found as a search finds them, shaped by ``budget`` (on the rows stored).
    ``known``: the namespace's statistics read for (at least) the terms (else read
    here), and a seq: only rows after it are scored."""
    keys = [query_key(t) for t in terms]
    stats, after = known
    if stats is None:
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
    where = ("WHERE p.seq > %(f_after)s", {"f_after": after}) if after else ("", {})
    found = bm25.best(conn, counted, weights, namespace, limit, budget, where).candidates
    return own, [(c.seq, c.raw) for c in found]


def nearest(
    conn: Conn, vector: Any, namespace: str, model: str, limit: int, after: int = 0
) -> list[tuple[int, float]]:
    """(seq, cosine) of the ``limit`` memories of the namespace (with a seq above
    ``after``) whose first-window vector of ``model`` is nearest to ``vector`` (exact)."""
    dim = model_dim(conn, model)
    if dim is None or len(vector) != dim:
        return []
    rows = conn.execute(
        f"""SELECT seq, 1 - (vector::vector({dim}) <=> %(q)b::vector({dim})) AS c
            FROM embeddings WHERE model = %(model)s AND namespace = %(ns)s AND window_no = 0
                AND seq > %(after)s
            ORDER BY c DESC, seq LIMIT %(limit)s""".encode(),
        {"q": param(vector), "model": model, "ns": namespace, "limit": limit, "after": after},
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


def same_text(
    conn: Conn, namespace: str, digest: str, before: int | None = None, after: int = 0
) -> Any:
    """(seq, id) of the namespace's memory with this text (older than ``before``, newer
    than ``after``)."""
    return conn.execute(
        "SELECT seq, id FROM memories WHERE namespace = %s AND content_hash = %s "
        "AND kind <> 'chunk' AND NOT file_chunk AND seq < %s AND seq > %s "
        "ORDER BY seq LIMIT 1",
        (namespace, digest, before if before is not None else 2**62, after),
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


# -- the checks, over the reads above ------------------------------------------------


def _close_texts(
    conn: Any,
    new: NewMemory,
    threshold: float,
    stored: int | None = None,
    budget: int = 0,
    after: int = 0,
) -> list[tuple[float, int, str]]:
    """The namespace's rows whose text repeats ``new`` (not stored, or stored as row
    ``stored``): (similarity, seq, "text"), as SQLite decides (the rows
    found as a search shaped by ``budget`` finds them; with ``after``, among the rows
    after that seq, every one scored)."""
    planned = bm25.plan(conn, new.content, new.namespace)  # the lexical arm's plan
    terms = list(planned.terms)
    if not terms:
        return []
    if stored is None:
        known = (planned.stats, after)
        own, found = beside(
            conn, terms, new.namespace, new.indexed, CANDIDATES, 0 if after else budget, known
        )
    else:
        own = dict(scores(conn, terms, new.namespace, 1, [stored])).get(stored, 0.0)
        found = scores(conn, terms, new.namespace, CANDIDATES + 1, budget=budget)
    if own <= 0:
        return []
    close = [(seq, min(1.0, raw / own)) for seq, raw in found if seq != stored]
    close = [(seq, ratio) for seq, ratio in close if ratio > threshold]
    if not close:
        return []
    lexicon, others = (
        NamespaceLexicon(conn, new.namespace),
        texts(conn, [c[0] for c in close]),
    )
    out = []
    for other, ratio in close:
        text = others[other][1] if other in others else ""
        back = coverage(lexicon, text, new.content, by_stored=stored is not None)
        if min(ratio, back) > threshold:
            out.append((min(ratio, back), other, "text"))
    return out


def _best(conn: Any, content: str, found: list[tuple[float, int, str]]) -> Match | None:
    """The closest of ``found`` that is no file chunk and has the same
    numbers and negations."""
    rows = texts(conn, [f[1] for f in found]) if found else {}
    mine = markers(content)
    for similarity, other, by in sorted(found, key=lambda f: (-f[0], f[1])):
        ident, text, kind = rows.get(other, ("", "", "chunk"))
        if kind != "chunk" and markers(text) == mine:
            return Match(other, ident, similarity, by)
    return None


def _lookup(
    conn: Any,
    new: NewMemory,
    settings: Settings,
    vector: Any,
    model: str | None,
    after: int = 0,
) -> Match | None:
    """The memory ``new`` repeats in its namespace, if any, among the rows after seq
    ``after`` (0: every row)."""
    same = same_text(conn, new.namespace, new.content_hash, after=after)
    if same is not None:
        return Match(int(same[0]), same[1], 1.0, "exact")
    if len(new.content) > NEAR_MAX_CHARS:
        return None
    close = _close_texts(
        conn, new, settings.dedup_text, budget=settings.lexical_budget, after=after
    )
    if vector is not None and model is not None:
        for seq, cosine in nearest(conn, vector, new.namespace, model, CANDIDATES + 1, after):
            if cosine > settings.dedup_cosine:
                close.append((cosine, seq, "cosine"))
    return _best(conn, new.content, close)


def _new_vector(session: Any, text: str, digest: str) -> Any:
    """The new text's first-window vector (a stored one for the same text, else embedded),
    or ``None`` without an embedder or when it fails (the write reports that)."""
    embedder = session.embedder
    if embedder is None:
        return None
    from mnemex.embed import embed_checked

    try:
        with session.connection() as conn:
            known = vector_of_text(conn, embedder.model_id, digest)
        if known is not None and known.shape[0] == embedder.dim:
            return known
        return embed_checked(embedder, [session.embedding.first(text)])[0]
    except (EmbeddingError, MissingExtra, IndexMismatch) as exc:
        logger().debug("duplicate check without vectors: %s", exc)
        return None


def remember_row(session: Any, row: tuple[Any, ...], embed: bool) -> tuple[Match | None, int, None]:
    """The row stored unless it repeats a memory of its namespace: looked up beside other
    writers' lookups (the namespace's lock shared), then, under the lock, the rows stored
    since compared and the row written (see the module's docstring). The memory it was
    merged into (or ``None`` and the new row's seq); no vector (the new memory is embedded
    afresh)."""
    from mnemex.errors import DuplicateId

    text, namespace = row[3], row[1]
    vector = _new_vector(session, text, row[10]) if embed else None
    model = session.embedder.model_id if vector is not None and session.embedder else None
    indexed = (text, tags_columns(tuple(json.loads(row[4])))[0])
    new = NewMemory(namespace, text, row[10], indexed)
    with session.transaction() as conn:
        lock_namespace(conn, namespace, shared=True)
        seen = last_seq(conn)
        found = _lookup(conn, new, session.settings, vector, model)
    with session.transaction() as conn:
        lock_namespace(conn, namespace)
        match = found
        if match is not None and not present(conn, match.seq, namespace):
            match, seen = None, 0  # forgotten or moved since: compare with every row
        if match is None:
            match = _lookup(conn, new, session.settings, vector, model, seen)
        if match is None:
            written = session.insert_one(conn, row)
            if not written.inserted:
                if written.id == row[0]:
                    raise DuplicateId(f"a memory with id {row[0]!r} already exists")
                match = Match(written.seq, written.id, 1.0, "exact")
        if match is not None:
            _merge(conn, match, (None, text, *row[4:9]), session.settings.max_content_bytes)
    return match, 0 if match is not None else written.seq, None


def _merge(conn: Any, keep: Match, duplicate: Sequence[Any], max_bytes: int) -> None:
    """Fold a duplicate into the memory it repeats (see :func:`mnemex.engine.duplicates.merged`)."""
    old = for_merge(conn, keep.seq)
    apply_merge(conn, keep.seq, merged(old, keep, duplicate, max_bytes))


def _older_copy(
    conn: Any, settings: Settings, namespace: str, row: tuple[Any, ...], model: str | None
) -> Match | None:
    """The older memory that row ``(seq, id, content, content_hash)`` repeats, if it is
    still in the namespace and repeats one (as on SQLite)."""
    seq, _, content, digest = row
    if not present(conn, seq, namespace):
        return None
    same = same_text(conn, namespace, digest, seq)
    if same is not None:
        return Match(int(same[0]), same[1], 1.0, "exact")
    new = NewMemory(namespace, content, digest, (content, ""))
    found = [
        f
        for f in _close_texts(conn, new, settings.dedup_text, seq, settings.lexical_budget)
        if f[1] < seq
    ]
    vector = None if model is None else stored_vector(conn, model, seq)
    if vector is not None and model is not None:
        for other, cosine in nearest(conn, vector, namespace, model, CANDIDATES + 1):
            if other < seq and cosine > settings.dedup_cosine:
                found.append((cosine, other, "cosine"))
    return _best(conn, content, found)


def dedup_pass(
    session: Any, namespace: str, moved_to: str, dry_run: bool
) -> tuple[list[tuple[Any, ...]], Callable[[Any, tuple[Any, ...]], Match | None]]:
    """The rows ``(seq, id, content, content_hash)`` of a dedup pass over the namespace and
    its step: a row checked against the older ones (and, unless ``dry_run``, merged into
    the one it repeats and moved to ``moved_to``) under the namespace's lock, in the
    caller's transaction."""
    settings = session.settings
    model = session.embedder.model_id if session.embedder is not None else None
    with session.connection() as conn:
        rows = namespace_rows(conn, namespace)

    def step(conn: Any, row: tuple[Any, ...]) -> Match | None:
        lock_namespace(conn, namespace)
        pair = _older_copy(conn, settings, namespace, row, model)
        if pair is not None and not dry_run:
            stored = stored_row(conn, row[0])
            _merge(conn, pair, (row[1], row[2], *stored), settings.max_content_bytes)
            move(conn, row[0], moved_to, pair.id)
        return pair

    return rows, step
