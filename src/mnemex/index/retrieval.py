"""What both engines' retrieval shares: the filters of a search, the lexical plan and
how it is built from an index's term statistics, and what each arm returns.

The statements that run a plan are each engine's: SQLite's FTS5 in
:mod:`mnemex.engine.sqlite.fts`, PostgreSQL's in :mod:`mnemex.engine.postgres.bm25`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import field
from datetime import datetime
from typing import Any, Protocol

from mnemex.errors import InvalidQuery
from mnemex.index.query import (
    FTS_OPERATORS,
    MAX_QUERY_TERMS,
    Term,
    Token,
    build_terms,
    capital_letters,
    content_terms,
    expand_terms,
    idf,
    keep_rarest,
    or_join,
)
from mnemex.index.stopwords import ENGLISH, STOPWORDS
from mnemex.records import dataclass
from mnemex.text import clean_label, clean_tags, listed, parse_time

BM25_K1 = 1.2  # FTS5's bm25() constants
BM25_B = 0.75


class TermStatistics(Protocol):
    """What planning reads of a lexical index: its tokenizer and term statistics
    (SQLite's :class:`mnemex.engine.sqlite.fts.Lexicon`)."""

    def tokenize(self, text: str) -> list[Token]: ...

    def n_docs(self) -> int: ...

    def doc_freqs(self, terms: Sequence[Term]) -> list[int]: ...

    def scope(self, namespace: str | None) -> Scope | None: ...

    def postings(self, terms: Sequence[Term], scope: Scope) -> list[Postings]: ...


@dataclass(frozen=True, slots=True)
class Filters:
    """Restrictions every search and timeline applies; ``namespace=None`` means all."""

    namespace: str | None
    kinds: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()  # a memory must carry every one
    since: datetime | None = None  # inclusive
    until: datetime | None = None  # exclusive

    @classmethod
    def of(
        cls, namespace: str | None, kinds: object, tags: object, since: object, until: object
    ) -> Filters:
        """The filters a caller gave, checked: kinds and tags cleaned, times parsed."""
        labels = () if kinds is None else listed(kinds, "kinds")
        return cls(
            namespace=namespace,
            kinds=tuple(dict.fromkeys(clean_label(k, "kind", 40) for k in labels)),
            tags=clean_tags(tags),
            since=None if since is None else parse_time(since, what="since"),
            until=None if until is None else parse_time(until, what="until"),
        )

    @property
    def narrow(self) -> bool:
        """True when anything beyond the namespace restricts the rows."""
        return bool(self.kinds or self.tags or self.since or self.until)


@dataclass(frozen=True, slots=True)
class LexicalPlan:
    """Terms to search with their statistics; built by :func:`plan`."""

    terms: tuple[Term, ...]
    doc_freqs: tuple[int, ...]
    n_docs: int
    dropped: tuple[Term, ...] = ()  # stop words left out (retried when nothing matches)
    dropped_freqs: tuple[int, ...] = ()
    raw: str | None = None  # an FTS5 expression given as is
    scope: Scope | None = None  # statistics of the namespace searched (None: the index's)
    postings: tuple[Postings, ...] = ()  # with a scope: each term's rows in the namespace

    def with_dropped(self, lexicon: TermStatistics | None = None) -> LexicalPlan:
        """The same query with its stop words put back (a scoped plan needs the
        lexicon: the stop words' rows in the namespace are only read now)."""
        if self.scope is None:
            return LexicalPlan(
                terms=self.terms + self.dropped,
                doc_freqs=self.doc_freqs + self.dropped_freqs,
                n_docs=self.n_docs,
            )
        if lexicon is None:
            raise ValueError("a scoped plan puts its stop words back with the lexicon")
        postings = lexicon.postings(self.dropped, self.scope)
        return LexicalPlan(
            terms=self.terms + self.dropped,
            doc_freqs=self.doc_freqs + tuple(len(p) for p in postings),
            n_docs=self.n_docs,
            scope=self.scope,
            postings=self.postings + tuple(postings),
        )

    @property
    def match(self) -> str:
        if self.raw is not None:
            return self.raw
        return or_join(t.expression for t, df in zip(self.terms, self.doc_freqs, strict=True) if df)

    @property
    def norm(self) -> float:
        """Sum of the terms' IDFs, each as often as the query says it (see
        :func:`mnemex.index.query.normalized_score`)."""
        return sum(
            t.count * idf(df, self.n_docs) for t, df in zip(self.terms, self.doc_freqs, strict=True)
        )

    @property
    def empty(self) -> bool:
        return self.raw is None and not any(self.doc_freqs)


@dataclass(frozen=True, slots=True)
class Scope:
    """One namespace's statistics (``namespace_stats``), when other namespaces share the
    index: the lexical arm then scores rows itself with these (see :mod:`mnemex.engine.sqlite.fts`)."""

    namespace: str
    docs: int
    tokens: int
    changes: int  # bumped by every change to the namespace's text
    lo: int  # every row of the namespace has lo <= seq <= hi
    hi: int

    @property
    def avgdl(self) -> float:
        return self.tokens / self.docs if self.docs else 1.0


@dataclass(frozen=True, slots=True)
class Postings:
    """The rows of a namespace holding a term, in seq order: each row's term
    frequency (column-weighted, as ``bm25()`` counts it) and length in tokens."""

    seqs: Any  # numpy int64
    freqs: Any  # numpy float64
    lengths: Any  # numpy float64

    def __len__(self) -> int:
        return len(self.seqs)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A row the lexical arm found, with its BM25 score."""

    seq: int
    raw: float  # BM25, positive, higher is better


@dataclass(slots=True)
class Retrieval:
    """Candidates best first, and how they were found."""

    candidates: list[Candidate]
    shaped: bool = False
    essential: tuple[str, ...] = ()
    fallback: bool = False
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class VectorHit:
    """A row the vector arm found, with its cosine to the query."""

    seq: int
    cosine: float


def plan(
    lexicon: TermStatistics,
    text: str,
    stopwords: frozenset[str] | None = None,
    *,
    expand: bool = True,
    namespace: str | None = None,
) -> LexicalPlan:
    """Tokenize natural-language text and gather the statistics to search it.

    With ``expand`` the query's content words are searched (see
    :func:`mnemex.index.query.expand_terms`) and ``stopwords`` defaults to
    every supported language; without it, every word is a term and only
    English stop words are set aside. With ``namespace`` the statistics are
    that namespace's (see :class:`Scope`) when other namespaces share the index.
    """
    tokens = lexicon.tokenize(text)
    if expand:
        terms = expand_terms(
            tokens, STOPWORDS if stopwords is None else stopwords, capital_letters(text)
        )
    else:
        terms = build_terms(tokens, ENGLISH if stopwords is None else stopwords)
    kept, dropped = content_terms(terms)
    scope = lexicon.scope(namespace)
    if scope is not None:
        postings = lexicon.postings(kept, scope)
        keep = keep_rarest(kept, [len(p) for p in postings], MAX_QUERY_TERMS)
        return LexicalPlan(
            terms=tuple(kept[i] for i in keep),
            doc_freqs=tuple(len(postings[i]) for i in keep),
            n_docs=scope.docs,
            dropped=tuple(dropped),
            scope=scope,
            postings=tuple(postings[i] for i in keep),
        )
    return counted_plan(kept, dropped, lexicon.doc_freqs([*kept, *dropped]), lexicon.n_docs())


def counted_plan(
    kept: Sequence[Term], dropped: Sequence[Term], freqs: Sequence[int], n_docs: int
) -> LexicalPlan:
    """The plan of the ``kept`` terms (at most ``MAX_QUERY_TERMS``, the rarest) and the stop
    words ``dropped``, given the document frequencies of both (in that order)."""
    keep = keep_rarest(kept, freqs[: len(kept)], MAX_QUERY_TERMS)
    return LexicalPlan(
        terms=tuple(kept[i] for i in keep),
        doc_freqs=tuple(freqs[i] for i in keep),
        n_docs=n_docs,
        dropped=tuple(dropped),
        dropped_freqs=tuple(freqs[len(kept) :]),
    )


def plan_raw(lexicon: TermStatistics, expression: str) -> LexicalPlan:
    """A raw FTS5 expression; its bare words give the score normalization."""
    terms = raw_terms(lexicon, expression)
    return raw_plan(expression, terms, lexicon.doc_freqs(terms), lexicon.n_docs())


def raw_terms(lexicon: TermStatistics, expression: str) -> list[Term]:
    """The words of a raw FTS5 expression, operators aside (the score's normalization)."""
    tokens = [t for t in lexicon.tokenize(expression) if t.surface not in FTS_OPERATORS]
    return build_terms(tokens, frozenset())


def raw_plan(
    expression: str, terms: Sequence[Term], doc_freqs: Sequence[int], n_docs: int
) -> LexicalPlan:
    """The plan of a raw FTS5 expression, with its words' document frequencies."""
    return LexicalPlan(
        terms=tuple(terms),
        doc_freqs=tuple(max(1, df) for df in doc_freqs),
        n_docs=n_docs,
        raw=expression,
    )


def invalid_query(expression: str, exc: Exception) -> InvalidQuery:
    """The error of a raw FTS5 expression FTS5 refused (``exc``: FTS5's error)."""
    return InvalidQuery(
        f"invalid FTS5 query {expression!r}: {exc}; "
        "search without the raw FTS5 option to use plain text"
    )
