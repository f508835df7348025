"""Raw FTS5 expressions (``search --raw``) on PostgreSQL, with the meaning they have on SQLite.

1. FTS5 checks the expression (the in-memory table of :mod:`tokens`, with the
   index's columns and tokenizer): a bad one raises :class:`InvalidQuery` with
   FTS5's own message, as on SQLite.
2. :func:`mnemex.index.expression.parse` gives its tree; FTS5 cuts each string
   into terms as it cuts a query's (:func:`tokens.query_tokens`), so a term is
   the ``lex`` lexeme of the same word in a memory.
3. The tree becomes a ``tsquery`` over ``lex``: AND ``&``, OR ``|``, NOT ``& !``,
   a prefix ``:*``; a phrase that FTS5 reduces to nothing (no terms) matches
   nothing, as there. ``lex`` holds each term's count (positions ``1..tf``) over
   both columns, not where the term stands: a phrase, a NEAR group, ``^`` and a
   column filter become the AND of their terms, which every row they match
   holds, and are negated only when exact. When the tsquery is so widened, FTS5
   itself decides: the rows it finds are loaded into the in-memory table and the
   expression is matched there. The expression decides membership either way.
4. The rows tested are found in the postings, not by a scan: those holding the
   cheapest set of terms one of which every match must hold (an AND needs any
   one part's, an OR every part's; :class:`Cover`).
5. The rows are scored by BM25 over the expression's positive terms (those not
   under a NOT), each as often as it is said; a prefix term counts the
   occurrences of every term it begins, with the rows holding any of them as its
   document frequency, as FTS5 scores a prefix. The statistics are the whole
   store's, as ``bm25()`` takes them in SQLite's raw search. (FTS5 scores a
   phrase as one unit; here each of its terms counts.)
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from typing import TYPE_CHECKING, Any

from mnemex.engine.postgres import bm25
from mnemex.engine.postgres.tokens import BATCH, index_key, lexeme, matching, query_tokens
from mnemex.index.expression import COLUMNS, Expr, Leaf, Piece, parse, strings
from mnemex.index.query import idf
from mnemex.index.retrieval import BM25_B, BM25_K1, Candidate, invalid_query
from mnemex.records import dataclass
from mnemex.text import tags_columns

if TYPE_CHECKING:
    import psycopg

Unit = tuple[str, bool]  # a positive term: its key, and whether it is a prefix


@dataclass(frozen=True, slots=True)
class Cover:
    """Terms some of which every row the expression matches holds: ``every`` part's (an
    OR's), or any one part's (an AND's, a phrase's: the rarest is read)."""

    every: bool
    parts: tuple[Cover | Unit, ...]


@dataclass(frozen=True, slots=True)
class Query:
    """A raw expression as PostgreSQL runs it."""

    expression: str
    tsquery: str | None  # None: it matches nothing
    exact: bool  # the tsquery alone decides membership (else FTS5 checks its rows)
    units: tuple[Unit, ...]  # the positive terms, each as often as the expression says it
    cover: Cover | None = None  # where the rows to test are found


@dataclass(frozen=True, slots=True)
class _Part:
    tsquery: str | None
    exact: bool
    units: tuple[Unit, ...]
    cover: Cover | None


_NOTHING = _Part(None, True, (), None)


def translate(expression: str) -> Query:
    """The expression checked by FTS5, parsed, and turned into a tsquery over ``lex``."""
    try:
        matching(expression, [])
    except sqlite3.OperationalError as exc:
        raise invalid_query(expression, exc) from None
    if expression.startswith("*"):  # FTS5's special queries ("*reads"): no memory
        return Query(expression, None, True, ())
    tree = parse(expression)
    texts = list(dict.fromkeys(strings(tree)))
    cut = dict(zip(texts, query_tokens(texts), strict=True))
    part = _part(tree, cut)
    return Query(expression, part.tsquery, part.exact, part.units, part.cover)


def _part(tree: Expr, cut: dict[str, list[str]]) -> _Part:
    if isinstance(tree, Leaf):
        return _leaf(tree, cut)
    parts = [_part(child, cut) for child in tree.children]
    if tree.op == "NOT":
        kept, taken = parts
        if kept.tsquery is None or taken.tsquery is None:
            return kept
        if not taken.exact:  # a wider NOT would take away rows FTS5 keeps
            return _Part(kept.tsquery, False, kept.units, kept.cover)
        # In parentheses, as every part: under another NOT, "!" would take its first term only.
        return _Part(f"({kept.tsquery} & !{taken.tsquery})", kept.exact, kept.units, kept.cover)
    if tree.op == "AND" and not tree.implicit and any(p.tsquery is None for p in parts):
        return _NOTHING  # FTS5: AND with a phrase of no terms matches nothing
    live = [p for p in parts if p.tsquery is not None and p.cover is not None]
    if not live:
        return _NOTHING
    glue = " | " if tree.op == "OR" else " & "
    return _Part(
        "(" + glue.join(str(p.tsquery) for p in live) + ")",
        all(p.exact for p in live),
        tuple(u for p in live for u in p.units),
        Cover(tree.op == "OR", tuple(p.cover for p in live if p.cover is not None)),
    )


def _leaf(leaf: Leaf, cut: dict[str, list[str]]) -> _Part:
    """A phrase or NEAR group: the AND of its terms (FTS5 drops a phrase of no terms
    from a NEAR group; the group of none matches nothing)."""
    phrases = [terms for phrase in leaf.phrases if (terms := _terms(phrase, cut))]
    if not phrases:
        return _NOTHING
    units = tuple(u for terms in phrases for u in terms)
    keys = [index_key(key) for key, _ in units]
    lexemes = dict.fromkeys(
        lexeme(k) + (":*" if prefix else "") for k, (_, prefix) in zip(keys, units, strict=True)
    )
    exact = (
        len(units) == 1
        and not leaf.initial
        and leaf.columns == COLUMNS
        and not (units[0][1] and keys[0] != units[0][0])  # a long term's digest has no prefix
    )
    return _Part("(" + " & ".join(lexemes) + ")", exact, units, Cover(False, units))


def _terms(phrase: tuple[Piece, ...], cut: dict[str, list[str]]) -> list[Unit]:
    """A phrase's terms in order; a string's last one a prefix when it ends with ``*``."""
    out: list[Unit] = []
    for piece in phrase:
        words = cut[piece.text]
        out.extend((w, piece.prefix and i == len(words) - 1) for i, w in enumerate(words))
    return out


# The rows holding a cover term (in the namespace, or in every one) whose terms the
# tsquery matches.
_HITS = """
    SELECT m.seq
    FROM (SELECT DISTINCT p.seq FROM unnest(%(cover)s::text[]) AS k (term)
          {namespaces}
          JOIN postings AS p ON p.namespace = n.namespace AND p.term = k.term) AS c
    JOIN memories AS m ON m.seq = c.seq
    WHERE m.lex @@ %(q)s::tsquery{where}"""
# The BM25 of those rows holding a positive term: each unit's terms' frequencies summed
# in a row, each unit's part summed.
_SCORES = f"""
    SELECT x.seq, sum(x.w * (x.tf * {BM25_K1 + 1.0!r})
                      / (x.tf + {BM25_K1!r} * (1 - {BM25_B!r} + {BM25_B!r} * x.len / %(avgdl)s)))
    FROM (SELECT p.seq, max(u.w) AS w, sum(p.tf) AS tf, max(p.len) AS len
          FROM unnest(%(units)s::int[], %(terms)s::text[], %(ws)s::float8[]) AS u (i, term, w)
          {{namespaces}}
          JOIN postings AS p ON p.namespace = n.namespace AND p.term = u.term
          WHERE p.seq = ANY(%(seqs)s::bigint[])
          GROUP BY p.seq, u.i) AS x
    GROUP BY x.seq"""
_ONE = "CROSS JOIN (SELECT %(ns)s::text AS namespace) AS n"
_EVERY = "CROSS JOIN (SELECT DISTINCT namespace FROM namespace_stats) AS n"

# Each prefix's terms in the store (not CJK pairs: FTS5 has no such term), and the rows
# holding any of them.
_PREFIXES = """
    SELECT u.i, array_agg(DISTINCT t.term), count(DISTINCT p.seq)
    FROM unnest(%(prefixes)s::text[]) WITH ORDINALITY AS u (prefix, i)
    CROSS JOIN LATERAL (
        SELECT DISTINCT namespace, term FROM term_stats
        WHERE starts_with(term, u.prefix) AND strpos(term, ' ') = 0) AS t
    JOIN postings AS p ON p.namespace = t.namespace AND p.term = t.term
    GROUP BY u.i"""
CHECKED = 50  # rows FTS5 checks first, best first (then twice as many each time)


@dataclass(frozen=True, slots=True)
class _Unit:
    """A positive unit's stored terms, its document frequency and its BM25 weight."""

    terms: list[str]
    df: int
    weight: float


def search(
    conn: psycopg.Connection[Any],
    query: Query,
    namespace: str | None,
    limit: int,
    where: tuple[str, dict[str, Any]] = ("", {}),
) -> list[Candidate]:
    """The best ``limit`` memories of the namespace (``None``: all) the expression
    matches, by BM25, best first (ties by seq). ``where``: more conditions (``AND ...``
    on ``memories AS m``) and their parameters.

    The rows to test are those holding the cheapest set of terms one of which every
    match holds (:class:`Cover`), read from the postings; the tsquery tests them and
    the matches are scored. When the tsquery is wider than the expression, FTS5 then
    checks them best first, ``CHECKED`` first and twice as many each time, until
    ``limit`` pass: the cost of the check follows the hits wanted, not the rows.

    The statements are never prepared: a generic plan is blind to how many rows the
    arrays hold, and far slower than the plan for the values.
    """
    if query.tsquery is None or query.cover is None or limit <= 0:
        return []
    docs, tokens, units = _weights(conn, query.units)
    cover = sorted({t for unit in _cheapest(query.cover, units)[1] for t in units[unit].terms})
    spread = _EVERY if namespace is None else _ONE
    sql = _HITS.replace("{namespaces}", spread).replace("{where}", where[0])
    params = {**where[1], "q": query.tsquery, "cover": cover, "ns": namespace}
    seqs = [int(seq) for (seq,) in conn.execute(sql.encode(), params, prepare=False)]
    if not seqs:
        return []
    weighted = [(i, t, u.weight) for i, u in enumerate(units.values()) for t in u.terms]
    params = {
        "units": [i for i, _, _ in weighted],
        "terms": [t for _, t, _ in weighted],
        "ws": [w for _, _, w in weighted],
        "avgdl": tokens / docs if docs else 1.0,
        "ns": namespace,
        "seqs": seqs,
    }
    scored = _SCORES.replace("{namespaces}", spread).encode()
    scores = dict(conn.execute(scored, params, prepare=False))
    found = sorted((Candidate(s, float(scores.get(s, 0.0))) for s in seqs), key=_best_first)
    return found[:limit] if query.exact else _checked(conn, query, found, limit)


def _best_first(candidate: Candidate) -> tuple[float, int]:
    return -candidate.raw, candidate.seq


def _cheapest(cover: Cover | Unit, units: dict[Unit, _Unit]) -> tuple[int, set[Unit]]:
    """The units of the cover whose rows are fewest, and how many rows they hold."""
    if not isinstance(cover, Cover):
        return units[cover].df, {cover}
    options = [_cheapest(part, units) for part in cover.parts]
    if not cover.every:
        return min(options, key=lambda o: o[0])
    return sum(o[0] for o in options), {u for o in options for u in o[1]}


def _checked(
    conn: psycopg.Connection[Any], query: Query, found: list[Candidate], limit: int
) -> list[Candidate]:
    """The first ``limit`` of the rows (best first) FTS5 finds the expression in."""
    out: list[Candidate] = []
    start, step = 0, max(limit, CHECKED)
    while start < len(found) and len(out) < limit:
        chunk, start = found[start : start + step], start + step
        step = min(2 * step, BATCH)
        rows = conn.execute(
            "SELECT seq, content, tags::text FROM memories WHERE seq = ANY(%s::bigint[])",
            ([c.seq for c in chunk],),
        ).fetchall()
        text = {int(s): (str(c), tags_columns(tuple(json.loads(t)))[0]) for s, c, t in rows}
        chunk = [c for c in chunk if c.seq in text]
        out.extend(chunk[i] for i in matching(query.expression, [text[c.seq] for c in chunk]))
    return out[:limit]


def _weights(
    conn: psycopg.Connection[Any], units: tuple[Unit, ...]
) -> tuple[int, int, dict[Unit, _Unit]]:
    """The store's rows and tokens, and each positive unit's stored terms, document
    frequency and BM25 weight (its IDF, once per time the expression says it)."""
    counts = Counter(units)
    plain = [index_key(key) for key, prefix in counts if not prefix]
    stats = bm25.statistics(conn, None, plain)
    prefixes = [key for key, prefix in counts if prefix]
    found: dict[str, tuple[list[str], int]] = {}
    if prefixes:
        rows = conn.execute(_PREFIXES, {"prefixes": prefixes}, prepare=False).fetchall()
        found = {prefixes[int(i) - 1]: (list(terms), int(df)) for i, terms, df in rows}
    out: dict[Unit, _Unit] = {}
    for (key, prefix), count in counts.items():
        if prefix:
            terms, df = found.get(key, ([], 0))
        else:
            terms = [index_key(key)]
            df = stats.doc_freqs.get(terms[0], 0)
        out[key, prefix] = _Unit(
            terms if df else [], df, count * idf(df, stats.docs) if df else 0.0
        )
    return stats.docs, stats.tokens, out
