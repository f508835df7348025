"""The search pipeline, top to bottom.

1. Clean the query text (any string is safe) and plan the lexical search:
   FTS5's tokenizer, stop words out, document frequencies in.
2. Retrieve candidates from FTS5 by BM25 within the filters
   (``min(200, 4 × limit)`` of them).
3. If nothing matched and stop words were dropped, retry with them.
4. Normalize scores to [0, 1] and keep the top ``limit``.
5. Fetch those memories and their snippets in one query each (without
   snippets, a hit carries the start of its content instead).
"""

from __future__ import annotations

import json
import sqlite3
import time

from mnemex.config import SNIPPET_MAX_CHARS, Settings
from mnemex.index.fts import Filters, LexicalPlan, Lexicon, plan, plan_raw, retrieve, snippets
from mnemex.models import Hit, SearchResult
from mnemex.search.query import normalized_score
from mnemex.search.stopwords import STOPWORDS
from mnemex.storage import read_transaction
from mnemex.text import clean_query, clip, parse_stored_time, summarize

CANDIDATE_MULTIPLIER = 4  # seed 004
MAX_CANDIDATES = 200


def candidate_pool(limit: int) -> int:
    """Candidates each arm fetches: ``min(200, 4 × limit)``, never fewer than ``limit``."""
    return max(limit, min(MAX_CANDIDATES, CANDIDATE_MULTIPLIER * limit))


def run_search(
    conn: sqlite3.Connection,
    lexicon: Lexicon,
    settings: Settings,
    query: str,
    limit: int,
    filters: Filters,
    *,
    raw: bool = False,
    with_snippets: bool = True,
) -> SearchResult:
    started = time.perf_counter()
    text = clean_query(query)
    namespace = "*" if filters.namespace is None else filters.namespace

    # 1. plan
    lexical: LexicalPlan = plan_raw(lexicon, text) if raw else plan(lexicon, text, STOPWORDS)
    pool = candidate_pool(limit)
    with read_transaction(conn):
        # 2. retrieve
        retrieval = retrieve(conn, lexical, filters, pool, settings.lexical_budget)
        # 3. nothing but stop words could match: search them too
        if not retrieval.candidates and lexical.dropped:
            lexical = lexical.with_dropped()
            retrieval = retrieve(conn, lexical, filters, pool, settings.lexical_budget)
        # 4. normalize, top-K
        norm = lexical.norm
        top = retrieval.candidates[:limit]
        # 5. fetch rows and snippets
        seqs = [c.seq for c in top]
        rows = (
            {
                r[0]: r
                for r in conn.execute(
                    f"SELECT seq, id, kind, tags, created_at, substr(content, 1, {SNIPPET_MAX_CHARS * 2}) "
                    f"FROM memories WHERE seq IN ({','.join('?' * len(seqs))})",
                    seqs,
                )
            }
            if seqs
            else {}
        )
        cut = (
            snippets(
                conn,
                lexical.match,
                seqs,
                start=settings.highlight_start,
                end=settings.highlight_end,
                tokens=settings.snippet_tokens,
            )
            if with_snippets
            else {}
        )
    hits = []
    for candidate in top:
        row = rows.get(candidate.seq)
        if row is None:  # deleted between statements of another connection: skip
            continue
        snippet = cut.get(candidate.seq) or summarize(row[5], SNIPPET_MAX_CHARS)
        hits.append(
            Hit(
                id=row[1],
                score=normalized_score(candidate.raw, norm),
                snippet=clip(snippet, SNIPPET_MAX_CHARS),
                kind=row[2],
                tags=tuple(json.loads(row[3])),
                created_at=parse_stored_time(row[4]),
            )
        )
    return SearchResult(
        query=query if isinstance(query, str) else text,
        hits=tuple(hits),
        mode_used="lexical",
        namespace=namespace,
        took_ms=(time.perf_counter() - started) * 1000,
    )
