"""The injection log and the reads the inspector needs (kinds per namespace, a memory's
thread, the relations read from a memory), on both engines."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

import mnemex
from mnemex.errors import InvalidInput, UnknownMemory
from mnemex.results import Injected, Injection
from mnemex.store import Store
from mnemex.text import utcnow
from tests.pg_fixtures import both_engines


def entry(**given: Any) -> dict[str, Any]:
    """The keyword arguments of ``Store.log_injection`` for a prompt, and ``given``."""
    fields: dict[str, Any] = {
        "prompt": "where is the retry policy?",
        "outcome": "injected",
        "namespace": "/code/app",
        "agent": "claude-code",
        "session_id": "s1",
        "event": "UserPromptSubmit",
        "block": "## Relevant Memories\n\n- [decision] retry in config (confidence: 0.8, age: 0d)\n",
        "tokens": 21,
        "budget_tokens": 500,
        "mode_used": "lexical",
        "notes": ("a note",),
        "memories": [
            {
                "id": "a" * 16,
                "kind": "decision",
                "score": 0.61,
                "injected": True,
                "line": "- [decision] retry in config",
            },
            {
                "id": "b" * 16,
                "kind": "answer",
                "score": 0.4,
                "injected": False,
                "line": "- [answer] x",
                "reason": "did not fit the budget",
            },
        ],
        "floor": {"version": "floor-v5", "passed": True, "best_cosine": 0.5},
    }
    fields.update(given)
    return fields


@both_engines
def test_an_entry_reads_back_as_logged(store: Store) -> None:
    logged = entry()
    before = utcnow()
    ident = store.log_injection(**logged)
    assert isinstance(ident, int) and ident > 0
    [read] = store.injections(namespace=mnemex.ALL)
    assert isinstance(read, Injection) and read.id == ident
    assert before - timedelta(milliseconds=1) <= read.created_at <= utcnow()
    as_logged = {k: getattr(read, k) for k in logged if k not in ("memories", "notes")}
    assert as_logged == {k: v for k, v in logged.items() if k not in ("memories", "notes")}
    assert read.notes == ("a note",)
    assert read.memories == (
        Injected("a" * 16, "decision", 0.61, True, "- [decision] retry in config"),
        Injected("b" * 16, "answer", 0.4, False, "- [answer] x", "did not fit the budget"),
    )
    assert store.injection(ident) == read
    assert store.injection(ident + 1000) is None
    assert read.injected == (read.memories[0],)
    assert read.to_dict()["memories"][1]["reason"] == "did not fit the budget"


@both_engines
def test_entries_page_newest_first_by_session_and_namespace(store: Store) -> None:
    ids = [
        store.log_injection(**entry(session_id=f"s{i % 2}", prompt=f"prompt {i}", outcome=outcome))
        for i, outcome in enumerate(["injected", "nothing", "injected", "injected", "nothing"])
    ]
    other = store.log_injection(**entry(session_id="s9", namespace="/code/other"))
    everything = store.injections(namespace=mnemex.ALL)
    assert [e.id for e in everything] == [other, *reversed(ids)]
    assert [e.id for e in store.injections(namespace="/code/app", limit=2)] == [ids[4], ids[3]]
    page = store.injections(namespace="/code/app", before=ids[3], limit=2)
    assert [e.id for e in page] == [ids[2], ids[1]]
    assert [e.prompt for e in store.injections(namespace=mnemex.ALL, session_id="s1")] == [
        "prompt 3",
        "prompt 1",
    ]
    assert store.injections() == []  # the store's own namespace, "default", has none
    sessions = store.injection_sessions(namespace=mnemex.ALL)
    assert [(s.session_id, s.namespace, s.prompts, s.injected) for s in sessions] == [
        ("s9", "/code/other", 1, 1),
        ("s0", "/code/app", 3, 2),
        ("s1", "/code/app", 2, 1),
    ]
    assert sessions[1].first_at <= sessions[1].last_at
    assert [s.session_id for s in store.injection_sessions(namespace="/code/other")] == ["s9"]


@both_engines
def test_the_log_keeps_the_newest_entries_and_days(make_store: Callable[..., Store]) -> None:
    store = make_store("bounded.db", injection_log_entries=3, injection_log_days=7)
    old = store.log_injection(**entry(created_at=utcnow() - timedelta(days=8)))
    assert [e.id for e in store.injections(namespace=mnemex.ALL)] == []  # pruned at once
    ids = [store.log_injection(**entry(prompt=f"p{i}")) for i in range(5)]
    assert old is not None
    assert [e.id for e in store.injections(namespace=mnemex.ALL)] == list(reversed(ids[2:]))


@both_engines
def test_the_log_off_records_nothing(make_store: Callable[..., Store]) -> None:
    store = make_store("off.db", injection_log=False)
    assert store.log_injection(**entry()) is None
    assert store.injections(namespace=mnemex.ALL) == []


@both_engines
def test_bad_entries_are_refused(store: Store) -> None:
    for given, says in (
        ({"outcome": "maybe"}, "outcome must be one of injected, nothing"),
        ({"namespace": ""}, "namespace"),
        ({"agent": None}, "agent must be text"),
        ({"prompt": b"bytes"}, "prompt must be text"),
        ({"tokens": -1}, "tokens must be"),
        ({"memories": [{"id": "x"}]}, "each memory weighed needs id, kind, score and injected"),
        ({"memories": [{"id": "x", "kind": "k", "score": "high", "injected": True}]}, "score"),
        ({"created_at": "yesterday-ish"}, "created_at"),
    ):
        with pytest.raises(InvalidInput, match=says):
            store.log_injection(**entry(**given))
    with pytest.raises(InvalidInput, match="limit"):
        store.injections(limit=0)
    with pytest.raises(InvalidInput, match="whole number"):
        store.injection("1")  # type: ignore[arg-type]
    assert store.injections(namespace=mnemex.ALL) == []  # nothing half-written
    long = store.log_injection(**entry(prompt="x" * 100_000))
    assert long is not None
    found = store.injection(long)
    assert found is not None and len(found.prompt) == 8_000
    assert store.injections(namespace=mnemex.ALL) == [found]


def test_the_settings_bound_the_log() -> None:
    with pytest.raises(InvalidInput, match="injection_log_days"):
        mnemex.open(":memory:", injection_log_days=0)
    with pytest.raises(InvalidInput, match="injection_log_entries"):
        mnemex.open(":memory:", injection_log_entries=-1)


@both_engines
def test_kinds_per_namespace(store: Store) -> None:
    store.add_many(["a", "b", {"content": "c", "kind": "decision"}])
    store.add_many([{"content": "d", "kind": "gotcha"}], namespace="other")
    assert store.kind_counts(namespace=mnemex.ALL) == {
        "default": {"observation": 2, "decision": 1},
        "other": {"gotcha": 1},
    }
    assert store.kind_counts() == {"default": {"observation": 2, "decision": 1}}
    assert store.kind_counts(namespace="empty") == {}


@both_engines
def test_a_memory_in_its_thread(store: Store) -> None:
    ids = store.add_many(
        [
            {"content": f"turn {i}", "source": "session-a" if i % 2 == 0 else "session-b"}
            for i in range(10)
        ]
    )
    a = ids[0::2]  # session-a, in the order written
    around = store.thread(a[2], before=1, after=5)
    assert [e.id for e in around] == a[1:]
    assert [e.id for e in store.thread(a[0], before=3, after=0)] == [a[0]]
    alone = store.add("no source here")
    assert [e.id for e in store.thread(alone)] == [alone]
    with pytest.raises(UnknownMemory):
        store.thread(a[0], namespace="other")
    with pytest.raises(InvalidInput, match="before"):
        store.thread(a[0], before=-1)


@both_engines
def test_the_relations_read_from_a_memory(store: Store) -> None:
    source = store.add("Jared works on engram and likes pizza")
    store.add("unrelated")
    works = store.relate("Jared", "works_on", "engram", source_memory=source, confidence=0.9)
    likes = store.relate("Jared", "likes", "pizza", source_memory=source, confidence=0.5)
    store.relate("Maria", "owns", "billing")
    assert [r.id for r in store.relations_of(source)] == [works.id, likes.id]
    assert store.relations_of(source, namespace="other") == []
    store.forget([source])
    assert store.relations_of(source) == []  # forgetting clears their source_memory
