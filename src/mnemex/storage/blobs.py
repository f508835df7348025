"""How a SQLite store keeps a vector: a BLOB of float16 values, little-endian.

Half the bytes of float32: 768 rather than 1,536 a row at 384 dimensions, 770 MB less on
disk at a million vectors. The rows are L2-normalised (:func:`mnemex.embed.embed_checked`),
so every value is far inside float16's range and rounds by at most 2^-11 of itself (3e-8
near zero), and a cosine moves by about 1e-5 (at most 6e-5 on 10,000 vectors of the local
model, the top 10 of 200 queries unchanged). A BLOB of float32, as stores kept them
before schema 10, is read as it is: the width says which (and schema 10 turns them into
float16, see :func:`half_blob`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

STORED = "<f2"


def stored(vectors: np.ndarray) -> np.ndarray:
    """Rows of vectors as stored: each row's ``.data`` is its BLOB (no copy per row)."""
    import numpy as np

    out: np.ndarray = np.ascontiguousarray(vectors, dtype=STORED)
    return out


def is_vector(blob: object, dim: int) -> bool:
    """Whether ``blob`` holds a vector of ``dim`` values, float16 or float32."""
    return isinstance(blob, bytes | memoryview) and _size(blob) in (2 * dim, 4 * dim)


def _size(blob: bytes | memoryview) -> int:
    return blob.nbytes if isinstance(blob, memoryview) else len(blob)  # a view's len counts items


def floats(blobs: Sequence[bytes | memoryview], dim: int) -> np.ndarray:
    """The float32 rows of stored BLOBs (see :func:`is_vector`; ValueError otherwise)."""
    import numpy as np

    out: np.ndarray = np.empty((len(blobs), dim), dtype=np.float32)
    if not blobs:
        return out
    if all(_size(b) == 2 * dim for b in blobs):  # the usual case: one conversion
        out[:] = np.frombuffer(b"".join(blobs), dtype=STORED).reshape(-1, dim)
        return out
    for i, blob in enumerate(blobs):
        if not is_vector(blob, dim):
            raise ValueError(f"a stored vector of {_size(blob)} bytes is not one of {dim} values")
        out[i] = np.frombuffer(blob, dtype=STORED if _size(blob) == 2 * dim else "<f4")
    return out


def half_blob(blob: Any, dim: Any) -> Any:
    """A float32 BLOB of ``dim`` values as float16, anything else as it is (the SQL
    function of the schema 10 migration)."""
    if not isinstance(blob, bytes) or not isinstance(dim, int) or len(blob) != 4 * dim:
        return blob
    import numpy as np

    return np.frombuffer(blob, dtype="<f4").astype(STORED).tobytes()
