"""The embedding lifecycle of a PostgreSQL store: which embedder it uses, and vectors for
its memories (stamped with the model, in ``embeddings``; see :mod:`.vectors`).

The decisions are :mod:`mnemex.embed`'s, as for SQLite (the configured embedder,
else the one the store records in ``meta``; a text longer than the embedder's
window gets several vectors, :meth:`PgEmbedding.pieces`: the local model's token
windows and sentences; ``reindex`` gives the memories stored with other windows
their text's); a text already embedded for the model, in any memory, is not
embedded again; embedding runs outside any transaction, and each batch of
vectors is one write. A write whose vectors cannot
be made leaves its memories stored without them (``last_error``); the next write
catches up a bounded part of them, ``embed`` all.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from mnemex import embed as embedders
from mnemex.embed import Embedder, embed_checked
from mnemex.engine import logger
from mnemex.engine.embedding import CATCH_UP_MAX_CHARS
from mnemex.engine.postgres.vectors import insert_vectors, stored_windows
from mnemex.errors import EmbeddingError, IndexMismatch, MissingExtra
from mnemex.progress import Progress, phase

if TYPE_CHECKING:
    from mnemex.engine.protocol import Session
    from mnemex.results import EmbedReport

BATCH = 256  # memories embedded, then written, at a time

_PENDING = """SELECT m.seq, m.content, m.content_hash FROM memories AS m
    WHERE m.seq > %(after)s {only}
      AND (%(chars)s::int IS NULL OR length(m.content) <= %(chars)s::int)
      AND NOT EXISTS (SELECT 1 FROM embeddings AS e WHERE e.seq = m.seq AND e.model = %(model)s)
    ORDER BY m.seq LIMIT %(limit)s"""
# Memories with vectors of the model, how many windows each has stored and how many of
# them are sentence windows.
_WINDOWED = """SELECT m.seq, m.content, m.content_hash, count(*),
        count(*) FILTER (WHERE e.window_no >= %(base)s) FROM memories AS m
    JOIN embeddings AS e ON e.seq = m.seq AND e.model = %(model)s
    WHERE m.seq > %(after)s GROUP BY m.seq ORDER BY m.seq LIMIT %(limit)s"""


class PgEmbedding:
    """The embedder of one PostgreSQL session and the work of giving memories vectors."""

    def __init__(self, session: Session, embedder: Embedder | object | None) -> None:
        self.session = session
        self._arg = embedder
        self._embedder: Embedder | None = None
        self._wanted: Embedder | None = None
        self._ready = False
        self.last_error: str | None = None

    @property
    def embedder(self) -> Embedder | None:
        if not self._ready:
            from mnemex.engine.embedding import FROM_SETTINGS

            with self.session.lock:
                if not self._ready:
                    settings = self.session.settings
                    wanted: Any = self._arg
                    if wanted is FROM_SETTINGS:
                        configured = settings.embedder != "auto"
                        wanted = embedders.resolve(settings) if configured else embedders.AUTO
                    self._embedder = embedders.settle(wanted, self._recorded(), settings)
                    self._wanted = self._embedder if wanted is embedders.AUTO else wanted
                    self._ready = True
        return self._embedder

    def pieces(self, embedder: Embedder, text: str) -> list[tuple[int, str]]:
        """The windows of ``text`` the store gives a vector each, with their numbers (one,
        the text, with ``embed_windows`` off; sentence windows with ``embed_sentences``; see
        :func:`mnemex.embed.numbered_windows`)."""
        settings = self.session.settings
        if not settings.embed_windows:
            return [(0, text)]
        return embedders.numbered_windows(embedder, text, sentences=settings.embed_sentences)

    def first(self, text: str) -> str:
        """The part of ``text`` the store's embedder gives its first vector (window 0)."""
        embedder = self.embedder
        if embedder is None:
            return text
        return embedders.first_window(functools.partial(self.pieces, embedder), text)

    def _recorded(self) -> dict[str, Any] | None:
        with self.session.connection() as conn:
            row = conn.execute("SELECT value FROM meta WHERE key = 'embedder'").fetchone()
        try:
            record = json.loads(row[0]) if row else None
        except ValueError:
            return None
        return record if isinstance(record, dict) and record.get("model_id") else None

    def _record(self, embedder: Embedder) -> None:
        if getattr(embedder, "lazy_dim", False) or isinstance(embedder, embedders.Unavailable):
            return
        with self.session.transaction() as conn:
            conn.execute(
                "INSERT INTO meta (key, value) VALUES ('embedder', %s) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (json.dumps(embedders.describe(embedder), sort_keys=True),),
            )

    def embed(
        self, *, progress: Callable[[int], None] | None = None, force: bool = False
    ) -> EmbedReport:
        """Vectors for every memory that lacks one for the configured model (``force``:
        for every memory, anew)."""
        from mnemex.results import EmbedReport

        self.embedder  # noqa: B018 - resolves the embedder to switch to
        if isinstance(self._wanted, embedders.Unavailable):
            raise EmbeddingError(self._wanted.reason)
        embedder = self._wanted
        if embedder is None:
            return EmbedReport(model="none")
        report = EmbedReport(model=embedder.model_id)
        if force:
            with self.session.transaction() as conn:
                conn.execute("DELETE FROM embeddings WHERE model = %s", (embedder.model_id,))
        self._run(embedder, None, report, progress)
        self._embedder = embedder
        self._record(embedder)
        from mnemex.engine.embedding import Backlog

        Backlog(self.session, "%s").clear()
        report.pending = self._pending_count(embedder.model_id)
        return report

    def reindex(
        self,
        *,
        progress: Progress | None = None,
        force: bool = False,
        prune: bool = False,
    ) -> EmbedReport | None:
        """Vectors for what lacks one, and anew for the memories whose stored windows are
        not their text's (the index terms are kept by triggers: nothing to rebuild);
        ``prune`` deletes other models' vectors."""
        if prune and self._wanted is not None:
            with self.session.transaction() as conn:
                conn.execute("DELETE FROM embeddings WHERE model <> %s", (self._wanted.model_id,))
        if self.embedder is None and self._wanted is None:
            return None
        wanted, todo = self._wanted, 0
        if wanted is not None:
            todo = self._memories() if force else self._pending_count(wanted.model_id)
        report = self.embed(progress=phase(progress, "embedding", todo), force=force)
        if self._embedder is not None:
            self._window(self._embedder, report, progress)
        return report

    def _window(self, embedder: Embedder, report: EmbedReport, progress: Progress | None) -> None:
        """Embed anew the memories whose stored windows are not their text's
        (:func:`mnemex.engine.embedding.rewindowed`); the others are left as they are.
        Its phase of ``progress`` counts the memories looked at (those with vectors)."""
        from mnemex.engine.embedding import REWINDOWING, rewindowed
        from mnemex.results import Pending

        if not self.session.settings.embed_windows or getattr(embedder, "windows", None) is None:
            return
        advance = phase(progress, REWINDOWING, self._memories() - report.pending)
        last = 0
        while True:
            with self.session.connection() as conn:
                rows = conn.execute(
                    _WINDOWED,
                    {
                        "after": last,
                        "model": embedder.model_id,
                        "limit": BATCH,
                        "base": embedders.SENTENCE_BASE,
                    },
                ).fetchall()
            if not rows:
                return
            last = rows[-1][0]
            stored = [(Pending(r[0], r[1], r[2]), (int(r[3]), int(r[4]))) for r in rows]
            stale = rewindowed(stored, functools.partial(self.pieces, embedder))
            if stale:
                texts, _ = self._store(
                    embedder, [(r.seq, r.content, r.content_hash) for r in stale], {}
                )
                report.embedded += texts
            if advance is not None:
                advance(len(rows))

    def embed_new(
        self, seqs: Sequence[int], primed: dict[str, Any] | None = None, **_: Any
    ) -> EmbedReport | None:
        """Embed memories just written. On failure they stay stored without vectors; the
        memories an earlier write left so are caught up after (as SQLite's
        :meth:`mnemex.engine.sqlite.embedding.Embedding.embed_new` does)."""
        from mnemex.engine.embedding import Backlog, catch_up_size
        from mnemex.results import EmbedReport

        embedder = self.embedder
        if embedder is None:
            return None
        backlog = Backlog(self.session, "%s")
        earlier = backlog.marked()
        if not seqs and not earlier:
            return None
        report = EmbedReport(model=embedder.model_id)
        try:
            if seqs and not earlier:
                backlog.set("a write is embedding its memories")  # left if it is interrupted
            if seqs:
                self._run(embedder, list(seqs), report, None)
                self._record(embedder)
            if earlier:
                self.catch_up(catch_up_size(len(seqs)))
            elif seqs:
                backlog.clear()
            self.last_error = None
        except (EmbeddingError, MissingExtra, IndexMismatch) as exc:
            self.last_error = report.error = str(exc)
            logger().warning("memories stored without vectors (run `mnemex embed`): %s", exc)
            backlog.set(str(exc))
        return report

    def catch_up(self, most: int) -> int:
        """Embed up to ``most`` of the memories without a vector, saying so; clear the
        backlog mark when none is left. Returns how many are left."""
        from mnemex.engine.embedding import Backlog, say_catching_up, say_left
        from mnemex.results import EmbedReport

        embedder = self.embedder
        if embedder is None:
            return 0
        pending = self._pending_count(embedder.model_id)
        doing = min(most, pending)
        if doing:
            say_catching_up(doing, pending)
        report = EmbedReport(model=embedder.model_id)
        done = [0]
        self._run(embedder, None, report, lambda n: done.__setitem__(0, done[0] + n), most=doing)
        left = pending - done[0]
        if left <= 0:
            Backlog(self.session, "%s").clear()
        say_left(left)
        return max(0, left)

    def _run(
        self,
        embedder: Embedder,
        seqs: list[int] | None,
        report: EmbedReport,
        progress: Callable[[int], None] | None,
        most: int | None = None,
    ) -> None:
        """Embed the memories ``seqs`` (``None``: every one without a vector, or the first
        ``most`` of them), a batch at a time: read, embed (no connection held), write."""
        last, done = 0, 0
        while most is None or done < most:
            only = "" if seqs is None else "AND m.seq = ANY(%(seqs)s)"
            limit = BATCH if most is None else min(BATCH, most - done)
            with self.session.connection() as conn:
                rows = conn.execute(
                    _PENDING.replace("{only}", only),
                    {
                        "after": last,
                        "model": embedder.model_id,
                        "limit": limit,
                        "seqs": seqs,
                        "chars": None if most is None else CATCH_UP_MAX_CHARS,
                    },
                ).fetchall()
            if not rows:
                return
            with self.session.connection() as conn:
                stored = stored_windows(conn, embedder.model_id, [r[2] for r in rows])
            texts, items = self._store(embedder, rows, stored)
            report.embedded += texts
            report.reused += items - texts
            if progress is not None:
                progress(len(rows))
            last, done = rows[-1][0], done + len(rows)

    def _store(
        self, embedder: Embedder, rows: Sequence[Any], stored: dict[str, list[tuple[int, Any]]]
    ) -> tuple[int, int]:
        """Give each row (seq, content, content hash) its windows' vectors (with their
        numbers): ``stored``'s for its hash, else embedded (no connection held), then
        written in one batch. Returns (texts embedded, vectors written)."""
        new = [r for r in rows if r[2] not in stored]
        windows = {r[0]: self.pieces(embedder, r[1]) for r in new}
        texts = list(dict.fromkeys(p for pieces in windows.values() for _, p in pieces))
        vectors: Any = embed_checked(embedder, texts) if texts else []
        by_text = {t: vectors[i] for i, t in enumerate(texts)}
        for r in new:
            stored.setdefault(r[2], [(w, by_text[piece]) for w, piece in windows[r[0]]])
        items = [
            (seq, digest, vector, window)
            for seq, _, digest in rows
            for window, vector in stored[digest]
        ]
        with self.session.connection() as conn:
            insert_vectors(conn, embedder.model_id, items)
        return len(texts), len(items)

    def _memories(self) -> int:
        with self.session.connection() as conn:
            row = conn.execute("SELECT count(*) FROM memories").fetchone()
        return int(row[0]) if row else 0

    def _pending_count(self, model: str) -> int:
        with self.session.connection() as conn:
            row = conn.execute(
                "SELECT count(*) FROM memories AS m WHERE NOT EXISTS (SELECT 1 FROM embeddings "
                "AS e WHERE e.seq = m.seq AND e.model = %s)",
                (model,),
            ).fetchone()
        return int(row[0]) if row else 0
