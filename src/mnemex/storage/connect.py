"""Opening the database: WAL, busy timeout, foreign keys, and error translation.

Writers queue for the write lock. SQLite's own busy handler polls with
growing sleeps, so a process that writes in a loop takes the lock again
before a polling process wakes up, and single writes beside a bulk writer
wait seconds. Every write transaction therefore first takes an exclusive
``flock`` on ``<store>-writers``: the kernel wakes a waiting process as soon
as the holder lets go, and writers take turns. ``BEGIN IMMEDIATE`` then
still waits (with the rest of the busy timeout) for writers that do not use
the queue (other tools, older versions).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from mnemex.errors import StoreError, StoreLocked

Connect = Callable[[], contextlib.AbstractContextManager[sqlite3.Connection]]
"""What opens one block of work on a store's connection (its ``connection`` or ``transaction``)."""
_LOCKED = ("database is locked", "database is busy", "database table is locked")

CACHE_KIB = 65_536  # the page cache of a connection (64 MiB)
MMAP_BYTES = 256 * 1024 * 1024  # the most of the file SQLite maps, from its start
# The page size of a new store file (an existing file keeps its own). A vector row of the
# local model (384 float32, 1.6 kB) fits twice in a 4 KiB page, leaving a fifth of it
# empty, and nine times in 16 KiB: a store of 1,000,000 memories is 0.26 GB smaller, its
# searches and single writes as fast (benchmarks/RESULTS.md, History, "Pages of 16 KiB").
PAGE_BYTES = 16_384


def connect(path: Path, *, busy_timeout: float) -> sqlite3.Connection:
    """Open (creating if needed) the store file with mnemex's connection settings.

    The connection is in autocommit mode: every write goes through
    :func:`write_transaction`, every multi-statement read through
    :func:`read_transaction`.
    """
    if str(path) != ":memory:":
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the folder for the store {path}: {exc}") from None
    try:
        conn = sqlite3.connect(
            str(path),
            timeout=busy_timeout,
            isolation_level=None,
            check_same_thread=False,
            cached_statements=256,
            factory=Connection,
        )
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open the store {path}: {exc}") from None
    conn.busy_timeout = busy_timeout
    if str(path) != ":memory:":
        conn.writers = WriterQueue(path)
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        conn.execute(f"PRAGMA page_size = {PAGE_BYTES}")  # a no-op once the file has pages
        with translate_errors(path, busy_timeout):
            mode = _enable_wal(conn, busy_timeout)
        if str(path) != ":memory:" and str(mode).lower() != "wal":
            raise StoreError(f"cannot switch {path} to WAL journal mode (got {mode!r})")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA temp_store = MEMORY")
        conn.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
        conn.execute(f"PRAGMA mmap_size = {mmap_bytes(path)}")
    except BaseException:
        conn.close()
        raise
    return conn


def mmap_bytes(path: Path) -> int:
    """How much of the store file SQLite maps: ``MMAP_BYTES``, or nothing for a file more
    than twice that. The map covers the file's first bytes only; in a large file it
    makes few reads faster and adds its pages to the process's memory (at 1,000,000
    memories, 3.2 GB: the same search latency without it, 167 MB less RSS; at 100,000,
    0.3 GB: lexical search 10 % faster with it)."""
    try:
        size = os.path.getsize(path)
    except OSError:  # new, or ":memory:"
        return MMAP_BYTES
    return MMAP_BYTES if size <= 2 * MMAP_BYTES else 0


class Connection(sqlite3.Connection):
    """A connection that knows its busy timeout and its store's writer queue."""

    busy_timeout: float = 0.0
    writers: WriterQueue | None = None


class WriterQueue:
    """The ``flock`` every writer of one store takes before ``BEGIN IMMEDIATE``.

    Each acquisition opens the lock file afresh (``flock`` locks belong to an
    open file), so two connections of one process queue like two processes.
    A folder where the file cannot be created (read-only) has no queue:
    writers then wait on SQLite's lock alone.
    """

    def __init__(self, store: Path) -> None:
        self.store = store
        self.path = store.with_name(store.name + "-writers")

    def acquire(self, timeout: float) -> int | None:
        """The locked file's descriptor, ``None`` without a queue; raises
        :class:`TimeoutError` after ``timeout`` seconds."""
        try:
            import fcntl
        except ImportError:  # no flock (Windows): SQLite's busy handler alone
            return None
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            pass
        except OSError:  # a file system without flock
            os.close(fd)
            return None
        # Wait in the kernel, where the holder's release wakes us at once; a
        # helper thread does the blocking call so that the wait can time out.
        done = threading.Event()
        state = {"abandoned": False, "error": False}
        guard = threading.Lock()

        def wait() -> None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError:
                state["error"] = True
            with guard:
                if state["abandoned"]:
                    os.close(fd)
                done.set()

        threading.Thread(target=wait, name="mnemex-writers", daemon=True).start()
        done.wait(timeout)
        with guard:
            if not done.is_set():
                state["abandoned"] = True
                raise TimeoutError
        if state["error"]:
            os.close(fd)
            return None
        return fd

    @staticmethod
    def release(fd: int | None) -> None:
        if fd is not None:
            os.close(fd)  # closing the last descriptor of the file releases the flock


def _enable_wal(conn: sqlite3.Connection, busy_timeout: float) -> str:
    """Switch to WAL, retrying: two processes creating a store at once can make
    SQLite refuse the switch without calling the busy handler (deadlock avoidance)."""
    deadline = time.monotonic() + busy_timeout
    delay = 0.005
    while True:
        try:
            return str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
        except sqlite3.OperationalError as exc:
            if not any(m in str(exc) for m in _LOCKED) or time.monotonic() >= deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.1)


@contextlib.contextmanager
def translate_errors(path: Path, busy_timeout: float) -> Iterator[None]:
    """Turn SQLite's errors about the file (locked, full, read-only, unreadable,
    damaged) into mnemex errors that say what to do; others pass through."""
    try:
        yield
    except sqlite3.DatabaseError as exc:
        error = _translated(exc, path, busy_timeout)
        if error is None:
            raise
        raise error from None


def locked(path: Path, busy_timeout: float) -> StoreLocked:
    return StoreLocked(
        f"the store {path} is locked by another process (waited {busy_timeout:g} s); "
        "retry, or raise busy_timeout (MNEMEX_BUSY_TIMEOUT)"
    )


def _translated(exc: sqlite3.DatabaseError, path: Path, busy_timeout: float) -> Exception | None:
    if isinstance(exc, sqlite3.IntegrityError | sqlite3.ProgrammingError | sqlite3.InterfaceError):
        return None
    message = str(exc)
    if any(m in message for m in _LOCKED):
        return locked(path, busy_timeout)
    if "database or disk is full" in message:
        return StoreError(
            f"the disk holding the store {path} is full (or the store reached its size "
            "limit): free some space and retry; this call stored nothing, and everything "
            "stored before is kept"
        )
    if "readonly database" in message:
        return StoreError(
            f"the store {path} is read-only ({message}): make the file and its folder "
            "writable, or point --db at a writable copy"
        )
    if "unable to open" in message:
        return StoreError(
            f"cannot open the store {path} ({message}): SQLite needs to write the file and "
            f"the {path.name}-wal and {path.name}-shm files beside it, so the folder must be "
            "writable; fix the permissions or point --db elsewhere"
        )
    if "disk I/O error" in message:
        return StoreError(
            f"cannot read or write the store {path} ({message}): check the disk, its free "
            "space and the file's permissions, then retry"
        )
    if not isinstance(exc, sqlite3.OperationalError) or "corrupt" in message:
        return StoreError(
            f"{path} is not a usable mnemex store ({message}): it is damaged or not a "
            "store; point --db at another file, restore a backup, or salvage what is "
            f"readable with `sqlite3 {path} .recover`"
        )
    return None


@contextlib.contextmanager
def write_transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``: all or nothing, waiting for the write lock.

    The wait is in turn with the store's other writers (see :class:`WriterQueue`)
    and lasts at most the connection's busy timeout in all. A failed ``COMMIT``
    (a full disk) is rolled back too, so that the connection is never left
    inside a transaction.
    """
    writers = getattr(conn, "writers", None)
    timeout = float(getattr(conn, "busy_timeout", 0.0))
    fd = None
    shortened = False
    if writers is not None:
        started = time.monotonic()
        try:
            fd = writers.acquire(timeout)
        except TimeoutError:
            raise locked(writers.store, timeout) from None
        waited = time.monotonic() - started
        if fd is not None and waited > 0.001:  # the rest of the wait, for SQLite's lock
            conn.execute(f"PRAGMA busy_timeout = {max(1, int((timeout - waited) * 1000))}")
            shortened = True
    try:
        try:
            conn.execute("BEGIN IMMEDIATE")
        finally:
            if shortened:
                conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            raise
    finally:
        WriterQueue.release(fd)


@contextlib.contextmanager
def read_transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """A read snapshot across several statements (WAL readers never block writers)."""
    if conn.in_transaction:
        yield conn
        return
    conn.execute("BEGIN")
    try:
        yield conn
    finally:
        if conn.in_transaction:
            conn.execute("COMMIT")
