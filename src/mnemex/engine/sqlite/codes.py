"""8-bit codes of the vector index's rows: a fast first pass for exact search (faiss).

With ``pip install 'mnemex[ann]'``, a store of at least :data:`CODES_MIN_ROWS` rows is
scanned as one signed byte per dimension (``round(x × CODE_SCALE)``, a quarter of the
float32 matrix, summed by faiss's 8-bit kernels) instead of float32, and the best rows
are rescored exactly from the float32 rows: the answer is the exact top k, not an
approximation of it.

The query is rounded the same way (to integers up to 127: faiss sums the products of
two integer vectors, exactly in float32). Why the answer is exact: with ``x`` a row,
``q`` the query (unit length) and ``x'``, ``q'`` what their codes stand for,
``x·q - x'·q' = (x - x')·q + x'·(q - q')``, at most ``|x - x'| + |x'|·|q - q'|``
(Cauchy-Schwarz); ``|x - x'|`` is kept for every row (:attr:`VectorCodes.slack` is
the largest). Rows the first pass ranks below the ``m``-th cannot score more than
the ``m``-th's code product plus that bound; once the k-th memory found by exact
rescoring of the first ``m`` scores more, no row left out can take its place.
Otherwise ``m`` grows (up to every row).

The codes are kept in a file beside the vector snapshot (:func:`codes_path`, written
with it, for the same rows), so a new process reads 1 byte per dimension instead of
touching every page of the float32 snapshot.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

CODES_MAGIC = b"MNXCOD01"
CODE_SCALE = 400.0  # code = round(x × 400): components within ±0.3175 are not clipped
CODES_MIN_ROWS = 50_000  # fewer rows: the float32 matrix is scanned (it is small)
CODES_FIRST_POOL = 256  # rows the first pass hands to exact rescoring, at least
# The float32 division of an exact integer product: a bound on its rounding.
CODE_MARGIN = 1e-6
QUERY_RANGE = 127.0  # the query's largest component is rounded to this
READ_CHUNK = 1 << 16  # rows read from the codes file at once
HEADER_ROOM = 4_096  # bytes kept at the start of the codes file for its header


def available() -> bool:
    import importlib.util

    return importlib.util.find_spec("faiss") is not None


def write_codes(path: Path, head: dict[str, Any], chunks: Iterable[tuple[Any, float]]) -> None:
    """Write the codes file (header, then each chunk's code bytes), atomically, from
    ``chunks`` of (codes, their largest residual norm); never raises. The header goes in
    last, in the room kept for it: the slack is known once every chunk is written."""
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "wb") as stream:
            stream.write(bytes(HEADER_ROOM))
            rows, slack = 0, 0.0
            for codes, most in chunks:
                stream.write(memoryview(codes).cast("B"))
                rows, slack = rows + len(codes), max(slack, most)
            block = _header_block({**head, "n": rows, "slack": slack})
            if block is None:
                raise OSError("codes header too long")
            stream.seek(0)
            stream.write(block)
        os.replace(temporary, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temporary)


def codes_path(snapshot: Path) -> Path:
    """Where the codes of a vector snapshot's rows are kept, beside it."""
    return snapshot.with_suffix(".codes")


class VectorCodes:
    """One signed byte per dimension of each row, in row order, searched by faiss."""

    def __init__(self, dim: int) -> None:
        import faiss
        import numpy

        self._faiss = faiss
        self._np = numpy
        self.dim = dim
        self.index: Any = faiss.IndexScalarQuantizer(
            dim, faiss.ScalarQuantizer.QT_8bit_direct_signed, faiss.METRIC_INNER_PRODUCT
        )
        self.slack = 0.0  # the largest rounding residual's norm among the rows

    @property
    def size(self) -> int:
        return int(self.index.ntotal)

    def encode(self, vectors: np.ndarray) -> tuple[np.ndarray, float]:
        """The stored bytes of ``vectors`` (code + 128) and the largest residual norm."""
        np = self._np
        scaled = np.asarray(vectors, dtype=np.float32) * np.float32(CODE_SCALE)
        codes = np.clip(np.rint(scaled), -128, 127)
        residual = (scaled - codes) / np.float32(CODE_SCALE)
        slack = float(np.sqrt((residual.astype(np.float64) ** 2).sum(axis=1)).max(initial=0.0))
        return (codes + 128).astype(np.uint8), slack

    def add(self, vectors: np.ndarray) -> None:
        """Append the codes of ``vectors`` (the rows after the last one)."""
        for start in range(0, len(vectors), READ_CHUNK):
            codes, slack = self.encode(vectors[start : start + READ_CHUNK])
            self.add_codes(codes, slack)

    def add_codes(self, codes: np.ndarray, slack: float) -> None:
        if len(codes):
            self.index.add_sa_codes(self._np.ascontiguousarray(codes, dtype=self._np.uint8))
            self.slack = max(self.slack, slack)

    def search(
        self, query: np.ndarray, m: int, mask: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray, float]:
        """The ``m`` rows with the highest code products (within ``mask`` when given),
        those products as cosines, best first, and how far any row's may be from its
        exact cosine."""
        rows, approx, bounds = self.search_many(self._np.reshape(query, (1, -1)), m, mask)
        found = rows[0] >= 0
        return rows[0][found], approx[0][found], float(bounds[0])

    def search_many(
        self, queries: np.ndarray, m: int, mask: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`search` of each query (rows ``-1`` where fewer than ``m`` are allowed),
        on this thread alone (faiss's threads would wait for the cores the other arm
        uses)."""
        numpy, faiss = self._np, self._faiss
        exact = numpy.asarray(queries, dtype=numpy.float64)
        unit = QUERY_RANGE / numpy.maximum(numpy.abs(exact).max(axis=1), 1e-30)
        q = numpy.rint(exact * unit[:, None])
        error = numpy.sqrt(((exact - q / unit[:, None]) ** 2).sum(axis=1))
        bounds: np.ndarray = self.slack + (1.0 + self.slack) * error + CODE_MARGIN
        params = None
        if mask is not None:  # rows past its end (added since it was made) are left out
            allowed = numpy.zeros(self.size, dtype=bool)
            allowed[: len(mask)] = mask[: self.size]
            bits = numpy.packbits(allowed, bitorder="little")
            selector = faiss.IDSelectorBitmap(self.size, faiss.swig_ptr(bits))
            params = faiss.SearchParameters(sel=selector)
        threads = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(1)
        try:
            scores, rows = self.index.search(q.astype(numpy.float32), m, params=params)
        finally:
            faiss.omp_set_num_threads(threads)
        approx: np.ndarray = scores.astype(numpy.float64) / (CODE_SCALE * unit[:, None])
        return rows, approx, bounds

    def _view(self) -> Any:
        """The stored bytes, a row per vector (a view of faiss's, no copy)."""
        if not self.size:
            return ()
        return self._np.asarray(
            self._faiss.rev_swig_ptr(self.index.codes.data(), self.size * self.dim)
        ).reshape(self.size, self.dim)

    def kept(self, rows: np.ndarray) -> VectorCodes:
        """The codes of ``rows`` alone, in their order (the rows left when the index
        compacts)."""
        codes = VectorCodes(self.dim)
        view = self._view()
        for start in range(0, len(rows), READ_CHUNK):
            codes.add_codes(view[rows[start : start + READ_CHUNK]], self.slack)
        return codes

    def write(self, path: Path, head: dict[str, Any]) -> None:
        """Save the codes with ``head`` (what the snapshot they go with says), atomically;
        never raises."""
        view = self._view()
        chunks = (
            (view[start : start + READ_CHUNK], self.slack)
            for start in range(0, self.size, READ_CHUNK)
        )
        write_codes(path, {**head, "dim": self.dim}, chunks)

    def append(self, path: Path, before: dict[str, Any], head: dict[str, Any]) -> bool:
        """Add the rows after ``before["n"]`` to the codes file saved with ``before``, which
        then goes with ``head``: the rows written at its end, then its header, under an
        exclusive ``flock``. False, with the file left valid, when the file is not
        ``before``'s (another process wrote its own since) or cannot be appended to: it is
        then written whole (:meth:`write`). A store of 1,000,000 rows that gains 1,000
        writes 0.4 MB instead of 384 MB. A reader between the two writes finds rows its
        header does not count yet, and reads the header's."""
        try:
            import fcntl
        except ImportError:  # no flock (Windows): write it whole
            return False
        first = int(before["n"])
        if not 0 < first <= self.size:
            return False
        try:
            with open(path, "r+b") as stream:
                fcntl.flock(stream.fileno(), fcntl.LOCK_EX)
                found = _header(stream, self.dim, before)
                if (
                    found is None
                    or os.fstat(stream.fileno()).st_size != HEADER_ROOM + first * self.dim
                ):
                    return False
                stream.seek(HEADER_ROOM + first * self.dim)
                view = self._view()
                for start in range(first, self.size, READ_CHUNK):
                    stream.write(memoryview(view[start : start + READ_CHUNK]).cast("B"))
                stream.flush()
                block = _header_block(
                    {**head, "dim": self.dim, "n": self.size, "slack": self.slack}
                )
                if block is None:
                    stream.truncate(HEADER_ROOM + first * self.dim)
                    return False
                stream.seek(0)
                stream.write(block)
            return True
        except (OSError, ValueError, KeyError, TypeError):
            return False

    @classmethod
    def read(cls, path: Path, dim: int, head: dict[str, Any]) -> VectorCodes | None:
        """The saved codes when the file's header has ``head``'s values, else ``None``."""
        import numpy

        try:
            with open(path, "rb") as stream:
                found = _header(stream, dim, head)
                if found is None:
                    return None
                codes = cls(dim)
                rows = int(found["n"])
                for start in range(0, rows, READ_CHUNK):
                    count = min(READ_CHUNK, rows - start)
                    chunk = numpy.fromfile(stream, dtype=numpy.uint8, count=count * dim)
                    if len(chunk) != count * dim:
                        return None
                    codes.add_codes(chunk.reshape(count, dim), float(found["slack"]))
                return codes
        except (OSError, ValueError, KeyError, TypeError):
            return None


class StreamedCodes:
    """The codes of a file searched a chunk at a time (never all of them in memory, for a
    process that keeps an HNSW graph and scans every row only to measure a background),
    then those of ``tail``, the rows after the file's."""

    def __init__(self, path: Path, dim: int, rows: int, slack: float, tail: np.ndarray) -> None:
        self.path, self.dim, self.rows, self.slack = path, dim, rows, slack
        self.tail = VectorCodes(dim)
        self.tail.add(tail)
        self.size = rows + self.tail.size

    @classmethod
    def open(
        cls, path: Path, dim: int, head: dict[str, Any], tail: np.ndarray
    ) -> StreamedCodes | None:
        """The file's codes when its header has ``head``'s values, else ``None``."""
        try:
            with open(path, "rb") as stream:
                found = _header(stream, dim, head)
                if found is None or path.stat().st_size != HEADER_ROOM + found["n"] * dim:
                    return None
                return cls(path, dim, int(found["n"]), float(found["slack"]), tail)
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _chunks(self) -> Iterator[tuple[int, VectorCodes]]:
        import numpy

        with open(self.path, "rb") as stream:
            stream.seek(HEADER_ROOM)
            for start in range(0, self.rows, READ_CHUNK):
                count = min(READ_CHUNK, self.rows - start)
                chunk = VectorCodes(self.dim)
                raw = numpy.fromfile(stream, dtype=numpy.uint8, count=count * self.dim)
                chunk.add_codes(raw.reshape(count, self.dim), self.slack)
                yield start, chunk
        yield self.rows, self.tail

    def search_many(
        self, queries: np.ndarray, m: int, mask: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`VectorCodes.search_many` over every chunk, the best ``m`` of them all."""
        import numpy

        rows, approx, bounds = [], [], []
        for start, chunk in self._chunks():
            if not chunk.size:
                continue
            part = None if mask is None else mask[start : start + chunk.size]
            found, scores, bound = chunk.search_many(queries, min(m, chunk.size), part)
            rows.append(numpy.where(found >= 0, found + start, -1))
            approx.append(numpy.where(found >= 0, scores, -numpy.inf))
            bounds.append(bound)
        every, scores = numpy.concatenate(rows, axis=1), numpy.concatenate(approx, axis=1)
        order = numpy.argsort(-scores, axis=1, kind="stable")[:, :m]
        best_rows = numpy.take_along_axis(every, order, axis=1)
        best_scores = numpy.take_along_axis(scores, order, axis=1)
        return best_rows, best_scores, numpy.max(bounds, axis=0)


def _header_block(fields: dict[str, Any]) -> bytes | None:
    """The codes file's header (magic, length, JSON of ``fields`` and the scale), or
    ``None`` when it does not fit the room kept for it."""
    text = json.dumps({**fields, "scale": CODE_SCALE}, ensure_ascii=False).encode()
    if 16 + len(text) > HEADER_ROOM:
        return None
    return CODES_MAGIC + len(text).to_bytes(8, "little") + text


def _header(stream: Any, dim: int, head: dict[str, Any]) -> dict[str, Any] | None:
    """The codes file's header when it has ``head``'s values (and this dimension and
    scale), else ``None``; the stream is left at the first code."""
    if stream.read(8) != CODES_MAGIC:
        return None
    size = int.from_bytes(stream.read(8), "little")
    if size > HEADER_ROOM - 16:
        return None
    found: dict[str, Any] = json.loads(stream.read(size))
    stream.seek(HEADER_ROOM)
    if any(found.get(key) != value for key, value in head.items()):
        return None
    if found.get("dim") != dim or found.get("scale") != CODE_SCALE:
        return None
    return found
