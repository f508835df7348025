"""Approximate nearest neighbours for large stores: an HNSW graph (faiss), optional.

Exact search is the default and stays the truth. Past ``ann_threshold``
vectors, with ``pip install 'mnemex[ann]'``, ``mnemex embed`` and ``mnemex
reindex`` build an HNSW index of the model's vectors and keep it beside the
database (``<db>.<model>.hnsw``, one file per model, replaced atomically, so
its size stays that of the vectors, as 8-bit codes, plus the graph). Searches
use it when it exists, and rescore its answers exactly:

- it is keyed by embedding id, so any process can load it and add the
  vectors written since (ids only grow) in memory;
- vectors deleted since it was built are skipped in its answers; once they
  are a quarter of it, the next ``embed`` rebuilds it;
- a selective filter (few allowed rows) is answered exactly over the
  allowed rows instead, as a graph search would return too few of them.
"""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mnemex.errors import MissingExtra

if TYPE_CHECKING:
    import numpy as np

HNSW_M = 32  # neighbours per node
EF_CONSTRUCTION = 100
EF_SEARCH = 512  # recall@10 against exact search is measured in benchmarks/RESULTS.md
REBUILD_DEAD_FRACTION = 0.25
# Vectors from which the graph stores 8-bit codes (trained on them) instead of float32.
SQ8_MIN_VECTORS = 1_000


def available() -> bool:
    import importlib.util

    return importlib.util.find_spec("faiss") is not None


def sidecar(db_path: Path, model: str) -> Path:
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", model)
    return db_path.with_name(f"{db_path.name}.{safe}.hnsw")


class HnswIndex:
    """An HNSW graph over embedding ids, loaded from / saved to one file."""

    def __init__(self, path: Path, dim: int) -> None:
        try:
            import faiss
        except ImportError:
            raise MissingExtra("ann", "approximate search", "faiss") from None
        self._faiss = faiss
        self.path = path
        self.dim = dim
        self._lock = threading.Lock()
        self.index: Any = None
        self.max_id = 0  # largest embedding id in the graph
        self.size = 0

    @classmethod
    def load(cls, path: Path, dim: int) -> HnswIndex | None:
        """The saved index, or ``None`` when there is none (or it does not fit)."""
        meta_path = path.with_suffix(path.suffix + ".json")
        if not path.exists() or not meta_path.exists():
            return None
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return None
        if meta.get("dim") != dim:
            return None
        ann = cls(path, dim)
        try:
            ann.index = ann._faiss.read_index(str(path))
        except RuntimeError:
            return None
        ann.max_id = int(meta["max_id"])
        ann.size = int(ann.index.ntotal)
        ann._hnsw().efSearch = EF_SEARCH
        return ann

    def _hnsw(self) -> Any:
        graph: Any = self._faiss.downcast_index(self.index.index)
        return graph.hnsw

    def build(self, vectors: np.ndarray, ids: np.ndarray) -> None:
        """A new graph of ``vectors`` (keyed by ``ids``). Past :data:`SQ8_MIN_VECTORS` the
        graph keeps each vector as 8-bit codes (faiss's scalar quantizer, trained on these
        vectors): a third of the file and memory of float32, with the same recall once the
        hits are rescored exactly (measured in benchmarks/RESULTS.md)."""
        faiss = self._faiss
        graph: Any
        if len(ids) >= SQ8_MIN_VECTORS:
            graph = faiss.IndexHNSWSQ(
                self.dim, faiss.ScalarQuantizer.QT_8bit, HNSW_M, faiss.METRIC_INNER_PRODUCT
            )
            graph.train(vectors)
        else:  # too few vectors to train on: float32
            graph = faiss.IndexHNSWFlat(self.dim, HNSW_M, faiss.METRIC_INNER_PRODUCT)
        graph.hnsw.efConstruction = EF_CONSTRUCTION
        index = faiss.IndexIDMap2(graph)
        if len(ids):
            index.add_with_ids(vectors, ids.astype("int64"))
        self.index = index
        self._hnsw().efSearch = EF_SEARCH
        self.max_id = int(ids.max()) if len(ids) else 0
        self.size = int(index.ntotal)

    def add(self, vectors: np.ndarray, ids: np.ndarray) -> None:
        """Add vectors whose ids are above ``max_id`` (others are already in)."""
        keep = ids > self.max_id
        if keep.any():
            with self._lock:
                self.index.add_with_ids(vectors[keep], ids[keep].astype("int64"))
                self.max_id = int(ids[keep].max())
                self.size = int(self.index.ntotal)

    def search(
        self, query: np.ndarray, k: int, allowed: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Embedding ids and inner products of the approximately ``k`` best (among the
        ``allowed`` embedding ids when given: the graph search skips the others, so
        the k places all go to allowed ids; -1 pads a short answer)."""
        faiss = self._faiss
        with self._lock:
            hnsw = self._hnsw()
            hnsw.efSearch = max(EF_SEARCH, k)
            if allowed is None:
                scores, ids = self.index.search(query.reshape(1, -1), k)
            else:
                selector = faiss.IDSelectorBatch(allowed.astype("int64"))
                params = faiss.SearchParametersHNSW(sel=selector, efSearch=max(EF_SEARCH, k))
                scores, ids = self.index.search(query.reshape(1, -1), k, params=params)
        return ids[0], scores[0]

    def save(self) -> None:
        tmp = self.path.with_name(self.path.name + f".{os.getpid()}.tmp")
        self._faiss.write_index(self.index, str(tmp))
        os.replace(tmp, self.path)
        meta = {"dim": self.dim, "max_id": self.max_id, "size": self.size}
        meta_tmp = self.path.with_name(self.path.name + f".{os.getpid()}.json.tmp")
        meta_tmp.write_text(json.dumps(meta), encoding="utf-8")
        os.replace(meta_tmp, self.path.with_suffix(self.path.suffix + ".json"))
