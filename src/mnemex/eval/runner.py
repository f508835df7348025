"""Shared plumbing of the evaluations: a store, a search spec, timed queries."""

from __future__ import annotations

import contextlib
import platform
import tempfile
import time
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from mnemex.config import Settings, load_settings
from mnemex.embed import Embedder
from mnemex.embed import resolve as resolve_embedder
from mnemex.eval.embed_cache import CachedEmbedder
from mnemex.eval.metrics import ranked_run
from mnemex.models import SearchResult
from mnemex.progress import progress_bar
from mnemex.records import dataclass
from mnemex.search.floor import FLOOR_VERSION, floor_for
from mnemex.store import ALL, Store
from mnemex.version import __version__

INGEST_BATCH = 5_000
FOREIGN_DEPTH = 10  # a foreign query is answered when it gets any hit
# An evaluation measures the ranking, not the machine: each search waits for its query's
# vector however long embedding it takes (an agent's search answers lexically after
# ``query_timeout``, so a loaded machine would change the numbers), and no search syncs a
# workspace under ``sync_timeout`` (the evaluation syncs its folders whole before searching).
DETERMINISTIC: dict[str, Any] = {"query_timeout": 3600.0, "sync_on_search": False}


@dataclass(frozen=True)
class Spec:
    """How to search: ``None`` fields take the store's defaults."""

    mode: str | None = None
    fusion: str | None = None
    weights: tuple[float, float] | None = None
    lexical_budget: int | None = None
    embedder: str | None = None
    embed_cache: Path | None = None  # keep corpus vectors here between runs (see embed_cache.py)

    @property
    def vectors(self) -> bool:
        """Whether the searches may use vectors (every mode but lexical)."""
        return (self.mode or "auto") != "lexical"

    def settings(self) -> dict[str, Any]:
        return {"lexical_budget": self.lexical_budget, "embedder": self.embedder}

    def search(
        self, store: Store, text: str, limit: int, namespace: str | None, floor: bool = True
    ) -> SearchResult:
        """One search as the spec says, without snippets (nothing reads them); without
        ``floor``, with no relevance floor or thresholds (``threshold=False``)."""
        return store.search(
            text,
            limit,
            mode=self.mode,
            fusion=self.fusion,
            weights=self.weights,
            namespace=namespace,
            snippets=False,
            threshold=None if floor else False,
        )

    def describe(self, store: Store, fusions: Collection[str] = ()) -> dict[str, Any]:
        """How the searches ran; ``fusions``: the fusion versions their results report."""
        model = store.embedder.model_id if store.embedder is not None else None
        mode = self.mode or store.settings.search_mode
        if mode == "auto":
            mode = "hybrid" if model else "lexical"
        fusion = self.fusion or store.settings.fusion
        weights = self.weights or (store.settings.vector_weight, store.settings.text_weight)
        out: dict[str, Any] = {
            "mode": mode,
            "embedder": model if mode != "lexical" else None,
            "lexical": f"fts5 bm25 (k1=1.2, b=0.75), lexical_budget={store.settings.lexical_budget}",
        }
        if mode != "lexical":
            floor = floor_for(model) if store.settings.relevance_floor else None
            out["relevance_floor"] = f"{FLOOR_VERSION} {floor}" if floor is not None else "off"
        if mode == "hybrid":
            params = (
                f"k={store.settings.rrf_k}" if fusion == "rrf" else "{:g}, {:g}".format(*weights)
            )
            out["fusion"] = f"{fusion}({params}) {' '.join(sorted(fusions)) or 'unused'}"
        return out


@contextlib.contextmanager
def eval_store(
    db: Path | str | None, spec: Spec, *, embedder: Embedder | None = None, **settings: Any
) -> Iterator[Store]:
    """The store at ``db`` (a file or a PostgreSQL URL), or a temporary one deleted
    afterwards, searching as :data:`DETERMINISTIC` says; ``embedder``: this one rather
    than the spec's by name."""
    given = {**DETERMINISTIC, **spec.settings(), **settings}
    overrides = {k: v for k, v in given.items() if v is not None}
    if db is not None:
        with _opened(load_settings(db, **overrides), spec, embedder) as store:
            yield store
        return
    with (
        tempfile.TemporaryDirectory(prefix="mnemex-eval-") as tmp,
        _opened(
            load_settings(Path(tmp) / "eval.db", home=tmp, **overrides), spec, embedder
        ) as store,
    ):
        yield store


@contextlib.contextmanager
def _opened(settings: Settings, spec: Spec, embedder: Embedder | None) -> Iterator[Store]:
    """A store on ``settings``, its embedder behind the spec's embedding cache if any."""
    cached = None
    if spec.embed_cache is not None and spec.vectors:
        inner = embedder if embedder is not None else resolve_embedder(settings)
        if inner is not None:
            cached = CachedEmbedder(inner, spec.embed_cache)
    chosen = cached if cached is not None else embedder
    store = Store(settings) if chosen is None else Store(settings, embedder=chosen)
    try:
        yield store
    finally:
        store.close()
        if cached is not None:
            cached.close()


def ingest(
    store: Store,
    items: Sequence[dict[str, Any]],
    spec: Spec,
    *,
    namespace: str | None = None,
    show: bool = True,
) -> float:
    """Add items in batches, then embed them when the spec searches vectors (each with a
    progress bar that moves per batch); seconds taken."""
    embed = spec.vectors and store.embedder is not None
    started = time.perf_counter()
    with progress_bar(len(items), "ingesting", show) as advance:
        for start in range(0, len(items), INGEST_BATCH):
            batch = items[start : start + INGEST_BATCH]
            store.add_many(batch, namespace=namespace, on_conflict="skip", embed=False)
            advance(len(batch))
    pending = store.stats(namespace=ALL).pending_vectors if embed else 0
    if pending:
        with progress_bar(pending, "embedding", show) as advance:
            store.embed(progress=advance)
    return time.perf_counter() - started


def run_queries(
    store: Store,
    queries: Sequence[tuple[str, str, str | None]],
    depth: int,
    spec: Spec,
    show: bool = True,
) -> tuple[dict[str, dict[str, float]], list[float], Counter[str], set[str]]:
    """Search each (query id, text, namespace); returns the run, latencies (ms), the modes
    and the fusion versions used."""
    run: dict[str, dict[str, float]] = {}
    samples: list[float] = []
    modes: Counter[str] = Counter()
    fusions: set[str] = set()
    with progress_bar(len(queries), "searching", show) as advance:
        for qid, text, namespace in queries:
            started = time.perf_counter()
            result = spec.search(store, text, depth, namespace)
            samples.append((time.perf_counter() - started) * 1000)
            run[qid] = ranked_run([h.id for h in result.hits])
            modes[result.mode_used] += 1
            if result.fusion_version:
                fusions.add(result.fusion_version)
            advance(1)
    return run, samples, modes, fusions


def lexical_fallbacks(modes_used: Iterable[str], mode: str) -> int:
    """Searches answered from the lexical arm alone when the evaluation asked for vectors
    (an empty query, or one the embedder failed on: the notes of such a search say why)."""
    return 0 if mode == "lexical" else sum(used == "lexical" for used in modes_used)


def machine() -> dict[str, str]:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "mnemex": __version__,
    }


def foreign_queries(path: Path, limit: int | None = None) -> tuple[str, list[str]]:
    """Queries of another dataset, to ask of a store they have nothing to do with: a BEIR
    folder's judged test queries, or a LoCoMo file's questions; its name and the texts
    (the first ``limit``)."""
    from mnemex.eval.data import load_beir, load_locomo

    if path.is_dir():
        texts = list(load_beir(path, "test").queries.values())
    else:
        texts = [q.text for q in load_locomo(path).questions]
    return path.stem if path.is_file() else path.name, texts[:limit]


def ask_foreign(
    store: Store,
    texts: Sequence[str],
    namespaces: Sequence[str | None],
    spec: Spec,
    show: bool = True,
) -> dict[str, Any]:
    """Each text asked of each namespace: how many searches, and the share that got any hit
    (a store should answer queries about what it does not hold with nothing)."""
    answered = asked = 0
    with progress_bar(len(texts) * len(namespaces), "foreign", show) as advance:
        for namespace in namespaces:
            for text in texts:
                asked += 1
                answered += bool(spec.search(store, text, FOREIGN_DEPTH, namespace).hits)
                advance(1)
    return {"queries": asked, "answered": round(answered / asked, 4) if asked else 0.0}
