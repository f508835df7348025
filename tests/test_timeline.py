"""The timeline module on a real store file: the newest rows, and the rows around one."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from mnemex.errors import InvalidInput, UnknownMemory
from mnemex.index.retrieval import Filters
from mnemex.store import Store
from mnemex.timeline import around_anchor, entry, latest, timeline

BASE = datetime(2025, 1, 1, tzinfo=UTC)


@pytest.fixture
def ids(store: Store) -> list[str]:
    return store.add_many(
        [
            {
                "content": f"event {i} " + "long " * 100,
                "created_at": BASE + timedelta(days=i // 2),  # two a day: seq breaks ties
                "kind": "decision" if i % 3 == 0 else "observation",
                "tags": ["even"] if i % 2 == 0 else [],
            }
            for i in range(8)
        ]
    )


def test_latest_orders_by_time_then_seq(store: Store, ids: list[str]) -> None:
    with store.session.connection() as conn:
        newest = latest(conn, Filters("default"), 3, False)
        oldest = latest(conn, Filters("default", kinds=("decision",)), 10, True)
        elsewhere = latest(conn, Filters("nowhere"), 10, False)
    assert [r[0] for r in newest] == [ids[7], ids[6], ids[5]]
    assert [r[0] for r in oldest] == [ids[0], ids[3], ids[6]]
    assert elsewhere == []
    first = entry(oldest[0])
    assert (first.id, first.kind, first.tags, first.namespace) == (
        ids[0],
        "decision",
        ("even",),
        "default",
    )
    assert first.created_at == BASE and len(newest[0][4]) == 400  # the summary's source


def test_around_anchor_is_oldest_first_with_the_anchor_always_in(
    store: Store, ids: list[str]
) -> None:
    with store.session.connection() as conn:
        rows = around_anchor(conn, Filters("default"), ids[4], 2, 1)
        tagged = around_anchor(conn, Filters("default", tags=("even",)), ids[3], 1, 1)
        with pytest.raises(UnknownMemory):
            around_anchor(conn, Filters("other"), ids[4], 1, 1)
    assert [r[0] for r in rows] == [ids[2], ids[3], ids[4], ids[5]]
    # the filters pick the neighbours, not the anchor
    assert [r[0] for r in tagged] == [ids[2], ids[3], ids[4]]


def test_timeline_reads_in_one_block_and_checks_before_it(store: Store, ids: list[str]) -> None:
    opened: list[bool] = []

    @contextlib.contextmanager
    def counted() -> Iterator[sqlite3.Connection]:
        opened.append(True)
        with store.session.connection() as conn:
            yield conn

    entries = timeline(counted, Filters("default"), limit=2)
    assert [e.id for e in entries] == [ids[7], ids[6]] and len(opened) == 1
    around = timeline(counted, Filters("default"), limit=1, around=ids[1], before=1, after=1)
    assert [e.id for e in around] == [ids[2], ids[1], ids[0]] and len(opened) == 2
    assert around == store.timeline(around=ids[1], before=1, after=1)
    for bad in ({"before": -1}, {"after": True}, {"before": 10**9}):
        with pytest.raises(InvalidInput, match="must be an integer between 0 and"):
            timeline(counted, Filters("default"), limit=1, around=ids[1], **bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        timeline(counted, Filters("default"), limit=1, around="")
    assert len(opened) == 2  # bad input never takes the connection
