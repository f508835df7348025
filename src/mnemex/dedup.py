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

The decisions are :mod:`mnemex.engine.duplicates`'; each engine runs them
with its own reads and locking, as the session's ``dedup`` operations
(:class:`mnemex.engine.protocol.DuplicateChecks`). SQLite
(:mod:`mnemex.engine.sqlite.dedup`) compares a new memory before it is stored,
outside the write lock, and under the lock only with the rows written since,
so that two processes remembering the same fact at once still end with one
memory; PostgreSQL (:mod:`mnemex.engine.postgres.dedup`) runs the check and
the write in one transaction under a lock per namespace.

A memory longer than ``NEAR_MAX_CHARS`` is compared by its text alone
(``exact``): reading a text of megabytes as a BM25 query costs minutes and
memory out of proportion to what a near duplicate of it would save.

Merging keeps the existing memory and its id, raises its confidence to the
higher of the two, adds the new tags, pins it if either was pinned, and
records the duplicate (its time, source, and its text when it differs) in the
existing memory's ``metadata["duplicates"]``. Nothing is deleted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from mnemex.engine import logger
from mnemex.results import Added, DedupReport, DuplicatePair

if TYPE_CHECKING:
    from mnemex.engine.duplicates import Match
    from mnemex.engine.protocol import Session


def remember_row(session: Session, row: tuple[Any, ...], embed: bool) -> Added:
    """The row stored unless it repeats a memory of its namespace (by the engine's check,
    comparing vectors when ``embed``), then the new memory embedded; see
    :meth:`mnemex.Store.remember`."""
    with session.lean(len(row[3])):
        match, seq, vector = session.dedup.remember_row(session, row, embed)
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
    session: Session,
    namespace: str,
    *,
    dry_run: bool = False,
    progress: Callable[[int], None] | None = None,
) -> DedupReport:
    """Merge each memory of the namespace that repeats an older one into it, one
    transaction each (each merge a write of its own); see :meth:`mnemex.Store.dedup`."""
    moved_to = f"{namespace}/duplicates"
    rows, step = session.dedup.dedup_pass(session, namespace, moved_to, dry_run)
    return _run_pass(session, namespace, rows, step, dry_run, moved_to, progress)


def _run_pass(
    session: Session,
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
