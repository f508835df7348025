"""Writing vectors: find memories without one, embed them in batches, store them.

A vector is reused, not recomputed, when another memory with the same content
hash already has one for the model (so unchanged content is never embedded
twice). Vectors are written in short transactions, one per batch, and only
for memories whose content is still the one that was embedded.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mnemex.embed import Embedder, embed_checked
from mnemex.storage import IN_CHUNK, marks, write_transaction

if TYPE_CHECKING:
    pass

EMBED_BATCH = 256  # texts per embedder call and per write transaction
# With a progress callback, batches start small and double while one takes less than
# PROGRESS_SECONDS, so that a progress bar moves (and estimates) from the first seconds.
FIRST_PROGRESS_BATCH = 16
PROGRESS_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class Pending:
    seq: int
    content: str
    content_hash: str


@dataclass(slots=True)
class EmbedReport:
    """What an embedding pass did."""

    model: str
    embedded: int = 0  # texts run through the model
    reused: int = 0  # vectors copied from identical content
    pending: int = 0  # memories still without a vector for the model
    error: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "model": self.model,
            "embedded": self.embedded,
            "reused": self.reused,
            "pending": self.pending,
            "error": self.error,
        }


def pending(
    conn: sqlite3.Connection, model: str, *, after: int = 0, limit: int = EMBED_BATCH
) -> list[Pending]:
    """Memories with no vector for ``model``, by ``seq`` after ``after``."""
    rows = conn.execute(
        """SELECT m.seq, m.content, m.content_hash FROM memories AS m
           WHERE m.seq > ? AND NOT EXISTS (
               SELECT 1 FROM embeddings AS e WHERE e.model = ? AND e.seq = m.seq)
           ORDER BY m.seq LIMIT ?""",
        (after, model, limit),
    ).fetchall()
    return [Pending(*r) for r in rows]


def count_pending(conn: sqlite3.Connection, model: str) -> int:
    return int(
        conn.execute(
            """SELECT count(*) FROM memories AS m WHERE NOT EXISTS (
                   SELECT 1 FROM embeddings AS e WHERE e.model = ? AND e.seq = m.seq)""",
            (model,),
        ).fetchone()[0]
    )


def rows_for(conn: sqlite3.Connection, seqs: Sequence[int], model: str) -> list[Pending]:
    """These memories, when they have no vector for ``model``."""
    out: list[Pending] = []
    for start in range(0, len(seqs), IN_CHUNK):
        chunk = list(seqs[start : start + IN_CHUNK])
        out.extend(
            Pending(*r)
            for r in conn.execute(
                f"""SELECT m.seq, m.content, m.content_hash FROM memories AS m
                    WHERE m.seq IN ({marks(len(chunk))}) AND NOT EXISTS (
                        SELECT 1 FROM embeddings AS e WHERE e.model = ? AND e.seq = m.seq)
                    ORDER BY m.seq""",
                [*chunk, model],
            )
        )
    return out


def embed_and_store(
    conn: sqlite3.Connection,
    embedder: Embedder,
    rows: Sequence[Pending],
    report: EmbedReport,
    progress: Callable[[int], None] | None = None,
    guard: Callable[[], AbstractContextManager[object]] = contextlib.nullcontext,
) -> None:
    """Give each row a vector for the embedder's model (raises EmbeddingError on failure).

    ``guard`` is held around each use of the connection, never while the
    model runs, so other threads can search meanwhile. ``progress`` is called after
    each batch with its number of rows.
    """
    step = EMBED_BATCH if progress is None else FIRST_PROGRESS_BATCH
    start = 0
    while start < len(rows):
        batch = rows[start : start + step]
        start += len(batch)
        began = time.monotonic()
        with guard():
            known = _known_vectors(
                conn, embedder.model_id, embedder.dim, {r.content_hash for r in batch}
            )
        todo = [r for r in batch if r.content_hash not in known]
        texts = list(dict.fromkeys(r.content for r in todo))
        if texts:
            fresh = embed_checked(embedder, texts)
            by_text = {t: fresh[i].tobytes() for i, t in enumerate(texts)}
            for r in todo:
                known[r.content_hash] = by_text[r.content]
            report.embedded += len(texts)
        report.reused += len(batch) - len(todo)
        with guard(), write_transaction(conn):
            conn.executemany(
                """INSERT OR REPLACE INTO embeddings (seq, model, dim, content_hash, vector)
                   SELECT ?, ?, ?, ?, ? WHERE EXISTS (
                       SELECT 1 FROM memories WHERE seq = ? AND content_hash = ?)""",
                [
                    (
                        r.seq,
                        embedder.model_id,
                        embedder.dim,
                        r.content_hash,
                        known[r.content_hash],
                        r.seq,
                        r.content_hash,
                    )
                    for r in batch
                ],
            )
        if progress:
            progress(len(batch))
            if time.monotonic() - began < PROGRESS_SECONDS:
                step = min(2 * step, EMBED_BATCH)


def _known_vectors(
    conn: sqlite3.Connection, model: str, dim: int, hashes: set[str]
) -> dict[str, bytes]:
    if not hashes:
        return {}
    found: dict[str, bytes] = {}
    ordered = sorted(hashes)
    for start in range(0, len(ordered), IN_CHUNK):
        chunk = ordered[start : start + IN_CHUNK]
        for content_hash, vector in conn.execute(
            f"SELECT content_hash, vector FROM embeddings WHERE model = ? AND dim = ? "
            f"AND length(vector) = ? AND content_hash IN ({marks(len(chunk))})",
            [model, dim, dim * 4, *chunk],
        ):
            found.setdefault(content_hash, vector)
    return found
