"""A long memory gets a vector per window of its text and is scored by its best window.

The tests here run on both engines; the SQLite-only ones are in
``tests/engine/sqlite/test_windows.py``.
"""

from __future__ import annotations

import pytest

from mnemex.engine import engine_of
from mnemex.store import Store
from tests.conftest import FakeEmbedder
from tests.pg_fixtures import both_engines

WORDS, STRIDE = 12, 8  # the fake embedder's window and stride, in words

FILLER = [
    "the quarterly planning meeting reviewed hiring budgets and office moves",
    "marketing asked for new slides about the spring product launch event",
    "the team discussed vacation schedules and the holiday party location",
]
TAIL = "zebra giraffe savanna"  # in the long memory's tail only


class WindowedFake(FakeEmbedder):
    """The fake embedder with a window of ``WORDS`` words, windows ``STRIDE`` apart."""

    model_id = "fake:bow-64-windows"

    def __init__(self) -> None:
        super().__init__()
        self.cut: list[str] = []  # the texts it cut into several windows

    def windows(self, text: str) -> list[str]:
        words = text.split()
        if len(words) <= WORDS:
            return [text]
        starts = range(0, len(words) - WORDS + STRIDE, STRIDE)
        out = [" ".join(words[s : s + WORDS]) for s in starts if s < len(words)]
        self.cut.append(text)
        return out


def long_text() -> str:
    return " ".join(FILLER) + " at the end someone mentioned " + TAIL


def on_postgres(store: Store) -> bool:
    return engine_of(store.session) == "PostgreSQL"


def rows(store: Store, seq: int | None = None) -> list[tuple[int, int]]:
    where = "" if seq is None else f" WHERE seq = {seq}"
    window = "window_no" if on_postgres(store) else "window"
    with store.session.connection() as conn:
        found = conn.execute(
            f"SELECT seq, {window} FROM embeddings{where} ORDER BY seq, {window}"
        ).fetchall()
    return [(int(s), int(w)) for s, w in found]


def cosines(store: Store, query: str) -> dict[str, float]:
    """Each vector hit's cosine (its best window's)."""
    hits = store.search(query, mode="vector", explain=True).hits
    return {h.id: h.explain["vector"]["cosine"] for h in hits if h.explain and h.explain["vector"]}


def seq_of(store: Store, memory_id: str) -> int:
    mark = "%s" if on_postgres(store) else "?"
    with store.session.connection() as conn:
        found = conn.execute(f"SELECT seq FROM memories WHERE id = {mark}", (memory_id,))
        return int(found.fetchone()[0])


@pytest.fixture
def windowed() -> WindowedFake:
    return WindowedFake()


def fill(store: Store) -> str:
    """Short memories and one long one; the long one's id."""
    store.add_many([*FILLER, "lions hunt at dawn near the river", "the printer is out of toner"])
    return store.add(long_text())


@both_engines
def test_a_long_memory_gets_a_vector_per_window(make_store, windowed: WindowedFake) -> None:  # type: ignore[no-untyped-def]
    store = make_store(embedder=windowed)
    long_id = fill(store)
    seq = seq_of(store, long_id)
    expected = len(windowed.windows(long_text()))
    assert expected > 2
    assert rows(store, seq) == [(seq, w) for w in range(expected)]
    assert all(w == 0 for s, w in rows(store) if s != seq)  # short memories: one vector
    assert store.stats().vectors == store.count() == 6  # memories with vectors, not rows
    hits = store.search(TAIL, mode="vector").hits
    assert hits[0].id == long_id
    assert len({h.id for h in hits}) == len(hits)  # each memory once
    assert store.check()["ok"]


@both_engines
def test_windows_off_gives_one_vector_and_misses_the_tail(
    make_store, windowed: WindowedFake
) -> None:  # type: ignore[no-untyped-def]
    store = make_store(embedder=windowed, embed_windows=False)
    long_id = fill(store)
    assert all(w == 0 for _, w in rows(store))
    one = cosines(store, TAIL)
    with_windows = make_store("w.db", embedder=WindowedFake())
    other = fill(with_windows)
    assert cosines(with_windows, TAIL)[other] > one.get(long_id, 0.0)  # the tail's window


@both_engines
def test_forget_and_update_remove_every_window(make_store, windowed: WindowedFake) -> None:  # type: ignore[no-untyped-def]
    store = make_store(embedder=windowed)
    long_id = fill(store)
    seq = seq_of(store, long_id)
    assert store.search(TAIL, mode="vector").hits[0].id == long_id  # the index is loaded
    store.update(long_id, content="a short note about lions")
    assert rows(store, seq) == [(seq, 0)]
    assert long_id not in [h.id for h in store.search(TAIL, mode="vector").hits[:1]]
    store.update(long_id, content=long_text())
    assert len(rows(store, seq)) == len(windowed.windows(long_text()))
    assert store.search(TAIL, mode="vector").hits[0].id == long_id
    store.forget(long_id)
    assert rows(store, seq) == []
    assert long_id not in [h.id for h in store.search(TAIL, mode="vector").hits]
    if not on_postgres(store):
        assert store.session.vectors(windowed.dim).size == store.count()


@both_engines
def test_same_text_reuses_every_window(make_store, windowed: WindowedFake) -> None:  # type: ignore[no-untyped-def]
    store = make_store(embedder=windowed)
    first = store.add(long_text(), namespace="a")
    calls = windowed.texts
    second = store.add(long_text(), namespace="b")
    assert windowed.texts == calls  # nothing embedded again
    assert [w for _, w in rows(store, seq_of(store, second))] == [
        w for _, w in rows(store, seq_of(store, first))
    ]


@both_engines
def test_duplicates_compare_whole_memories_not_their_windows(make_store) -> None:  # type: ignore[no-untyped-def]
    """A short remark that repeats a long memory's last window is not merged into it: the
    duplicate check compares a memory's first window, as it did before windows."""
    windowed = WindowedFake()
    store = make_store(embedder=windowed, dedup_text=1.0)  # the cosine decides alone
    long_id = store.add(long_text())
    last = windowed.windows(long_text())[-1]
    assert cosines(store, last)[long_id] > 0.99  # its best window is this one
    added = store.remember(last)
    assert not added.deduplicated and added.id != long_id
    again = store.remember(long_text().replace(TAIL, "zebra giraffe savannah"))
    assert again.deduplicated and again.id == long_id  # a whole repeat still merges
