"""SQLite's timeline statements on a real store file: the newest rows, and the rows around one."""

from __future__ import annotations

import pytest

from mnemex.engine.sqlite.memories import around_anchor, entry, latest
from mnemex.errors import UnknownMemory
from mnemex.index.retrieval import Filters
from mnemex.store import Store
from tests.test_timeline import BASE, events


def test_latest_orders_by_time_then_seq(store: Store) -> None:
    ids = events(store)
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


def test_around_anchor_is_oldest_first_with_the_anchor_always_in(store: Store) -> None:
    ids = events(store)
    with store.session.connection() as conn:
        rows = around_anchor(conn, Filters("default"), ids[4], 2, 1)
        tagged = around_anchor(conn, Filters("default", tags=("even",)), ids[3], 1, 1)
        with pytest.raises(UnknownMemory):
            around_anchor(conn, Filters("other"), ids[4], 1, 1)
    assert [r[0] for r in rows] == [ids[2], ids[3], ids[4], ids[5]]
    # the filters pick the neighbours, not the anchor
    assert [r[0] for r in tagged] == [ids[2], ids[3], ids[4]]
