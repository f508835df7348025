"""Vectors and hybrid search, with a deterministic fake embedder.

The tests here run on both engines; the SQLite-only ones are in
``tests/engine/sqlite/test_vectors.py``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import pytest

from tests.conftest import FakeEmbedder
from tests.pg_fixtures import both_engines


class Interrupted(FakeEmbedder):
    """A Ctrl-C in the middle of embedding: its call number ``at`` raises KeyboardInterrupt."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at = at

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if self.calls + 1 == self.at:
            self.calls += 1
            raise KeyboardInterrupt
        return super().embed(texts)


@both_engines
def test_vectors_an_interrupted_import_left_out_are_caught_up_by_the_next_writes(
    make_store, caplog: pytest.LogCaptureFixture
) -> None:  # type: ignore[no-untyped-def]
    from mnemex.engine.embedding import CATCH_UP_MEMORIES
    from mnemex.transfer import import_jsonl

    store = make_store("cut.db", embedder=Interrupted(at=2))
    lines = [
        json.dumps({"id": f"m{i}", "content": f"memory {i} on topic {i % 7}"}) for i in range(1200)
    ]
    with pytest.raises(KeyboardInterrupt):
        import_jsonl(store, lines)
    pending = store.stats().pending_vectors
    assert pending > CATCH_UP_MEMORIES
    again = import_jsonl(store, lines)  # every id is there already: nothing new stored...
    assert again.imported == 0
    left = pending - CATCH_UP_MEMORIES  # ...but a bounded part of the backlog embedded, said
    assert store.stats().pending_vectors == left
    assert f"embedding {CATCH_UP_MEMORIES} of the {pending} memories" in caplog.text
    assert f"{left} memories still have no vector" in caplog.text
    while left:  # each later write embeds as much again, until none is left
        store.add(f"a later write, {left} left")
        assert store.stats().pending_vectors == max(0, left - CATCH_UP_MEMORIES)
        left = store.stats().pending_vectors
    caplog.clear()
    store.add("and a write with no backlog embeds only itself")
    assert caplog.text == "" and store.stats().pending_vectors == 0
