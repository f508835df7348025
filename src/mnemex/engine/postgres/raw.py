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
4. The rows are scored by BM25 over the expression's positive terms (those not
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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mnemex.engine.postgres import bm25
from mnemex.engine.postgres.tokens import BATCH, index_key, lexeme, matching, query_tokens
from mnemex.index.expression import COLUMNS, Expr, Leaf, parse, strings
from mnemex.index.fts import BM25_B, BM25_K1, Candidate, invalid_query
from mnemex.index.query import idf
from mnemex.text import tags_columns

if TYPE_CHECKING:
    import psycopg

Unit = tuple[str, bool]  # a positive term: its key, and whether it is a prefix


@dataclass(frozen=True, slots=True)
class Query:
    """A raw expression as PostgreSQL runs it."""

    expression: str
    tsquery: str | None  # None: it matches nothing
    exact: bool  # the tsquery alone decides membership (else FTS5 checks its rows)
    units: tuple[Unit, ...]  # the positive terms, each as often as the expression says it


@dataclass(frozen=True, slots=True)
class _Part:
    tsquery: str | None
    exact: bool
    units: tuple[Unit, ...]


_NOTHING = _Part(None, True, ())


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
    return Query(expression, part.tsquery, part.exact, part.units)


def _part(tree: Expr, cut: dict[str, list[str]]) -> _Part:
    if isinstance(tree, Leaf):
        return _leaf(tree, cut)
    parts = [_part(child, cut) for child in tree.children]
    if tree.op == "NOT":
        kept, taken = parts
        if kept.tsquery is None or taken.tsquery is None:
            return kept
        if not taken.exact:  # a wider NOT would take away rows FTS5 keeps
            return _Part(kept.tsquery, False, kept.units)
        return _Part(f"{kept.tsquery} & !{taken.tsquery}", kept.exact, kept.units)
    if tree.op == "AND" and not tree.implicit and any(p.tsquery is None for p in parts):
        return _NOTHING  # FTS5: AND with a phrase of no terms matches nothing
    live = [p for p in parts if p.tsquery is not None]
    if not live:
        return _NOTHING
    glue = " | " if tree.op == "OR" else " & "
    return _Part(
        "(" + glue.join(str(p.tsquery) for p in live) + ")",
        all(p.exact for p in live),
        tuple(u for p in live for u in p.units),
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
    return _Part("(" + " & ".join(lexemes) + ")", exact, units)


def _terms(phrase: tuple[Any, ...], cut: dict[str, list[str]]) -> list[Unit]:
    """A phrase's terms in order; a string's last one a prefix when it ends with ``*``."""
    out: list[Unit] = []
    for piece in phrase:
        words = cut[piece.text]
        out.extend((w, piece.prefix and i == len(words) - 1) for i, w in enumerate(words))
    return out


_SCORED = f"""
    WITH hit AS MATERIALIZED (
        SELECT m.seq, m.namespace, m.lex_len FROM memories AS m
        WHERE m.lex @@ %(q)s::tsquery{{where}}),
    u (i, term, w) AS (SELECT * FROM unnest(%(units)s::int[], %(terms)s::text[], %(ws)s::float8[])),
    f AS (
        SELECT h.seq, u.i, max(u.w) AS w, sum(p.tf) AS tf, max(h.lex_len) AS len
        FROM hit AS h CROSS JOIN u
        JOIN postings AS p ON p.namespace = h.namespace AND p.term = u.term AND p.seq = h.seq
        GROUP BY h.seq, u.i)
    SELECT h.seq, coalesce(s.score, 0) AS score FROM hit AS h LEFT JOIN (
        SELECT seq, sum(w * (tf * {BM25_K1 + 1.0!r})
                        / (tf + {BM25_K1!r} * (1 - {BM25_B!r} + {BM25_B!r} * len / %(avgdl)s)))
            AS score
        FROM f GROUP BY seq) AS s ON s.seq = h.seq
    ORDER BY score DESC, h.seq
    LIMIT %(limit)s"""

# Each prefix's terms in the store (not CJK pairs: FTS5 has no such term), and the rows
# holding any of them.
_PREFIXES = """
    SELECT u.i, array_agg(DISTINCT t.term), count(DISTINCT p.seq)
    FROM unnest(%(prefixes)s::text[]) WITH ORDINALITY AS u (prefix, i)
    JOIN term_stats AS t ON starts_with(t.term, u.prefix) AND strpos(t.term, ' ') = 0
    JOIN postings AS p ON p.namespace = t.namespace AND p.term = t.term
    GROUP BY u.i"""


def search(
    conn: psycopg.Connection[Any],
    query: Query,
    limit: int,
    where: tuple[str, dict[str, Any]] = ("", {}),
) -> list[Candidate]:
    """The best ``limit`` memories the expression matches, by BM25, best first (ties by
    seq). ``where``: conditions (``AND ...`` on ``memories AS m``) and their parameters."""
    if query.tsquery is None or limit <= 0:
        return []
    if not query.exact:
        seqs = _checked(conn, query, where)
        if not seqs:
            return []
        where = (f"{where[0]} AND m.seq = ANY(%(r_seqs)s)", {**where[1], "r_seqs": seqs})
    docs, tokens, units = _weights(conn, query.units)
    params = {
        **where[1],
        "q": query.tsquery,
        "units": [i for i, _, _ in units],
        "terms": [t for _, t, _ in units],
        "ws": [w for _, _, w in units],
        "avgdl": tokens / docs if docs else 1.0,
        "limit": limit,
    }
    rows = conn.execute(_SCORED.replace("{where}", where[0]).encode(), params).fetchall()
    return [Candidate(int(seq), float(score)) for seq, score in rows]


def _checked(
    conn: psycopg.Connection[Any], query: Query, where: tuple[str, dict[str, Any]]
) -> list[int]:
    """The rows the widened tsquery finds that FTS5 finds the expression in."""
    rows = conn.execute(
        f"SELECT m.seq, m.content, m.tags::text FROM memories AS m "
        f"WHERE m.lex @@ %(q)s::tsquery{where[0]} ORDER BY m.seq".encode(),
        {**where[1], "q": query.tsquery},
    ).fetchall()
    found: list[int] = []
    for start in range(0, len(rows), BATCH):
        chunk = rows[start : start + BATCH]
        docs = [(str(c), tags_columns(tuple(json.loads(t)))[0]) for _, c, t in chunk]
        found.extend(int(chunk[i][0]) for i in matching(query.expression, docs))
    return found


def _weights(
    conn: psycopg.Connection[Any], units: tuple[Unit, ...]
) -> tuple[int, int, list[tuple[int, str, float]]]:
    """The store's rows and tokens, and each stored term of each positive unit with the
    unit's BM25 weight (its IDF, once per time the expression says it)."""
    counts = Counter(units)
    plain = [key for key, prefix in counts if not prefix]
    stats = bm25.statistics(conn, None, [index_key(k) for k in plain])
    prefixes = [key for key, prefix in counts if prefix]
    found: dict[int, tuple[list[str], int]] = {}
    if prefixes:
        rows = conn.execute(_PREFIXES, {"prefixes": prefixes}).fetchall()
        found = {int(i) - 1: (list(terms), int(df)) for i, terms, df in rows}
    out: list[tuple[int, str, float]] = []
    for i, ((key, prefix), count) in enumerate(counts.items()):
        if prefix:
            terms, df = found.get(prefixes.index(key), ([], 0))
        else:
            terms = [index_key(key)]
            df = stats.doc_freqs.get(terms[0], 0)
        if df:
            out.extend((i, term, count * idf(df, stats.docs)) for term in terms)
    return stats.docs, stats.tokens, out
