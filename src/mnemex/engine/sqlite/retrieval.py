"""What a search reads in SQLite: the retrieval seam of :mod:`mnemex.search.pipeline`
(its ``Retriever``) over one connection, FTS5 (:mod:`.fts`) and the in-process vector
index (:mod:`.vectors`); PostgreSQL's is :mod:`mnemex.engine.postgres.retrieval`.

The vector arm runs on a worker beside the lexical arm when its product is small
enough, else here, on one BLAS thread for a few rows.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import field
from typing import TYPE_CHECKING, Any

from mnemex.config import SNIPPET_MAX_CHARS, Settings
from mnemex.embed import Embedder
from mnemex.engine.sqlite import fts
from mnemex.engine.sqlite.fts import Lexicon
from mnemex.engine.workspaces import SQLITE
from mnemex.errors import IndexMismatch
from mnemex.index.retrieval import Filters, LexicalPlan, Retrieval, VectorHit, plan, plan_raw
from mnemex.index.stopwords import STOPWORDS
from mnemex.models import Location
from mnemex.records import dataclass
from mnemex.request import Neighbours, Plan, Request
from mnemex.storage import IN_CHUNK, marks, read_transaction
from mnemex.workers import Job, one_blas_thread, query_pool, wait_quietly

if TYPE_CHECKING:
    from pathlib import Path

    import numpy as np

    from mnemex.engine.sqlite.vectors import VectorIndex

PARALLEL_MAX_ROWS = 250_000  # vector rows up to which the arms run side by side
# Vector rows up to which a product done here runs on one BLAS thread: waking a second
# thread costs more than it saves on so few rows, and far more on a busy machine.
ONE_THREAD_MAX_ROWS = 20_000


@dataclass
class Engine:
    """What a search reads in SQLite: the connection, the lexicon, and the vectors if any."""

    conn: sqlite3.Connection
    lexicon: Lexicon
    settings: Settings
    embedder: Embedder | None
    vectors: Any  # Callable[[int], VectorIndex]: the index for a dimension
    backgrounds: dict[Any, Any] = field(default_factory=dict)  # the session's levels
    queries: dict[Any, Any] | None = None  # the session's kept query vectors, if it keeps them

    def snapshot(self) -> AbstractContextManager[Any]:
        return read_transaction(self.conn)

    def plan(self, request: Request, text: str) -> LexicalPlan:
        if request.raw:
            return plan_raw(self.lexicon, text)
        stopwords, ns = STOPWORDS if request.expand else None, request.filters.namespace
        return plan(self.lexicon, text, stopwords, expand=request.expand, namespace=ns)

    def with_dropped(self, lexical: LexicalPlan) -> LexicalPlan:
        return lexical.with_dropped(self.lexicon)

    def lexical(self, request: Request, lexical: LexicalPlan, pool: int) -> Retrieval:
        budget = self.settings.lexical_budget
        filters = request.filters
        if lexical.scope is None and lexical.raw is None:
            # A raw expression keeps the join: FTS5 reads one starting with "*" as a special
            # query ("*reads"), which fails with "no such cursor" over the index alone.
            filters = fts.whole_index(self.lexicon, filters)
        return fts.retrieve(self.conn, lexical, filters, pool, budget)

    def warm(self, dim: int) -> None:
        self.vectors(dim).refresh()

    def vector_arm(
        self, request: Request, planned: Plan, qvec: np.ndarray, side: bool, notes: list[str]
    ) -> _VectorArm | None:
        return _start_vector_arm(self, request, planned, qvec, side, notes)

    def bm25_of(self, lexical: LexicalPlan, seqs: Sequence[int]) -> dict[int, float]:
        return fts.bm25_of(self.conn, self.lexicon, lexical, seqs)

    def cosines_of(self, seqs: list[int], qvec: np.ndarray) -> dict[int, float]:
        return dict(self.vectors(int(qvec.shape[0])).cosines_of(seqs, qvec))

    def token_cosines_of(self, seqs: list[int], qvec: np.ndarray) -> dict[int, float]:
        return dict(self.vectors(int(qvec.shape[0])).token_cosines_of(seqs, qvec))

    def vectors_of(self, seqs: list[int], dim: int) -> dict[int, Any]:
        return dict(self.vectors(dim).vectors_of(seqs))

    def rows(self, seqs: list[int]) -> dict[int, tuple[Any, ...]]:
        return _rows(self.conn, seqs)

    def meta(self, seqs: list[int]) -> dict[int, tuple[Any, ...]]:
        return _meta(self.conn, seqs)

    def neighbours(self, seqs: list[int]) -> dict[int, Neighbours]:
        return _neighbours(self.conn, seqs)

    def contents(self, seqs: list[int]) -> list[tuple[int, str]]:
        sql = f"SELECT seq, content FROM memories WHERE seq IN ({marks(len(seqs))})"
        return list(self.conn.execute(sql, seqs))

    def similar_terms(
        self,
        term: str,
        lengths: tuple[int, int],
        edits: int,
        namespace: str | None,
        keep: Callable[[str], bool],
    ) -> list[tuple[str, int]]:
        return fts.similar_terms(self.lexicon, term, lengths, edits, namespace, keep)

    def surface_of(self, term: str, namespace: str | None) -> str | None:
        return fts.surface_of(self.conn, self.lexicon, term, namespace)

    def vector_count(self, filters: Filters) -> int:
        if self.embedder is None:
            return 0
        mask = self.vectors(self.embedder.dim).mask_for(filters)
        return 0 if mask is None else int(mask.sum())

    def best_cosines(self, filters: Filters, queries: np.ndarray) -> list[float]:
        index = self.vectors(int(queries.shape[1]))
        found: list[float] = index.best_cosines(index.mask_for(filters), queries).tolist()
        return found

    def sample_cosines(self, filters: Filters, queries: np.ndarray, rows: int) -> list[float]:
        index = self.vectors(int(queries.shape[1]))
        found: list[float] = index.sample_cosines(index.mask_for(filters), queries, rows).tolist()
        return found

    def saved_backgrounds(self, dim: int) -> tuple[Path, dict[str, Any]] | None:
        """Where the store's backgrounds are kept for the next process, and the stamp they
        must carry: beside the vector snapshot, stamped as it is (none for a store in
        memory; see :class:`mnemex.search.background.Saved`)."""
        from mnemex.engine.sqlite.vectors import backgrounds_path

        index = self.vectors(dim)
        if index.snapshot is None:
            return None
        row = self.conn.execute("SELECT value FROM meta WHERE key = 'created_at'").fetchone()
        stamp = {"lineage": "" if row is None else str(row[0]), "model": index.model, "dim": dim}
        return backgrounds_path(index.snapshot), stamp

    def avg_tokens(self, lexical: LexicalPlan) -> float:
        if lexical.scope is not None:
            return lexical.scope.avgdl
        return fts.avg_tokens(self.conn)

    def locations(self, seqs: list[int]) -> dict[int, Location]:
        return SQLITE.locations(self.conn, seqs)

    def snippets(self, match: str, seqs: list[int]) -> dict[int, str]:
        s = self.settings
        return fts.snippets(
            self.conn,
            match,
            seqs,
            start=s.highlight_start,
            end=s.highlight_end,
            tokens=s.snippet_tokens,
        )


@dataclass
class _VectorArm:
    """The vector arm's hits, or the worker computing them and the BLAS limit in force."""

    hits: list[VectorHit]
    job: Job[list[VectorHit]] | None = None
    limiter: Any = None

    def result(self) -> list[VectorHit]:
        return self.hits if self.job is None else self.job.result()

    def close(self) -> None:
        if self.job is not None and not self.job.cancel():
            wait_quietly(self.job)
        if self.limiter is not None:
            self.limiter.restore_original_limits()


def _start_vector_arm(
    engine: Engine,
    request: Request,
    planned: Plan,
    query_vector: np.ndarray,
    side_by_side: bool,
    notes: list[str],
) -> _VectorArm | None:
    """The vector arm, on a worker when ``side_by_side`` and its product is small, else
    done here; ``None`` (with a note) when the vector index does not fit the query."""
    try:
        index = engine.vectors(int(query_vector.shape[0]))
        mask = index.mask_for(request.filters)
        # Before the arm starts: the index's lock is then free (a worker holds it while it
        # searches, and the lexical arm would wait for it here instead of running beside).
        notes.extend(_coverage_notes(engine, index))
        if side_by_side and index.work(mask) <= PARALLEL_MAX_ROWS:
            limiter = one_blas_thread()  # in force until the vector arm is done
            job = query_pool().submit(index.top, query_vector, mask, planned.pool)
            arm = _VectorArm([], job, limiter)
        else:
            work = index.work(mask)
            limiter = one_blas_thread() if 0 < work <= ONE_THREAD_MAX_ROWS else None
            try:
                arm = _VectorArm(index.top(query_vector, mask, planned.pool))
            finally:
                if limiter is not None:
                    limiter.restore_original_limits()
    except IndexMismatch as exc:
        notes.append(f"{exc}; answered from the lexical arm")
        return None
    return arm


def _rows(conn: sqlite3.Connection, seqs: list[int]) -> dict[int, tuple[Any, ...]]:
    if not seqs:
        return {}
    return {
        r[0]: r
        for r in conn.execute(
            f"SELECT seq, id, kind, tags, created_at, substr(content, 1, {SNIPPET_MAX_CHARS * 2}), "
            f"namespace FROM memories WHERE seq IN ({marks(len(seqs))})",
            seqs,
        )
    }


def _coverage_notes(engine: Engine, index: VectorIndex) -> list[str]:
    """Say when memories lack vectors for the configured model."""
    notes = []
    total = engine.lexicon.n_docs()
    have = index.size
    if have < total:
        # Which model made the store's vectors matters only when none are the configured
        # model's; counting them reads every vector's index entry (48 ms a search at
        # 1,000,000 memories, while a few memories wait for their vectors).
        others = (
            engine.conn.execute(
                "SELECT model, count(*) FROM embeddings WHERE model != ? GROUP BY model "
                "ORDER BY count(*) DESC LIMIT 1",
                (index.model,),
            ).fetchall()
            if have == 0
            else []
        )
        if others:
            notes.append(
                f"the store's vectors were made by {others[0][0]}, not by the configured model "
                f"{index.model}: run `mnemex reindex`"
            )
        else:
            notes.append(
                f"{total - have} of {total} memories have no vector for {index.model} yet: "
                "run `mnemex embed` (or `mnemex reindex`)"
            )
    if index.corrupt:
        notes.append(
            f"{index.corrupt} stored vectors are unreadable and were skipped: run `mnemex reindex --force`"
        )
    return notes


def _neighbours(conn: sqlite3.Connection, seqs: list[int]) -> dict[int, Neighbours]:
    """The memories just before and after each memory in its thread (its namespace and
    source, in the order written), and the thread. Memories without a source, and
    workspace chunks (a file's sections, in a structure of their own), are in no thread."""
    out: dict[int, Neighbours] = {}
    near = (
        "SELECT {} FROM memories AS m WHERE m.namespace = c.namespace AND m.source = c.source "
        "AND m.seq {} c.seq AND m.seq NOT IN (SELECT seq FROM chunks)"
    )
    for start in range(0, len(seqs), IN_CHUNK):
        chunk = seqs[start : start + IN_CHUNK]
        rows = conn.execute(
            f"SELECT c.seq, ({near.format('max(m.seq)', '<')}), ({near.format('min(m.seq)', '>')}), "
            f"c.namespace, c.source FROM memories AS c WHERE c.seq IN ({marks(len(chunk))}) "
            "AND c.source != '' AND c.seq NOT IN (SELECT seq FROM chunks)",
            chunk,
        )
        out.update((seq, (before, after, (ns, source))) for seq, before, after, ns, source in rows)
    return out


def _meta(conn: sqlite3.Connection, seqs: list[int]) -> dict[int, tuple[Any, ...]]:
    """created_at, confidence, pinned and source of each memory."""
    out: dict[int, tuple[Any, ...]] = {}
    for start in range(0, len(seqs), IN_CHUNK):
        chunk = seqs[start : start + IN_CHUNK]
        for seq, created, confidence, pinned, source in conn.execute(
            "SELECT seq, created_at, confidence, pinned, source FROM memories "
            f"WHERE seq IN ({marks(len(chunk))})",
            chunk,
        ):
            out[seq] = (created, confidence, pinned, source)
    return out
