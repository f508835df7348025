"""An embedding cache for evaluations: vectors kept per (model, text) between runs.

An evaluation builds a fresh store each run, and embedding its corpus is
nearly all of its cost (SciFact's 5,183 abstracts take minutes on two cores
with the local model). :class:`CachedEmbedder` wraps any embedder: a text
whose vector for the same ``model_id`` is in the cache file (a SQLite table
keyed by the model and the SHA-256 of the text) is not embedded again; the
others are embedded in one call and stored. The vectors are the embedder's
own float32 output, so a cached run ranks exactly as an uncached one.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mnemex.errors import InvalidInput
from mnemex.storage import IN_CHUNK, marks
from mnemex.text import batched

if TYPE_CHECKING:
    import numpy as np

    from mnemex.embed import Embedder

CACHE_FILE = "embeddings.sqlite"
# Seconds to wait for another process writing the cache (SQLite's default is 5): a lookup
# that gave up would fail the query's embedding, and the search would answer lexically.
BUSY_SECONDS = 600.0
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS vectors ("
    "model TEXT NOT NULL, sha256 BLOB NOT NULL, dim INTEGER NOT NULL, vector BLOB NOT NULL, "
    "PRIMARY KEY (model, sha256)) WITHOUT ROWID"
)


def default_cache_dir() -> Path:
    """``$MNEMEX_HOME/cache`` when ``MNEMEX_HOME`` is set, else the user cache dir."""
    home = os.environ.get("MNEMEX_HOME")
    if home:
        return Path(home).expanduser() / "cache"
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("mnemex", appauthor=False))


def digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


class CachedEmbedder:
    """An embedder that looks vectors up in a cache file before embedding."""

    def __init__(self, inner: Embedder, directory: Path) -> None:
        self.inner = inner
        try:
            directory.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(
                directory / CACHE_FILE, timeout=BUSY_SECONDS, check_same_thread=False
            )
            self._conn.execute(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise InvalidInput(
                f"cannot use {directory} as an embedding cache ({exc}): "
                "give another --embed-cache folder, or --no-embed-cache"
            ) from None
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dim(self) -> int:
        return self.inner.dim

    def __getattr__(self, name: str) -> Any:  # anything else the wrapped embedder offers
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        import numpy as np

        keys = [digest(t) for t in texts]
        model = self.inner.model_id
        found: dict[bytes, np.ndarray] = {}
        with self._lock:
            unique = list(dict.fromkeys(keys))
            for chunk in batched(unique, IN_CHUNK):
                where = f"model = ? AND sha256 IN ({marks(len(chunk))})"
                sql = f"SELECT sha256, dim, vector FROM vectors WHERE {where}"
                for key, dim, blob in self._conn.execute(sql, [model, *chunk]):
                    found[key] = np.frombuffer(blob, dtype=np.float32, count=dim)
        missing = [i for i, key in enumerate(keys) if key not in found]
        todo = list(dict.fromkeys(keys[i] for i in missing))
        if todo:
            first = {key: i for i, key in reversed(list(enumerate(keys)))}
            fresh = np.asarray(self.inner.embed([texts[first[k]] for k in todo]), dtype=np.float32)
            with self._lock, self._conn:
                self._conn.executemany(
                    "INSERT OR REPLACE INTO vectors (model, sha256, dim, vector) VALUES (?, ?, ?, ?)",
                    [
                        (model, key, int(vector.shape[0]), vector.tobytes())
                        for key, vector in zip(todo, fresh, strict=True)
                    ],
                )
            found.update(zip(todo, fresh, strict=True))
        self.hits += len(keys) - len(missing)
        self.misses += len(missing)
        if not keys:
            return np.zeros((0, self.inner.dim), dtype=np.float32)
        return np.stack([found[key] for key in keys])

    def close(self) -> None:
        self._conn.close()
