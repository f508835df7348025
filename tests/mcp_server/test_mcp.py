"""The MCP server: every tool through the SDK's in-memory client, a real `mnemex mcp` over
stdio, and streamable HTTP on 127.0.0.1 with a bearer token."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from click.testing import CliRunner
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

import mnemex
from mnemex.cli import cli
from mnemex.config import load_settings
from mnemex.mcp import transport
from mnemex.mcp.server import MAX_IDS, MAX_TEXT_CHARS, build_server
from mnemex.store import Store
from tests.conftest import PYTHON, FakeEmbedder, python_env
from tests.pg_fixtures import both_engines

NAMESPACE = "agent"
TOOLS = {
    "memory_search",
    "memory_timeline",
    "memory_get",
    "memory_recall",
    "memory_add",
    "memory_update",
    "memory_forget",
    "memory_relate",
    "memory_stats",
}
MEMORIES = [
    {
        "id": "m-pg",
        "content": "We chose PostgreSQL 16 for the billing service after comparing it with MySQL",
        "kind": "decision",
        "tags": ["db", "billing"],
        "created_at": "2026-01-01T09:00:00Z",
    },
    {
        "id": "m-pdf",
        "content": "Invoice PDFs render slowly because WeasyPrint embeds every CJK font "
        + "on each render;" * 40,
        "kind": "gotcha",
        "tags": ["pdf", "perf"],
        "created_at": "2026-01-02T09:00:00Z",
    },
    {
        "id": "m-redis",
        "content": "Redis evicts sessions under memory pressure; raise maxmemory before launches",
        "kind": "observation",
        "tags": ["redis"],
        "created_at": "2026-01-03T09:00:00Z",
    },
    {
        "id": "m-deploy",
        "content": "Deploys to Fly.io need FLY_API_TOKEN set in the CI secrets",
        "kind": "fact",
        "tags": ["deploy", "ci"],
        "created_at": "2026-01-04T09:00:00Z",
    },
]
SECRET = "The other team's billing database password rotates every Friday"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def db(store_place: Callable[[str], Any], engine: str) -> Any:
    """A store with memories in the server's namespace and one in another namespace (a
    file, or a PostgreSQL URL in the tests marked ``both_engines``)."""
    path = store_place("mcp.db")
    with mnemex.open(path, namespace=NAMESPACE, embedder=None) as store:
        store.add_many(MEMORIES)
        store.add(SECRET, id="other-1", kind="decision", tags=["db", "billing"], namespace="other")
        if engine == "sqlite":  # no relations on PostgreSQL yet
            store.relate("other-team", "owns", "billing database", namespace="other")
    return path


@pytest.fixture
async def client(db: Path) -> AsyncIterator[Client]:
    server = build_server(load_settings(db, namespace=NAMESPACE), embedder=None)
    async with Client(server) as connected:
        yield connected


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """Call a tool that must succeed; its structured result, checked against its text."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, _text(result)
    assert result.structured_content is not None
    assert json.loads(_text(result)) == result.structured_content
    return result.structured_content


async def refused(client: Client, tool: str, arguments: dict[str, Any], *words: str) -> str:
    """Call a tool that must fail with an error result naming ``words``; the server still answers."""
    result = await client.call_tool(tool, arguments)
    message = _text(result)
    assert result.is_error, message
    assert message.startswith(f"Error executing tool {tool}: "), message
    for word in words:
        assert word in message, message
    status = await call(client, "memory_stats")
    assert status["namespace"] == NAMESPACE
    return message


def _text(result: CallToolResult) -> str:
    assert len(result.content) == 1
    block = result.content[0]
    assert block.type == "text"
    return block.text


def tokens(result: dict[str, Any]) -> int:
    return len(json.dumps(result, ensure_ascii=False, separators=(",", ":"))) // 4


# -- the tools, in-memory ---------------------------------------------------------------


@pytest.mark.anyio
async def test_tools_teach_progressive_disclosure(client: Client) -> None:
    listed = (await client.list_tools()).tools
    assert {t.name for t in listed} == TOOLS
    by_name = {t.name: t for t in listed}
    for tool in listed:
        assert tool.output_schema is not None, tool.name
        assert tool.input_schema["type"] == "object"
        assert "namespace" not in tool.input_schema["properties"], tool.name
        assert tool.description and not tool.description.startswith(" ")
    for first in ("memory_search", "memory_timeline"):
        assert "memory_get" in (by_name[first].description or "")
    assert "memory_search" in (by_name["memory_get"].description or "")
    for name in ("memory_search", "memory_timeline", "memory_get", "memory_recall"):
        hints = by_name[name].annotations
        assert hints is not None and hints.read_only_hint is True
    forget_hints = by_name["memory_forget"].annotations
    assert forget_hints is not None and forget_hints.destructive_hint is True


@pytest.mark.anyio
async def test_descriptions_read_as_an_agent_reads_them(client: Client) -> None:
    listed = (await client.list_tools()).tools
    for tool in listed:
        text = tool.description or ""
        assert "\n" not in text.replace("\n\n", ""), (tool.name, text)  # no break mid-sentence
        described = {
            name: prop.get("description", "")
            for name, prop in tool.input_schema["properties"].items()
        }
        for name, said in described.items():
            assert said, (tool.name, name)
            others = [n for n, d in described.items() if d == said and n != name]
            assert not others, (tool.name, name, others)  # since and until say different things
        words = (text + " ".join(described.values())).lower()
        for jargon in ("arm", "come apart", "null"):
            assert f" {jargon}" not in words, (tool.name, jargon)
    search = next(t for t in listed if t.name == "memory_search").input_schema["properties"]
    assert "at or after" in search["since"]["description"]
    assert "before" in search["until"]["description"]


@pytest.mark.anyio
async def test_the_tool_list_is_small(client: Client) -> None:
    listed = (await client.list_tools()).tools
    tools = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in listed]
    whole = json.dumps({"instructions": client.instructions, "tools": tools}, separators=(",", ":"))
    outputs = json.dumps([t["outputSchema"] for t in tools], separators=(",", ":"))
    # Output schemas are for clients that validate results (agents are not shown them):
    # types and required fields only.
    for word in ('"description"', '"title"', '"$defs"', '"$ref"', '"null"'):
        assert word not in outputs, word
    inputs = json.dumps([t["inputSchema"] for t in tools])
    assert '"null"' not in inputs and '"title"' not in inputs
    # 3,283 tokens (len/4) for eight tools, 1,186 of them output schemas, before they were cut.
    assert len(whole) // 4 < 3_150, len(whole) // 4
    assert len(outputs) // 4 < 950, len(outputs) // 4


@both_engines
@pytest.mark.anyio
async def test_search(client: Client) -> None:
    found = await call(client, "memory_search", query="which database did we pick for billing?")
    assert found["mode_used"] == "lexical"
    hit = found["hits"][0]
    assert hit["id"] == "m-pg"
    assert set(hit) == {"id", "score", "snippet", "kind", "tags", "created_at"}
    assert "**billing**" in hit["snippet"]
    assert hit["kind"] == "decision" and hit["tags"] == ["db", "billing"]
    assert hit["created_at"] == "2026-01-01T09:00:00Z"
    assert 0 < hit["score"] <= 1
    assert found["relations"] == []
    assert "notes" not in found  # empty optional fields are left out
    long = await call(client, "memory_search", query="WeasyPrint CJK font render", limit=1)
    assert [h["id"] for h in long["hits"]] == ["m-pdf"]
    assert len(long["hits"][0]["snippet"]) <= 300
    assert tokens(long) <= 100  # one hit, however long the memory
    filtered = await call(
        client,
        "memory_search",
        query="billing database deploys",
        kinds=["fact"],
        since="2026-01-04",
    )
    assert [h["id"] for h in filtered["hits"]] == ["m-deploy"]
    epoch = await call(
        client, "memory_search", query="billing database deploys", since="1767484800"
    )  # 2026-01-04T00:00:00Z in epoch seconds
    assert [h["id"] for h in epoch["hits"]] == ["m-deploy"]
    tagged = await call(client, "memory_search", query="sessions", tags=["redis"], mode="lexical")
    assert [h["id"] for h in tagged["hits"]] == ["m-redis"]


@pytest.mark.anyio
async def test_search_refuses_bad_input(client: Client) -> None:
    await refused(client, "memory_search", {"query": ""}, "query is empty", "memory_timeline")
    await refused(client, "memory_search", {"query": "   \n"}, "query is empty")
    await refused(client, "memory_search", {}, "query: Field required")
    await refused(client, "memory_search", {"query": 42}, "query:", "valid string")
    await refused(client, "memory_search", {"query": "x", "limit": "many"}, "limit:", "integer")
    await refused(client, "memory_search", {"query": "x", "limit": 5000}, "limit:", "50")
    await refused(client, "memory_search", {"query": "x", "kinds": "decision"}, "kinds:", "list")
    await refused(client, "memory_search", {"query": "x", "mode": "fuzzy"}, "mode:", "'lexical'")
    await refused(client, "memory_search", {"query": "x", "since": "last spring"}, "since")
    huge = "billing " * (MAX_TEXT_CHARS // 4)
    message = await refused(client, "memory_search", {"query": huge}, "query:", "4000 characters")
    assert len(message) < 300  # the payload is not echoed back
    await refused(
        client,
        "memory_search",
        {"query": "x", "namespace": "other"},
        "unknown argument(s) namespace",
    )


@pytest.mark.anyio
async def test_timeline(client: Client) -> None:
    latest = await call(client, "memory_timeline", limit=2)
    assert [e["id"] for e in latest["entries"]] == ["m-deploy", "m-redis"]
    entry = latest["entries"][1]
    assert set(entry) == {"id", "created_at", "kind", "tags", "summary"}
    window = await call(client, "memory_timeline", start="2026-01-02", end="2026-01-04")
    assert [e["id"] for e in window["entries"]] == ["m-redis", "m-pdf"]
    pdf = (await call(client, "memory_timeline", kinds=["gotcha"]))["entries"][0]
    assert len(pdf["summary"]) <= 100 and pdf["summary"].endswith("…")
    around = await call(client, "memory_timeline", around="m-pdf", before=1, after=1)
    assert [e["id"] for e in around["entries"]] == ["m-redis", "m-pdf", "m-pg"]
    await refused(client, "memory_timeline", {"around": "nope"}, "no memory with id 'nope'")
    await refused(client, "memory_timeline", {"limit": 0}, "limit:")
    await refused(client, "memory_timeline", {"around": "m-pdf", "before": -1}, "before:")
    await refused(client, "memory_timeline", {"start": "soon"}, "start")


@both_engines
@pytest.mark.anyio
async def test_get(client: Client) -> None:
    got = await call(client, "memory_get", ids=["m-redis", "nope", "m-pg"])
    assert [m["id"] for m in got["memories"]] == ["m-redis", "m-pg"]
    assert got["missing"] == ["nope"]
    memory = got["memories"][1]
    assert memory["content"] == MEMORIES[0]["content"]
    assert memory["kind"] == "decision" and memory["tags"] == ["db", "billing"]
    assert memory["confidence"] == 0.8 and memory["pinned"] is False
    assert memory["created_at"] == "2026-01-01T09:00:00Z"
    full = await call(client, "memory_get", ids=["m-pdf"])
    assert full["memories"][0]["content"] == MEMORIES[1]["content"]  # never cut
    await refused(
        client, "memory_get", {"ids": ["nope", "gone"]}, "'nope', 'gone'", "memory_search"
    )
    await refused(client, "memory_get", {"ids": []}, "ids:")
    await refused(client, "memory_get", {"ids": "m-pg"}, "ids:", "list")
    await refused(client, "memory_get", {"ids": [1, 2]}, "ids.0:")
    many = [f"id-{i}" for i in range(MAX_IDS + 1)]
    await refused(client, "memory_get", {"ids": many}, "ids:", f"at most {MAX_IDS} items")


@both_engines
@pytest.mark.anyio
async def test_recall(client: Client) -> None:
    recalled = await call(
        client, "memory_recall", task="migrate the billing database", budget_tokens=60
    )
    assert recalled["markdown"].startswith("## Relevant Memories\n")
    assert recalled["ids"][0] == "m-pg"
    assert "- [decision] We chose PostgreSQL 16" in recalled["markdown"]
    assert 0 < recalled["tokens"] <= 60 and recalled["budget_tokens"] == 60
    one = await call(client, "memory_recall", task="billing database", max_memories=1)
    assert len(one["ids"]) == 1
    await refused(client, "memory_recall", {"task": " "}, "task is empty")
    await refused(client, "memory_recall", {"task": "x", "budget_tokens": 0}, "budget_tokens:")
    await refused(client, "memory_recall", {"task": "x" * (MAX_TEXT_CHARS + 1)}, "task:")


@both_engines
@pytest.mark.anyio
async def test_add(client: Client) -> None:
    staging = "The staging database is refreshed from production every Sunday night"
    extra = {
        "kind": "fact",
        "tags": ["staging"],
        "confidence": 0.9,
        "metadata": {"ticket": "OPS-12"},
    }
    added = await call(client, "memory_add", content=staging, **extra)
    assert added == {"id": added["id"], "deduplicated": False}
    again = await call(client, "memory_add", content=staging)
    assert again["deduplicated"] is True and again["id"] == added["id"]
    assert again["by"] == "exact" and again["similarity"] == 1.0
    stored = (await call(client, "memory_get", ids=[added["id"]]))["memories"][0]
    assert stored["metadata"]["ticket"] == "OPS-12" and stored["confidence"] == 0.9
    found = await call(client, "memory_search", query="when is staging refreshed?")
    assert found["hits"][0]["id"] == added["id"]
    await refused(client, "memory_add", {"content": ""}, "content is empty")
    await refused(client, "memory_add", {"content": "x" * 70_000}, "over the limit of 65,536 bytes")
    await refused(client, "memory_add", {"content": "x", "confidence": 2}, "confidence:")
    await refused(client, "memory_add", {"content": "x", "tags": "a,b"}, "tags:")
    await refused(client, "memory_add", {"content": "x", "created_at": "whenever"}, "created_at")


@pytest.mark.anyio
async def test_update(client: Client) -> None:
    updated = await call(
        client, "memory_update", id="m-redis", confidence=0.95, pinned=True, tags=["redis", "ops"]
    )
    assert set(updated) == {"id", "tags", "confidence", "pinned", "updated_at"}
    assert (updated["id"], updated["tags"], updated["confidence"], updated["pinned"]) == (
        "m-redis",
        ["redis", "ops"],
        0.95,
        True,
    )
    stored = (await call(client, "memory_get", ids=["m-redis"]))["memories"][0]
    assert stored["content"] == MEMORIES[2]["content"]  # content and id stay
    assert (stored["tags"], stored["confidence"], stored["pinned"]) == (
        ["redis", "ops"],
        0.95,
        True,
    )
    assert stored["updated_at"] == updated["updated_at"] != stored["created_at"]
    found = await call(client, "memory_search", query="sessions", tags=["ops"])
    assert [h["id"] for h in found["hits"]] == ["m-redis"]
    only_pin = await call(client, "memory_update", id="m-redis", pinned=False)
    assert (only_pin["pinned"], only_pin["confidence"], only_pin["tags"]) == (
        False,
        0.95,
        ["redis", "ops"],
    )  # what is not given is kept
    cleared = await call(client, "memory_update", id="m-redis", tags=[])
    assert cleared["tags"] == []
    await refused(client, "memory_update", {"id": "m-redis"}, "nothing to change")
    await refused(
        client, "memory_update", {"id": "nope", "pinned": True}, "no memory with id 'nope'"
    )
    await refused(client, "memory_update", {"id": "m-pg", "confidence": 1.5}, "confidence:")
    await refused(client, "memory_update", {"id": "m-pg", "tags": "a,b"}, "tags:")
    await refused(
        client,
        "memory_update",
        {"id": "m-pg", "content": "rewritten"},
        "unknown argument(s) content",
    )
    untouched = (await call(client, "memory_get", ids=["m-pg"]))["memories"][0]
    assert untouched["confidence"] == 0.8 and untouched["tags"] == ["db", "billing"]


@both_engines
@pytest.mark.anyio
async def test_forget(client: Client) -> None:
    forgotten = await call(client, "memory_forget", ids=["m-redis", "nope"])
    assert forgotten == {"forgotten": ["m-redis"], "missing": ["nope"]}
    assert (await call(client, "memory_get", ids=["m-redis", "m-pg"]))["missing"] == ["m-redis"]
    await refused(client, "memory_forget", {"ids": ["m-redis"]}, "no memory with id 'm-redis'")
    await refused(client, "memory_forget", {"ids": None}, "ids:")


@pytest.mark.anyio
async def test_relate(client: Client) -> None:
    related = await call(
        client,
        "memory_relate",
        subject="billing-service",
        predicate="depends on",
        object="PostgreSQL 16",
        confidence=0.9,
        source_memory="m-pg",
    )
    relation = related["relation"]
    assert relation["predicate"] == "depends_on" and relation["source_memory"] == "m-pg"
    again = await call(
        client,
        "memory_relate",
        subject="Billing-Service",
        predicate="dependsOn",
        object="postgresql 16",
    )
    assert again["relation"]["id"] == relation["id"]  # one relation, not two
    found = await call(client, "memory_search", query="what does billing depend on?")
    assert [r["id"] for r in found["relations"]] == [relation["id"]]
    listed = found["relations"][0]
    assert listed["subject"] == "billing-service" and 0 < listed["score"] <= 1
    assert (await call(client, "memory_stats"))["relations"] == 1
    await refused(
        client,
        "memory_relate",
        {"subject": "a", "predicate": "b", "object": "c", "source_memory": "nope"},
        "no memory with id 'nope'",
    )
    await refused(
        client, "memory_relate", {"subject": " ", "predicate": "b", "object": "c"}, "subject"
    )
    await refused(
        client, "memory_relate", {"subject": "a", "object": "c"}, "predicate: Field required"
    )
    gone = await call(client, "memory_forget", ids=[relation["id"]], relations=True)
    assert gone["forgotten"] == [relation["id"]]
    assert (await call(client, "memory_search", query="billing depends"))["relations"] == []
    await refused(
        client, "memory_forget", {"ids": [relation["id"]], "relations": True}, "no relation with id"
    )


@pytest.mark.anyio
async def test_stats(client: Client) -> None:
    status = await call(client, "memory_stats")
    assert status["namespace"] == NAMESPACE
    assert status["memories"] == len(MEMORIES)
    assert status["kinds"] == {"decision": 1, "fact": 1, "gotcha": 1, "observation": 1}
    assert status["oldest"] == "2026-01-01T09:00:00Z"
    assert status["newest"] == "2026-01-04T09:00:00Z"
    assert status["relations"] == 0
    assert "embedder" not in status and status["vectors"] == 0
    assert tokens(status) < 100
    await refused(client, "memory_stats", {"verbose": True}, "unknown argument(s) verbose")


@pytest.mark.anyio
async def test_the_old_name_memory_status_still_answers_unlisted(client: Client) -> None:
    listed = {tool.name for tool in (await client.list_tools()).tools}
    assert "memory_status" not in listed and "memory_stats" in listed
    old = await call(client, "memory_status")
    assert old == await call(client, "memory_stats")
    assert old["memories"] == len(MEMORIES)
    await refused(client, "memory_stats", {"verbose": True}, "unknown argument(s) verbose")
    result = await client.call_tool("memory_status", {"verbose": True})
    assert result.is_error and "memory_stats takes no arguments" in _text(result)


@pytest.mark.anyio
async def test_unknown_tool(client: Client) -> None:
    result = await client.call_tool("memory_delete_everything", {})
    assert result.is_error and "Unknown tool" in _text(result)
    assert (await call(client, "memory_stats"))["memories"] == len(MEMORIES)


@pytest.mark.anyio
async def test_another_namespace_never_shows(client: Client, db: Path) -> None:
    found = await call(client, "memory_search", query="billing database password rotates Friday")
    assert "other-1" not in {h["id"] for h in found["hits"]}
    assert found["relations"] == []  # the other namespace's relation matches the words
    one = "no memory with id 'other-1' in namespace 'agent'; find ids with memory_search"
    await refused(client, "memory_get", {"ids": ["other-1"]}, one)  # the API's and CLI's wording
    got = await call(client, "memory_get", ids=["m-pg", "other-1"])
    assert got["missing"] == ["other-1"]
    everything = await call(client, "memory_timeline", limit=50)
    assert "other-1" not in {e["id"] for e in everything["entries"]}
    await refused(client, "memory_timeline", {"around": "other-1"}, "no memory with id 'other-1'")
    around = await call(client, "memory_timeline", around="m-pg", before=50, after=50)
    assert "other-1" not in {e["id"] for e in around["entries"]}
    recalled = await call(client, "memory_recall", task="billing database password rotation")
    assert "other-1" not in recalled["ids"] and "Friday" not in recalled["markdown"]
    await refused(client, "memory_forget", {"ids": ["other-1"]}, "no memory with id 'other-1'")
    unknown = await refused(client, "memory_update", {"id": "nope", "pinned": True})
    other = await refused(client, "memory_update", {"id": "other-1", "pinned": True})
    assert other == unknown.replace("'nope'", "'other-1'")  # another namespace's id is unknown
    await refused(
        client,
        "memory_relate",
        {"subject": "a", "predicate": "b", "object": "c", "source_memory": "other-1"},
        "no memory with id 'other-1'",
    )
    status = await call(client, "memory_stats")
    assert status["memories"] == len(MEMORIES) and "other" not in json.dumps(status)
    with mnemex.open(db, namespace="other", embedder=None) as store:
        kept = store.get(["other-1"]).memories[0]
        assert kept.content == SECRET and not kept.pinned  # untouched


@pytest.mark.anyio
async def test_hybrid_search_and_status_with_an_embedder(db: Path) -> None:
    embedder = FakeEmbedder()
    settings = load_settings(db, namespace=NAMESPACE)
    with Store(settings, embedder=embedder) as store:
        store.embed()
    async with Client(build_server(settings, embedder=embedder)) as client:
        found = await call(client, "memory_search", query="PostgreSQL billing")
        assert found["mode_used"] == "hybrid" and found["hits"][0]["id"] == "m-pg"
        lexical = await call(client, "memory_search", query="PostgreSQL billing", mode="lexical")
        assert lexical["mode_used"] == "lexical"
        status = await call(client, "memory_stats")
        assert status["embedder"] == "fake:bow-64"
        assert (status["vectors"], status["pending_vectors"]) == (len(MEMORIES), 0)
        embedder.fail = True
        added = await call(client, "memory_add", content="a memory the model cannot embed today")
        assert "mnemex embed" in added["warning"]
        degraded = await call(client, "memory_search", query="PostgreSQL billing")
        assert degraded["mode_used"] == "lexical" and degraded["notes"]


# -- transports and the CLI -------------------------------------------------------------


@both_engines
@pytest.mark.slow
@pytest.mark.anyio
async def test_real_stdio_subprocess(db: Path) -> None:
    params = StdioServerParameters(
        command=PYTHON,
        args=["-m", "mnemex", "--db", str(db), "--namespace", NAMESPACE, "mcp"],
        env=python_env(),
    )
    async with Client(params) as client:
        assert {t.name for t in (await client.list_tools()).tools} == TOOLS
        added = await call(client, "memory_add", content="Feature flags live in LaunchDarkly")
        found = await call(client, "memory_search", query="where do feature flags live?")
        assert found["hits"][0]["id"] == added["id"]
        got = await call(client, "memory_get", ids=[added["id"]])
        assert got["memories"][0]["content"] == "Feature flags live in LaunchDarkly"
        updated = await call(client, "memory_update", id=added["id"], tags=["flags"], pinned=True)
        assert updated["tags"] == ["flags"] and updated["pinned"] is True
        await refused(client, "memory_search", {"query": ""}, "query is empty")
        await refused(client, "memory_get", {"ids": ["other-1"]}, "no memory with id")
        await refused(client, "memory_update", {"id": "other-1", "pinned": True}, "no memory")
    with mnemex.open(db, namespace=NAMESPACE, embedder=None) as store:
        (saved,) = store.get([added["id"]]).memories  # written to the file, in the namespace
        assert saved.tags == ("flags",) and saved.pinned


def _wait_for_port(process: subprocess.Popen[bytes], port: int, seconds: float = 30) -> None:
    """Return once the server ``process`` accepts connections on ``port``; fail if it exits
    or takes longer than ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                err = b"" if process.stderr is None else process.communicate(timeout=5)[1]
                raise AssertionError(f"server did not start: {err.decode()}") from None
            time.sleep(0.1)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def http_server(db: Path) -> Iterator[tuple[str, str]]:
    """`mnemex mcp --http` on a free port of 127.0.0.1 with a token; yields (url, token)."""
    token = "t0ken-" + "x" * 26
    port = _free_port()
    env = python_env() | {transport.TOKEN_ENV: token}
    process = subprocess.Popen(
        [
            PYTHON,
            "-m",
            "mnemex",
            "--db",
            str(db),
            "-n",
            NAMESPACE,
            "mcp",
            "--http",
            "--port",
            str(port),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        _wait_for_port(process, port)
        yield f"http://127.0.0.1:{port}/mcp", token
    finally:
        process.terminate()
        process.wait(timeout=10)
        assert process.stdout is not None and process.stderr is not None
        assert process.stdout.read() == b""
        assert b"bearer token required" in process.stderr.read()


def _post(url: str, headers: dict[str, str]) -> int:
    request = urllib.request.Request(
        url,
        data=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode(),
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        }
        | headers,
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.slow
@pytest.mark.anyio
async def test_streamable_http_requires_the_token(http_server: tuple[str, str]) -> None:
    url, token = http_server
    assert _post(url, {}) == 401
    assert _post(url, {"Authorization": "Bearer wrong-token-of-some-length"}) == 401
    assert _post(url, {"Authorization": token}) == 401  # no Bearer scheme
    assert _post(url, {"Authorization": f"Bearer {token}"}) != 401
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        found = await call(client, "memory_search", query="billing database")
        assert found["hits"][0]["id"] == "m-pg"
        await refused(client, "memory_get", {"ids": ["other-1"]}, "no memory with id")


def test_remote_bind_needs_a_flag_and_a_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = CliRunner()
    db = str(tmp_path / "remote.db")

    def mcp(*args: str) -> Any:
        return runner.invoke(cli, ["--db", db, "mcp", *args], catch_exceptions=False)

    refused_flag = mcp("--http", "--host", "0.0.0.0")
    assert refused_flag.exit_code == 1
    assert (
        "not a loopback address" in refused_flag.stderr and "--allow-remote" in refused_flag.stderr
    )
    no_token = mcp("--http", "--host", "192.0.2.10", "--allow-remote")
    assert no_token.exit_code == 1 and transport.TOKEN_ENV in no_token.stderr
    monkeypatch.setenv(transport.TOKEN_ENV, "short")
    short = mcp("--http", "--host", "0.0.0.0", "--allow-remote")
    assert short.exit_code == 1 and "at least 16" in short.stderr
    usage = mcp("--host", "0.0.0.0")
    assert usage.exit_code == 2 and "apply to --http" in usage.stderr
    assert not (tmp_path / "remote.db").exists()  # refused before opening anything
    transport.check_bind("0.0.0.0", allow_remote=True, token="s" * 32)
    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.2"):
        assert transport.is_loopback(host)
        transport.check_bind(host, allow_remote=False, token=None)
    for host in ("0.0.0.0", "192.168.1.5", "example.com", "::"):
        assert not transport.is_loopback(host)


def test_a_file_that_is_no_store_fails_before_serving(tmp_path: Path) -> None:
    bad = tmp_path / "bad.db"
    bad.write_text("not a database, " * 100)
    result = CliRunner().invoke(cli, ["--db", str(bad), "mcp"], catch_exceptions=False)
    assert result.exit_code == 1
    assert result.stderr.startswith("error: ") and "not a usable mnemex store" in result.stderr


def test_without_the_extra_the_error_names_it(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['mcp'] = None; from mnemex.cli import main; "
        f"main(['--db', {str(tmp_path / 'x.db')!r}, 'mcp'])"
    )
    out = subprocess.run(
        [PYTHON, "-c", code], capture_output=True, text=True, env=python_env(), timeout=60
    )
    assert out.returncode == 1
    assert "pip install 'mnemex[mcp]'" in out.stderr, out.stderr


def test_importing_mnemex_does_not_import_the_sdk() -> None:
    code = "import sys, mnemex, mnemex.cli, mnemex.mcp; print('mcp' in sys.modules)"
    out = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, env=python_env())
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
    assert os.environ.get(transport.TOKEN_ENV) is None


@pytest.mark.anyio
async def test_workspace_chunks_show_their_place_and_staleness(db: Path, tmp_path: Path) -> None:
    folder = tmp_path / "ws"
    (folder / "memory").mkdir(parents=True)
    (folder / "MEMORY.md").write_text("# Deploys\n\nFly deploys need the ORBIT_TOKEN secret.\n")
    os.utime(folder / "MEMORY.md", (time.time() - 60, time.time() - 60))  # not just written
    settings = load_settings(db, namespace=NAMESPACE, sync_on_search=False)
    with Store(settings, embedder=None) as store:
        store.sync(folder)
    async with Client(build_server(settings, embedder=None)) as client:
        found = await call(client, "memory_search", query="ORBIT_TOKEN")
        assert found["hits"][0]["location"] == "MEMORY.md:1-3"
        assert "stale" not in found
        got = await call(client, "memory_get", ids=[found["hits"][0]["id"]])
        assert got["memories"][0]["location"] == "MEMORY.md:1-3"
        (folder / "memory" / "2026-01-05.md").write_text("ORBIT_TOKEN was rotated today.\n")
        stale = await call(client, "memory_search", query="ORBIT_TOKEN")
        assert stale["stale"] is True and "mnemex sync" in " ".join(stale["notes"])
        block = await call(client, "memory_recall", task="ORBIT_TOKEN")
        assert block["stale"] is True


def _open_session(url: str) -> tuple[int, str | None]:
    """POST an MCP ``initialize``; (HTTP status, the session id the server gave)."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "burst", "version": "0"},
        },
    }
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        },
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()
            return int(response.status), response.headers.get("mcp-session-id")
    except urllib.error.HTTPError as exc:
        return exc.code, None


@pytest.mark.postgres
def test_http_banner_names_a_postgres_store_without_its_password(pg_url: str) -> None:
    from mnemex.engine.postgres.connect import redact

    scheme, _, rest = pg_url.partition("://")
    user, _, place = rest.partition("@")
    password = "s3cret-pw"  # the test server trusts its socket: any password is accepted
    url = f"{scheme}://{user.partition(':')[0]}:{password}@{place}"
    port = _free_port()
    process = subprocess.Popen(
        [PYTHON, "-m", "mnemex", "--db", url, "mcp", "--http", "--port", str(port)],
        env=python_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        _wait_for_port(process, port)
    finally:
        process.terminate()
        process.wait(timeout=10)
    assert process.stderr is not None
    banner = process.stderr.read().decode()
    assert f"(store {redact(url)}, namespace 'default')" in banner
    assert password not in banner


@pytest.mark.slow
def test_http_sessions_are_capped_and_expire(db: Path) -> None:
    """Clients that never end their sessions cannot grow the server: a cap, then idle expiry."""
    port = _free_port()
    env = python_env() | {"MNEMEX_MCP_MAX_SESSIONS": "4", "MNEMEX_MCP_SESSION_IDLE": "1.5"}
    process = subprocess.Popen(
        [PYTHON, "-m", "mnemex", "--db", str(db), "mcp", "--http", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        _wait_for_port(process, port)
        opened = [_open_session(url) for _ in range(10)]
        statuses = [status for status, _ in opened]
        assert statuses[:4] == [200] * 4, statuses
        assert statuses[4:] == [503] * 6, statuses
        assert len({sid for _, sid in opened[:4]}) == 4
        time.sleep(3.0)  # every session has been idle for longer than 1.5 s
        again = [_open_session(url)[0] for _ in range(4)]
        assert again == [200] * 4
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_session_settings_are_checked() -> None:
    from mnemex.config import load_settings
    from mnemex.errors import InvalidInput

    assert load_settings(environ={}).mcp_max_sessions == 100
    with pytest.raises(InvalidInput, match="mcp_max_sessions"):
        load_settings(environ={"MNEMEX_MCP_MAX_SESSIONS": "0"})
    with pytest.raises(InvalidInput, match="mcp_session_idle"):
        load_settings(environ={"MNEMEX_MCP_SESSION_IDLE": "-1"})
