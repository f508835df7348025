"""Bad input gets a clear error and loses nothing."""

from __future__ import annotations

import math

import pytest

from mnemex import ContentTooLarge, InvalidInput, UnknownMemory
from mnemex.store import Store


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "empty"),
        ("   \n\t ", "empty"),
        ("bad \ud800 surrogate", "lone surrogate"),
        ("nul \x00 inside", "NUL"),
        (b"\xff\xfe invalid", "not valid UTF-8"),
        (42, "must be text"),
        (None, "must be text"),
    ],
)
def test_bad_content(store: Store, content: object, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        store.add(content)  # type: ignore[arg-type]
    assert store.count() == 0


def test_bytes_content_is_decoded(store: Store) -> None:
    ident = store.add("café ☕".encode())  # type: ignore[arg-type]
    assert store.get(ident).memories[0].content == "café ☕"


def test_content_size_limit_names_the_limit(make_store) -> None:  # type: ignore[no-untyped-def]
    store = make_store(max_content_bytes=1000)
    store.add("x" * 1000)
    with pytest.raises(ContentTooLarge, match="over the limit of 1,000 bytes") as info:
        store.add("x" * 1001)
    assert info.value.limit == 1000
    assert "MNEMEX_MAX_CONTENT_BYTES" in str(info.value)
    # Multi-byte characters count in bytes.
    with pytest.raises(ContentTooLarge):
        store.add("é" * 501)


def test_huge_content_default_limit(store: Store) -> None:
    with pytest.raises(ContentTooLarge, match="65,536"):
        store.add("word " * 20_000)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("confidence", 1.5, "between 0 and 1"),
        ("confidence", math.nan, "between 0 and 1"),
        ("confidence", "high", "number"),
        ("kind", "", "kind is empty"),
        ("kind", "x" * 41, "longer than 40"),
        ("tags", ["ok", ""], "tag is empty"),
        ("tags", 7, "list of strings"),
        ("metadata", {"bad": {1, 2}}, "JSON"),
        ("metadata", [1, 2], "JSON object"),
        ("created_at", "last tuesday-ish", "not a time"),
        ("id", "", "not valid"),
        ("namespace", "", "not valid"),
        ("namespace", " * ", "names every namespace"),
    ],
)
def test_bad_fields(store: Store, field: str, value: object, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        store.add("valid content", **{field: value})  # type: ignore[arg-type]
    assert store.count() == 0


def test_failed_add_many_writes_nothing(store: Store) -> None:
    store.add("already here")
    items = [f"good {i}" for i in range(100)] + ["", "more good"]
    with pytest.raises(InvalidInput, match="item 100: content is empty"):
        store.add_many(items)
    assert store.count() == 1
    items = [{"content": f"good {i}"} for i in range(10)] + [{"content": "x", "colour": "red"}]
    with pytest.raises(InvalidInput, match="unknown field"):
        store.add_many(items)
    assert store.count() == 1
    assert store.check()["ok"]


def test_failed_add_many_on_sql_conflict_writes_nothing(store: Store) -> None:
    store.add("existing", id="taken")
    with pytest.raises(InvalidInput):
        store.add_many(
            [{"content": f"new {i}"} for i in range(50)] + [{"content": "dup", "id": "taken"}]
        )
    assert store.count() == 1
    assert store.check()["ok"]


def test_unknown_ids(store: Store) -> None:
    assert store.get(["nope"]).missing == ("nope",)
    assert store.forget(["nope"]).missing == ("nope",)
    with pytest.raises(UnknownMemory):
        store.update("nope", confidence=0.5)
    with pytest.raises(InvalidInput, match="no ids"):
        store.get([])


@pytest.mark.parametrize(
    "query",
    [
        "",
        "   ",
        '"',
        '""',
        "((((",
        "a AND",
        "OR OR OR",
        "NOT",
        "NEAR(",
        "col:value",
        "-negated -words",
        "path/to/file.py:42",
        "* wildcard*",
        "^caret",
        "{braces} [brackets]",
        "nul\x00byte",
        "emoji 🧠🔥 query",
        "lone \udc80 surrogate",
        "' OR 1=1 --",
        "x" * 100_000,
        "word " * 20_000,
    ],
)
def test_any_query_is_safe(store: Store, query: str) -> None:
    store.add_many(["the quick brown fox", "path to file py", "emoji brain fire", "value column"])
    result = store.search(query)
    assert isinstance(result.hits, tuple)


def test_query_finds_words_among_syntax(store: Store) -> None:
    ident = store.add("Deploying with fly.io requires FLY_API_TOKEN")
    for query in ["fly.io", "FLY_API_TOKEN", "(deploying AND", '"requires', "fly:io -token*"]:
        assert [h.id for h in store.search(query).hits] == [ident], query


def test_bad_filters(store: Store) -> None:
    with pytest.raises(InvalidInput, match="not a time"):
        store.search("x", since="yesterday-ish")
    with pytest.raises(InvalidInput, match="limit"):
        store.search("x", limit=10_000)
    with pytest.raises(InvalidInput, match="limit"):
        store.timeline(limit=0)


def test_the_all_namespaces_label_is_no_namespace(store: Store) -> None:
    """``*`` is how results and stats name every namespace (and ``ns=*`` in the web
    inspector): reading it as one namespace would find nothing, silently."""
    import mnemex

    store.add("the deploy goes through Fly.io", namespace="ops")
    for call in (
        lambda: store.search("deploy", namespace="*"),
        lambda: store.timeline(namespace="*"),
        lambda: store.stats(namespace="*"),
    ):
        with pytest.raises(InvalidInput, match=r"mnemex\.ALL"):
            call()
    found = store.search("deploy", namespace=mnemex.ALL)
    assert found.namespace == "*" and [h.namespace for h in found.hits] == ["ops"]


def test_a_store_opens_on_one_namespace(store: Store) -> None:
    """``mnemex.open(namespace=mnemex.ALL)`` opened a namespace named "mnemex.ALL", which
    held nothing, and wrote there."""
    import mnemex

    for value in (mnemex.ALL, 5):
        with pytest.raises(InvalidInput, match=r"namespace=mnemex\.ALL to search"):
            mnemex.open(store.settings.db_url or store.settings.db_path, namespace=value)
