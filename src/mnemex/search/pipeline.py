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
5. Rank (:func:`rank_candidates`): the relevance floor, each arm's threshold in its own
   units, then the ranking stages switched on (:data:`mnemex.search.stages.STAGES`:
   thread, decay, confidence, MMR, and any registered).
6. Build the hits (:func:`build_hits`, I/O): the top ``limit`` memories, their
   snippets and, for chunks of workspace files, their place (``path:start-end``), in
   one query each; the explain trace, when asked, from what the stages returned.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import re
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from mnemex.config import SNIPPET_MAX_CHARS, Settings
from mnemex.embed import Embedder, embed_checked
from mnemex.errors import EmbeddingError, IndexMismatch, MissingExtra
from mnemex.index.query import normalized_score
from mnemex.index.retrieval import Candidate, Filters, LexicalPlan, Retrieval
from mnemex.models import Hit, Location, SearchResult
from mnemex.request import Neighbours, Pending, Plan, Request
from mnemex.search import background, fusion, rank, spelling
from mnemex.search.floor import (
    FLOOR_VERSION,
    Evidence,
    Floor,
    floor_for,
    model_holds,
    model_words,
    readable,
    relevant_hit,
    relevant_query,
)
from mnemex.search.floor import lift as floor_lift
from mnemex.search.fusion import Fused
from mnemex.search.stages import rerank
from mnemex.text import clean_query, clip, parse_stored_time, summarize
from mnemex.workers import Job, query_pool

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence
    from contextlib import AbstractContextManager
    from pathlib import Path

    import numpy as np

    from mnemex.index.retrieval import VectorHit

CANDIDATE_MULTIPLIER = 4  # seed 004
MAX_CANDIDATES = 200
# Query vectors a session keeps, the newest, within kept_query_vectors.
QUERY_VECTORS_KEPT = 8
_kept_lock = threading.Lock()  # the sessions' kept query vectors
FALLBACK_SNIPPET_CHARS = 240  # a hit the lexical arm did not find shows the start of its text
NOTHING_RELEVANT = (
    "nothing stored is relevant to the query (no memory reaches the relevance floor): no hits"
)


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


class Retriever(Protocol):
    """The seam between the pipeline and a storage engine: what a search reads.

    ``mnemex.engine.sqlite.retrieval.Engine`` is SQLite's (FTS5 and the in-process
    vector index);
    ``mnemex.engine.postgres.retrieval.PostgresEngine`` is PostgreSQL's. Planning,
    fusion, ranking and building hits are the pipeline's, shared by both.
    """

    settings: Settings
    embedder: Embedder | None
    backgrounds: dict[Any, Any]  # the session's background levels (mnemex.search.background)
    queries: dict[Any, Any] | None  # the session's kept query vectors (kept_query_vectors)

    def snapshot(self) -> AbstractContextManager[Any]: ...
    def plan(self, request: Request, text: str) -> LexicalPlan: ...
    def with_dropped(self, lexical: LexicalPlan) -> LexicalPlan: ...
    def lexical(self, request: Request, lexical: LexicalPlan, pool: int) -> Retrieval: ...
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
        self,
        term: str,
        lengths: tuple[int, int],
        edits: int,
        namespace: str | None,
        keep: Callable[[str], bool],
    ) -> list[tuple[str, int]]: ...
    def surface_of(self, term: str, namespace: str | None) -> str | None: ...
    def vector_count(self, filters: Filters) -> int: ...
    def best_cosines(self, filters: Filters, queries: np.ndarray) -> list[float]: ...
    def sample_cosines(self, filters: Filters, queries: np.ndarray, rows: int) -> list[float]: ...
    def saved_backgrounds(self, dim: int) -> tuple[Path, dict[str, Any]] | None: ...
    def avg_tokens(self, lexical: LexicalPlan) -> float: ...
    def locations(self, seqs: list[int]) -> dict[int, Location]: ...
    def snippets(self, match: str, seqs: list[int]) -> dict[int, str]: ...


def retriever(session: Any, conn: Any, embedder: Embedder | None) -> Retriever:
    """What a search on ``conn``, a connection of ``session``, reads: the session's engine
    (``mnemex.engine.sqlite.retrieval.Engine``, ``mnemex.engine.postgres.retrieval.PostgresEngine``)."""
    retriever: Retriever = session.retriever(conn, embedder)
    return retriever


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
    unknown = [
        (term, df)
        for term, df in zip(lexical.terms, lexical.doc_freqs, strict=True)
        if not term.phrase and spelling.unheld(term.word, df)
    ]
    if not unknown:
        return None
    known = model_holds()
    namespace = request.filters.namespace
    fixes: list[tuple[str, str]] = []
    for term, df in unknown:
        if len(fixes) == spelling.MAX_CORRECTIONS:
            break
        if not spelling.worth_correcting(term.word, df, known):
            continue
        key = term.key
        close = functools.partial(spelling.near, key)
        lengths = spelling.length_range(key)
        edits = spelling.allowed_edits(key, "x" * lengths[1])  # for the longest term read
        held = engine.similar_terms(key, lengths, edits, namespace, close)
        found = spelling.nearest(key, held)
        surface = None if found is None else engine.surface_of(found.meant, namespace)
        if found is None or not surface:
            continue
        vocabulary, first = model_words()
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
    # What the floor read of each hit: for explain only (a dict per candidate otherwise made
    # on every search, a tenth of a millisecond or more).
    floor: dict[int, dict[str, Any]] | None = {} if request.explain else None
    order, decision = _relevant(engine, request, arms, fused.order, scores, notes, floor)
    ranked, stages = fused.scores, dict[int, list[dict[str, Any]]]()
    if order and ranking.reorders:
        ranked, order, stages = rerank(engine, request, order, fused.scores, arms.query_vector)
    trace: dict[int, list[dict[str, Any]]] = {}
    if floor is not None:
        threshold = {
            "stage": "threshold",
            "min_text_score": ranking.min_text_score,
            "min_vector_score": ranking.min_vector_score,
        }
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
    key = (id(engine.embedder), engine.embedder.model_id, text)
    queries = engine.queries
    with _kept_lock:
        kept = None if queries is None else queries.get(key)
    if kept is not None:
        pending: Job[np.ndarray] = Job(lambda: kept)
        pending.run()
        return pending
    within = engine.settings.query_timeout
    if queries is None:
        pending = query_pool().submit(embed_checked, engine.embedder, [text], within=within)
    else:
        pending = query_pool().submit(_embed_kept, engine.embedder, text, queries, key, within)
    if not getattr(engine.embedder, "lazy_dim", False):
        # Bring the vector index up to date meanwhile: on a cold start this
        # overlaps loading the model with loading the vectors.
        with contextlib.suppress(IndexMismatch):  # reported where the vector arm runs
            engine.warm(engine.embedder.dim)
    return pending


@contextlib.contextmanager
def kept_query_vectors(session: Any) -> Iterator[None]:
    """Within it, the searches of ``session`` keep their query vectors (the
    :data:`QUERY_VECTORS_KEPT` newest) and a text searched again is not embedded again:
    the same model gives the same vector for the same text. For a caller that searches
    one text several times in a row, as the prompt hook does when the first recall finds
    the session's own memories. Outside it every search embeds its query (and learns that
    the embedder is down)."""
    with _kept_lock:
        outer = session.queries
        if outer is None:
            session.queries = {}
    try:
        yield
    finally:
        if outer is None:
            with _kept_lock:
                session.queries = None


def _embed_kept(
    embedder: Embedder, text: str, kept: dict[Any, Any], key: Any, within: float
) -> np.ndarray:
    """The query's vector (a row), kept in ``kept`` under ``key`` among the session's
    :data:`QUERY_VECTORS_KEPT` newest."""
    vectors = embed_checked(embedder, [text], within=within)
    vectors.flags.writeable = False  # shared by the searches of the same text
    with _kept_lock:
        kept.pop(key, None)
        kept[key] = vectors
        while len(kept) > QUERY_VECTORS_KEPT:
            del kept[next(iter(kept))]
    return vectors


def _relevant(
    engine: Retriever,
    request: Request,
    arms: Arms,
    order: list[int],
    scores: Scores,
    notes: list[str],
    trace: dict[int, dict[str, Any]] | None,
) -> tuple[list[int], dict[str, Any] | None]:
    """The fused order less what the query type, the relevance floor and the thresholds
    drop (what the floor read of each hit in ``trace``, unless it is ``None``), and the
    floor's decision
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
    trace: dict[int, dict[str, Any]] | None,
) -> tuple[list[int] | None, background.Background | None]:
    """The candidates the relevance floor keeps (:mod:`mnemex.search.floor`), or ``None``
    when none answers the query (I/O: the store's background level, the text of the
    memories whose text score could let them in, the namespace's mean length); what it
    read of each kept one in ``trace`` (unless ``None``); and the background it read."""
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
    if trace is not None:
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
        lambda: _saved(engine, dim) if timeless else None,
    )


def _saved(engine: Retriever, dim: int) -> background.Saved | None:
    """Where the engine keeps the store's backgrounds for the next process, if it does."""
    place = engine.saved_backgrounds(dim)
    return None if place is None else background.Saved(*place)


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
