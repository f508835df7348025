"""The memories module on a real store file: get, update, forget, count, iterate, stats."""

from __future__ import annotations

import pytest

from mnemex import memories
from mnemex.config import DEFAULT_KIND
from mnemex.errors import InvalidInput, UnknownMemory
from mnemex.storage import IN_CHUNK
from mnemex.storage.sql import delete_ids
from mnemex.store import Store
from tests.pg_fixtures import both_engines

from .conftest import FakeEmbedder


def test_id_list_cleans_and_keeps_the_first_of_each() -> None:
    assert memories.id_list(["b", "a", "b"]) == ["b", "a"]
    assert memories.id_list("a") == ["a"]
    with pytest.raises(InvalidInput, match=r"^no ids given$"):
        memories.id_list([])


@both_engines
def test_get_and_forget_past_one_in_list(store: Store) -> None:
    ids = store.add_many([f"memory {i}" for i in range(IN_CHUNK + 20)])
    asked = [*reversed(ids), "nope"]
    found = memories.get(store.session, "default", asked)
    assert [m.id for m in found.memories] == asked[:-1] and found.missing == ("nope",)
    assert memories.get(store.session, "other", ids[:2]).missing == tuple(ids[:2])
    gone = memories.forget(store.session, "default", [*ids[: IN_CHUNK + 1], "nope"])
    assert gone.forgotten == tuple(ids[: IN_CHUNK + 1]) and gone.missing == ("nope",)
    assert memories.count(store.session, "default") == 19
    assert memories.count(store.session, None) == 19


def test_delete_ids_deletes_in_the_namespace_only(store: Store) -> None:
    ids = store.add_many([f"memory {i}" for i in range(2 * IN_CHUNK + 1)])
    other = store.add("elsewhere", namespace="other")
    with store.session.transaction() as conn:
        assert delete_ids(conn, "memories", "default", [*ids, other]) == set(ids)
        assert delete_ids(conn, "memories", "default", [other]) == set()
    assert store.count(namespace="other") == 1 and store.count() == 0


@both_engines
def test_update_sets_only_what_is_given(store: Store) -> None:
    ident = store.add("the cache holds an hour", tags=["cache"], source="chat")
    given = dict.fromkeys(("content", "kind", "tags", "source"), memories.UNSET)
    memory, seq = memories.update(
        store.session, "default", ident, {**given, "kind": "decision"}, 1000
    )
    assert seq is None  # the content did not change: nothing to embed again
    assert (memory.kind, memory.tags, memory.source) == ("decision", ("cache",), "chat")
    memory, seq = memories.update(
        store.session,
        "default",
        ident,
        {"content": "the cache holds a day", "source": None, "tags": ["ttl"]},
        1000,
    )
    assert isinstance(seq, int) and memory.content == "the cache holds a day"
    assert (memory.source, memory.tags) == (None, ("ttl",))
    assert [h.id for h in store.search("day").hits] == [ident]
    with pytest.raises(UnknownMemory):
        memories.update(store.session, "other", ident, {"kind": "note"}, 1000)
    with pytest.raises(InvalidInput, match="confidence"):
        memories.update(store.session, "default", ident, {"confidence": 7}, 1000)


@both_engines
def test_iterate_checks_batch_when_read(store: Store) -> None:
    ids = store.add_many([f"memory {i}" for i in range(7)])
    store.add("elsewhere", namespace="other")
    assert [m.id for m in memories.iterate(store.session, "default", 3)] == ids
    assert len(list(memories.iterate(store.session, None, 100))) == 8
    lazy = memories.iterate(store.session, "default", 0)
    with pytest.raises(InvalidInput, match="batch must be an integer between 1 and 100000"):
        next(lazy)


def test_stats_of_a_namespace_and_of_all(vector_store: Store, fake_embedder: FakeEmbedder) -> None:
    vector_store.add_many(["alpha one", "beta two"])
    vector_store.add("gamma three", namespace="other", kind="decision")
    vector_store.relate("alpha", "knows", "beta")
    mine = memories.stats(vector_store.session, "default", fake_embedder)
    every = memories.stats(vector_store.session, None, None)
    assert (mine.memories, mine.total_memories, mine.vectors, mine.pending_vectors) == (2, 3, 2, 0)
    assert mine.namespaces == {"default": 2, "other": 1} and mine.relations == 1
    assert (every.namespace, every.memories, every.embedder, every.vectors) == ("*", 3, None, 0)
    assert every.other_models == {fake_embedder.model_id: 3}
    assert every.kinds == {DEFAULT_KIND: 2, "decision": 1} and mine.kinds == {DEFAULT_KIND: 2}
    assert mine.size_bytes > 0 and mine == vector_store.stats()
