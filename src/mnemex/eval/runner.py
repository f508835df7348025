"""Shared plumbing of the evaluations: a store, a search spec, timed queries."""

from __future__ import annotations

import contextlib
import platform
import tempfile
import time
from collections import Counter
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mnemex import __version__
from mnemex.config import Settings, load_settings
from mnemex.embed import resolve as resolve_embedder
from mnemex.eval.embed_cache import CachedEmbedder
from mnemex.eval.metrics import ranked_run
from mnemex.models import SearchResult
from mnemex.progress import progress_bar
from mnemex.search.floor import FLOOR_VERSION, floor_for
from mnemex.store import ALL, Store

INGEST_BATCH = 5_000


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

    def search(self, store: Store, text: str, limit: int, namespace: str | None) -> SearchResult:
        """One search as the spec says, without snippets (nothing reads them)."""
        return store.search(
            text,
            limit,
            mode=self.mode,
            fusion=self.fusion,
            weights=self.weights,
            namespace=namespace,
            snippets=False,
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
def eval_store(db: Path | None, spec: Spec, **settings: Any) -> Iterator[Store]:
    """The store at ``db``, or a temporary one deleted afterwards."""
    overrides = {k: v for k, v in {**spec.settings(), **settings}.items() if v is not None}
    if db is not None:
        with _opened(load_settings(db, **overrides), spec) as store:
            yield store
        return
    with (
        tempfile.TemporaryDirectory(prefix="mnemex-eval-") as tmp,
        _opened(load_settings(Path(tmp) / "eval.db", home=tmp, **overrides), spec) as store,
    ):
        yield store


@contextlib.contextmanager
def _opened(settings: Settings, spec: Spec) -> Iterator[Store]:
    """A store on ``settings``, its embedder behind the spec's embedding cache if any."""
    cached = None
    if spec.embed_cache is not None and spec.vectors:
        inner = resolve_embedder(settings)
        if inner is not None:
            cached = CachedEmbedder(inner, spec.embed_cache)
    store = Store(settings) if cached is None else Store(settings, embedder=cached)
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


def machine() -> dict[str, str]:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "mnemex": __version__,
    }
