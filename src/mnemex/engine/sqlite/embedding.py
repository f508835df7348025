"""The embedding lifecycle of a SQLite session: which embedder the store uses, giving memories
vectors (now, or later from the backlog a failed write leaves), and reindex.

A text longer than the embedder's window gets several vectors (the setting
``embed_windows``; :func:`mnemex.embed.windows`: the local model's token windows and
sentences); ``reindex`` gives the memories stored with other windows than their
text's now (one vector, or token windows without sentences) their windows.

Written over the session's public surface; the vector SQL it runs is
:mod:`mnemex.engine.sqlite.embeddings`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import sqlite3
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mnemex.engine.sqlite.surface import SqliteSurface
    from mnemex.results import EmbedReport, Pending

from mnemex import embed as embedders
from mnemex.embed import Embedder
from mnemex.engine import logger
from mnemex.engine.check import index_differs, recount_stats
from mnemex.engine.embedding import (
    CATCH_UP_MAX_CHARS,
    DEADLINE_SLICE,
    FROM_SETTINGS,
    REWINDOWING,
    Backlog,
    Cut,
    catch_up_size,
    rewindowed,
    say_catching_up,
    say_left,
)
from mnemex.errors import EmbeddingError, IndexMismatch, MissingExtra
from mnemex.progress import Progress, phase
from mnemex.storage import write_transaction


class Embedding:
    """The embedder of one session and the work of giving its memories vectors."""

    def __init__(self, session: SqliteSurface, embedder: Embedder | object | None) -> None:
        self.session = session
        self._arg = embedder
        self._embedder: Embedder | None = None
        self._wanted: Embedder | None = None  # what reindex and embed switch the store to
        self._recorded: dict[str, Any] | None = None
        self._ready = False
        self.last_error: str | None = None  # why the last write stored memories without vectors

    @property
    def embedder(self) -> Embedder | None:
        """The store's embedder, resolved on first use: see :attr:`mnemex.store.Store.embedder`."""
        if not self._ready:
            session = self.session
            with session.lock:
                if not self._ready:
                    wanted: Any = self._arg
                    if wanted is FROM_SETTINGS:
                        configured = session.settings.embedder != "auto"
                        wanted = (
                            embedders.resolve(session.settings) if configured else embedders.AUTO
                        )
                    if wanted is not None:  # lexical only: settle needs no record, nor reads it
                        with session.connection() as conn:
                            self._recorded = _recorded_embedder(conn)
                    self._embedder = embedders.settle(wanted, self._recorded, session.settings)
                    self._wanted = self._embedder if wanted is embedders.AUTO else wanted
                    self._ready = True
        return self._embedder

    def _record(self, embedder: Embedder) -> None:
        """Record ``embedder`` as the one the store is indexed with (after it stored vectors)."""
        if getattr(embedder, "lazy_dim", False) or isinstance(embedder, embedders.Unavailable):
            return
        record = embedders.describe(embedder)
        if record == self._recorded:
            return
        with self.session.transaction() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES ('embedder', ?)",
                (json.dumps(record, sort_keys=True),),
            )
        self._recorded = record

    def check_dimension(self, embedder: Embedder) -> None:
        """Raise :class:`~mnemex.errors.IndexMismatch` when the store holds vectors of the
        model with another dimension. Call it inside the session's ``connection()``."""
        row = self.session.conn.execute(
            "SELECT dim FROM embeddings WHERE model = ? AND dim != ? LIMIT 1",
            (embedder.model_id, embedder.dim),
        ).fetchone()
        if row:
            raise IndexMismatch(
                f"the store holds {row[0]}-dimensional vectors for {embedder.model_id}, which now "
                f"gives {embedder.dim} dimensions: run `mnemex reindex --force`"
            )

    def cut(self, embedder: Embedder) -> Cut | None:
        """How the store cuts a text into windows for ``embedder`` (``None``: one vector
        a text, as embedders without a window and ``embed_windows = false`` give)."""
        if not self.session.settings.embed_windows or getattr(embedder, "windows", None) is None:
            return None
        return functools.partial(
            embedders.numbered_windows, embedder, sentences=self.session.settings.embed_sentences
        )

    def first(self, text: str) -> str:
        """The part of ``text`` the store's embedder gives its first vector (its window 0)."""
        embedder = self.embedder
        cut = None if embedder is None else self.cut(embedder)
        return text if cut is None else embedders.first_window(cut, text)

    def _target(self) -> Embedder | None:
        """The embedder reindex and embed switch the store to (``Unavailable`` raises)."""
        self.embedder  # noqa: B018 - resolves the embedder to switch to, too
        if isinstance(self._wanted, embedders.Unavailable):
            raise EmbeddingError(self._wanted.reason)
        return self._wanted

    def embed(
        self, *, progress: Callable[[int], None] | None = None, force: bool = False
    ) -> EmbedReport:
        """See :meth:`mnemex.store.Store.embed`."""
        from mnemex.engine.sqlite import embeddings as vectors
        from mnemex.results import EmbedReport

        embedder = self._target()
        if embedder is None:
            raise EmbeddingError(
                "no embedder is configured: install mnemex[embed] for the local model, or set "
                "embedder (MNEMEX_EMBEDDER) to sentence-transformers or openai"
            )
        breaker = getattr(embedder, "breaker", None)
        if breaker is not None:
            breaker.reset()  # asked for now: try the provider even if it failed a moment ago
        report = EmbedReport(model=embedder.model_id)
        session = self.session
        # The session's lock is held for each use of the connection, not while the model
        # runs: other threads keep searching during a long embedding pass.
        with session.connection() as conn:
            if force:
                with write_transaction(conn):
                    conn.execute("DELETE FROM embeddings WHERE model = ?", (embedder.model_id,))
                session.after_write()
            else:
                self.check_dimension(embedder)
        last = 0
        while True:
            with session.connection() as conn:
                batch = vectors.pending(conn, embedder.model_id, after=last)
            if not batch:
                break
            last = batch[-1].seq
            vectors.embed_and_store(
                session.conn,
                embedder,
                batch,
                report,
                progress,
                guard=session.connection,
                cut=self.cut(embedder),
            )
            session.after_write()
        Backlog(session).clear()
        with session.connection() as conn:
            report.pending = vectors.count_pending(conn, embedder.model_id)
        self._record(embedder)
        if embedder is not self._embedder:
            with session.lock:
                self._embedder = embedder  # the store is switched to it
        session.update_ann(embedder)
        self.last_error = None
        return report

    def reindex(
        self,
        *,
        progress: Progress | None = None,
        force: bool = False,
        prune: bool = False,
    ) -> EmbedReport | None:
        """See :meth:`mnemex.store.Store.reindex`."""
        from mnemex.engine.sqlite import embeddings as vectors

        target = self._target()  # before anything is deleted
        session = self.session
        if index_differs(session):
            with session.transaction() as conn:
                conn.execute("INSERT INTO memories_fts (memories_fts) VALUES ('rebuild')")
                recount_stats(conn)
        if prune and target is not None:
            with session.transaction() as conn:
                conn.execute("DELETE FROM embeddings WHERE model != ?", (target.model_id,))
        if force and target is not None:
            session.drop_ann(target.model_id)
        session.after_write()
        if target is None:
            return None
        with session.connection() as conn:
            todo = _memories(conn) if force else vectors.count_pending(conn, target.model_id)
        report = self.embed(progress=phase(progress, "embedding", todo), force=force)
        self._window(target, report, progress)
        return report

    def _window(self, embedder: Embedder, report: EmbedReport, progress: Progress | None) -> None:
        """Embed anew, in windows, the memories whose stored windows are not their text's
        (as many token and sentence windows: :func:`rewindowed`); the others are left as
        they are. Its phase of ``progress``, ``re-windowing``, counts the memories looked
        at (those with vectors)."""
        from mnemex.engine.sqlite import embeddings as vectors

        cut = self.cut(embedder)
        if cut is None:
            return
        session, last = self.session, 0
        with session.connection() as conn:
            advance = phase(progress, REWINDOWING, _memories(conn) - report.pending)
        while True:
            with session.connection() as conn:
                batch = vectors.windowed(conn, embedder.model_id, after=last)
            if not batch:
                break
            last = batch[-1][0].seq
            long = rewindowed(batch, cut)
            vectors.embed_and_store(
                session.conn,
                embedder,
                long,
                report,
                advance,
                guard=session.connection,
                cut=cut,
                reuse=False,
            )
            session.after_write()
            if advance is not None:
                advance(len(batch) - len(long))  # looked at, left as they are
        if report.embedded:
            session.update_ann(embedder)

    def embed_new(
        self,
        seqs: Sequence[int],
        primed: dict[str, Any] | None = None,
        *,
        deadline: float | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> EmbedReport | None:
        """Embed memories just written. On failure they stay stored, marked pending.

        ``primed`` maps texts to vectors already computed (by the duplicate check).
        With a ``deadline`` (``time.monotonic()``), embedding stops once it has
        passed; what is left stays pending for the next write or ``embed``.
        Memories an earlier write left without vectors (it failed, or was
        interrupted) are caught up after, at most :func:`catch_up_size` of them.
        Returns what was done (``None`` without an embedder or anything to embed).
        """
        embedder = self.embedder
        if embedder is None:
            return None
        backlog = Backlog(self.session)
        earlier = backlog.marked()
        if not seqs and not earlier:
            return None
        cut = self.cut(embedder)
        if primed:
            embedder = _Primed(embedder, primed)
        from mnemex.engine.sqlite import embeddings as vectors
        from mnemex.results import EmbedReport

        report = EmbedReport(model=embedder.model_id)
        session = self.session
        try:
            with session.connection() as conn:
                self.check_dimension(embedder)
                rows = vectors.rows_for(conn, seqs, embedder.model_id)
            if rows and not earlier:
                backlog.set("a write is embedding its memories")  # left if it is interrupted
            done = self._embed_rows(embedder, rows, report, deadline, progress, cut)
            session.after_write()
            if rows:
                self._record(self.embedder)  # type: ignore[arg-type]
            if earlier and deadline is None:
                self.catch_up(catch_up_size(len(seqs)))
            elif rows and done and not earlier:
                backlog.clear()
            self.last_error = None
        except (EmbeddingError, MissingExtra, IndexMismatch) as exc:
            session.after_write()
            self.last_error = report.error = str(exc)
            logger().warning("memories stored without vectors (run `mnemex embed`): %s", exc)
            backlog.set(str(exc))
        return report

    def _embed_rows(
        self,
        embedder: Embedder,
        rows: Sequence[Pending],
        report: EmbedReport,
        deadline: float | None,
        progress: Callable[[int], None] | None,
        cut: Cut | None,
    ) -> bool:
        """Embed ``rows`` (in slices when there is a ``deadline``); whether all were."""
        from mnemex.engine.sqlite import embeddings as vectors

        session = self.session
        step = len(rows) if deadline is None else DEADLINE_SLICE
        for start in range(0, len(rows), max(step, 1)):
            if deadline is not None and time.monotonic() > deadline:
                return False
            vectors.embed_and_store(
                session.conn,
                embedder,
                rows[start : start + step],
                report,
                progress,
                session.connection,
                cut=cut,
            )
        return True

    def catch_up(self, most: int) -> int:
        """Embed up to ``most`` of the memories without a vector (oldest first), saying so;
        clear the backlog mark when none is left. Returns how many are left."""
        from mnemex.engine.sqlite import embeddings as vectors
        from mnemex.results import EmbedReport

        embedder, session = self.embedder, self.session
        if embedder is None:
            return 0
        with session.connection() as conn:
            pending = vectors.count_pending(conn, embedder.model_id)
        doing = min(most, pending)
        if doing:
            say_catching_up(doing, pending)
        report, last, done = EmbedReport(model=embedder.model_id), 0, 0
        while done < doing:
            with session.connection() as conn:
                batch = vectors.pending(
                    conn,
                    embedder.model_id,
                    after=last,
                    limit=min(vectors.EMBED_BATCH, doing - done),
                    max_chars=CATCH_UP_MAX_CHARS,
                )
            if not batch:
                break
            last, done = batch[-1].seq, done + len(batch)
            cut = self.cut(embedder)
            vectors.embed_and_store(
                session.conn, embedder, batch, report, None, session.connection, cut=cut
            )
            session.after_write()
        left = pending - done
        if left <= 0:
            Backlog(session).clear()
        say_left(left)
        return max(0, left)


def _memories(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT count(*) FROM memories").fetchone()[0])


def _recorded_embedder(conn: sqlite3.Connection) -> dict[str, Any] | None:
    """The embedder the store records it was indexed with, if any.

    A store written before embedders were recorded is taken to be indexed with
    the model most of its vectors are from (known by its id and dimension only).
    """
    row = conn.execute("SELECT value FROM meta WHERE key = 'embedder'").fetchone()
    if row is not None:
        with contextlib.suppress(ValueError, TypeError):
            record = json.loads(row[0])
            if isinstance(record, dict) and record.get("model_id"):
                return record
    legacy = conn.execute(
        "SELECT model, count(*) FROM embeddings GROUP BY model ORDER BY count(*) DESC LIMIT 1"
    ).fetchone()
    if legacy is None:
        return None
    dim = conn.execute("SELECT dim FROM embeddings WHERE model = ? LIMIT 1", (legacy[0],))
    record = {"model_id": legacy[0], "dim": dim.fetchone()[0]}
    from mnemex.embed.local import LocalEmbedder

    local = LocalEmbedder()
    if legacy[0] == local.model_id:
        record.update(local.describe())
    return record


class _Primed:
    """An embedder that answers texts it was given vectors for without the model."""

    def __init__(self, embedder: Embedder, vectors: dict[str, Any]) -> None:
        self._embedder = embedder
        self._vectors = vectors
        self.model_id = embedder.model_id
        self.dim = embedder.dim

    def embed(self, texts: Sequence[str]) -> Any:
        import numpy as np

        todo = [t for t in dict.fromkeys(texts) if t not in self._vectors]
        known = dict(self._vectors)
        if todo:
            known.update(zip(todo, np.asarray(self._embedder.embed(todo)), strict=True))
        return np.stack([known[t] for t in texts])
