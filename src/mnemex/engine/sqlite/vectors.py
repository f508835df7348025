"""The vector index: exact cosine over an in-process float32 matrix.

SQLite holds the vectors (``embeddings``, float16 BLOBs stamped with their
model, one per window of a memory's text: see :mod:`mnemex.engine.sqlite.embeddings`);
this module keeps one model's vectors in a numpy matrix, a row per window with
the memory's seq beside it, loaded on first use and kept in step with every
writer, this process or another:

- new vectors are the rows with an ``embeddings.id`` above the last one seen
  (ids only grow);
- dropped vectors (forgotten or edited memories, re-embedded rows) and
  memories whose kind or time changed are listed in ``vector_log``;
- ``PRAGMA data_version`` says when another connection has committed, so a
  search on an unchanged store does no I/O at all.

A new process need not read every vector out of SQLite: the index is kept in
a snapshot file beside the store (:func:`snapshot_path`, ``<db>.<model>.vectors``),
memory-mapped on the first search and brought up to date through the same
steps (the vectors added since, ``vector_log`` since). Its arrays have room for
:data:`SNAPSHOT_MIN_ROWS` rows more, zeros, so that a process appends what was
written since the snapshot into the mapping (copy on write: a few pages) instead of
copying every row into arrays of its own. A snapshot of another
store (its ``created_at`` differs), one ahead of the store, or one that does
not add up to the store's count of vectors is never used: the index is then
read from SQLite as if there were none.

A large store (from :data:`~mnemex.engine.sqlite.codes.CODES_MIN_ROWS` vectors, with
faiss) keeps no second copy of its float32 vectors: its snapshot holds the rows'
fields alone, every full pass scans the rows' 8-bit codes (saved beside it), and the
few rows a search rescores exactly are read from SQLite by their embedding id, on a
read-only connection of the index's own (a search's vector arm runs on a worker
thread). At a million vectors that is 1.5 GB less on disk and in the memory of a
process that writes, for about 1 ms per search (256 rows read by id).

Filters never cost recall: the namespace, kinds, times and tags restrict the
rows *before* the top k are taken, so a filtered query returns the best
matches within the filter.

A memory scores its best window's cosine (a long text's windows are its token
windows and its sentences: see :meth:`mnemex.embed.local.LocalEmbedder.windows`).
A search takes the top ``k × w`` rows (``w``: the most windows a memory has, 1
when no text is longer than a window, so a store of short texts searches as if
there were no windows) and keeps each memory's best: the best k memories' best
windows are among them. It takes ``k × 4`` rows first, then 4 times more while
they hold fewer than k memories (:func:`row_steps`).
"""

from __future__ import annotations

import contextlib
import glob
import json
import math
import os
import re
import sqlite3
import threading
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mnemex.embed import SENTENCE_BASE
from mnemex.engine.sqlite import codes as codes_module
from mnemex.errors import IndexMismatch
from mnemex.index.retrieval import VectorHit
from mnemex.storage import IN_CHUNK, marks
from mnemex.storage.blobs import floats, is_vector
from mnemex.text import hash_function

if TYPE_CHECKING:
    import numpy as np

    from mnemex.engine.sqlite.ann import HnswIndex
    from mnemex.engine.sqlite.codes import StreamedCodes, VectorCodes
    from mnemex.index.retrieval import Filters

_COMPACT_FRACTION = 0.25
SNAPSHOT_MAGIC = b"MNXVEC04"  # 02: a row per window (``_win``); 03: no floats when large;
# 04: room for SNAPSHOT_MIN_ROWS more rows after each array
SNAPSHOT_MAX_HEADER = 1 << 26  # bytes (the namespace and kind codes)
STALE_SECONDS = 600  # a snapshot being written for this long was abandoned
SNAPSHOT_MIN_ROWS = 1_000  # vectors read from SQLite before the snapshot is written again
# The arrays of a snapshot, in file order (8-byte items first, so every array is aligned).
_SNAPSHOT_ARRAYS = (
    ("_eid", "int64"),
    ("_seq", "int64"),
    ("_created", "int64"),
    ("_ns", "int32"),
    ("_kind", "int32"),
    ("_win", "int32"),
    ("_valid", "bool"),
)
# Every per-row array of the index, the matrix first.
_ROW_ARRAYS = ("_matrix", *(name for name, _ in _SNAPSHOT_ARRAYS))
LOAD_CHUNK = 8_192  # vectors read per step when loading
# A filter allowing at least this share of the rows is applied to the graph's answers
# (a search that asks for 1/share times more), not inside the graph search.
ANN_POST_FILTER_SHARE = 0.75
ANN_MIN_ALLOWED = 5_000  # fewer allowed rows than this: exact search over them is cheaper
# float32 products are summed in an order that depends on the matrix (BLAS blocking), so
# a row's float32 cosine may differ in the last bits between stores; rows within this of
# the k-th best are rescored exactly before the top k are taken.
RESCORE_MARGIN = 1e-4
# Rows per memory a search first takes (times k): enough when the top rows hold k
# memories, as they do unless a few memories have many windows each (a long text has
# a window per sentence); each further step takes WINDOWS_FIRST times more.
WINDOWS_FIRST = 4
BEST_BLOCK = 16_384  # rows read at once for a set of queries' best cosines
BEST_QUERIES = 16  # queries whose best rows are rescored at once (their union, in memory)


def row_steps(k: int, windows: int) -> list[int]:
    """The rows a search of ``k`` memories takes, step by step, when a memory has at most
    ``windows`` rows: ``k × 4``, ``k × 16``, ... up to ``k × windows`` (which holds k)."""
    steps, per = [], 1
    while per < windows:
        per = min(per * WINDOWS_FIRST, windows)
        steps.append(k * per)
    return steps or [k]


def exact_cosines(rows: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Each row's inner product with ``query`` in float64: float32 products are exact in
    float64 and each row is summed on its own, so the result depends on the two vectors
    alone, not on the matrix around them."""
    import numpy

    products: np.ndarray = rows.astype(numpy.float64) * query.astype(numpy.float64)
    return products.sum(axis=1)  # type: ignore[no-any-return]


def _remove_stale(snapshot: Path) -> None:
    """Remove what writers stopped midway (a hook past its time limit) left behind."""
    import time

    for left in snapshot.parent.glob(f"{glob.escape(snapshot.name)}.*.tmp"):
        with contextlib.suppress(OSError):
            if time.time() - left.stat().st_mtime > STALE_SECONDS:
                left.unlink()


def snapshot_path(db_path: Path, model: str) -> Path:
    """Where the vector snapshot of ``model`` for the store at ``db_path`` is kept."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", model)
    return db_path.with_name(f"{db_path.name}.{safe}.vectors")


def backgrounds_path(snapshot: Path) -> Path:
    """Where the backgrounds measured on a snapshot's vectors are kept, beside it
    (``<db>.<model>.background``: see :class:`mnemex.search.background.Saved`)."""
    return snapshot.with_suffix(".background")


def window_spans(windows: np.ndarray) -> tuple[int, int]:
    """(the highest token window number + 1, the highest sentence window number's place
    among sentence windows + 1) of window numbers: of a memory's rows, the token windows
    and the sentence windows it has (0 for none)."""
    sentences = windows >= SENTENCE_BASE
    tokens = windows[~sentences]
    top = windows[sentences]
    return (
        int(tokens.max()) + 1 if len(tokens) else 0,
        int(top.max()) - SENTENCE_BASE + 1 if len(top) else 0,
    )


class VectorIndex:
    """One model's vectors in memory, searched exactly."""

    def __init__(
        self, conn: sqlite3.Connection, model: str, dim: int, snapshot: Path | None = None
    ) -> None:
        import numpy as np

        self._np = np
        self.conn = conn
        self.model = model
        self.dim = dim
        self._lock = threading.RLock()
        self._matrix = np.zeros((0, dim), dtype=np.float32)
        self._seq = np.zeros(0, dtype=np.int64)
        self._eid = np.zeros(0, dtype=np.int64)
        self._ns = np.zeros(0, dtype=np.int32)
        self._kind = np.zeros(0, dtype=np.int32)
        self._created = np.zeros(0, dtype=np.int64)  # epoch milliseconds
        self._win = np.zeros(0, dtype=np.int32)  # the window's number within its memory
        self._valid = np.zeros(0, dtype=bool)
        # At least the most token windows and sentence windows of one memory: their sum
        # bounds the rows a seq may take (``_windows``).
        self._most_tokens, self._most_sentences = 1, 0
        self._n = 0
        self._ns_codes: dict[str, int] = {}
        self._kind_codes: dict[str, int] = {}
        self._last_eid = -1  # -1: never loaded
        self._last_log = 0
        self._version: int | None = None
        self._dirty = True
        self._loads = 0  # refreshes that looked for changes (keys the cached size)
        self._size: tuple[int, int] | None = None  # (_loads, size) when last counted
        # (_loads, filters, first_windows) and the mask mask_for last gave for them
        self._last_mask: tuple[tuple[Any, ...], np.ndarray | None] | None = None
        # (_loads, rows in seq order, their seqs) when last sorted (see _by_seq)
        self._seq_order: tuple[int, np.ndarray, np.ndarray] | None = None
        self.corrupt = 0  # rows skipped because their BLOB is not a valid vector
        self.ann: HnswIndex | None = None  # optional approximate index (mnemex.engine.sqlite.ann)
        self.snapshot = snapshot  # the snapshot file (None: never read or written)
        self.from_snapshot = 0  # vectors the first load took from the snapshot
        # The rows' 8-bit codes (mnemex.engine.sqlite.codes), made on the first full scan,
        # and what the snapshot the first rows came from says (None: rows moved since).
        self.codes: VectorCodes | None = None
        self._snapshot_head: dict[str, Any] | None = None
        # The first rows whose vectors are read from SQLite, not held (zeros in the
        # matrix, pages never written): a large store's (see the module's docstring).
        self._stored = 0
        self._reader: sqlite3.Connection | None = None  # reads them (see _stored_vectors)
        self._read = 0  # vectors read from SQLite since the snapshot was last written

    # -- keeping in step -----------------------------------------------------------

    def mark_dirty(self) -> None:
        """This connection wrote: look for changes before the next search."""
        self._dirty = True

    @property
    def _windows(self) -> int:
        """At least the most windows of one memory (the rows a seq may take)."""
        return self._most_tokens + self._most_sentences

    @property
    def size(self) -> int:
        """Memories with searchable vectors (each has its window 0); counted again only
        after a refresh that changed the index (a pass over every row: 0.4 ms at 1M)."""
        with self._lock:
            self.refresh()
            if self._size is None or self._size[0] != self._loads:
                n = self._n
                self._size = (self._loads, int((self._valid[:n] & (self._win[:n] == 0)).sum()))
            return self._size[1]

    def refresh(self) -> None:
        with self._lock:
            version = int(self.conn.execute("PRAGMA data_version").fetchone()[0])
            if not self._dirty and version == self._version:
                return
            self._loads += 1
            in_tx = self.conn.in_transaction
            if not in_tx:
                self.conn.execute("BEGIN")
            try:
                if self._last_eid < 0:
                    self._first_load()
                else:
                    self._apply_log()
                    self._load_new()
            finally:
                if not in_tx:
                    self.conn.execute("COMMIT")
            self._version = version
            self._dirty = False
            self._maybe_compact()
            if self.snapshot is not None and self._read >= SNAPSHOT_MIN_ROWS:
                self._write_snapshot()

    # -- the snapshot file -----------------------------------------------------------

    def _first_load(self) -> None:
        """Everything, from the snapshot and what changed since, else from SQLite alone."""
        if self._read_snapshot():
            self._apply_log()
            self._load_new()
            if self._count() == int(self._valid[: self._n].sum()):
                self.from_snapshot = self._n
                if self.ann is not None:
                    self.ann.add(*self._rows_after(self.ann.max_id))
                return
            self._reset()  # does not add up: a stale or foreign snapshot
        row = self.conn.execute("SELECT max(id) FROM vector_log").fetchone()
        self._last_log = int(row[0] or 0)
        self._last_eid = 0
        self._load_new()

    def _count(self) -> int:
        return int(
            self.conn.execute(
                "SELECT count(*) FROM embeddings WHERE model = ?", (self.model,)
            ).fetchone()[0]
        )

    def _lineage(self) -> str:
        row = self.conn.execute("SELECT value FROM meta WHERE key = 'created_at'").fetchone()
        return str(row[0]) if row else ""

    def _reset(self) -> None:
        np = self._np
        self._matrix = np.zeros((0, self.dim), dtype=np.float32)
        for name, dtype in _SNAPSHOT_ARRAYS:
            setattr(self, name, np.zeros(0, dtype=dtype))
        self._n, self._read, self.corrupt, self._stored = 0, 0, 0, 0
        self._most_tokens, self._most_sentences = 1, 0
        self._ns_codes, self._kind_codes = {}, {}
        self._rows_moved()

    def _read_snapshot(self) -> bool:
        """Map the snapshot's arrays (copy on write: the file never changes); False when
        there is none or it cannot be this store's."""
        np = self._np
        if self.snapshot is None:
            return False
        try:
            with open(self.snapshot, "rb") as stream:
                if stream.read(8) != SNAPSHOT_MAGIC:
                    return False
                size = int.from_bytes(stream.read(8), "little")
                if size > SNAPSHOT_MAX_HEADER:
                    return False
                head = json.loads(stream.read(size))
            n, offset = int(head["n"]), int(head["offset"])
            rows = n + int(head["room"])
            if (
                head["model"] != self.model
                or int(head["dim"]) != self.dim
                or head["lineage"] != self._lineage()
            ):
                return False
            newest = self.conn.execute(
                "SELECT (SELECT max(id) FROM embeddings), (SELECT max(id) FROM vector_log)"
            ).fetchone()
            if int(head["last_eid"]) > int(newest[0] or 0) or int(head["last_log"]) > int(
                newest[1] or 0
            ):
                return False  # ahead of the store: not its snapshot
            floats = bool(head["floats"])
            if n == 0 or not (floats or _scans_codes(n)):
                return False  # (e.g. without faiss: the rows' vectors are then held)
            arrays = {}
            if floats:
                arrays["_matrix"] = np.memmap(
                    self.snapshot, dtype=np.float32, mode="c", offset=offset, shape=(rows, self.dim)
                )
                offset += rows * self.dim * 4
            for name, dtype in _SNAPSHOT_ARRAYS:
                arrays[name] = np.memmap(
                    self.snapshot, dtype=dtype, mode="c", offset=offset, shape=(rows,)
                )
                offset += rows * np.dtype(dtype).itemsize
        except (OSError, ValueError, KeyError, TypeError):
            return False
        if not self._same_vectors(
            arrays["_eid"][n - 1], arrays["_seq"][n - 1], head["last_vector"]
        ):
            return False
        if not floats:  # zeros never written: no memory until rows are added after them
            arrays["_matrix"] = np.zeros((n, self.dim), dtype=np.float32)
        for name, array in arrays.items():  # plain arrays over the mapping: no memmap per slice
            setattr(self, name, np.asarray(array))
        self._n, self._stored = n, 0 if floats else n
        self._most_tokens, self._most_sentences = window_spans(self._win[:n])
        self._ns_codes = {str(k): int(v) for k, v in head["namespaces"].items()}
        self._kind_codes = {str(k): int(v) for k, v in head["kinds"].items()}
        self._last_eid, self._last_log = int(head["last_eid"]), int(head["last_log"])
        self.corrupt = int(head.get("corrupt", 0))
        self._snapshot_head = {"lineage": head["lineage"], "last_eid": self._last_eid, "n": n}
        return True

    def _rows_moved(self) -> None:
        """The rows are no longer the snapshot's (compacted, or read again)."""
        self.codes, self._snapshot_head = None, None

    def _float_rows(self, rows: np.ndarray) -> np.ndarray:
        """The float32 vectors of ``rows``: from the matrix, or from SQLite for the rows
        it does not hold (see :attr:`_stored`)."""
        numpy = self._np
        rows = numpy.asarray(rows, dtype=numpy.int64)
        stored = rows < self._stored
        if not stored.any():
            found: np.ndarray = self._matrix[rows]
            return found
        out: np.ndarray = numpy.empty((len(rows), self.dim), dtype=numpy.float32)
        out[stored] = self._stored_vectors(self._eid[rows[stored]])
        out[~stored] = self._matrix[rows[~stored]]
        return out

    def _stored_vectors(self, eids: np.ndarray) -> np.ndarray:
        """The vectors of these embedding ids, read from SQLite (zeros for one dropped
        since the last refresh: the next one leaves its row out)."""
        if self._reader is None:
            self._reader = self._open_reader()
        wanted = eids.tolist()
        found: dict[int, bytes] = {}
        for start in range(0, len(wanted), IN_CHUNK):
            chunk = wanted[start : start + IN_CHUNK]
            found.update(
                self._reader.execute(
                    f"SELECT id, vector FROM embeddings WHERE id IN ({marks(len(chunk))})", chunk
                ).fetchall()
            )
        zero = bytes(self.dim * 2)
        return floats([found.get(eid, zero) for eid in wanted], self.dim)

    def _open_reader(self) -> sqlite3.Connection:
        """A read-only connection to the store's file, for any thread (under the lock)."""
        name = next(row[2] for row in self.conn.execute("PRAGMA database_list") if row[1] == "main")
        reader = sqlite3.connect(
            f"{Path(name).as_uri()}?mode=ro", uri=True, timeout=5.0, check_same_thread=False
        )
        self._closer = weakref.finalize(self, reader.close)
        return reader

    def close(self) -> None:
        """Close the connection that reads stored rows, if one was opened."""
        with self._lock:
            if self._reader is not None:
                self._reader = None
                self._closer()

    def _same_vectors(self, eid: int, seq: int, digest: str) -> bool:
        """Whether the snapshot's newest vector is the store's (when it is still there)."""
        row = self.conn.execute(
            "SELECT seq, vector FROM embeddings WHERE id = ? AND model = ?",
            (int(eid), self.model),
        ).fetchone()
        if row is None:
            return True  # dropped since: vector_log says so, and the count check follows
        if not is_vector(row[1], self.dim):
            return False
        return int(row[0]) == int(seq) and _digest(floats([row[1]], self.dim).tobytes()) == digest

    def _write_snapshot(self) -> None:
        """Save the index for the next process (atomically; never raises): the rows'
        fields and vectors, or for a large store their fields alone and the codes of the
        vectors beside them, the vectors being then read from SQLite (see the module's
        docstring)."""
        assert self.snapshot is not None
        n = self._n
        before = self._snapshot_head  # the rows of the files written last, when they stand
        floats = not self._large()
        if not floats:
            self._scan_codes()  # every row's, written beside the snapshot
        last = self._float_rows(self._np.array([n - 1]))[0].tobytes()
        head = {
            "model": self.model,
            "dim": self.dim,
            "lineage": self._lineage(),
            "n": n,
            "last_eid": self._last_eid,
            "last_log": self._last_log,
            "corrupt": self.corrupt,
            "namespaces": self._ns_codes,
            "kinds": self._kind_codes,
            "floats": floats,
            "room": SNAPSHOT_MIN_ROWS,
            "last_vector": _digest(last),
        }
        text = json.dumps(head, ensure_ascii=False).encode()
        # The arrays start at a multiple of 64 bytes; the header's own size is fixed first.
        offset = -(-(16 + len(text) + 32) // 64) * 64
        head["offset"] = offset
        text = json.dumps(head, ensure_ascii=False).encode().ljust(offset - 16)
        temporary = self.snapshot.with_name(f"{self.snapshot.name}.{os.getpid()}.tmp")
        _remove_stale(self.snapshot)
        try:
            with open(temporary, "wb") as stream:
                stream.write(SNAPSHOT_MAGIC + len(text).to_bytes(8, "little") + text)
                if floats:
                    stream.write(self._np.ascontiguousarray(self._matrix[:n]).tobytes())
                    stream.write(bytes(SNAPSHOT_MIN_ROWS * self.dim * 4))
                for name, dtype in _SNAPSHOT_ARRAYS:
                    stream.write(self._np.ascontiguousarray(getattr(self, name)[:n]).tobytes())
                    stream.write(bytes(SNAPSHOT_MIN_ROWS * self._np.dtype(dtype).itemsize))
            os.replace(temporary, self.snapshot)
            self._read = 0
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            return
        self._snapshot_head = {"lineage": head["lineage"], "last_eid": self._last_eid, "n": n}
        self._write_codes(n, before)
        if not floats and self._stored < n:  # let go of them: SQLite has them
            self._matrix = self._np.zeros(self._matrix.shape, dtype=self._np.float32)
            self._stored = n

    def _large(self) -> bool:
        """Whether full passes scan the rows' codes (and the snapshot holds no vectors)."""
        return self._stored > 0 or _scans_codes(self._n)

    def _write_codes(self, n: int, before: dict[str, Any] | None = None) -> None:
        """Write the codes of the snapshot's ``n`` rows beside it, for the first full scan
        of the next process (none for a small store or without faiss): only the rows added
        since ``before`` (the files' head when this index last wrote or read them, its rows
        not moved since) when the file on disk is still that one, else all of them."""
        assert self.snapshot is not None and self._snapshot_head is not None
        path = codes_module.codes_path(self.snapshot)
        _remove_stale(path)
        if self.codes is not None and self.codes.size == n:
            if before is not None and self.codes.append(path, before, self._snapshot_head):
                return
            self.codes.write(path, self._snapshot_head)

    def _rows_of_eids(self, eids: np.ndarray) -> np.ndarray:
        """Row of each embedding id, -1 where it has none (ids are stored in increasing order)."""
        import numpy

        known = self._eid[: self._n]
        rows = numpy.searchsorted(known, eids)
        rows[rows >= self._n] = 0
        found = (known[rows] == eids) if self._n else numpy.zeros(len(eids), dtype=bool)
        return numpy.where(found, rows, -1)

    def _apply_log(self) -> None:
        np = self._np
        rows = self.conn.execute(
            "SELECT id, op, embedding_id, seq FROM vector_log WHERE id > ? ORDER BY id",
            (self._last_log,),
        ).fetchall()
        if not rows:
            return
        self._last_log = rows[-1][0]
        dropped = np.array([r[2] for r in rows if r[1] == "drop"], dtype=np.int64)
        if len(dropped):
            hit = self._rows_of_eids(dropped)
            self._valid[hit[hit >= 0]] = False
        touched = sorted({r[3] for r in rows if r[1] == "touch"})
        if not touched:
            return
        n = self._n
        affected = np.flatnonzero(np.isin(self._seq[:n], touched) & self._valid[:n])
        if not len(affected):
            return
        meta = self._metadata([int(s) for s in self._seq[affected]])
        for row in affected.tolist():
            ns, kind, created = meta[int(self._seq[row])]
            self._ns[row] = ns
            self._kind[row] = kind
            self._created[row] = created

    def _metadata(self, seqs: list[int]) -> dict[int, tuple[int, int, int]]:
        """seq -> (namespace code, kind code, created_at in epoch ms) for these memories."""
        np = self._np
        if len(seqs) > 2_000 and seqs[-1] - seqs[0] < 4 * len(seqs):  # dense: one range scan
            wanted = set(seqs)
            rows = [
                r
                for r in self.conn.execute(
                    "SELECT seq, namespace, kind, created_at FROM memories "
                    "WHERE seq BETWEEN ? AND ?",
                    (seqs[0], seqs[-1]),
                )
                if r[0] in wanted
            ]
        else:
            rows = []
            for start in range(0, len(seqs), IN_CHUNK):
                chunk = seqs[start : start + IN_CHUNK]
                rows.extend(
                    self.conn.execute(
                        f"SELECT seq, namespace, kind, created_at FROM memories "
                        f"WHERE seq IN ({marks(len(chunk))})",
                        chunk,
                    )
                )
        if not rows:
            return {}
        seq_col, ns_col, kind_col, created_col = zip(*rows, strict=True)
        ns = self._codes(self._ns_codes, ns_col)
        kinds = self._codes(self._kind_codes, kind_col)
        created = np.array([c.rstrip("Z") for c in created_col], dtype="datetime64[ms]").astype(
            np.int64
        )
        return dict(
            zip(
                seq_col,
                zip(ns.tolist(), kinds.tolist(), created.tolist(), strict=True),
                strict=True,
            )
        )

    def _codes(self, codes: dict[str, int], values: Sequence[str]) -> np.ndarray:
        get = codes.get
        return self._np.array(
            [get(v) if v in codes else self._code(codes, v) for v in values], dtype=self._np.int32
        )

    def _load_new(self) -> None:
        """Append the vectors written since the last load, read in chunks."""
        total = self.conn.execute(
            "SELECT count(*) FROM embeddings WHERE model = ? AND id > ?",
            (self.model, self._last_eid),
        ).fetchone()[0]
        if not total:
            return
        self._reserve(self._n + total)
        before = self._n  # rows loaded earlier: the ones a memory written again supersedes
        # "+model": walk the primary key in id order instead of the model index and a sort.
        cursor = self.conn.execute(
            "SELECT id, seq, dim, vector, window FROM embeddings "
            "WHERE +model = ? AND id > ? ORDER BY id",
            (self.model, self._last_eid),
        )
        while rows := cursor.fetchmany(LOAD_CHUNK):
            self._append(rows, before)  # raises IndexMismatch first: it is not skipped
            self._last_eid = rows[-1][0]
            self._read += len(rows)

    def _append(self, rows: list[tuple[int, int, int, bytes, int]], before: int) -> None:
        """Add ``rows`` (id, seq, dim, vector, window); a memory's rows among the first
        ``before`` are superseded (its windows are written together, in one load)."""
        np = self._np
        wrong = next((r[2] for r in rows if r[2] != self.dim), None)
        if wrong is not None:
            raise IndexMismatch(
                f"the store holds {wrong}-dimensional vectors for model {self.model}, "
                f"which now gives {self.dim} dimensions: run `mnemex reindex --force`"
            )
        good = [r for r in rows if is_vector(r[3], self.dim)]
        self.corrupt += len(rows) - len(good)
        if not good:
            return
        block = floats([r[3] for r in good], self.dim)
        finite = np.isfinite(block).all(axis=1)
        if not finite.all():
            self.corrupt += int((~finite).sum())
            good = [r for r, ok in zip(good, finite.tolist(), strict=True) if ok]
            block = block[finite]
            if not good:
                return
        eids = np.array([r[0] for r in good], dtype=np.int64)
        seqs = np.array([r[1] for r in good], dtype=np.int64)
        wins = np.array([r[4] for r in good], dtype=np.int32)
        meta = self._metadata(sorted(set(seqs.tolist())))
        present = np.array([int(s) in meta for s in seqs.tolist()], dtype=bool)
        if not present.all():  # the memory went away while we read: skip its vector
            eids, seqs, wins, block = eids[present], seqs[present], wins[present], block[present]
            if not len(eids):
                return
        n = self._n
        if before:  # a memory embedded again (from its window 0): its older rows go
            old = np.isin(self._seq[:before], seqs[wins == 0]) & self._valid[:before]
            self._valid[:before][old] = False
        count = len(eids)
        self._reserve(n + count)
        end = n + count
        self._matrix[n:end] = block
        self._eid[n:end] = eids
        self._seq[n:end] = seqs
        self._win[n:end] = wins
        tokens, sentences = window_spans(wins)
        self._most_tokens = max(self._most_tokens, tokens)
        self._most_sentences = max(self._most_sentences, sentences)
        fields = np.array([meta[int(s)] for s in seqs.tolist()], dtype=np.int64).reshape(-1, 3)
        self._ns[n:end] = fields[:, 0]
        self._kind[n:end] = fields[:, 1]
        self._created[n:end] = fields[:, 2]
        self._valid[n:end] = True
        self._n = end
        if self.codes is not None:
            if self.codes.size == n:
                self.codes.add(block)
            else:  # out of step: made again on the next full scan
                self.codes = None
        if self.ann is not None:
            self.ann.add(block, eids)

    @staticmethod
    def _code(codes: dict[str, int], value: str) -> int:
        code = codes.get(value)
        if code is None:
            code = codes[value] = len(codes)
        return code

    def _reserve(self, rows: int) -> None:
        np = self._np
        if rows <= len(self._matrix):
            return
        capacity = max(rows, 2 * len(self._matrix), 1024)

        def grow(array: Any, shape: tuple[int, ...], start: int = 0) -> Any:
            bigger = np.zeros(shape, dtype=array.dtype)
            bigger[start : self._n] = array[start : self._n]
            return bigger

        # The stored rows stay zeros never written (no memory).
        self._matrix = grow(self._matrix, (capacity, self.dim), self._stored)
        for name in _ROW_ARRAYS[1:]:
            setattr(self, name, grow(getattr(self, name), (capacity,)))

    def _maybe_compact(self) -> None:
        n = self._n
        if n < 1000:
            return
        keep = self._np.flatnonzero(self._valid[:n])
        if len(keep) > n * (1 - _COMPACT_FRACTION):
            return
        count = len(keep)
        held = keep[keep >= self._stored]  # rows whose vectors the matrix holds
        stored = count - len(held)
        self._matrix[stored:count] = self._matrix[held]
        for name in _ROW_ARRAYS[1:]:
            array = getattr(self, name)
            array[:count] = array[keep]
        codes = self.codes
        self._n, self._stored = count, stored
        self._valid[count:] = False
        self._rows_moved()
        if codes is not None and codes.size == n:
            self.codes = codes.kept(keep)

    # -- searching -----------------------------------------------------------------

    def search(self, query: np.ndarray, filters: Filters, k: int) -> list[VectorHit]:
        """The ``k`` memories with the highest (best window's) cosine to ``query`` (unit
        length) within ``filters``."""
        return self.top(query, self.mask_for(filters), k)

    def mask_for(self, filters: Filters, *, first_windows: bool = False) -> np.ndarray | None:
        """Rows allowed by ``filters`` (``None``: none); with ``first_windows``, only each
        memory's first window (a memory compared as a whole text, as the duplicate check
        does, not by its best window). Reads the database: call it from the thread that
        owns the connection."""
        with self._lock:
            self.refresh()
            if self._n == 0:
                return None
            if filters.tags:  # read from the database: never kept
                return self._mask(filters, first_windows)
            key = (self._loads, filters, first_windows)
            if self._last_mask is None or self._last_mask[0] != key:
                mask = self._mask(filters, first_windows)
                if mask is not None:
                    mask.flags.writeable = False  # shared by the searches that ask again
                self._last_mask = (key, mask)
            return self._last_mask[1]

    def _mask(self, filters: Filters, first_windows: bool) -> np.ndarray | None:
        """:meth:`mask_for`, computed (a few passes over every row: 1 ms at 1M)."""
        np = self._np
        with self._lock:
            n = self._n
            mask = self._valid[:n].copy()
            if first_windows and self._windows > 1:
                mask &= self._win[:n] == 0
            if filters.namespace is not None:
                code = self._ns_codes.get(filters.namespace)
                if code is None:
                    return None
                mask &= self._ns[:n] == code
            if filters.kinds:
                codes = [self._kind_codes[k_] for k_ in filters.kinds if k_ in self._kind_codes]
                mask &= np.isin(self._kind[:n], codes)
            if filters.since is not None:
                mask &= self._created[:n] >= int(filters.since.timestamp() * 1000)
            if filters.until is not None:
                mask &= self._created[:n] < int(filters.until.timestamp() * 1000)
            for tag in filters.tags:
                seqs = [
                    r[0]
                    for r in self.conn.execute("SELECT seq FROM memory_tags WHERE tag = ?", (tag,))
                ]
                mask &= np.isin(self._seq[:n], np.asarray(seqs, dtype=np.int64))
            return mask

    def work(self, mask: np.ndarray | None) -> int:
        """Rows the exact product would read for this mask (0 when the HNSW index answers)."""
        if mask is None:
            return 0
        n = len(mask)
        allowed = int(self._np.count_nonzero(mask))
        if self.ann is not None and allowed >= max(ANN_MIN_ALLOWED, n // 10):
            return 0
        return allowed if allowed < n // 4 else n

    def top(self, query: np.ndarray, mask: np.ndarray | None, k: int) -> list[VectorHit]:
        """The ``k`` best memories within ``mask`` by their best window's cosine. Pure
        numpy: safe on a worker thread."""
        np = self._np
        with self._lock:
            if mask is None:
                return []
            n = len(mask)
            allowed = int(np.count_nonzero(mask))
            if allowed == 0:
                return []
            q = np.asarray(query, dtype=np.float32).reshape(-1)
            if self.ann is not None and allowed >= max(ANN_MIN_ALLOWED, n // 10):
                approximate = self._search_ann(q, mask, k, allowed / n)
                if approximate is not None:
                    return approximate
            codes = self._scan_codes() if allowed >= n // 4 or self._stored else None
            if codes is not None:
                whole = allowed == n == codes.size  # else the rows outside go by the mask
                return self._top_by_codes(codes, q, None if whole else mask, k, allowed)
            rows = np.flatnonzero(mask)
            if allowed < n // 4:  # few rows: score only those
                scores = self._matrix[rows] @ q
            else:  # most rows: score all, keep the allowed
                scores = (self._matrix[:n] @ q)[rows]
            # The top k × w rows hold the k best memories (a memory takes at most w rows);
            # so do fewer rows as soon as they hold k memories.
            for wanted in row_steps(k, self._windows):
                picked = rows
                if wanted < allowed:
                    kth = np.partition(scores, allowed - wanted)[allowed - wanted]
                    picked = rows[scores >= kth - RESCORE_MARGIN]
                found = self._exact_top(picked, q, k)
                if len(found) >= k or wanted >= allowed:
                    break
            return found

    def _scan_codes(self) -> VectorCodes | None:
        """The rows' 8-bit codes for a full scan (:mod:`mnemex.engine.sqlite.codes`):
        read from beside the snapshot when they are its rows', made from the matrix
        otherwise; ``None`` below :data:`~mnemex.engine.sqlite.codes.CODES_MIN_ROWS` rows
        or without faiss."""
        n = self._n
        if not self._large():
            return None
        if self.codes is None:
            self.codes = self._saved_codes() or codes_module.VectorCodes(self.dim)
            made = self.codes.size
            for start in range(made, n, codes_module.READ_CHUNK):
                rows = self._np.arange(start, min(n, start + codes_module.READ_CHUNK))
                self.codes.add(self._float_rows(rows))
            head = self._snapshot_head
            if made == 0 and head is not None and head["n"] == n and self.snapshot is not None:
                self._write_codes(n)
        return self.codes

    def _saved_codes(self) -> VectorCodes | None:
        head = self._snapshot_head
        if head is None or self.snapshot is None:
            return None
        return codes_module.VectorCodes.read(codes_module.codes_path(self.snapshot), self.dim, head)

    def _top_by_codes(
        self, codes: VectorCodes, q: np.ndarray, mask: np.ndarray | None, k: int, allowed: int
    ) -> list[VectorHit]:
        """The exact top ``k`` memories: the best rows by their codes, rescored exactly,
        more of them until no row left out can outscore the k-th (see
        :mod:`mnemex.engine.sqlite.codes`)."""
        m = min(allowed, max(codes_module.CODES_FIRST_POOL, k * WINDOWS_FIRST * 4))
        while True:
            rows, approx, error = codes.search(q, m, mask)
            found = self._exact_top(rows, q, k)
            if m >= allowed:
                return found
            if len(found) >= k and float(approx[-1]) + error < found[k - 1].cosine:
                return found
            m = min(allowed, m * 4)

    def _exact_top(self, rows: np.ndarray, q: np.ndarray, k: int) -> list[VectorHit]:
        """The ``k`` best memories of ``rows`` by exact cosine (a memory's best row), ties
        by seq."""
        np = self._np
        exact = exact_cosines(self._float_rows(rows), q)
        seqs = self._seq[rows]
        order = np.lexsort((seqs, -exact))
        if self._windows > 1:  # each memory once, at its best window
            _, first = np.unique(seqs[order], return_index=True)
            order = order[np.sort(first)]
        return [VectorHit(int(seqs[i]), float(exact[i])) for i in order[:k]]

    def _search_ann(
        self, q: np.ndarray, mask: np.ndarray, k: int, allowed: float
    ) -> list[VectorHit] | None:
        """Top ``k`` within ``mask`` from the HNSW graph, or ``None`` if it gives too few.

        A filter that leaves out many rows is applied inside the graph search (only the
        allowed embedding ids are candidates), so rows of other namespaces never take
        the places of the k. One that leaves out few (rows dropped since the graph was
        built, a namespace holding most of the store) is applied to the answers of a
        search that asks for more of them: a set of every allowed id costs more than
        the search (50 ms for a million). The hits are rescored exactly."""
        assert self.ann is not None
        np = self._np
        filtered = allowed < ANN_POST_FILTER_SHARE
        allowed_ids = self._eid[: len(mask)][mask] if filtered else None
        found: list[VectorHit] = []
        for rows_k in row_steps(k, self._windows):  # rows that hold the k best memories
            wanted = rows_k if filtered else min(self.ann.size, math.ceil(3 * rows_k / allowed))
            ids, _ = self.ann.search(q, wanted, allowed_ids)
            rows = self._rows_of_eids(ids.astype(np.int64))
            keep = rows >= 0  # deleted since the graph was built, or no answer (-1)
            keep[keep] = mask[rows[keep]]
            found = self._exact_top(rows[keep], q, k)
            if len(found) >= k:
                return found
        return None

    def best_cosines(self, mask: np.ndarray | None, queries: np.ndarray) -> np.ndarray:
        """Each query's best cosine (float64) among the rows of ``mask``, any window; -1
        for every query when there is none. Read in blocks: bounded memory."""
        numpy = self._np
        queries64 = numpy.asarray(queries, dtype=numpy.float64)
        best: np.ndarray = numpy.full(len(queries64), -1.0)
        with self._lock:
            if mask is None:
                return best
            allowed = int(numpy.count_nonzero(mask[: self._n]))
            codes = self._background_codes() if allowed >= self._n // 4 or self._stored else None
            if codes is not None and allowed:
                whole = allowed == self._n == len(mask) == codes.size
                return self._best_by_codes(codes, None if whole else mask, queries64, allowed)
            rows = numpy.flatnonzero(mask[: self._n])
            for start in range(0, len(rows), BEST_BLOCK):
                block = self._float_rows(rows[start : start + BEST_BLOCK]).astype(numpy.float64)
                numpy.maximum(best, (block @ queries64.T).max(axis=0), out=best)
        return best

    def _background_codes(self) -> VectorCodes | StreamedCodes | None:
        """The codes a pass over every row scores: with an HNSW graph (whose searches need
        no codes), those of the file read a chunk at a time, else :meth:`_scan_codes`."""
        head = self._snapshot_head
        if self.ann is not None and self.codes is None and head is not None and self._large():
            assert self.snapshot is not None
            path = codes_module.codes_path(self.snapshot)
            tail = self._float_rows(self._np.arange(head["n"], self._n))
            streamed = codes_module.StreamedCodes.open(path, self.dim, head, tail)
            if streamed is not None:
                return streamed
        return self._scan_codes()

    def _best_by_codes(
        self,
        codes: VectorCodes | StreamedCodes,
        mask: np.ndarray | None,
        queries: np.ndarray,
        allowed: int,
    ) -> np.ndarray:
        """:meth:`best_cosines` from the rows the codes rank first, rescored as the full
        pass scores every row (the same float64 product), more of them for a query until
        no row left out can outscore its best (see :mod:`mnemex.engine.sqlite.codes`)."""
        numpy = self._np
        best: np.ndarray = numpy.full(len(queries), -1.0)
        todo = numpy.arange(len(queries))
        m = min(allowed, codes_module.CODES_FIRST_POOL)
        while len(todo):
            rows, approx, bounds = codes.search_many(queries[todo], m, mask)
            for start in range(0, len(todo), BEST_QUERIES):
                group = slice(start, start + BEST_QUERIES)
                self._rescore_best(rows[group], todo[group], queries, best)
            last = numpy.array(
                [approx[j][numpy.count_nonzero(r >= 0) - 1] for j, r in enumerate(rows)]
            )
            short = (last + bounds >= best[todo]) if m < allowed else numpy.zeros(len(todo), bool)
            todo, m = todo[short], min(allowed, m * 4)
        return best

    def _rescore_best(
        self, rows: np.ndarray, todo: np.ndarray, queries: np.ndarray, best: np.ndarray
    ) -> None:
        """Set each query of ``todo``'s best cosine among its ``rows`` (-1 pads): every
        query's product with the rows any of them picked, in one product of the full
        pass's shape (the same sums, to the last bit)."""
        numpy = self._np
        union = numpy.sort(rows[rows >= 0])  # not numpy.unique: it imports numpy.ma
        union = union[numpy.concatenate(([True], union[1:] != union[:-1]))]
        products = self._float_rows(union).astype(numpy.float64) @ queries.T
        for j, query in enumerate(todo.tolist()):
            picked = rows[j][rows[j] >= 0]
            best[query] = float(products[numpy.searchsorted(union, picked), query].max())

    def sample_cosines(self, mask: np.ndarray | None, queries: np.ndarray, rows: int) -> np.ndarray:
        """The queries' cosines with at most ``rows`` vectors of ``mask``, spread evenly over
        them (every k-th), flattened."""
        numpy = self._np
        with self._lock:
            if mask is None:
                empty: np.ndarray = numpy.zeros(0)
                return empty
            allowed = numpy.flatnonzero(mask[: self._n])
            picked = allowed[:: max(1, -(-len(allowed) // rows))]
            block = self._float_rows(picked).astype(numpy.float64)
        found: np.ndarray = (block @ numpy.asarray(queries, dtype=numpy.float64).T).ravel()
        return found

    def _rows_of(self, seqs: Sequence[int]) -> np.ndarray:
        """The searchable rows (every window) of these memories, in row order: found in the
        rows sorted by seq (:meth:`_by_seq`), not by a pass over every row (7 ms at 1M)."""
        numpy = self._np
        # not numpy.unique: it imports numpy.ma (40 ms of a new process's search)
        wanted = numpy.asarray(sorted(set(seqs)), dtype=numpy.int64)
        order, sorted_seqs = self._by_seq()
        starts = numpy.searchsorted(sorted_seqs, wanted)
        ends = numpy.searchsorted(sorted_seqs, wanted, side="right")
        spans = [order[a:b] for a, b in zip(starts.tolist(), ends.tolist(), strict=True) if b > a]
        if not spans:
            none: np.ndarray = numpy.zeros(0, dtype=numpy.int64)
            return none
        rows = numpy.sort(numpy.concatenate(spans))
        found: np.ndarray = rows[self._valid[rows]]
        return found

    def _by_seq(self) -> tuple[np.ndarray, np.ndarray]:
        """The rows in seq order (stable: a memory's rows in row order) and their seqs, kept
        until the next refresh that looks for changes (rows come mostly in seq order, so
        sorting them again costs about 1 ms at 1M)."""
        numpy = self._np
        if self._seq_order is None or self._seq_order[0] != self._loads:
            seqs = self._seq[: self._n]
            order = numpy.argsort(seqs, kind="stable")
            self._seq_order = (self._loads, order, seqs[order])
        return self._seq_order[1], self._seq_order[2]

    def vectors_of(self, seqs: Sequence[int]) -> dict[int, np.ndarray]:
        """The vector of the first window of each memory that has one (copies)."""
        with self._lock:
            rows = self._rows_of(seqs)
            rows = rows[self._win[rows] == 0]
            vectors = self._float_rows(rows)
            return {int(self._seq[r]): vectors[i] for i, r in enumerate(rows.tolist())}

    def cosines_of(self, seqs: Sequence[int], query: np.ndarray) -> dict[int, float]:
        """The exact cosine (see :func:`exact_cosines`) to ``query`` of each memory that
        has a vector: its best window's."""
        with self._lock:
            return self._best(self._rows_of(seqs), query)

    def token_cosines_of(self, seqs: Sequence[int], query: np.ndarray) -> dict[int, float]:
        """The exact cosine to ``query`` of each of these memories that has sentence
        windows: its best token window's (the others' is their :meth:`cosines_of`). A
        store without sentence windows answers at once."""
        np = self._np
        with self._lock:
            if not self._most_sentences:
                return {}
            rows = self._rows_of(seqs)
            sentences = self._win[rows] >= SENTENCE_BASE
            long = np.isin(self._seq[rows], self._seq[rows[sentences]])
            return self._best(rows[long & ~sentences], query)

    def _best(self, rows: np.ndarray, query: np.ndarray) -> dict[int, float]:
        """Each memory's best exact cosine to ``query`` among ``rows``."""
        if not len(rows):
            return {}
        exact = exact_cosines(self._float_rows(rows), query)
        out: dict[int, float] = {}
        for seq, cosine in zip(self._seq[rows].tolist(), exact.tolist(), strict=True):
            if seq not in out or cosine > out[seq]:
                out[seq] = cosine
        return out

    def live(self) -> tuple[np.ndarray, np.ndarray]:
        """The searchable vectors and their embedding ids."""
        with self._lock:
            self.refresh()
            return self.live_rows()

    def live_rows(self) -> tuple[np.ndarray, np.ndarray]:
        keep = self._np.flatnonzero(self._valid[: self._n])
        return self._float_rows(keep), self._eid[keep]

    def _rows_after(self, eid: int) -> tuple[np.ndarray, np.ndarray]:
        """The searchable vectors with an embedding id above ``eid`` and their ids: only
        those rows are read (rows are in id order), not a copy of every vector."""
        start = int(self._np.searchsorted(self._eid[: self._n], eid, side="right"))
        keep = start + self._np.flatnonzero(self._valid[start : self._n])
        return self._float_rows(keep), self._eid[keep]

    def memory_bytes(self) -> int:
        """Bytes the rows take in memory (not the stored rows' zeros: never written)."""
        held = sum(getattr(self, n).nbytes for n in _ROW_ARRAYS)
        return int(held - self._stored * self.dim * 4)


def _scans_codes(n: int) -> bool:
    """Whether ``n`` rows are scanned through their 8-bit codes (their float32 vectors
    then being read from SQLite: see the module's docstring)."""
    return n >= codes_module.CODES_MIN_ROWS and codes_module.available()


def _digest(vector: bytes) -> str:
    """A vector's fingerprint (the snapshot's newest, checked against the store's)."""
    return str(hash_function("blake2b")(vector, digest_size=16).hexdigest())
