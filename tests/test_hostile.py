"""Hostile input and bad luck: no operation leaves a store, a namespace or a process unusable."""

from __future__ import annotations

import contextlib
import inspect
import json
import math
import os
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client

import mnemex
from mnemex import InvalidInput, StoreError
from mnemex.cli import cli
from mnemex.config import SearchOptions, load_settings
from mnemex.mcp.server import build_server
from mnemex.search import stages
from mnemex.store import ALL, Store
from mnemex.text import MAX_METADATA_DEPTH
from mnemex.transfer import export_lines, import_jsonl

from .conftest import PYTHON, python_env

DEPLOY = "The deploy to production runs every Friday at noon from the release branch"
DEPLOY_AGAIN = "the deploy to production runs every friday at noon, from the release branch!"


# -- connection-local state survives rollbacks ------------------------------------------


def test_a_merge_as_first_lexical_work_leaves_the_store_working(tmp_path: Path) -> None:
    """The dedup check runs in a savepoint that is rolled back on a merge: the
    lexicon's temp tables must not be made (and so dropped) in there."""
    path = tmp_path / "m.db"
    with mnemex.open(path, embedder=None) as store:
        first = store.add(DEPLOY)
    with mnemex.open(path, embedder=None) as store:  # fresh connection: no lexical work yet
        merged = store.remember(DEPLOY_AGAIN)
        assert merged.deduplicated and merged.by == "text" and merged.id == first
        assert store.search("deploy friday").hits[0].id == first
        other = store.add("Redis evicts sessions under memory pressure")
        assert store.search("redis sessions").hits[0].id == other
        assert store.recall("when does the deploy run?").ids
        store.add_many(["one more note about caching", "and another about queues"])
        assert store.count() == 4


@pytest.mark.anyio
async def test_mcp_add_that_merges_first_leaves_the_server_working(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    with mnemex.open(path, embedder=None) as store:
        first = store.add(DEPLOY)
    async with Client(build_server(load_settings(path), embedder=None)) as client:
        added = await client.call_tool("memory_add", {"content": DEPLOY_AGAIN})
        assert not added.is_error and added.structured_content is not None
        assert added.structured_content["deduplicated"] is True
        found = await client.call_tool("memory_search", {"query": "deploy friday"})
        assert not found.is_error, found.content
        assert found.structured_content is not None
        assert found.structured_content["hits"][0]["id"] == first
        new = await client.call_tool("memory_add", {"content": "Redis evicts sessions"})
        assert not new.is_error, new.content


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# -- times that cannot be stored and read back ------------------------------------------

HOSTILE_TIMES = [
    "0001-01-01T00:00:00+14:00",  # before year 1 in UTC
    "9999-12-31T23:59:59-01:00",  # after year 9999 in UTC
    "10000y",
    "9" * 400 + "d",
    10**30,
    -(10**30),
    float("inf"),
    float("nan"),
    "whenever",
]


def test_a_year_before_1000_is_stored_so_that_it_reads_back(store: Store) -> None:
    old = store.add("the charter was signed", created_at="0999-01-01")
    new = store.add("the charter was renewed", created_at="2025-06-01")
    memory = store.get(old).memories[0]
    assert memory.created_at == datetime(999, 1, 1, tzinfo=UTC)
    assert [e.id for e in store.timeline()] == [new, old]
    assert [e.id for e in store.timeline(oldest_first=True, end="1000-01-01")] == [old]
    assert {h.id for h in store.search("charter").hits} == {old, new}
    assert store.stats().oldest == memory.created_at
    exported = [json.loads(line) for line in export_lines(store)]
    assert exported[0]["created_at"] == "0999-01-01T00:00:00.000Z"
    assert store.recall("charter signed").ids


def test_a_year_stored_unpadded_still_reads_back(store: Store) -> None:
    """Earlier versions wrote year 999 as ``999-01-01T...``."""
    ident = store.add("an old memory")
    store.session.conn.execute(
        "UPDATE memories SET created_at = '999-01-01T00:00:00.000Z' WHERE id = ?", (ident,)
    )
    store.session.after_write()
    assert store.get(ident).memories[0].created_at.year == 999
    assert [e.id for e in store.timeline()] == [ident]
    assert store.stats().oldest is not None


@pytest.mark.parametrize("value", HOSTILE_TIMES)
def test_times_out_of_range_are_refused(store: Store, value: object) -> None:
    kept = store.add("a memory that must stay readable")
    with pytest.raises(InvalidInput, match="created_at"):
        store.add("never stored", created_at=value)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="created_at"):
        store.update(kept, created_at=value)
    with pytest.raises(InvalidInput, match="since"):
        store.search("memory", since=value)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="until"):
        store.recall("memory", until=value)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="start"):
        store.timeline(start=value)  # type: ignore[arg-type]
    assert [e.id for e in store.timeline()] == [kept]
    assert store.get(kept).memories[0].content == "a memory that must stay readable"


def test_epoch_seconds_are_accepted_as_text(store: Store) -> None:
    old = store.add("deploy of the old service", created_at="1600000000")
    new = store.add("deploy of the new service", created_at=1_800_000_000)
    assert store.get(old).memories[0].created_at == datetime.fromtimestamp(1_600_000_000, UTC)
    assert [h.id for h in store.search("deploy", since="1700000000").hits] == [new]
    assert [h.id for h in store.search("deploy", until="1700000000.5").hits] == [old]
    assert [e.id for e in store.timeline(start="1700000000")] == [new]
    # Eight digits read as an ISO 8601 date, as Python reads them.
    assert [e.id for e in store.timeline(start="20240101")] == [new]


def test_cli_time_options_take_epoch_seconds_and_refuse_bad_times(tmp_path: Path) -> None:
    runner = CliRunner()
    db = str(tmp_path / "cli.db")

    def run(*args: str) -> Any:
        return runner.invoke(cli, ["--db", db, *args], catch_exceptions=False)

    old = run("add", "deploy the old service", "--created-at", "1600000000").stdout.strip()
    new = run("add", "deploy the new service", "--created-at", "0999-01-01").stdout.strip()
    found = json.loads(run("search", "deploy", "--since", "1500000000", "--json").stdout)
    assert [h["id"] for h in found["hits"]] == [old]
    entries = json.loads(run("timeline", "--end", "1500000000", "--json").stdout)["entries"]
    assert [e["id"] for e in entries] == [new]
    assert "0999-01-01" in run("timeline").stdout
    for args in (
        ("search", "deploy", "--since", "10000y"),
        ("timeline", "--start", "0001-01-01T00:00:00+14:00"),
        ("add", "x", "--created-at", "9999-12-31T23:59:59-01:00"),
    ):
        result = run(*args)
        assert result.exit_code == 1, result.output
        assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
        assert "years 1 to 9999" in result.stderr


@pytest.mark.anyio
async def test_mcp_time_arguments(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    async with Client(build_server(load_settings(path), embedder=None)) as client:
        added = await client.call_tool(
            "memory_add", {"content": "the charter was signed", "created_at": "0999-01-01"}
        )
        assert not added.is_error, added.content
        assert added.structured_content is not None
        old = added.structured_content["id"]
        added = await client.call_tool(
            "memory_add", {"content": "charter renewed", "created_at": "1800000000"}
        )
        assert not added.is_error, added.content
        found = await client.call_tool("memory_search", {"query": "charter", "until": "1000000000"})
        assert not found.is_error, found.content
        assert found.structured_content is not None
        assert [h["id"] for h in found.structured_content["hits"]] == [old]
        entries = await client.call_tool("memory_timeline", {"start": "1700000000"})
        assert not entries.is_error, entries.content
        for tool, arguments in (
            ("memory_add", {"content": "x", "created_at": "0001-01-01T00:00:00+14:00"}),
            ("memory_search", {"query": "charter", "since": "10000y"}),
            ("memory_timeline", {"end": "9999-12-31T23:59:59-01:00"}),
        ):
            refused = await client.call_tool(tool, arguments)
            assert refused.is_error
            assert "years 1 to 9999" in refused.content[0].text  # type: ignore[union-attr]
        status = await client.call_tool("memory_stats", {})
        assert not status.is_error


# -- metadata that cannot be exported -----------------------------------------------------


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


@pytest.mark.parametrize("depth", [65, 990, 5000])
def test_metadata_nested_too_deep_is_refused(store: Store, depth: int) -> None:
    kept = store.add("a memory with sane metadata", metadata=_nested(MAX_METADATA_DEPTH))
    with pytest.raises(InvalidInput, match="nested more than 64 levels"):
        store.add("never stored", metadata=_nested(depth))
    with pytest.raises(InvalidInput, match="nested more than 64 levels"):
        store.update(kept, metadata={"list": [_nested(depth)]})
    with pytest.raises(InvalidInput, match="item 1: metadata is nested"):
        store.add_many(["fine", {"content": "x", "metadata": _nested(depth)}])
    assert store.count() == 1
    exported = [json.loads(line) for line in export_lines(store)]
    assert exported[0]["metadata"] == _nested(MAX_METADATA_DEPTH)


def test_metadata_that_contains_itself_is_refused(store: Store) -> None:
    loop: dict[str, Any] = {}
    loop["self"] = [loop]
    with pytest.raises(InvalidInput, match="contains itself"):
        store.add("never stored", metadata=loop)
    assert store.count() == 0


# -- imports: one bad line never aborts ---------------------------------------------------

HOSTILE_LINES = [
    json.dumps({"content": "dated before year 1", "created_at": "0001-01-01T00:00:00+14:00"}),
    "[" * 100_000,
    '{"content": "deep", "metadata": ' + '{"a": ' * 990 + "1" + "}" * 990 + "}",
    json.dumps({"content": "deep but parsable", "metadata": _nested(100)}),
    '{"content": "a long number", "confidence": 1' + "0" * 5000 + "}",
    json.dumps({"content": "far future", "created_at": 10**30}),
    json.dumps({"content": "an age too old", "updated_at": "10000y"}),
    json.dumps({"content": "bad tags", "tags": 5}),
    json.dumps({"content": ["not", "text"]}),
    '{"content": "not a number", "confidence": NaN}',
    json.dumps(
        {
            "type": "relation",
            "subject": "a",
            "predicate": "b",
            "object": "c",
            "created_at": "0001-01-01T00:00:00+14:00",
        }
    ),
]


def test_import_skips_hostile_lines_and_stores_every_good_one(tmp_path: Path) -> None:
    """Through the real CLI: good lines around hostile ones, across batch boundaries."""
    good = [{"id": f"good-{i}", "content": f"good memory number {i}"} for i in range(2_100)]
    lines = [json.dumps(item) for item in good]
    bad_at = []
    for offset, line in enumerate(HOSTILE_LINES):
        position = 150 * offset + 7
        lines.insert(position, line)
        bad_at.append(position + 1)  # line numbers count from 1
    lines.insert(
        1_000, json.dumps({"id": "old", "content": "year 999", "created_at": "0999-01-01"})
    )
    bad_at = [n + 1 if n > 1_000 else n for n in bad_at]
    source = tmp_path / "hostile.jsonl"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    db = tmp_path / "import.db"

    def mnemex_cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [PYTHON, "-m", "mnemex", "--db", str(db), *args],
            capture_output=True,
            text=True,
            env=python_env(),
            timeout=120,
        )

    strict = mnemex_cli("import", "--strict", str(source))
    assert strict.returncode == 1 and "Traceback" not in strict.stderr, strict.stderr
    assert strict.stderr.startswith("error: 11 bad line(s), nothing imported (strict)")
    with mnemex.open(db, embedder=None) as store:
        assert store.count() == 0

    done = mnemex_cli("import", str(source))
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stdout.startswith("imported 2,101, skipped 0 existing, 0 relation(s), 11 bad")
    reported = [int(line.split(":")[0].split()[1]) for line in done.stderr.splitlines()]
    assert reported == bad_at
    with mnemex.open(db, embedder=None) as store:
        assert store.count() == 2_101
        assert store.get("old").memories[0].created_at.year == 999
        assert not store.get([item["id"] for item in good]).missing
    exported = mnemex_cli("export")
    assert exported.returncode == 0 and len(exported.stdout.splitlines()) == 2_101


# -- every public call: a MnemexError or a result, never another exception --------------

HUGE = 10**400


@pytest.mark.parametrize(
    ("method", "args", "kwargs", "message"),
    [
        ("search", ("deploy",), {"kinds": 5}, "kinds must be text or a list"),
        ("search", ("deploy",), {"since": "0001-01-01T00:00:00+14:00"}, "since"),
        ("search", ("deploy",), {"limit": 10**30}, "limit must be an integer"),
        ("search", ("deploy",), {"weights": 5}, "weights must be two numbers"),
        ("search", ("deploy",), {"weights": (HUGE, 1)}, "weights must be two numbers"),
        ("search", ("deploy",), {"weights": (math.nan, 1.0)}, "weights must be two numbers"),
        ("recall", ("deploy",), {"budget_tokens": 0}, "budget_tokens must be a positive"),
        ("recall", ("deploy",), {"token_counter": ["chars"]}, "token_counter must be one of"),
        ("timeline", (), {"around": "m0", "before": 10**30}, "before must be an integer"),
        ("add", ("x",), {"confidence": HUGE}, "confidence must be between 0 and 1"),
        ("add_many", (None,), {}, "items must be a list of memories"),
        ("add_many", ("one memory",), {}, "items must be a list of memories"),
        ("add_many", ({"content": "x"},), {}, "items must be a list of memories"),
        ("get", (None,), {}, "ids must be text or a list"),
        ("forget", (5,), {}, "ids must be text or a list"),
        ("forget_relations", (True,), {}, "ids must be text or a list"),
        ("iter_memories", (), {"batch": "many"}, "batch must be an integer"),
    ],
)
def test_wrong_types_and_ranges_say_what_to_pass(
    store: Store, method: str, args: tuple[Any, ...], kwargs: dict[str, Any], message: str
) -> None:
    store.add("a deploy memory", id="m0")
    with pytest.raises(InvalidInput, match=message):
        result = getattr(store, method)(*args, **kwargs)
        if inspect.isgenerator(result):
            list(result)
    assert store.count() == 1


_SPECIALS = [
    "m0", "o1", "other", "", "\ud800", "a\x00b", "x" * 70_000, "0001-01-01T00:00:00+14:00",
    "10000y", "1700000000", "lexical", "rrf", "chars", ALL, datetime(1, 1, 1),
    datetime(9999, 12, 31, 23, 59, tzinfo=UTC), date(1, 1, 1), 10**30, HUGE, -(2**63) - 1,
    2**64, math.nan, math.inf, b"\xff", object(),
]  # fmt: skip
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=12),
    st.binary(max_size=6),
    st.sampled_from(_SPECIALS),
)
_HOSTILE = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(max_size=3), inner, max_size=3)
        | st.tuples(inner, inner)
    ),
    max_leaves=5,
)
_TEXT = st.text(min_size=1, max_size=20) | st.sampled_from(["deploy", "NEAR(a b)", '"', "*"])
_IDS = st.sampled_from(["m0", "m1", "o1", "nope"])
_TIMES = st.sampled_from(["2025-01-01", "7d", "1700000000", "0999-01-01"]) | st.datetimes(
    timezones=st.just(UTC)
)
_LABELS = st.lists(st.sampled_from(["fact", "t"]), max_size=2) | st.sampled_from(["fact", "t"])
_SMALL = st.integers(0, 60)
_PLAUSIBLE = {  # values of the right type, often valid, so later checks are reached too
    **dict.fromkeys(("content", "query", "task", "subject", "predicate", "object"), _TEXT),
    **dict.fromkeys(("entity", "source"), _TEXT),
    **dict.fromkeys(("id", "around", "source_memory"), _IDS),
    "ids": st.lists(_IDS, min_size=1, max_size=3) | _IDS,
    **dict.fromkeys(("limit", "before", "after", "max_memories", "relations", "batch"), _SMALL),
    "budget_tokens": st.integers(0, 2_000),
    **dict.fromkeys(("since", "until", "start", "end", "created_at", "now"), _TIMES),
    "kinds": _LABELS,
    "tags": _LABELS,
    "kind": st.sampled_from(["fact", "note"]),
    "namespace": st.sampled_from(["default", "other", ALL, None]),
    "mode": st.sampled_from(["lexical", "vector", "hybrid", None]),
    "fusion": st.sampled_from(["rrf", "weighted", None]),
    "token_counter": st.sampled_from(["chars", None]),
    "weights": st.tuples(st.floats(0, 1), st.floats(0, 1)),
    "confidence": st.floats(0, 1) | st.booleans(),
    "pinned": st.booleans(),
    "metadata": st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    "items": st.lists(_TEXT | st.fixed_dictionaries({"content": _TEXT}), max_size=3),
}
_API = [
    "add", "add_many", "remember", "search", "recall", "timeline", "get", "update", "forget",
    "relate", "neighbors", "forget_relations", "stats", "count", "iter_memories", "iter_relations",
]  # fmt: skip


def _parameters(call: Any) -> dict[str, inspect.Parameter]:
    """A method's parameters, with the fields of SearchOptions and the ranking stages'
    options that its ``**given`` (search) or ``**search`` (recall) takes."""
    out = {}
    for name, parameter in inspect.signature(call).parameters.items():
        if name == "options":
            continue  # search(query, options): its fields come as keyword arguments below
        if parameter.kind is not parameter.VAR_KEYWORD:
            out[name] = parameter
            continue
        fields = inspect.signature(SearchOptions.of).parameters.values()
        taken = {"settings", "limit", "snippets", "relations", "now"} if name == "search" else set()
        out.update((f.name, f) for f in fields if f.kind is f.KEYWORD_ONLY and f.name not in taken)
        for option in stages.options():
            out[option] = inspect.Parameter(option, parameter.KEYWORD_ONLY, default=None)
    return out


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(method=st.sampled_from(_API), data=st.data())
def test_fuzzed_api_calls_raise_only_mnemex_errors(
    store: Store, method: str, data: st.DataObject
) -> None:
    if not store.count(namespace=ALL):
        for i in range(3):
            store.add(f"memory {i} about deploys", id=f"m{i}", tags=["t"], kind="fact")
        store.add("another namespace's memory", id="o1", namespace="other")
        store.relate("api", "uses", "postgres", source_memory="m0")
    call = getattr(store, method)
    args, kwargs = [], {}
    for name, parameter in _parameters(call).items():
        if name == "embed":
            continue
        required = parameter.default is inspect.Parameter.empty
        if not required and not data.draw(st.booleans()):
            continue
        plausible = name in _PLAUSIBLE and data.draw(st.integers(0, 3)) > 0
        value = data.draw(_PLAUSIBLE[name] if plausible else _HOSTILE)
        if required and parameter.kind in (
            parameter.POSITIONAL_ONLY,
            parameter.POSITIONAL_OR_KEYWORD,
        ):
            args.append(value)
        else:
            kwargs[name] = value
    try:
        result = call(*args, **kwargs)
        if inspect.isgenerator(result):
            list(result)
    except mnemex.MnemexError:
        pass
    store.search("memory deploys", namespace=ALL)  # the store still works
    assert store.count(namespace=ALL) >= 0


def test_json_output_stays_utf8_for_an_undecodable_query(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    with mnemex.open(db, embedder=None) as store:
        store.add("the deploy runs on Fridays")
    for command in ("search", "recall"):
        done = subprocess.run(
            [PYTHON, "-m", "mnemex", "--db", str(db), command, b"deploy \xff", "--json"],
            capture_output=True,
            env=python_env(),
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        answer = json.loads(done.stdout.decode("utf-8"))  # strict: raises on invalid UTF-8
        assert answer["query" if command == "search" else "task"] == "deploy \ufffd"


def test_a_time_without_a_local_date_is_refused_for_the_workspace(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TZ", "Etc/GMT-14")  # UTC+14
    time.tzset()
    try:
        with pytest.raises(InvalidInput, match="no local date"):
            store.add_to_workspace("late", tmp_path, created_at="9999-12-31T23:00:00Z")
    finally:
        monkeypatch.undo()
        time.tzset()


# -- another namespace's ids are unknown ids ------------------------------------------


def _outcome(call: Any, ident: str) -> tuple[str, str]:
    """What a call answers, with the id it was given replaced by a placeholder."""
    try:
        result = call(ident)
        if isinstance(result, list):
            result = [getattr(r, "id", r) for r in result]
        answer = ("ok", repr(result))
    except mnemex.MnemexError as exc:
        answer = (type(exc).__name__, str(exc))
    return answer[0], answer[1].replace(ident, "<id>")


def test_another_namespaces_ids_are_indistinguishable_from_unknown_ids(
    store: Store, tmp_path: Path
) -> None:
    import random

    memory_ids: dict[str, list[str]] = {}
    relation_ids: dict[str, list[str]] = {}
    for ns in ("alpha", "beta"):
        folder = tmp_path / ns
        (folder / "memory").mkdir(parents=True)
        (folder / "MEMORY.md").write_text(f"# {ns}\n\nThe {ns} team deploys on Fridays.\n")
        (folder / "memory" / "2025-03-03.md").write_text(f"# 2025-03-03\n\n## 10:00\n\n{ns} note\n")
        store.sync(folder, namespace=ns)
        for i in range(3):
            store.add(f"{ns} memory {i}", id=f"{ns}-{i}", namespace=ns)
        memory_ids[ns] = [m.id for m in store.iter_memories(namespace=ns)]
        assert any(m.location for m in store.get(memory_ids[ns], namespace=ns).memories)
        relation_ids[ns] = [
            store.relate(f"{ns} api", "uses", "postgres", namespace=ns, source_memory=f"{ns}-0").id
        ]
    before = [m.to_dict() for m in store.iter_memories(namespace="beta")]

    operations: dict[str, Any] = {
        "get": lambda i: store.get(i, namespace="alpha"),
        "update content": lambda i: store.update(i, content="changed", namespace="alpha"),
        "update kind": lambda i: store.update(i, kind="fact", namespace="alpha"),
        "update tags": lambda i: store.update(i, tags=["x"], namespace="alpha"),
        "update time": lambda i: store.update(i, created_at="2020-01-01", namespace="alpha"),
        "forget": lambda i: store.forget(i, namespace="alpha"),
        "relate": lambda i: store.relate("a", "b", "c", source_memory=i, namespace="alpha"),
        "timeline around": lambda i: store.timeline(around=i, namespace="alpha"),
    }
    rng = random.Random(15)
    for round_ in range(200):
        name = rng.choice(sorted(operations))
        other = rng.choice(memory_ids["beta"])
        unknown = f"unknown-{round_}"
        assert _outcome(operations[name], other) == _outcome(operations[name], unknown), name
        relation = relation_ids["beta"][0]
        forget_relation = lambda i: store.forget_relations(i, namespace="alpha")  # noqa: E731
        assert _outcome(forget_relation, relation) == _outcome(forget_relation, unknown)
    assert [m.to_dict() for m in store.iter_memories(namespace="beta")] == before
    assert [r.id for r in store.iter_relations(namespace="beta")] == relation_ids["beta"]


def test_cli_update_of_another_namespaces_chunk_is_an_unknown_id(tmp_path: Path) -> None:
    folder = tmp_path / "ws"
    (folder / "memory").mkdir(parents=True)
    (folder / "memory" / "2025-03-03.md").write_text("# 2025-03-03\n\n## 10:00\n\nsecret plan\n")
    db = tmp_path / "cli.db"
    with mnemex.open(db, namespace="other", embedder=None) as store:
        store.sync(folder)
        chunk = next(store.iter_memories()).id
    runner = CliRunner()
    result = runner.invoke(cli, ["--db", str(db), "update", chunk, "--content", "x"])
    unknown = runner.invoke(cli, ["--db", str(db), "update", "nope", "--content", "x"])
    assert result.exit_code == unknown.exit_code == 1
    assert result.stderr.replace(chunk, "<id>") == unknown.stderr.replace("nope", "<id>")
    assert "2025-03-03" not in result.stderr


def test_import_of_a_relation_whose_id_is_taken_skips_it(store: Store) -> None:
    theirs = store.relate("billing", "uses", "postgres", namespace="other")
    lines = [
        json.dumps({"type": "relation", "id": theirs.id, "subject": "a", "predicate": "b",
                    "object": "c"}),
        json.dumps({"type": "relation", "id": "new-1", "subject": "a", "predicate": "b",
                    "object": "d"}),
    ]  # fmt: skip
    report = import_jsonl(store, lines)
    assert (report.relations, report.skipped, report.errors) == (1, 1, ())
    assert [r.id for r in store.iter_relations()] == ["new-1"]
    assert [r.object for r in store.iter_relations(namespace="other")] == ["postgres"]


# -- full disks, damaged and read-only files ----------------------------------------------


def test_a_full_disk_is_one_error_and_the_store_works_once_there_is_room(
    store: Store, tmp_path: Path
) -> None:
    kept = store.add("stored before the disk filled")
    store.relate("api", "uses", "postgres")
    pages = store.session.conn.execute("PRAGMA page_count").fetchone()[0]
    store.session.conn.execute(f"PRAGMA max_page_count = {pages + 1}")  # as if the disk were full
    big = ["lorem ipsum dolor sit amet " * 40 + str(i) for i in range(500)]
    lines = [json.dumps({"content": text}) for text in big]
    for call in (
        lambda: store.add_many(big),
        lambda: [store.add(text, dedup=False) for text in big],
        lambda: [store.remember(text) for text in big],
        lambda: import_jsonl(store, lines),
        lambda: [store.relate(f"entity {i}", "is", text[:250]) for i, text in enumerate(big)],
    ):
        with pytest.raises(StoreError, match=r"is full .* free some space"):
            call()
        store.search("lorem ipsum")  # reads keep working meanwhile
    assert store.get(kept).memories and store.neighbors("api")
    store.session.conn.execute("PRAGMA max_page_count = 1073741823")  # room again
    added = store.add_many(big[:50])
    assert store.search("lorem ipsum", limit=5).hits and store.get(added).memories
    assert store.remember("one more memory after the disk was freed").id
    assert store.check()["ok"]


def _cli(db: Path, *args: str, **options: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTHON, "-m", "mnemex", "--db", str(db), *args],
        capture_output=True,
        text=True,
        env=python_env(),
        timeout=120,
        **options,
    )


def _one_error_line(done: subprocess.CompletedProcess[str], *words: str) -> None:
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    for word in words:
        assert word in lines[0], lines[0]


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX resource limits")
def test_cli_on_a_disk_that_refuses_writes(tmp_path: Path) -> None:
    """RLIMIT_FSIZE makes every write past the limit fail, as a full disk does."""
    import resource
    import signal

    db = tmp_path / "m.db"
    kept = _cli(db, "add", "stored before the disk filled").stdout.strip()
    source = tmp_path / "big.jsonl"
    source.write_text(
        "\n".join(
            json.dumps({"content": f"memory {i} " + "lorem ipsum " * 40}) for i in range(3000)
        )
    )
    limit = db.stat().st_size + 8192

    def full_disk() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    _one_error_line(_cli(db, "import", str(source), preexec_fn=full_disk), str(db), "free space")
    assert _cli(db, "get", kept).returncode == 0
    assert _cli(db, "import", str(source)).returncode == 0  # room again
    stats = json.loads(_cli(db, "stats", "--json").stdout)
    assert stats["memories"] == 3_001


def _damaged_copy(tmp_path: Path) -> Path:
    """A store whose first page (the header and schema) is intact and a third of the
    rest is garbage."""
    db = tmp_path / "damaged.db"
    with mnemex.open(db, embedder=None) as store:
        store.add_many([f"memory number {i} about deploys" for i in range(3_000)])
    data = bytearray(db.read_bytes())
    size = int.from_bytes(data[16:18], "big")
    noise = random.Random(7)
    for page in range(len(data) // size // 2, len(data) // size, 3):
        data[page * size : (page + 1) * size] = noise.randbytes(size)
    db.write_bytes(bytes(data))
    return db


def test_cli_on_a_damaged_file_is_one_error_line(tmp_path: Path) -> None:
    db = _damaged_copy(tmp_path)
    source = tmp_path / "one.jsonl"
    source.write_text(json.dumps({"content": "x"}) + "\n")
    for args in (
        ("add", "hi"),
        ("search", "deploys"),
        ("import", str(source)),
        ("stats",),
        ("export",),
        ("timeline",),
        ("forget", "nope"),
        ("check",),
        ("reindex",),
    ):
        done = _cli(db, *args)
        assert "Traceback" not in done.stderr, (args, done.stderr)
        if done.returncode:
            # a damaged page names the file; a command that reads no damaged page
            # answers as usual (forgetting an unknown id: "no memory with id")
            unknown = "no memory with id 'nope'" in done.stderr
            _one_error_line(done, *(() if unknown else (str(db),)))


@contextlib.contextmanager
def _read_only(path: Path) -> Iterator[None]:
    """Make a file or folder read-only, for root too (``chattr +i``)."""
    if os.geteuid() != 0:
        mode = path.stat().st_mode
        path.chmod(0o555 if path.is_dir() else 0o444)
        try:
            yield
        finally:
            path.chmod(mode)
        return
    if shutil.which("chattr") is None:
        pytest.skip("running as root without chattr")
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode:
        pytest.skip("chattr +i is not supported here")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permissions")
@pytest.mark.parametrize("what", ["file", "folder"])
def test_cli_on_a_read_only_store_is_one_error_line(tmp_path: Path, what: str) -> None:
    folder = tmp_path / "store"
    folder.mkdir()
    db = folder / "m.db"
    kept = _cli(db, "add", "stored while writable").stdout.strip()
    source = tmp_path / "one.jsonl"
    source.write_text(json.dumps({"content": "imported"}) + "\n")
    with _read_only(db if what == "file" else folder):
        for args in (
            ("add", "hi"),
            ("import", str(source)),
            ("update", kept, "--kind", "fact"),
            ("forget", kept),
            ("relate", "a", "b", "c"),
            ("search", "stored"),
            ("stats",),
        ):
            done = _cli(db, *args)
            if done.returncode:
                _one_error_line(done, str(db), "writable")
    assert _cli(db, "add", "after").returncode == 0
    assert _cli(db, "get", kept).returncode == 0


_MCP_VALUES: list[Any] = [
    None, True, 0, -1, 10**30, 2**63, 1e308, 1.5, "", "m0", "o1", "\x00", "x" * 5_000,
    "0001-01-01T00:00:00+14:00", "10000y", "1700000000", "0999-01-01", "lexical", "rrf",
    [], {}, ["m0"], ["m0", 5], {"a": {"b": [1, 2]}},
]  # fmt: skip


_MCP_TIMES = ["7d", "1700000000", "0999-01-01", *(t for t in HOSTILE_TIMES if isinstance(t, str))]
_MCP_PLAUSIBLE: dict[str, tuple[Any, ...]] = {  # right types, so that the store is reached
    **dict.fromkeys(("content", "query", "task"), ("deploy memory", "memory 1", "x")),
    **dict.fromkeys(("subject", "predicate", "object"), ("api", "uses", "postgres")),
    **dict.fromkeys(("since", "until", "start", "end", "created_at"), tuple(_MCP_TIMES)),
    **dict.fromkeys(("around", "source_memory"), ("m0", "o1", "nope")),
    "ids": (["m0"], ["o1", "m1"], ["nope"]),
    **dict.fromkeys(("limit", "before", "after"), (1, 5, 50)),
    "budget_tokens": (50, 500),
    **dict.fromkeys(("kinds", "tags"), (["fact"], ["t", "x"])),
    "mode": ("lexical", "hybrid"),
    "confidence": (0.5, 1.0),
    "metadata": ({"k": 1}, _nested(64), _nested(65), _nested(200)),
}


def _mcp_value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if roll < 0.6 or depth > 2:
        return rng.choice([*_MCP_VALUES, rng.randint(-(10**6), 10**6), "".join(
            chr(rng.randint(1, 0x2FFF)) for _ in range(rng.randint(0, 8))
        )])  # fmt: skip
    if roll < 0.8:
        return [_mcp_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {str(_mcp_value(rng, depth + 1))[:5]: _mcp_value(rng, depth + 1) for _ in range(2)}


@pytest.mark.anyio
async def test_fuzzed_mcp_calls_answer_with_a_message(tmp_path: Path) -> None:
    """Every tool, arbitrary arguments: a result, or an error result that says what is
    wrong (never the SDK's bare "Error executing tool"); the server keeps answering."""
    db = tmp_path / "m.db"
    with mnemex.open(db, namespace="agent", embedder=None) as store:
        for i in range(3):
            store.add(f"memory {i} about deploys", id=f"m{i}")
        store.add("another namespace's memory", id="o1", namespace="other")
    rng = random.Random(15)
    async with Client(build_server(load_settings(db, namespace="agent"), embedder=None)) as client:
        tools = {t.name: list(t.input_schema.get("properties", {})) for t in
                 (await client.list_tools()).tools}  # fmt: skip
        for _ in range(300):
            name = rng.choice(sorted(tools))
            arguments = {
                p: rng.choice(_MCP_PLAUSIBLE[p])
                if p in _MCP_PLAUSIBLE and rng.random() < 0.8
                else _mcp_value(rng)
                for p in tools[name]
                if rng.random() < 0.6
            }
            result = await client.call_tool(name, arguments)
            if result.is_error:
                text = result.content[0].text  # type: ignore[union-attr]
                assert text.startswith(f"Error executing tool {name}: "), (arguments, text)
        status = await client.call_tool("memory_stats", {})
        assert not status.is_error
    with mnemex.open(db, namespace="other", embedder=None) as store:
        assert store.get("o1").memories[0].content == "another namespace's memory"


def test_fuzzed_cli_commands_never_raise(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every command but the long-running ones, with arbitrary arguments and options:
    an exit status and a message, never an exception."""
    monkeypatch.chdir(tmp_path)  # export writes files named by its arguments
    db = tmp_path / "cli.db"
    with mnemex.open(db, embedder=None) as store:
        for i in range(3):
            store.add(f"memory {i} about deploys", id=f"m{i}")
        store.add("another namespace's memory", id="o1", namespace="other")
    values = [
        "m0", "o1", "x", "", "-", "7d", "0999-01-01", "1700000000", *(
            t for t in HOSTILE_TIMES if isinstance(t, str) and len(t) < 100
        ), "1e400", "-1", "0", "9" * 30, "nan", "a,b", "k=v", "=", "\udcff", "lexical",
        "rrf", "0.5,0.5", "1,-1", "x" * 3_000, "NEAR(a b)", '"', "chars",
        str(tmp_path / "missing.jsonl"),
    ]  # fmt: skip
    commands = {
        name: [(p.opts[0], p.is_flag) for p in command.params if isinstance(p, click.Option)]
        for name, command in cli.commands.items()  # type: ignore[attr-defined]
        if name not in ("mcp", "watch", "eval", "sync", "serve", "ui")  # long-running or slow
    }
    rng = random.Random(15)
    runner = CliRunner()
    for _ in range(600):
        name = rng.choice(sorted(commands))
        args = [name, *(rng.choice(values) for _ in range(rng.randint(0, 2)))]
        for option, flag in commands[name]:
            if rng.random() < 0.3:
                args += [option] if flag else [option, rng.choice(values)]
        result = runner.invoke(cli, ["--db", str(db), *args], input=rng.choice(["", "text\n"]))
        assert result.exception is None or isinstance(result.exception, SystemExit), (
            args,
            result.exception,
        )
    assert runner.invoke(cli, ["--db", str(db), "export", ""]).stderr.startswith(
        "error: FILE is empty"
    )


def test_extreme_years_with_vectors(vector_store: Store) -> None:
    first = vector_store.add("deploy of year one", created_at="0001-01-01T00:00:00Z")
    last = vector_store.add("deploy of the last year", created_at="9999-12-31T23:59:59.999Z")
    found = vector_store.search("deploy", mode="hybrid")
    assert {h.id for h in found.hits} == {first, last} and found.mode_used == "hybrid"
    assert [
        h.id for h in vector_store.search("deploy", mode="vector", until="1000-01-01").hits
    ] == [first]
    assert [e.id for e in vector_store.timeline()] == [last, first]
    assert vector_store.recall("deploy").ids
