"""The vector index: exact cosine over an in-process float32 matrix.

SQLite holds the vectors (``embeddings``, float32 BLOBs stamped with their
model); this module keeps one model's vectors in a numpy matrix, loaded on
first use and kept in step with every writer, this process or another:

- new vectors are the rows with an ``embeddings.id`` above the last one seen
  (ids only grow);
- dropped vectors (forgotten or edited memories, re-embedded rows) and
  memories whose kind or time changed are listed in ``vector_log``;
- ``PRAGMA data_version`` says when another connection has committed, so a
  search on an unchanged store does no I/O at all.

Filters never cost recall: the namespace, kinds, times and tags restrict the
rows *before* the top k are taken, so a filtered query returns the best
matches within the filter.
"""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mnemex.errors import IndexMismatch

if TYPE_CHECKING:
    import numpy as np

    from mnemex.index.fts import Filters

_COMPACT_FRACTION = 0.25


@dataclass(frozen=True, slots=True)
class VectorHit:
    seq: int
    cosine: float


class VectorIndex:
    """One model's vectors in memory, searched exactly."""

    def __init__(self, conn: sqlite3.Connection, model: str, dim: int) -> None:
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
        self._valid = np.zeros(0, dtype=bool)
        self._n = 0
        self._ns_codes: dict[str, int] = {}
        self._kind_codes: dict[str, int] = {}
        self._row_of_eid: dict[int, int] = {}
        self._rows_of_seq: dict[int, int] = {}
        self._last_eid = -1  # -1: never loaded
        self._last_log = 0
        self._version: int | None = None
        self._dirty = True
        self.corrupt = 0  # rows skipped because their BLOB is not a valid vector

    # -- keeping in step -----------------------------------------------------------

    def mark_dirty(self) -> None:
        """This connection wrote: look for changes before the next search."""
        self._dirty = True

    @property
    def size(self) -> int:
        """Vectors currently searchable."""
        with self._lock:
            self.refresh()
            return int(self._valid[: self._n].sum())

    def refresh(self) -> None:
        with self._lock:
            version = int(self.conn.execute("PRAGMA data_version").fetchone()[0])
            if not self._dirty and version == self._version:
                return
            in_tx = self.conn.in_transaction
            if not in_tx:
                self.conn.execute("BEGIN")
            try:
                if self._last_eid < 0:
                    row = self.conn.execute("SELECT max(id) FROM vector_log").fetchone()
                    self._last_log = int(row[0] or 0)
                    self._last_eid = 0
                else:
                    self._apply_log()
                self._load_new()
            finally:
                if not in_tx:
                    self.conn.execute("COMMIT")
            self._version = version
            self._dirty = False
            self._maybe_compact()

    def _apply_log(self) -> None:
        rows = self.conn.execute(
            "SELECT id, op, embedding_id, seq FROM vector_log WHERE id > ? ORDER BY id",
            (self._last_log,),
        ).fetchall()
        if not rows:
            return
        touched: set[int] = set()
        for log_id, op, embedding_id, seq in rows:
            self._last_log = log_id
            if op == "drop":
                row = self._row_of_eid.pop(embedding_id, None)
                if row is not None:
                    self._valid[row] = False
                    if self._rows_of_seq.get(seq) == row:
                        del self._rows_of_seq[seq]
            else:
                touched.add(seq)
        touched &= self._rows_of_seq.keys()
        for start in range(0, len(touched), 500):
            chunk = sorted(touched)[start : start + 500]
            for seq, kind, created in self.conn.execute(
                f"""SELECT seq, kind, CAST((julianday(created_at) - 2440587.5) * 86400000 AS INTEGER)
                    FROM memories WHERE seq IN ({",".join("?" * len(chunk))})""",
                chunk,
            ):
                row = self._rows_of_seq[seq]
                self._kind[row] = self._code(self._kind_codes, kind)
                self._created[row] = created

    def _load_new(self) -> None:
        np = self._np
        rows = self.conn.execute(
            """SELECT e.id, e.seq, e.dim, e.vector, m.namespace, m.kind,
                      CAST((julianday(m.created_at) - 2440587.5) * 86400000 AS INTEGER)
               FROM embeddings AS e JOIN memories AS m ON m.seq = e.seq
               WHERE e.model = ? AND e.id > ? ORDER BY e.id""",
            (self.model, self._last_eid),
        ).fetchall()
        if not rows:
            return
        self._last_eid = rows[-1][0]
        width = self.dim * 4
        good = []
        for row in rows:
            if row[2] != self.dim:
                raise IndexMismatch(
                    f"the store holds {row[2]}-dimensional vectors for model {self.model}, "
                    f"which now gives {self.dim} dimensions: run `mnemex reindex --force`"
                )
            if not isinstance(row[3], bytes) or len(row[3]) != width:
                self.corrupt += 1
                continue
            good.append(row)
        if not good:
            return
        block = np.frombuffer(b"".join(r[3] for r in good), dtype=np.float32).reshape(-1, self.dim)
        finite = np.isfinite(block).all(axis=1)
        if not finite.all():
            self.corrupt += int((~finite).sum())
            good = [r for r, ok in zip(good, finite, strict=True) if ok]
            block = block[finite]
            if not good:
                return
        count = len(good)
        self._reserve(self._n + count)
        start, end = self._n, self._n + count
        self._matrix[start:end] = block
        self._eid[start:end] = [r[0] for r in good]
        self._seq[start:end] = [r[1] for r in good]
        self._ns[start:end] = [self._code(self._ns_codes, r[4]) for r in good]
        self._kind[start:end] = [self._code(self._kind_codes, r[5]) for r in good]
        self._created[start:end] = [r[6] for r in good]
        self._valid[start:end] = True
        for offset, r in enumerate(good):
            row = start + offset
            self._row_of_eid[r[0]] = row
            old = self._rows_of_seq.get(r[1])
            if old is not None:  # replaced by a newer vector of the same memory
                self._valid[old] = False  # (its id leaves the map with its 'drop' entry)
            self._rows_of_seq[r[1]] = row
        self._n = end

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

        def grow(array: Any, shape: tuple[int, ...]) -> Any:
            bigger = np.zeros(shape, dtype=array.dtype)
            bigger[: self._n] = array[: self._n]
            return bigger

        self._matrix = grow(self._matrix, (capacity, self.dim))
        for name in ("_seq", "_eid", "_ns", "_kind", "_created", "_valid"):
            setattr(self, name, grow(getattr(self, name), (capacity,)))

    def _maybe_compact(self) -> None:
        n = self._n
        if n < 1000:
            return
        keep = self._np.flatnonzero(self._valid[:n])
        if len(keep) > n * (1 - _COMPACT_FRACTION):
            return
        count = len(keep)
        for name in ("_matrix", "_seq", "_eid", "_ns", "_kind", "_created", "_valid"):
            array = getattr(self, name)
            array[:count] = array[keep]
        self._n = count
        self._valid[count:] = False
        self._row_of_eid = {int(e): i for i, e in enumerate(self._eid[:count])}
        self._rows_of_seq = {int(s): i for i, s in enumerate(self._seq[:count])}

    # -- searching -----------------------------------------------------------------

    def search(self, query: np.ndarray, filters: Filters, k: int) -> list[VectorHit]:
        """The ``k`` rows with the highest cosine to ``query`` (unit length) within ``filters``."""
        np = self._np
        with self._lock:
            self.refresh()
            n = self._n
            if n == 0:
                return []
            mask = self._valid[:n].copy()
            if filters.namespace is not None:
                code = self._ns_codes.get(filters.namespace)
                if code is None:
                    return []
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
            rows = np.flatnonzero(mask)
            if len(rows) == 0:
                return []
            q = np.asarray(query, dtype=np.float32).reshape(-1)
            if len(rows) < n // 4:
                scores = self._matrix[rows] @ q
            else:
                scores = (self._matrix[:n] @ q)[rows]
            k = min(k, len(rows))
            top = np.argpartition(-scores, k - 1)[:k] if k < len(rows) else np.arange(len(rows))
            order = top[np.lexsort((self._seq[rows[top]], -scores[top]))]
            return [VectorHit(int(self._seq[rows[i]]), float(scores[i])) for i in order]

    def memory_bytes(self) -> int:
        return int(
            sum(
                getattr(self, n).nbytes
                for n in ("_matrix", "_seq", "_eid", "_ns", "_kind", "_created", "_valid")
            )
        )
