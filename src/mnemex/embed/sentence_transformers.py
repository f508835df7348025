"""Any sentence-transformers model, by name or local folder (needs PyTorch).

``pip install 'mnemex[sentence-transformers]'`` installs it with
``torch==2.13.0`` pinned (an unpinned torch resolves to a multi-GB CUDA
build). Names are resolved by sentence-transformers itself; offline, give a
local folder.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mnemex.errors import EmbeddingError, MissingExtra

if TYPE_CHECKING:
    import numpy as np


class SentenceTransformerEmbedder:
    def __init__(self, model: str, *, batch_size: int = 32, device: str = "cpu") -> None:
        self.model = model
        self.batch_size = batch_size
        self.device = device
        self._lock = threading.Lock()
        self._st: Any = None

    @property
    def model_id(self) -> str:
        return f"st:{self.model}"

    def load(self) -> Any:
        with self._lock:
            if self._st is None:
                try:
                    from sentence_transformers import SentenceTransformer
                except ImportError:
                    raise MissingExtra(
                        "sentence-transformers",
                        "the sentence-transformers embedder",
                        "sentence-transformers and torch",
                    ) from None
                try:
                    self._st = SentenceTransformer(self.model, device=self.device)
                except Exception as exc:
                    raise EmbeddingError(
                        f"cannot load sentence-transformers model {self.model!r}: {exc}"
                    ) from exc
            return self._st

    @property
    def dim(self) -> int:
        model = self.load()
        getter = getattr(model, "get_embedding_dimension", None) or (
            model.get_sentence_embedding_dimension  # sentence-transformers < 6
        )
        dim = getter()
        if not dim:
            raise EmbeddingError(f"model {self.model!r} does not report its dimension")
        return int(dim)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        model = self.load()
        return model.encode(  # type: ignore[no-any-return]
            list(texts),
            batch_size=self.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
