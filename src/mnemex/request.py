"""What a search runs: the request (:class:`Request`, its ranking stages in
:class:`Ranking`) and the plan decided from it once (:class:`Plan`).

Values only: :mod:`mnemex.search.pipeline` builds and runs them, and every engine's
retrieval (:class:`~mnemex.search.pipeline.Retriever`) reads them, so both import
them from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from mnemex.config import SearchOptions, Settings
from mnemex.index.retrieval import Filters, LexicalPlan
from mnemex.records import dataclass
from mnemex.text import parse_time

if TYPE_CHECKING:
    import numpy as np


class Pending(Protocol):
    """The query's vector on its way (:class:`mnemex.workers.Job`)."""

    def done(self) -> bool: ...
    def cancel(self) -> bool: ...
    def result(self, timeout: float | None = None) -> np.ndarray: ...


@dataclass(frozen=True, slots=True)
class Ranking:
    """What the ranking keeps after fusion (each arm's minimum score, the relevance floor)
    and the ranking stages that run then: each one's value by name
    (:data:`mnemex.search.stages.STAGES`; absent, false or 0: it does not run)."""

    min_text_score: float = 0.0
    min_vector_score: float = 0.0
    floor: bool = False  # the relevance floor (mnemex.search.floor)
    stages: Mapping[str, Any] = field(default_factory=dict)

    @property
    def reorders(self) -> bool:
        """True when a stage may change the fused order (so more candidates are needed)."""
        return any(self.stages.values())


@dataclass(frozen=True, slots=True)
class Request:
    """One search, as the engines run it."""

    query: str
    limit: int
    filters: Filters
    mode: str  # lexical | vector | hybrid
    fusion: str  # rrf | weighted
    rrf_k: int
    vector_weight: float
    text_weight: float
    raw: bool = False
    explain: bool = False
    snippets: bool = True
    ranking: Ranking = field(default_factory=Ranking)
    expand: bool = True  # query expansion (mnemex.index.query.expand_terms)
    now: datetime | None = None  # the time ages are measured from (default: now)

    @classmethod
    def of(
        cls,
        query: str,
        filters: Filters,
        options: SearchOptions,
        settings: Settings,
        vectors: bool,
        stages: Mapping[str, Any],
    ) -> Request:
        """What the pipeline runs: the ``options``, with ``auto`` resolved by whether
        there are ``vectors``, and the value of each ranking stage
        (:func:`mnemex.search.stages.switches`)."""
        s, threshold, now = settings, options.threshold, options.now
        ranking = Ranking(
            min_text_score=s.min_text_score if threshold else 0.0,
            min_vector_score=s.min_vector_score if threshold else -1.0,
            floor=s.relevance_floor and threshold,
            stages=stages,
        )
        return cls(
            query=query,
            limit=options.limit,
            filters=filters,
            mode=options.mode_for(vectors),
            fusion=options.fusion,
            rrf_k=options.rrf_k,
            vector_weight=options.vector_weight,
            text_weight=options.text_weight,
            raw=options.raw,
            explain=options.explain,
            snippets=options.snippets,
            ranking=ranking,
            expand=options.expand,
            now=None if now is None else parse_time(now, what="now"),
        )


class Plan(NamedTuple):
    """What a search runs, decided once: the query text, the mode, the lexical plan, the
    query's vector on its way (``None``: lexical only) and why the mode changed."""

    text: str
    mode: str
    lexical: LexicalPlan
    pending: Pending | None
    pool: int  # candidates each arm fetches
    notes: tuple[str, ...] = ()


# The memories just before and after one in its thread (None at an end), and the thread:
# its namespace and source.
Neighbours = tuple[int | None, int | None, tuple[str, str]]
