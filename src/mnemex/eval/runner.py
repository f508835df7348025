"""Shared plumbing of the evaluations: a store to search, timed queries, progress."""

from __future__ import annotations

import contextlib
import platform
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from mnemex import __version__
from mnemex.config import load_settings
from mnemex.progress import progress_bar
from mnemex.store import Store

INGEST_BATCH = 5_000


@contextlib.contextmanager
def eval_store(db: Path | None, **settings: Any) -> Iterator[Store]:
    """The store at ``db``, or a temporary one deleted afterwards."""
    overrides = {k: v for k, v in settings.items() if v is not None}
    if db is not None:
        store = Store(load_settings(db, **overrides))
        try:
            yield store
        finally:
            store.close()
        return
    with tempfile.TemporaryDirectory(prefix="mnemex-eval-") as tmp:
        store = Store(load_settings(Path(tmp) / "eval.db", home=tmp, **overrides))
        try:
            yield store
        finally:
            store.close()


def ingest(
    store: Store,
    items: Sequence[dict[str, Any]],
    *,
    namespace: str | None = None,
    show: bool = True,
) -> float:
    """Add items in batches; returns the seconds it took."""
    started = time.perf_counter()
    with progress_bar(len(items), "ingesting", show) as advance:
        for start in range(0, len(items), INGEST_BATCH):
            batch = items[start : start + INGEST_BATCH]
            store.add_many(batch, namespace=namespace, on_conflict="skip")
            advance(len(batch))
    return time.perf_counter() - started


def machine() -> dict[str, str]:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "mnemex": __version__,
    }
