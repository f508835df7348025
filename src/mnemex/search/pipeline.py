"""The search pipeline, top to bottom: :func:`run_search` calls a function per step.

1. Plan the arms (:func:`plan_arms`): clean the query text (any string is safe), decide
   the mode once, embed the query (vector and hybrid modes) on a worker thread, waiting
   at most ``query_timeout``, and plan the lexical search meanwhile: FTS5's tokenizer,
   stop words out, statistics in.
2. Retrieve each arm (:func:`retrieve_arms`, I/O) within the filters,
   ``min(200, 4 × limit)`` candidates: BM25 from FTS5, cosine from the vector index.
   If the lexical arm found nothing, stop words were dropped and there is no vector
   arm, retry with them (a stop-word ranking would only add noise to a fusion). If the
   query could not be embedded, answer from the lexical arm and say so in
   ``mode_used`` and ``notes``.
3. Complete the scores (:func:`complete_scores`, I/O): for a fusion that adds the
   arms' scores, fetch each candidate's score in the arm that did not return it.
4. Fuse (:func:`fuse`, formulas in :data:`mnemex.search.fusion.FORMULAS`): adaptive
   (default: weighted, the weights moved towards the arm surer of this query's
   answer), weighted or RRF; a single arm keeps its own normalized score.
5. Rank (:func:`rank_candidates`, stages in :mod:`mnemex.search.rank`): the relevance
   floor, each arm's threshold in its own units, then decay, confidence and MMR as
   configured.
6. Build the hits (:func:`build_hits`, I/O): the top ``limit`` memories, their
   snippets and, for chunks of workspace files, their place (``path:start-end``), in
   one query each; the explain trace, when asked, from what the stages returned.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from mnemex.config import SNIPPET_MAX_CHARS, Settings
from mnemex.embed import Embedder, embed_checked
from mnemex.engine import engine_of
from mnemex.engine.workspaces import SQLITE
from mnemex.errors import EmbeddingError, IndexMismatch, MissingExtra
from mnemex.index import fts
from mnemex.index.fts import Candidate, Filters, LexicalPlan, Lexicon
from mnemex.index.query import normalized_score
from mnemex.index.stopwords import STOPWORDS
from mnemex.models import Hit, Location, SearchResult
from mnemex.request import Pending, Plan, Ranking, Request
from mnemex.search import background, fusion, rank, spelling
from mnemex.search.floor import (
    FLOOR_VERSION,
    Evidence,
    Floor,
    floor_for,
    model_words,
    readable,
    relevant_hit,
    relevant_query,
)
from mnemex.search.floor import lift as floor_lift
from mnemex.search.fusion import Fused
from mnemex.search.workers import Job, Workers
from mnemex.storage import IN_CHUNK, marks, read_transaction
from mnemex.text import clean_query, clip, parse_stored_time, summarize, utcnow

if TYPE_CHECKING:
    from collections.abc import Sequence
    from contextlib import AbstractContextManager

    import numpy as np

    from mnemex.index.vectors import VectorHit, VectorIndex

CANDIDATE_MULTIPLIER = 4  # seed 004
MAX_CANDIDATES = 200
FALLBACK_SNIPPET_CHARS = 240  # a hit the lexical arm did not find shows the start of its text
PARALLEL_MAX_ROWS = 250_000  # vector rows up to which the arms run side by side
# Vector rows up to which a product done here runs on one BLAS thread: waking a second
# thread costs more than it saves on so few rows, and far more on a busy machine.
ONE_THREAD_MAX_ROWS = 20_000
NOTHING_RELEVANT = (
    "nothing stored is relevant to the query (no memory reaches the relevance floor): no hits"
)

_pool: Workers | None = None
_pool_lock = threading.Lock()


def _query_pool() -> Workers:
    """The workers that embed the query and run the vector arm (made on first use: a
    lexical search, as in a hook process, starts no thread)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = Workers(2, "mnemex-query")
        return _pool


_blas: Any = None


def _one_blas_thread() -> Any:
    """Limit the BLAS library to one thread (threadpoolctl) until the returned
    limiter's ``restore_original_limits()``."""
    global _blas
    if _blas is None:
        from threadpoolctl import ThreadpoolController

        _blas = ThreadpoolController()
    return _blas.limit(limits=1, user_api="blas")


def wait_quietly(job: Job[Any]) -> None:
    """Let a worker finish before its inputs go away (its error, if any, is already raised)."""
    with contextlib.suppress(Exception):
        job.result()


def _wait_for_query(pending: Pending, timeout: float, notes: list[str]) -> Any:
    """The query's vector, or ``None`` (with a note) when embedding it failed or took too long."""
    try:
        return pending.result(timeout=timeout)[0]
    except TimeoutError:
        notes.append(f"embedding the query took over {timeout:g} s: answered from the lexical arm")
    except (EmbeddingError, MissingExtra) as exc:
        notes.append(f"the query could not be embedded ({exc}): answered from the lexical arm")
    return None


def candidate_pool(limit: int) -> int:
    """Candidates each arm fetches: ``min(200, 4 × limit)``, never fewer than ``limit``."""
    return max(limit, min(MAX_CANDIDATES, CANDIDATE_MULTIPLIER * limit))


class VectorArm(Protocol):
    """The vector arm's hits, when done (:meth:`result`), and the release of what it held."""

    def result(self) -> Sequence[VectorHit]: ...
    def close(self) -> None: ...


# The memories just before and after one in its thread (None at an end), and the thread:
# its namespace and source.
Neighbours = tuple[int | None, int | None, tuple[str, str]]


class Retriever(Protocol):
    """The seam between the pipeline and a storage engine: what a search reads.

    :class:`Engine` is SQLite's (FTS5 and the in-process vector index);
    ``mnemex.engine.postgres.retrieval.PostgresEngine`` is PostgreSQL's. Planning,
    fusion, ranking and building hits are the pipeline's, shared by both.
    """

    settings: Settings
    embedder: Embedder | None
    backgrounds: dict[Any, Any]  # the session's background levels (mnemex.search.background)

    def snapshot(self) -> AbstractContextManager[Any]: ...
    def plan(self, request: Request, text: str) -> LexicalPlan: ...
    def with_dropped(self, lexical: LexicalPlan) -> LexicalPlan: ...
    def lexical(self, request: Request, lexical: LexicalPlan, pool: int) -> fts.Retrieval: ...
    def warm(self, dim: int) -> None: ...
    def vector_arm(
        self, request: Request, planned: Plan, qvec: np.ndarray, side: bool, notes: list[str]
    ) -> VectorArm | None: ...
    def bm25_of(self, lexical: LexicalPlan, seqs: Sequence[int]) -> dict[int, float]: ...
    def cosines_of(self, seqs: list[int], qvec: np.ndarray) -> dict[int, float]: ...
    def token_cosines_of(self, seqs: list[int], qvec: np.ndarray) -> dict[int, float]: ...
    def vectors_of(self, seqs: list[int], dim: int) -> dict[int, Any]: ...
    def rows(self, seqs: list[int]) -> dict[int, tuple[Any, ...]]: ...
    def meta(self, seqs: list[int]) -> dict[int, tuple[Any, ...]]: ...
    def neighbours(self, seqs: list[int]) -> dict[int, Neighbours]: ...
    def contents(self, seqs: list[int]) -> list[tuple[int, str]]: ...
    def similar_terms(
        self, first: str, lengths: tuple[int, int], namespace: str | None
    ) -> list[tuple[str, int]]: ...
    def surface_of(self, term: str, namespace: str | None) -> str | None: ...
    def vector_count(self, filters: Filters) -> int: ...
    def best_cosines(self, filters: Filters, queries: np.ndarray) -> list[float]: ...
    def sample_cosines(self, filters: Filters, queries: np.ndarray, rows: int) -> list[float]: ...
    def avg_tokens(self, lexical: LexicalPlan) -> float: ...
    def locations(self, seqs: list[int]) -> dict[int, Location]: ...
    def snippets(self, match: str, seqs: list[int]) -> dict[int, str]: ...


@dataclass
class Engine:
    """What a search reads in SQLite: the connection, the lexicon, and the vectors if any."""

    conn: sqlite3.Connection
    lexicon: Lexicon
    settings: Settings
    embedder: Embedder | None
    vectors: Any  # Callable[[int], VectorIndex]: the index for a dimension
    backgrounds: dict[Any, Any] = field(default_factory=dict)  # the session's levels

    def snapshot(self) -> AbstractContextManager[Any]:
        return read_transaction(self.conn)

    def plan(self, request: Request, text: str) -> LexicalPlan:
        if request.raw:
            return fts.plan_raw(self.lexicon, text)
        stopwords, ns = STOPWORDS if request.expand else None, request.filters.namespace
        return fts.plan(self.lexicon, text, stopwords, expand=request.expand, namespace=ns)

    def with_dropped(self, lexical: LexicalPlan) -> LexicalPlan:
        return lexical.with_dropped(self.lexicon)

    def lexical(self, request: Request, lexical: LexicalPlan, pool: int) -> fts.Retrieval:
        budget = self.settings.lexical_budget
        return fts.retrieve(self.conn, lexical, request.filters, pool, budget)

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
        self, first: str, lengths: tuple[int, int], namespace: str | None
    ) -> list[tuple[str, int]]:
        return fts.similar_terms(self.lexicon, first, lengths, namespace)

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

    def saved_backgrounds(self, dim: int) -> background.Saved | None:
        """Where the store's backgrounds are kept for the next process: beside the vector
        snapshot, stamped as it is (none for a store in memory)."""
        from mnemex.index.vectors import backgrounds_path

        index = self.vectors(dim)
        if index.snapshot is None:
            return None
        row = self.conn.execute("SELECT value FROM meta WHERE key = 'created_at'").fetchone()
        stamp = {"lineage": "" if row is None else str(row[0]), "model": index.model, "dim": dim}
        return background.Saved(backgrounds_path(index.snapshot), stamp)

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


def retriever(session: Any, conn: Any, embedder: Embedder | None) -> Retriever:
    """What a search on ``conn``, a connection of ``session``, reads: :class:`Engine` for
    SQLite, ``mnemex.engine.postgres.retrieval.PostgresEngine`` for PostgreSQL."""
    if engine_of(session) != "SQLite":
        from mnemex.engine.postgres.retrieval import PostgresEngine

        return PostgresEngine(conn, session.settings, embedder, backgrounds=session.backgrounds)
    return Engine(
        conn, session.lexicon, session.settings, embedder, session.vectors, session.backgrounds
    )


class Arms(NamedTuple):
    """Each arm's candidates, best first, and the mode that answered."""

    mode: str
    lexical: LexicalPlan  # the plan the lexical arm ran (stop words back after a retry)
    lexical_hits: list[Candidate]
    vector_hits: Sequence[VectorHit]
    query_vector: np.ndarray | None
    notes: tuple[str, ...] = ()
    text: str = ""  # the query as searched (misspellings of the store's words corrected)


class Scores(NamedTuple):
    """Each candidate's score in each arm: normalized BM25 and cosine."""

    text: dict[int, float]
    cosine: dict[int, float]


class Ranked(NamedTuple):
    """The candidates the ranking kept, best first, their scores and their trace."""

    order: list[int]
    scores: dict[int, float]
    candidates: int  # how many the fusion returned
    stages: dict[int, list[dict[str, Any]]]  # each candidate's ranking stages, for explain
    notes: tuple[str, ...] = ()
    floor: dict[str, Any] | None = None  # the relevance floor's decision (None: it did not run)


def run_search(engine: Retriever, request: Request) -> SearchResult:
    started = time.perf_counter()
    planned = plan_arms(engine, request)
    with engine.snapshot():
        arms = retrieve_arms(engine, request, planned)
        scores = complete_scores(engine, request, arms)
        fused = fuse(request, arms, scores)
        ranked = rank_candidates(engine, request, arms, scores, fused)
        hits = build_hits(engine, request, arms, scores, fused, ranked)
    notes = [*planned.notes, *arms.notes, *ranked.notes]
    if not hits and not ranked.notes:
        notes.append("no memory matches the query: no hits")
    return SearchResult(
        query=request.query if isinstance(request.query, str) else planned.text,
        hits=hits,
        mode_used=arms.mode,
        namespace="*" if request.filters.namespace is None else request.filters.namespace,
        took_ms=(time.perf_counter() - started) * 1000,
        fusion=fused.label,
        fusion_version=fused.version,
        notes=tuple(notes),
        floor=ranked.floor,
    )


def plan_arms(engine: Retriever, request: Request) -> Plan:
    """1. The mode, the lexical plan, and the query being embedded on a worker."""
    notes: list[str] = []
    text = clean_query(request.query)
    pending = None
    if request.mode in ("vector", "hybrid"):
        pending = _embed_query(engine, text, notes)
    lexical = engine.plan(request, text)
    corrected = _correct(engine, request, lexical, text)
    if corrected is not None:
        text, lexical, note = corrected
        notes.append(note)
        if pending is not None:
            pending.cancel()
            pending = _embed_query(engine, text, notes)
    mode = request.mode if pending is not None else "lexical"
    return Plan(text, mode, lexical, pending, candidate_pool(request.limit), tuple(notes))


def _correct(
    engine: Retriever, request: Request, lexical: LexicalPlan, text: str
) -> tuple[str, LexicalPlan, str] | None:
    """The query with its misspellings of the store's words corrected
    (:mod:`mnemex.search.spelling`; I/O: the namespace's similar terms, how a memory writes
    one): its text, its plan and a note saying so; ``None`` when nothing is."""
    if request.raw or not request.expand or not engine.settings.spelling:
        return None
    vocabulary, first = model_words()
    namespace = request.filters.namespace
    fixes: list[tuple[str, str]] = []
    for term, df in zip(lexical.terms, lexical.doc_freqs, strict=True):
        if len(fixes) == spelling.MAX_CORRECTIONS:
            break
        if term.phrase or not spelling.worth_correcting(term.word, df, vocabulary):
            continue
        held = engine.similar_terms(term.key[:1], spelling.length_range(term.key), namespace)
        found = spelling.nearest(term.key, held)
        surface = None if found is None else engine.surface_of(found.meant, namespace)
        if found is None or not surface:
            continue
        mean = engine.avg_tokens(lexical)
        held_by = [(surface.lower(), found.held)]
        if floor_lift(held_by, lexical.n_docs, mean, vocabulary, first) >= spelling.MIN_LIFT:
            fixes.append((term.word, surface))
    corrected = text
    for written, surface in fixes:
        corrected = re.sub(rf"(?<!\w){re.escape(written)}(?!\w)", surface, corrected, flags=re.I)
    if corrected == text:
        return None
    said = ", ".join(f"{written!r} as {surface!r}" for written, surface in fixes)
    note = f"read {said}: no memory searched holds the word as written"
    return corrected, engine.plan(request, corrected), note


def retrieve_arms(engine: Retriever, request: Request, planned: Plan) -> Arms:
    """2. Each arm's candidates (I/O).

    While the query is still being embedded on a worker, the lexical arm (SQLite) runs
    here first, then the vector arm. With the query's vector already there, when the
    vector arm's matrix product is small enough to take about as long as the lexical
    arm, it runs on a worker with one BLAS thread while the lexical arm runs here:
    measured faster on two cores than one after the other. A large product keeps all
    BLAS threads and runs first.
    """
    notes: list[str] = []
    pending = planned.pending
    found = None
    if pending is not None and planned.mode == "hybrid" and not pending.done():
        found = engine.lexical(request, planned.lexical, planned.pool)
    query_vector = None
    if pending is not None:
        query_vector = _wait_for_query(pending, engine.settings.query_timeout, notes)
    vector = None
    if query_vector is not None:
        side_by_side = found is None and planned.mode == "hybrid"
        vector = engine.vector_arm(request, planned, query_vector, side_by_side, notes)
    mode = planned.mode if vector is not None else "lexical"
    lexical, lexical_hits = planned.lexical, []
    try:
        if mode != "vector":
            if found is None:
                found = engine.lexical(request, lexical, planned.pool)
            if not found.candidates and lexical.dropped and query_vector is None:
                lexical = engine.with_dropped(lexical)
                found = engine.lexical(request, lexical, planned.pool)
            lexical_hits = found.candidates
        vector_hits = [] if vector is None else vector.result()
    finally:
        if vector is not None:
            vector.close()
    return Arms(mode, lexical, lexical_hits, vector_hits, query_vector, tuple(notes), planned.text)


def complete_scores(engine: Retriever, request: Request, arms: Arms) -> Scores:
    """3. Each candidate's score in each arm (I/O). For a fusion that adds the arms' scores,
    a candidate one arm did not return still has a score in that arm: fetch it, so the
    fusion does not depend on how deep each arm looked."""
    norm = arms.lexical.norm
    text = {c.seq: normalized_score(c.raw, norm) for c in arms.lexical_hits}
    cosine = {h.seq: h.cosine for h in arms.vector_hits}
    if arms.mode == "hybrid" and fusion.FORMULAS[request.fusion].complete:
        assert arms.query_vector is not None
        missing = [s for s in cosine if s not in text]
        extra = engine.bm25_of(arms.lexical, missing)
        text.update({s: normalized_score(r, norm) for s, r in extra.items()})
        cosine.update(engine.cosines_of([s for s in text if s not in cosine], arms.query_vector))
    return Scores(text, cosine)


def fuse(request: Request, arms: Arms, scores: Scores) -> Fused:
    """4. One ranking: the request's fusion of both arms, or the one arm's own scores."""
    lexical_order = [c.seq for c in arms.lexical_hits]
    vector_order = [h.seq for h in arms.vector_hits]
    if arms.mode == "vector":
        return Fused({s: max(0.0, c) for s, c in scores.cosine.items()}, vector_order)
    if arms.mode != "hybrid":
        return Fused(scores.text, lexical_order)
    both = fusion.Arms(
        scores.text,
        scores.cosine,
        lexical_order,
        vector_order,
        request.vector_weight,
        request.text_weight,
        request.rrf_k,
    )
    return fusion.fuse(request.fusion, both)


def rank_candidates(
    engine: Retriever, request: Request, arms: Arms, scores: Scores, fused: Fused
) -> Ranked:
    """5. The fused order less what the relevance floor and the thresholds drop, then
    decay, confidence and MMR (reading each candidate's age, confidence and source)."""
    ranking = request.ranking
    notes: list[str] = []
    floor: dict[int, dict[str, Any]] = {}
    order, decision = _relevant(engine, request, arms, fused.order, scores, notes, floor)
    threshold = {
        "stage": "threshold",
        "min_text_score": ranking.min_text_score,
        "min_vector_score": ranking.min_vector_score,
    }
    ranked, stages = fused.scores, dict[int, list[dict[str, Any]]]()
    if order and ranking.reorders:
        ranked, order, stages = _rerank(engine, request, order, fused.scores, arms.query_vector)
    trace = {
        seq: [*([floor[seq]] if seq in floor else []), dict(threshold), *stages.get(seq, ())]
        for seq in order
    }
    return Ranked(order, ranked, len(fused.order), trace, tuple(notes), decision)


def build_hits(
    engine: Retriever, request: Request, arms: Arms, scores: Scores, fused: Fused, ranked: Ranked
) -> tuple[Hit, ...]:
    """6. The top ``limit`` candidates as hits (I/O: their rows, snippets and places, one
    query each), with the explain trace when asked."""
    top = ranked.order[: request.limit]
    rows = engine.rows(top)
    places = engine.locations(top)
    cut = {}
    if request.snippets and not arms.lexical.empty:
        cut = engine.snippets(
            arms.lexical.match,
            top if arms.mode == "vector" else [s for s in top if s in scores.text],
        )
    explain = _explainer(request, arms, scores, fused, ranked) if request.explain else None
    hits = []
    for seq in top:
        row = rows.get(seq)
        if row is None:  # deleted by another connection meanwhile
            continue
        snippet = cut.get(seq) or summarize(row[5], FALLBACK_SNIPPET_CHARS)
        hits.append(
            Hit(
                id=row[1],
                score=ranked.scores[seq],
                snippet=clip(snippet, SNIPPET_MAX_CHARS),
                kind=row[2],
                tags=tuple(json.loads(row[3])),
                created_at=parse_stored_time(row[4]),
                explain=None if explain is None else explain(seq),
                location=places.get(seq),
                namespace=row[6],
            )
        )
    return tuple(hits)


def _embed_query(engine: Retriever, text: str, notes: list[str]) -> Job[np.ndarray] | None:
    """Start embedding the query on a worker; ``None`` when it cannot be (lexical only)."""
    if engine.embedder is None:
        notes.append("no embedder is configured: answered from the lexical arm")
        return None
    if not text.strip():
        return None
    pending = _query_pool().submit(
        embed_checked, engine.embedder, [text], within=engine.settings.query_timeout
    )
    if not getattr(engine.embedder, "lazy_dim", False):
        # Bring the vector index up to date meanwhile: on a cold start this
        # overlaps loading the model with loading the vectors.
        with contextlib.suppress(IndexMismatch):  # reported where the vector arm runs
            engine.warm(engine.embedder.dim)
    return pending


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
            limiter = _one_blas_thread()  # in force until the vector arm is done
            job = _query_pool().submit(index.top, query_vector, mask, planned.pool)
            arm = _VectorArm([], job, limiter)
        else:
            work = index.work(mask)
            limiter = _one_blas_thread() if 0 < work <= ONE_THREAD_MAX_ROWS else None
            try:
                arm = _VectorArm(index.top(query_vector, mask, planned.pool))
            finally:
                if limiter is not None:
                    limiter.restore_original_limits()
    except IndexMismatch as exc:
        notes.append(f"{exc}; answered from the lexical arm")
        return None
    return arm


def _relevant(
    engine: Retriever,
    request: Request,
    arms: Arms,
    order: list[int],
    scores: Scores,
    notes: list[str],
    trace: dict[int, dict[str, Any]],
) -> tuple[list[int], dict[str, Any] | None]:
    """The fused order less what the query type, the relevance floor and the thresholds
    drop (what the floor read of each hit in ``trace``), and the floor's decision
    (:func:`floor_decision`; ``None`` when no floor applies)."""
    ranking, text_scores, cosines = request.ranking, scores.text, scores.cosine
    if request.raw:  # the expression decides membership: no vector-only hits
        order = [seq for seq in order if seq in text_scores]
    floor = None
    if ranking.floor and arms.query_vector is not None and engine.embedder is not None:
        floor = floor_for(engine.embedder.model_id)
    decision = None
    if floor is not None and arms.mode != "lexical":
        candidates = len(order)
        kept, found = _floor(engine, request, arms, floor, order, scores, trace)
        if kept is None:
            notes.append(NOTHING_RELEVANT)
        order = kept or []
        decision = floor_decision(floor, found, kept is not None, candidates, order, scores)
    low_text, low_vector = ranking.min_text_score, ranking.min_vector_score
    passing = [
        s for s in order if rank.passes(text_scores.get(s), cosines.get(s), low_text, low_vector)
    ]
    return passing, decision


def floor_decision(
    floor: Floor,
    found: background.Background | None,
    passed: bool,
    candidates: int,
    kept: list[int],
    scores: Scores,
) -> dict[str, Any]:
    """What the relevance floor decided, for ``SearchResult.floor``: whether the query
    passed, the store's background (``level``, ``memory``; ``None`` when no cosine was
    read), the best cosine and text score among the candidates, the cut-offs, and how many
    candidates it kept."""
    best_cosine = max(scores.cosine.values(), default=None)
    return {
        "version": FLOOR_VERSION,
        "passed": passed,
        "candidates": candidates,
        "kept": len(kept),
        "level": None if found is None else round(found.level, 6),
        "memory": None if found is None else round(found.memory, 6),
        "best_cosine": None if best_cosine is None else round(best_cosine, 6),
        "best_text": round(max(scores.text.values(), default=0.0), 6),
        **dataclasses.asdict(floor),
    }


def _floor(
    engine: Retriever,
    request: Request,
    arms: Arms,
    floor: Floor,
    order: list[int],
    scores: Scores,
    trace: dict[int, dict[str, Any]],
) -> tuple[list[int] | None, background.Background | None]:
    """The candidates the relevance floor keeps (:mod:`mnemex.search.floor`), or ``None``
    when none answers the query (I/O: the store's background level, the text of the
    memories whose text score could let them in, the namespace's mean length); what it
    read of each kept one in ``trace``; and the background it read."""
    query_vector = arms.query_vector
    assert query_vector is not None
    vocabulary, first = model_words()
    found = _background(engine, request, floor, query_vector)
    above: dict[int, tuple[float | None, float | None]] = {}
    if found is not None and readable(arms.text, vocabulary):
        cosines = scores.cosine
        # a memory with sentence windows is judged by its best token window (a sentence
        # window lifts a foreign query's cosine as much as an in-domain one's)
        near = [
            s
            for s in order
            if s in cosines and _counts(floor, found, cosines[s], scores.text.get(s, 0.0))
        ]
        tokens = engine.token_cosines_of(near, query_vector) if near else {}
        for seq, cosine in cosines.items():
            best = tokens.get(seq, cosine)
            above[seq] = (best - found.level, best - found.memory)
    evidence = {}
    for seq in order:
        level, memory = above.get(seq, (None, None))
        evidence[seq] = Evidence(level, memory, scores.text.get(seq, 0.0))

    def lift() -> float:
        lexical = arms.lexical
        terms = [(t.word, df) for t, df in zip(lexical.terms, lexical.doc_freqs, strict=True)]
        mean = engine.avg_tokens(lexical)
        return floor_lift(terms, lexical.n_docs, mean, vocabulary, first)

    if not relevant_query(floor, evidence.values(), lift):
        # A memory the model cannot read has a cosine that says nothing of it: its text
        # score decides (read only when the query is not answered otherwise, and only of
        # the memories whose text score could answer it).
        wordy = [s for s in order if evidence[s].above is not None]
        wordy = [s for s in wordy if evidence[s].text >= floor.unread_text]
        for seq, content in engine.contents(wordy) if wordy else ():
            if not readable(content, vocabulary):
                evidence[seq] = Evidence(None, None, evidence[seq].text)
        if not relevant_query(floor, evidence.values(), lift):
            return None, found
    kept = [s for s in order if relevant_hit(floor, evidence[s])]
    for seq in kept:
        trace[seq] = _floor_stage(floor, found, evidence[seq])
    return kept, found


def _counts(floor: Floor, found: background.Background, cosine: float, text: float) -> bool:
    """Whether a cosine this high could let its memory in (then its token window's is read)."""
    above = cosine - found.level
    return (
        above >= min(floor.above, floor.named_above)
        or above + text >= floor.agree
        or cosine - found.memory >= floor.hit_above
    )


def _floor_stage(
    floor: Floor, found: background.Background | None, evidence: Evidence
) -> dict[str, Any]:
    """What the floor read of a hit, for explain."""

    def rounded(value: float | None) -> float | None:
        return None if value is None else round(value, 6)

    return {
        "stage": "floor",
        "version": FLOOR_VERSION,
        "level": None if found is None else rounded(found.level),
        "memory": None if found is None else rounded(found.memory),
        "above": rounded(evidence.above),
        "beyond": rounded(evidence.beyond),
        "text": rounded(evidence.text),
    }


def _background(
    engine: Retriever, request: Request, floor: Floor, query_vector: np.ndarray
) -> background.Background | None:
    """The store's background within the search's filters (:mod:`mnemex.search.background`),
    or ``None`` when no vector of the model is there to compare with."""
    if engine.embedder is None:
        return None
    try:
        queries = background.vectors(floor.model, engine.embedder)
    except (EmbeddingError, MissingExtra):  # the text scores judge alone
        return None
    if queries.shape[1] != query_vector.shape[0]:
        return None
    filters = request.filters
    dim, timeless = int(queries.shape[1]), filters.since is None and filters.until is None
    return background.cached(
        engine.backgrounds,
        (engine.embedder.model_id, filters),
        engine.vector_count(filters),
        lambda: engine.best_cosines(filters, queries),
        lambda: engine.sample_cosines(filters, queries, background.PAIR_ROWS),
        lambda: engine.saved_backgrounds(dim) if isinstance(engine, Engine) and timeless else None,
    )


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
        others = engine.conn.execute(
            "SELECT model, count(*) FROM embeddings WHERE model != ? GROUP BY model "
            "ORDER BY count(*) DESC LIMIT 3",
            (index.model,),
        ).fetchall()
        if have == 0 and others:
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


def _explainer(
    request: Request, arms: Arms, scores: Scores, fused: Fused, ranked: Ranked
) -> Callable[[int], dict[str, Any]]:
    """A hit's explain trace, assembled from what the stages returned: each arm's rank and
    score, the fusion, every ranking stage."""
    lexical_rank = {c.seq: (i, c.raw) for i, c in enumerate(arms.lexical_hits, start=1)}
    vector_rank = {h.seq: (i, h.cosine) for i, h in enumerate(arms.vector_hits, start=1)}
    norm = arms.lexical.norm
    top_k = {"k": request.limit, "candidates": ranked.candidates, "kept": len(ranked.order)}

    def explain(seq: int) -> dict[str, Any]:
        lex, vec = lexical_rank.get(seq), vector_rank.get(seq)
        return {
            "lexical": None
            if lex is None
            else {
                # BM25 scores are tiny in a small store (IDFs clamped near 0): significant
                # digits, and the norm, so that score = tanh(bm25 / norm) can be checked.
                "rank": lex[0],
                "bm25": float(f"{lex[1]:.6g}"),
                "norm": float(f"{norm:.6g}"),
                "score": round(scores.text[seq], 6),
            },
            "vector": None if vec is None else {"rank": vec[0], "cosine": round(vec[1], 6)},
            "fusion": fused.label,
            "fused": round(fused.scores[seq], 6),
            "stages": [*ranked.stages[seq], {"stage": "top_k", **top_k}],
            "final": round(ranked.scores[seq], 6),
            # Each arm's score for the hit, fetched when the arm did not return it: what
            # the relevance floor and the thresholds read.
            "scores": {
                "text": _rounded(scores.text.get(seq)),
                "cosine": _rounded(scores.cosine.get(seq)),
            },
        }

    return explain


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def _rerank(
    engine: Retriever,
    request: Request,
    order: list[int],
    scores: dict[int, float],
    query_vector: np.ndarray | None,
) -> tuple[dict[int, float], list[int], dict[int, list[dict[str, Any]]]]:
    """Thread, decay, confidence and MMR over the candidates that passed the threshold:
    their scores, their order and what each stage did to each."""
    ranking = request.ranking
    meta = engine.meta(order)
    order = [seq for seq in order if seq in meta]  # deleted meanwhile
    scores = {seq: scores[seq] for seq in order}
    trace: dict[int, list[dict[str, Any]]] = {seq: [] for seq in order}
    if ranking.thread > 0 or ranking.thread_best > 0:
        scores = _threads(engine, ranking, scores, [seq for seq in order if meta[seq][3]], trace)
    if ranking.decay:
        made = {s: (parse_stored_time(meta[s][0]), *meta[s][2:]) for s in order}
        scores, decayed = rank.decay(scores, made, request.now or utcnow(), ranking.half_life_days)
        for seq in order:
            trace[seq].append(decayed[seq])
    if ranking.confidence:
        confidences = {seq: float(meta[seq][1]) for seq in order}
        scores = rank.apply_confidence(scores, confidences)
        for seq in order:
            trace[seq].append({"stage": "confidence", "factor": confidences[seq]})
    order = rank.ranked(scores, order)
    if ranking.mmr and len(order) > 1:
        similarity, name = _similarity(engine, ranking, order, query_vector)
        picked = rank.mmr(order, scores, similarity, request.limit, ranking.mmr_lambda)
        for position, seq in enumerate(picked, start=1):
            trace[seq].append(
                {"stage": "mmr", "similarity": name, "lambda": ranking.mmr_lambda, "pick": position}
            )
        chosen = set(picked)
        order = picked + [seq for seq in order if seq not in chosen]
    return scores, order, trace


def _similarity(
    engine: Retriever, ranking: Ranking, order: list[int], query_vector: np.ndarray | None
) -> tuple[Callable[[int, int], float], str]:
    """Cosine between stored vectors when every candidate has one, else Jaccard over words."""
    if ranking.mmr_similarity != "jaccard" and query_vector is not None:
        vectors = engine.vectors_of(order, int(query_vector.shape[0]))
        if len(vectors) == len(order):
            cache: dict[tuple[int, int], float] = {}

            def cosine(a: int, b: int) -> float:
                key = (a, b) if a < b else (b, a)
                if key not in cache:
                    cache[key] = float(vectors[a] @ vectors[b])
                return cache[key]

            return cosine, "cosine"
    words = {seq: rank.word_set(content) for seq, content in engine.contents(order)}
    return (
        lambda a, b: rank.jaccard(words.get(a, frozenset()), words.get(b, frozenset()))
    ), "jaccard"


def _threads(
    engine: Retriever,
    ranking: Ranking,
    scores: dict[int, float],
    threaded: list[int],
    trace: dict[int, list[dict[str, Any]]],
) -> dict[int, float]:
    """The thread stage over the candidates with a source (``threaded``): what their
    neighbours lend, then the pull of their thread's best; each change in ``trace``."""
    found = engine.neighbours(threaded) if len(threaded) > 1 else {}
    before = scores
    if ranking.thread > 0:
        near = {seq: (previous, following) for seq, (previous, following, _) in found.items()}
        scores, lent = rank.thread_context(scores, near, ranking.thread)
        for seq, stage in lent.items():
            trace[seq].append(stage)
    if ranking.thread_best > 0:
        threads = {seq: thread for seq, (_, _, thread) in found.items()}
        scores, pulled = rank.thread_best(before, scores, threads, ranking.thread_best)
        for seq, stage in pulled.items():
            trace[seq].append(stage)
    return scores


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
