"""The vector arm: pgvector, an HNSW index per model, exact search for small namespaces.

Each vector is stamped with its model; a model has one dimension, recorded
in ``vector_models`` when its first vector is stored (a vector of another
dimension is refused). The ``vector`` column has no fixed dimension, so a
model's vectors are indexed by a partial HNSW index on
``vector::vector(dim)`` for that model alone (pgvector 0.6: cosine
distance, ``m`` and ``ef_construction`` at their defaults).

A memory has a vector per window of its text (``window_no``; one for a text
that fits the embedder's window), and a search returns each memory once, at its
best window: the exact scan groups the window rows by memory; through the index,
rows come nearest first, and the first ``limit`` distinct memories of such a
prefix are the ``limit`` nearest memories (a prefix with fewer is asked again,
twice as long, then exactly). Counts below are of window rows.

A search is exact (every vector of the model in the namespace compared) when
the namespace holds few vectors, or when so small a share of the model's
vectors that the index would have to visit more candidates than pgvector 0.6
allows (``hnsw.ef_search`` ≤ 1000; it has no iterative scans) to find
``limit`` of them. Otherwise the index is searched with ``ef_search`` sized
to that share and to the graph's size, and exactly again if it still returns
too few.

With the setting ``ann = "off"`` every search is exact.

``EF_SEARCH_MIN`` and ``EXACT_MAX`` are chosen by measurement (benchmarks/RESULTS.md,
History, "PostgreSQL engine beside SQLite"), and so is the growth of ``ef_search``
with the graph (:func:`least_ef`).
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from mnemex.embed import window_numbers
from mnemex.errors import IndexMismatch, InvalidInput
from mnemex.records import dataclass

if TYPE_CHECKING:
    import psycopg
    from psycopg import sql

EXACT_MAX = 50_000  # a namespace with at most this many vectors of the model is scanned
EF_SEARCH_MIN = 200  # candidates the index visits at least (pgvector's default, 40, misses many)
EF_SEARCH_MAX = 1000  # pgvector 0.6's limit
# The index's recall at a given ef_search falls as its graph grows: EF_SEARCH_MIN holds up to
# EF_GRAPH vectors, then grows as their count to the power EF_GROWTH (see least_ef).
EF_GRAPH = 100_000
EF_GROWTH = 0.6
EF_MARGIN = 2.0  # candidates visited per wanted hit, over the namespace's share
WINDOWS_FETCHED = 2  # window rows asked of the index per memory wanted (doubled if short)


@dataclass(frozen=True, slots=True)
class VectorHit:
    seq: int
    cosine: float


class Vector:
    """A vector in pgvector's binary form (dimension, a reserved int16, big-endian
    float32s), sent as a binary query parameter (``%b``) whose type, ``vector``, the
    server takes from the statement's cast: no text to print or parse."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


def param(vector: Any) -> Vector:
    """A vector as a binary query parameter; float32 values pass exactly."""
    return Vector(binary(vector))


def binary(vector: Any) -> bytes:
    """A vector in pgvector's binary form (a query parameter, or a ``COPY`` field)."""
    values = np.asarray(vector, dtype=np.float32).ravel()
    if not np.isfinite(values).all():
        raise InvalidInput("a vector holds NaN or infinite values")
    return struct.pack(">hh", values.size, 0) + values.astype(">f4").tobytes()


def from_binary(data: bytes) -> Any:
    """A vector read in pgvector's binary form (a binary cursor's ``vector`` column)."""
    return np.frombuffer(data, dtype=">f4", offset=4).astype(np.float32)


def register_types(adapters: Any) -> None:
    """Teach psycopg (its global ``adapters``, before any connection) to send a
    :class:`Vector`."""
    from psycopg.adapt import Dumper
    from psycopg.pq import Format

    class VectorDumper(Dumper):
        format = Format.BINARY
        oid = 0  # unknown: the type comes from the statement's cast (``%b::vector``)

        def dump(self, obj: Any) -> bytes:
            return bytes(obj.data)

    adapters.register_dumper(Vector, VectorDumper)


def literal(vector: Any) -> str:
    """A vector as pgvector's text form; float32 values round-trip exactly."""
    values = np.asarray(vector, dtype=np.float32).ravel()
    if not np.isfinite(values).all():
        raise InvalidInput("a vector holds NaN or infinite values")
    return "[" + ",".join(repr(float(v)) for v in values) + "]"


def index_name(model: str) -> str:
    """The HNSW index of a model's vectors (a digest: model ids hold any characters)."""
    return "embeddings_hnsw_" + hashlib.sha256(model.encode()).hexdigest()[:16]


def model_dim(conn: psycopg.Connection[Any], model: str) -> int | None:
    row = conn.execute("SELECT dim FROM vector_models WHERE model = %s", (model,)).fetchone()
    return int(row[0]) if row else None


def ensure_model(
    conn: psycopg.Connection[Any], model: str, dim: int, *, index: bool = True
) -> None:
    """Record ``model`` with its dimension and create its HNSW index (unless ``index`` is
    false: a bulk load builds it after), once; refuse a model already recorded with
    another dimension."""
    known = model_dim(conn, model)
    if known is None:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('mnemex vector models'))")
            conn.execute(
                "INSERT INTO vector_models (model, dim) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                (model, dim),
            )
            if index:
                create_index(conn, model, dim)
        known = model_dim(conn, model)
    if known != dim:
        raise IndexMismatch(
            f"model {model!r} has {known}-dimensional vectors in this store, not {dim}; "
            "name the model apart or re-embed with `mnemex reindex`"
        )


def create_index(conn: psycopg.Connection[Any], model: str, dim: int) -> None:
    """The HNSW index of the model's vectors, unless it exists."""
    from psycopg import sql

    conn.execute(
        sql.SQL(
            "CREATE INDEX IF NOT EXISTS {} ON embeddings USING hnsw "
            "((vector::vector({})) vector_cosine_ops) WHERE model = {}"
        ).format(sql.Identifier(index_name(model)), sql.Literal(dim), sql.Literal(model))
    )


def insert_vectors(
    conn: psycopg.Connection[Any],
    model: str,
    vectors: Sequence[tuple[int, str, Any] | tuple[int, str, Any, int]],
) -> int:
    """Store (memory seq, content hash, vector[, window]) for ``model`` (window 0 when
    left out). The memories' vectors of the model are replaced: a memory's windows are
    written together. Returns the rows written."""
    if not vectors:
        return 0
    dims = {np.asarray(v[2]).size for v in vectors}
    if len(dims) != 1:
        raise InvalidInput(f"vectors of one model must share a dimension, got {sorted(dims)}")
    ensure_model(conn, model, dims.pop())
    by_seq = sorted((v[0], v[3] if len(v) > 3 else 0, v[1], binary(v[2])) for v in vectors)
    with conn.transaction():
        seqs = sorted({v[0] for v in by_seq})
        conn.execute("DELETE FROM embeddings WHERE model = %s AND seq = ANY(%s)", (model, seqs))
        # The memories' namespaces, each row held until the commit (a memory deleted
        # meanwhile is skipped, as one deleted before).
        namespaces = dict(
            conn.execute(
                "SELECT seq, namespace FROM memories WHERE seq = ANY(%s) ORDER BY seq FOR KEY SHARE",
                (seqs,),
            ).fetchall()
        )
        written = [v for v in by_seq if v[0] in namespaces]
        with conn.cursor() as cursor, cursor.copy(_COPY) as copy:
            copy.set_types(["int8", "text", "text", "text", "int4", "bytea"])
            for seq, window, digest, data in written:
                copy.write_row((seq, namespaces[seq], model, digest, window, data))
        return len(written)


# Vectors in pgvector's binary form, written as they are (a bytea field's bytes are the
# column's binary value).
_COPY = """COPY embeddings (seq, namespace, model, content_hash, window_no, vector)
    FROM STDIN (FORMAT BINARY)"""


def stored_windows(
    conn: psycopg.Connection[Any], model: str, digests: Sequence[str]
) -> dict[str, list[tuple[int, Any]]]:
    """The vectors of ``model`` already stored for texts of these content hashes, each
    text's windows in order with their numbers (a text whose stored windows are not
    numbered as a cut numbers them, :func:`mnemex.embed.window_numbers`, left out)."""
    found: dict[str, dict[int, Any]] = {}
    with conn.cursor(binary=True) as cursor:
        rows = cursor.execute(
            "SELECT DISTINCT ON (content_hash, window_no) content_hash, window_no, vector "
            "FROM embeddings WHERE model = %s AND content_hash = ANY(%s) "
            "ORDER BY content_hash, window_no, seq",
            (model, sorted(set(digests))),
        ).fetchall()
    for digest, window, data in rows:
        found.setdefault(digest, {})[int(window)] = data
    return {
        digest: [(w, from_binary(by[w])) for w in sorted(by)]
        for digest, by in found.items()
        if sorted(by) == window_numbers(by)
    }


def counts(conn: psycopg.Connection[Any], model: str, namespace: str | None) -> tuple[int, int]:
    """(vectors of the model in the namespace, vectors of the model), from ``vector_stats``."""
    row = conn.execute(
        "SELECT coalesce(sum(vectors) FILTER (WHERE %(ns)s::text IS NULL OR namespace = %(ns)s), 0),"
        " coalesce(sum(vectors), 0) FROM vector_stats WHERE model = %(model)s",
        {"ns": namespace, "model": model},
    ).fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


def dim_and_counts(
    conn: psycopg.Connection[Any], model: str, namespace: str | None
) -> tuple[int | None, int, int]:
    """The model's dimension (``None``: not recorded) and :func:`counts`, in one statement."""
    row = conn.execute(
        "SELECT m.dim, coalesce(sum(s.vectors) FILTER (WHERE %(ns)s::text IS NULL "
        "OR s.namespace = %(ns)s), 0), coalesce(sum(s.vectors), 0) FROM vector_models AS m "
        "LEFT JOIN vector_stats AS s ON s.model = m.model WHERE m.model = %(model)s "
        "GROUP BY m.dim",
        {"ns": namespace, "model": model},
    ).fetchone()
    return (int(row[0]), int(row[1]), int(row[2])) if row else (None, 0, 0)


def vector(
    conn: psycopg.Connection[Any],
    qvec: Any,
    namespace: str | None,
    model: str,
    limit: int,
    shape: tuple[int | None, int, int] | None = None,
    *,
    exact: bool = False,
) -> list[VectorHit]:
    """The ``limit`` memories of the namespace (``None``: all) nearest to ``qvec`` by the
    cosine of their best window's vector of ``model``, nearest first (ties by seq).
    ``shape``: :func:`dim_and_counts`, read in this snapshot (else read here). ``exact``:
    every vector compared, whatever the counts (the ``ann = "off"`` setting)."""
    dim, wanted, total = shape or dim_and_counts(conn, model, namespace)
    if dim is None or limit <= 0:
        return []
    check_dim(qvec, model, dim)
    if not wanted:
        return []
    fetch = limit * WINDOWS_FETCHED
    while not exact and (ef := ef_search(fetch, wanted, total)) is not None:
        rows = run_search(conn, qvec, search_sql(namespace, model, dim, exact=False), fetch, ef)
        hits = best_windows(rows, limit)
        if len(hits) >= limit or len(rows) >= wanted:
            return hits
        if len(rows) < fetch:
            break  # the index gave fewer than asked: the exact scan below
        fetch *= 2
    return run_search(conn, qvec, search_sql(namespace, model, dim, exact=True), limit, None)


def check_dim(qvec: Any, model: str, dim: int | None) -> None:
    """:class:`IndexMismatch` unless ``qvec`` has the ``dim`` of the model's stored vectors
    (``None``: none stored, anything fits)."""
    if dim is not None and np.asarray(qvec).size != dim:
        raise IndexMismatch(
            f"the query vector has {np.asarray(qvec).size} dimensions; model {model!r} "
            f"has {dim} in this store"
        )


def best_windows(rows: Sequence[VectorHit], limit: int) -> list[VectorHit]:
    """The first ``limit`` memories of window hits in distance order, each at its nearest
    (first) window: of any prefix of the windows nearest to a query, these are the
    ``limit`` nearest memories."""
    seen: dict[int, VectorHit] = {}
    for hit in rows:
        if hit.seq not in seen:
            seen[hit.seq] = hit
            if len(seen) == limit:
                break
    return list(seen.values())


def ef_search(limit: int, wanted: int, total: int) -> int | None:
    """``hnsw.ef_search`` for a search of ``limit`` among ``wanted`` of the model's ``total``
    vectors, or ``None`` for an exact search (few vectors, or too small a share of them)."""
    ef = math.ceil(EF_MARGIN * limit * total / wanted)
    if wanted <= EXACT_MAX or ef > EF_SEARCH_MAX:
        return None
    return max(least_ef(total), ef)


def least_ef(total: int) -> int:
    """The candidates the index visits at least in a graph of ``total`` vectors.

    Recall@10 against the exact search at ``ef_search`` 200: 0.9917 at 100,000 vectors,
    0.9767 at 1,000,000, where 600 gives 0.9880 and 800 0.9947 (benchmarks/RESULTS.md,
    "pgvector's recall as the store grows"). So :data:`EF_SEARCH_MIN` up to
    :data:`EF_GRAPH` vectors, times their growth to the power :data:`EF_GROWTH` past it
    (797 at a million), and at most pgvector's :data:`EF_SEARCH_MAX` (from about 1.5
    million vectors, where the recall falls again)."""
    grown: float = EF_SEARCH_MIN * (max(total, EF_GRAPH) / EF_GRAPH) ** EF_GROWTH
    return min(EF_SEARCH_MAX, math.ceil(grown))


def search_sql(namespace: str | None, model: str, dim: int, *, exact: bool) -> sql.Composed:
    """The query (parameters ``q``, the vector (:func:`param`), and ``limit``): through the model's
    HNSW index (window rows nearest first), or exact (each memory once, at its best
    window; the ``OFFSET 0`` fence keeps the planner from the index)."""
    from psycopg import sql

    where: sql.Composable = sql.SQL("model = {}").format(sql.Literal(model))
    if namespace is not None:
        where = sql.SQL("{} AND namespace = {}").format(where, sql.Literal(namespace))
    distance = sql.SQL("(vector::vector({dim}) <=> %(q)b::vector({dim}))").format(
        dim=sql.Literal(dim)
    )
    if exact:
        return sql.SQL(
            "SELECT seq, min(d) AS d FROM (SELECT seq, {d} AS d FROM embeddings WHERE {w} "
            "OFFSET 0) AS x GROUP BY seq ORDER BY d, seq LIMIT %(limit)s"
        ).format(d=distance, w=where)
    return sql.SQL(
        "SELECT seq, {d} AS d FROM embeddings WHERE {w} ORDER BY {d} LIMIT %(limit)s"
    ).format(d=distance, w=where)


def run_search(
    conn: psycopg.Connection[Any],
    qvec: Any,
    query: sql.Composed,
    limit: int,
    ef: int | None,
) -> list[VectorHit]:
    """Run one query built by :func:`search_sql` (``ef``: the index's ``ef_search``, or
    ``None`` for the exact query)."""
    rows = _run(conn, qvec, query, limit, ef)
    return [VectorHit(int(seq), 1.0 - float(d)) for seq, d in rows]


def explain(
    conn: psycopg.Connection[Any], qvec: Any, namespace: str | None, model: str, *, exact: bool
) -> str:
    """The plan of a search as :func:`vector` runs it (exact, or through the index)."""
    dim = model_dim(conn, model) or np.asarray(qvec).size
    query = search_sql(namespace, model, dim, exact=exact)
    rows = _run(conn, qvec, query, 10, None if exact else EF_SEARCH_MIN, explain=True)
    return "\n".join(str(r[0]) for r in rows)


def _run(
    conn: psycopg.Connection[Any],
    qvec: Any,
    query: sql.Composed,
    limit: int,
    ef: int | None,
    *,
    explain: bool = False,
) -> list[Any]:
    """Run (or explain) a search. Through the index, sorting is turned off: the planner
    then takes the HNSW index, the only path that gives rows in distance order, rather
    than reading the namespace's rows through the B-tree to sort them."""
    from psycopg import sql

    if explain:
        query = sql.SQL("EXPLAIN {}").format(query)
    # One pipeline: the settings, the query and the transaction's commands go together
    # (one round trip to send them, where each was one).
    with conn.pipeline():
        with conn.transaction():
            if ef is not None:
                conn.execute(
                    "SELECT set_config('hnsw.ef_search', %s, true), "
                    "set_config('enable_sort', 'off', true)",
                    (str(ef),),
                )
            cursor = conn.execute(query, {"q": param(qvec), "limit": limit})
        return cursor.fetchall()
