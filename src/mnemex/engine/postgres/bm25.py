"""The lexical arm: BM25 from an inverted index kept in tables, per namespace.

PostgreSQL's ``ts_rank`` is not BM25. Each row's score here is FTS5's
``bm25()`` arithmetic (see :mod:`mnemex.engine.sqlite.fts`): for each query term,
``idf · f·(k1+1) / (f + k1·(1 − b + b·len/avgdl))``, summed, where ``f`` is
the term's frequency in the row, ``len`` the row's tokens, and N, avgdl and
each term's document frequency are the namespace's own (``namespace_stats``,
``term_stats``), so a namespace ranks as it would alone, as on SQLite. IDFs
are computed here by the function SQLite's arm uses
(:func:`mnemex.index.query.idf`); the terms are FTS5's own
(:mod:`mnemex.engine.postgres.tokens`), so the rankings equal SQLite's.

Rows and frequencies come from ``postings`` (namespace, term, seq) → tf, len:
one B-tree range scan per query term, summed per row in one aggregate. Not a
GIN index on a tsvector: a GIN match reads and unpacks every matching row's
whole tsvector, and a common term matches most rows.

A search is shaped as SQLite's arm shapes it (``lexical_budget``, see
:func:`mnemex.index.query.shape`): when the query's terms occur in more rows
together than the budget, the candidates are the rows holding its rarest
terms, and each candidate's postings of the common terms are looked up by
key instead of reading those terms' long lists; every candidate is still
scored with all the terms. A search's cost then follows the budget more than the
store's size. The same rows and scores as SQLite's arm; fewer candidates than the
pool: every matching row scored.

Public surface: :func:`plan` (query text to terms, stop words set aside),
:func:`retrieve` (terms to scored rows, shaped) and :func:`lexical` (every
matching row scored), :func:`scores_of` (given rows), :func:`search` doing
plan and lexical with the SQLite pipeline's retry (stop words put back when
nothing matched).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mnemex.engine.postgres.tokens import lexicon, query_key
from mnemex.index.query import (
    MAX_QUERY_TERMS,
    Term,
    capital_letters,
    content_terms,
    expand_terms,
    idf,
    keep_rarest,
    shape,
)
from mnemex.index.retrieval import BM25_B, BM25_K1, Candidate, Retrieval
from mnemex.index.stopwords import STOPWORDS
from mnemex.records import dataclass

if TYPE_CHECKING:
    import psycopg

# One posting's share of a row's score: ``w`` (the term's IDF, once per time the query
# says it) times FTS5's tf part, in double precision (as FTS5 computes it; numeric
# literals would make PostgreSQL do the arithmetic in ``numeric``, several times slower).
_K1_PLUS_1, _K1, _ONE_LESS_B, _B = (
    f"{v!r}::float8" for v in (BM25_K1 + 1.0, BM25_K1, 1 - BM25_B, BM25_B)
)
_PART = (
    f"{{w}} * ({{tf}} * {_K1_PLUS_1}) / ({{tf}} + {_K1} * ({_ONE_LESS_B} + {_B} * {{len}} "
    "/ %(avgdl)s::float8))"
)
_SCORE = f"""
    SELECT p.seq, sum({_PART.format(w="q.w", tf="p.tf", len="p.len")}) AS score
    FROM unnest(%(keys)s::text[], %(weights)s::float8[]) AS q (term, w)
    {{namespaces}}
    JOIN {{index}}postings AS p ON p.namespace = n.namespace AND p.term = q.term
    {{filters}}
    GROUP BY p.seq
    ORDER BY score DESC, p.seq
    LIMIT %(limit)s"""
# Shaped (see mnemex.index.query.shape): the candidates are the rows holding an
# essential (rare) term, read from those terms' postings; then the candidates'
# postings of the other terms, and only the candidates are scored (with all the terms,
# exactly). Those postings come two ways, chosen per term by :func:`probed`: a term
# whose list is short is read whole from the key and joined to the candidates (``rest``);
# a term whose list is long is looked up by key, one probe per candidate (``probe``; the
# OFFSET 0 fence keeps the planner, which cannot see how long a list is, from reading
# it whole to hash it). The namespace is a constant in those lookups when one is searched.
_SHAPED = f"""
    WITH e AS MATERIALIZED (
        SELECT p.namespace, p.seq, p.tf, p.len, q.w
        FROM unnest(%(keys)s::text[], %(weights)s::float8[]) AS q (term, w)
        {{namespaces}}
        JOIN {{index}}postings AS p ON p.namespace = n.namespace AND p.term = q.term
        {{filters}}
    ),
    c AS (SELECT DISTINCT namespace, seq FROM e)
    SELECT x.seq, sum({_PART.format(w="x.w", tf="x.tf", len="x.len")}) AS score
    FROM (
        SELECT seq, tf, len, w FROM e
        UNION ALL
        SELECT p.seq, p.tf, p.len, r.w
        FROM c CROSS JOIN unnest(%(rest)s::text[], %(rest_weights)s::float8[]) AS r (term, w)
        JOIN {{index}}postings AS p
            ON p.namespace = {{probe_ns}} AND p.term = r.term AND p.seq = c.seq
        UNION ALL
        SELECT c.seq, k.tf, k.len, r.w
        FROM c CROSS JOIN unnest(%(probe)s::text[], %(probe_weights)s::float8[]) AS r (term, w)
        CROSS JOIN LATERAL (
            SELECT p.tf, p.len FROM {{index}}postings AS p
            WHERE p.namespace = {{probe_ns}} AND p.term = r.term AND p.seq = c.seq OFFSET 0
        ) AS k
    ) AS x
    GROUP BY x.seq
    ORDER BY score DESC, x.seq
    LIMIT %(limit)s"""
# The rows ``seqs`` (of the namespace, or of any), each posting looked up by its key: a
# probe per row and term (the OFFSET 0 fence keeps the planner from reading each term's
# whole list to hash it, 13,000 postings for 23 rows in one query), the terms of a row
# summed in the query's order, as before.
_OF = f"""
    SELECT c.seq, sum({_PART.format(w="q.w", tf="p.tf", len="p.len")}) AS score
    FROM memories AS c
    CROSS JOIN unnest(%(keys)s::text[], %(weights)s::float8[]) AS q (term, w)
    CROSS JOIN LATERAL (
        SELECT k.tf, k.len FROM postings AS k
        WHERE k.namespace = c.namespace AND k.term = q.term AND k.seq = c.seq OFFSET 0
    ) AS p
    WHERE c.seq = ANY(%(seqs)s::bigint[]) AND (%(ns)s::text IS NULL OR c.namespace = %(ns)s)
    GROUP BY c.seq"""
# A key probe (a descent of the postings' B-tree) against reading one posting of a list
# in key order: measured in benchmarks/RESULTS.md ("PostgreSQL: the common terms probed").
PROBE_COST = 16
# The note of a shaped search that found fewer candidates than asked (as on SQLite).
FALLBACK = "shaped candidates < pool; scored every matching row"
_ONE = "CROSS JOIN (SELECT %(ns)s::text AS namespace) AS n"
_EVERY = "CROSS JOIN (SELECT DISTINCT namespace FROM {index}namespace_stats) AS n"


@dataclass(frozen=True, slots=True)
class Plan:
    """A query's terms to search, and the stop words set aside (searched when nothing else
    matches)."""

    terms: tuple[Term, ...]
    dropped: tuple[Term, ...]
    stats: Statistics | None = None  # the namespace's, with the kept terms' frequencies


@dataclass(frozen=True, slots=True)
class Statistics:
    """A namespace's (or every namespace's) rows and tokens, and the rows holding each
    term asked for, read in one statement (one snapshot: a term is never counted in
    more rows than the namespace holds)."""

    docs: int
    tokens: int
    doc_freqs: dict[str, int]

    @property
    def avgdl(self) -> float:
        return self.tokens / self.docs if self.docs else 1.0


def statistics(
    conn: psycopg.Connection[Any],
    namespace: str | None,
    keys: Sequence[str] = (),
    index: str = "",
) -> Statistics:
    """The statistics BM25 needs, of a namespace or of every namespace (``None``);
    ``index`` names another index's tables (``relation_``)."""
    only = "" if namespace is None else " AND namespace = %(ns)s"
    row = conn.execute(
        f"""SELECT
            (SELECT coalesce(sum(docs), 0) FROM {index}namespace_stats WHERE true{only}),
            (SELECT coalesce(sum(tokens), 0) FROM {index}namespace_stats WHERE true{only}),
            t.terms, t.docs
        FROM (SELECT coalesce(array_agg(term), '{{}}') AS terms,
                     coalesce(array_agg(docs), '{{}}') AS docs
              FROM (SELECT term, sum(docs) AS docs FROM {index}term_stats
                    WHERE term = ANY(%(keys)s::text[]){only} GROUP BY term) AS g) AS t""".encode(),
        {"ns": namespace, "keys": list(keys)},
    ).fetchone()
    if row is None:
        return Statistics(0, 0, {})
    terms, freqs = row[2], row[3]
    return Statistics(
        int(row[0]), int(row[1]), {str(t): int(f) for t, f in zip(terms, freqs, strict=True)}
    )


def plan(conn: psycopg.Connection[Any], text: str, namespace: str | None) -> Plan:
    """Natural-language text to terms, as the SQLite arm plans it (expanded, stop words
    set aside, at most ``MAX_QUERY_TERMS`` of the rarest kept)."""
    tokens = lexicon().tokenize(text)
    kept, dropped = content_terms(expand_terms(tokens, STOPWORDS, capital_letters(text)))
    stats = statistics(conn, namespace, [query_key(t) for t in kept])
    freqs = stats.doc_freqs
    keep = keep_rarest(kept, [freqs.get(query_key(t), 0) for t in kept], MAX_QUERY_TERMS)
    return Plan(tuple(kept[i] for i in keep), tuple(dropped), stats)


def term_weights(
    conn: psycopg.Connection[Any], terms: Sequence[Term], namespace: str | None, index: str = ""
) -> tuple[Statistics, dict[str, float]]:
    """The statistics, and each stored term key's BM25 weight: its IDF, once per time the
    query says it (terms no row holds left out)."""
    stats = statistics(conn, namespace, [query_key(t) for t in terms], index)
    return stats, weights_of(stats, terms)


def _weighed(
    conn: psycopg.Connection[Any],
    terms: Sequence[Term],
    namespace: str | None,
    stats: Statistics | None,
) -> tuple[Statistics, dict[str, float]]:
    """:func:`term_weights`, with ``stats`` when they hold every term (else read anew)."""
    if stats is None or any(query_key(t) not in stats.doc_freqs for t in terms):
        return term_weights(conn, terms, namespace)
    return stats, weights_of(stats, terms)


def weights_of(stats: Statistics, terms: Sequence[Term]) -> dict[str, float]:
    """Each stored term key's BM25 weight with ``stats`` (which hold the terms' document
    frequencies): its IDF, once per time the query says it (terms no row holds left out)."""
    weights: dict[str, float] = {}
    for term in terms:
        key = query_key(term)
        df = stats.doc_freqs.get(key, 0)
        if df > 0:
            weights[key] = weights.get(key, 0.0) + term.count * idf(df, stats.docs)
    return weights


def lexical(
    conn: psycopg.Connection[Any],
    terms: Sequence[Term],
    namespace: str | None,
    limit: int,
    where: tuple[str, dict[str, Any]] = ("", {}),
) -> list[Candidate]:
    """The best ``limit`` rows of the namespace (``None``: all) for the terms, by BM25,
    best first (ties by seq), every matching row scored. ``where``: SQL (``WHERE ...`` on
    ``postings AS p``, joining what it needs) and its named parameters, to restrict the
    rows scored."""
    return retrieve(conn, terms, namespace, limit, 0, where).candidates


def retrieve(
    conn: psycopg.Connection[Any],
    terms: Sequence[Term],
    namespace: str | None,
    pool: int,
    budget: int,
    where: tuple[str, dict[str, Any]] = ("", {}),
    stats: Statistics | None = None,
) -> Retrieval:
    """:func:`lexical`, shaped as the SQLite arm shapes it (:func:`mnemex.index.query.shape`
    with ``budget``, 0 for none): when the terms' rows add up to more than the budget,
    the candidates are the rows holding the rarest terms, each scored with all of them;
    when they are fewer than ``pool``, every matching row is scored. ``stats``: the
    namespace's, read in this snapshot with the terms' document frequencies (else read
    here)."""
    if not terms or pool <= 0:
        return Retrieval([])
    stats, weights = _weighed(conn, terms, namespace, stats)
    return best(conn, stats, weights, namespace, pool, budget, where)


def best(
    conn: psycopg.Connection[Any],
    stats: Statistics,
    weights: dict[str, float],
    namespace: str | None,
    pool: int,
    budget: int,
    where: tuple[str, dict[str, Any]] = ("", {}),
) -> Retrieval:
    """:func:`retrieve` with the statistics and weights given (``stats.doc_freqs`` of
    every weighted term decide the shaping)."""
    if not weights or pool <= 0:
        return Retrieval([])
    keys = list(weights)
    essential, rest = shape([stats.doc_freqs.get(k, 0) for k in keys], budget, pool)
    if rest:
        kept = {keys[i]: weights[keys[i]] for i in essential}
        candidates = sum(stats.doc_freqs.get(k, 0) for k in kept)  # at most
        long = {keys[i] for i in rest if probed(stats.doc_freqs.get(keys[i], 0), candidates)}
        read = {keys[i]: weights[keys[i]] for i in rest if keys[i] not in long}
        probe = {keys[i]: weights[keys[i]] for i in rest if keys[i] in long}
        query, params = scores_sql(stats, kept, namespace, pool, where, rest=read, probe=probe)
        # Planned for these terms each time: a generic plan (psycopg prepares a statement
        # run five times) reads the common terms' lists whole.
        found = _candidates(conn.execute(query, params, prepare=False).fetchall())
        if len(found) >= pool:
            return Retrieval(found, shaped=True, essential=tuple(kept))
    found = _candidates(
        conn.execute(*scores_sql(stats, weights, namespace, pool, where)).fetchall()
    )
    return Retrieval(found, fallback=bool(rest), notes=[FALLBACK] if rest else [])


def probed(doc_freq: int, candidates: int) -> bool:
    """Whether a term's postings among ``candidates`` rows are cheaper looked up by key,
    one probe per candidate, than read whole (``doc_freq`` of them) and joined: a probe
    costs about as much as reading :data:`PROBE_COST` postings in a row."""
    return doc_freq > PROBE_COST * candidates


def scores_of(
    conn: psycopg.Connection[Any],
    terms: Sequence[Term],
    namespace: str | None,
    seqs: Sequence[int],
    stats: Statistics | None = None,
) -> list[Candidate]:
    """BM25 of the rows ``seqs`` of the namespace (``None``: any) that hold a term, as
    :func:`lexical` scores them; each posting read by its key (no term's list is read).
    ``stats`` as for :func:`retrieve`."""
    if not terms or not seqs:
        return []
    stats, weights = _weighed(conn, terms, namespace, stats)
    if not weights:
        return []
    params = {
        "avgdl": stats.avgdl,
        "keys": list(weights),
        "weights": list(weights.values()),
        "ns": namespace,
        "seqs": list(seqs),
    }
    return _candidates(conn.execute(_OF.encode(), params).fetchall())


def _candidates(rows: Any) -> list[Candidate]:
    return [Candidate(int(seq), float(score)) for seq, score in rows]


def scores_sql(
    stats: Statistics,
    weights: dict[str, float],
    namespace: str | None,
    limit: int | None,
    where: tuple[str, dict[str, Any]] = ("", {}),
    index: str = "",
    rest: dict[str, float] | None = None,
    probe: dict[str, float] | None = None,
) -> tuple[bytes, dict[str, Any]]:
    """The query, and its parameters, that scores the rows of the namespace (``None``:
    all) holding the weighted terms by BM25 with ``stats``: (seq, score), best first, at
    most ``limit`` (``None``: all). ``index`` names another index's tables. With ``rest``
    and ``probe`` (more weighted terms), the rows holding the first terms, scored with
    all of them: the postings of ``rest`` read whole, those of ``probe`` looked up per
    row."""
    query = _SCORE if rest is None and probe is None else _SHAPED
    query = query.replace("{probe_ns}", "c.namespace" if namespace is None else "%(ns)s::text")
    query = query.replace("{namespaces}", _EVERY if namespace is None else _ONE)
    query = query.replace("{filters}", where[0]).replace("{index}", index)
    params = {
        **where[1],
        "avgdl": stats.avgdl,
        "keys": list(weights),
        "weights": list(weights.values()),
        "rest": list(rest or {}),
        "rest_weights": list((rest or {}).values()),
        "probe": list(probe or {}),
        "probe_weights": list((probe or {}).values()),
        "ns": namespace,
        "limit": limit,
    }
    return query.encode(), params


def search(
    conn: psycopg.Connection[Any], text: str, namespace: str | None, limit: int
) -> list[Candidate]:
    """:func:`plan` then :func:`lexical`; with the stop words put back when nothing matched."""
    planned = plan(conn, text, namespace)
    found = lexical(conn, planned.terms, namespace, limit)
    if not found and planned.dropped:
        found = lexical(conn, planned.terms + planned.dropped, namespace, limit)
    return found


def _kept_and_rebuilt(table: str, index: str) -> tuple[tuple[str, str, str], ...]:
    """Each statistic of an index over ``table``, as kept, and as rebuilt from the rows'
    tsvectors."""
    return (
        (
            f"{index}namespace_stats",
            f"SELECT namespace, sum(docs), sum(tokens) FROM {index}namespace_stats "
            "GROUP BY namespace HAVING sum(docs) <> 0 OR sum(tokens) <> 0",
            f"SELECT namespace, count(*), sum(lex_len) FROM {table} GROUP BY namespace",
        ),
        (
            f"{index}term_stats",
            f"SELECT namespace, term, sum(docs) FROM {index}term_stats GROUP BY 1, 2 "
            "HAVING sum(docs) <> 0",
            f"SELECT namespace, t, count(*) FROM {table}, unnest(tsvector_to_array(lex)) AS t "
            "GROUP BY 1, 2",
        ),
        (
            f"{index}postings",
            f"SELECT namespace, term, seq, tf, len FROM {index}postings",
            "SELECT namespace, u.lexeme, seq, cardinality(u.positions), lex_len "
            f"FROM {table}, unnest(lex) AS u",
        ),
    )


_KEPT_AND_REBUILT = (
    *_kept_and_rebuilt("memories", ""),
    *_kept_and_rebuilt("relations", "relation_"),
)


def check(conn: psycopg.Connection[Any]) -> list[str]:
    """Problems with the lexical index: each table the triggers keep that differs from a
    rebuild from the rows (rows kept but not rebuilt, and rebuilt but not kept). Empty
    when the index is sound. Reads every row: a maintenance check, not a hot path."""
    problems = []
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        for table, kept, rebuilt in _KEPT_AND_REBUILT:
            row = conn.execute(
                f"SELECT (SELECT count(*) FROM ({kept} EXCEPT {rebuilt}) AS a), "
                f"(SELECT count(*) FROM ({rebuilt} EXCEPT {kept}) AS b)".encode()
            ).fetchone()
            extra, missing = (int(row[0]), int(row[1])) if row else (0, 0)
            if extra or missing:
                problems.append(
                    f"{table}: {extra} rows that the memories do not give, {missing} missing"
                )
    return problems
