"""The duplicate checks of :mod:`mnemex.dedup` in SQLite (PostgreSQL's are
:mod:`mnemex.engine.postgres.dedup`).

A new memory is compared before it is stored, outside the write lock
(:func:`lookup`): it is scored beside the existing rows as if it were already in
the index. Under the lock, :func:`recheck` compares it only with the rows written
since the lookup, so that two processes remembering the same fact at once still end
with one memory. The decisions are :mod:`mnemex.engine.duplicates`'; the statements
(rows by seq, hash and namespace, a text's own BM25, the writes of a merge and of a
move to the duplicates namespace) each run on the caller's connection, inside its
transaction."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from mnemex.config import Settings
from mnemex.engine import logger
from mnemex.engine.duplicates import (
    CANDIDATES,
    NEAR_MAX_CHARS,
    RECHECK_ROWS,
    RECHECK_TERMS,
    Match,
    NewMemory,
    coverage,
    markers,
    merged,
)
from mnemex.engine.sqlite.fts import Lexicon, bm25_beside, retrieve
from mnemex.errors import EmbeddingError, IndexMismatch, MissingExtra
from mnemex.index.retrieval import Filters, LexicalPlan, plan
from mnemex.index.stopwords import STOPWORDS
from mnemex.records import dataclass
from mnemex.rows import ROW_COLUMNS
from mnemex.storage import marks, read_transaction
from mnemex.storage.blobs import floats, is_vector
from mnemex.storage.connect import Connect
from mnemex.text import tags_columns

if TYPE_CHECKING:
    import numpy as np

    from mnemex.embed import Embedder
    from mnemex.engine.sqlite.surface import SqliteSurface
    from mnemex.engine.sqlite.vectors import VectorIndex

_BM25: Final = "bm25(memories_fts, 1.0, 1.0)"


def own_score(conn: sqlite3.Connection, match: str, seq: int) -> Any:
    """Row ``seq``'s BM25 for the FTS5 query ``match`` (a row of one value, or ``None``)."""
    sql = f"SELECT -{_BM25} FROM memories_fts WHERE memories_fts MATCH ? AND rowid = ?"
    return conn.execute(sql, (match, seq)).fetchone()


def last_seq(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT coalesce(max(seq), 0) FROM memories").fetchone()[0])


def written_since(
    conn: sqlite3.Connection, match: str, seen: int, namespace: str, limit: int
) -> list[int]:
    """The namespace's rows after ``seen`` that match ``match``, oldest first."""
    sql = (
        "SELECT m.seq FROM memories_fts CROSS JOIN memories AS m "
        "ON m.seq = memories_fts.rowid WHERE memories_fts MATCH ? "
        "AND memories_fts.rowid > ? AND m.namespace = ? ORDER BY m.seq LIMIT ?"
    )
    return [r[0] for r in conn.execute(sql, (match, seen, namespace, limit))]


def still_there(conn: sqlite3.Connection, seq: int, ident: str, namespace: str) -> bool:
    sql = "SELECT 1 FROM memories WHERE seq = ? AND id = ? AND namespace = ?"
    return conn.execute(sql, (seq, ident, namespace)).fetchone() is not None


def same_text_after(conn: sqlite3.Connection, namespace: str, digest: str, after: int) -> Any:
    """(seq, id) of the namespace's first memory after ``after`` with this text, no file
    chunk, or ``None``."""
    return conn.execute(
        "SELECT seq, id FROM memories WHERE namespace = ? AND content_hash = ? AND seq > ? "
        "AND seq NOT IN (SELECT seq FROM chunks) ORDER BY seq LIMIT 1",
        (namespace, digest, after),
    ).fetchone()


def same_text_before(conn: sqlite3.Connection, namespace: str, digest: str, before: int) -> Any:
    """(seq, id) of the namespace's first memory before ``before`` with this text, no
    file chunk, or ``None``."""
    return conn.execute(
        "SELECT seq, id FROM memories WHERE namespace = ? AND content_hash = ? AND seq < ? "
        "AND seq NOT IN (SELECT seq FROM chunks) ORDER BY seq LIMIT 1",
        (namespace, digest, before),
    ).fetchone()


def no_longer(conn: sqlite3.Connection, seqs: Sequence[int], most: int) -> list[int]:
    """Those of ``seqs`` whose text is at most ``most`` characters."""
    sql = f"SELECT seq FROM memories WHERE seq IN ({marks(len(seqs))}) AND length(content) <= ?"
    return [r[0] for r in conn.execute(sql, [*seqs, most])]


def contents(conn: sqlite3.Connection, seqs: Sequence[int]) -> dict[int, str]:
    sql = f"SELECT seq, content FROM memories WHERE seq IN ({marks(len(seqs))})"
    return dict(conn.execute(sql, list(seqs)).fetchall())


def texts(conn: sqlite3.Connection, seqs: Sequence[int]) -> dict[int, tuple[str, str]]:
    """(id, content) of each memory."""
    sql = f"SELECT seq, id, content FROM memories WHERE seq IN ({marks(len(seqs))})"
    return {seq: (ident, text) for seq, ident, text in conn.execute(sql, list(seqs))}


def file_chunks(conn: sqlite3.Connection, seqs: list[int]) -> set[int]:
    """Which of these memories are chunks of workspace files."""
    if not seqs:
        return set()
    sql = f"SELECT seq FROM chunks WHERE seq IN ({marks(len(seqs))})"
    return {r[0] for r in conn.execute(sql, seqs)}


def for_merge(conn: sqlite3.Connection, seq: int) -> Any:
    """(content, tags JSON, confidence, pinned, metadata JSON) of a memory."""
    sql = "SELECT content, tags, confidence, pinned, metadata FROM memories WHERE seq = ?"
    return conn.execute(sql, (seq,)).fetchone()


def apply_merge(conn: sqlite3.Connection, seq: int, values: Sequence[Any]) -> None:
    """Write a merge's (tags, fts_tags, confidence, pinned, metadata, updated_at)."""
    conn.execute(
        "UPDATE memories SET tags = ?, fts_tags = ?, confidence = ?, pinned = ?, metadata = ?, "
        "updated_at = ? WHERE seq = ?",
        (*values, seq),
    )


def vector_of_text(conn: sqlite3.Connection, model: str, digest: str, dim: int) -> Any:
    """The stored first-window vector (bytes, in a row) of ``model`` for a text, or ``None``."""
    where = "model = ? AND content_hash = ? AND dim = ? AND window = 0 LIMIT 1"
    sql = f"SELECT vector FROM embeddings WHERE {where}"
    return conn.execute(sql, (model, digest, dim)).fetchone()


# A text longer than this is bound as a copy of itself: sqlite3 keeps the UTF-8 form it
# makes of a bound text in the text object, which lives on with the row (3 bytes a CJK
# character, 5 more for its segmented form): 21 MB of a 5 MB memory, held while it embeds.
COPIED_CHARS = 1 << 16


def insert(conn: sqlite3.Connection, row: Sequence[Any]) -> int:
    """Insert a row of :func:`mnemex.rows.prepare`; its seq."""
    insert = f"INSERT INTO memories ({ROW_COLUMNS}) VALUES ({marks(len(row))})"
    cursor = conn.execute(insert, [_copied(value) for value in row])
    assert cursor.lastrowid is not None
    return cursor.lastrowid


def _copied(value: Any) -> Any:
    """A long text as a new object of the same characters (see ``COPIED_CHARS``)."""
    if isinstance(value, str) and len(value) > COPIED_CHARS:
        return value[:1] + value[1:]
    return value


def namespace_rows(conn: sqlite3.Connection, namespace: str) -> list[Any]:
    """(seq, id, content, content_hash) of the namespace's memories (no file chunks),
    oldest first."""
    return conn.execute(
        "SELECT seq, id, content, content_hash FROM memories WHERE namespace = ? "
        "AND seq NOT IN (SELECT seq FROM chunks) ORDER BY seq",
        (namespace,),
    ).fetchall()


def present(conn: sqlite3.Connection, seq: int, namespace: str) -> bool:
    present = "SELECT 1 FROM memories WHERE seq = ? AND namespace = ?"
    return conn.execute(present, (seq, namespace)).fetchone() is not None


def stored_row(conn: sqlite3.Connection, seq: int) -> Any:
    """(tags JSON, source, confidence, pinned, created_at) of a memory."""
    return conn.execute(
        "SELECT tags, source, confidence, pinned, created_at FROM memories WHERE seq = ?", (seq,)
    ).fetchone()


def move(conn: sqlite3.Connection, seq: int, namespace: str, duplicate_of: str) -> None:
    """Move memory ``seq`` unchanged to ``namespace``, noting ``duplicate_of`` in its
    metadata."""
    conn.execute(
        "UPDATE memories SET namespace = ?, "
        "metadata = json_set(metadata, '$.duplicate_of', ?) WHERE seq = ?",
        (namespace, duplicate_of, seq),
    )
    # the vector index keys rows by namespace: have it re-read this one
    conn.execute("INSERT INTO vector_log (op, embedding_id, seq) VALUES ('touch', NULL, ?)", (seq,))


# -- the checks, over the statements above ---------------------------------------------


def text_overlap(
    conn: sqlite3.Connection,
    lexicon: Lexicon,
    seq: int,
    content: str,
    filters: Filters,
    budget: int,
) -> list[tuple[int, float]]:
    """Other rows' BM25 for ``content`` as a query, over row ``seq``'s own (capped at 1)."""
    lexical = plan(lexicon, content, STOPWORDS)
    if lexical.empty:
        return []
    row = own_score(conn, lexical.match, seq)
    own = row[0] if row else 0.0
    if not own or own <= 0:
        return []
    found = retrieve(conn, lexical, filters, CANDIDATES + 1, budget).candidates
    return [(c.seq, min(1.0, c.raw / own)) for c in found if c.seq != seq]


@dataclass(frozen=True, slots=True)
class Lookup:
    """What :func:`lookup` found, and the last row it saw."""

    match: Match | None
    seen: int


def lookup(
    conn: sqlite3.Connection,
    lexicon: Lexicon,
    new: NewMemory,
    settings: Settings,
    vector: np.ndarray | None = None,
    index: VectorIndex | None = None,
) -> Lookup:
    """The memory ``new`` repeats, if any, among the rows stored now (thresholds as the
    settings say).

    Call it inside one read transaction, without the write lock; then
    :func:`recheck` the rows after ``seen`` under the lock.
    """
    seen = last_seq(conn)
    exact = _same_text(conn, new, 0)
    if exact is not None or len(new.content) > NEAR_MAX_CHARS:
        return Lookup(exact, seen)
    lexical = plan(lexicon, new.content, STOPWORDS)
    seqs: list[int] = []
    if not lexical.empty:
        filters, budget = Filters(namespace=new.namespace), settings.lexical_budget
        seqs = [c.seq for c in retrieve(conn, lexical, filters, CANDIDATES, budget).candidates]
    close = _close_texts(conn, lexicon, new, seqs, settings.dedup_text, lexical)
    if vector is not None and index is not None:
        mask = index.mask_for(Filters(namespace=new.namespace), first_windows=True)
        for hit in index.top(vector, mask, CANDIDATES + 1):
            if hit.cosine > settings.dedup_cosine:
                close.append((hit.cosine, hit.seq, "cosine"))
    return Lookup(_best(conn, new.content, close), seen)


def recheck(
    conn: sqlite3.Connection,
    lexicon: Lexicon,
    new: NewMemory,
    seen: int,
    *,
    text_threshold: float,
) -> Match | None:
    """The memory ``new`` repeats among the rows written after ``seen``, if any.

    Meant for inside the write transaction, so it does no ranked search: the
    same text is found by its hash; a near duplicate among the rows that hold
    the new text's ``RECHECK_TERMS`` rarest terms (a row that repeats a text
    holds its rare words), at most ``RECHECK_ROWS`` of them, each scored
    alone. A near duplicate written at the same moment with other rare words
    is left for :meth:`mnemex.Store.dedup`.
    """
    exact = _same_text(conn, new, seen)
    if exact is not None or len(new.content) > NEAR_MAX_CHARS:
        return exact
    lexical = plan(lexicon, new.content, STOPWORDS)
    rarest = sorted((df, i) for i, df in enumerate(lexical.doc_freqs) if df)[:RECHECK_TERMS]
    if not rarest:
        return None
    match = " AND ".join(lexical.terms[i].match for _, i in rarest)
    seqs = written_since(conn, match, seen, new.namespace, RECHECK_ROWS)
    return _best(conn, new.content, _close_texts(conn, lexicon, new, seqs, text_threshold, lexical))


def _same_text(conn: sqlite3.Connection, new: NewMemory, after: int) -> Match | None:
    row = same_text_after(conn, new.namespace, new.content_hash, after)
    return Match(row[0], row[1], 1.0, "exact") if row else None


def _close_texts(
    conn: sqlite3.Connection,
    lexicon: Lexicon,
    new: NewMemory,
    seqs: list[int],
    text_threshold: float,
    lexical: LexicalPlan,
) -> list[tuple[float, int, str]]:
    """Rows among ``seqs`` whose text repeats the new one's: (similarity, seq, "text").
    Rows longer than ``NEAR_MAX_CHARS`` are not read (they repeat only the same text)."""
    if seqs:
        seqs = no_longer(conn, seqs, NEAR_MAX_CHARS)
    if not seqs or lexical.empty:
        return []
    own, scores = bm25_beside(conn, lexicon, lexical, seqs, *new.indexed)
    if own <= 0:
        return []
    close = [(seq, min(1.0, raw / own)) for seq, raw in scores.items()]
    close = [(seq, ratio) for seq, ratio in close if ratio > text_threshold]
    return _covered(conn, lexicon, new.content, close, text_threshold, by_stored=False)


def _covered(
    conn: sqlite3.Connection,
    lexicon: Lexicon,
    content: str,
    close: list[tuple[int, float]],
    text_threshold: float,
    *,
    by_stored: bool,
) -> list[tuple[float, int, str]]:
    """Rows ``(seq, BM25 ratio)`` that also hold enough of ``content``'s terms
    (see :func:`coverage`): (similarity, seq, "text")."""
    if not close:
        return []
    others = contents(conn, [c[0] for c in close])
    found = []
    for other, ratio in close:
        back = coverage(lexicon, others.get(other, ""), content, by_stored=by_stored)
        if min(ratio, back) > text_threshold:
            found.append((min(ratio, back), other, "text"))
    return found


def _best(
    conn: sqlite3.Connection, content: str, found: list[tuple[float, int, str]]
) -> Match | None:
    """The closest of ``found`` that is no workspace chunk and has the same numbers
    and negations."""
    chunks = file_chunks(conn, [f[1] for f in found])
    found = [f for f in found if f[1] not in chunks]
    if not found:
        return None
    rows = texts(conn, [f[1] for f in found])
    mine = markers(content)
    for similarity, other, by in sorted(found, key=lambda f: (-f[0], f[1])):
        if other in rows and markers(rows[other][1]) == mine:
            return Match(other, rows[other][0], similarity, by)
    return None


def merge(conn: sqlite3.Connection, keep: Match, duplicate: Sequence[Any], max_bytes: int) -> None:
    """Fold a duplicate into the memory it repeats (within the caller's transaction).

    ``duplicate`` is ``(id, content, tags, source, confidence, pinned, created_at)``
    as stored (tags as JSON; the id is ``None`` for a memory never stored).
    """
    old = for_merge(conn, keep.seq)
    tags_json, confidence, pinned, text, updated = merged(old, keep, duplicate, max_bytes)
    fts_tags = tags_columns(tuple(json.loads(tags_json)))[1]
    values = (tags_json, fts_tags, confidence, int(pinned), text, updated)
    apply_merge(conn, keep.seq, values)


@dataclass(frozen=True, slots=True)
class Vectors:
    """The store's vectors as the duplicate check reads them."""

    embedder: Embedder | None
    check_dimension: Callable[[Embedder], None]  # raises IndexMismatch on other dimensions
    index: Callable[[int], VectorIndex]  # the in-process index of vectors of a dimension
    first_window: Callable[[str], str] = str  # the part of a text its first vector embeds

    @classmethod
    def of(cls, session: Any) -> Vectors:
        """The vectors of a SQLite session (its embedding lifecycle checks dimensions)."""
        embedding = session.embedding
        return cls(session.embedder, embedding.check_dimension, session.vectors, embedding.first)


def new_vector(
    vectors: Vectors, connection: Connect, text: str, digest: str
) -> tuple[np.ndarray | None, VectorIndex | None]:
    """A new text's vector (its first window's: a memory is compared as a whole) and the
    index to compare it with (``None`` without vectors).

    A text already embedded (in any namespace) is not embedded again.
    """
    embedder = vectors.embedder
    if embedder is None:
        return None, None
    from mnemex.embed import embed_checked

    try:
        with connection() as conn:
            vectors.check_dimension(embedder)
            known = vector_of_text(conn, embedder.model_id, digest, embedder.dim)
        if known is not None and is_vector(known[0], embedder.dim):
            vector = floats([known[0]], embedder.dim)[0]
        else:
            vector = embed_checked(embedder, [vectors.first_window(text)])[0]
        return vector, vectors.index(int(vector.shape[0]))
    except (EmbeddingError, MissingExtra, IndexMismatch) as exc:
        # The write that follows reports the embedder's failure; it is not said twice.
        logger().debug("duplicate check without vectors: %s", exc)
        return None, None


def remember(
    connection: Connect,
    transaction: Connect,
    lexicon: Lexicon,
    settings: Settings,
    row: tuple[Any, ...],
    vectors: Vectors | None = None,
) -> tuple[Match | None, int, np.ndarray | None]:
    """Store a row of :func:`mnemex.rows.prepare` unless it repeats a memory of its namespace.

    Returns the memory it was merged into (or ``None`` and the new row's seq),
    and the row's vector when ``vectors`` gave one. The lookup runs before the
    write lock is taken, against a snapshot; under the lock only the rows
    written since are compared.
    """
    text = row[3]
    vector, index = (
        (None, None) if vectors is None else new_vector(vectors, connection, text, row[10])
    )
    indexed = (text if row[12] is None else row[12], row[4] if row[13] is None else row[13])
    new = NewMemory(row[1], text, row[10], indexed)
    with connection() as conn, read_transaction(conn):
        found = lookup(conn, lexicon, new, settings, vector, index)
    with transaction() as conn:
        match, seen = found.match, found.seen
        if match is not None and not still_there(conn, match.seq, match.id, new.namespace):
            match, seen = None, 0  # forgotten or moved since: compare with every row
        if match is None:
            match = recheck(conn, lexicon, new, seen, text_threshold=settings.dedup_text)
        if match is None:
            return None, insert(conn, row), vector
        merge(conn, match, (None, text, *row[4:9]), settings.max_content_bytes)
    return match, 0, vector


def _stored_index(vectors: Vectors, connection: Connect) -> VectorIndex | None:
    """The index of the stored vectors, or ``None`` without an embedder or when the
    stored vectors' dimension is not the embedder's (said in a warning)."""
    embedder = vectors.embedder
    if embedder is None:
        return None
    try:
        with connection():
            vectors.check_dimension(embedder)
        return vectors.index(embedder.dim)
    except IndexMismatch as exc:
        logger().warning("dedup without vectors: %s", exc)
        return None


def _older_copy(
    conn: sqlite3.Connection,
    lexicon: Lexicon,
    settings: Settings,
    namespace: str,
    row: tuple[Any, ...],
    index: VectorIndex | None,
) -> Match | None:
    """The older memory that row ``(seq, id, content, content_hash)`` repeats, if it is
    still in the namespace and repeats one."""
    seq, _, content, digest = row
    if not present(conn, seq, namespace):
        return None
    same = same_text_before(conn, namespace, digest, seq)
    if same:
        return Match(same[0], same[1], 1.0, "exact")
    threshold, filters = settings.dedup_text, Filters(namespace=namespace)
    overlap = text_overlap(conn, lexicon, seq, content, filters, settings.lexical_budget)
    close = [(other, ratio) for other, ratio in overlap if ratio > threshold and other < seq]
    found = _covered(conn, lexicon, content, close, threshold, by_stored=True)
    vector = None if index is None else index.vectors_of([seq]).get(seq)
    if vector is not None and index is not None:
        mask = index.mask_for(filters, first_windows=True)  # whole memories, not windows
        for hit in index.top(vector, mask, CANDIDATES + 1):
            if hit.seq < seq and hit.cosine > settings.dedup_cosine:
                found.append((hit.cosine, hit.seq, "cosine"))
    return _best(conn, content, found)


def _fold(
    conn: sqlite3.Connection, keep: Match, row: tuple[Any, ...], moved_to: str, max_bytes: int
) -> None:
    """Merge row ``(seq, id, content, content_hash)`` into ``keep`` and move it, unchanged,
    to the namespace ``moved_to``."""
    seq, ident, content, _ = row
    stored = stored_row(conn, seq)
    merge(conn, keep, (ident, content, *stored), max_bytes)
    move(conn, seq, moved_to, keep.id)


def remember_row(
    session: SqliteSurface, row: tuple[Any, ...], embed: bool
) -> tuple[Match | None, int, np.ndarray | None]:
    """:func:`remember` in the session, comparing vectors when ``embed``: the memory the
    row was merged into (or ``None`` and the new row's seq), and the row's vector if any."""
    vectors = Vectors.of(session) if embed else None
    return remember(
        session.connection, session.transaction, session.lexicon, session.settings, row, vectors
    )


def dedup_pass(
    session: SqliteSurface, namespace: str, moved_to: str, dry_run: bool
) -> tuple[list[tuple[Any, ...]], Callable[[Any, tuple[Any, ...]], Match | None]]:
    """The rows ``(seq, id, content, content_hash)`` of a dedup pass over the namespace and
    its step: a row checked against the older ones (and, unless ``dry_run``, merged into
    the one it repeats and moved to ``moved_to``) in the caller's transaction."""
    settings = session.settings
    index = _stored_index(Vectors.of(session), session.connection)
    with session.connection() as conn:
        rows = namespace_rows(conn, namespace)

    def step(conn: Any, row: tuple[Any, ...]) -> Match | None:
        pair = _older_copy(conn, session.lexicon, settings, namespace, row, index)
        if pair is not None and not dry_run:
            _fold(conn, pair, row, moved_to, settings.max_content_bytes)
        return pair

    return rows, step
