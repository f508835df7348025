"""Near-duplicates: finding the memory a new one repeats, and merging into it (seed 003).

A memory repeats another in its namespace when

- its text is the same (``exact``);
- the other scores more than ``dedup_text`` (0.7) of what the memory itself
  scores for its own text as a BM25 query, and more than 0.7 of the other's
  terms (weighted by IDF) are in the memory too (``text``). Normalizing by
  the memory's own score makes the measure about overlap, not about how rare
  its words are; the converse check keeps a short remark from merging into a
  longer memory that contains its words;
- with embeddings, their cosine is above ``dedup_cosine`` (0.85) (``cosine``).

Two texts that differ in their numbers ("the queue holds 17 jobs" / "18
jobs") or in a negation ("we use X" / "we don't use X") are never
duplicates, however similar: bag-of-words and embedding similarity both miss
exactly the words that make them different facts.

Chunks of markdown workspace files are never merged into nor merged: their
files own them, and a sync may replace them at any time (a memory merged
into one would be lost with it).

A new memory is compared before it is stored, outside the write lock
(:func:`lookup`): it is scored beside the existing rows as if it were
already in the index. Under the lock, :func:`recheck` compares it only with
the rows written since the lookup, so that two processes remembering the
same fact at once still end with one memory (over the statements of
:mod:`mnemex.engine.sqlite.dedup`). On PostgreSQL (the end of this module, over
:mod:`mnemex.engine.postgres.dedup`'s reads) the same decisions run in one
transaction under a lock per namespace instead.

A memory longer than ``NEAR_MAX_CHARS`` is compared by its text alone
(``exact``): reading a text of megabytes as a BM25 query costs minutes and
memory out of proportion to what a near duplicate of it would save.

Merging keeps the existing memory and its id, raises its confidence to the
higher of the two, adds the new tags, pins it if either was pinned, and
records the duplicate (its time, source, and its text when it differs) in the
existing memory's ``metadata["duplicates"]``. Nothing is deleted.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mnemex.config import Settings
from mnemex.engine import engine_of, logger
from mnemex.engine.sqlite import dedup as statements
from mnemex.errors import EmbeddingError, IndexMismatch, MissingExtra
from mnemex.index.fts import Filters, LexicalPlan, Lexicon, bm25_beside, plan, retrieve
from mnemex.index.query import build_terms, content_terms, idf
from mnemex.index.stopwords import STOPWORDS
from mnemex.results import Added, DedupReport, DuplicatePair
from mnemex.storage import read_transaction
from mnemex.storage.connect import Connect
from mnemex.text import format_time, tags_columns, utcnow

if TYPE_CHECKING:
    import numpy as np

    from mnemex.embed import Embedder
    from mnemex.engine.sqlite.session import SqliteSession
    from mnemex.index.vectors import VectorIndex

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


@dataclass(frozen=True, slots=True)
class Match:
    """The memory another one repeats, and how closely."""

    seq: int
    id: str
    similarity: float
    by: str  # exact | text | cosine


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
    row = statements.own_score(conn, lexical.match, seq)
    own = row[0] if row else 0.0
    if not own or own <= 0:
        return []
    found = retrieve(conn, lexical, filters, CANDIDATES + 1, budget).candidates
    return [(c.seq, min(1.0, c.raw / own)) for c in found if c.seq != seq]


def coverage(lexicon: Lexicon, text: str, by: str, *, by_stored: bool = True) -> float:
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


@dataclass(frozen=True, slots=True)
class NewMemory:
    """A memory about to be stored, as the duplicate check needs it."""

    namespace: str
    content: str
    content_hash: str
    indexed: tuple[str, str]  # its content and tags as the full-text index holds them


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
    seen = statements.last_seq(conn)
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
    seqs = statements.written_since(conn, match, seen, new.namespace, RECHECK_ROWS)
    return _best(conn, new.content, _close_texts(conn, lexicon, new, seqs, text_threshold, lexical))


def still_there(conn: sqlite3.Connection, match: Match, namespace: str) -> bool:
    """Whether a lookup's match is still in the namespace (checked under the lock)."""
    return statements.still_there(conn, match.seq, match.id, namespace)


def _same_text(conn: sqlite3.Connection, new: NewMemory, after: int) -> Match | None:
    row = statements.same_text_after(conn, new.namespace, new.content_hash, after)
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
        seqs = statements.no_longer(conn, seqs, NEAR_MAX_CHARS)
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
    others = statements.contents(conn, [c[0] for c in close])
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
    chunks = statements.file_chunks(conn, [f[1] for f in found])
    found = [f for f in found if f[1] not in chunks]
    if not found:
        return None
    rows = statements.texts(conn, [f[1] for f in found])
    mine = markers(content)
    for similarity, other, by in sorted(found, key=lambda f: (-f[0], f[1])):
        if other in rows and markers(rows[other][1]) == mine:
            return Match(other, rows[other][0], similarity, by)
    return None


def markers(text: str) -> tuple[frozenset[str], frozenset[str]]:
    """The numbers and negations in a text: two memories must share them to be duplicates."""
    words = _WORDS.findall(text.lower())
    return (
        frozenset(w for w in words if any(c.isdigit() for c in w)),
        frozenset(w for w in words if w in NEGATIONS),
    )


def merge(conn: sqlite3.Connection, keep: Match, duplicate: Sequence[Any], max_bytes: int) -> None:
    """Fold a duplicate into the memory it repeats (within the caller's transaction).

    ``duplicate`` is ``(id, content, tags, source, confidence, pinned, created_at)``
    as stored (tags as JSON; the id is ``None`` for a memory never stored).
    """
    old = statements.for_merge(conn, keep.seq)
    tags_json, confidence, pinned, text, updated = merged(old, keep, duplicate, max_bytes)
    fts_tags = tags_columns(tuple(json.loads(tags_json)))[1]
    values = (tags_json, fts_tags, confidence, int(pinned), text, updated)
    statements.apply_merge(conn, keep.seq, values)


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


# -- the operations: remember one memory, deduplicate a namespace -------------------


@dataclass(frozen=True, slots=True)
class Vectors:
    """The store's vectors as the duplicate check reads them."""

    embedder: Embedder | None
    check_dimension: Callable[[Embedder], None]  # raises IndexMismatch on other dimensions
    index: Callable[[int], VectorIndex]  # the in-process index of vectors of a dimension
    first_window: Callable[[str], str] = str  # the part of a text its first vector embeds

    @classmethod
    def of(cls, session: SqliteSession) -> Vectors:
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
    import numpy as np

    from mnemex.embed import embed_checked

    try:
        with connection() as conn:
            vectors.check_dimension(embedder)
            known = statements.vector_of_text(conn, embedder.model_id, digest, embedder.dim)
        if known is not None and len(known[0]) == 4 * embedder.dim:
            vector = np.frombuffer(known[0], dtype=np.float32)
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
        if match is not None and not still_there(conn, match, new.namespace):
            match, seen = None, 0  # forgotten or moved since: compare with every row
        if match is None:
            match = recheck(conn, lexicon, new, seen, text_threshold=settings.dedup_text)
        if match is None:
            return None, statements.insert(conn, row), vector
        merge(conn, match, (None, text, *row[4:9]), settings.max_content_bytes)
    return match, 0, vector


def remember_row(session: SqliteSession, row: tuple[Any, ...], embed: bool) -> Added:
    """:func:`remember` in the session (comparing vectors when ``embed``), then the new
    memory embedded; see :meth:`mnemex.Store.remember`."""
    pg = _postgres(session)
    if pg is not None:
        return _pg_remember(pg, session, row, embed)
    vectors = Vectors.of(session) if embed else None
    with session.lean(len(row[3])):
        match, seq, vector = remember(
            session.connection, session.transaction, session.lexicon, session.settings, row, vectors
        )
        session.after_write()
        if match is not None:
            logger().info(
                "merged a new memory into %s (%s %.3f)", match.id, match.by, match.similarity
            )
            return Added(match.id, True, match.similarity, match.by)
        if embed:
            primed = None if vector is None else {session.embedding.first(row[3]): vector}
            session.embedding.embed_new([seq], primed=primed)
    return Added(row[0])


def dedup(
    session: SqliteSession,
    namespace: str,
    *,
    dry_run: bool = False,
    progress: Callable[[int], None] | None = None,
) -> DedupReport:
    """Merge each memory of the namespace that repeats an older one into it, one
    transaction each (each merge a write of its own); see :meth:`mnemex.Store.dedup`."""
    moved_to, settings = f"{namespace}/duplicates", session.settings
    pg = _postgres(session)
    if pg is not None:
        pg_rows, pg_step = _pg_pass(pg, session, namespace, moved_to, dry_run)
        return _run_pass(session, namespace, pg_rows, pg_step, dry_run, moved_to, progress)
    index = _stored_index(Vectors.of(session), session.connection)
    with session.connection() as conn:
        rows = statements.namespace_rows(conn, namespace)

    def step(conn: Any, row: tuple[Any, ...]) -> Match | None:
        pair = _older_copy(conn, session.lexicon, settings, namespace, row, index)
        if pair is not None and not dry_run:
            _fold(conn, pair, row, moved_to, settings.max_content_bytes)
        return pair

    return _run_pass(session, namespace, rows, step, dry_run, moved_to, progress)


def _run_pass(
    session: SqliteSession,
    namespace: str,
    rows: Sequence[tuple[Any, ...]],
    step: Callable[[Any, tuple[Any, ...]], Match | None],
    dry_run: bool,
    moved_to: str,
    progress: Callable[[int], None] | None,
) -> DedupReport:
    """Check (and merge) each row ``(seq, id, content, content_hash)`` in a transaction
    of its own, by ``step``."""
    pairs: list[DuplicatePair] = []
    for count, row in enumerate(rows, start=1):
        if progress is not None and count % 100 == 0:
            progress(100)
        with session.transaction() as conn:
            pair = step(conn, row)
        if pair is not None:
            pairs.append(DuplicatePair(pair.id, row[1], pair.similarity, pair.by))
            if not dry_run:
                session.after_write()
    if progress is not None and len(rows) % 100:
        progress(len(rows) % 100)
    return DedupReport(namespace, len(rows), tuple(pairs), dry_run, moved_to)


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
    if not statements.present(conn, seq, namespace):
        return None
    same = statements.same_text_before(conn, namespace, digest, seq)
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
    stored = statements.stored_row(conn, seq)
    merge(conn, keep, (ident, content, *stored), max_bytes)
    statements.move(conn, seq, moved_to, keep.id)


# -- PostgreSQL: the same decisions over mnemex.engine.postgres.dedup's reads ----------


def _postgres(session: SqliteSession) -> Any:
    """The PostgreSQL engine's reads and writes for dedup, or ``None`` on SQLite."""
    if engine_of(session) == "SQLite":
        return None
    from mnemex.engine.postgres import dedup as pg_dedup

    return pg_dedup


def _pg_close_texts(
    pg: Any,
    conn: Any,
    new: NewMemory,
    threshold: float,
    stored: int | None = None,
    budget: int = 0,
) -> list[tuple[float, int, str]]:
    """The namespace's rows whose text repeats ``new`` (not stored, or stored as row
    ``stored``): (similarity, seq, "text"), as :func:`_close_texts` decides (the rows
    found as a search shaped by ``budget`` finds them)."""
    terms = pg.query_terms(conn, new.content, new.namespace)
    if not terms:
        return []
    if stored is None:
        own, found = pg.beside(conn, terms, new.namespace, new.indexed, CANDIDATES, budget)
    else:
        own = dict(pg.scores(conn, terms, new.namespace, 1, [stored])).get(stored, 0.0)
        found = pg.scores(conn, terms, new.namespace, CANDIDATES + 1, budget=budget)
    if own <= 0:
        return []
    close = [(seq, min(1.0, raw / own)) for seq, raw in found if seq != stored]
    close = [(seq, ratio) for seq, ratio in close if ratio > threshold]
    if not close:
        return []
    lexicon, others = (
        pg.NamespaceLexicon(conn, new.namespace),
        pg.texts(conn, [c[0] for c in close]),
    )
    out = []
    for other, ratio in close:
        text = others[other][1] if other in others else ""
        back = coverage(lexicon, text, new.content, by_stored=stored is not None)
        if min(ratio, back) > threshold:
            out.append((min(ratio, back), other, "text"))
    return out


def _pg_best(pg: Any, conn: Any, content: str, found: list[tuple[float, int, str]]) -> Match | None:
    """:func:`_best` in PostgreSQL: the closest that is no file chunk and has the same
    numbers and negations."""
    rows = pg.texts(conn, [f[1] for f in found]) if found else {}
    mine = markers(content)
    for similarity, other, by in sorted(found, key=lambda f: (-f[0], f[1])):
        ident, text, kind = rows.get(other, (None, "", "chunk"))
        if kind != "chunk" and markers(text) == mine:
            return Match(other, ident, similarity, by)
    return None


def _pg_lookup(
    pg: Any, conn: Any, new: NewMemory, settings: Settings, vector: Any, model: str | None
) -> Match | None:
    """The memory ``new`` repeats in its namespace, if any (under the namespace's lock)."""
    same = pg.same_text(conn, new.namespace, new.content_hash)
    if same is not None:
        return Match(int(same[0]), same[1], 1.0, "exact")
    if len(new.content) > NEAR_MAX_CHARS:
        return None
    close = _pg_close_texts(pg, conn, new, settings.dedup_text, budget=settings.lexical_budget)
    if vector is not None and model is not None:
        for seq, cosine in pg.nearest(conn, vector, new.namespace, model, CANDIDATES + 1):
            if cosine > settings.dedup_cosine:
                close.append((cosine, seq, "cosine"))
    return _pg_best(pg, conn, new.content, close)


def _pg_new_vector(pg: Any, session: SqliteSession, text: str, digest: str) -> Any:
    """The new text's first-window vector (a stored one for the same text, else embedded),
    or ``None`` without an embedder or when it fails (the write reports that)."""
    embedder = session.embedder
    if embedder is None:
        return None
    from mnemex.embed import embed_checked

    try:
        with session.connection() as conn:
            known = pg.vector_of_text(conn, embedder.model_id, digest)
        if known is not None and known.shape[0] == embedder.dim:
            return known
        return embed_checked(embedder, [session.embedding.first(text)])[0]
    except (EmbeddingError, MissingExtra, IndexMismatch) as exc:
        logger().debug("duplicate check without vectors: %s", exc)
        return None


def _pg_remember(pg: Any, session: SqliteSession, row: tuple[Any, ...], embed: bool) -> Added:
    """:func:`remember_row` in PostgreSQL: the check and the write in one transaction,
    under the namespace's lock."""
    from mnemex.errors import DuplicateId

    text, namespace = row[3], row[1]
    vector = _pg_new_vector(pg, session, text, row[10]) if embed else None
    model = session.embedder.model_id if vector is not None and session.embedder else None
    indexed = (text, tags_columns(tuple(json.loads(row[4])))[0])
    new = NewMemory(namespace, text, row[10], indexed)
    with session.transaction() as conn:
        pg.lock_namespace(conn, namespace)
        match = _pg_lookup(pg, conn, new, session.settings, vector, model)
        if match is None:
            written = session.insert_one(conn, row)  # type: ignore[attr-defined]
            if not written.inserted:
                if written.id == row[0]:
                    raise DuplicateId(f"a memory with id {row[0]!r} already exists")
                match = Match(written.seq, written.id, 1.0, "exact")
        if match is not None:
            _pg_merge(pg, conn, match, (None, text, *row[4:9]), session.settings.max_content_bytes)
    session.after_write()
    if match is not None:
        logger().info("merged a new memory into %s (%s %.3f)", match.id, match.by, match.similarity)
        return Added(match.id, True, match.similarity, match.by)
    if embed:
        session.embedding.embed_new([written.seq])
    return Added(row[0])


def _pg_merge(pg: Any, conn: Any, keep: Match, duplicate: Sequence[Any], max_bytes: int) -> None:
    """:func:`merge` in PostgreSQL."""
    old = pg.for_merge(conn, keep.seq)
    pg.apply_merge(conn, keep.seq, merged(old, keep, duplicate, max_bytes))


def _pg_older_copy(
    pg: Any, conn: Any, settings: Settings, namespace: str, row: tuple[Any, ...], model: str | None
) -> Match | None:
    """:func:`_older_copy` in PostgreSQL."""
    seq, _, content, digest = row
    if not pg.present(conn, seq, namespace):
        return None
    same = pg.same_text(conn, namespace, digest, seq)
    if same is not None:
        return Match(int(same[0]), same[1], 1.0, "exact")
    new = NewMemory(namespace, content, digest, (content, ""))
    found = [
        f
        for f in _pg_close_texts(pg, conn, new, settings.dedup_text, seq, settings.lexical_budget)
        if f[1] < seq
    ]
    vector = None if model is None else pg.stored_vector(conn, model, seq)
    if vector is not None:
        for other, cosine in pg.nearest(conn, vector, namespace, model, CANDIDATES + 1):
            if other < seq and cosine > settings.dedup_cosine:
                found.append((cosine, other, "cosine"))
    return _pg_best(pg, conn, content, found)


def _pg_pass(
    pg: Any, session: SqliteSession, namespace: str, moved_to: str, dry_run: bool
) -> tuple[list[tuple[Any, ...]], Callable[[Any, tuple[Any, ...]], Match | None]]:
    """The rows of :func:`dedup` in PostgreSQL and its step: each row checked (and
    merged) under the namespace's lock."""
    settings = session.settings
    model = session.embedder.model_id if session.embedder is not None else None
    with session.connection() as conn:
        rows = pg.namespace_rows(conn, namespace)

    def step(conn: Any, row: tuple[Any, ...]) -> Match | None:
        pg.lock_namespace(conn, namespace)
        pair = _pg_older_copy(pg, conn, settings, namespace, row, model)
        if pair is not None and not dry_run:
            stored = pg.stored_row(conn, row[0])
            _pg_merge(pg, conn, pair, (row[1], row[2], *stored), settings.max_content_bytes)
            pg.move(conn, row[0], moved_to, pair.id)
        return pair

    return rows, step
