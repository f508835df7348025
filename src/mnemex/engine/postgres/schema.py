"""The PostgreSQL schema: append-only numbered migrations, run once under an advisory lock.

It holds what the SQLite schema holds (see :mod:`mnemex.storage.migrations`),
in PostgreSQL's types: memories with their namespace, kind, tags, confidence,
pinned flag, times and content hash; relations; vectors stamped with their
model. Differences that follow from the engine:

- The lexical index: ``lex``, a ``tsvector`` of the terms FTS5 would index
  (see :mod:`mnemex.engine.postgres.tokens`), each lexeme with positions
  ``1..tf`` (its frequency, capped at 256 by PostgreSQL), ``lex_len`` the
  row's length in tokens, and from them ``postings`` (namespace, term, seq →
  tf, len; tf and len in the key's leaves since migration 11), the inverted
  index BM25 reads (see
  :mod:`mnemex.engine.postgres.bm25` for why a B-tree and not GIN). BM25
  also needs each namespace's row and token counts and each term's document
  frequency: ``namespace_stats`` and ``term_stats``. Statement-level
  triggers keep all three in the transaction that changes the rows. Each
  count is the sum of its rows in slots (since migration 12): a transaction
  adds to the rows of a slot no other running transaction holds, so writers
  of one namespace do not wait for each other's counts (upserted in key
  order all the same).
- A memory's content hash is unique in its namespace (chunks of workspace
  files aside: ``file_chunk``, or kind ``chunk``): two writers adding the same
  text at once end with one row.
- Vectors have no fixed dimension in the table; each model's vectors are
  indexed by an HNSW index of their own (see
  :func:`mnemex.engine.postgres.vectors.ensure_model`), recorded with their
  dimension in ``vector_models``.

Every migration runs in one transaction, under the session lock ``pg_advisory_lock``:
two processes that open a new database at once apply it once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from mnemex.errors import StoreError
from mnemex.storage import TOKENIZER
from mnemex.text import CJK_SEGMENTATION
from mnemex.version import __version__

if TYPE_CHECKING:
    import psycopg

LOCK_KEY: Final = 0x6D6E656D6578  # "mnemex": the advisory lock held while migrating
TERMS: Final = f"fts5 {TOKENIZER}; cjk pairs"  # recorded in meta: what built ``lex``
STATS_SLOTS: Final = 64  # rows per counter: writers at once that never wait for each other
SLOT_LOCK: Final = 0x6D6E656D  # "mnem": the advisory locks (SLOT_LOCK, slot) of the slots
# The trigger functions' first line since migration 12: the transaction's slot.
_DECLARE_SLOT: Final = "DECLARE my_slot smallint := mnemex_stats_slot();\n        "

_INIT: Final = (
    "CREATE EXTENSION IF NOT EXISTS vector",
    """CREATE TABLE IF NOT EXISTS meta (
        key text PRIMARY KEY,
        value text NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS memories (
        seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        id text NOT NULL UNIQUE,
        namespace text NOT NULL,
        kind text NOT NULL,
        content text NOT NULL,
        tags jsonb NOT NULL DEFAULT '[]',
        source text,
        confidence real NOT NULL DEFAULT 0.8 CHECK (confidence BETWEEN 0.0 AND 1.0),
        pinned boolean NOT NULL DEFAULT false,
        created_at timestamptz NOT NULL,
        updated_at timestamptz NOT NULL,
        content_hash text NOT NULL,
        metadata jsonb NOT NULL DEFAULT '{}',
        lex tsvector NOT NULL,
        lex_len integer NOT NULL CHECK (lex_len >= 0)
    )""",
    "CREATE INDEX IF NOT EXISTS memories_namespace_created ON memories (namespace, created_at)",
    """CREATE UNIQUE INDEX IF NOT EXISTS memories_namespace_hash
        ON memories (namespace, content_hash) WHERE kind <> 'chunk'""",
    "CREATE INDEX IF NOT EXISTS memories_tags ON memories USING gin (tags jsonb_path_ops)",
)


def _statement_triggers(table: str, name: str, function: str) -> tuple[str, ...]:
    """SQL: triggers ``name_insert``/``_delete``/``_update`` on ``table`` that call
    ``function_insert()`` etc. once per statement, with the changed rows as tables."""
    tables = {
        "insert": "NEW TABLE AS new_rows",
        "delete": "OLD TABLE AS old_rows",
        "update": "OLD TABLE AS old_rows NEW TABLE AS new_rows",
    }
    return tuple(
        f"""CREATE OR REPLACE TRIGGER {name}_{op} AFTER {op.upper()} ON {table}
            REFERENCING {refs} FOR EACH STATEMENT EXECUTE FUNCTION {function}_{op}()"""
        for op, refs in tables.items()
    )


def _stats_function(op: str, changed: str, prefix: str = "", *, slotted: bool = False) -> str:
    """SQL: the trigger function that takes away the postings and counts of the
    ``changed`` rows of sign -1 and adds those of sign 1 (one upsert per statistics
    table, in key order). ``prefix`` names another index's tables (``relation_``).
    ``slotted``: the counts go to the rows of the transaction's slot (see
    :data:`_SLOTS`)."""
    slot, declare, on = ("", "", "") if not slotted else (", slot", _DECLARE_SLOT, ", slot")
    value = "" if not slotted else ", my_slot"
    return f"""CREATE OR REPLACE FUNCTION mnemex_{prefix}stats_{op}() RETURNS trigger
        LANGUAGE plpgsql AS $$
        {declare}BEGIN
            DELETE FROM {prefix}postings AS p
            USING ({changed}) AS c, unnest(tsvector_to_array(c.lex)) AS u (term)
            WHERE c.sign < 0 AND p.namespace = c.namespace AND p.term = u.term
                AND p.seq = c.seq;
            INSERT INTO {prefix}postings (namespace, term, seq, tf, len)
            SELECT c.namespace, u.lexeme, c.seq, cardinality(u.positions), c.lex_len
            FROM ({changed}) AS c, unnest(c.lex) AS u
            WHERE c.sign > 0
            ORDER BY 1, 2, 3;
            WITH c AS MATERIALIZED ({changed}),
            ns AS (
                INSERT INTO {prefix}namespace_stats AS s (namespace{slot}, docs, tokens)
                SELECT c.namespace{value}, sum(c.sign), sum(c.sign * c.lex_len)
                FROM c GROUP BY c.namespace ORDER BY c.namespace
                ON CONFLICT (namespace{on}) DO UPDATE
                    SET docs = s.docs + excluded.docs, tokens = s.tokens + excluded.tokens
            )
            INSERT INTO {prefix}term_stats AS t (namespace, term{slot}, docs)
            SELECT c.namespace, u.term{value}, sum(c.sign)
            FROM c, unnest(tsvector_to_array(c.lex)) AS u (term)
            GROUP BY c.namespace, u.term HAVING sum(c.sign) <> 0
            ORDER BY c.namespace, u.term
            ON CONFLICT (namespace, term{on}) DO UPDATE SET docs = t.docs + excluded.docs;
            RETURN NULL;
        END
        $$"""


def _lexical_index(table: str, prefix: str) -> tuple[str, ...]:
    """SQL: the tables of a lexical index over ``table``'s ``lex`` and ``lex_len`` (BM25's
    postings and per-namespace statistics, named with ``prefix``), and the statement
    triggers that keep them."""
    return (
        f"""CREATE TABLE IF NOT EXISTS {prefix}namespace_stats (
            namespace text PRIMARY KEY,
            docs bigint NOT NULL,
            tokens bigint NOT NULL
        )""",
        # The inverted index BM25 reads: each term's rows in a namespace, with the term's
        # frequency in the row and the row's length (a B-tree: one range scan per term).
        f"""CREATE TABLE IF NOT EXISTS {prefix}postings (
            namespace text NOT NULL,
            term text NOT NULL,
            seq bigint NOT NULL,
            tf integer NOT NULL,
            len integer NOT NULL,
            PRIMARY KEY (namespace, term, seq)
        )""",
        f"""CREATE TABLE IF NOT EXISTS {prefix}term_stats (
            namespace text NOT NULL,
            term text NOT NULL,
            docs bigint NOT NULL,
            PRIMARY KEY (namespace, term)
        )""",
        *_stats_functions(prefix),
        *_statement_triggers(table, f"{table}_stats", f"mnemex_{prefix}stats"),
    )


def _stats_functions(prefix: str, *, slotted: bool = False) -> tuple[str, ...]:
    """SQL: the insert, delete and update trigger functions of a lexical index."""
    return tuple(
        _stats_function(op, changed, prefix, slotted=slotted)
        for op, changed in (
            ("insert", "SELECT seq, namespace, 1 AS sign, lex_len, lex FROM new_rows"),
            ("delete", "SELECT seq, namespace, -1 AS sign, lex_len, lex FROM old_rows"),
            (
                "update",
                """SELECT x.* FROM new_rows AS n JOIN old_rows AS o ON o.seq = n.seq,
                LATERAL (VALUES (n.seq, n.namespace, 1, n.lex_len, n.lex),
                                (o.seq, o.namespace, -1, o.lex_len, o.lex))
                    AS x (seq, namespace, sign, lex_len, lex)
                WHERE n.namespace <> o.namespace OR n.lex_len <> o.lex_len OR n.lex <> o.lex""",
            ),
        )
    )


# BM25's corpus statistics, per namespace. A change of rows adds its rows'
# counts and takes away the old rows' (an update does both), in one upsert
# per table, in key order.
_STATS: Final = _lexical_index("memories", "")


def _vector_stats_function(op: str, changed: str, *, slotted: bool = False) -> str:
    """SQL: the trigger function that counts the ``changed`` vectors in or out (into the
    transaction's slot when ``slotted``)."""
    slot, declare, value = ("", "", "") if not slotted else (", slot", _DECLARE_SLOT, ", my_slot")
    return f"""CREATE OR REPLACE FUNCTION mnemex_vector_stats_{op}() RETURNS trigger
        LANGUAGE plpgsql AS $$
        {declare}BEGIN
            INSERT INTO vector_stats AS s (model, namespace{slot}, vectors)
            SELECT c.model, c.namespace{value}, sum(c.sign) FROM ({changed}) AS c
            GROUP BY 1, 2 HAVING sum(c.sign) <> 0 ORDER BY 1, 2
            ON CONFLICT (model, namespace{slot}) DO UPDATE
                SET vectors = s.vectors + excluded.vectors;
            RETURN NULL;
        END
        $$"""


def _vector_stats_functions(*, slotted: bool = False) -> tuple[str, ...]:
    """SQL: the insert, delete and update trigger functions of ``vector_stats``."""
    return tuple(
        _vector_stats_function(op, changed, slotted=slotted)
        for op, changed in (
            ("insert", "SELECT model, namespace, 1 AS sign FROM new_rows"),
            ("delete", "SELECT model, namespace, -1 AS sign FROM old_rows"),
            (
                "update",
                """SELECT x.* FROM new_rows AS n JOIN old_rows AS o ON o.id = n.id,
            LATERAL (VALUES (n.model, n.namespace, 1), (o.model, o.namespace, -1))
                AS x (model, namespace, sign)
            WHERE n.namespace <> o.namespace OR n.model <> o.model""",
            ),
        )
    )


# Vectors: one row per (model, memory) (per window of it since migration 7), stamped
# with the model and the hash of the content it embeds, and the memory's namespace
# (kept in step by a trigger) so that a namespace's vectors are searched without a join.
_VECTORS: Final = (
    """CREATE TABLE IF NOT EXISTS vector_models (
        model text PRIMARY KEY,
        dim integer NOT NULL CHECK (dim > 0 AND dim <= 2000),
        created_at timestamptz NOT NULL DEFAULT now()
    )""",
    """CREATE TABLE IF NOT EXISTS embeddings (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        seq bigint NOT NULL REFERENCES memories (seq) ON DELETE CASCADE,
        namespace text NOT NULL,
        model text NOT NULL REFERENCES vector_models (model),
        content_hash text NOT NULL,
        vector vector NOT NULL,
        UNIQUE (model, seq)
    )""",
    "CREATE INDEX IF NOT EXISTS embeddings_model_namespace ON embeddings (model, namespace)",
    "CREATE INDEX IF NOT EXISTS embeddings_model_hash ON embeddings (model, content_hash)",
    "CREATE INDEX IF NOT EXISTS embeddings_seq ON embeddings (seq)",
    # Vectors per (model, namespace): whether a search is exact or through the index.
    """CREATE TABLE IF NOT EXISTS vector_stats (
        model text NOT NULL,
        namespace text NOT NULL,
        vectors bigint NOT NULL,
        PRIMARY KEY (model, namespace)
    )""",
    *_vector_stats_functions(),
    *_statement_triggers("embeddings", "embeddings_stats", "mnemex_vector_stats"),
    """CREATE OR REPLACE FUNCTION mnemex_vectors_follow() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            IF new.content_hash IS DISTINCT FROM old.content_hash THEN
                DELETE FROM embeddings WHERE seq = new.seq;
            ELSIF new.namespace IS DISTINCT FROM old.namespace THEN
                UPDATE embeddings SET namespace = new.namespace WHERE seq = new.seq;
            END IF;
            RETURN NULL;
        END
        $$""",
    """CREATE OR REPLACE TRIGGER memories_vectors_follow
        AFTER UPDATE OF namespace, content_hash ON memories
        FOR EACH ROW EXECUTE FUNCTION mnemex_vectors_follow()""",
)

# Relations ``subject -[predicate]-> object``, unique per namespace by their
# case-folded entity names, as on SQLite. Their lexical index comes later.
_RELATIONS: Final = (
    """CREATE TABLE IF NOT EXISTS relations (
        seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        id text NOT NULL UNIQUE,
        namespace text NOT NULL,
        subject text NOT NULL,
        predicate text NOT NULL,
        object text NOT NULL,
        subject_key text NOT NULL,
        object_key text NOT NULL,
        confidence real NOT NULL DEFAULT 0.8 CHECK (confidence BETWEEN 0.0 AND 1.0),
        source_memory text,
        created_at timestamptz NOT NULL,
        updated_at timestamptz NOT NULL,
        UNIQUE (namespace, subject_key, predicate, object_key)
    )""",
    "CREATE INDEX IF NOT EXISTS relations_object ON relations (namespace, object_key)",
    """CREATE INDEX IF NOT EXISTS relations_source_memory ON relations (source_memory)
        WHERE source_memory IS NOT NULL""",
)

# Confidence as SQLite holds it (a double): a real gave 0.800000011920929 back for 0.8.
_DOUBLE_CONFIDENCE: Final = (
    "ALTER TABLE memories ALTER COLUMN confidence TYPE double precision",
    "ALTER TABLE relations ALTER COLUMN confidence TYPE double precision",
)

# The relations' lexical index, as the memories' (a relation's terms are its subject,
# predicate and object as FTS5 indexes them; see mnemex.engine.postgres.relations).
# Relations written before it have none: none could be written then. A relation
# outlives the memory it was read from; only the pointer goes (or follows a new id).
_RELATION_INDEX: Final = (
    "ALTER TABLE relations ADD COLUMN IF NOT EXISTS lex tsvector NOT NULL DEFAULT ''",
    "ALTER TABLE relations ADD COLUMN IF NOT EXISTS lex_len integer NOT NULL DEFAULT 0",
    *_lexical_index("relations", "relation_"),
    """CREATE OR REPLACE FUNCTION mnemex_relations_source_gone() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            UPDATE relations SET source_memory = NULL
            WHERE source_memory IN (SELECT id FROM old_rows);
            RETURN NULL;
        END
        $$""",
    """CREATE OR REPLACE TRIGGER memories_relations_delete AFTER DELETE ON memories
        REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT
        EXECUTE FUNCTION mnemex_relations_source_gone()""",
    """CREATE OR REPLACE FUNCTION mnemex_relations_source_moved() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            UPDATE relations SET source_memory = new.id WHERE source_memory = old.id;
            RETURN NULL;
        END
        $$""",
    """CREATE OR REPLACE TRIGGER memories_relations_id AFTER UPDATE OF id ON memories
        FOR EACH ROW WHEN (new.id IS DISTINCT FROM old.id)
        EXECUTE FUNCTION mnemex_relations_source_moved()""",
)

# A long text is embedded in several windows (see mnemex.embed.windows): one row per
# window of a memory, numbered in ``window_no`` ("window" is a reserved word here), its
# token windows from 0 and its sentence windows from mnemex.embed.SENTENCE_BASE; a
# memory is scored by its best window. Rows stored before are window 0.
_WINDOWS: Final = (
    """ALTER TABLE embeddings ADD COLUMN IF NOT EXISTS window_no integer NOT NULL DEFAULT 0
        CHECK (window_no >= 0)""",
    "ALTER TABLE embeddings DROP CONSTRAINT IF EXISTS embeddings_model_seq_key",
    """ALTER TABLE embeddings ADD CONSTRAINT embeddings_model_seq_window
        UNIQUE (model, seq, window_no)""",
)

# Markdown workspaces (see mnemex.ingest.workspace), as on SQLite: a folder indexed into
# one namespace (``version`` counts the writes to its files: another session's cached
# files rows are old when it moved); each file as last synced; each chunk memory's
# place in its file. A file's row takes its chunk memories with it (a trigger), a
# memory its chunk row (a foreign key). A chunk memory is marked ``file_chunk``: the
# one-memory-per-text rule does not hold for the text of files. (A chunk's id follows
# its file's path: a relation read from it follows the rename, by _RELATION_INDEX's
# trigger.)
_WORKSPACES: Final = (
    """CREATE TABLE IF NOT EXISTS workspaces (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        root text NOT NULL,
        namespace text NOT NULL,
        globs text NOT NULL,
        ignore text NOT NULL,
        chunking text NOT NULL,
        created_at timestamptz NOT NULL,
        synced_at timestamptz,
        last_sync text NOT NULL DEFAULT '{}',
        version bigint NOT NULL DEFAULT 0,
        UNIQUE (root, namespace)
    )""",
    """CREATE TABLE IF NOT EXISTS files (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        workspace_id bigint NOT NULL REFERENCES workspaces (id),
        path text NOT NULL,
        size bigint NOT NULL,
        mtime_ns bigint NOT NULL,
        read_ns bigint NOT NULL,
        sha256 text,
        chunks integer NOT NULL DEFAULT 0,
        error text,
        synced_at timestamptz NOT NULL,
        UNIQUE (workspace_id, path)
    )""",
    """CREATE TABLE IF NOT EXISTS chunks (
        seq bigint PRIMARY KEY REFERENCES memories (seq) ON DELETE CASCADE,
        file_id bigint NOT NULL REFERENCES files (id),
        position integer NOT NULL,
        heading text NOT NULL DEFAULT '[]',
        start_line integer NOT NULL,
        end_line integer NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS chunks_file ON chunks (file_id, position)",
    """CREATE OR REPLACE FUNCTION mnemex_file_chunks_delete() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
            DELETE FROM memories WHERE seq IN (SELECT seq FROM chunks WHERE file_id = old.id);
            RETURN old;
        END
        $$""",
    """CREATE OR REPLACE TRIGGER files_chunks_delete BEFORE DELETE ON files
        FOR EACH ROW EXECUTE FUNCTION mnemex_file_chunks_delete()""",
    "ALTER TABLE memories ADD COLUMN IF NOT EXISTS file_chunk boolean NOT NULL DEFAULT false",
    "DROP INDEX IF EXISTS memories_namespace_hash",
    """CREATE UNIQUE INDEX memories_namespace_hash ON memories (namespace, content_hash)
        WHERE kind <> 'chunk' AND NOT file_chunk""",
)

# A thread is the memories of one source in a namespace, in the order written: a
# search finds a memory's neighbours in its thread (the thread stage) by this index.
_THREADS: Final = (
    "CREATE INDEX IF NOT EXISTS memories_namespace_source ON memories (namespace, source, seq)",
)

# The injection log (mnemex.injections), and memories by time across namespaces: as
# SQLite's migration 9.
_INJECTIONS: Final = (
    "CREATE INDEX IF NOT EXISTS memories_created ON memories (created_at, seq)",
    """CREATE TABLE IF NOT EXISTS injections (
        seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        created_at timestamptz NOT NULL,
        namespace text NOT NULL,
        agent text NOT NULL,
        session_id text NOT NULL,
        event text NOT NULL,
        prompt text NOT NULL,
        outcome text NOT NULL,
        block text NOT NULL DEFAULT '',
        detail jsonb NOT NULL DEFAULT '{}'
    )""",
    "CREATE INDEX IF NOT EXISTS injections_session ON injections (session_id, seq)",
    "CREATE INDEX IF NOT EXISTS injections_created ON injections (created_at)",
)


def _covering_key(prefix: str) -> tuple[str, ...]:
    """SQL: the postings' key (namespace, term, seq) rebuilt with tf and len in its
    leaves, so that BM25 reads a term's postings from the index alone (an index-only
    scan) instead of visiting a table page per posting."""
    return (
        f"""CREATE UNIQUE INDEX IF NOT EXISTS {prefix}postings_covering
            ON {prefix}postings (namespace, term, seq) INCLUDE (tf, len)""",
        f"""ALTER TABLE {prefix}postings DROP CONSTRAINT {prefix}postings_pkey,
            ADD CONSTRAINT {prefix}postings_pkey PRIMARY KEY USING INDEX {prefix}postings_covering""",
    )


# The postings read from their key alone (see bm25.py): a faster exact arm, and a key
# built anew is smaller than one grown by inserts.
_COVERING: Final = (*_covering_key(""), *_covering_key("relation_"))

# Counters in slots, so that writers of one namespace never wait for each other's counts
# (one row per counter would hold its lock until the writer commits). Each counter is the
# sum of its rows, one per slot; a transaction writes into a slot no other running
# transaction holds (the first free one). A read sums the slots in its one snapshot.
_SLOT_FUNCTION: Final = f"""CREATE OR REPLACE FUNCTION mnemex_stats_slot() RETURNS smallint
    LANGUAGE plpgsql AS $$
    DECLARE s integer;
    BEGIN
        FOR s IN 0..{STATS_SLOTS - 1} LOOP
            IF pg_try_advisory_xact_lock({SLOT_LOCK}, s) THEN
                RETURN s;
            END IF;
        END LOOP;
        s := pg_backend_pid() % {STATS_SLOTS};  -- every slot taken: wait for one
        PERFORM pg_advisory_xact_lock({SLOT_LOCK}, s);
        RETURN s;
    END
    $$"""


def _slotted(table: str, key: str) -> str:
    """SQL: ``table``'s key ``key`` and a slot (0 for the rows it held)."""
    return f"""ALTER TABLE {table} ADD COLUMN slot smallint NOT NULL DEFAULT 0,
        DROP CONSTRAINT {table}_pkey, ADD CONSTRAINT {table}_pkey PRIMARY KEY ({key}, slot)"""


_SLOTS: Final = (
    _SLOT_FUNCTION,
    *(
        _slotted(f"{prefix}{table}", key)
        for prefix in ("", "relation_")
        for table, key in (("namespace_stats", "namespace"), ("term_stats", "namespace, term"))
    ),
    _slotted("vector_stats", "model, namespace"),
    *_stats_functions("", slotted=True),
    *_stats_functions("relation_", slotted=True),
    *_vector_stats_functions(slotted=True),
)

MIGRATIONS: Final[tuple[tuple[int, str, tuple[str, ...]], ...]] = (
    (1, "memories with their index terms (tsvector)", _INIT),
    (2, "postings and per-namespace bm25 statistics kept by statement triggers", _STATS),
    (3, "vectors stamped with their model", _VECTORS),
    (4, "relations", _RELATIONS),
    (5, "confidence as a double", _DOUBLE_CONFIDENCE),
    (
        6,
        "relations' lexical index (postings and statistics by statement triggers)",
        _RELATION_INDEX,
    ),
    (7, "a vector per window of a memory's text (embeddings.window_no)", _WINDOWS),
    (8, "markdown workspaces: files and the place of each chunk", _WORKSPACES),
    (9, "memories by namespace and source: threads", _THREADS),
    (
        10,
        "the injection log: what the prompt hook injected, and why; memories by time",
        _INJECTIONS,
    ),
    (11, "postings read from their key alone (tf and len in the key's leaves)", _COVERING),
    (12, "counters in slots: writers never wait for each other's counts", _SLOTS),
)
LATEST: Final = MIGRATIONS[-1][0]


def schema_version(conn: psycopg.Connection[Any]) -> int:
    """The version of the schema in the database (0: none yet)."""
    if conn.execute("SELECT to_regclass('schema_migrations')").fetchone() == (None,):
        return 0
    row = conn.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchone()
    return int(row[0]) if row else 0


def migrate(conn: psycopg.Connection[Any]) -> int:
    """Bring the database to the latest schema, once whoever else runs it; returns the
    version. Cheap when it is already there (no lock taken)."""
    current = schema_version(conn)
    if current == LATEST:
        return current
    _check(current)
    # A session lock taken before the transaction: the transaction then starts after the
    # other migrator's commit and sees its tables (a transaction that waited for a lock
    # inside would look them up in catalog caches from before).
    conn.execute("SELECT pg_advisory_lock(%s)", (LOCK_KEY,))
    try:
        with conn.transaction():
            current = schema_version(conn)  # another process may have migrated meanwhile
            _check(current)
            _apply(conn, current)
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", (LOCK_KEY,))
    return LATEST


def _apply(conn: psycopg.Connection[Any], current: int) -> None:
    """The migrations after ``current`` and the meta record, in the open transaction."""
    conn.execute(
        """CREATE TABLE IF NOT EXISTS schema_migrations (
            version integer PRIMARY KEY,
            name text NOT NULL,
            applied_at timestamptz NOT NULL DEFAULT now()
        )"""
    )
    for version, name, statements in MIGRATIONS:
        if version <= current:
            continue
        for statement in statements:
            conn.execute(statement.encode())
        conn.execute(
            "INSERT INTO schema_migrations (version, name) VALUES (%s, %s)", (version, name)
        )
    meta = {
        "schema_version": str(LATEST),
        "terms": TERMS,
        "cjk_segmentation": CJK_SEGMENTATION,
        "updated_by": f"mnemex {__version__}",
    }
    if current == 0:
        meta["created_by"] = f"mnemex {__version__}"
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO meta (key, value) VALUES (%s, %s) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            sorted(meta.items()),
        )


def _check(current: int) -> None:
    if current > LATEST:
        raise StoreError(
            f"this database has mnemex schema version {current}, newer than this mnemex "
            f"({__version__}, schema {LATEST}); upgrade mnemex"
        )


def read_meta(conn: psycopg.Connection[Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in conn.execute("SELECT key, value FROM meta").fetchall()}
