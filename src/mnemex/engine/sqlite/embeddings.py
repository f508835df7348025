"""Writing vectors: find memories without one, embed them in batches, store them.

A text longer than the embedder's window is cut into windows (``cut``, see
:func:`mnemex.embed.numbered_windows`), one vector and one row each, numbered as the
cut numbers them (``window``: token windows 0, 1, ..., sentence windows from
:data:`mnemex.embed.SENTENCE_BASE`); a memory's windows are always written together. Vectors are reused, not
recomputed, when another memory with the same content hash already has them
for the model (so unchanged content is never embedded twice). A vector is stored as
float16 (:mod:`mnemex.storage.blobs`). Vectors are
written in short transactions, one per batch, and only for memories whose
content is still the one that was embedded.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from mnemex.embed import SENTENCE_BASE, Embedder, embed_checked
from mnemex.engine.embedding import Cut
from mnemex.results import EmbedReport, Pending
from mnemex.storage import IN_CHUNK, marks, write_transaction
from mnemex.storage.blobs import stored

if TYPE_CHECKING:
    import numpy as np

# A text's vectors by window number, in order: as stored, or views of the rows just embedded
# (SQLite takes either as a BLOB; a view copies nothing).
Windows = list[tuple[int, bytes | memoryview]]
EMBED_BATCH = 256  # texts per embedder call and per write transaction
# With a progress callback, batches start small and double while one takes less than
# PROGRESS_SECONDS, so that a progress bar moves (and estimates) from the first seconds.
FIRST_PROGRESS_BATCH = 16
PROGRESS_SECONDS = 1.0
# A batch with more windows than this (a memory of megabytes) is embedded a slice at a
# time, saying how far it is on the ``mnemex.progress`` logger every SAY_EVERY seconds.
LONG_WINDOWS = 256
SAY_EVERY = 10.0


def pending(
    conn: sqlite3.Connection,
    model: str,
    *,
    after: int = 0,
    limit: int = EMBED_BATCH,
    max_chars: int | None = None,
) -> list[Pending]:
    """Memories with no vector for ``model``, by ``seq`` after ``after`` (of at most
    ``max_chars`` characters, if given)."""
    rows = conn.execute(
        """SELECT m.seq, m.content, m.content_hash FROM memories AS m
           WHERE m.seq > ? AND (? IS NULL OR length(m.content) <= ?) AND NOT EXISTS (
               SELECT 1 FROM embeddings AS e WHERE e.model = ? AND e.seq = m.seq)
           ORDER BY m.seq LIMIT ?""",
        (after, max_chars, max_chars, model, limit),
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
    *,
    cut: Cut | None = None,
    reuse: bool = True,
) -> None:
    """Give each row its vectors for the embedder's model, one per window of its text
    (``cut``; ``None``: one) (raises EmbeddingError on failure).

    ``guard`` is held around each use of the connection, never while the
    model runs, so other threads can search meanwhile. ``progress`` is called after
    each batch with its number of rows. ``reuse=False`` embeds every row anew (its
    earlier windows are deleted).
    """
    step = EMBED_BATCH if progress is None else FIRST_PROGRESS_BATCH
    start = 0
    while start < len(rows):
        batch = rows[start : start + step]
        start += len(batch)
        began = time.monotonic()
        known: dict[str, Windows] = {}
        if reuse:
            with guard():
                known = _known_vectors(
                    conn, embedder.model_id, embedder.dim, {r.content_hash for r in batch}
                )
        todo = [r for r in batch if r.content_hash not in known]
        report.embedded += _embed_windows(embedder, todo, known, cut)
        report.reused += len(batch) - len(todo)
        model, dim = embedder.model_id, embedder.dim
        with guard(), write_transaction(conn):
            if not reuse:  # the earlier windows go, those past the new last one too
                conn.executemany(
                    "DELETE FROM embeddings WHERE model = ? AND seq = ?",
                    [(model, r.seq) for r in batch],
                )
            conn.executemany(
                """INSERT OR REPLACE INTO embeddings
                       (seq, model, window, dim, content_hash, vector)
                   SELECT ?, ?, ?, ?, ?, ? WHERE EXISTS (
                       SELECT 1 FROM memories WHERE seq = ? AND content_hash = ?)""",
                [
                    (r.seq, model, w, dim, r.content_hash, v, r.seq, r.content_hash)
                    for r in batch
                    for w, v in known[r.content_hash]
                ],
            )
        if progress:
            progress(len(batch))
            if time.monotonic() - began < PROGRESS_SECONDS:
                step = min(2 * step, EMBED_BATCH)


def _embed_windows(
    embedder: Embedder, todo: Sequence[Pending], known: dict[str, Windows], cut: Cut | None
) -> int:
    """Embed the windows of each row's text into ``known`` (by content hash), each
    distinct window once, in one call. Returns the number of texts embedded."""
    pieces = {r.content: [(0, r.content)] if cut is None else cut(r.content) for r in todo}
    texts = list(dict.fromkeys(t for p in pieces.values() for _, t in p))
    if not texts:
        return 0
    fresh = (
        embed_checked(embedder, texts)
        if len(texts) <= LONG_WINDOWS
        else _embed_long(embedder, texts)
    )
    rows = stored(fresh)
    by_text = {t: rows[i].data for i, t in enumerate(texts)}
    for r in todo:
        known[r.content_hash] = [(w, by_text[t]) for w, t in pieces[r.content]]
    return len(pieces)


def _embed_long(embedder: Embedder, texts: list[str]) -> np.ndarray:
    """:func:`embed_checked` of many windows, a slice at a time, saying how far it is."""
    import logging

    import numpy as np

    say = logging.getLogger("mnemex.progress")
    say.info("embedding %d windows of long text", len(texts))
    out = np.empty((len(texts), embedder.dim), dtype=np.float32)  # filled in place: one copy
    began = said = time.monotonic()
    for start in range(0, len(texts), LONG_WINDOWS):
        part = embed_checked(embedder, texts[start : start + LONG_WINDOWS])
        out[start : start + len(part)] = part
        done, now = start + len(part), time.monotonic()
        if now - said >= SAY_EVERY and done < len(texts):
            left = (len(texts) - done) * (now - began) / done
            say.info("embedded %d of %d windows, about %.0f s left", done, len(texts), left)
            said = now
    return out


def _known_vectors(
    conn: sqlite3.Connection, model: str, dim: int, hashes: set[str]
) -> dict[str, Windows]:
    """The windows' vectors (in order, with their numbers) of one memory with each content
    hash, if any."""
    if not hashes:
        return {}
    found: dict[str, Windows] = {}
    owner: dict[str, int] = {}
    ordered = sorted(hashes)
    for start in range(0, len(ordered), IN_CHUNK):
        chunk = ordered[start : start + IN_CHUNK]
        for content_hash, seq, window, vector in conn.execute(
            f"SELECT content_hash, seq, window, vector FROM embeddings WHERE model = ? AND dim = ? "
            f"AND length(vector) IN (?, ?) AND content_hash IN ({marks(len(chunk))}) "
            "ORDER BY content_hash, seq, window",
            [model, dim, dim * 2, dim * 4, *chunk],
        ):
            if owner.setdefault(content_hash, seq) == seq:
                found.setdefault(content_hash, []).append((window, vector))
    return found


def windowed(
    conn: sqlite3.Connection, model: str, *, after: int = 0, limit: int = EMBED_BATCH
) -> list[tuple[Pending, tuple[int, int]]]:
    """Memories with vectors for ``model`` and how many windows, and of them sentence
    windows, each has stored (they differ from its text's when it was stored before long
    texts were windowed, or cut into sentences, or with windows off), by ``seq`` after
    ``after``."""
    rows = conn.execute(
        """SELECT m.seq, m.content, m.content_hash, count(*), sum(e.window >= ?)
           FROM memories AS m JOIN embeddings AS e ON e.model = ? AND e.seq = m.seq
           WHERE m.seq > ? GROUP BY m.seq ORDER BY m.seq LIMIT ?""",
        (SENTENCE_BASE, model, after, limit),
    ).fetchall()
    return [(Pending(*r[:3]), (int(r[3]), int(r[4]))) for r in rows]
