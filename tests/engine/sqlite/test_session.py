"""The SQLite session (mnemex.engine.sqlite.session): the storage seam's public surface,
on real files."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Any

import pytest

from mnemex.config import load_settings
from mnemex.engine import ALL
from mnemex.engine.check import check, index_differs
from mnemex.engine.sqlite.session import WRITE_CHUNK, SqliteSession
from mnemex.errors import DuplicateId, InvalidInput, StoreLocked
from mnemex.text import content_hash, format_time, segment, tags_columns, utcnow


def _session(path: Path, **settings: Any) -> SqliteSession:
    return SqliteSession(load_settings(path, **settings), embedder=None)


def _row(ident: str, content: str, namespace: str = "default") -> tuple[Any, ...]:
    """A prepared row in ROW_COLUMNS order, built without the store."""
    now = format_time(utcnow())
    tags, fts_tags = tags_columns(("session",))
    return (
        ident,
        namespace,
        "note",
        content,
        tags,
        None,
        1.0,
        0,
        now,
        now,
        content_hash(content),
        "{}",
        segment(content),
        fts_tags,
    )


def _ids(session: SqliteSession) -> list[str]:
    with session.connection() as conn:
        return [r[0] for r in conn.execute("SELECT id FROM memories ORDER BY seq")]


def test_a_failed_transaction_leaves_the_connection_state_usable(tmp_path: Path) -> None:
    session = _session(tmp_path / "s.db")
    with session.connection():
        session.insert_prepared([_row("a", "billing webhooks retry")], "error")
    with pytest.raises(DuplicateId), session.connection():
        session.insert_prepared([_row("b", "kafka lag"), _row("a", "again")], "error")
    with pytest.raises(RuntimeError), session.transaction():
        session.insert_rows([_row("c", "rolled back")])
        raise RuntimeError("boom")
    assert _ids(session) == ["a"]  # all or nothing, both times
    # the staging table and the lexicon's temp tables survived the rollbacks
    with session.transaction():
        assert len(session.insert_rows([_row("d", "billing invoices")])) == 1
    session.after_write()
    assert [t.surface for t in session.lexicon.tokenize("Billing webhooks")] == [
        "billing",
        "webhooks",
    ]
    assert session.lexicon.n_docs() == 2
    assert check(session)["ok"] and not index_differs(session)
    session.close()


def test_after_write_makes_caches_miss(tmp_path: Path) -> None:
    session = _session(tmp_path / "s.db")
    assert session.lexicon.n_docs() == 0
    generation = session.generation
    with session.transaction():
        session.insert_rows([_row("a", "one"), _row("b", "two")])
    session.after_write()
    assert session.generation == generation + 1
    assert session.lexicon.n_docs() == 2  # this connection's write: PRAGMA data_version misses it
    session.close()


def test_errors_drop_caches_and_translate_a_locked_store(tmp_path: Path) -> None:
    first = _session(tmp_path / "s.db")
    second = _session(tmp_path / "s.db", busy_timeout=0.2)
    generation = second.generation
    with first.transaction(), pytest.raises(StoreLocked), second.transaction():
        pass
    assert second.generation > generation  # what a rollback may have outdated is dropped
    with second.transaction():
        second.insert_rows([_row("a", "after the lock")])
    assert _ids(first) == ["a"]
    first.close()
    second.close()


def test_close_twice_is_safe_and_a_closed_session_says_so(tmp_path: Path) -> None:
    session = _session(tmp_path / "s.db")
    session.close()
    session.close()
    with pytest.raises(InvalidInput, match="closed"):
        _ = session.conn
    with pytest.raises(InvalidInput, match="closed"), session.connection():
        pass


def test_the_writer_thread_flushes_every_chunk_and_stops_on_close(tmp_path: Path) -> None:
    session = _session(tmp_path / "s.db")
    before = set(threading.enumerate())
    rows = [_row(f"m{i}", f"memory number {i}") for i in range(2 * WRITE_CHUNK + 7)]
    chunks = [rows[i : i + WRITE_CHUNK] for i in range(0, len(rows), WRITE_CHUNK)]
    with session.connection():
        count, ids, seqs = session.insert_chunks(iter(chunks), "error")
    assert count == len(rows) and ids == [r[0] for r in rows] and len(seqs) == len(rows)
    writers = [t for t in set(threading.enumerate()) - before if t.name.startswith("mnemex-write")]
    assert writers
    with session.connection():
        again, seqs = session.insert_prepared([rows[0], _row("new", "fresh")], "skip")
    assert again == 1 and len(seqs) == 1
    session.close()
    assert not any(t.is_alive() for t in writers)
    reopened = _session(tmp_path / "s.db")
    assert len(_ids(reopened)) == len(rows) + 1
    reopened.close()


def test_namespaces_and_read_snapshots(tmp_path: Path) -> None:
    session = _session(tmp_path / "s.db", namespace="team")
    assert session.resolve_namespace(None) == "team"
    assert session.resolve_namespace("other") == "other"
    assert session.resolve_namespace(ALL, allow_all=True) is None
    with pytest.raises(InvalidInput, match="one namespace"):
        session.resolve_namespace(ALL)
    with session.read() as conn:
        assert conn.in_transaction
        assert conn.execute("SELECT count(*) FROM memories").fetchone()[0] == 0
    assert not session.conn.in_transaction
    session.close()


def test_the_vector_index_is_kept_and_sees_writes(tmp_path: Path, fake_embedder: Any) -> None:
    session = SqliteSession(load_settings(tmp_path / "s.db"), embedder=fake_embedder)
    assert session.embedder is fake_embedder
    with session.connection():
        _, seqs = session.insert_prepared([_row("a", "billing webhooks")], "error")
    session.after_write()
    assert session.embedding.embed_new(seqs) is not None and session.embedding.last_error is None
    with session.connection():
        index = session.vectors(fake_embedder.dim)
        assert index is session.vectors(fake_embedder.dim) and index.size == 1
        session.insert_prepared([_row("b", "kafka consumers")], "error")
    report = session.embedding.embed()
    assert report.embedded == 1 and report.pending == 0
    with session.connection():
        assert session.vectors(fake_embedder.dim).size == 2
    session.close()


def test_close_lets_go_of_the_vector_index(tmp_path: Path, fake_embedder: Any) -> None:
    """A closed store keeps no vector matrix: a process that opens, searches and closes
    store after store stays the size of one."""
    import weakref

    import mnemex

    store = mnemex.open(tmp_path / "s.db", embedder=fake_embedder)
    store.add_many([f"billing webhooks retry {i}" for i in range(50)])
    assert store.search("billing webhooks", mode="hybrid").mode_used == "hybrid"
    index = weakref.ref(store.session.vectors(fake_embedder.dim))
    assert index() is not None and index().size == 50  # type: ignore[union-attr]
    store.close()
    assert index() is None  # freed at once: nothing else held it
    assert not store.session.backgrounds


def test_drop_ann_deletes_the_graph_its_meta_and_the_snapshot(tmp_path: Path) -> None:
    from mnemex.engine.sqlite import ann
    from mnemex.engine.sqlite.vectors import snapshot_path

    session = _session(tmp_path / "s.db")
    graph = ann.sidecar(tmp_path / "s.db", "m")
    files = (
        graph,
        graph.with_suffix(graph.suffix + ".json"),
        snapshot_path(tmp_path / "s.db", "m"),
    )
    for path in files:  # what a built HNSW index and a vector snapshot leave beside the store
        path.write_bytes(b"x")
    session.drop_ann("m")
    assert [path.exists() for path in files] == [False, False, False]
    session.close()


def test_a_large_memory_is_written_with_a_small_page_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past LEAN_BYTES, a memory's writes run with the small page cache, and the cache is
    the usual one again after them, when they fail too."""
    import mnemex
    from mnemex.engine.sqlite import session as module

    monkeypatch.setattr(module, "LEAN_BYTES", 1_000)
    seen: list[int] = []
    transaction = SqliteSession.transaction

    @contextlib.contextmanager
    def recorded(self: SqliteSession) -> Any:
        with transaction(self) as conn:
            seen.append(conn.execute("PRAGMA cache_size").fetchone()[0])
            yield conn

    monkeypatch.setattr(SqliteSession, "transaction", recorded)
    with mnemex.open(tmp_path / "s.db") as store:
        store.add("a short memory")
        assert set(seen) == {-module.CACHE_KIB}
        seen.clear()
        large = " ".join(["the large memory"] * 100)
        ident = store.add(large)
        assert seen and set(seen) == {-module.LEAN_CACHE_KIB}
        with pytest.raises(DuplicateId):
            store.add(large + "again", id=ident)
        with store.session.connection() as conn:
            assert conn.execute("PRAGMA cache_size").fetchone()[0] == -module.CACHE_KIB
        assert store.get(ident).memories[0].content == large


def test_a_long_text_is_bound_without_keeping_its_utf8_form(tmp_path: Path) -> None:
    """sqlite3 keeps the UTF-8 form of a bound text in the text object: a long one is bound
    as a copy, so that a memory of megabytes does not carry it while it is embedded."""
    import sys

    from mnemex.engine.sqlite import dedup as statements

    session = _session(tmp_path / "s.db")
    content = "".join(chr(0x4E00 + i % 3000) for i in range(statements.COPIED_CHARS + 1))
    row = _row("long", content)
    sizes = [sys.getsizeof(value) for value in row]
    with session.transaction() as conn:
        seq = statements.insert(conn, row)
    assert [sys.getsizeof(value) for value in row] == sizes
    with session.connection() as conn:
        assert (
            conn.execute("SELECT content FROM memories WHERE seq = ?", (seq,)).fetchone()[0]
            == content
        )
    short = _row("short", "数据库" * 10)
    with session.transaction() as conn:
        statements.insert(conn, short)
    assert sys.getsizeof(short[3]) > len("数据库" * 10) * 2 + 74  # bound as it is: its UTF-8 kept


def test_a_large_store_file_is_read_without_a_memory_map(tmp_path: Path) -> None:
    from mnemex.storage.connect import MMAP_BYTES, connect, mmap_bytes

    small = tmp_path / "small.db"
    session = _session(small)
    try:
        mapped = session.conn.execute("PRAGMA mmap_size").fetchone()[0]
    finally:
        session.close()
    assert mapped == MMAP_BYTES == mmap_bytes(small)
    assert mmap_bytes(tmp_path / "new.db") == MMAP_BYTES
    large = tmp_path / "large.db"
    with open(large, "wb") as stream:  # sparse: 600 MiB that take no disk
        stream.truncate(600 * 1024 * 1024)
    assert mmap_bytes(large) == 0
    conn = connect(small, busy_timeout=1.0)
    try:
        assert conn.execute("PRAGMA mmap_size").fetchone()[0] == MMAP_BYTES
    finally:
        conn.close()


def test_a_new_store_has_large_pages_and_an_old_one_keeps_its_own(tmp_path: Path) -> None:
    """16 KiB pages hold nine vector rows of the local model where 4 KiB pages hold two
    (a fifth of each page left empty); a store made with other pages keeps them."""
    import sqlite3

    from mnemex.storage.connect import PAGE_BYTES

    def page_size(path: Path) -> int:
        session = _session(path)
        try:
            session.insert_rows([_row(f"m{len(_ids(session))}", "a memory about pages")])
            return int(session.conn.execute("PRAGMA page_size").fetchone()[0])
        finally:
            session.close()

    assert page_size(tmp_path / "new.db") == PAGE_BYTES == 16_384
    old = tmp_path / "old.db"
    made = sqlite3.connect(old)
    made.execute("CREATE TABLE t (x)")  # the file's first page: its page size is set
    made.close()
    assert page_size(old) == 4_096
    assert page_size(old) == 4_096  # and stays so on every later open
