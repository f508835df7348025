"""Progress that moves: long operations report per item or per small batch, from the
start, so that a bar can show a real estimate (import, sync, eval ingest, embed)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mnemex.engine.sqlite.embeddings import EMBED_BATCH, FIRST_PROGRESS_BATCH
from mnemex.eval import runner
from mnemex.store import Store
from mnemex.transfer import import_jsonl

from .conftest import FakeEmbedder


def lines(n: int) -> list[str]:
    out = [json.dumps({"content": f"memory number {i} about topic {i % 7}"}) for i in range(n)]
    out[3] = "{not json"
    out[5] = ""
    out.append(json.dumps({"type": "relation", "subject": "a", "predicate": "b", "object": "c"}))
    return out


def test_import_moves_per_line_and_small_batch(vector_store: Store) -> None:
    calls: list[int] = []
    given = lines(600)
    report = import_jsonl(vector_store, given, progress=calls.append)
    assert sum(calls) == len(given)  # every line counts: good, bad, blank, relation
    assert report.imported == 598 and report.relations == 1
    assert max(calls) <= EMBED_BATCH and len(calls) >= 6, calls
    assert calls[0] <= FIRST_PROGRESS_BATCH


def test_sync_embedding_phase_moves_from_the_start(vector_store: Store, tmp_path: Path) -> None:
    space = tmp_path / "space"
    (space / "memory").mkdir(parents=True)
    for n in range(120):
        (space / "memory" / f"note-{n}.md").write_text(f"# Note {n}\n\nDeploy step {n} is done.\n")
    seen: list[tuple[str, int, int]] = []
    vector_store.sync(space, progress=lambda phase, done, total: seen.append((phase, done, total)))
    embedding = [(done, total) for phase, done, total in seen if phase == "embedding"]
    assert embedding[0] == (0, embedding[0][1]) and embedding[-1][0] == embedding[0][1]
    assert embedding[1][0] <= FIRST_PROGRESS_BATCH and len(embedding) >= 4, embedding


def test_eval_ingest_embeds_with_a_known_total(
    make_store: Callable[..., Store], fake_embedder: FakeEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    bars: dict[str, tuple[int | None, list[int]]] = {}

    @contextlib.contextmanager
    def recorded(total: int | None, label: str, enabled: bool = True) -> Iterator[Any]:
        steps: list[int] = []
        bars[label] = (total, steps)
        yield steps.append

    monkeypatch.setattr(runner, "progress_bar", recorded)
    store = make_store("eval.db", embedder=fake_embedder)
    items = [{"id": f"d{i}", "content": f"document {i} on subject {i % 11}"} for i in range(300)]
    runner.ingest(store, items, runner.Spec(mode="hybrid"))
    total, steps = bars["embedding"]
    assert total == 300 and sum(steps) == 300
    assert steps[0] <= FIRST_PROGRESS_BATCH and len(steps) >= 4, steps
    assert store.stats().pending_vectors == 0
