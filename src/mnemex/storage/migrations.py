"""Append-only, numbered schema migrations, tracked in ``schema_migrations``.

A migration is never edited once released: a change is a new migration.
Every statement is idempotent (``IF NOT EXISTS``) and triggers are created
here, once, never dropped and recreated when a store is opened (a migration
that changes a trigger drops and recreates it, once).
"""

from __future__ import annotations

import sqlite3
from typing import Final

from mnemex.errors import StoreError
from mnemex.storage.blobs import half_blob
from mnemex.storage.connect import write_transaction
from mnemex.text import CJK_SEGMENTATION, format_time, utcnow
from mnemex.version import __version__

TOKENIZER: Final = "porter unicode61 remove_diacritics 2"

# The FTS5 table indexes the text of ``memories_fts_source``: the content
# (segmented when it holds CJK text, see mnemex.text) and the tags.
_FTS_ROW_NEW = "new.seq, COALESCE(new.fts_content, new.content), COALESCE(new.fts_tags, new.tags)"
_FTS_ROW_OLD = "old.seq, COALESCE(old.fts_content, old.content), COALESCE(old.fts_tags, old.tags)"

_INIT: Final = (
    """CREATE TABLE IF NOT EXISTS meta (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS memories (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        namespace TEXT NOT NULL,
        kind TEXT NOT NULL,
        content TEXT NOT NULL,
        tags TEXT NOT NULL DEFAULT '[]',
        source TEXT,
        confidence REAL NOT NULL DEFAULT 0.8 CHECK (confidence BETWEEN 0.0 AND 1.0),
        pinned INTEGER NOT NULL DEFAULT 0 CHECK (pinned IN (0, 1)),
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        content_hash TEXT NOT NULL,
        metadata TEXT NOT NULL DEFAULT '{}',
        fts_content TEXT,
        fts_tags TEXT
    )""",
    "CREATE INDEX IF NOT EXISTS memories_namespace_created ON memories (namespace, created_at)",
    """CREATE TABLE IF NOT EXISTS memory_tags (
        tag TEXT NOT NULL,
        seq INTEGER NOT NULL,
        PRIMARY KEY (tag, seq)
    ) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS memory_tags_seq ON memory_tags (seq)",
    """CREATE VIEW IF NOT EXISTS memories_fts_source AS
        SELECT seq,
               COALESCE(fts_content, content) AS content,
               COALESCE(fts_tags, tags) AS tags
        FROM memories""",
    f"""CREATE VIRTUAL TABLE IF NOT EXISTS memories_fts USING fts5(
        content, tags,
        content='memories_fts_source', content_rowid='seq',
        tokenize='{TOKENIZER}'
    )""",
    f"""CREATE TRIGGER IF NOT EXISTS memories_after_insert AFTER INSERT ON memories BEGIN
        INSERT INTO memories_fts (rowid, content, tags) VALUES ({_FTS_ROW_NEW});
        INSERT INTO memory_tags (tag, seq) SELECT value, new.seq FROM json_each(new.tags);
    END""",
    f"""CREATE TRIGGER IF NOT EXISTS memories_after_delete AFTER DELETE ON memories BEGIN
        INSERT INTO memories_fts (memories_fts, rowid, content, tags)
            VALUES ('delete', {_FTS_ROW_OLD});
        DELETE FROM memory_tags WHERE seq = old.seq;
    END""",
    f"""CREATE TRIGGER IF NOT EXISTS memories_after_update_text
        AFTER UPDATE OF content, fts_content, tags, fts_tags ON memories BEGIN
        INSERT INTO memories_fts (memories_fts, rowid, content, tags)
            VALUES ('delete', {_FTS_ROW_OLD});
        INSERT INTO memories_fts (rowid, content, tags) VALUES ({_FTS_ROW_NEW});
    END""",
    """CREATE TRIGGER IF NOT EXISTS memories_after_update_tags
        AFTER UPDATE OF tags ON memories BEGIN
        DELETE FROM memory_tags WHERE seq = old.seq;
        INSERT INTO memory_tags (tag, seq) SELECT value, new.seq FROM json_each(new.tags);
    END""",
)

# Vectors: one row per (model, memory) (per window since migration 7), stamped with the model and the hash of
# the content it embeds. A memory's vectors go when it is forgotten or its
# content changes. ``vector_log`` tells in-process vector caches (in this and
# other processes) which rows to drop or refresh; additions need no log, as
# embedding ids only grow.
_VECTOR_TRIGGERS: Final = (  # the triggers that name ``embeddings`` (made again in 7)
    """CREATE TRIGGER IF NOT EXISTS memories_after_delete_vectors AFTER DELETE ON memories BEGIN
        DELETE FROM embeddings WHERE seq = old.seq;
    END""",
    """CREATE TRIGGER IF NOT EXISTS memories_after_update_content_vectors
        AFTER UPDATE OF content ON memories
        WHEN old.content_hash IS NOT new.content_hash BEGIN
        DELETE FROM embeddings WHERE seq = old.seq;
    END""",
    """CREATE TRIGGER IF NOT EXISTS embeddings_after_delete AFTER DELETE ON embeddings BEGIN
        INSERT INTO vector_log (op, embedding_id, seq) VALUES ('drop', old.id, old.seq);
    END""",
)
_VECTORS: Final = (
    """CREATE TABLE IF NOT EXISTS embeddings (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        seq INTEGER NOT NULL,
        model TEXT NOT NULL,
        dim INTEGER NOT NULL CHECK (dim > 0),
        content_hash TEXT NOT NULL,
        vector BLOB NOT NULL,
        UNIQUE (model, seq)
    )""",
    "CREATE INDEX IF NOT EXISTS embeddings_model_hash ON embeddings (model, content_hash)",
    """CREATE TABLE IF NOT EXISTS vector_log (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        op TEXT NOT NULL CHECK (op IN ('drop', 'touch')),
        embedding_id INTEGER,
        seq INTEGER NOT NULL
    )""",
    *_VECTOR_TRIGGERS,
    """CREATE TRIGGER IF NOT EXISTS memories_after_update_filters
        AFTER UPDATE OF kind, created_at ON memories BEGIN
        INSERT INTO vector_log (op, embedding_id, seq) VALUES ('touch', NULL, new.seq);
    END""",
)

# Relations ``subject -[predicate]-> object``, searched apart from memories with
# their own FTS5 index (see mnemex.relations). A triple is unique per namespace,
# comparing entity names case-insensitively through their ``*_key`` columns
# (Unicode case folding, which COLLATE NOCASE does not do beyond ASCII). The
# ``fts_*`` columns hold the indexed text when it differs from the stored text:
# CJK segmented, and the predicate's underscores as spaces.
_RELATIONS_ROW_NEW = (
    "new.seq, COALESCE(new.fts_subject, new.subject), "
    "COALESCE(new.fts_predicate, new.predicate), COALESCE(new.fts_object, new.object)"
)
_RELATIONS_ROW_OLD = (
    "old.seq, COALESCE(old.fts_subject, old.subject), "
    "COALESCE(old.fts_predicate, old.predicate), COALESCE(old.fts_object, old.object)"
)

_RELATIONS: Final = (
    """CREATE TABLE IF NOT EXISTS relations (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        namespace TEXT NOT NULL,
        subject TEXT NOT NULL,
        predicate TEXT NOT NULL,
        object TEXT NOT NULL,
        subject_key TEXT NOT NULL,
        object_key TEXT NOT NULL,
        confidence REAL NOT NULL DEFAULT 0.8 CHECK (confidence BETWEEN 0.0 AND 1.0),
        source_memory TEXT,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        fts_subject TEXT,
        fts_predicate TEXT,
        fts_object TEXT,
        UNIQUE (namespace, subject_key, predicate, object_key)
    )""",
    # Neighbors by subject use the UNIQUE index (its prefix); by object, this one.
    "CREATE INDEX IF NOT EXISTS relations_object ON relations (namespace, object_key)",
    """CREATE INDEX IF NOT EXISTS relations_source_memory ON relations (source_memory)
        WHERE source_memory IS NOT NULL""",
    """CREATE VIEW IF NOT EXISTS relations_fts_source AS
        SELECT seq,
               COALESCE(fts_subject, subject) AS subject,
               COALESCE(fts_predicate, predicate) AS predicate,
               COALESCE(fts_object, object) AS object
        FROM relations""",
    f"""CREATE VIRTUAL TABLE IF NOT EXISTS relations_fts USING fts5(
        subject, predicate, object,
        content='relations_fts_source', content_rowid='seq',
        tokenize='{TOKENIZER}'
    )""",
    f"""CREATE TRIGGER IF NOT EXISTS relations_after_insert AFTER INSERT ON relations BEGIN
        INSERT INTO relations_fts (rowid, subject, predicate, object)
            VALUES ({_RELATIONS_ROW_NEW});
    END""",
    f"""CREATE TRIGGER IF NOT EXISTS relations_after_delete AFTER DELETE ON relations BEGIN
        INSERT INTO relations_fts (relations_fts, rowid, subject, predicate, object)
            VALUES ('delete', {_RELATIONS_ROW_OLD});
    END""",
    f"""CREATE TRIGGER IF NOT EXISTS relations_after_update_text
        AFTER UPDATE OF subject, predicate, object, fts_subject, fts_predicate, fts_object
        ON relations BEGIN
        INSERT INTO relations_fts (relations_fts, rowid, subject, predicate, object)
            VALUES ('delete', {_RELATIONS_ROW_OLD});
        INSERT INTO relations_fts (rowid, subject, predicate, object)
            VALUES ({_RELATIONS_ROW_NEW});
    END""",
    # A relation outlives the memory it was read from; only the pointer goes.
    """CREATE TRIGGER IF NOT EXISTS memories_after_delete_relations
        AFTER DELETE ON memories BEGIN
        UPDATE relations SET source_memory = NULL WHERE source_memory = old.id;
    END""",
)

# Markdown workspaces (see mnemex.ingest). A workspace is a folder indexed into one
# namespace; ``files`` records each file as last synced (size, mtime, SHA-256, or the
# error that kept it out); each chunk of a file is a memory (kind ``chunk``, source its
# path) with its place in the file in ``chunks``, keyed by the memory's seq. A side
# table rather than columns on ``memories``: only chunks have a place, and its life is
# tied to the file's row. Triggers keep the three in step whatever deletes a row:
# a file's row takes its chunk memories with it, a memory takes its chunk row.
# A renamed file's chunks get new ids (derived from the path): relations that
# point at them by id follow.
_WORKSPACES: Final = (
    """CREATE TABLE IF NOT EXISTS workspaces (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        root TEXT NOT NULL,
        namespace TEXT NOT NULL,
        globs TEXT NOT NULL,
        ignore TEXT NOT NULL,
        chunking TEXT NOT NULL,
        created_at TEXT NOT NULL,
        synced_at TEXT,
        last_sync TEXT NOT NULL DEFAULT '{}',
        UNIQUE (root, namespace)
    )""",
    """CREATE TABLE IF NOT EXISTS files (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        workspace_id INTEGER NOT NULL REFERENCES workspaces (id),
        path TEXT NOT NULL,
        size INTEGER NOT NULL,
        mtime_ns INTEGER NOT NULL,
        read_ns INTEGER NOT NULL,
        sha256 TEXT,
        chunks INTEGER NOT NULL DEFAULT 0,
        error TEXT,
        synced_at TEXT NOT NULL,
        UNIQUE (workspace_id, path)
    )""",
    """CREATE TABLE IF NOT EXISTS chunks (
        seq INTEGER PRIMARY KEY REFERENCES memories (seq),
        file_id INTEGER NOT NULL REFERENCES files (id),
        position INTEGER NOT NULL,
        heading TEXT NOT NULL DEFAULT '[]',
        start_line INTEGER NOT NULL,
        end_line INTEGER NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS chunks_file ON chunks (file_id, position)",
    """CREATE TRIGGER IF NOT EXISTS files_before_delete BEFORE DELETE ON files BEGIN
        DELETE FROM memories WHERE seq IN (SELECT seq FROM chunks WHERE file_id = old.id);
    END""",
    """CREATE TRIGGER IF NOT EXISTS memories_after_delete_chunks AFTER DELETE ON memories BEGIN
        DELETE FROM chunks WHERE seq = old.seq;
    END""",
    # A chunk's id follows its file's path: a relation read from it follows the rename.
    """CREATE TRIGGER IF NOT EXISTS memories_after_update_id_relations
        AFTER UPDATE OF id ON memories BEGIN
        UPDATE relations SET source_memory = new.id WHERE source_memory = old.id;
    END""",
)

# Per-namespace statistics, so a namespace ranks as it would alone in its own store
# (see mnemex.engine.sqlite.fts): its rows (``docs``), their FTS5 tokens over every column
# (``tokens``, read from the row's ``memories_fts_docsize`` record), a counter bumped by
# every change to its text (``changes``, the key of cached term statistics) and bounds
# of its rows' seqs (``lo``..``hi``: every row of the namespace lies within them; a
# delete leaves them as they are). The FTS5 triggers are recreated to keep them, in
# the same statement as the row change: the docsize record is read after the row is
# indexed and before it is removed.
_HEX = "'0123456789ABCDEF'"
_BYTES = "X'" + bytes(range(256)).hex().upper() + "'"


def _byte(blob: str, offset: str) -> str:
    """SQL: the byte at ``offset`` (0-based, an SQL expression) of ``blob``, 0..255."""
    h = f"hex({blob})"
    return (
        f"(instr({_HEX}, substr({h}, 2 * ({offset}) + 1, 1)) * 16"
        f" + instr({_HEX}, substr({h}, 2 * ({offset}) + 2, 1)) - 17)"
    )


def _byte_at(blob: str, offset: int) -> str:
    """SQL: the byte at ``offset`` of ``blob``, found faster (its place in a blob of every
    byte value: ``instr`` compares blobs byte by byte) in longer SQL."""
    return f"(instr({_BYTES}, substr({blob}, {offset + 1}, 1)) - 1)"


def _varint(blob: str, offset: str) -> tuple[str, str]:
    """SQL: (value, length in bytes) of the SQLite varint at ``offset``; up to 4 bytes
    (values below 2**28: no memory holds that many tokens)."""
    return _varint_of([_byte(blob, f"{offset} + {i}") for i in range(4)])


def _varint_of(b: list[str]) -> tuple[str, str]:
    """SQL: (value, length in bytes) of the varint whose first four bytes are ``b``."""
    length = f"(CASE WHEN {b[0]} < 128 THEN 1 WHEN {b[1]} < 128 THEN 2 WHEN {b[2]} < 128 THEN 3 ELSE 4 END)"
    v2 = f"({b[0]} & 127) * 128 + {b[1]}"
    v3 = f"(({b[0]} & 127) * 128 + ({b[1]} & 127)) * 128 + {b[2]}"
    v4 = f"((({b[0]} & 127) * 128 + ({b[1]} & 127)) * 128 + ({b[2]} & 127)) * 128 + {b[3]}"
    value = (
        f"(CASE WHEN {b[0]} < 128 THEN {b[0]} WHEN {b[1]} < 128 THEN {v2} "
        f"WHEN {b[2]} < 128 THEN {v3} ELSE {v4} END)"
    )
    return value, length


def row_tokens_sql(blob: str) -> str:
    """SQL: the tokens of a ``memories_fts_docsize`` record (content + tags columns)."""
    content, length = _varint(blob, "0")
    tags, _ = _varint(blob, length)
    short = f"{_byte_at(blob, 0)} + {_byte_at(blob, 1)}"  # two one-byte varints: most rows
    return f"(CASE WHEN length({blob}) = 2 THEN {short} ELSE {content} + {tags} END)"


_ROW_TOKENS = row_tokens_sql("d.sz")


def _stats_statements(tokens: str, records: str) -> tuple[str, str]:
    """The statements that count a row in and out of ``namespace_stats``, its tokens the
    expression ``tokens`` over ``records AS d`` (keyed by the row's seq)."""
    add = f"""INSERT INTO namespace_stats (namespace, docs, tokens, changes, lo, hi)
            SELECT new.namespace, 1, {tokens}, 1, new.seq, new.seq
            FROM {records} AS d WHERE d.id = new.seq
            ON CONFLICT (namespace) DO UPDATE SET docs = docs + 1,
                tokens = tokens + excluded.tokens, changes = changes + 1,
                lo = min(lo, excluded.lo), hi = max(hi, excluded.hi);"""
    remove = f"""UPDATE namespace_stats SET docs = docs - 1, changes = changes + 1,
            tokens = tokens - COALESCE(
                (SELECT {tokens} FROM {records} AS d WHERE d.id = old.seq), 0)
            WHERE namespace = old.namespace;"""
    return add, remove


_STATS_ADD, _STATS_REMOVE = _stats_statements(_ROW_TOKENS, "memories_fts_docsize")


def _fts_triggers(stats_add: str, stats_remove: str) -> tuple[str, ...]:
    """The three triggers that keep the FTS5 index, the tags and ``namespace_stats`` in
    step with ``memories``, given the statements that count a row in and out."""
    return (
        f"""CREATE TRIGGER memories_after_insert AFTER INSERT ON memories BEGIN
        INSERT INTO memories_fts (rowid, content, tags) VALUES ({_FTS_ROW_NEW});
        INSERT INTO memory_tags (tag, seq) SELECT value, new.seq FROM json_each(new.tags);
        {stats_add}
    END""",
        f"""CREATE TRIGGER memories_after_delete AFTER DELETE ON memories BEGIN
        {stats_remove}
        INSERT INTO memories_fts (memories_fts, rowid, content, tags)
            VALUES ('delete', {_FTS_ROW_OLD});
        DELETE FROM memory_tags WHERE seq = old.seq;
    END""",
        f"""CREATE TRIGGER memories_after_update_text
        AFTER UPDATE OF content, fts_content, tags, fts_tags, namespace ON memories BEGIN
        {stats_remove}
        INSERT INTO memories_fts (memories_fts, rowid, content, tags)
            VALUES ('delete', {_FTS_ROW_OLD});
        INSERT INTO memories_fts (rowid, content, tags) VALUES ({_FTS_ROW_NEW});
        {stats_add}
    END""",
    )


_NAMESPACE_STATS: Final = (
    """CREATE TABLE IF NOT EXISTS namespace_stats (
        namespace TEXT PRIMARY KEY,
        docs INTEGER NOT NULL,
        tokens INTEGER NOT NULL,
        changes INTEGER NOT NULL DEFAULT 0,
        lo INTEGER NOT NULL,
        hi INTEGER NOT NULL
    ) WITHOUT ROWID""",
    # Whether a row is in a namespace, from a small covering index rather than the
    # table's wide rows: a term's rows in one namespace are read through it.
    "CREATE INDEX IF NOT EXISTS memories_seq_namespace ON memories (seq, namespace)",
    "DROP TRIGGER IF EXISTS memories_after_insert",
    "DROP TRIGGER IF EXISTS memories_after_delete",
    "DROP TRIGGER IF EXISTS memories_after_update_text",
    *_fts_triggers(_STATS_ADD, _STATS_REMOVE),
    "DELETE FROM namespace_stats",
    f"""INSERT INTO namespace_stats (namespace, docs, tokens, changes, lo, hi)
        SELECT m.namespace, count(*), COALESCE(sum({_ROW_TOKENS}), 0), 0, min(m.seq), max(m.seq)
        FROM memories AS m LEFT JOIN memories_fts_docsize AS d ON d.id = m.seq
        GROUP BY m.namespace""",
)

# ``remember`` checks, under the write lock, whether a row written since its
# duplicate lookup has the same text: by hash, in the namespace.
_CONTENT_HASH: Final = (
    "CREATE INDEX IF NOT EXISTS memories_namespace_hash ON memories (namespace, content_hash)",
)

# A long text is embedded in several windows (see mnemex.embed.windows): one row per
# window of a memory, its token windows numbered from 0 and its sentence windows from
# mnemex.embed.SENTENCE_BASE; a memory is scored by its best window. The
# table is copied (SQLite cannot change a UNIQUE constraint in place) keeping every
# row's id and the id sequence, so snapshots, HNSW files and ``vector_log`` stay
# valid; old rows are window 0. The triggers naming the table are made anew.
_EMBEDDING_COLUMNS = "id, seq, model, window, dim, content_hash, vector"
_WINDOWS: Final = (
    """CREATE TABLE embeddings_windows (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        seq INTEGER NOT NULL,
        model TEXT NOT NULL,
        window INTEGER NOT NULL DEFAULT 0 CHECK (window >= 0),
        dim INTEGER NOT NULL CHECK (dim > 0),
        content_hash TEXT NOT NULL,
        vector BLOB NOT NULL,
        UNIQUE (model, seq, window)
    )""",
    f"""INSERT INTO embeddings_windows ({_EMBEDDING_COLUMNS})
        SELECT id, seq, model, 0, dim, content_hash, vector FROM embeddings ORDER BY id""",
    "DELETE FROM sqlite_sequence WHERE name = 'embeddings_windows'",
    """INSERT INTO sqlite_sequence (name, seq)
        SELECT 'embeddings_windows', seq FROM sqlite_sequence WHERE name = 'embeddings'""",
    "DROP TRIGGER IF EXISTS memories_after_delete_vectors",
    "DROP TRIGGER IF EXISTS memories_after_update_content_vectors",
    "DROP TRIGGER IF EXISTS embeddings_after_delete",
    "DROP TABLE embeddings",
    "ALTER TABLE embeddings_windows RENAME TO embeddings",
    "CREATE INDEX IF NOT EXISTS embeddings_model_hash ON embeddings (model, content_hash)",
    *_VECTOR_TRIGGERS,
)

# A thread is the memories of one source in a namespace (a chat session, a file), in
# the order they were written: a search finds a memory's neighbours in its thread
# (mnemex.search.pipeline, the thread stage) by this index, whose rows end in seq.
_THREADS: Final = (
    "CREATE INDEX IF NOT EXISTS memories_namespace_source ON memories (namespace, source)",
)

# The injection log (mnemex.injections): each prompt the hooks answered, the block
# injected into it or why there was none, and the scores that decided it (``detail``,
# JSON). Bounded by days and entries, pruned on every write. And memories by time across
# namespaces, so a page of the timeline of every namespace (`mnemex ui`'s default) does not
# sort every row.
_INJECTIONS: Final = (
    "CREATE INDEX IF NOT EXISTS memories_created ON memories (created_at)",
    """CREATE TABLE IF NOT EXISTS injections (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        created_at TEXT NOT NULL,
        namespace TEXT NOT NULL,
        agent TEXT NOT NULL,
        session_id TEXT NOT NULL,
        event TEXT NOT NULL,
        prompt TEXT NOT NULL,
        outcome TEXT NOT NULL,
        block TEXT NOT NULL DEFAULT '',
        detail TEXT NOT NULL DEFAULT '{}'
    )""",
    "CREATE INDEX IF NOT EXISTS injections_session ON injections (session_id, seq)",
    "CREATE INDEX IF NOT EXISTS injections_created ON injections (created_at)",
)

# Vectors at half precision (see mnemex.storage.blobs; the function is the connection's,
# registered by ``migrate``), the file compacted after (:func:`_give_back_pages`). A
# snapshot of the vector index no longer matches its newest vector's bytes and is read
# again from the store.
HALF_VECTORS: Final = 10
_HALF: Final = (
    "UPDATE embeddings SET vector = mnemex_half(vector, dim) WHERE length(vector) = 4 * dim",
)

# The token count of a row, decoded once in a view rather than in each trigger: every new
# connection parses the whole schema before its first statement, and the four copies of
# the decoding in the triggers made it 84 kB (5-8 ms of every new process's first
# statement, against about 1 ms for the 15 kB it is now). The bytes of the record are named
# once in the inner query; the view is flattened into the trigger's statement, so a row's
# count is read through the docsize table's key as before.
_RECORD_BYTES = 8  # two varints of at most 4 bytes (see ``_varint``)


def _tokens_view() -> str:
    b = [f"b{i}" for i in range(_RECORD_BYTES)]
    named = ", ".join(
        f"{_byte_at('sz', i) if i < 2 else _byte('sz', str(i))} AS {name}"
        for i, name in enumerate(b)
    )
    content, length = _varint_of(b[:4])
    tags = " ".join(f"WHEN {n} THEN {_varint_of(b[n : n + 4])[0]}" for n in (1, 2, 3))
    tags = f"(CASE {length} {tags} ELSE {_varint_of(b[4:8])[0]} END)"
    return f"""CREATE VIEW IF NOT EXISTS memories_fts_tokens (id, tokens) AS
        SELECT id, CASE WHEN n = 2 THEN b0 + b1 ELSE {content} + {tags} END
        FROM (SELECT id, length(sz) AS n, {named} FROM memories_fts_docsize)"""


_TOKENS: Final = (
    _tokens_view(),
    "DROP TRIGGER IF EXISTS memories_after_insert",
    "DROP TRIGGER IF EXISTS memories_after_delete",
    "DROP TRIGGER IF EXISTS memories_after_update_text",
    *_fts_triggers(*_stats_statements("d.tokens", "memories_fts_tokens")),
)

MIGRATIONS: Final[tuple[tuple[int, str, tuple[str, ...]], ...]] = (
    (1, "memories, tags, fts5 with sync triggers", _INIT),
    (2, "embeddings stamped with their model, vector log", _VECTORS),
    (3, "relations with their own fts5 index", _RELATIONS),
    (4, "markdown workspaces: files and the place of each chunk", _WORKSPACES),
    (5, "per-namespace statistics kept by the fts5 triggers", _NAMESPACE_STATS),
    (6, "memories by namespace and content hash", _CONTENT_HASH),
    (7, "a vector per window of a long memory", _WINDOWS),
    (8, "memories by namespace and source: threads", _THREADS),
    (9, "the injection log: what the prompt hook injected, and why; memories by time", _INJECTIONS),
    (HALF_VECTORS, "vectors stored as float16", _HALF),
    (11, "a row's tokens decoded in one view, not in each trigger: a smaller schema", _TOKENS),
)
LATEST: Final = MIGRATIONS[-1][0]


def schema_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def migrate(conn: sqlite3.Connection) -> int:
    """Bring the store to the latest schema; cheap when it already is. Returns the version."""
    current = schema_version(conn)
    if current == LATEST:
        return current
    if current > LATEST:
        raise StoreError(
            f"this store has schema version {current}, newer than this mnemex "
            f"({__version__}, schema {LATEST}); upgrade mnemex"
        )
    with write_transaction(conn):
        current = schema_version(conn)  # another process may have migrated meanwhile
        conn.execute(
            """CREATE TABLE IF NOT EXISTS schema_migrations (
                version INTEGER PRIMARY KEY,
                name TEXT NOT NULL,
                applied_at TEXT NOT NULL
            )"""
        )
        now = format_time(utcnow())
        conn.create_function("mnemex_half", 2, half_blob, deterministic=True)
        for version, name, statements in MIGRATIONS:
            if version <= current:
                continue
            for statement in statements:
                conn.execute(statement)
            conn.execute(
                "INSERT OR REPLACE INTO schema_migrations (version, name, applied_at) "
                "VALUES (?, ?, ?)",
                (version, name, now),
            )
        meta = {
            "schema_version": str(LATEST),
            "tokenizer": TOKENIZER,
            "cjk_segmentation": CJK_SEGMENTATION,
            "updated_by": f"mnemex {__version__}",
        }
        if current == 0:
            meta["created_by"] = f"mnemex {__version__}"
            meta["created_at"] = now
        conn.executemany(
            "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", sorted(meta.items())
        )
        conn.execute(f"PRAGMA user_version = {LATEST}")
    if 0 < current < HALF_VECTORS:
        _give_back_pages(conn)
    return LATEST


def _give_back_pages(conn: sqlite3.Connection) -> None:
    """Rewrite the file once its vectors take half the bytes (``VACUUM``: the pages a
    table's rows no longer fill are not given back otherwise). Left for later, with a
    note on the log, when it cannot run now (a reader holds the file, the disk is full):
    the store is whole either way."""
    if conn.execute("SELECT 1 FROM embeddings LIMIT 1").fetchone() is None:
        return
    import logging  # not at the top: a hook's start-up never needs it

    say = logging.getLogger("mnemex.progress")
    say.info("vectors now stored as float16: compacting the store (once)")
    try:
        conn.execute("VACUUM")
    except sqlite3.Error as exc:
        say.info("the store keeps its size for now (%s); `sqlite3 FILE VACUUM` compacts it", exc)


def read_meta(conn: sqlite3.Connection) -> dict[str, str]:
    return dict(conn.execute("SELECT key, value FROM meta").fetchall())
