"""The timeline on a real store of either engine: the newest memories, and those around one."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mnemex.errors import InvalidInput
from mnemex.index.retrieval import Filters
from mnemex.memories import timeline
from mnemex.store import Store
from tests.pg_fixtures import both_engines

BASE = datetime(2025, 1, 1, tzinfo=UTC)


def events(store: Store) -> list[str]:
    """Eight memories, two a day (``seq`` breaks the ties), every third a decision, every
    second tagged ``even``; their ids, oldest first."""
    return store.add_many(
        [
            {
                "content": f"event {i} " + "long " * 100,
                "created_at": BASE + timedelta(days=i // 2),
                "kind": "decision" if i % 3 == 0 else "observation",
                "tags": ["even"] if i % 2 == 0 else [],
            }
            for i in range(8)
        ]
    )


def counted(opened: list[bool], take: Callable[[], Any]) -> Callable[[], Any]:
    """``take`` (a session's ``connection``, which its reads and writes go through), noting
    each use in ``opened``."""

    @contextlib.contextmanager
    def counting() -> Iterator[Any]:
        opened.append(True)
        with take() as conn:
            yield conn

    return counting


@both_engines
def test_timeline_reads_in_one_block_and_checks_before_it(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = events(store)
    session, opened = store.session, []
    monkeypatch.setattr(session, "connection", counted(opened, session.connection))
    entries = timeline(session, Filters("default"), limit=2)
    assert [e.id for e in entries] == [ids[7], ids[6]] and len(opened) == 1
    around = timeline(session, Filters("default"), limit=1, around=ids[1], before=1, after=1)
    assert [e.id for e in around] == [ids[2], ids[1], ids[0]] and len(opened) == 2
    assert around == store.timeline(around=ids[1], before=1, after=1)
    opened.clear()
    for bad in ({"before": -1}, {"after": True}, {"before": 10**9}):
        with pytest.raises(InvalidInput, match="must be an integer between 0 and"):
            timeline(session, Filters("default"), limit=1, around=ids[1], **bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        timeline(session, Filters("default"), limit=1, around="")
    with pytest.raises(InvalidInput):
        timeline(session, Filters("default"), limit=0)
    assert opened == []  # bad input never takes the connection
