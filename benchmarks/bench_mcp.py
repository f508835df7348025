"""MCP tools: response size on the sample memories, memory_search latency over stdio at 100k.

    python benchmarks/bench_mcp.py [--data DIR] [--size 100000] [--queries 300] [--no-hybrid]

Response size: every tool called through the SDK's in-memory client on the
bundled sample (src/mnemex/data/sample_memories.jsonl, 80 memories and 8 relations; hybrid
with the local model when mnemex[embed] is installed). Tokens are those of
the text an agent reads (the result's JSON): ``len / 4``, as mnemex counts
them, and the local model's WordPiece tokens. The tool list itself (names,
descriptions, input and output schemas, the server's instructions) is what an
agent pays once per session.

Latency: a real ``mnemex mcp`` subprocess driven by the SDK's stdio client,
round trip of ``memory_search`` (default limit 6, snippets, relations) over a
store of ``--size`` memories, lexical-only and hybrid with the local model
(query embedding included). Baseline, alternating with the MCP calls query
by query in the same run: ``Store.search`` with the same arguments on the
same file, in-process.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters

import mnemex
from common import (
    ROOT,
    add_texts,
    build_sqlite,
    data_dir,
    machine,
    memories,
    parser,
    percentiles,
    publish,
    queries,
    scale_corpus,
)
from mnemex.config import load_settings
from mnemex.mcp.server import build_server
from mnemex.transfer import import_jsonl

SAMPLE = ROOT / "src" / "mnemex" / "data" / "sample_memories.jsonl"
SEARCHES = [
    "why were invoice PDFs slow?",
    "how do users sign in now?",
    "reconciliation bug with refunds",
    "which database and queue do we run?",
    "what breaks a fresh dev setup?",
    "deploy to production checklist",
]
TASKS = [
    "fix the slow invoice PDF endpoint",
    "add a new Alembic migration for the ledger",
    "rotate the Stripe webhook secret",
]
RELATIONS = [
    ("ledgerly", "runs_on", "PostgreSQL 16"),
    ("invoice PDFs", "rendered_by", "WeasyPrint"),
    ("nightly reconciliation", "compares", "Stripe payouts"),
]


def chars(text: str) -> int:
    return math.ceil(len(text) / 4)


def wordpiece() -> Callable[[str], int] | None:
    try:
        from mnemex.search.recall import count_wordpiece

        count_wordpiece("probe")
        return count_wordpiece
    except mnemex.MissingExtra:
        return None


async def response_sizes(db: Path) -> dict[str, Any]:
    """Tokens of each tool's text result on the sample memories."""
    calls: dict[str, list[tuple[str, str, int]]] = {}  # tool -> (text, its items' JSON, count)
    async with Client(build_server(load_settings(db))) as client:

        async def run(tool: str, items: str | None = None, **arguments: Any) -> dict[str, Any]:
            result = await client.call_tool(tool, arguments)
            text = result.content[0].text  # type: ignore[union-attr]
            assert not result.is_error, text
            data: dict[str, Any] = json.loads(text)
            listed = data[items] if items else []
            compact = ",".join(
                json.dumps(i, ensure_ascii=False, separators=(",", ":")) for i in listed
            )
            calls.setdefault(tool, []).append((text, compact, len(listed)))
            return data

        listed = await client.list_tools()
        tool_list = json.dumps(
            {
                "instructions": client.instructions,
                "tools": [
                    t.model_dump(mode="json", by_alias=True, exclude_none=True)
                    for t in listed.tools
                ],
            },
            separators=(",", ":"),
        )
        await run("memory_stats")
        for subject, predicate, obj in RELATIONS:
            await run("memory_relate", subject=subject, predicate=predicate, object=obj)
        first_hits = []
        for query in SEARCHES:
            found = await run("memory_search", "hits", query=query)
            first_hits.append(found["hits"][0]["id"])
        await run("memory_timeline", "entries")
        for anchor in first_hits[:3]:
            await run("memory_timeline", "entries", around=anchor, before=3, after=3)
        for ident in first_hits:
            await run("memory_get", "memories", ids=[ident])
        for task in TASKS:
            await run("memory_recall", task=task)
        added = []
        for text in (
            "The staging database is refreshed from production every Sunday at 03:00 UTC",
            "Invoice emails go out through Postmark; the template lives in billing/emails",
        ):
            added.append((await run("memory_add", content=text, kind="fact"))["id"])
        await run("memory_forget", ids=added[:1])
    outputs = json.dumps([t.output_schema for t in listed.tools], separators=(",", ":"))
    return {"calls": calls, "tool_list": tool_list, "output_schemas": outputs}


async def paired_latency(db: Path, qs: list[str], embedder: str) -> tuple[list[float], list[float]]:
    """Per query, ``Store.search`` in this process and then ``memory_search`` over stdio.

    Alternating the two, query by query, gives both the same share of a shared
    machine's load.
    """
    env = dict(os.environ) | {"MNEMEX_EMBEDDER": embedder, "PYTHONPATH": str(ROOT / "src")}
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "mnemex", "--db", str(db), "-n", "default", "mcp"],
        env=env,
    )
    over: list[float] = []
    base: list[float] = []
    with mnemex.open(db, embedder=embedder) as store:
        async with Client(params) as client:
            for query in qs[:30]:  # warm up: the model, the vector matrix, SQLite's cache
                store.search(query)
                await client.call_tool("memory_search", {"query": query})
            for query in qs:
                started = time.perf_counter()
                store.search(query)
                base.append((time.perf_counter() - started) * 1000)
                started = time.perf_counter()
                result = await client.call_tool("memory_search", {"query": query})
                over.append((time.perf_counter() - started) * 1000)
                assert not result.is_error
    return over, base


def latency_row(name: str, db: Path, qs: list[str], embedder: str) -> dict[str, Any]:
    load = os.getloadavg()[0]
    over_ms, base_ms = anyio.run(paired_latency, db, qs, embedder)
    over, base = percentiles(over_ms), percentiles(base_ms)
    load = max(load, os.getloadavg()[0])
    print(
        f"{name}: memory_search over stdio p50 {over['p50']:.2f} ms, p95 {over['p95']:.2f} ms; "
        f"Store.search in-process p50 {base['p50']:.2f} ms, p95 {base['p95']:.2f} ms",
        flush=True,
    )
    return {"name": name, "mcp": over, "base": base, "load": load}


def main() -> None:
    arguments = parser(__doc__)
    arguments.add_argument("--size", type=int, default=100_000)
    arguments.add_argument("--queries", type=int, default=300)
    arguments.add_argument("--no-hybrid", action="store_true", help="lexical-only latency")
    args = arguments.parse_args()
    folder = data_dir(args.data)
    count = wordpiece()
    with tempfile.TemporaryDirectory(prefix="mnemex-bench-") as tmp_name:
        tmp = Path(tmp_name)
        sample_db = tmp / "sample.db"
        with mnemex.open(sample_db) as store, SAMPLE.open("rb") as sample:
            imported = import_jsonl(store, sample, strict=True)
            sample_memories, sample_relations = store.count(), store.stats().relations
            sample_model = store.embedder.model_id if store.embedder else "none (lexical)"
        assert not imported.errors, imported.errors
        sizes = anyio.run(response_sizes, sample_db)
        size_rows = []
        for tool, made in sizes["calls"].items():
            texts = [text for text, _, _ in made]
            items = sum(n for _, _, n in made)
            row = {
                "tool": tool,
                "calls": len(made),
                "chars": sum(map(chars, texts)) / len(texts),
                "max": max(map(chars, texts)),
                "wordpiece": sum(map(count, texts)) / len(texts) if count else None,
                "per_item": len("".join(c for _, c, _ in made)) / 4 / items if items else None,
            }
            size_rows.append(row)
            print(
                f"{tool}: {row['chars']:.0f} tokens (len/4) per response, max {row['max']}",
                flush=True,
            )
        tool_list = sizes["tool_list"]
        print(f"tools/list: {chars(tool_list)} tokens (len/4)", flush=True)

        texts = memories(folder, args.size)
        qs = queries(folder)[: args.queries]
        lexical_db = tmp / "lexical.db"
        with mnemex.open(lexical_db, embedder=None) as store:
            add_texts(store, texts)
        latency = [latency_row("lexical", lexical_db, qs, "none")]
        if not args.no_hybrid:  # the local model's vectors of the same texts (bench_hybrid's)
            from mnemex.embed.local import LocalEmbedder

            _, vectors, _ = scale_corpus(folder, args.size)
            build_sqlite(tmp / "hybrid.db", texts, vectors, LocalEmbedder().model_id)
            latency.append(latency_row("hybrid", tmp / "hybrid.db", qs, "local"))

    lines = [
        "## MCP tools: response size and latency (`benchmarks/bench_mcp.py`)",
        "",
        f"Machine: {machine()}",
        "",
        f"Response size: each tool through the SDK's in-memory client on the bundled sample "
        f"({sample_memories} memories and {sample_relations} relations, embedder "
        f"{sample_model}), {len(SEARCHES)} searches and {len(TASKS)} recall tasks at the "
        "defaults (search limit 6, timeline limit 20, recall budget 500 tokens). Tokens of the "
        "JSON text an agent reads: len/4 (as mnemex counts) and WordPiece (the local model's "
        "tokenizer).",
        "",
        "| tool | calls | tokens per response (len/4) | WordPiece | largest | per item |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    item_names = {"memory_search": "hit", "memory_timeline": "entry", "memory_get": "memory"}
    for row in size_rows:
        per = (
            f"{row['per_item']:.0f} per {item_names.get(row['tool'], 'item')}"
            if row["per_item"]
            else "-"
        )
        wp = f"{row['wordpiece']:.0f}" if row["wordpiece"] is not None else "-"
        lines.append(
            f"| `{row['tool']}` | {row['calls']} | {row['chars']:.0f} | {wp} | {row['max']} | {per} |"
        )
    lines += [
        "",
        f"The tool list ({len(json.loads(tool_list)['tools'])} tools: names, descriptions, input and output schemas, annotations) "
        f"is {chars(tool_list):,} tokens (len/4), {chars(sizes['output_schemas']):,} of them output "
        "schemas (which clients need not show the model), paid once per session.",
        "",
        f"Latency: `memory_search` through a real `mnemex mcp` subprocess over stdio (the SDK's "
        f"stdio client), {args.size:,} memories (SciFact sentences and LoCoMo turns, as in "
        f"`bench_hybrid.py`), {len(qs)} queries of 5-10 words, after 30 warm-up calls; "
        "default arguments (limit 6, snippets, up to 5 relations). Baseline: `Store.search` with "
        "the same arguments on the same file, in-process, alternating with the MCP calls query by "
        "query. Hybrid includes embedding the query with the local model in both. The MCP "
        "figure is the whole round trip: JSON-RPC over the pipes, the server's dispatch and "
        "result conversion, and the SDK client validating each structured result against the "
        "tool's output schema. *Load average*: the machine's 1-minute load average (this benchmark's own two processes included) "
        "before or after the run, whichever was higher.",
        "",
        "| mode | MCP over stdio p50 | p95 | `Store.search` in-process p50 | p95 | MCP overhead at p50 | load average |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in latency:
        mcp, base = row["mcp"], row["base"]
        lines.append(
            f"| {row['name']} | {mcp['p50']:.2f} ms | {mcp['p95']:.2f} ms | {base['p50']:.2f} ms | "
            f"{base['p95']:.2f} ms | +{mcp['p50'] - base['p50']:.2f} ms ({mcp['p50'] / base['p50']:.2f}×) | "
            f"{row['load']:.1f} |"
        )
    publish("bench_mcp", "\n".join(lines), args.no_write)


if __name__ == "__main__":
    main()
