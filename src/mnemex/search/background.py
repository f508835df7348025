"""A store's background: how close it comes to queries that have nothing to do with it.

The relevance floor (:mod:`mnemex.search.floor`) reads a memory's cosine against the
namespace's *background level*: the median, over a fixed set of unrelated queries
(``mnemex/data/background.txt``: a hundred everyday questions and requests, most in
English, a few in other languages), of the best cosine the namespace gives each. A
namespace of short chat turns sits higher than one of long abstracts; a small store
lower than a large one. The queries' vectors of a calibrated model ship beside them
(``background-<model>.npy``, written by ``scripts/background_vectors.py``), so a
process never embeds them.

Each hit is read against a second measure: how close unrelated queries come to a single
memory (the 95th percentile of their cosines with a sample of the namespace's vectors).
Both are computed by the engine over the vectors the search may return, kept per
namespace and filters in the session (``session.backgrounds``, owned here), and
computed again when the number of those vectors has moved by more than a tenth.
A SQLite store keeps them for the next process too (:class:`Saved`: beside its vector
snapshot, checked as the snapshot is), so that a hook or shell command that searches
need not measure them.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Hashable, MutableMapping, Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mnemex.embed import Embedder, embed_checked
from mnemex.records import dataclass

if TYPE_CHECKING:
    import numpy as np

DATA = Path(__file__).resolve().parents[1] / "data"
QUERIES = DATA / "background.txt"
DRIFT = 0.1  # share of the vectors added or removed after which the level is measured again
KEPT = 256  # levels a session keeps (a search filtered by time has a key of its own)


def queries() -> list[str]:
    """The unrelated queries, one a line."""
    return [line for line in QUERIES.read_text(encoding="utf-8").splitlines() if line.strip()]


def vectors_path(model_key: str) -> Path:
    return DATA / f"background-{model_key}.npy"


@cache
def shipped(model_key: str) -> np.ndarray | None:
    """The unrelated queries' vectors that ship for a calibrated model (``None``: none)."""
    path = vectors_path(model_key)
    if not path.exists():
        return None
    import numpy as np

    found: np.ndarray = np.load(path, allow_pickle=False).astype(np.float32)
    return found


_embedded: dict[str, np.ndarray] = {}


def vectors(model_key: str, embedder: Embedder) -> np.ndarray:
    """The unrelated queries' vectors of ``embedder``: those that ship for its calibrated
    model when they fit it, else embedded once per process (L2-normalized)."""
    found = shipped(model_key)
    if found is not None and found.shape[1] == embedder.dim:
        return found
    if embedder.model_id not in _embedded:
        import numpy as np

        _embedded[embedder.model_id] = np.asarray(embed_checked(embedder, queries()))
    return _embedded[embedder.model_id]


@dataclass(frozen=True, slots=True)
class Background:
    """How close a namespace comes to unrelated queries: ``level``, the median over them of
    the best cosine it gives each (what a search's best memory is read against); and
    ``memory``, the :data:`PAIR_QUANTILE` of the cosines between them and single memories
    (what each hit is read against)."""

    level: float
    memory: float


PAIR_QUANTILE = 0.95
PAIR_ROWS = 2_000  # vectors the pairs are sampled from


def measure(best: Sequence[float], pairs: Sequence[float]) -> Background | None:
    """The background of these best cosines and pair cosines (``None``: nothing to compare).
    The pair quantile is the element a sort would put at its rank, found without sorting."""
    import numpy as np

    found = np.asarray(best, dtype=np.float64)
    found = found[found > -1.0]
    values = np.asarray(pairs, dtype=np.float64)
    if not found.size or not values.size:
        return None
    at = min(values.size - 1, int(PAIR_QUANTILE * values.size))
    return Background(float(np.median(found)), float(np.partition(values, at)[at]))


Kept = tuple[int, Background | None]  # the count of vectors it was measured on, the background


@dataclass(frozen=True, slots=True)
class Saved:
    """The backgrounds of a store kept in a file for the next process: beside its vector
    snapshot, and read only when ``stamp`` (the store's lineage, the model, the dimension,
    as the snapshot's header has them) is the file's; each background, like the session's,
    only while its count of vectors has moved by at most :data:`DRIFT`. Never raises:
    a file that cannot be read or written is one without backgrounds."""

    path: Path
    stamp: dict[str, Any]

    def read(self) -> dict[str, Kept]:
        try:
            found = json.loads(self.path.read_text(encoding="utf-8"))
            if found["stamp"] != self.stamp:
                return {}
            return {
                str(key): (
                    int(count),
                    None if level is None else Background(float(level), float(memory)),
                )
                for key, count, level, memory in found["backgrounds"]
            }
        except (OSError, ValueError, KeyError, TypeError):
            return {}

    def write(self, key: str, kept: Kept) -> None:
        entries = self.read()
        entries.pop(key, None)
        entries[key] = kept
        rows = [
            [k, count, *((None, None) if value is None else (value.level, value.memory))]
            for k, (count, value) in list(entries.items())[-KEPT:]
        ]
        temporary = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        try:
            text = json.dumps({"stamp": self.stamp, "backgrounds": rows})
            temporary.write_text(text, encoding="utf-8")
            os.replace(temporary, self.path)
        except OSError:
            with contextlib.suppress(OSError):
                temporary.unlink(missing_ok=True)


def cached(
    cache_: MutableMapping[Hashable, Any],
    key: Hashable,
    count: int,
    best: Callable[[], Sequence[float]],
    pairs: Callable[[], Sequence[float]],
    saved: Callable[[], Saved | None] = lambda: None,
) -> Background | None:
    """The background kept under ``key`` (in ``cache_``, else in the file ``saved()`` names,
    asked for only then) while the vectors it was measured on (``count`` now) moved by at
    most :data:`DRIFT` of them; else measured again (``best``: each query's best cosine;
    ``pairs``: the queries' cosines with a sample of the vectors), and kept in both."""
    kept = cache_.get(key)
    file = saved() if kept is None and count else None
    if file is not None:
        kept = file.read().get(repr(key))
    if kept is not None and abs(count - kept[0]) <= DRIFT * kept[0]:
        _keep(cache_, key, kept)
        return kept[1]  # type: ignore[no-any-return]
    value = measure(best(), pairs()) if count else None
    _keep(cache_, key, (count, value))
    if count and (file := file or saved()) is not None:
        file.write(repr(key), (count, value))
    return value


def _keep(cache_: MutableMapping[Hashable, Any], key: Hashable, kept: Kept) -> None:
    if cache_.get(key) is kept:
        return
    cache_.pop(key, None)
    while len(cache_) >= KEPT:
        del cache_[next(iter(cache_))]
    cache_[key] = kept
